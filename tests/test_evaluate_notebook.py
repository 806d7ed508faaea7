"""nbs/evaluate.ipynb runs under papermill with its defaults (the tiny model on the synthetic world, on a CPU),
writes the evaluation file of the contract into a temporary runs folder, shows a table and a chart, refuses to
overwrite it, and stops on a bad parameter before loading anything. Nothing is written into the repository."""
import json
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from dataclasses import fields

from consistency_amp.evaluation.evaluate import EvalArguments
from consistency_amp.world.tasks import TASKS

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "nbs" / "evaluate.ipynb"
PARAMETERS = tuple(f.name for f in fields(EvalArguments))     # the notebook's parameters are the command's arguments


def execute(tmp: Path, name: str, **parameters) -> Path:
    out = tmp / f"{name}.ipynb"
    pm.execute_notebook(str(NOTEBOOK), str(out), kernel_name="python3", cwd=str(tmp), progress_bar=False,
                        parameters=parameters)
    return out


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    "Run the notebook once with its defaults (runs_dir aside, examples kept): returns (tmp, runs folder, executed notebook)."
    tmp = tmp_path_factory.mktemp("evaluate_notebook")
    runs = tmp / "runs"
    return tmp, runs, execute(tmp, "defaults", runs_dir=str(runs), examples=True)


def test_notebook_is_skipped_by_nbdev_parametrised_and_stored_unexecuted():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.cells[0].cell_type == "raw" and nb.cells[0].source.strip() == "---\nskip_exec: true\n---"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    names = list(pm.inspect_notebook(str(NOTEBOOK)))
    assert names == list(PARAMETERS)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "nbs/evaluate.ipynb is stored unexecuted"


def test_defaults_write_the_contract_file(executed):
    tmp, runs, _ = executed
    assert sorted(p.name for p in runs.iterdir()) == ["base-spatial-base-large"]
    assert sorted(p.name for p in (runs / "base-spatial-base-large" / "eval").iterdir()) == ["test-first4.json"]
    stored = json.loads((runs / "base-spatial-base-large" / "eval" / "test-first4.json").read_text())
    assert (stored["run"], stored["model"], stored["split"], stored["data_root"]) == ("base-spatial-base-large", "spatial-base-large", "test", None)
    assert stored["decoding"]["greedy"] is True and stored["max_examples"] == 4 and stored["consistency_samples"] == 1
    assert [(r["task"], r["source"]) for r in stored["results"]] == [(t, s) for t in TASKS for s in ("SUNRGBD", "KITTI")]
    for row in stored["results"]:
        assert 1 <= row["n"] <= 4
        for key in ("accuracy", "format_rate", "unparseable_rate", "self_consistency"):
            assert 0.0 <= row[key] <= 1.0
    assert len(stored["examples"]) == sum(r["n"] for r in stored["results"])
    assert {(e["task"], e["source"]) for e in stored["examples"]} == {(r["task"], r["source"]) for r in stored["results"]}
    assert not (REPO / "nbs" / "runs").exists()


def test_executed_notebook_shows_table_and_chart(executed):
    _, _, out = executed
    nb = nbformat.read(out, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert any("text/html" in o.get("data", {}) and "self_consistency" in o["data"]["text/html"] for o in outputs)


def test_existing_evaluation_is_not_overwritten(executed, monkeypatch):
    tmp, runs, _ = executed
    before = (runs / "base-spatial-base-large" / "eval" / "test-first4.json").read_bytes()
    monkeypatch.setenv("CONSISTENCY_AMP_RUNS", str(runs))       # the runs folder from the environment this time
    with pytest.raises(pm.PapermillExecutionError, match="never overwritten silently"):
        execute(tmp, "again", run="base-spatial-base-large")
    assert (runs / "base-spatial-base-large" / "eval" / "test-first4.json").read_bytes() == before


@pytest.mark.parametrize("parameters, message", [
    (dict(tasks="height"), "tasks must be one of 'orientation', 'depth'"),
    (dict(run="no-such-run"), "is not a run folder"),
    (dict(max_exampels=10), r"unknown parameter 'max_exampels' \(did you mean 'max_examples'\?\)"),   # papermill only warns
])
def test_bad_parameters_stop_early(tmp_path, parameters, message):
    with pytest.raises(pm.PapermillExecutionError, match=message) as error:
        execute(tmp_path, "bad", runs_dir=str(tmp_path / "runs"), **parameters)
    assert "EvalArguments(" in error.value.source                  # stopped in the parameter checks, before evaluating
    assert not (tmp_path / "runs").exists()
