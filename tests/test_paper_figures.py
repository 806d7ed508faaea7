"""The paper's figures draw exactly the stored runs: a run that does not exist (or is incomplete, or of another scale,
model size or pairing) is drawn as missing, never as a number, and a run that exists is drawn at its exact value.

Each figure function returns (fig, data); these tests read the figure back through the artists' ids
(`paper_figures.gid`) and compare it with `data`, and compare `data` with the fixture runs."""
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from consistency_amp.figures.plotting import artists_by_gid, FIGURE_TASKS, gid, save_figure
from consistency_amp.figures.paper_figures import (baselines_figure, cross_domain_figure, cross_task_figure,
                                                       label_noise_figure, NOISE_AXIS, numeric_figure, pairing_figure,
                                                       same_task_figure)
from consistency_amp.figures.paper_comparison import comparison_markdown, paper_comparison, write_comparison
from consistency_amp.figures.figure_data import paper_numbers, paper_numbers_path, results_rows, value_at
from consistency_amp.world.tasks import BOOLEAN_TASKS

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO.parent / "shared" / "paper" / "000_bc9ab3b45df066af.txt"
DECOY = (0.123, 0.321)    # accuracies of runs that must never be drawn: incomplete, or of the other scale


def row(run, kind, task, accuracy, eval_task=None, source="SUNRGBD", size="7B", **kw):
    return dict(run=run, kind=kind, model_size=size, train_task=task, train_source=None if kind != "train" else "SUNRGBD",
                eval_task=eval_task or task, eval_source=source, accuracy=accuracy, scale=kw.pop("scale", "paper"), **kw)


def decoys(**kw):
    "An incomplete run and a mini-scale stand-in of the same spec: both must stay invisible at the paper scale."
    return [row("decoy-incomplete", accuracy=DECOY[0], complete=False, **kw),
            row("decoy-mini", accuracy=DECOY[1], stands_in_for=kw.get("size", "7B"), **(kw | dict(size="tiny", scale="mini")))]


def no_decoy_drawn(data: pd.DataFrame):
    drawn = data.value.dropna()
    for d in DECOY:
        assert not np.isclose(drawn, 100 * d).any(), f"a decoy run ({d}) was drawn"
    assert not data.runs.str.contains("decoy").any()


def assert_readable(fig, data, tmp_path, stem):
    paths = save_figure(fig, tmp_path, stem, data)
    with Image.open(paths["png"]) as im:
        im.verify()
    with Image.open(paths["png"]) as im:
        assert im.format == "PNG" and im.width > 600 and im.height > 300
    pdf = paths["pdf"].read_bytes()
    assert pdf.startswith(b"%PDF-") and b"%%EOF" in pdf[-1024:]
    back = pd.read_csv(paths["csv"])
    np.testing.assert_array_equal(back.value.isna(), data.value.isna())
    np.testing.assert_allclose(back.value.dropna(), data.value.dropna())


def assert_bars_match(fig, data):
    "Every present value is a bar of exactly its height with its label; every missing one a placeholder and no bar."
    drawn = artists_by_gid(fig)
    for r in data.itertuples():
        key = (r.panel, r.group, r.series)
        if math.isnan(r.value):
            assert gid("missing", *key) in drawn, f"missing {key} has no placeholder"
            assert gid("bar", *key) not in drawn and gid("label", *key) not in drawn, f"missing {key} was drawn"
        else:
            assert drawn[gid("bar", *key)].get_height() == r.value, key
            assert drawn[gid("label", *key)].get_text() == f"{r.value:.1f}", key
            assert gid("missing", *key) not in drawn
        if math.isfinite(r.paper):
            assert list(drawn[gid("paper", *key)].get_ydata()) == [r.paper] * 2
        else:
            assert gid("paper", *key) not in drawn


