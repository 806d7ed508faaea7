"""consistency_amp.training.runs beyond the notebook's examples: light imports, atomic writes under concurrent readers, racing
creators, and tolerant reading of damaged runs."""
import json
import multiprocessing as mp
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from consistency_amp.training.runs import create_run, PARAM_KEYS, read_json, STATUS_FILE, write_json, write_status
from consistency_amp.training.run_records import list_runs, read_run

TINY = dict(task="depth", source="SUNRGBD", reward="consistency", pairing="minimal", model="tiny-qwen2.5-vl",
            model_size="tiny", data_root=None, steps=4, num_generations=2, pairs_per_device=1, learning_rate=1e-6,
            temperature=1.0, beta=0.0, seed=0, label_noise=0.0, max_completion_length=8)


def test_reading_runs_imports_neither_torch_nor_transformers(tmp_path):
    create_run("r", TINY, runs=tmp_path)
    code = ("import sys; from consistency_amp.training.run_records import list_runs, read_run; "
            f"runs = list_runs({str(tmp_path)!r}); assert [r.name for r in runs] == ['r'], runs; "
            "heavy = [m for m in ('torch', 'transformers', 'trl', 'peft') if m in sys.modules]; "
            "assert not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_readers_never_see_a_partial_status(tmp_path):
    run = create_run("r", TINY, runs=tmp_path)
    stop, seen, errors = threading.Event(), ([], []), []

    def reader(steps):
        while not stop.is_set():
            try: steps.append(read_json(run / STATUS_FILE)["step"])
            except Exception as e: errors.append(repr(e))       # a torn or missing file would land here

    threads = [threading.Thread(target=reader, args=(steps,)) for steps in seen]
    for t in threads: t.start()
    for step in range(300): write_status(run, "running", step, 300, padding="x" * 2000)
    stop.set()
    for t in threads: t.join()
    assert errors == [] and all(len(steps) > 10 and steps == sorted(steps) for steps in seen)   # each reader: in order
    assert sorted(p.name for p in run.iterdir()) == [".writer.lock", "checkpoints", "eval", "params.json", "status.json",
                                                     "train_log.jsonl"]          # no temporary files left (the run lock stays)


def _create(runs, seed, queue):
    try:
        create_run("race", TINY | {"seed": seed}, runs=runs)
        queue.put(("created", seed))
    except FileExistsError as e:
        queue.put(("refused", str(e)))


def test_racing_creators_one_wins_and_the_run_is_whole(tmp_path):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_create, args=(str(tmp_path), seed, queue)) for seed in range(4)]
    for p in procs: p.start()
    for p in procs: p.join(120)
    results = [queue.get(timeout=10) for _ in procs]
    created = [r for r in results if r[0] == "created"]
    assert len(created) == 1, results
    assert all(any(m in r[1] for m in ("already exists", "created by another process", "being written by another process"))
               for r in results if r[0] == "refused")
    assert read_json(tmp_path / "race" / "params.json")["seed"] == created[0][1]
    assert [p.name for p in tmp_path.iterdir()] == ["race"]


def test_eval_files_are_never_overwritten_silently(tmp_path):
    run = create_run("base", {"kind": "base", "model": "Qwen/Qwen2.5-VL-7B-Instruct", "model_size": "7B"}, runs=tmp_path)
    assert not read_run(run).complete and read_run(run).missing == ["eval/*.json"]
    write_json(run / "eval" / "test.json", {"run": "base", "results": []}, overwrite=False)
    with pytest.raises(FileExistsError, match="already exists"):
        write_json(run / "eval" / "test.json", {"run": "other"}, overwrite=False)
    record = read_run(run)
    assert record.complete and record.evals == {"test": {"run": "base", "results": []}}
    assert set(PARAM_KEYS) <= set(record.params) and record.params["task"] is None


def test_damaged_files_are_reported_not_raised(tmp_path):
    run = create_run("damaged", TINY, runs=tmp_path)
    (run / "params.json").write_text("{not json")
    (run / "status.json").write_text(json.dumps(["not", "an", "object"]))
    (run / "train_log.jsonl").write_text('{"step": 1}\n[1, 2]\n')
    (run / "eval" / "bad.json").write_text("")
    (run / "adapter").mkdir()
    (run / "adapter" / "adapter_model.safetensors").write_bytes(b"")
    record = read_run(run)
    assert record.params is None and record.status is None and not record.complete
    text = " | ".join(record.problems)
    for expected in ("params.json: unreadable", "status.json: not a JSON object", "train_log.jsonl: line 2 is not a JSON object",
                     "eval/bad.json: unreadable", "train_log.jsonl: last line lacks"):
        assert expected in text, (expected, record.problems)
    assert record.missing == ["adapter/adapter_config.json", "eval/*.json"]
    assert [r.name for r in list_runs(tmp_path)] == ["damaged"]
