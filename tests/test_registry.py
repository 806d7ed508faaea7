"""The run registry (consistency_amp.grid.{manifest,results,status,launcher,registry}): tidy results table from fixture run folders, manifest status, broken
runs, print mode (one command per missing run) and the in-process mini launcher (complete runs, resumable, idempotent)."""
import io
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from consistency_amp.core import PAPER_MODELS
from consistency_amp.grid.launcher import launch_missing, missing_runs
from consistency_amp.grid.manifest import EXTERNAL_BASELINES, manifest
from consistency_amp.grid.results import RESULT_COLUMNS, fixture_result, results_table, write_fixture_run
from consistency_amp.grid.status import manifest_status, spec_params, status_summary
from consistency_amp.training.run_lock import release_run_lock
from consistency_amp.training.runs import create_run, write_json
from consistency_amp.training.run_records import read_run
from consistency_amp.world.tasks import BOOLEAN_TASKS

REPO = Path(__file__).resolve().parents[1]


def spec_where(m, **kw) -> dict:
    return next(s for s in m.runs.values() if all(s.get(k) == v for k, v in kw.items()))


# ---------------------------------------------------------------- results table

def test_results_table_rows_from_fixture_runs(tmp_path):
    train = dict(task="size", source="SUNRGBD", reward="accuracy", pairing="minimal", model=PAPER_MODELS["3B"],
                 model_size="3B", data_root="/data", steps=500, num_generations=8, pairs_per_device=4,
                 learning_rate=1e-6, temperature=1.0, beta=0.0, seed=3, label_noise=0.3, max_completion_length=512,
                 scale="paper")
    write_fixture_run(tmp_path, "size-acc", train, [fixture_result("size", accuracy=0.25, n=40),
                                                    fixture_result("depth", "KITTI", accuracy=1.0, n=7)])
    write_fixture_run(tmp_path, "base-3B", dict(kind="base", model=PAPER_MODELS["3B"], model_size="3B", seed=0),
                      [fixture_result("size", accuracy=0.125)], eval_name="test-first4")
    table = results_table(tmp_path)
    assert list(table.columns[:len(RESULT_COLUMNS)]) == list(RESULT_COLUMNS)
    assert len(table) == 3 and table.complete.all()
    row = table[(table.run == "size-acc") & (table.eval_task == "size")].iloc[0]
    assert (row.kind, row.model_size, row.train_task, row.train_source, row.reward, row.pairing) == \
        ("train", "3B", "size", "SUNRGBD", "accuracy", None)          # pairing shown for consistency runs only
    assert (row.label_noise, row.steps, row.seed, row.scale, row.eval_name, row.n) == (0.3, 500, 3, "paper", "test", 40)
    assert (row.accuracy, row.format_rate, row.unparseable_rate, row.self_consistency) == (0.25, 1.0, 0.0, 0.75)
    kitti = table[(table.run == "size-acc") & (table.eval_source == "KITTI")].iloc[0]
    assert (kitti.eval_task, kitti.accuracy, kitti.n) == ("depth", 1.0, 7)
    base = table[table.run == "base-3B"].iloc[0]
    assert (base.kind, base.train_task, base.reward, base.steps is pd.NA, base.eval_name, base.accuracy) == \
        ("base", None, None, True, "test-first4", 0.125)


