"""What clusters and people do to a training run, tried on the tiny model through the real command line
(`tests/fault_train.py`: `python -m consistency_amp.training.train` with scripted completions and a slow step).

* SIGTERM (a scheduler's preemption or time limit): the step finishes, a checkpoint of it is saved, the run is
  `interrupted`, one line says how to resume, the exit code is 143; `--resume` then gives the uninterrupted run's
  adapter exactly, and no step is logged twice.
* Ctrl-C once: the same, exit 130. Twice: it stops at once, still `interrupted` and resumable, exit 130, no traceback.
* A second writer on a live run (`--resume`, `--overwrite` or a plain start) is refused naming the holder, and the
  live run is untouched. After SIGKILL the run is `interrupted` at its newest checkpoint, a plain restart suggests
  `--resume`, and the resumed adapter equals the uninterrupted one.
* The Slurm script (`configs/slurm/train.sbatch`): SIGUSR1 before the time limit checkpoints and requeues the job
  (a stand-in `scontrol`), and the requeued job, the same command, finishes the run exactly.
* torchrun with two processes: SIGTERM to one rank stops both at the same step, with no hang.
* Damaged or impossible files: a clear message naming the file and what to do, no traceback.
* The GPU out of memory mid-run: one line with torch's words, the checkpoint it resumes from and the settings to
  change; the run is `failed`, and `--resume` gives the uninterrupted run's adapter exactly.
* A runs folder on a file system without file locks (Lustre without -o flock, NFS without its lock service): refused
  in one line naming the folder, before any run folder exists.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from consistency_amp.training.run_lock import run_is_live
from consistency_amp.training.run_records import read_run
from consistency_amp.training.runs import ADAPTER_WEIGHTS, read_json, read_jsonl

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "tests" / "fault_train.py"
FLAGS = ["--task", "depth", "--steps", "6", "-K", "2", "--pairs_per_device", "1", "--max_completion_length", "16",
         "--learning_rate", "5e-3", "--save_steps", "2"]


def environment(**extra):
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="",
                PYTHONUNBUFFERED="1", **{k: str(v) for k, v in extra.items()})


def start(runs: Path, name: str, *extra: str, delay: float = 0.0, **env) -> subprocess.Popen:
    "The driver training run `name` into `runs`, in the background."
    return subprocess.Popen([sys.executable, str(DRIVER), *FLAGS, "--runs_dir", str(runs), "--run_name", name, *extra],
                            cwd=runs.parent, env=environment(FAULT_STEP_DELAY=delay, **env), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def wait_for_step(run: Path, step: int, proc: subprocess.Popen | None = None, timeout: float = 180) -> None:
    "Until run's train_log.jsonl holds `step` lines (the step is done)."
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = run / "train_log.jsonl"
        if log.is_file() and len(read_jsonl(log)[0]) >= step: return
        if proc is not None and proc.poll() is not None: raise AssertionError(f"training ended early: {finish(proc)}")
        time.sleep(0.1)
    raise AssertionError(f"{run} did not reach step {step} in {timeout} s")


def adapter(run: Path) -> dict:
    from safetensors.torch import load_file
    return load_file(str(run / "adapter" / ADAPTER_WEIGHTS))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("faults") / "runs"


@pytest.fixture(scope="module")
def uninterrupted(runs) -> dict:
    "The adapter of the run trained without a fault."
    runs.mkdir(parents=True, exist_ok=True)
    code, out, err = finish(start(runs, "uninterrupted"))
    assert code == 0, err[-3000:]
    weights = adapter(runs / "uninterrupted")
    assert max(t.abs().max().item() for k, t in weights.items() if "lora_B" in k) > 1e-4   # it learned: not vacuous
    return weights


def assert_resumes_exactly(runs: Path, name: str, uninterrupted: dict, *launch: str) -> None:
    "`--resume` finishes the run: complete, each step logged once, the uninterrupted run's adapter bit for bit."
    proc = subprocess.run([*launch, *FLAGS, "--runs_dir", str(runs), "--run_name", name, "--resume"] if launch else
                          [sys.executable, str(DRIVER), *FLAGS, "--runs_dir", str(runs), "--run_name", name, "--resume"],
                          cwd=runs.parent, env=environment(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_finished_exactly(runs / name, uninterrupted)


def assert_finished_exactly(run: Path, uninterrupted: dict) -> None:
    "The run is complete, each step logged once, with the uninterrupted run's adapter bit for bit."
    assert read_run(run).state == "complete" and [r["step"] for r in read_jsonl(run / "train_log.jsonl")[0]] == list(range(1, 7))
    resumed = adapter(run)
    assert resumed.keys() == uninterrupted.keys()
    for k in resumed: assert (resumed[k] == uninterrupted[k]).all(), k


def assert_interrupted(run: Path, err: str, by: str) -> int:
    "The run says interrupted, by `by`, at a saved checkpoint's step; one resume line and no traceback; that step."
    status = read_json(run / "status.json")
    assert status["state"] == "interrupted" and status["stopped_by"].startswith(by), status
    record = read_run(run)
    assert record.state == "interrupted" and record.live is False
    assert "Traceback" not in err, err[-3000:]
    assert err.count("Resume it with: python -m consistency_amp.training.train") == 1 and "--resume" in err
    return record.resume_step


def test_resume_of_a_complete_run_trains_nothing_and_changes_nothing(runs, uninterrupted):
    "A job requeued after its run ended (the Slurm script's own command, --resume): exit 0, one line, the run as it was."
    run = runs / "uninterrupted"
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".writer.lock"}
    proc = subprocess.run([sys.executable, str(DRIVER), *FLAGS, "--runs_dir", str(runs), "--run_name", "uninterrupted",
                           "--resume"], cwd=runs.parent, env=environment(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "run uninterrupted is complete (step 6): nothing to resume" in proc.stderr, proc.stderr[-3000:]
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".writer.lock"}
    assert after == before                                   # adapter, log, status and params byte for byte
    assert run_is_live(run) is False


def test_a_run_killed_after_its_last_checkpoint_resumes_without_another_step(runs, uninterrupted):
    "Killed between the last step's checkpoint and the final adapter: --resume saves checkpoint-6's adapter, trains no step 7."
    code, _, err = finish(start(runs, "killed_at_the_end", FAULT_KILL_BEFORE_ADAPTER=1))
    run = runs / "killed_at_the_end"
    assert code == -9 and not (run / "adapter").exists(), err[-3000:]
    record = read_run(run)
    assert (record.state, record.resume_step) == ("interrupted", 6)
    assert_resumes_exactly(runs, "killed_at_the_end", uninterrupted)
    assert max(int(p.name.split("-")[1]) for p in (run / "checkpoints").glob("checkpoint-*")) == 6     # none past the end


def test_sigterm_saves_the_step_and_resume_equals_the_uninterrupted_run(runs, uninterrupted):
    proc = start(runs, "sigterm", delay=1.0)
    wait_for_step(runs / "sigterm", 1, proc)
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc)
    assert code == 143, err[-3000:]
    step = assert_interrupted(runs / "sigterm", err, "SIGTERM")
    assert 2 <= step < 6 and (runs / "sigterm" / "checkpoints" / f"checkpoint-{step}").is_dir()
    assert f"stopped by SIGTERM at step {step} with a checkpoint" in err
    assert [r["step"] for r in read_jsonl(runs / "sigterm" / "train_log.jsonl")[0]] == list(range(1, step + 1))
    assert_resumes_exactly(runs, "sigterm", uninterrupted)


def test_ctrl_c_once_stops_after_the_step_twice_at_once(runs, uninterrupted):
    proc = start(runs, "ctrl_c", delay=1.0)
    wait_for_step(runs / "ctrl_c", 1, proc)
    proc.send_signal(signal.SIGINT)
    code, _, err = finish(proc)
    assert code == 130
    step = assert_interrupted(runs / "ctrl_c", err, "SIGINT")
    assert (runs / "ctrl_c" / "checkpoints" / f"checkpoint-{step}").is_dir()

    proc = start(runs, "ctrl_c", "--resume", delay=2.0)       # then twice, while the resumed run trains
    wait_for_step(runs / "ctrl_c", step + 1, proc)
    proc.send_signal(signal.SIGINT); time.sleep(0.3); proc.send_signal(signal.SIGINT)
    code, _, err = finish(proc)
    assert code == 130, err[-3000:]
    assert_interrupted(runs / "ctrl_c", err, "SIGINT (twice")
    assert "stopped by SIGINT (twice: at once) at once" in err
    assert_resumes_exactly(runs, "ctrl_c", uninterrupted)


def cli(runs: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    "The real command line (not the driver) on run `name`."
    return subprocess.run([sys.executable, "-m", "consistency_amp.training.train", *FLAGS, "--runs_dir", str(runs),
                           "--run_name", name, *extra], cwd=runs.parent, env=environment(), capture_output=True,
                          text=True, timeout=300)


def test_a_live_run_refuses_other_writers_and_a_killed_run_is_interrupted(runs, uninterrupted):
    run = runs / "live"
    proc = start(runs, "live", delay=1.0)
    wait_for_step(run, 1, proc)
    before = (run.stat().st_ino, (run / "params.json").read_text())
    for extra in (["--resume"], ["--overwrite"], []):
        second = cli(runs, "live", *extra)
        assert second.returncode == 1 and "Traceback" not in second.stderr, second.stderr[-2000:]
        assert f"pid {proc.pid} on" in second.stderr, second.stderr[-2000:]      # names the holder
        assert ("being written by another process" if extra else "state: running") in second.stderr
    assert read_run(run).state == "running" and run_is_live(run)
    assert (run.stat().st_ino, (run / "params.json").read_text()) == before   # not replaced, not resumed
    wait_for_step(run, 3, proc)                                  # checkpoint-2 is saved
    proc.kill(); proc.wait()
    assert read_json(run / "status.json")["state"] == "running"  # what the dead writer last said ...
    record = read_run(run)
    assert (record.state, record.live) == ("interrupted", False) and record.resume_step in (2, 4)   # ... and the truth
    again = cli(runs, "live")
    assert again.returncode == 1 and f"(state: interrupted at step {record.resume_step}). Runs are never overwritten " \
                                     "silently: pass resume=True" in again.stderr, again.stderr[-2000:]
    assert_resumes_exactly(runs, "live", uninterrupted)


def test_slurm_script_requeues_on_usr1_and_the_requeued_job_finishes(runs, uninterrupted, tmp_path):
    fake = tmp_path / "bin"; fake.mkdir()
    calls = tmp_path / "scontrol.calls"
    (fake / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"); (fake / "scontrol").chmod(0o755)
    script = REPO / "configs" / "slurm" / "train.sbatch"
    job = dict(TRAIN_COMMAND=f"{sys.executable} {DRIVER}", SLURM_JOB_ID="4242", PATH=f"{fake}:{os.environ['PATH']}")
    args = ["bash", str(script), *FLAGS, "--runs_dir", str(runs), "--run_name", "slurm"]
    proc = subprocess.Popen(args, cwd=runs.parent, env=environment(FAULT_STEP_DELAY=1.0, **job), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_step(runs / "slurm", 1, proc)
    proc.send_signal(signal.SIGUSR1)                             # what --signal=B:USR1@300 sends the batch script
    code, out, err = finish(proc)
    assert code == 138, err[-3000:]
    assert_interrupted(runs / "slurm", err, "SIGUSR1")
    assert calls.read_text().split() == ["requeue", "4242"] and "requeueing job 4242" in out
    requeued = subprocess.run(args, cwd=runs.parent, env=environment(**job), capture_output=True, text=True, timeout=300)
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    assert calls.read_text().split() == ["requeue", "4242"]     # a job that finished does not requeue
    assert_finished_exactly(runs / "slurm", uninterrupted)


def test_slurm_script_under_torchrun_passes_usr1_to_the_workers(tmp_path):
    "torchrun itself exits at once on SIGUSR1 and orphans its workers: the script signals the workers instead."
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None: pytest.skip("torchrun is not installed")
    runs, pids, fake = tmp_path / "runs", tmp_path / "pids", tmp_path / "bin"
    pids.mkdir(); fake.mkdir()
    calls = tmp_path / "scontrol.calls"
    (fake / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"); (fake / "scontrol").chmod(0o755)
    job = dict(TRAIN_COMMAND=f"{torchrun} --standalone --nproc_per_node 2 {DRIVER}", SLURM_JOB_ID="4343",
               PATH=f"{fake}:{os.environ['PATH']}")
    args = ["bash", str(REPO / "configs" / "slurm" / "train.sbatch"), *FLAGS, "--runs_dir", str(runs), "--run_name", "two"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=environment(FAULT_STEP_DELAY=1.0, FAULT_PID_DIR=pids, **job), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_step(runs / "two", 1, proc)
    proc.send_signal(signal.SIGUSR1)
    code, out, err = finish(proc, timeout=240)
    assert code != 0, err[-3000:]
    status = read_json(runs / "two" / "status.json")
    assert (status["state"], status["stopped_by"], status["num_processes"]) == ("interrupted", "SIGUSR1", 2), err[-3000:]
    assert (runs / "two" / "checkpoints" / f"checkpoint-{status['step']}").is_dir() and status["step"] < 6
    for rank in (0, 1):                                            # no worker left training on its own
        pid = int((pids / f"rank{rank}.pid").read_text())
        with pytest.raises(ProcessLookupError): os.kill(pid, 0)
    assert calls.read_text().split() == ["requeue", "4343"] and "requeueing job 4343" in out


def test_two_processes_resume_in_a_later_epoch_as_if_never_stopped(tmp_path):
    "accelerate's skipping loader hides the paired sampler from Trainer's set_epoch under several processes: a resume "
    "in epoch 1 replayed epoch 0's order (the trainer's _run_epoch now sets it). 5 steps per epoch here; stopped at 6."
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None: pytest.skip("torchrun is not installed")
    runs = tmp_path / "runs"
    launch = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "consistency_amp.training.train", "--task", "depth",
              "--steps", "8", "--pairs_per_device", "3", "-K", "2", "--max_completion_length", "16", "--save_steps", "4",
              "--runs_dir", str(runs)]
    run = lambda *extra: subprocess.run([*launch, *extra], cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=300)
    for extra in (["--run_name", "whole"], ["--run_name", "cut", "--stop_after", "6"], ["--run_name", "cut", "--resume"]):
        done = run(*extra)
        assert done.returncode == 0, done.stderr[-3000:]
    whole, cut = (read_jsonl(runs / name / "train_log.jsonl")[0] for name in ("whole", "cut"))
    assert [r["epoch"] for r in whole][4:6] == pytest.approx([1.0, 1.2])       # step 6 is in epoch 1
    keys = ("step", "reward", "num_tokens", "loss")
    assert [[r.get(k) for k in keys] for r in cut] == [[r.get(k) for k in keys] for r in whole]
    assert (runs / "cut" / "adapter" / ADAPTER_WEIGHTS).read_bytes() == (runs / "whole" / "adapter" / ADAPTER_WEIGHTS).read_bytes()


def test_sigterm_to_one_of_two_processes_stops_both_at_the_same_step(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None: pytest.skip("torchrun is not installed")
    runs, pids = tmp_path / "runs", tmp_path / "pids"
    pids.mkdir()
    launch = [torchrun, "--standalone", "--nproc_per_node", "2", str(DRIVER)]
    proc = subprocess.Popen([*launch, *FLAGS, "--runs_dir", str(runs), "--run_name", "two"], cwd=tmp_path,
                            env=environment(FAULT_STEP_DELAY=1.0, FAULT_PID_DIR=pids), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_step(runs / "two", 1, proc)
    os.kill(int((pids / "rank1.pid").read_text()), signal.SIGTERM)   # only rank 1 is told
    code, _, err = finish(proc, timeout=240)                     # no hang: rank 0 stops at the same step
    assert code != 0 and "stopped by SIGTERM at step" in err, err[-3000:]
    status = read_json(runs / "two" / "status.json")
    step = status["step"]
    assert (status["state"], status["stopped_by"], status["num_processes"]) == ("interrupted", "SIGTERM", 2)
    assert (runs / "two" / "checkpoints" / f"checkpoint-{step}").is_dir() and step < 6
    resumed = subprocess.run([*launch, *FLAGS, "--runs_dir", str(runs), "--run_name", "two", "--resume"], cwd=tmp_path,
                             env=environment(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_run(runs / "two").state == "complete"
    assert [r["step"] for r in read_jsonl(runs / "two" / "train_log.jsonl")[0]] == list(range(1, 7))


def test_damaged_or_impossible_files_get_a_message_not_a_traceback(runs, uninterrupted, tmp_path):
    blocker = tmp_path / "a_file"; blocker.write_text("x")
    nowhere = subprocess.run([sys.executable, "-m", "consistency_amp.training.train", *FLAGS, "--runs_dir",
                              str(blocker / "runs")], env=environment(), capture_output=True, text=True, timeout=300)
    assert nowhere.returncode == 1 and "Traceback" not in nowhere.stderr
    assert f"cannot create the runs folder {blocker / 'runs'}: Not a directory" in nowhere.stderr, nowhere.stderr[-2000:]
    read_only = Path("/sys/kernel")                              # there, and no file can be written in it (sysfs)
    if read_only.is_dir():
        refused = subprocess.run([sys.executable, "-m", "consistency_amp.training.train", *FLAGS, "--runs_dir", str(read_only)],
                                 env=environment(), capture_output=True, text=True, timeout=300)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
        assert "error: the runs folder /sys/kernel: cannot write there" in refused.stderr, refused.stderr[-2000:]

    # a run stopped at step 4, then damaged: the newest checkpoint's trainer_state.json and a log line cut off
    proc = start(runs, "damaged", "--stop_after", "4")
    assert finish(proc)[0] == 0
    run = runs / "damaged"
    state = run / "checkpoints" / "checkpoint-4" / "trainer_state.json"
    state.write_text(state.read_text()[:40])
    log = run / "train_log.jsonl"
    log.write_text(log.read_text()[:-30])
    (run / "status.json").write_text('{"state": "runn')
    again = cli(runs, "damaged")                                 # status.json unreadable: still a clear refusal
    assert again.returncode == 1 and "already exists" in again.stderr and "Traceback" not in again.stderr
    params = (run / "params.json").read_text()
    (run / "params.json").write_text(params[:50])
    bad = cli(runs, "damaged", "--resume")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert f"cannot resume {run}: {run / 'params.json'}: not valid JSON" in bad.stderr and "overwrite" in bad.stderr
    (run / "params.json").write_text(params)
    code, _, err = finish(start(runs, "damaged", "--resume"))    # falls back to checkpoint-2, redoes steps 3-6
    assert code == 0, err[-3000:]
    assert "checkpoint-4/trainer_state.json is unreadable" in err and "train_log.jsonl: last line" in err
    assert_finished_exactly(run, uninterrupted)


def test_out_of_memory_names_what_to_change_and_the_run_resumes_exactly(runs, uninterrupted):
    code, _, err = finish(start(runs, "oom", FAULT_OOM_AT_STEP=3))
    assert code == 1 and "Traceback" not in err, err[-3000:]
    line = err.strip().splitlines()[-1]
    assert line.startswith("python -m consistency_amp.training.train: error: out of GPU memory: CUDA out of memory. Tried"), line
    assert "The run is kept and resumes from checkpoint-2." in line and "fewer --pairs_per_device (now 1)" in line
    status = read_json(runs / "oom" / "status.json")
    assert status["state"] == "failed" and status["error"].startswith("out of GPU memory: CUDA out of memory"), status
    assert_resumes_exactly(runs, "oom", uninterrupted)


def test_a_model_too_large_for_the_gpu_is_said_in_one_line(runs):
    "Out of memory while the weights load: the model named, no batch advice (no step ran), the run recorded failed."
    code, _, err = finish(start(runs, "too_large", FAULT_OOM_AT_LOAD=1))
    assert code == 1 and "Traceback" not in err, err[-3000:]
    line = err.strip().splitlines()[-1]
    assert line.startswith("python -m consistency_amp.training.train: error: out of GPU memory while loading "), line
    assert "Its weights do not fit in what the GPU has free" in line and "--pairs_per_device" not in line, line
    assert read_json(runs / "too_large" / "status.json")["state"] == "failed"


def test_a_runs_folder_without_file_locks_is_refused_in_one_line(tmp_path):
    import errno
    lockless = tmp_path / "runs"
    for code in (errno.ENOLCK, errno.ENOSYS):
        done, _, err = finish(start(lockless, "lockless", FAULT_NO_FLOCK=code))
        assert done == 1 and "Traceback" not in err, err[-3000:]
        assert f"the file system of {lockless} gives no file locks (flock: {os.strerror(code)})" in err, err[-2000:]
        assert "put the runs folder (runs_dir) on one that does" in err
        assert list(lockless.iterdir()) == []                   # no run folder, no staging folder, no probe


def test_a_full_disk_names_the_file_keeps_what_was_written_and_resumes_exactly(runs, uninterrupted):
    code, _, err = finish(start(runs, "disk_full", FAULT_DISK_FULL_AT_STEP=3))
    run = runs / "disk_full"
    assert code == 1 and "Traceback" not in err, err[-3000:]
    assert f"could not write {run / 'train_log.jsonl'}: No space left on device" in err and "--resume" in err
    assert [r["step"] for r in read_jsonl(run / "train_log.jsonl")[0]] == [1, 2]   # what was written is intact
    assert read_json(run / "status.json")["state"] == "failed" and read_run(run).resume_step == 2
    assert_resumes_exactly(runs, "disk_full", uninterrupted)


def test_a_full_disk_in_a_checkpoint_says_so_and_resumes_from_the_one_before(runs, uninterrupted):
    "torch.save fails mid-file (optimizer.pt of checkpoint-4): one line that says it is a write, not torch's enforce message."
    code, _, err = finish(start(runs, "disk_full_checkpoint", FAULT_DISK_FULL_IN_CHECKPOINT=4))
    run = runs / "disk_full_checkpoint"
    assert code == 1 and "Traceback" not in err, err[-3000:]
    assert f"could not write a file under {run}: torch could not write it" in err and "MiB free there" in err, err[-3000:]
    assert "make room and continue with the same command and --resume" in err
    cut = run / "checkpoints" / "checkpoint-4"                  # optimizer.pt part written, trainer_state.json never
    assert (cut / "optimizer.pt").is_file() and not (cut / "trainer_state.json").exists()
    status = read_json(run / "status.json")                     # the registry shows the same line, not torch's
    assert status["state"] == "failed" and status["error"].startswith("could not write a file under") and read_run(run).resume_step == 2
    assert_resumes_exactly(runs, "disk_full_checkpoint", uninterrupted)


LAUNCHER = """
import sys, consistency_amp.science.experiment as E
out = sys.argv[1]
job = ("import os, signal, sys, time, pathlib; pathlib.Path(sys.argv[1], str(os.getpid())).write_text('started'); "
       "signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path(sys.argv[1], str(os.getpid())).write_text('stopped'), sys.exit(143))); "
       "time.sleep(120)")
