"""nbs/figures.ipynb runs under papermill (as tools/reproduce.sh runs it) and writes readable figures and correct tables.

The notebook is executed once per test session into a temporary folder, from a working directory outside the
repository (so the notebook's own path resolution is exercised), with an empty runs folder: every figure is written,
every run-based value is drawn as missing, and the comparison with the paper has no user value except the data's
(Table 1). Nothing is written into the repository."""
import math
from pathlib import Path

import pandas as pd
import papermill as pm
import pytest
from PIL import Image

from consistency_amp.reward.baseline import APPENDIX_A_KS, expected_reward
from consistency_amp.core import PAIRINGS
from consistency_amp.world.real_frames import REAL_SAMPLES_RELATIVE, real_samples_root

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "nbs" / "figures.ipynb"
STEM = "pairing_expected_reward"
FIGURE_STEMS = ("fig1_concept", "fig2_same_task", "fig3_cross_task", "fig4_cross_domain", "fig5_baselines",
                "fig6_label_noise", "fig7_numeric", "fig8_pairing", STEM, "appendixC_qualitative",
                "appendixD_synthetic_SUNRGBD", "appendixD_synthetic_KITTI")
DATA_STEMS = ("fig2_same_task", "fig3_cross_task", "fig4_cross_domain", "fig5_baselines", "fig6_label_noise",
              "fig7_numeric", "fig8_pairing")
REAL_SAMPLES = real_samples_root() or next((p for p in [(REPO / REAL_SAMPLES_RELATIVE).resolve()] if p.is_dir()), None)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    "Run the notebook once: returns (out_dir, executed notebook path)."
    tmp = tmp_path_factory.mktemp("figures_notebook")
    out_dir, executed_nb = tmp / "figures", tmp / "figures-executed.ipynb"
    (tmp / "runs").mkdir()
    pm.execute_notebook(str(NOTEBOOK), str(executed_nb), kernel_name="python3", cwd=str(tmp), progress_bar=False,
                        parameters={"out_dir": str(out_dir), "runs_dir": str(tmp / "runs")})
    return out_dir, executed_nb


def test_notebook_is_skipped_by_nbdev_and_parametrised():
    import nbformat
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.cells[0].cell_type == "raw" and "skip_exec: true" in nb.cells[0].source
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and 'out_dir = "../figures"' in tagged[0].source and 'runs_dir = "../runs"' in tagged[0].source
    for line in ('scale = "mini"', "data_root = None", "real_samples = None", "replace_stored = False"): assert line in tagged[0].source
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "nbs/figures.ipynb is stored unexecuted"


def test_a_runs_dir_that_is_not_there_stops_before_any_figure(tmp_path):
    "A mistyped runs_dir must not redraw every figure as missing (by default over the stored figures)."
    with pytest.raises(pm.PapermillExecutionError) as error:
        pm.execute_notebook(str(NOTEBOOK), str(tmp_path / "executed.ipynb"), kernel_name="python3", cwd=str(tmp_path),
                            progress_bar=False, parameters={"out_dir": str(tmp_path / "figures"), "runs_dir": str(tmp_path / "typo")})
    assert error.value.ename == "FileNotFoundError" and "runs_dir" in error.value.evalue and "is not a folder" in error.value.evalue
    (tmp_path / "runs").mkdir(); (tmp_path / "a-file").write_text("")
    with pytest.raises(pm.PapermillExecutionError) as error:   # an out_dir that cannot be made: said before the first figure
        pm.execute_notebook(str(NOTEBOOK), str(tmp_path / "executed.ipynb"), kernel_name="python3", cwd=str(tmp_path),
                            progress_bar=False, parameters={"out_dir": str(tmp_path / "a-file" / "figures"), "runs_dir": str(tmp_path / "runs")})
    assert error.value.ename == "ValueError" and "out_dir" in error.value.evalue and "cannot be made" in error.value.evalue


