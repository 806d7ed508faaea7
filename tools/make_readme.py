"""Write README.md from nbs/index.ipynb (quarto, and so `nbdev_readme`, cannot be installed here).

`python tools/make_readme.py` writes it; `--check` fails when README.md is out of date.
Cells marked `#| hide` are dropped and `#|` directive lines are stripped, as nbdev does.
"""
import argparse, re, sys
from pathlib import Path

import nbformat
from nbconvert import MarkdownExporter

ROOT = Path(__file__).resolve().parents[1]
NOTICE = "<!-- generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file -->\n\n"
SCIENCE_MARK = "<!-- science summary -->"   # in nbs/index.ipynb: replaced by the paragraph figures/science.csv supports
SCIENCE_CSV = ROOT / "figures" / "science.csv"
SAMPLED_CSV = ROOT / "figures" / "science_sampled.csv"   # the sampled answers (the default runs them)
PER_TASK_CSV = ROOT / "figures" / "science_per_task.csv"  # one task at a time (--full runs them)

def science_paragraph() -> str:
    "The miniature experiment's result in one paragraph, from the stored tables (consistency_amp.science.experiment_figures.miniature_summary)."
    if not SCIENCE_CSV.exists(): return "*The miniature experiment has not been run: `bash tools/reproduce.sh` runs it.*"
    from consistency_amp.science.experiment_figures import miniature_summary
    return ("**What the miniature shows** (`figures/science.md` and `figures/science_sampled.png`, made by "
            "`bash tools/reproduce.sh` on a 2-core CPU; the paper's own transformation set and the per-task runs by `--full`): "
            + miniature_summary(SCIENCE_CSV, SAMPLED_CSV, PER_TASK_CSV))

def render() -> str:
    nb = nbformat.read(ROOT / "nbs" / "index.ipynb", as_version=4)
    kept = []
    for cell in nb.cells:
        lines = cell.source.splitlines()
        directives = [l for l in lines if re.match(r"^\s*#\s*\|", l)]
        if any(re.match(r"^\s*#\s*\|\s*hide\b", l) for l in directives): continue
        cell.source = "\n".join(l for l in lines if l not in directives).strip("\n")
        if cell.cell_type == "code":  # stderr and progress bars are noise in a README
            cell.outputs = [o for o in cell.outputs if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
        kept.append(cell)
    nb.cells = kept
    nb.metadata["language_info"] = {"name": "python"}  # fenced code blocks tagged as python
    body, _ = MarkdownExporter(exclude_input_prompt=True, exclude_output_prompt=True).from_notebook_node(nb)
    body = re.sub(r"\n{3,}", "\n\n", body).strip() + "\n"
    if SCIENCE_MARK in body: body = body.replace(SCIENCE_MARK, science_paragraph())
    return NOTICE + body

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if README.md differs from the notebook")
    args = ap.parse_args()
    text, readme = render(), ROOT / "README.md"
    if args.check:
        if not readme.exists() or readme.read_text() != text:
            sys.exit("FAIL: README.md is out of sync with nbs/index.ipynb; run `python tools/make_readme.py`")
        print("README.md is in sync with nbs/index.ipynb")
    else:
        readme.write_text(text); print(f"wrote {readme}")

if __name__ == "__main__": main()