# ------------------------------------------------------------------------------------------------ paper numbers
def test_paper_numbers_are_packaged_and_well_formed():
    numbers = paper_numbers()
    assert paper_numbers_path().parent.name == "data" and paper_numbers_path().parent.parent.name == "consistency_amp"
    tomllib = pytest.importorskip("tomllib")   # Python >= 3.11
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "data/*.csv" in package_data["consistency_amp"]   # installed with the package, not only in a checkout
    assert numbers.index.is_unique and len(numbers) >= 60
    expected = {"same_task_7B_consistency": 76.8, "same_task_7B_accuracy": 79.6, "same_task_3B_consistency": 74.1,
                "same_task_3B_accuracy": 76.4, "same_task_7B_base": 63.4, "same_task_3B_base": 58.2,
                "cross_task_offdiag_accuracy": 10.1, "cross_task_offdiag_consistency": 9.2,
                "cross_task_diag_accuracy": 14.3, "cross_task_diag_consistency": 13.5,
                "cross_domain_diag_accuracy": 15.6, "cross_domain_diag_consistency": 14.7,
                "cross_domain_offdiag_accuracy": 10.9, "cross_domain_offdiag_consistency": 10.5, "kitti_base_7B": 68.2,
                "joint_consistency": 83.8, "joint_accuracy": 86.5, "visual_jigsaw_best_margin": 3.6,
                "ssl4rl_margin_min": 13, "ssl4rl_margin_max": 24, "joint_base": 60.6, "noise_10_accuracy": 84.1,
                "noise_20_accuracy": 82.6, "noise_30_accuracy": 79.6, "noise_40_accuracy": 76.4,
                "counting_accuracy": 68.8, "counting_consistency": 68.3, "counting_base": 0.1,
                "absolute_distance_accuracy": 41.4, "absolute_distance_consistency": 39.1,
                "pairing_self_task_minimal": 76.8, "pairing_self_task_random": 74.7, "pairing_self_task_one_to_all": 75.8,
                "pairing_transfer_minimal": 11.7, "pairing_transfer_random": 8.2, "pairing_transfer_one_to_all": 10.3,
                "pairing_step_time_minimal": 23.2, "pairing_step_time_random": 22.9, "pairing_step_time_one_to_all": 23.1}
    for key, value in expected.items():
        assert numbers.loc[key, "value"] == value, key
    assert set(numbers.figure) == {f"Figure {i}" for i in range(2, 9)} | {"Table 1"}


@pytest.mark.skipif(not PAPER.is_file(), reason="the paper's source is not next to the repository")
def test_every_quote_is_verbatim_from_the_paper_and_states_its_value():
    text = PAPER.read_text()
    for key, r in paper_numbers().iterrows():
        assert r.quote in text, f"{key}: quote not found in the paper"
        shown = f"{int(r.value):,}" if r.unit == "examples" else f"{r.value:g}"
        assert re.search(r"(?<![\d.])" + re.escape(shown) + r"(?!\d)", r.quote), (key, shown)


# ------------------------------------------------------------------------------------------------ Figure 2
def test_same_task_figure_draws_exactly_the_runs_that_exist(tmp_path):
    rows = [row("base-7B", "base", None, 0.6, eval_task=t) for t in FIGURE_TASKS]
    rows += [row("depth-acc", "train", "depth", 0.8125, reward="accuracy"),
             row("size-cons", "train", "size", 0.70, reward="consistency", pairing="minimal"),
             row("size-cons-random", "train", "size", 0.99, reward="consistency", pairing="random")]   # other pairing
    rows += decoys(kind="train", task="depth", reward="consistency", pairing="minimal")
    rows += decoys(kind="base", task=None, eval_task="orientation", size="3B")
    fig, data = same_task_figure(results_rows(rows), scale="paper")
    present = data[data.value.notna()]
    assert sorted(zip(present.panel, present.group, present.series)) == sorted(
        [("7B", t, "base") for t in FIGURE_TASKS] + [("7B", "average", "base"), ("7B", "depth", "accuracy"),
                                                     ("7B", "size", "consistency")])
    assert value_at(data, "7B", "depth", "accuracy") == 81.25 and value_at(data, "7B", "average", "base") == 60.0
    assert data[data.panel == "3B"].value.isna().all()
    no_decoy_drawn(data)
    assert_bars_match(fig, data)
    assert_readable(fig, data, tmp_path, "fig2")


