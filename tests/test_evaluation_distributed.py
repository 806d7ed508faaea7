"""Evaluation sharded over two CPU processes under torchrun gives exactly the results of one process: the same
numbers, the same completions of every example, in the same order (each batch is answered whole by one process)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ARGS = ["--model", "tiny-qwen2.5-vl", "--tasks", "depth,counting", "--sources", "SUNRGBD", "--max_examples", "5",
        "--batch_size", "2", "--consistency_samples", "1", "--examples", "true"]


def _evaluate(tmp: Path, runs: str, launcher: list[str]) -> dict:
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run(launcher + ["-m", "consistency_amp.evaluation.evaluate", *ARGS, "--runs_dir", str(tmp / runs)],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (written,) = (tmp / runs / "base-tiny" / "eval").glob("*.json")
    return json.loads(written.read_text())


def test_two_processes_equal_one(tmp_path):
    one = _evaluate(tmp_path, "one", [sys.executable])
    two = _evaluate(tmp_path, "two", [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                                      "--master_port", "29533"])
    assert [r["n"] for r in one["results"]] == [r["n"] for r in two["results"]] and sum(r["n"] for r in one["results"]) >= 6
    drop = ("load_s", "elapsed_s", "created_at")
    assert [{k: v for k, v in r.items() if k not in drop} for r in one["results"]] == \
           [{k: v for k, v in r.items() if k not in drop} for r in two["results"]]
    assert (one["processes"], two["processes"]) == (1, 2)      # the second was sharded
    assert one["examples"] == two["examples"]                  # every completion, every draw, in the same order


# the evaluation command with its first (task, source) answered, then Ctrl-C in the second, as a job stopped partway
INTERRUPTED = """
import sys
import consistency_amp.evaluation.held_out as ev
answer, groups = ev.answer_examples, []
def stopped_in_the_second_group(group, *args, **kwargs):
    groups.append(group[0].task)
    if len(groups) == 2: raise KeyboardInterrupt
    return answer(group, *args, **kwargs)
ev.answer_examples = stopped_in_the_second_group
from consistency_amp.evaluation.evaluate import cli
sys.exit(cli(sys.argv[1:]))
"""


def test_two_processes_go_on_from_the_groups_one_process_kept(tmp_path):
    "Stopped partway in one process, the evaluation is finished by two: they reuse the stored group together and write the uninterrupted results."
    one = _evaluate(tmp_path, "one", [sys.executable])
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    stopped = subprocess.run([sys.executable, "-c", INTERRUPTED, *ARGS, "--runs_dir", str(tmp_path / "resumed")], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=900)
    assert stopped.returncode == 130 and "the same command goes on from them" in stopped.stderr, stopped.stderr[-3000:]
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29534",
                           "-m", "consistency_amp.evaluation.evaluate", *ARGS, "--runs_dir", str(tmp_path / "resumed")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and done.stdout.count("reused the answers of depth/SUNRGBD") == 1, done.stderr[-3000:]   # said once
    (written,) = (tmp_path / "resumed" / "base-tiny" / "eval").glob("*.json")
    two = json.loads(written.read_text())
    assert (two["processes"], two["reused"]) == (2, ["depth/SUNRGBD"])
    assert two["results"] == one["results"] and two["examples"] == one["examples"]
    assert not list((tmp_path / "resumed" / "base-tiny" / "eval").glob(".partial-*"))
