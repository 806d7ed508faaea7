"""consistency_amp.evaluation.held_out: the test split and nothing else, label-free prompts, the metric arithmetic against
hand-worked and independently recomputed values (scripted completers and a fake `generate`), run files that are
never overwritten silently, and a real end-to-end evaluation of the offline tiny model on the synthetic world."""
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from consistency_amp.evaluation import held_out as ev
from consistency_amp.evaluation import run_evaluation as rev
from consistency_amp.evaluation.decoders import GreedyDecoder
from consistency_amp.training.models import TINY_MODEL, load_processor
from consistency_amp.world.prompts import LABEL_COLUMNS
from consistency_amp.training.runs import ADAPTER_DIR, create_run, EVAL_DIR, read_json, write_status
from consistency_amp.training.run_records import read_run
from consistency_amp.world.synthetic import default_world, make_synthetic_world
from consistency_amp.world.task_splits import TaskSplit, build_task_splits
from consistency_amp.world.tasks import BOOLEAN_TASKS, NUMERIC_TASKS, TASKS
from consistency_amp.training.train import TrainParams, train_examples


@pytest.fixture(scope="module")
def splits():
    return build_task_splits(default_world())


def tagged(answer) -> str:
    return f"<think>thinking</think><answer>{answer}</answer>"


class Scripted:
    "A completer: answers each row with `script(row)` and keeps the rows it was shown (all a model ever sees)."
    def __init__(self, script):
        self.script, self.seen = script, []

    def complete(self, rows):
        self.seen += rows
        return [self.script(row) for row in rows]


def labels(examples) -> dict:
    return {e.uid: e.answer for e in examples}


def wrong(answer):
    "A wrong answer: the negation, or a number off by a factor 3 (accuracy score 0)."
    return (not answer) if isinstance(answer, bool) else 3 * answer + 1


# ------------------------------------------------------------------ the split
def test_evaluated_examples_are_exactly_the_test_split(splits):
    script = Scripted(lambda row: tagged("True"))
    _, records = ev.evaluate(script, consistency_samples=0, progress=False, return_records=True)
    evaluated = [r["uid"] for r in records]
    expected = [e.uid for t in TASKS for s in ev.EVAL_SOURCES for e in splits[t, s].test]
    assert evaluated == expected and len(set(evaluated)) == len(evaluated) > 50
    train_uids = {e.uid for sp in splits.values() for e in sp.train}
    train_images = {(e.source, e.scene.image_id) for sp in splits.values() for e in sp.train}
    assert not set(evaluated) & train_uids
    test_images = {(e.source, e.scene.image_id) for t, s in splits for e in splits[t, s].test}
    assert not test_images & train_images
    # the training code's examples (consistency_amp.training.train) never meet the evaluated ones
    for task in ("depth", "joint", "counting"):
        trained = {e.uid for e in train_examples(TrainParams(task=task))}
        assert trained and not trained & set(evaluated)


def test_test_split_does_not_depend_on_what_else_is_evaluated(splits):
    alone = ev.held_out_examples(tasks="size", sources="KITTI")
    assert [e.uid for e in alone["size", "KITTI"]] == [e.uid for e in splits["size", "KITTI"].test]
    first = ev.held_out_examples(tasks="size", sources="KITTI", max_examples=3)["size", "KITTI"]
    assert [e.uid for e in first] == [e.uid for e in splits["size", "KITTI"].test[:3]]


def test_answering_the_train_labels_does_not_inflate_test_accuracy(splits):
    "A model that memorised every training label (and is wrong elsewhere) scores 0 on the test split; one that knows the test labels scores 1."
    train_labels = {u: a for sp in splits.values() for u, a in labels(sp.train).items()}
    test_labels = {u: a for sp in splits.values() for u, a in labels(sp.test).items()}

    def knows(table):
        def script(row):
            uid = row["uid"]
            if uid in table: return tagged(table[uid])
            truth = test_labels.get(uid, train_labels.get(uid))   # the test harness's, not the rows'
            return tagged(wrong(truth))
        return Scripted(script)

    memoriser = ev.evaluate(knows(train_labels), consistency_samples=0, progress=False)
    oracle = ev.evaluate(knows(test_labels), consistency_samples=0, progress=False)
    assert all(r["accuracy"] == 0.0 for r in memoriser["results"]), memoriser["results"]
    assert all(r["accuracy"] == pytest.approx(1.0) for r in oracle["results"]), oracle["results"]