def test_results_table_lists_broken_runs_without_numbers_or_crash(tmp_path):
    good = dict(task="depth", source="SUNRGBD", reward="consistency", pairing="random", model="m", steps=5,
                num_generations=4, pairs_per_device=1, learning_rate=1e-6, seed=0)
    write_fixture_run(tmp_path, "ok", good, [fixture_result("depth", accuracy=0.5)])
    # params.json deleted
    (write_fixture_run(tmp_path, "no-params", good, [fixture_result("depth")]) / "params.json").unlink()
    # params.json present but lacking required training keys
    p = write_fixture_run(tmp_path, "thin-params", good, [fixture_result("depth")])
    write_json(p / "params.json", dict(kind="train", name="thin-params", model="m"))
    # training finished but no evaluation; training crashed
    write_fixture_run(tmp_path, "no-eval", good, None)
    write_fixture_run(tmp_path, "crashed", good, None, state="failed", adapter=False)
    # status says complete, adapter missing, and an evaluation anyway
    write_fixture_run(tmp_path, "no-adapter", good, [fixture_result("depth")], adapter=False)
    # damaged evaluation files: not JSON, results not a list, a result not an object, values out of range
    p = write_fixture_run(tmp_path, "bad-evals", good, [fixture_result("depth", accuracy=79.6),
                                                        fixture_result("size", n=-1),
                                                        fixture_result("orientation", source="NYU"),
                                                        fixture_result("relative_distance", accuracy=None, n=0)])
    (p / "eval" / "garbage.json").write_text("{not json")
    write_json(p / "eval" / "nolist.json", dict(results="none"))
    write_json(p / "eval" / "notobj.json", dict(results=[3]))
    # a folder with only an eval file; a status.json that is not JSON
    (tmp_path / "orphan" / "eval").mkdir(parents=True)
    write_json(tmp_path / "orphan" / "eval" / "test.json", dict(results=[fixture_result("depth")]))
    (write_fixture_run(tmp_path, "bad-status", good, [fixture_result("depth")]) / "status.json").write_text("[")

    table = results_table(tmp_path)
    complete = table[table.complete]
    assert list(complete.run) == ["ok"], table[["run", "complete", "problems"]]
    by_run = {run: rows for run, rows in table.groupby("run")}
    assert set(by_run) == {"ok", "no-params", "thin-params", "no-eval", "crashed", "no-adapter", "bad-evals", "orphan",
                           "bad-status"}
    assert "params.json" in by_run["no-params"].missing.iloc[0]
    assert "lacks" in by_run["thin-params"].problems.iloc[0]
    assert "eval/*.json" in by_run["no-eval"].missing.iloc[0] and math.isnan(by_run["no-eval"].accuracy.iloc[0])
    assert by_run["crashed"].state.iloc[0] == "failed"
    assert "adapter" in by_run["no-adapter"].problems.iloc[0]
    bad = by_run["bad-evals"].set_index(["eval_name", "eval_task"], drop=False)
    assert math.isnan(bad.loc[("test", "depth")].accuracy) and "79.6 is not a fraction" in bad.loc[("test", "depth")].problems
    assert bad.loc[("test", "size")].n is pd.NA
    assert "is not a count" in bad.loc[("test", "size")].problems
    assert "unknown" in bad.loc[("test", "orientation")].problems
    assert math.isnan(bad.loc[("test", "relative_distance")].accuracy)   # no examples: no number invented
    assert "no results" in by_run["bad-evals"][by_run["bad-evals"].eval_name == "nolist"].problems.iloc[0]
    assert "not an object" in by_run["bad-evals"][by_run["bad-evals"].eval_name == "notobj"].problems.iloc[0]
    assert "garbage" not in set(by_run["bad-evals"].eval_name)          # unreadable: reported by read_run, no row
    assert any("garbage.json" in p for p in by_run["bad-evals"].problems)
    assert not by_run["orphan"].complete.any() and not by_run["bad-status"].complete.any()
    # numbers are never invented: every finite accuracy is a stored value in [0, 1]
    assert table.accuracy.dropna().between(0, 1).all()


# ---------------------------------------------------------------- manifest status

def test_manifest_status_marks_complete_missing_and_broken(tmp_path):
    m = manifest("paper", data_root="/data/omni3d")
    count = lambda st, fig, s: int(((st.figure == fig) & (st.status == s)).sum())
    st = manifest_status("paper", tmp_path, manifest_=m)
    assert (st.status.isin(["missing", "needs_model"])).all()
    assert count(st, "figure_7", "missing") == 5 and count(st, "figure_5", "needs_model") == len(EXTERNAL_BASELINES)

    numeric = [spec_where(m, task=t, reward=r) for t in ("counting", "absolute_distance") for r in ("accuracy", "consistency")]
    for spec in numeric[:3]:
        write_fixture_run(tmp_path, spec["name"], spec_params(spec), [fixture_result(spec["task"], accuracy=0.4)])
    broken = numeric[3]                                         # evaluation written, params.json then lost
    (write_fixture_run(tmp_path, broken["name"], spec_params(broken), [fixture_result(broken["task"])]) / "params.json").unlink()
    write_fixture_run(tmp_path, "base-7B", dict(kind="base", model=PAPER_MODELS["7B"], model_size="7B", seed=0),
                      [fixture_result(t) for t in ("counting", "absolute_distance")])
    st = manifest_status("paper", tmp_path, manifest_=m)
    f7 = st[st.figure == "figure_7"].set_index("run")
    assert list(f7.loc[[s["name"] for s in numeric[:3]] + ["base-7B"], "status"]) == ["complete"] * 4
    assert f7.loc[broken["name"], "status"] == "damaged" and not f7.loc[broken["name"], "complete"]
    assert f7.complete.sum() == 4
    f3 = st[st.figure == "figure_3"].set_index("run")
    assert f3.loc["base-7B", "status"] == "eval_incomplete"    # Figure 3 needs the boolean tasks of base-7B
    summary = status_summary(st, "paper")
    assert "Figure 7: numeric tasks" in summary and "4/5 runs complete, 1 damaged" in summary
    # the broken run is neither counted nor launched (never overwritten)
    assert broken["name"] not in {s["name"] for s in missing_runs("paper", tmp_path, manifest_=m)}


