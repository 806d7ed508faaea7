"""One-off tool (issue 27, session 16): Split exported cells holding several public functions/classes into one public def per cell (issue 27, item 4).
Leading private helpers, constants and comments go with the public def that follows them; trailing statements stay
with the last. The exported code is unchanged line for line (checked separately)."""
import ast, json, sys, uuid, statistics
from pathlib import Path

LONG = 30   # a cell longer than this is split before every function or class, private ones too

def is_public_def(node):
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_")

def pieces(src: str):
    lines = src.split("\n")
    head, body = lines[0], lines[1:]          # '#| export'
    code = "\n".join(body)
    try: tree = ast.parse(code)
    except SyntaxError: return None
    nodes = tree.body
    long = len(body) > LONG
    boundary = (lambda n: isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))) if long else is_public_def
    if sum(boundary(n) for n in nodes) < 2: return None
    if any(l.startswith("#|") for l in body): return None      # other directives: leave alone
    groups, current = [], []
    for n in nodes:
        current.append(n)
        if boundary(n): groups.append(current); current = []
    if current: groups[-1] += current                          # trailing statements stay with the last def
    out, start = [], 0
    for i, g in enumerate(groups):
        end = g[-1].end_lineno if i < len(groups) - 1 else len(body)
        chunk = body[start:end]
        while chunk and not chunk[-1].strip(): chunk.pop()
        # blank lines at the start of a chunk are dropped
        while chunk and not chunk[0].strip(): chunk.pop(0)
        out.append("\n".join([head] + chunk))
        start = end
    return out

def process(path: Path, write: bool):
    nb = json.load(open(path)); changed = False; cells = []
    for c in nb["cells"]:
        s = "".join(c["source"])
        if c["cell_type"] == "code" and s.startswith("#| export\n") and (ps := pieces(s)):
            for k, p in enumerate(ps):
                d = dict(cell_type="code", execution_count=None, id=c["id"] if k == 0 else uuid.uuid4().hex[:8],
                         metadata=c.get("metadata", {}), outputs=[], source=p.splitlines(keepends=True))
                cells.append(d)
            changed = True
        else: cells.append(c)
    if write and changed:
        nb["cells"] = cells; json.dump(nb, open(path, "w"), indent=1, ensure_ascii=False); open(path, "a").write("\n")
    return cells

def stats(cell_lists):
    ns = [len("".join(c["source"]).splitlines()) - 1 for cells in cell_lists for c in cells
          if c["cell_type"] == "code" and "".join(c["source"]).startswith("#| export")]
    return len(ns), statistics.median(ns), sum(n > 30 for n in ns) / len(ns), sum(n >= 50 for n in ns)

if __name__ == "__main__":
    write = "--write" in sys.argv
    paths = sorted(Path("nbs").glob("*.ipynb"))
    print("before", stats([json.load(open(p))["cells"] for p in paths]))
    print("after ", stats([process(p, write) for p in paths]))
