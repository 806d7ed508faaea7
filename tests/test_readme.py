"""The README's code blocks, as written (the README is generated from nbs/index.ipynb by tools/make_readme.py).

* Its Python blocks run, in order, in one fresh interpreter, from a folder outside the repository.
* Every shell line names what exists: `bash` scripts are files; every `-m consistency_amp.<module>` command (torchrun
  or python) accepts each flag the line gives (its `--help` lists them); every `papermill` notebook exists and has each
  `-p` parameter in its parameters cell.
* The registry line runs as written and prints the command lines of the paper's missing runs.
"""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def shell_lines() -> list[str]:
    "The README's shell commands: continuation lines joined, comments and blank lines dropped."
    text = "\n".join(body for lang, body in BLOCKS if lang in ("bash", "sh", "shell")).replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def env(tmp: Path) -> dict:
    return os.environ | {"CONSISTENCY_AMP_RUNS": str(tmp / "runs"), "MPLBACKEND": "Agg"}


def test_readme_has_python_and_shell_blocks():
    assert sum(lang == "python" for lang, _ in BLOCKS) >= 3 and len(shell_lines()) >= 5


def test_python_blocks_run_as_written(tmp_path):
    code = "\n\n".join(body for lang, body in BLOCKS if lang == "python")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env(tmp_path), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]


def _module_flags(words: list[str]) -> tuple[list[str], list[str]]:
    "(`python -m` arguments up to the first flag: the module and its subcommands, the flags given)."
    i = words.index("-m") + 1
    first_flag = next((j for j in range(i, len(words)) if words[j].startswith("-")), len(words))
    return words[i:first_flag], [w.split("=")[0] for w in words[first_flag:] if w.startswith("--")]


def _notebook_parameters(path: Path) -> set[str]:
    nb = nbformat.read(path, as_version=4)
    (cell,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    return set(re.findall(r"^(\w+)\s*=", cell.source, re.M))


@pytest.mark.parametrize("line", shell_lines())
def test_shell_line_names_what_exists(line):
    words = shlex.split(line.replace("<run name>", "RUN"))
    if words[0] == "bash":
        assert (REPO / words[1]).is_file(), f"README: {words[1]} does not exist"
    elif "-m" in words:
        command, flags = _module_flags(words)
        assert command[0].startswith("consistency_amp."), line
        shown = subprocess.run([sys.executable, "-m", *command, "--help"], cwd=REPO, capture_output=True, text=True)
        assert shown.returncode == 0, shown.stderr[-2000:]
        assert not (unknown := [f for f in flags if f not in shown.stdout]), f"README: {' '.join(command)} has no {unknown}"
    elif words[0] == "papermill":
        notebook = REPO / words[3]
        assert notebook.is_file(), f"README: {words[3]} does not exist"
        given = {words[i + 1] for i, w in enumerate(words) if w == "-p"}
        assert not (unknown := given - _notebook_parameters(notebook)), f"README: {words[3]} has no parameter {unknown}"
    else:
        pytest.fail(f"a README shell line this test does not know how to check: {line}")


def test_registry_line_prints_the_missing_runs(tmp_path):
    (line,) = [line for line in shell_lines() if "consistency_amp.grid.registry" in line]
    words = shlex.split(line)
    assert words[0] == "python", line
    # the README's `python`, run as the interpreter under test: a machine may have only `python3` on PATH
    done = subprocess.run([sys.executable, *words[1:]], cwd=tmp_path, env=env(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "torchrun --nproc_per_node 8 -m consistency_amp.training.train" in done.stdout
    assert not (tmp_path / "runs").exists(), "--print launched or created something"


def _paper_line(kind: str) -> list[str]:
    "The words of the README's line that trains one run of the paper (Section 5.1), as `torchrun` or as `papermill`."
    lines = [line for line in shell_lines() if line.startswith(kind) and {"consistency_amp.training.train", "nbs/train.ipynb"} & set(shlex.split(line))]
    return shlex.split(lines[0])


def test_the_paper_run_lines_have_the_paper_settings(monkeypatch):
    "The README's first training command and its notebook twin train with core.PAPER_SETTINGS (the CPU defaults differ)."
    from papermill.cli import _resolve_type
    from consistency_amp.core import PAPER_SETTINGS
    from consistency_amp.training.train_cli import parse_args
    from consistency_amp.world.synthetic import default_world
    monkeypatch.chdir(REPO)                                          # the README's recipe paths are the repository's
    words = [str(default_world()) if w == "/data/omni3d" else w for w in _paper_line("torchrun")]   # an Omni3D root here
    params = parse_args(words[words.index("consistency_amp.training.train") + 1:])
    assert {k: getattr(params, k) for k in PAPER_SETTINGS} == PAPER_SETTINGS, " ".join(words)
    words = _paper_line("papermill")
    nb = nbformat.read(REPO / words[3], as_version=4)
    (cell,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    values = {}
    exec(cell.source, values)
    values |= {words[i + 1]: _resolve_type(words[i + 2]) for i, w in enumerate(words) if w == "-p"}
    values["num_generations"] = values["K"]                         # the notebook calls it K
    assert {k: values[k] for k in PAPER_SETTINGS} == PAPER_SETTINGS, " ".join(words)


def test_the_evaluation_notebook_line_evaluates_every_test_example():
    (line,) = [line for line in shell_lines() if "nbs/evaluate.ipynb" in line]
    words = shlex.split(line.replace("<run name>", "RUN"))
    assert words[words.index("max_examples") + 1] == "None", line     # the notebook's default is the CPU's 4 per split