# ------------------------------------------------------------------------------------------------ Figures 3, 4
@pytest.mark.parametrize("make, source", [(cross_task_figure, "SUNRGBD"), (cross_domain_figure, "KITTI")])
def test_transfer_heatmaps_draw_cells_only_for_existing_runs(tmp_path, make, source):
    base = dict(zip(FIGURE_TASKS, (0.6, 0.7, 0.5, 0.65)))
    rows = [row("base-7B", "base", None, b, eval_task=t, source=source) for t, b in base.items()]
    rows += [row("depth-acc", "train", "depth", 0.8, eval_task=t, source=source, reward="accuracy") for t in FIGURE_TASKS]
    rows += [row("size-cons", "train", "size", 0.75, eval_task="depth", source=source, reward="consistency", pairing="minimal")]
    rows += decoys(kind="train", task="orientation", eval_task="depth", source=source, reward="accuracy")
    fig, data = make(results_rows(rows), scale="paper")
    heat = data[data.panel.isin(["accuracy", "consistency"])]
    present = heat[heat.value.notna()]
    assert sorted(zip(present.panel, present.group, present.series)) == sorted(
        [("accuracy", "depth", t) for t in FIGURE_TASKS] + [("consistency", "size", "depth")])
    for t in FIGURE_TASKS:
        assert value_at(data, "accuracy", "depth", t) == pytest.approx(80 - 100 * base[t])
    assert value_at(data, "consistency", "size", "depth") == pytest.approx(15.0)
    drawn = artists_by_gid(fig)
    for r in heat.itertuples():
        key = (r.panel, r.group, r.series)
        if math.isnan(r.value):
            assert gid("missing", *key) in drawn and drawn[gid("missing-label", *key)].get_text() == "n/a"
            assert gid("cell", *key) not in drawn and gid("label", *key) not in drawn
        else:
            assert drawn[gid("label", *key)].get_text() == f"{r.value:+.1f}" and gid("missing", *key) not in drawn
    assert data[data.panel == "average"].value.isna().all()                     # 4 of 12 cells: no average drawn
    for r in data[data.panel == "average"].itertuples():
        assert gid("missing", r.panel, r.group, r.series) in drawn and gid("bar", r.panel, r.group, r.series) not in drawn
    base_average = value_at(data, "base", "average", "base")
    assert base_average == pytest.approx(61.25)
    assert f"{base_average:.1f}%" in drawn[gid("label", "base", "average", "base")].get_text()
    no_decoy_drawn(data)
    assert_readable(fig, data, tmp_path, f"transfer_{source}")


# ------------------------------------------------------------------------------------------------ Figure 5
def test_baselines_figure_averages_only_complete_four_task_runs(tmp_path):
    rows = [row("joint-acc", "train", "joint", a, eval_task=t, reward="accuracy") for t, a in zip(BOOLEAN_TASKS, (0.8, 0.9, 0.85, 0.85))]
    rows += [row("external-visual-jigsaw-image", "external", None, 0.7, eval_task=t, model="x/y") for t in BOOLEAN_TASKS]
    rows += [row("external-ssl4rl-rotation", "external", None, 0.5, eval_task=t, model="x/z") for t in BOOLEAN_TASKS[:3]]
    rows += decoys(kind="train", task="joint", eval_task="depth", reward="consistency", pairing="minimal")
    fig, data = baselines_figure(results_rows(rows), scale="paper")
    present = data[data.value.notna()]
    assert list(present.group) == ["Ours (accuracy)", "Visual Jigsaw (Image)"]
    assert present.value.tolist() == [85.0, 70.0]
    assert_bars_match(fig, data)
    no_decoy_drawn(data)
    assert_readable(fig, data, tmp_path, "fig5")