def test_a_mistyped_parameter_stops_before_anything_is_written(tmp_path):
    "papermill only warns of `-p out_dri ...`: the figures would go to the default out_dir, over the stored ones."
    (tmp_path / "runs").mkdir()
    with pytest.raises(pm.PapermillExecutionError) as error:
        pm.execute_notebook(str(NOTEBOOK), str(tmp_path / "executed.ipynb"), kernel_name="python3", cwd=str(tmp_path),
                            progress_bar=False, parameters={"out_dri": str(tmp_path / "figures"), "runs_dir": str(tmp_path / "runs")})
    assert error.value.ename == "ValueError"
    assert "unknown parameter 'out_dri' (did you mean 'out_dir'?)" in error.value.evalue
    assert not (tmp_path / "figures").exists()
    import ast, nbformat   # the names the check knows are the parameters cell's, no more, no fewer
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (parameters,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    check = next(n for c in nb.cells if c.cell_type == "code" for n in ast.walk(ast.parse(c.source))
                 if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "check_notebook_parameters")
    assert list(ast.literal_eval(check.args[2])) == [n.targets[0].id for n in ast.parse(parameters.source).body]


def test_writes_every_figure_and_table(executed):
    out_dir, executed_nb = executed
    expected = {f"{s}.{ext}" for s in FIGURE_STEMS for ext in ("png", "pdf")}
    expected |= {f"{s}.csv" for s in DATA_STEMS} | {f"{STEM}.{ext}" for ext in ("csv", "md")}
    expected |= {f"{s}.{ext}" for s in ("paper_comparison", "table1_dataset_statistics") for ext in ("csv", "md")}
    if REAL_SAMPLES is not None: expected |= {f"appendixD_real_{s}.{ext}" for s in ("SUNRGBD", "KITTI") for ext in ("png", "pdf")}
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(expected)
    assert executed_nb.is_file()
    for stem in FIGURE_STEMS:
        with Image.open(out_dir / f"{stem}.png") as im:
            im.verify()
        assert (out_dir / f"{stem}.pdf").read_bytes().startswith(b"%PDF-")


def test_without_runs_every_drawn_value_is_missing(executed):
    out_dir, _ = executed
    for stem in DATA_STEMS:
        data = pd.read_csv(out_dir / f"{stem}.csv")
        assert len(data) and data.value.isna().all(), stem
        assert data.paper.notna().any(), f"{stem}: no paper reference mark"


def test_comparison_has_user_values_only_from_the_data(executed):
    out_dir, _ = executed
    table = pd.read_csv(out_dir / "paper_comparison.csv", keep_default_na=False)
    from consistency_amp.figures.figure_data import paper_numbers
    assert table.key.tolist() == list(paper_numbers().index)
    runs_based = ~table.key.str.startswith("table1_")
    assert (table[runs_based].user == "missing").all() and (table[runs_based].difference == "n/a").all()
    assert (table[~runs_based].user != "missing").all() and len(table[~runs_based]) == 8
    md = (out_dir / "paper_comparison.md").read_text()
    assert "| same_task_7B_consistency | Figure 2 | % | 76.8 | missing | n/a |" in md and "mini scale" in md


def test_executed_notebook_reports_what_is_missing(executed):
    import nbformat
    _, executed_nb = executed
    nb = nbformat.read(executed_nb, as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "run registry (mini scale)" in text and "all figures: 0/" in text
    assert "figure_2: drawn without" in text and "\n  missing " in text                 # said where it is drawn, too
    assert "note: base: no complete run" in text                                  # Appendix C says why it is empty
    if REAL_SAMPLES is None: assert "Appendix D, real frames: skipped" in text


def test_png_and_pdf_are_readable(executed):
    out_dir, _ = executed
    with Image.open(out_dir / f"{STEM}.png") as im:
        im.verify()
    with Image.open(out_dir / f"{STEM}.png") as im:       # verify() leaves the image unusable: reopen to inspect
        assert im.format == "PNG" and im.width > 1000 and im.height > 300
    pdf = (out_dir / f"{STEM}.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and b"%%EOF" in pdf[-1024:] and len(pdf) > 10_000


def test_table_holds_the_exact_values(executed):
    out_dir, _ = executed
    table = pd.read_csv(out_dir / f"{STEM}.csv").set_index(["strategy", "method"])
    assert list(table.columns) == [str(K) for K in APPENDIX_A_KS]
    assert sorted(table.index) == sorted((s, m) for s in PAIRINGS for m in ("exact", "approx"))
    for s in PAIRINGS:
        for K in APPENDIX_A_KS:
            assert table.loc[(s, "exact"), str(K)] == pytest.approx(expected_reward(K, s), abs=1e-12)
            assert table.loc[(s, "approx"), str(K)] == pytest.approx(expected_reward(K, s, method="approx"), abs=1e-12)
    # K = 8: exact C(16, 8) / 4^8 = 0.19638..., slightly below the paper's 1/sqrt(8 pi) = 0.19947...
    assert table.loc[("minimal", "exact"), "8"] == pytest.approx(0.1964, abs=5e-5)
    assert table.loc[("minimal", "exact"), "8"] == pytest.approx(math.comb(16, 8) / 4**8, abs=1e-12)
    assert table.loc[("minimal", "approx"), "8"] == pytest.approx(1 / math.sqrt(8 * math.pi), abs=1e-12)
    assert (table.loc[[("random", "exact"), ("one_to_all", "exact")]] == 0.5).all().all()
    md = (out_dir / f"{STEM}.md").read_text()
    assert "| minimal | exact | 0.3750 | 0.2734 | 0.1964 |" in md


def test_executed_notebook_shows_the_figure(executed):
    import nbformat
    _, executed_nb = executed
    nb = nbformat.read(executed_nb, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert any("text/markdown" in o.get("data", {}) for o in outputs)


def test_other_data_or_runs_never_write_over_the_stored_figures(tmp_path):
    "A user's own data_root or runs_dir with the default out_dir (the repository's figures/) is refused before any figure."
    (tmp_path / "runs").mkdir()
    stored = {p: p.stat().st_mtime_ns for p in (REPO / "figures").rglob("*") if p.is_file()}
    for parameters in ({"runs_dir": str(tmp_path / "runs")}, {"runs_dir": str(REPO / "runs"), "data_root": str(tmp_path)}):
        with pytest.raises(pm.PapermillExecutionError) as error:
            pm.execute_notebook(str(NOTEBOOK), str(tmp_path / "executed.ipynb"), kernel_name="python3", cwd=str(tmp_path),
                                progress_bar=False, parameters=parameters)
        assert error.value.ename == "ValueError" and "out_dir is the repository's stored figures" in error.value.evalue
        assert "-p replace_stored True" in error.value.evalue
    assert {p: p.stat().st_mtime_ns for p in (REPO / "figures").rglob("*") if p.is_file()} == stored


def test_a_data_root_with_one_source_draws_what_it_can(tmp_path):
    "A KITTI-only Omni3D root: Figure 1 from a KITTI example, Table 1 and Appendix D of KITTI alone, no SUN RGB-D figure."
    from consistency_amp.world.synthetic import default_world
    world, root = Path(default_world()), tmp_path / "kitti_only"
    (root / "Omni3D").mkdir(parents=True); (root / "images").symlink_to(world / "images")
    for split_file in (world / "Omni3D").glob("KITTI_*.json"): (root / "Omni3D" / split_file.name).symlink_to(split_file)
    (tmp_path / "runs").mkdir()
    out = tmp_path / "figures"
    pm.execute_notebook(str(NOTEBOOK), str(tmp_path / "executed.ipynb"), kernel_name="python3", cwd=str(tmp_path),
                        progress_bar=False, parameters={"out_dir": str(out), "runs_dir": str(tmp_path / "runs"),
                                                        "data_root": str(root)})
    assert (out / "fig1_concept.png").is_file() and (out / "appendixD_omni3d_KITTI.png").is_file()
    assert not (out / "appendixD_omni3d_SUNRGBD.png").exists()
    assert set(pd.read_csv(out / "table1_dataset_statistics.csv").source) == {"KITTI"}
