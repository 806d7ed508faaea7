"""The package's layers import downwards only (the functions and the map are in nbs/00_layout.ipynb).

From the bottom: the top-level modules every layer uses (`core`, `files`), then `reward`, `world`, `training`,
`evaluation`, `grid` (the paper's run grid), `figures` (the paper's figures) and `science` (the miniature experiment).
A module may import from its own layer and the layers below it, never from one above: the reward does not know about
worlds or trainers, evaluation knows nothing of figures, and nothing below `science` knows about the miniature
experiment. Imports inside functions count.

Within a layer, no two modules import each other, directly or round a longer loop: each module can be read after the
ones it imports. (An entry module's `if __name__ == "__main__"` block counts too: the command line of
`python -m consistency_amp.training.train` lives in that module, beside what it runs.)

`experiments` holds no code, only the command lines' older names (`python -m consistency_amp.experiments.evaluate`,
...), like the top-level `train`: aliases that import nothing unless run.
"""
import ast
from pathlib import Path

from consistency_amp.layout import (ENTRY_ALIASES, LAYERS, PACKAGE as PKG, import_circles, module_path as alias_path,
                                    notebook_modules, out_of_order, upward_imports)


def test_every_module_has_a_layer():
    assert {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()} == set(LAYERS[1:])
    assert set(PKG.glob("*.py")) == {PKG / f"{m}.py" for m in ("__init__", "_modidx", "core", "files", "layout")} | {
        alias_path(a) for a in ENTRY_ALIASES if a.count(".") == 1}
    assert set((PKG / "experiments").glob("*.py")) == {PKG / "experiments" / "__init__.py"} | {
        alias_path(a) for a in ENTRY_ALIASES if a.startswith("consistency_amp.experiments.")}   # aliases only


def test_entry_aliases_import_only_when_run():
    "An entry alias imports nothing when imported: every import sits under `if __name__ == \"__main__\"`."
    for alias in ENTRY_ALIASES:
        tree = ast.parse(alias_path(alias).read_text())
        main_blocks = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
        outside = [n for n in tree.body if n not in main_blocks]
        assert main_blocks and not [n for top in outside for n in ast.walk(top) if isinstance(n, (ast.Import, ast.ImportFrom))], alias


def test_imports_point_down_the_layers():
    assert upward_imports(PKG) == []


def test_no_import_circles():
    assert import_circles(PKG) == []


def test_notebooks_read_in_order():
    "Numbered 00, 01, ... without letters or repeats, each after the notebooks of the modules it imports."
    nbs = PKG.parent / "nbs"
    modules = notebook_modules(nbs)
    assert sorted(int(stem.split("_")[0]) for stem in modules) == list(range(len(modules)))
    assert out_of_order(nbs) == []


RESEARCH = PKG.parent / "research"


def research_imports(folders) -> list[tuple[str, str]]:
    "(file, what it takes from research/) for every import of a research script, or sys.path entry into research/, in `folders`."
    scripts = {p.stem for p in RESEARCH.glob("*.py")}
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                        [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                found += [(str(path), n) for n in names if n.split(".")[0] in scripts | {"research"}]
                if isinstance(node, ast.Call) and "sys.path" in ast.unparse(node.func) and "research" in ast.unparse(node):
                    found.append((str(path), ast.unparse(node)))
    return found


def test_the_product_and_its_tests_import_nothing_from_research():
    assert RESEARCH.is_dir() and list(RESEARCH.glob("*.py"))
    assert research_imports([PKG, PKG.parent / "tests"]) == []


def test_a_research_import_is_found(tmp_path):
    (tmp_path / "a.py").write_text("import pretext_base_probe\n")
    (tmp_path / "b.py").write_text("import sys\nsys.path.insert(0, 'research')\n")
    (tmp_path / "c.py").write_text("from consistency_amp.training import pretext_base\n")
    assert [Path(f).name for f, _ in research_imports([tmp_path])] == ["a.py", "b.py"]


def test_the_index_table_names_every_numbered_notebook():
    "The README's table of layers (nbs/index.ipynb) lists each numbered notebook, so a new or renumbered one is not left out of it."
    index = (PKG.parent / "nbs" / "index.ipynb").read_text()
    assert [stem for stem in notebook_modules(PKG.parent / "nbs") if f"`{stem}`" not in index] == []


def test_notebook_pointers_name_notebooks_that_exist():
    """Every `nbs/NN_name.ipynb` named in a tracked file exists: a renumbering (tools of the sessions that add a notebook
    shift the later ones) must carry the READMEs, scripts, recipes and comments with it. `benchmarks/results/` is left
    out: its files record what was run on their date, under that day's names."""
    import re, subprocess
    root = PKG.parent
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    pointer = re.compile(r"nbs/\d\d_[A-Za-z0-9_]+\.ipynb")
    stale = [f"{name}: {p}" for name in tracked if not name.startswith("benchmarks/results/")
             and (root / name).is_file() and (root / name).suffix in (".md", ".py", ".sh", ".yaml", ".ipynb", ".sbatch", ".toml", "")
             for p in sorted(set(pointer.findall((root / name).read_text(errors="ignore")))) if not (root / p).exists()]
    assert not stale, stale