# ------------------------------------------------------------------------------------------------ Figure 6
def test_label_noise_curve_joins_only_existing_noise_levels(tmp_path):
    rows = [row(f"joint-acc-{p}", "train", "joint", 0.9 - p / 2, eval_task=t, reward="accuracy", label_noise=p)
            for p in (0.0, 0.3) for t in BOOLEAN_TASKS]
    rows += decoys(kind="train", task="joint", eval_task="size", reward="accuracy", label_noise=0.1)
    fig, data = label_noise_figure(results_rows(rows), scale="paper")
    drawn = artists_by_gid(fig)
    line = drawn[gid("line", "noise", "points", "accuracy")]
    assert list(line.get_xdata()) == [0, 30]
    np.testing.assert_allclose(np.asarray(line.get_ydata(), float), [90.0, 75.0])
    for pct in (10, 20, 40):
        assert math.isnan(value_at(data, "noise", pct, "accuracy")) and gid("missing", "noise", pct, "accuracy") in drawn
        assert gid("label", "noise", pct, "accuracy") not in drawn
    assert math.isnan(value_at(data, "noise", "all", "consistency"))
    assert gid("line", "noise", "all", "consistency") not in drawn and gid("missing", "noise", "all", "consistency") in drawn
    assert len(data) == len(NOISE_AXIS) + 1
    no_decoy_drawn(data)
    assert_readable(fig, data, tmp_path, "fig6")


# ------------------------------------------------------------------------------------------------ Figure 7
def test_numeric_figure(tmp_path):
    rows = [row("base-7B", "base", None, 0.001, eval_task="counting"),
            row("dist-acc", "train", "absolute_distance", 0.414, reward="accuracy")]
    rows += decoys(kind="train", task="counting", reward="consistency", pairing="minimal")
    fig, data = numeric_figure(results_rows(rows), scale="paper")
    present = data[data.value.notna()]
    assert sorted(zip(present.group, present.series)) == [("absolute_distance", "accuracy"), ("counting", "base")]
    assert value_at(data, "numeric", "counting", "base") == pytest.approx(0.1)
    assert_bars_match(fig, data)
    no_decoy_drawn(data)
    assert_readable(fig, data, tmp_path, "fig7")


# ------------------------------------------------------------------------------------------------ Figure 8
def test_pairing_scatter_plots_only_pairs_of_existing_runs(tmp_path):
    rows = [row("base-7B", "base", None, 0.6, eval_task=t) for t in FIGURE_TASKS]
    rows += [row(f"{t}-minimal", "train", t, 0.8, eval_task=e, reward="consistency", pairing="minimal")
             for t in FIGURE_TASKS for e in FIGURE_TASKS]
    rows += [row("depth-random", "train", "depth", 0.7, eval_task=e, reward="consistency", pairing="random") for e in FIGURE_TASKS]
    rows += decoys(kind="train", task="size", eval_task="size", reward="consistency", pairing="one_to_all")
    fig, data = pairing_figure(results_rows(rows), scale="paper")
    drawn = artists_by_gid(fig)
    assert drawn[gid("points", "self_task", "tasks", "random")].get_offsets().tolist() == [[70.0, 80.0]]
    assert len(drawn[gid("points", "self_task", "tasks", "one_to_all")].get_offsets()) == 0
    transfer = drawn[gid("points", "transfer", "tasks", "random")].get_offsets()
    np.testing.assert_allclose(transfer, [[10.0, 20.0]] * 3)                    # depth -> the 3 other tasks
    assert gid("points", "self_task", "average", "random") not in drawn        # 1 of 4 tasks: no average point
    assert "3 of 4 points missing" in drawn[gid("missing", "self_task", "points", "count")].get_text()
    assert value_at(data, "self_task", "average", "minimal") == 80.0
    assert data[data.series == "one_to_all"].value.isna().all()
    no_decoy_drawn(data)
    assert_readable(fig, data, tmp_path, "fig8")