def test_needs_eval_and_mismatch(tmp_path):
    m = manifest("paper", data_root="/data/omni3d")
    spec = spec_where(m, task="counting", reward="consistency")
    write_fixture_run(tmp_path, spec["name"], spec_params(spec), None)                        # trained, not evaluated
    other = spec_where(m, task="counting", reward="accuracy")
    write_fixture_run(tmp_path, other["name"], spec_params(other) | dict(seed=7), [fixture_result("counting")])
    st = manifest_status("paper", tmp_path, manifest_=m, figures="figure_7").set_index("run")
    assert st.loc[spec["name"], "status"] == "needs_eval"
    assert st.loc[other["name"], "status"] == "mismatch" and "seed: stored 7, wanted 0" in st.loc[other["name"], "detail"]
    out = io.StringIO()
    printed = launch_missing("paper", tmp_path, "print", figures="figure_7", data_root="/data/omni3d", file=out)
    lines = [l for l in out.getvalue().splitlines() if l and not l.startswith("#")]
    by_run = {p["run"]: line for p, line in zip(printed, lines)}
    assert other["name"] not in by_run and f"# not launched, mismatch: {other['name']}" in out.getvalue()
    assert by_run[spec["name"]].startswith("python -m consistency_amp.evaluation.evaluate ")   # evaluation only: no training
    assert f"-m consistency_amp.evaluation.evaluate --run {spec['name']}" in by_run[spec["name"]]
    assert "torchrun" not in by_run[spec["name"]]


# ---------------------------------------------------------------- print mode

@pytest.mark.parametrize("launcher", ["torchrun", "accelerate", "papermill"])
def test_print_mode_one_command_per_missing_run(tmp_path, launcher):
    externals = {k: f"org/{k}" for k in list(EXTERNAL_BASELINES)[:2]}
    m = manifest("paper", external_models=externals)
    todo = missing_runs("paper", tmp_path, manifest_=m)
    assert len(todo) == 34 + 2 + 2                             # trainings, base models, the two given externals
    out = io.StringIO()
    printed = launch_missing("paper", tmp_path, "run", launcher=launcher, external_models=externals, file=out)
    text = out.getvalue()
    commands = [l for l in text.splitlines() if l and not l.startswith("#")]
    assert len(commands) == len(printed) == len(todo)
    assert "printing the commands instead" in text                 # the paper scale never runs here
    assert len(set(commands)) == len(commands)
    for spec, cmd in zip(todo, commands):
        words = shlex.split(cmd)                                    # every line is valid shell
        assert spec["name"] in cmd
        if spec["kind"] == "train":
            head = {"torchrun": "torchrun --nproc_per_node 8 -m consistency_amp.training.train",
                    "accelerate": "accelerate launch --config_file configs/accelerate/multi_gpu.yaml --num_processes 8 "
                                  "-m consistency_amp.training.train",
                    "papermill": "papermill nbs/train.ipynb"}[launcher]
            assert cmd.startswith(head) and '"$OMNI3D_ROOT"' in cmd
            assert ("--resume true" in cmd) if launcher != "papermill" else ("-p resume true" in cmd)
            assert f"{spec['steps']}" in words and ("-m consistency_amp.evaluation.evaluate --run " in cmd or "nbs/evaluate.ipynb" in cmd)
            # the paper's global batch: 8 processes, or the notebook's one accumulating 8 steps
            assert ("gradient_accumulation_steps" in cmd) == (launcher == "papermill")
    assert len(EXTERNAL_BASELINES) - 2 == text.count("# not launched, needs_model")
    assert not any(tmp_path.iterdir())                              # printing writes nothing


