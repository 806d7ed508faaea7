"""nbs/train.ipynb under papermill, and resume.

* The notebook runs end to end with tiny parameters from a working directory outside the repository, into a
  temporary runs folder (nothing is written into the repository; the executed notebook goes to the temporary folder):
  the run folder is complete per the run contract in nbs/33_runs.ipynb.
* Running it again with the same name fails without `overwrite`, naming the folder and both options; the run is
  untouched.
* Invalid parameters fail in the validation cell, before any model is loaded, with the valid choices in the message,
  and create no run folder.
* A signal to the kernel (a scheduler's SIGTERM) stops the run with a checkpoint and fails the notebook, so papermill
  exits non-zero, as the training command does; `stop_after` ends it normally.
* Resume: a run stopped after 2 of 4 steps and resumed ends where an uninterrupted run ends (same adapter tensors,
  same last log lines), through `consistency_amp.training.train.train_run` (the code the notebook runs). Completions are
  scripted (drawn with torch's RNG, so the resumed run must restore the RNG state) because the tiny model's own
  completions are never parseable, all rewards would be 0, and the adapters would trivially agree.
"""
import ast
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import nbformat
import papermill as pm
import psutil
import pytest

from consistency_amp.training.run_callback import REQUIRED_LOG_FIELDS
from consistency_amp.training.runs import ADAPTER_CONFIG, ADAPTER_WEIGHTS, PARAM_KEYS, read_json, read_jsonl
from consistency_amp.training.run_records import read_run
from consistency_amp.training.train import TrainParams

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "nbs" / "train.ipynb"
TINY = dict(task="depth", steps=3, K=2, pairs_per_device=1, max_completion_length=8, save_steps=2)


def execute(tmp: Path, output: str, **parameters):
    "Execute the notebook from `tmp` (outside the repository) into tmp/output."
    return pm.execute_notebook(str(NOTEBOOK), str(tmp / output), kernel_name="python3", cwd=str(tmp),
                               progress_bar=False, parameters=parameters)


def nbs_snapshot():
    "What this notebook could write under nbs/ (other people edit other notebooks there meanwhile)."
    nbs = REPO / "nbs"
    return ((nbs / "train.ipynb").read_bytes(), sorted(p.name for p in nbs.iterdir() if p.name.startswith(("depth", "runs", "."))))


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    "One tiny run: (tmp folder, runs folder, run folder, executed notebook)."
    tmp = tmp_path_factory.mktemp("train_notebook")
    runs = tmp / "runs"
    before = nbs_snapshot()
    start = time.perf_counter()
    execute(tmp, "depth.ipynb", runs_dir=str(runs), **TINY)
    print(f"tiny papermill run: {time.perf_counter() - start:.1f} s")
    assert nbs_snapshot() == before, "executing the notebook wrote under nbs/"
    (run,) = [p for p in runs.iterdir()]
    return tmp, runs, run, tmp / "depth.ipynb"


def test_notebook_is_skipped_by_nbdev_parametrised_and_stored_unexecuted():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.cells[0].cell_type == "raw" and "skip_exec: true" in nb.cells[0].source
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "nbs/train.ipynb is stored unexecuted"
    prose = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for command in ("torchrun --nproc_per_node 8 -m consistency_amp.training.train", "deepspeed_zero3.yaml", "-p K 8",
                    "-p steps 500", "-p pairs_per_device 4", "-p learning_rate 1e-6"):
        assert command in prose, command


def _code(nb):
    "The notebook's code cells as syntax trees (cells that are not plain Python are left out)."
    for cell in nb.cells:
        if cell.cell_type != "code": continue
        try: yield cell, ast.parse(cell.source)
        except SyntaxError: continue