@pytest.mark.parametrize("mutation", ["swapped", "relabelled", "one_train_example"])
def test_a_wrong_split_is_refused(monkeypatch, splits, mutation):
    "If the splits handed to the evaluation were the train split (or held one train example), it stops."
    def corrupt(split: TaskSplit) -> TaskSplit:
        if mutation == "swapped": return TaskSplit(split.test, split.train)
        if mutation == "relabelled": return TaskSplit(split.test, [replace(e, split="test") for e in split.train])
        return TaskSplit(split.train[1:], split.test + [replace(split.train[0], split="test")])
    real = ev.build_task_splits
    monkeypatch.setattr(ev, "build_task_splits", lambda *a, **k: {key: corrupt(v) for key, v in real(*a, **k).items()})
    with pytest.raises(ValueError, match="is not a .* test example"):
        ev.evaluate(Scripted(lambda row: tagged("True")), tasks="depth", sources="SUNRGBD", progress=False)


# ------------------------------------------------------------------ label-free prompts
def test_the_model_never_sees_a_label(splits, monkeypatch):
    script = Scripted(lambda row: tagged("True"))
    ev.evaluate(script, tasks=["depth", "counting"], max_examples=3, consistency_samples=2, progress=False)
    assert script.seen and all(not set(LABEL_COLUMNS) & set(row) for row in script.seen)
    assert all(set(row) == {"uid", "task", "source", "answer_type", "side", "draw", "relation", "transform", "prompt",
                            "image", "index"} for row in script.seen)
    # a row that carried a label would be refused before any model saw it
    real_rows = ev.example_rows
    monkeypatch.setattr(ev, "example_rows", lambda e, *a: [dict(r, ground_truth=e.answer) for r in real_rows(e, *a)])
    with pytest.raises(AssertionError, match="label columns"):
        ev.evaluate(script, tasks="depth", max_examples=1, progress=False)


# ------------------------------------------------------------------ metric arithmetic
def test_boolean_metrics_by_hand(splits):
    """Five depth examples: x right, wrong, right, malformed, right-with-x'-unparseable.
    accuracy 3/5, format 4/5, unparseable 1/5; x' obeys phi_T for 0 and 2 only -> self-consistency 2/5."""
    five = splits["depth", "SUNRGBD"].test[:5]
    truth = labels(five)
    plan = dict(zip([e.uid for e in five], ["right", "wrong", "right", "malformed", "right-x'-garbled"]))

    def script(row):
        kind = plan[row["uid"]]
        y = truth[row["uid"]] if kind.startswith("right") else not truth[row["uid"]]
        if row["side"] == "original": return "<answer>True</answer>" if kind == "malformed" else tagged(y)
        if kind == "right-x'-garbled": return tagged("maybe")
        phi = y if row["relation"] == "same" else not y
        return tagged(phi if kind == "right" else not phi)

    result = ev.evaluate(Scripted(script), tasks="depth", sources="SUNRGBD", max_examples=5, consistency_samples=1,
                         progress=False)
    (row,) = result["results"]
    assert (row["n"], row["accuracy"], row["format_rate"], row["unparseable_rate"]) == (5, 3 / 5, 4 / 5, 1 / 5)
    assert (row["self_consistency"], row["consistency_pairs"]) == (2 / 5, 5)