def test_print_mode_mini_uses_the_python_entry(tmp_path):
    out = io.StringIO()
    printed = launch_missing("mini", tmp_path, "print", figures="figure_7", file=out)
    commands = [l for l in out.getvalue().splitlines() if l and not l.startswith("#")]
    assert len(commands) == len(printed) == 5                       # four numeric runs and the base model
    trains = [c for c in commands if c.startswith("python -m consistency_amp.training.train ")]
    assert len(trains) == 4 and all("--data_root" not in c and "--scale mini" in c for c in trains)
    assert not any(tmp_path.iterdir())


def test_cli_status_and_missing_paper(tmp_path):
    env = dict(os.environ, CONSISTENCY_AMP_RUNS=str(tmp_path))
    run = lambda *a: subprocess.run([sys.executable, "-m", "consistency_amp.grid.registry", *a], capture_output=True,
                                    text=True, env=env, cwd=REPO, timeout=120)
    res = run("status", "--scale", "paper")
    assert res.returncode == 0, res.stderr
    for title in ("Figure 2:", "Figure 8:", "Table 1:", "Appendix C:", "all figures: 0/43 distinct runs complete"):
        assert title in res.stdout
    res = run("missing", "--scale", "paper", "--figures", "6", "--external", "ssl4rl_rotation=org/x")
    assert res.returncode == 0 and "6 run(s) to launch at the paper scale" in res.stdout
    res = run("launch", "--scale", "paper", "--figures", "6", "--print")
    assert res.returncode == 0 and len([l for l in res.stdout.splitlines() if l.startswith("torchrun ")]) == 6
    res = run("status", "--scale", "paper", "--external", "nope")
    assert res.returncode != 0 and "KEY=MODEL" in res.stderr


# ---------------------------------------------------------------- the mini launcher

def test_mini_launcher_creates_complete_runs_resumes_and_is_idempotent(tmp_path):
    small = dict(steps=1, max_examples=1, consistency_samples=0)    # the smallest grid that runs every code path
    m = manifest("mini", **small)
    todo = missing_runs("mini", tmp_path, manifest_=m, figures="appendix_c")
    assert sorted(s["kind"] for s in todo) == ["base", "train"]
    train = next(s for s in todo if s["kind"] == "train")
    assert (train["stands_in_for"], train["task"], train["reward"], train["steps"]) == ("7B", "depth", "consistency", 1)
    # a run interrupted before its first step: the launcher must resume it in place
    create_run(train["name"], spec_params(train), runs=tmp_path)
    status = {s["name"]: s["status"] for s in missing_runs("mini", tmp_path, manifest_=m, figures="appendix_c")}
    assert status == {"base-spatial-base-large": "missing"}     # this process writes it: live, not launchable
    release_run_lock(tmp_path / train["name"])                  # as if that process had died
    status = {s["name"]: s["status"] for s in missing_runs("mini", tmp_path, manifest_=m, figures="appendix_c")}
    assert status == {train["name"]: "incomplete", "base-spatial-base-large": "missing"}

    out = io.StringIO()
    done = launch_missing("mini", tmp_path, figures="appendix_c", progress=False, file=out, **small)
    assert [d["ok"] for d in done] == [True, True], out.getvalue() + "".join(
        Path(d.get("log", "/dev/null")).read_text() for d in done if not d["ok"])
    record = read_run(tmp_path / train["name"])
    assert record.complete and record.state == "complete" and len(record.train_log) == 1
    assert len(record.params["resumed_at"]) == 1                  # continued, not recreated
    ev = record.evals["test-first1"]
    assert {(r["task"], r["source"]) for r in ev["results"]} == {(t, s) for t in BOOLEAN_TASKS for s in ("SUNRGBD", "KITTI")}
    base = read_run(tmp_path / "base-spatial-base-large")
    assert base.complete and base.kind == "base" and len(base.evals["test-first1"]["results"]) == 12
    table = results_table(tmp_path)
    assert table.complete.sum() == 8 + 12 and set(table.stands_in_for) == {"7B"}
    assert table.accuracy.dropna().between(0, 1).all()

    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file() and ".registry-logs" not in p.parts}
    out = io.StringIO()
    again = launch_missing("mini", tmp_path, figures="appendix_c", progress=False, file=out, **small)
    assert again == [] and "nothing to launch" in out.getvalue()
    assert stamps == {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file() and ".registry-logs" not in p.parts}
    st = manifest_status("mini", tmp_path, manifest_=m, figures="appendix_c")
    assert list(st.status) == ["complete", "complete"], st.detail
    assert any(e["task"] == "depth" and e["source"] == "SUNRGBD" for e in ev["examples"])   # Appendix C's records
    # the same runs serve Figure 3 (the base and the depth run): complete there too, the others missing
    f3 = manifest_status("mini", tmp_path, manifest_=m, figures="figure_3").set_index("run").status
    assert f3[[train["name"], "base-spatial-base-large"]].tolist() == ["complete", "complete"] and (f3 == "missing").sum() == 7