def test_parameters_cell_is_train_params():
    "One definition of the run parameters: the notebook's parameters are TrainParams' fields with its defaults (K is"
    "num_generations), and the notebook passes every one of them on."
    nb = nbformat.read(NOTEBOOK, as_version=4)
    ((_, tree),) = [(c, t) for c, t in _code(nb) if "parameters" in c.metadata.get("tags", [])]
    defaults = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body}
    alias = {"num_generations": "K"}
    assert defaults == {alias.get(f.name, f.name): f.default for f in fields(TrainParams)}
    (call,) = [n for _, t in _code(nb) for n in ast.walk(t) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "TrainParams"]
    assert {k.arg: k.value.id for k in call.keywords} == {f.name: alias.get(f.name, f.name) for f in fields(TrainParams)}


def test_run_folder_is_complete(executed):
    tmp, runs, run, executed_nb = executed
    assert run.name == "depth_consistency-minimal_spatial-base-large_T3_K2_ppd1_lr1e-6_seed0_synthetic"
    params = read_json(run / "params.json")
    assert set(PARAM_KEYS) <= set(params)
    assert (params["kind"], params["task"], params["num_generations"], params["steps"], params["data_root"],
            params["model_size"], params["scale"]) == ("train", "depth", 2, 3, None, None, "mini")
    assert params["versions"]["trl"] and params["versions"]["torch"] and params["created_at"]
    assert "git_commit" in params
    status = read_json(run / "status.json")
    assert (status["state"], status["step"], status["max_steps"], status["num_processes"]) == ("complete", 3, 3, 1)
    log, problems = read_jsonl(run / "train_log.jsonl")
    assert problems == [] and [r["step"] for r in log] == [1, 2, 3]
    for record in log:
        assert all(f in record for f in REQUIRED_LOG_FIELDS + ("reward_accuracy",)), record
        assert 0 <= record["unparseable_rate"] <= 1 and record["step_time_s"] > 0 and record["learning_rate"] > 0
        assert "rewards/consistency/mean" in record and "rewards/format/mean" in record
    from safetensors import safe_open
    with safe_open(str(run / "adapter" / ADAPTER_WEIGHTS), "pt") as f:
        keys = list(f.keys())
    assert any("lora_A" in k for k in keys) and any("lora_B" in k for k in keys)
    assert not any("visual" in k for k in keys)          # the vision tower carries no LoRA
    assert json.loads((run / "adapter" / ADAPTER_CONFIG).read_text())["r"] == 32
    assert sorted(p.name for p in (run / "checkpoints").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    record = read_run(run)
    assert record.complete and record.problems == [] and record.missing == ["eval/*.json"]
    nb = nbformat.read(executed_nb, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs)      # the reward curves
    printed = "".join(o.get("text", "") for o in outputs)
    assert f"evaluate it: python -m consistency_amp.evaluation.evaluate --run {run}" in printed   # training_summary


def test_adapter_folder_is_hub_ready_and_loads_elsewhere(executed, tmp_path):
    "trainer.save_model wrote the adapter and the processor; the base is recorded by name; a model card; it loads moved."
    import shutil, subprocess, sys
    from huggingface_hub import ModelCard
    _, _, run, _ = executed
    adapter, params = run / "adapter", read_json(run / "params.json")
    assert json.loads((adapter / ADAPTER_CONFIG).read_text())["base_model_name_or_path"] == params["model"]
    assert (adapter / "tokenizer_config.json").is_file() and any(adapter.glob("*processor*json"))   # the processor
    card = ModelCard.load(adapter / "README.md")
    assert card.data.base_model == params["model"] and card.data.library_name == "peft"
    assert "reward-consistency" in card.data.tags and run.name in card.text
    moved = shutil.copytree(adapter, tmp_path / "elsewhere" / "adapter")
    code = ("import sys; from peft import PeftModel; from consistency_amp.training.models import load_model; "
            "m, p = load_model(sys.argv[1], lora=False); m = PeftModel.from_pretrained(m, sys.argv[2]); "
            "print(type(m).__name__, sorted(m.peft_config))")
    done = subprocess.run([sys.executable, "-c", code, params["model"], str(moved)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith("PeftModel") and done.stdout.strip().endswith("['default']")


def test_second_run_with_the_same_name_fails_without_overwrite(executed):
    tmp, runs, run, _ = executed
    status_before = (run / "status.json").read_text()
    with pytest.raises(pm.PapermillExecutionError) as error:
        execute(tmp, "again.ipynb", runs_dir=str(runs), **TINY)
    message = str(error.value)
    assert "FileExistsError" in message and f"run directory {run} already exists" in message
    assert "overwrite" in message and "resume" in message
    assert (run / "status.json").read_text() == status_before and (run / "adapter" / ADAPTER_WEIGHTS).is_file()


INVALID = [
    (dict(task="height"), "task must be one of 'orientation', 'depth', 'size', 'relative_distance', 'counting', "
                          "'absolute_distance', 'joint'"),
    (dict(reward="f1"), "reward must be one of 'consistency', 'accuracy', 'ssl4rl_rotation'"),
    (dict(pairing="greedy"), "pairing must be one of 'minimal', 'random', 'one_to_all'; got 'greedy'"),
    (dict(K=1), "num_generations (the group size K) must be an integer >= 2; got 1"),
    (dict(num_generations=1), "num_generations (the group size K) must be an integer >= 2; got 1"),   # K's other name
    (dict(data_root="/no/such/omni3d"), "data_root '/no/such/omni3d' does not exist"),
    (dict(stpes=2), "nbs/train.ipynb: unknown parameter 'stpes' (did you mean 'steps'?)"),   # papermill only warns
]


@pytest.mark.parametrize("bad,expected", INVALID, ids=[next(iter(b)) for b, _ in INVALID])
def test_invalid_parameters_fail_fast_with_the_choices(tmp_path, bad, expected):
    runs = tmp_path / "runs"
    with pytest.raises(pm.PapermillExecutionError) as error:
        execute(tmp_path, "bad.ipynb", runs_dir=str(runs), **(TINY | bad))
    assert error.value.ename == "ValueError" and expected in error.value.evalue
    assert not runs.exists()                                          # no run folder
    nb = nbformat.read(tmp_path / "bad.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    failed = next(i for i, c in enumerate(code) if any(o.get("output_type") == "error" for o in c.get("outputs", [])))
    assert "TrainParams(" in code[failed].source                      # the validation cell, before any model
    # fast because it fails before any model loads (shown by which cell failed, not timed: timed tests flake on 2 cores)
    assert all(c.get("execution_count") is None for c in code[failed + 1:])


def test_resume_ends_where_an_uninterrupted_run_ends(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file
    from consistency_amp.training.train import TrainParams, start_run, train_examples, train_run
    from consistency_amp.training.trainer import OTGRPOTrainer

    scripted = ("<think>a</think><answer>True</answer>", "<think>b</think><answer>False</answer>", "<answer>?</answer>")

    calls = []

    def generate(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        calls.append(self.state.global_step)
        tok = self.processing_class.tokenizer
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        picks = torch.randint(len(scripted), (len(prompt_ids),)).tolist()     # torch's RNG: must be restored on resume
        return [tok(scripted[i], add_special_tokens=False).input_ids + [eos] for i in picks], None

    monkeypatch.setattr(OTGRPOTrainer, "_generate_single_turn", generate)
    base = dict(task="depth", steps=4, num_generations=2, pairs_per_device=1, max_completion_length=16,
                learning_rate=5e-3, save_steps=2, runs_dir=str(tmp_path))
    examples = train_examples(TrainParams(**base))

    def train(**extra):
        params = TrainParams(**(base | extra))
        return train_run(params, start_run(params), examples)[0]

    full = train(run_name="full")
    stopped = train(run_name="parts", stop_after=2)
    status = read_json(stopped / "status.json")
    assert (status["state"], status["step"], status["stopped_by"]) == ("interrupted", 2, "stop_after=2")
    assert read_run(stopped).state == "interrupted" and read_run(stopped).resume_step == 2
    assert not (stopped / "adapter").exists() and (stopped / "checkpoints" / "checkpoint-2").is_dir()
    first_part = read_jsonl(stopped / "train_log.jsonl")[0]
    calls.clear()
    resumed = train(run_name="parts", resume=True)
    assert calls == [2, 3]                   # only steps 3 and 4 were trained again, not a restart from scratch
    assert resumed == stopped and read_json(resumed / "status.json")["state"] == "complete"
    assert len(read_json(resumed / "params.json")["resumed_at"]) == 1

    a, b = (load_file(str(r / "adapter" / ADAPTER_WEIGHTS)) for r in (full, resumed))
    assert a.keys() == b.keys()
    assert max(t.abs().max().item() for k, t in a.items() if "lora_B" in k) > 1e-4   # it learned: not vacuous
    for k in a: torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-7, msg=k)
    log_a, log_b = (read_jsonl(r / "train_log.jsonl")[0] for r in (full, resumed))
    assert [r["step"] for r in log_a] == [r["step"] for r in log_b] == [1, 2, 3, 4]
    assert log_b[:2] == first_part           # the first part's lines are kept as they were
    # GRPO's loss is 0 on policy (advantages have zero mean per group); the gradient is not
    assert any(r["reward"] > 0 for r in log_a) and all(r["grad_norm"] > 0 for r in log_a)
    same = ("reward", "reward_format", "reward_consistency", "reward_accuracy", "unparseable_rate", "loss",
            "learning_rate", "grad_norm")
    for ra, rb in zip(log_a[-2:], log_b[-2:]):
        assert {k: ra[k] for k in same} == pytest.approx({k: rb[k] for k in same}, rel=1e-6, abs=1e-9)


def test_a_stopped_run_ends_the_notebook_cleanly_with_the_way_to_resume(tmp_path):
    runs = tmp_path / "runs"
    execute(tmp_path, "stopped.ipynb", runs_dir=str(runs), **(TINY | dict(stop_after=1)))
    nb = nbformat.read(tmp_path / "stopped.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "interrupted at step 1 by stop_after=1; run this notebook again with -p resume True" in printed
    (run,) = runs.iterdir()
    assert read_run(run).state == "interrupted" and (run / "checkpoints" / "checkpoint-1").is_dir()


def kernel_of(papermill: subprocess.Popen) -> int | None:
    "The pid of the kernel that the papermill process started (its descendant running ipykernel), None before it has."
    for child in psutil.Process(papermill.pid).children(recursive=True):
        try:
            if any("ipykernel" in part for part in child.cmdline()): return child.pid
        except psutil.Error: continue
    return None


def test_a_signal_to_the_kernel_fails_the_notebook_so_papermill_exits_nonzero(tmp_path):
    runs, name = tmp_path / "runs", "signalled"
    parameters = TINY | dict(steps=500, save_steps=1000, runs_dir=str(runs), run_name=name)
    command = [sys.executable, "-m", "papermill", "-k", "python3", "--no-progress-bar", str(NOTEBOOK), str(tmp_path / "out.ipynb")]
    for key, value in parameters.items(): command += ["-p", key, str(value)]
    papermill = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log, deadline = runs / name / "train_log.jsonl", time.monotonic() + 300
    try:
        while not (log.is_file() and log.read_text().strip()):   # a step has been trained: the run's signal handler is set
            assert papermill.poll() is None, papermill.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no training step logged in 300 s"
            time.sleep(0.2)
        kernel = kernel_of(papermill)
        assert kernel is not None, "papermill's kernel process was not found"
        os.kill(kernel, signal.SIGTERM)                          # the kernel alone, as when a scheduler signals it
        out, err = papermill.communicate(timeout=300)
    finally:
        if papermill.poll() is None: papermill.kill()
    assert papermill.returncode != 0, err[-3000:]
    assert "interrupted at step" in err and "by SIGTERM; run this notebook again with -p resume True" in err, err[-3000:]
    record = read_run(runs / name)
    assert record.state == "interrupted" and 1 <= record.resume_step < 500
    assert (runs / name / "checkpoints" / f"checkpoint-{record.resume_step}").is_dir()