E._job_command = lambda config, condition, seed, runs_dir: [sys.executable, "-c", job, out]
config = E.ExperimentConfig(conditions=("accuracy",), seeds=(0, 1, 2))
kept = E.experiment_dir(config, out) / "accuracy-seed0" / "checkpoints" / "checkpoint-3"   # an earlier launch's
kept.mkdir(parents=True, exist_ok=True); (kept / "trainer_state.json").write_text("{}")
E.launch(config, out, workers=int(sys.argv[2]))
"""


def test_a_second_experiment_launcher_is_refused_while_the_first_runs(tmp_path):
    first = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path), "1"], env=environment(), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not [p for p in tmp_path.iterdir() if p.name.isdigit()] and time.monotonic() < deadline: time.sleep(0.1)
    second = subprocess.run([sys.executable, "-c", LAUNCHER, str(tmp_path), "3"], env=environment(), text=True,
                            capture_output=True, timeout=120)
    assert second.returncode != 0 and f"another launcher (pid {first.pid}) is working on" in second.stderr, second.stderr[-2000:]
    assert len([p for p in tmp_path.iterdir() if p.name.isdigit()]) == 1          # it started no job
    first.send_signal(signal.SIGTERM)
    assert finish(first, timeout=120)[0] == 143


FAILING_LAUNCHER = """
import sys, consistency_amp.science.experiment as E
E._job_command = lambda config, condition, seed, runs_dir: [sys.executable, "-c", "import sys; sys.exit(3 if %d == 1 else 0)" % seed]
E.run_name_of = lambda condition, seed: f"{condition}-seed{seed}"
E.launch(E.ExperimentConfig(conditions=("accuracy",), seeds=(0, 1, 2)), sys.argv[1], workers=2)
"""


def test_a_failed_experiment_job_is_named_in_one_line_and_the_others_finish(tmp_path):
    proc = subprocess.run([sys.executable, "-c", FAILING_LAUNCHER, str(tmp_path)], env=environment(), text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    said = proc.stdout + proc.stderr                  # each job's line (tqdm's write) and the closing one
    assert "accuracy-seed1: FAILED" in said and said.count(": done in") == 2, said[-3000:]
    assert "1 job(s) failed; see " in proc.stderr and "accuracy-seed1.log" in proc.stderr
    assert "the same command runs the failed ones again" in proc.stderr


@pytest.mark.parametrize("workers", [1, 3])
def test_the_experiment_launcher_stops_its_jobs_and_starts_no_more_on_sigterm(tmp_path, workers):
    "One worker: one job runs, two are queued. Three: all run and none is queued (they were not asked to stop until 2026-11-28)."
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path), str(workers)], env=environment(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len([p for p in tmp_path.iterdir() if p.name.isdigit()]) < workers and time.monotonic() < deadline: time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, timeout=120)
    assert code == 143, err[-3000:]
    assert "accuracy-seed0: resuming from checkpoint-3" in out + err      # on the console, not only in the job's log
    jobs = [p.read_text() for p in tmp_path.iterdir() if p.name.isdigit()]
    assert jobs == ["stopped"] * workers              # every running job was asked to stop; none queued was started
    assert "FAILED" not in out + err                  # stopped by the signal, not failed
    assert "0/3 [" in err and "1/3 [" not in err      # the progress bar counts jobs done: the stopped one is not
    assert "stopped by SIGTERM; every interrupted run keeps its checkpoint: run the same command again" in err
    assert "Traceback" not in err
