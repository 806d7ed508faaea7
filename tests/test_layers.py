"""The package's layers import downwards only (the map is in nbs/index.ipynb).

From the bottom: the top-level modules every layer uses (`core`, `files`), then `reward`, `world`, `training` and
`experiments`. A module may import from its own layer and the layers below it, never from one above: the reward does
not know about worlds or trainers, and nothing below `experiments` knows about figures. Imports inside functions count.

Within a layer, no two modules import each other, directly or round a longer loop: each module can be read after the
ones it imports. (An entry module's `if __name__ == "__main__"` block counts too: the command line of
`python -m consistency_amp.training.train` lives in that module, beside what it runs.)
"""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "consistency_amp"
LAYERS = ("", "reward", "world", "training", "experiments")   # "": the top level
# top-level aliases of entry points (`python -m consistency_amp.train`): they import only when run as __main__
ENTRY_ALIASES = {"consistency_amp.train"}


def layer(module: str) -> int:
    "The layer of a dotted module name under consistency_amp (a top-level module is layer 0)."
    parts = module.split(".")[1:]
    return LAYERS.index(parts[0]) if len(parts) > 1 and parts[0] in LAYERS else 0


def imports(path: Path, package: Path) -> set[str]:
    "The consistency_amp modules `path` imports, absolute or relative, at any depth of the file."
    name = ".".join(("consistency_amp",) + path.relative_to(package).with_suffix("").parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("consistency_amp.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:   # relative: from the module's package, `level` dots up
                base = name.split(".")[:-node.level]
                module = ".".join(base + ([node.module] if node.module else []))
            else: module = node.module or ""
            if module.startswith("consistency_amp."):
                found.add(module)
                found |= {f"{module}.{a.name}" for a in node.names if (package.parent / (module + "." + a.name).replace(".", "/")).with_suffix(".py").is_file()}
    return found


def upward_imports(package: Path) -> list[tuple[str, str]]:
    "(module, imported module) for every import of a higher layer."
    bad = []
    for path in sorted(package.rglob("*.py")):
        if path.stem == "_modidx": continue
        module = ".".join(("consistency_amp",) + path.relative_to(package).with_suffix("").parts)
        if module in ENTRY_ALIASES: continue       # checked by test_entry_aliases_import_only_when_run
        bad += [(module, other) for other in sorted(imports(path, package)) if layer(other) > layer(module)]
    return bad


def import_graph(package: Path) -> dict[str, set[str]]:
    "{module: the package's modules it imports}, at any depth of its file (packages' `__init__` count as modules)."
    names = {".".join(("consistency_amp",) + p.relative_to(package).with_suffix("").parts): p
             for p in sorted(package.rglob("*.py")) if p.stem != "_modidx"}
    return {m: {o for o in imports(p, package) if o in names and o != m} for m, p in names.items()}


def import_circles(package: Path) -> list[list[str]]:
    "Every set of modules that import each other round a loop (the strongly connected components of more than one)."
    graph, index, low, stack, on_stack, circles = import_graph(package), {}, {}, [], set(), []
    def visit(v):                                    # Tarjan's algorithm
        index[v] = low[v] = len(index); stack.append(v); on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on_stack: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop()); on_stack.discard(component[-1])
            if len(component) > 1: circles.append(sorted(component))
    for v in sorted(graph):
        if v not in index: visit(v)
    return sorted(circles)


def test_every_module_has_a_layer():
    assert {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()} == set(LAYERS[1:])
    assert {p.stem for p in PKG.glob("*.py")} == {"__init__", "_modidx", "core", "files"} | {a.split(".")[-1] for a in ENTRY_ALIASES}


def test_entry_aliases_import_only_when_run():
    "An entry alias at the top level imports nothing when imported: every import sits under `if __name__ == \"__main__\"`."
    for alias in ENTRY_ALIASES:
        tree = ast.parse((PKG / (alias.split(".")[-1] + ".py")).read_text())
        main_blocks = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
        outside = [n for n in tree.body if n not in main_blocks]
        assert main_blocks and not [n for top in outside for n in ast.walk(top) if isinstance(n, (ast.Import, ast.ImportFrom))], alias


def test_imports_point_down_the_layers():
    assert upward_imports(PKG) == []


def test_an_upward_import_is_found(tmp_path):
    package = tmp_path / "consistency_amp"
    for sub in ("reward", "training"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "core.py").write_text("X = 1\n")
    (package / "training" / "trainer.py").write_text("from ..reward.pairing import f\nfrom ..core import X\n")
    (package / "reward" / "pairing.py").write_text("def f():\n    from ..training import trainer\n    return trainer\n")
    assert upward_imports(package) == [("consistency_amp.reward.pairing", "consistency_amp.training.trainer")]
    (package / "reward" / "pairing.py").write_text("import consistency_amp.training.trainer\n")
    assert upward_imports(package) == [("consistency_amp.reward.pairing", "consistency_amp.training.trainer")]


def test_no_import_circles():
    assert import_circles(PKG) == []


def test_an_import_circle_is_found(tmp_path):
    package = tmp_path / "consistency_amp"
    (package / "experiments").mkdir(parents=True)
    (package / "experiments" / "__init__.py").write_text("")
    (package / "experiments" / "runner.py").write_text("from .design import Config\ndef main():\n    from .report import report\n")
    (package / "experiments" / "design.py").write_text("class Config: pass\n")
    (package / "experiments" / "report.py").write_text("from .design import Config\nfrom .figures import draw\n")
    (package / "experiments" / "figures.py").write_text("def draw():\n    pass\n")
    assert import_circles(package) == []             # a chain: runner -> report -> figures, all -> design
    (package / "experiments" / "figures.py").write_text("def draw():\n    from consistency_amp.experiments.runner import main\n")
    assert import_circles(package) == [["consistency_amp.experiments.figures", "consistency_amp.experiments.report",
                                        "consistency_amp.experiments.runner"]]   # round three, in a function
    (package / "experiments" / "design.py").write_text("from . import report\n")
    assert import_circles(package) == [["consistency_amp.experiments.design", "consistency_amp.experiments.figures",
                                        "consistency_amp.experiments.report", "consistency_amp.experiments.runner"]]


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