def test_numeric_metrics_by_hand(splits):
    "Counting and distance: the mean rescaled error score max(0, 1 - |y - y*| / y*), and the numeric consistency score."
    examples = splits["absolute_distance", "KITTI"].test[:4]
    truth = labels(examples)
    factors = [(1.0, 1.0), (1.25, 1.0), (0.5, 2.0), (4.0, 4.0)]     # (x, x') answers as multiples of y*
    plan = dict(zip(truth, factors))

    def script(row):
        fx, fxp = plan[row["uid"]]
        return tagged(f"{(fx if row['side'] == 'original' else fxp) * truth[row['uid']]:.6f}")

    (row,) = ev.evaluate(Scripted(script), tasks="absolute_distance", sources="KITTI", max_examples=4, progress=False)["results"]
    accuracy = np.mean([max(0.0, 1 - abs(fx - 1)) for fx, _ in factors])          # 1, .75, .5, 0
    consistency = np.mean([1 - abs(fx - fxp) / max(fx, fxp) for fx, fxp in factors])  # 1, .8, .25, 1
    assert row["accuracy"] == pytest.approx(accuracy, abs=1e-5) == pytest.approx(0.5625, abs=1e-5)
    assert row["self_consistency"] == pytest.approx(consistency, abs=1e-5) == pytest.approx(0.7625, abs=1e-5)
    assert (row["format_rate"], row["unparseable_rate"]) == (1.0, 0.0)


class FakeVLM(torch.nn.Module):
    """Stands in for a vision-language model behind the real tiny processor: `generate` reads each prompt back from
    its ids and appends a fixed completion per answer type, padded on the right with the pad token."""
    def __init__(self, processor):
        super().__init__()
        self.processor, self.calls = processor, []
        self.generation_config = type("GC", (), {"pad_token_id": processor.tokenizer.pad_token_id})()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def generate(self, input_ids, attention_mask, **kwargs):
        self.calls.append(dict(kwargs, attention_mask=attention_mask.clone(), training=self.training))
        tok = self.processor.tokenizer
        outs = []
        for ids in input_ids:
            prompt = tok.decode(ids, skip_special_tokens=True)
            numeric = "how many" in prompt.lower() or "meter" in prompt.lower() or "distance" in prompt.lower()
            outs.append(tok.encode(tagged("2") if numeric else tagged("True")))
        width = max(map(len, outs))
        new = torch.tensor([o + [tok.pad_token_id] * (width - len(o)) for o in outs])
        return torch.cat([input_ids, new], dim=1)


def test_decoder_path_with_a_fake_generate(splits):
    "evaluate(model, processor): chat template, left padding, greedy kwargs, prompt stripped, answers scored."
    processor = load_processor(TINY_MODEL)
    processor.tokenizer.padding_side = "right"           # the decoder must pad on the left whatever it is given
    model = FakeVLM(processor).train()
    tasks = ("orientation", "counting", "absolute_distance")
    result, records = ev.evaluate(model, processor, tasks=tasks, max_examples=3, batch_size=5, consistency_samples=1,
                                  max_new_tokens=7, progress=False, return_records=True)
    assert processor.tokenizer.padding_side == "right" and model.training    # both restored
    for call in model.calls:
        assert call["do_sample"] is False and call["max_new_tokens"] == 7 and call["repetition_penalty"] == 1.0
        assert not call["training"]
        mask = call["attention_mask"]
        assert (mask[:, -1] == 1).all() and (mask.cummax(dim=1).values == mask).all()   # zeros only on the left
    assert any((c["attention_mask"] == 0).any() for c in model.calls)                    # ragged batches occurred
    for r in records: assert r["completion"] == tagged("2" if r["task"] in NUMERIC_TASKS else "True")
    for row in result["results"]:
        group = splits[row["task"], row["source"]].test[:3]
        if row["task"] in BOOLEAN_TASKS:
            expected_accuracy = np.mean([e.answer is True for e in group])
            draws = [d for r in records if (r["task"], r["source"]) == (row["task"], row["source"]) for d in r["draws"]]
            assert row["self_consistency"] == pytest.approx(np.mean([d["relation"] == "same" for d in draws]))
        else:
            expected_accuracy = np.mean([max(0.0, 1 - abs(2 - e.answer) / e.answer) for e in group])
            assert row["self_consistency"] == 1.0
        assert row["accuracy"] == pytest.approx(expected_accuracy)
        assert (row["format_rate"], row["unparseable_rate"], row["n"]) == (1.0, 0.0, len(group))