# ------------------------------------------------------------------------------------------------ comparison
def test_comparison_marks_missing_user_values_as_missing(tmp_path):
    rows = [row("base-7B", "base", None, b, eval_task=t) for t, b in zip(FIGURE_TASKS, (0.6, 0.62, 0.64, 0.66))]
    rows += [row(f"{t}-{r}", "train", t, a, reward=r, pairing="minimal") for t in FIGURE_TASKS
             for r, a in (("accuracy", 0.8), ("consistency", 0.77))]
    table = results_rows(rows)
    figures = {"same_task": same_task_figure(table, scale="paper")[1], "numeric": numeric_figure(table, scale="paper")[1]}
    comparison = paper_comparison(figures).set_index("key")
    assert comparison.loc["same_task_7B_base", "user"] == pytest.approx(63.0)
    assert comparison.loc["same_task_7B_accuracy", "user"] == pytest.approx(80.0)
    assert comparison.loc["same_task_7B_gap", "user"] == pytest.approx(3.0)
    assert comparison.loc["same_task_7B_gap", "difference"] == pytest.approx(0.2)
    assert comparison.loc["same_task_7B_gap_task_min", "user"] == pytest.approx(3.0)
    missing = comparison.user.isna()
    assert missing["same_task_3B_accuracy"] and missing["counting_accuracy"] and missing["joint_consistency"]
    assert int((~missing).sum()) == 7      # 7B base, accuracy, consistency, gap, gap caption, task-gap min and max: no more
    written = write_comparison(comparison.reset_index(), tmp_path)
    back = pd.read_csv(written["csv"], keep_default_na=False).set_index("key")
    assert (back.loc[missing[missing].index, "user"] == "missing").all()
    assert (back.loc[missing[missing].index, "difference"] == "n/a").all()
    assert float(back.loc["same_task_7B_base", "user"]) == pytest.approx(63.0)
    md = written["md"].read_text()
    assert "| same_task_3B_accuracy | Figure 2 | % | 76.4 | missing | n/a |" in md
    assert "| same_task_7B_accuracy | Figure 2 | % | 79.6 | 80.00 | +0.40 |" in md
    assert comparison_markdown(comparison.reset_index()).count("missing |") == int(missing.sum())


def test_mini_scale_reads_only_stand_ins(tmp_path):
    rows = [row("base-tiny", "base", None, 0.5, eval_task="depth", size="tiny", stands_in_for="7B", scale=None),
            row("base-7B", "base", None, 0.6, eval_task="depth")]
    fig, data = same_task_figure(results_rows(rows), scale="mini")
    assert value_at(data, "7B", "depth", "base") == 50.0 and data.value.notna().sum() == 1
    _, paper = same_task_figure(results_rows(rows), scale="paper")
    assert value_at(paper, "7B", "depth", "base") == 60.0
    assert "stand-in" in fig.axes[1].get_title()


# ------------------------------------------------------------------------------------------------ data figures
@pytest.fixture(scope="module")
def synthetic_examples():
    from consistency_amp.figures.data_figures import task_examples
    return task_examples()


def test_concept_figure_shows_three_negations(tmp_path, synthetic_examples):
    from consistency_amp.figures.data_figures import concept_figure
    fig, data = concept_figure(synthetic_examples["orientation", "SUNRGBD"][0])
    assert data["rule"] == "3 negations: answers should differ" and data["relation"] == "opposite"
    assert data["original"].endswith("Is object 1 to the left of object 2?")
    assert data["augmented"].endswith("Is object 2 to the right of object 1?")
    assert data["ground_truth_augmented"] == (not data["ground_truth"])
    assert "answers should differ" in fig._suptitle.get_text()
    paths = save_figure(fig, tmp_path, "fig1")
    with Image.open(paths["png"]) as im:
        assert im.width > 1000
    assert paths["pdf"].read_bytes().startswith(b"%PDF-")