def test_a_signal_stops_the_mini_launcher_after_the_current_run_and_the_same_call_resumes(tmp_path, monkeypatch):
    """SIGTERM while a run trains: that run stops after its step with a checkpoint and is not evaluated; while a run is
    evaluated: that run is finished. Either way no further run starts, one line says how to resume, and the launcher
    exits with 143. (Before, it went on through the whole queue and exited 1.)"""
    import signal
    import consistency_amp.grid.launcher as launcher
    import consistency_amp.training.train as entry
    small = dict(steps=2, max_examples=1, consistency_samples=0)
    todo = missing_runs("mini", tmp_path, manifest_=manifest("mini", **small), figures="appendix_c")
    train, base = (next(s["name"] for s in todo if s["kind"] == kind) for kind in ("train", "base"))

    class SignalledInTraining(entry.StopRequest):
        def __enter__(self):
            super().__enter__()
            os.kill(os.getpid(), signal.SIGTERM)       # arrives at once, during the run's training
            return self
    monkeypatch.setattr(entry, "StopRequest", SignalledInTraining)
    out = io.StringIO()
    monkeypatch.setattr(launcher, "missing_runs", lambda *a, _real=launcher.missing_runs, **k:
                        sorted(_real(*a, **k), key=lambda s: s["kind"] != "train"))   # the training run first
    with pytest.raises(SystemExit) as stopped:
        launch_missing("mini", tmp_path, figures="appendix_c", progress=False, file=out, **small)
    assert stopped.value.code == 128 + signal.SIGTERM
    record = read_run(tmp_path / train)
    assert (record.state, record.resume_step, record.evals) == ("interrupted", 1, {}), out.getvalue()
    assert not (tmp_path / base).exists()                                   # no further run started
    assert "stopped by SIGTERM: 2 run(s) left" in out.getvalue() and "the same command resumes" in out.getvalue()

    monkeypatch.setattr(entry, "StopRequest", SignalledInTraining.__mro__[1])   # no more signals in training
    def signalled_in_evaluation(spec, runs, folder, _real=launcher._evaluate_here):
        os.kill(os.getpid(), signal.SIGTERM)
        return _real(spec, runs, folder)
    monkeypatch.setattr(launcher, "_evaluate_here", signalled_in_evaluation)
    out = io.StringIO()
    with pytest.raises(SystemExit) as stopped:
        launch_missing("mini", tmp_path, figures="appendix_c", progress=False, file=out, **small)
    assert stopped.value.code == 128 + signal.SIGTERM
    record = read_run(tmp_path / train)
    assert record.complete and len(record.train_log) == 2 and record.evals       # resumed, finished and evaluated
    assert not (tmp_path / base).exists() and "stopped by SIGTERM: 1 run(s) left" in out.getvalue()


def test_a_damaged_evaluation_file_is_named_not_called_absent_and_not_launched(tmp_path):
    "Cut short, it is neither 'absent' (the launcher would then fail on it again and again) nor overwritten: named, with the command."
    m = manifest("paper", data_root="/data/omni3d")
    spec = spec_where(m, task="counting", reward="consistency")
    run = write_fixture_run(tmp_path, spec["name"], spec_params(spec), [fixture_result("counting")])
    path = next((run / "eval").glob("*.json"))
    path.write_bytes(path.read_bytes()[:60])
    row = manifest_status("paper", tmp_path, manifest_=m, figures="figure_7").set_index("run").loc[spec["name"]]
    assert row.status == "eval_incomplete" and "absent" not in row.detail, row.detail
    assert f"{path}: not valid JSON" in row.detail and f"--eval_name {path.stem}" in row.detail and "--overwrite" in row.detail
    assert spec["name"] not in {s["name"] for s in missing_runs("paper", tmp_path, manifest_=m, figures="figure_7")}
