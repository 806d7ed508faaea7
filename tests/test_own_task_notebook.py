"""nbs/your_own_task.ipynb runs in a real Jupyter kernel, as a reader runs it (papermill), not only under nbdev_test's
execnb: transformers' notebook progress bar, which only a Jupyter kernel shows, failed at the end of its stopped run
(stopped early at step 2: transformers' `NotebookProgressBar.update_bar` divides by None). Its outputs say what the
prose says they say. Nothing is written into the repository (the notebook writes into temporary folders)."""
from pathlib import Path

import nbformat
import papermill as pm

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "nbs" / "your_own_task.ipynb"


def outputs_text(nb) -> str:
    return "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_the_own_task_notebook_runs_in_a_jupyter_kernel(tmp_path):
    out = tmp_path / "your_own_task.ipynb"
    pm.execute_notebook(str(NOTEBOOK), str(out), kernel_name="python3", cwd=str(tmp_path), progress_bar=False)
    text = outputs_text(nbformat.read(out, as_version=4))
    assert "stopped at step 3; checkpoints: ['checkpoint-3']" in text
    assert "finished at step 5; train_log.jsonl steps: [1, 2, 3, 4, 5]" in text
    assert "self-consistency %" in text                     # the image pairs' evaluation table was printed