def test_prompt_pairs_follow_the_paper_transformations(tmp_path, synthetic_examples):
    from consistency_amp.figures.data_figures import PAPER_EXAMPLE_TRANSFORMS, prompt_pairs, prompt_pairs_figure
    from consistency_amp.world.tasks import TASKS
    pairs = prompt_pairs(synthetic_examples, "KITTI", TASKS)
    fig, data = prompt_pairs_figure(pairs, "test")
    assert data.task.tolist() == list(TASKS) and data.uid.notna().all()
    expected = {"depth": "opposite", "orientation": "same", "size": "same", "relative_distance": "opposite",
                "counting": "numeric", "absolute_distance": "numeric"}
    for task, pair in pairs.items():
        assert set(pair.transform.applied) == PAPER_EXAMPLE_TRANSFORMS[task], task
        assert pair.relation == expected[task] and pair.labels_consistent
    assert_png_pdf(save_figure(fig, tmp_path, "appendixD", dpi=80))


def assert_png_pdf(paths):
    with Image.open(paths["png"]) as im:
        im.verify()
    assert paths["pdf"].read_bytes().startswith(b"%PDF-")


def test_qualitative_figure_reads_records_and_never_invents(tmp_path):
    from consistency_amp.figures.data_figures import qualitative_figure
    from consistency_amp.core import PAPER_MODELS
    from consistency_amp.grid.results import fixture_result, results_table, write_fixture_run

    def rec(uid, completion, correct):
        return dict(uid=uid, task="depth", source="SUNRGBD", question=f"Q {uid}?", image_file=None, ground_truth=True,
                    completion=completion, answer=correct, correct=correct)
    params = dict(kind="train", task="depth", source="SUNRGBD", reward="consistency", pairing="minimal",
                  model=PAPER_MODELS["7B"], model_size="7B", steps=500, num_generations=8, pairs_per_device=4,
                  learning_rate=1e-6, seed=0, scale="paper")
    write_fixture_run(tmp_path, "base-7B", dict(kind="base", model=PAPER_MODELS["7B"], model_size="7B", seed=0),
                      [fixture_result("depth")], examples=[rec("a", "base says A", True), rec("b", "base says B", False)])
    write_fixture_run(tmp_path, "depth-cons", params, [fixture_result("depth")],
                      examples=[rec("b", "trained says B", True), rec("c", "trained says C", True)])
    fig, data = qualitative_figure(results_table(tmp_path), tmp_path, scale="paper")
    assert data["uid"] == "b" and len(data["notes"]) == 1 and "'b' is not in the data" not in data["notes"][0]
    assert "b is not in the data" in data["notes"][0]                         # no image: said, never made up
    drawn = artists_by_gid(fig)
    assert drawn["completion|appendix_c|base|text"].get_text() == "base says B"
    assert drawn["completion|appendix_c|trained|text"].get_text() == "trained says B"
    assert_png_pdf(save_figure(fig, tmp_path / "out", "appendixC"))
    # the 3B comparison has no runs at all: the figure says so and shows no completion
    fig, data = qualitative_figure(results_table(tmp_path), tmp_path, size="3B", scale="paper")
    assert data["uid"] is None and len(data["notes"]) == 2
    drawn = artists_by_gid(fig)
    assert not any(g.startswith("completion|") for g in drawn)
    assert "no complete run" in drawn["missing|appendix_c|records|notes"].get_text()
    assert_png_pdf(save_figure(fig, tmp_path / "out", "appendixC_missing"))


def test_table_1_counts_and_comparison(tmp_path):
    from consistency_amp.figures.data_figures import table_1_data, write_table_1
    paths, table = write_table_1(tmp_path)
    back = pd.read_csv(paths["csv"])
    assert (back.train + back.test == back.n).all() and len(back) == 12
    md = paths["md"].read_text()
    assert "| Orientation |" in md and "7,738" in md and "synthetic world" in md
    comparison = paper_comparison({"table1": table_1_data(table)}).set_index("key")
    n = table.set_index(["task", "source"]).n
    assert comparison.loc["table1_depth_SUNRGBD", "user"] == n["depth", "SUNRGBD"]
    assert comparison.loc["table1_depth_SUNRGBD", "paper"] == 6222
    assert comparison.user.notna().sum() == 8
