"""Issue 29: every file a data load or an evaluation reads, damaged, gives an error naming the file and the way out.

Property-style sweeps on top of the notebooks' examples: an Omni3D JSON with any value replaced by junk at any nesting
level, and any file cut at any point (Omni3D JSON, adapter weights and config, evaluation results), never ends in a raw
library error, and a damaged evaluation never counts as a result."""
import copy, json

import pytest

from consistency_amp.world.omni3d import Omni3DFormatError, load_omni3d

K = [[40.0, 0.0, 24.0], [0.0, 40.0, 12.0], [0.0, 0.0, 1.0]]
CORNERS = [[x, y, z] for z in (2.5, 3.5) for x, y in ((-0.5, -0.5), (0.5, -0.5), (0.5, 0.5), (-0.5, 0.5))]


def _omni3d() -> dict:
    "A one-image, one-annotation Omni3D file (images are not checked here)."
    ann = {"id": 10, "image_id": 1, "category_id": 0, "category_name": "chair", "valid3D": True,
           "bbox2D_tight": [-1, -1, -1, -1], "bbox2D_proj": [10.0, 2.0, 38.0, 22.0], "bbox3D_cam": CORNERS,
           "center_cam": [0.0, 0.0, 3.0], "dimensions": [1.0, 1.0, 1.0], "R_cam": [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
           "behind_camera": False, "visibility": 0.8, "truncation": 0.0}
    return {"info": {"name": "SUNRGBD Val", "split": "Val"},
            "images": [{"id": 1, "width": 48, "height": 24, "file_path": "SUNRGBD/a.jpg", "K": K}],
            "annotations": [ann], "categories": [{"id": 0, "name": "chair"}]}


def _paths(x, prefix=()):
    "Every (nested) key path of `x`."
    if prefix: yield prefix
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items: yield from _paths(v, prefix + (k,))


JUNK = [5, "x", None, True, [], {}, [1, "a"], {"a": 1}, 1e300, -1, [[1], [2, 3]], ""]


def test_omni3d_junk_at_every_nesting_level_names_the_file(tmp_path):
    path = tmp_path / "SUNRGBD_val.json"
    base = _omni3d()
    for keys in _paths(base):
        for junk in JUNK:
            data = copy.deepcopy(base)
            target = data
            for k in keys[:-1]: target = target[k]
            target[keys[-1]] = junk
            path.write_text(json.dumps(data))
            for mode in ("raise", "skip"):
                try: load_omni3d(path, on_error=mode, check_images=False, verbose=False, progress=False)
                except Omni3DFormatError as e: assert str(path) in str(e), (keys, junk, str(e))
                # any other exception (AttributeError, TypeError, ...) fails the test with its traceback


def test_omni3d_cut_anywhere_names_the_file_and_the_way_out(tmp_path):
    path = tmp_path / "SUNRGBD_val.json"
    text = json.dumps(_omni3d(), indent=1)
    for n in range(0, len(text) - 1, 7):
        path.write_text(text[:n])
        with pytest.raises(Omni3DFormatError) as info:
            load_omni3d(path, check_images=False, progress=False)
        message = str(info.value)
        assert message.startswith(f"{path}: ") and ("cut short" in message or "the file is empty" in message), message
        assert "download it again" in message


def _adapter(folder):
    "The two files peft saves, without a model: a LoRA config and two finite tensors."
    import torch
    from safetensors.torch import save_file
    from consistency_amp.training.models import lora_config
    folder.mkdir(parents=True)
    lora_config().save_pretrained(str(folder))
    save_file({"m.lora_A.weight": torch.ones(4, 8), "m.lora_B.weight": torch.zeros(8, 4)}, str(folder / "adapter_model.safetensors"))
    return folder


@pytest.mark.parametrize("name", ["adapter_model.safetensors", "adapter_config.json"])
def test_adapter_file_cut_anywhere_names_it_and_the_newest_checkpoint(tmp_path, name):
    from consistency_amp.training.models import check_adapter, load_adapter
    run = tmp_path / "depth-run"
    adapter, checkpoint = _adapter(run / "adapter"), _adapter(run / "checkpoints" / "checkpoint-7")
    (checkpoint / "trainer_state.json").write_text("{}")
    whole = (adapter / name).read_bytes()
    assert check_adapter(adapter).r == 32
    for n in range(0, len(whole), max(1, len(whole) // 40)):
        (adapter / name).write_bytes(whole[:n])
        with pytest.raises(ValueError) as info:
            load_adapter(None, adapter)       # refused before the model is touched: None would fail otherwise
        message = str(info.value)
        assert f"{adapter / name} " in message, message
        assert f"from the newest intact checkpoint, {checkpoint} (step 7), into {adapter}" in message, message


def test_evaluation_file_cut_anywhere_is_named_and_never_counted(tmp_path):
    from consistency_amp.evaluation.run_evaluation import read_eval
    from consistency_amp.grid.results import fixture_result, results_table, write_fixture_run
    params = dict(task="depth", source="SUNRGBD", reward="consistency", pairing="minimal", model="m", steps=5,
                  num_generations=4, pairs_per_device=1, learning_rate=1e-6, seed=0)
    run = write_fixture_run(tmp_path, "run", params, [fixture_result("depth", accuracy=0.5)])
    path = run / "eval" / "test.json"
    whole = path.read_text()
    assert results_table(tmp_path).complete.all()
    for n in range(0, len(whole) - 1, 23):
        path.write_text(whole[:n])
        with pytest.raises(ValueError) as info:
            read_eval(path)
        assert str(info.value).startswith(f"{path}: not valid JSON") and "--eval_name test --overwrite" in str(info.value)
        table = results_table(tmp_path)
        assert not table.complete.any() and table.accuracy.isna().all()
        assert any(f"{path}: not valid JSON" in p and "re-run the evaluation" in p for p in table.problems)
