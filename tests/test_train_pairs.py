"""`python -m consistency_amp.training.train_pairs` through the real command line, where a notebook cannot go: a
signal stops it after the step with a checkpoint and the line that resumes it, the resumed run finishes with no step
logged twice, and `torchrun` runs it in two processes (nbs/46_train_pairs.ipynb has the rest). The GPU out of memory
(raised in a step) ends in one line with this command's flags, and the run resumes from its checkpoint. Each end is
in status.json: interrupted (with the signal), failed (with the line), complete."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def environment():
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")


@pytest.fixture
def text_pairs(tmp_path) -> list[str]:
    "Flags for a run of the tiny text model on hand-made comparison pairs in `tmp_path`."
    rows = [dict(prompt=f"Is {a} larger than {b}?", prompt_augmented=f"Is {b} larger than {a}?", relation="opposite",
                 answer_type="boolean") for a, b in [(7, 3), (2, 9), (5, 4), (1, 8)]]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ["--dataset_name", str(tmp_path / "pairs.jsonl"), "--model_name_or_path", "tiny-qwen2", "--output_dir",
            str(tmp_path / "out"), "--num_generations", "2", "--max_completion_length", "8", "--disable_tqdm", "true"]


def logged_steps(out: Path) -> list[int]:
    log = out / "train_log.jsonl"
    return [json.loads(line)["step"] for line in log.read_text().splitlines()] if log.is_file() else []


def status(out: Path, *keys: str) -> dict:
    "The state, step and `keys` (stopped_by by default) of the run's status.json."
    written = json.loads((out / "status.json").read_text())
    return {k: written.get(k) for k in ("state", "step", *(keys or ("stopped_by",)))}


def test_sigterm_stops_with_a_checkpoint_and_the_printed_command_resumes(text_pairs, tmp_path):
    command = [sys.executable, "-m", "consistency_amp.training.train_pairs", *text_pairs, "--max_steps", "40"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=environment(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not logged_steps(tmp_path / "out") and proc.poll() is None and time.monotonic() < deadline: time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 143, err[-3000:]
    step = logged_steps(tmp_path / "out")[-1]
    assert step < 40 and (tmp_path / "out" / f"checkpoint-{step}").is_dir()
    assert not (tmp_path / "out" / "adapter_config.json").exists()          # no final adapter from a stopped run
    assert status(tmp_path / "out") == dict(state="interrupted", step=step, stopped_by="SIGTERM")
    line = next(l for l in err.splitlines() if l.startswith(f"stopped by SIGTERM at step {step} with a checkpoint"))
    resume = line.split("Resume with: ")[1].split("   (under torchrun")[0]
    assert resume.startswith("python -m consistency_amp.training.train_pairs ") and resume.endswith("--resume_from_checkpoint true")
    args = resume.split(" ", 3)[3].split()
    done = subprocess.run([sys.executable, "-m", "consistency_amp.training.train_pairs", *args], cwd=tmp_path,
                          env=environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert logged_steps(tmp_path / "out") == list(range(1, 41))          # each step once, the stopped one included
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()
    assert status(tmp_path / "out", "adapter") == dict(state="complete", step=40, adapter=str(tmp_path / "out"))
    assert "out: complete, 40 steps" in done.stdout and "evaluate it: python -m consistency_amp.evaluation.pair_evaluation " in done.stdout


def test_ctrl_c_twice_stops_at_once_without_a_traceback_and_says_how_to_go_on(text_pairs, tmp_path):
    "The first Ctrl-C asks for a stop after the step; a second, within that step, stops at once: exit 130, status interrupted."
    slow = [f if f != "8" else "384" for f in text_pairs]          # longer completions: a step long enough to signal twice in
    proc = subprocess.Popen([sys.executable, "-m", "consistency_amp.training.train_pairs", *slow, "--max_steps", "40"],
                            cwd=tmp_path, env=environment(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not logged_steps(tmp_path / "out") and proc.poll() is None and time.monotonic() < deadline: time.sleep(0.05)
    proc.send_signal(signal.SIGINT); time.sleep(0.2); proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert f"stopped by SIGINT (twice: at once) in {tmp_path / 'out'}" in err and "--resume_from_checkpoint true" in err
    assert status(tmp_path / "out")["stopped_by"] == "SIGINT (twice: at once)"
    assert status(tmp_path / "out")["state"] == "interrupted"


def test_two_processes_under_torchrun(text_pairs, tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None: pytest.skip("torchrun is not installed")
    done = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "-m", "consistency_amp.training.train_pairs",
                           *text_pairs, "--max_steps", "2"], cwd=tmp_path, env=environment(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert logged_steps(tmp_path / "out") == [1, 2] and (tmp_path / "out" / "adapter_model.safetensors").is_file()
    assert done.stdout.count("adapter and model card:") == 1                # the main process writes and says so


def test_the_slurm_script_requeues_and_finishes_a_run_of_pairs(text_pairs, tmp_path):
    "configs/slurm/train.sbatch with TRAIN_COMMAND set to this command: SIGUSR1 checkpoints and requeues, the requeued job (the same command, --resume_from_checkpoint true) finishes, and a third start does nothing."
    fake, calls = tmp_path / "bin", tmp_path / "scontrol.calls"
    fake.mkdir()
    (fake / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"); (fake / "scontrol").chmod(0o755)
    job = dict(environment(), TRAIN_COMMAND=f"{sys.executable} -m consistency_amp.training.train_pairs", SLURM_JOB_ID="77",
               PATH=f"{fake}:{os.environ['PATH']}")
    args = ["bash", str(REPO / "configs" / "slurm" / "train.sbatch"), *text_pairs, "--max_steps", "40"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=job, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not logged_steps(tmp_path / "out") and proc.poll() is None and time.monotonic() < deadline: time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)                             # what --signal=B:USR1@300 sends the batch script
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 138 and "stopped by SIGUSR1 at step" in err, err[-3000:]
    assert calls.read_text().split() == ["requeue", "77"] and "requeueing job 77" in out
    for start in ("requeued", "submitted again"):
        done = subprocess.run(args, cwd=tmp_path, env=job, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (start, done.stderr[-3000:])
        assert logged_steps(tmp_path / "out") == list(range(1, 41))
    assert "holds a finished run's adapter: nothing to resume" in done.stdout
    assert calls.read_text().split() == ["requeue", "77"]        # a job that finished does not requeue


def test_out_of_memory_says_what_to_change_and_the_run_resumes(text_pairs, tmp_path, monkeypatch):
    import torch
    from consistency_amp.training import train_pairs
    from consistency_amp.training.trainer import OTGRPOTrainer
    training_step = OTGRPOTrainer.training_step

    def out_of_memory_in_step_3(self, *args, **kwargs):
        if self.state.global_step + 1 == 3: raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB.")
        return training_step(self, *args, **kwargs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(OTGRPOTrainer, "training_step", out_of_memory_in_step_3)
    flags = [*text_pairs, "--max_steps", "4", "--save_steps", "2", "--gradient_checkpointing", "false"]
    with pytest.raises(SystemExit) as stopped: train_pairs.main(flags)
    line = str(stopped.value.code)
    assert line.startswith("python -m consistency_amp.training.train_pairs: error: out of GPU memory: CUDA out of memory."), line
    assert "resumes from checkpoint-2" in line and "--gradient_checkpointing true, and --resume_from_checkpoint true" in line
    assert "A new run (another --output_dir) with fewer --pairs_per_device (now 1), --num_generations (now 2)" in line
    assert status(tmp_path / "out", "error") == dict(state="failed", step=2, error=line.split(": error: ", 1)[1])
    monkeypatch.setattr(OTGRPOTrainer, "training_step", training_step)
    train_pairs.main([*flags, "--resume_from_checkpoint", "true"])
    assert logged_steps(tmp_path / "out") == [1, 2, 3, 4] and (tmp_path / "out" / "adapter_model.safetensors").is_file()
    assert status(tmp_path / "out", "error") == dict(state="complete", step=4, error=None)   # the failure's line is gone