def test_sampled_transformations_are_reproducible_and_per_example(splits):
    script = lambda: Scripted(lambda row: tagged("True"))
    _, a = ev.evaluate(script(), tasks="depth", max_examples=2, consistency_samples=3, progress=False, return_records=True)
    _, b = ev.evaluate(script(), tasks=["size", "depth"], max_examples=4, consistency_samples=3, batch_size=1,
                       progress=False, return_records=True)
    _, c = ev.evaluate(script(), tasks="depth", max_examples=2, consistency_samples=3, seed=1, progress=False, return_records=True)
    by_uid = {r["uid"]: r for r in b}
    for r in a: assert r["draws"] == by_uid[r["uid"]]["draws"]
    assert [r["draws"] for r in a] != [r["draws"] for r in c]
    relations = [d["relation"] for r in b for d in r["draws"]]
    assert set(relations) <= {"same", "opposite"} and len(set(relations)) == 2


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kwargs, message", [
    (dict(tasks="height"), "tasks must be one of 'orientation', 'depth'"),
    (dict(tasks=[]), "nothing chosen"),
    (dict(sources=["NYU"]), "sources must be one of 'SUNRGBD', 'KITTI'; got 'NYU'"),
    (dict(batch_size=0), "batch_size must be an integer >= 1"),
    (dict(max_examples=0), "max_examples must be an integer >= 1 or None"),
    (dict(consistency_samples=-1), "consistency_samples must be"),
    (dict(max_new_tokens=1.5), "max_new_tokens must be"),
    (dict(data_root="/no/such/omni3d"), "is not a directory"),
    (dict(adapter="/no/such/adapter"), "not an adapter folder"),
])
def test_bad_parameters_fail_before_anything_is_loaded(monkeypatch, kwargs, message):
    monkeypatch.setattr(ev, "_load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ValueError, match=message):
        ev.evaluate(TINY_MODEL, progress=False, **kwargs)


def test_bad_completers_and_models(tmp_path):
    class Empty:
        def complete(self, rows): return []
    with pytest.raises(ValueError, match="gave 0 completions for 2 prompts"):
        ev.evaluate(Empty(), tasks="depth", max_examples=1, progress=False)
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match="adapter= applies to a model"):
        ev.evaluate(Empty(), adapter=tmp_path, tasks="depth", max_examples=1, progress=False)
    with pytest.raises(ValueError, match="needs its processor"):
        ev.evaluate(torch.nn.Linear(1, 1), tasks="depth", max_examples=1, progress=False)
    with pytest.raises(ValueError, match="has no `generate`"):
        GreedyDecoder(torch.nn.Linear(1, 1), load_processor(TINY_MODEL))
    with pytest.raises(ValueError, match="processor"):
        GreedyDecoder(FakeVLM(load_processor(TINY_MODEL)), None)


# ------------------------------------------------------------------ run files
def quick(**extra):
    return dict(tasks="depth", sources="SUNRGBD", max_examples=1, max_new_tokens=2, progress=False) | extra


