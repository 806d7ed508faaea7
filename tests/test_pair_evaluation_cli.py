"""`python -m consistency_amp.evaluation.pair_evaluation` stopped by SIGTERM (a preemption) through the real command line,
where a notebook cannot send a signal: it exits 143 without a traceback, says how many answers it keeps beside
`--output_file`, and the same command answers only the rest (nbs/53_pair_evaluation.ipynb has the rest)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

COMMAND = [sys.executable, "-m", "consistency_amp.evaluation.pair_evaluation", "--model_name_or_path", "tiny-qwen2",
           "--dataset_name", "pairs.jsonl", "--split", "train", "--batch_size", "1", "--max_new_tokens", "48"]
PAIRS = 40                                                       # 80 calls: seconds to send the signal in, on a busy machine


def environment():
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")


def kept_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def test_sigterm_keeps_the_answers_and_the_same_command_goes_on(tmp_path):
    rows = [dict(prompt=f"Is {a} larger than {a + 1}?", prompt_augmented=f"Is {a + 1} larger than {a}?", relation="opposite",
                 answer_type="boolean") for a in range(PAIRS)]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.json"
    kept = tmp_path / ".out.json.answers.jsonl"                  # kept_answers_file(out)
    proc = subprocess.Popen([*COMMAND, "--output_file", str(out)], cwd=tmp_path, env=environment(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while kept_lines(kept) < 3 and proc.poll() is None and time.monotonic() < deadline: time.sleep(0.02)   # the key, 2 calls
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 143 and "Traceback" not in err, err[-3000:]
    n = int(err.split("stopped; the answers to ")[1].split(f" of {2 * PAIRS} prompts are kept in")[0])
    assert 2 <= n < 2 * PAIRS and not out.exists()
    done = subprocess.run([*COMMAND, "--output_file", str(out)], cwd=tmp_path, env=environment(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"results: {out}" in done.stdout and not kept.exists()
    assert f"{n}/{2 * PAIRS}" in done.stderr                                 # the progress bar starts from the kept answers
    whole = subprocess.run([*COMMAND, "--output_file", str(tmp_path / "whole.json")], cwd=tmp_path, env=environment(),
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    completions = lambda path: [r["completions"] for r in json.loads(path.read_text())["records"]]
    assert completions(out) == completions(tmp_path / "whole.json")