def test_results_json_follows_the_contract_and_is_never_overwritten_silently(tmp_path, monkeypatch):
    path = rev.evaluate_model(TINY_MODEL, runs_dir=tmp_path, **quick())
    assert path == tmp_path / "base-tiny" / EVAL_DIR / "test-first1.json"
    stored = json.loads(path.read_text())     # strict JSON (no NaN)
    for key in ("run", "model", "adapter", "split", "data_root", "decoding", "created_at", "consistency_samples", "results"):
        assert key in stored
    assert (stored["run"], stored["split"], stored["decoding"]["greedy"], stored["decoding"]["max_new_tokens"]) == \
        ("base-tiny", "test", True, 2)
    (row,) = stored["results"]
    assert set(row) >= {"task", "source", "n", "accuracy", "format_rate", "unparseable_rate", "self_consistency"}
    assert all(isinstance(row[k], float) and 0 <= row[k] <= 1 for k in ("accuracy", "format_rate", "unparseable_rate"))
    record = read_run(tmp_path / "base-tiny")
    assert record.complete and record.kind == "base" and record.state == "complete" and record.problems == []
    before = path.read_bytes()
    monkeypatch.setattr(ev, "_load_model", lambda *a, **k: pytest.fail("loaded a model for an evaluation it then refused"))
    with pytest.raises(FileExistsError, match="never overwritten silently"):
        rev.evaluate_model(TINY_MODEL, runs_dir=tmp_path, **quick())
    with pytest.raises(FileExistsError, match="never overwritten silently"):
        rev.evaluate_run("base-tiny", "test-first1", runs_dir=tmp_path, **quick())
    assert path.read_bytes() == before
    monkeypatch.undo()
    rev.evaluate_model(TINY_MODEL, runs_dir=tmp_path, overwrite=True, **quick())
    rev.evaluate_model(TINY_MODEL, "second", runs_dir=tmp_path, **quick())
    assert sorted(p.name for p in (tmp_path / "base-tiny" / EVAL_DIR).iterdir()) == ["second.json", "test-first1.json"]


def test_evaluation_only_runs_by_name(tmp_path):
    assert rev.model_run_name("Qwen/Qwen2.5-VL-7B-Instruct") == "base-7B"
    assert rev.model_run_name(TINY_MODEL) == "base-tiny"
    assert rev.model_run_name("someone/Visual-Jigsaw-7B") == "external-Visual-Jigsaw-7B"
    assert rev.model_kind("someone/SSL4RL-7B") == "external" and rev.model_kind(TINY_MODEL) == "base"
    rev.evaluate_model(TINY_MODEL, runs_dir=tmp_path, **quick())
    with pytest.raises(ValueError, match="exists for another model"):
        rev.evaluate_model("someone/Visual-Jigsaw-7B", run_name="base-tiny", runs_dir=tmp_path, **quick())
    with pytest.raises(ValueError, match="kind must be"):
        rev.evaluate_model(TINY_MODEL, kind="train", runs_dir=tmp_path, **quick())
    with pytest.raises(ValueError, match="eval_name"):
        rev.evaluate_model(TINY_MODEL, "../escape", runs_dir=tmp_path, **quick())
    assert not (tmp_path / "external-Visual-Jigsaw-7B").exists()   # refused before creating anything


def test_training_run_is_evaluated_with_its_adapter_and_data_root(tmp_path, monkeypatch):
    from consistency_amp.training.models import load_model, save_adapter
    world = make_synthetic_world(tmp_path / "world", seed=3, n_images_per_split={"train": 10, "test": 4},
                                 sources=("SUNRGBD",))
    params = dict(task="depth", source="SUNRGBD", reward="consistency", pairing="minimal", model=TINY_MODEL,
                  model_size="tiny", data_root=str(world), steps=1, num_generations=2, pairs_per_device=1,
                  learning_rate=1e-6, seed=0)
    run = create_run("depth-run", params, runs=tmp_path / "runs")
    with pytest.raises(ValueError, match="has no adapter to evaluate"):
        rev.evaluate_run("depth-run", runs_dir=tmp_path / "runs", **quick())
    save_adapter(load_model(TINY_MODEL)[0], run / ADAPTER_DIR)
    write_status(run, "complete", 1)
    roots, loads = [], []
    real_splits, real_load = ev.build_task_splits, ev._load_model
    monkeypatch.setattr(ev, "build_task_splits", lambda root, *a, **k: roots.append(root) or real_splits(root, *a, **k))
    monkeypatch.setattr(ev, "_load_model", lambda *a, **k: loads.append((a, k)) or real_load(*a, **k))
    path = rev.evaluate_run(run, runs_dir=tmp_path / "runs", examples=True, **quick(max_examples=None))
    stored = read_json(path)
    assert [e["uid"] for e in stored["examples"]] == [e.uid for e in build_task_splits(world, ("depth",), ("SUNRGBD",))["depth", "SUNRGBD"].test]
    assert roots == [world] and loads[0][0] == (TINY_MODEL,) and loads[0][1]["adapter"] == run / ADAPTER_DIR
    assert loads[0][1]["lora"] is False
    assert (stored["run"], stored["adapter"], stored["data_root"]) == ("depth-run", str(run / ADAPTER_DIR), str(world))
    expected = build_task_splits(world, ("depth",), ("SUNRGBD",))["depth", "SUNRGBD"].test
    assert stored["results"][0]["n"] == len(expected) > 0
    assert read_run(run).state == "complete"                  # a training run's status is left alone


# ------------------------------------------------------------------ the real tiny model, end to end
def test_tiny_model_end_to_end(splits, capsys):
    "The offline tiny Qwen2.5-VL on two examples of every (task, source): the numbers are the verifiers' on its completions."
    from consistency_amp.reward.verifiers import accuracy, consistency, format_reward, parse_answer
    result, records = ev.evaluate(TINY_MODEL, max_examples=2, batch_size=8, max_new_tokens=6, progress=True,
                                  return_records=True)
    assert "depth/SUNRGBD" in capsys.readouterr().err         # a progress bar per (task, source)
    json.dumps(result, allow_nan=False)
    assert [(r["task"], r["source"]) for r in result["results"]] == [(t, s) for t in TASKS for s in ev.EVAL_SOURCES]
    for row in result["results"]:
        group = [r for r in records if (r["task"], r["source"]) == (row["task"], row["source"])]
        truth = labels(splits[row["task"], row["source"]].test[:2])
        assert row["n"] == len(group) == len(truth) and [r["uid"] for r in group] == list(truth)
        kind = "boolean" if row["task"] in BOOLEAN_TASKS else "numeric"
        answers = [parse_answer(r["completion"], kind) for r in group]
        assert row["accuracy"] == pytest.approx(np.mean([accuracy(a, truth[r["uid"]], kind) for a, r in zip(answers, group)]))
        assert row["format_rate"] == pytest.approx(np.mean([format_reward(r["completion"], kind) for r in group]))
        assert row["unparseable_rate"] == pytest.approx(np.mean([a is None for a in answers]))
        scores = [consistency(a, parse_answer(d["completion"], kind), d["relation"]) for a, r in zip(answers, group)
                  for d in r["draws"]]
        assert row["self_consistency"] == pytest.approx(np.mean(scores)) and row["consistency_pairs"] == len(group)
        assert math.isclose(row["format_rate"] + row["unparseable_rate"], 1.0)


def test_the_command_refuses_a_missing_model_or_data_in_one_line_and_makes_no_run(tmp_path):
    "A model folder that is not there leaves no evaluation-only run behind; a data root without Omni3D files, or the vllm backend without vLLM, is one line."
    import importlib.util, os, subprocess, sys
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    empty = tmp_path / "empty-root"; empty.mkdir()
    for args, expected in ((["--model", str(tmp_path / "no-model")], "does not exist"),
                           (["--model", "tiny-qwen2.5-vl", "--data_root", str(empty)], "no SUNRGBD_{train,val,test}.json under"),
                           *([(["--model", "tiny-qwen2.5-vl", "--backend", "vllm"], "the vLLM backend needs vLLM")]
                             if importlib.util.find_spec("vllm") is None else [])):
        proc = subprocess.run([sys.executable, "-m", "consistency_amp.evaluation.evaluate", *args, "--runs_dir",
                               str(tmp_path / "runs"), "--max_examples", "1"], env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 2 and expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_an_interrupted_evaluation_resumes_with_the_groups_it_answered(tmp_path, monkeypatch, capsys):
    "Killed in its second (task, source), a first evaluation keeps its run and the first group in eval/.partial-<name>/ and says so; run again, it answers only the rest, writes the results of an uninterrupted one and removes the folder."
    settings = quick(tasks=("depth", "size"), max_examples=2)
    whole = json.loads(rev.evaluate_model(TINY_MODEL, "test", runs_dir=tmp_path / "uninterrupted", **settings).read_text())
    answer = ev.answer_examples
    asked = []

    def preempted(group, *args, **kwargs):
        asked.append(group[0].task)
        if len(asked) == 2: raise KeyboardInterrupt                         # the job's time ran out in its second group
        return answer(group, *args, **kwargs)
    monkeypatch.setattr(ev, "answer_examples", preempted)
    with pytest.raises(KeyboardInterrupt):
        rev.evaluate_model(TINY_MODEL, "test", runs_dir=tmp_path, **settings)
    partial = tmp_path / "base-tiny" / EVAL_DIR / ".partial-test"
    assert [p.name for p in partial.iterdir()] == ["depth-SUNRGBD.json"] and not (partial.parent / "test.json").exists()
    assert f"the answers of depth-SUNRGBD are kept in {partial}: the same command goes on from them" in capsys.readouterr().err
    asked.clear()
    monkeypatch.setattr(ev, "answer_examples", lambda group, *a, **k: asked.append(group[0].task) or answer(group, *a, **k))
    resumed = json.loads(rev.evaluate_model(TINY_MODEL, "test", runs_dir=tmp_path, **settings).read_text())
    assert asked == ["size"] and resumed["reused"] == ["depth/SUNRGBD"]   # only the unanswered group
    assert resumed["results"] == whole["results"] and not partial.exists()
    record = read_run(tmp_path / "base-tiny")
    assert record.complete and record.problems == []


def test_the_command_stopped_by_ctrl_c_exits_130_saying_what_is_kept(tmp_path, monkeypatch, capsys):
    from consistency_amp.evaluation.evaluate import cli
    answer, asked = ev.answer_examples, []

    def interrupted(group, *args, **kwargs):
        asked.append(group[0].task)
        if len(asked) == 2: raise KeyboardInterrupt                         # Ctrl-C in the second group
        return answer(group, *args, **kwargs)
    monkeypatch.setattr(ev, "answer_examples", interrupted)
    argv = ["--model", TINY_MODEL, "--tasks", "depth,size", "--sources", "SUNRGBD", "--max_examples", "1", "--max_new_tokens", "2",
            "--runs_dir", str(tmp_path)]
    assert cli(argv) == 130
    err = capsys.readouterr().err
    assert "the same command goes on from them" in err and "Traceback" not in err
    monkeypatch.undo()
    assert cli(argv) == 0 and "reused the answers of depth/SUNRGBD" in capsys.readouterr().out


def test_the_command_preempted_by_sigterm_keeps_its_groups_and_goes_on(tmp_path):
    "A real SIGTERM (a scheduler's preemption) once the first group is stored: exit 143 and one line saying what is kept; the same command reuses it."
    import os, signal, subprocess, sys, time
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    argv = [sys.executable, "-m", "consistency_amp.evaluation.evaluate", "--model", "spatial-base-large", "--tasks",
            "depth,size,orientation", "--sources", "SUNRGBD", "--batch_size", "1", "--consistency_samples", "4", "--runs_dir", str(tmp_path)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial, deadline = tmp_path / "base-spatial-base-large" / EVAL_DIR / ".partial-test", time.monotonic() + 240
    while proc.poll() is None and not any(partial.glob("*.json")) and time.monotonic() < deadline: time.sleep(0.2)
    assert proc.poll() is None, "the evaluation ended before its first group was stored: too small to preempt"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "are kept in" in err and "the same command goes on from them" in err and "Traceback" not in err, err[-2000:]
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "reused the answers of depth/SUNRGBD" in again.stdout, again.stderr[-2000:]
    assert (partial.parent / "test.json").is_file() and not partial.exists()
