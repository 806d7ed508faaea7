"""The synthetic world on disk: generation into a temporary folder, refusal to overwrite, no half-written world,
the round trip through the project's Omni3D loader, the default (cached) world, bad configs, and byte-identical
worlds from two separate processes."""
import json, subprocess, sys

import numpy as np
import pytest

from consistency_amp.world import synthetic
from consistency_amp.world.omni3d import load_omni3d, load_omni3d_root
from consistency_amp.world.synthetic import (default_world, image_id_for, make_synthetic_world, SyntheticConfig,
                                             world_digest, world_info)
from consistency_amp.world.rendering import generate_image, image_rng

SMALL = {"train": 3, "val": 1, "test": 1}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_synthetic_world(tmp_path_factory.mktemp("w") / "world", n_images_per_split=SMALL, seed=11)


def test_layout_and_marker(world):
    for source in ("SUNRGBD", "KITTI"):
        for split, n in SMALL.items():
            assert (world / "Omni3D" / f"{source}_{split}.json").is_file()
            assert sorted(p.name for p in (world / "images" / source / split).iterdir()) == [f"{i:06d}.png" for i in range(n)]
    info = world_info(world)
    assert info["digest"] == SyntheticConfig(n_images_per_split=SMALL, seed=11).digest
    assert info["counts"]["KITTI_train"]["images"] == 3


def test_loader_round_trip(world):
    loaded = load_omni3d_root(world)
    assert sorted(loaded) == sorted(f"{s}_{p}" for s in ("SUNRGBD", "KITTI") for p in SMALL)
    for key, scenes in loaded.items():
        source, split = key.split("_")
        assert scenes.report.skipped == [] and scenes.report.n_invalid3d == 0
        assert len(scenes) == SMALL[split]
        for i, back in enumerate(scenes):
            made, image = generate_image(image_rng(11, source, split, i), source, image_id_for(source, split, i),
                                         f"images/{source}/{split}/{i:06d}.png", split)
            assert (back.image_id, back.file_path, back.source, back.split) == (made.image_id, made.file_path, source, split)
            assert back.load_image().tobytes() == image.tobytes()
            assert len(back.objects) == len(made.objects) >= 3
            for a, b in zip(back.objects, made.objects):
                assert (a.id, a.category, a.category_id, a.visibility, a.truncation, a.segmentation_pts) == \
                       (b.id, b.category, b.category_id, b.visibility, b.truncation, b.segmentation_pts)
                for f in ("center", "dimensions", "R", "corners", "bbox2D_tight", "bbox2D_proj", "bbox2D_trunc"):
                    np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
                assert 0 <= a.visibility <= 1 and 0 <= a.truncation <= 1 and not a.behind_camera and a.valid3D


def test_single_file_loads_with_default_image_root(world):
    scenes = load_omni3d(world / "Omni3D" / "SUNRGBD_val.json")      # image root = the JSON's grandparent = world
    assert scenes[0].image_path == world / "images" / "SUNRGBD" / "val" / "000000.png"
    assert scenes[0].load_image().size == (640, 480)


def test_refuses_to_overwrite(world):
    before = world_digest(world)
    with pytest.raises(FileExistsError, match="already holds a synthetic world; pass overwrite=True"):
        make_synthetic_world(world, n_images_per_split=1)
    assert world_digest(world) == before


def test_overwrite_replaces_whole_world(tmp_path):
    root = make_synthetic_world(tmp_path / "w", n_images_per_split=SMALL, seed=1)
    make_synthetic_world(root, n_images_per_split={"train": 1}, sources=("indoor",), seed=2, overwrite=True)
    assert sorted(p.name for p in (root / "Omni3D").iterdir()) == ["SUNRGBD_train.json"]
    assert not (root / "images" / "KITTI").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w"]         # no temporary or old folder left


def test_never_replaces_a_folder_that_is_not_a_world(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="not a synthetic world; refusing"):
        make_synthetic_world(tmp_path / "data", overwrite=True)
    assert (tmp_path / "data" / "precious.txt").read_text() == "keep"


def test_empty_folder_is_used(tmp_path):
    (tmp_path / "empty").mkdir()
    root = make_synthetic_world(tmp_path / "empty", n_images_per_split={"test": 1})
    counts = world_info(root)["counts"]
    assert sorted(counts) == ["KITTI_test", "SUNRGBD_test"] and all(c["images"] == 1 for c in counts.values())


def test_failed_build_leaves_nothing(tmp_path, monkeypatch):
    calls = []
    real = synthetic._write_split

    def failing(tmp, config, source, split, count, bar):
        calls.append(split)
        if len(calls) == 2: raise RuntimeError("disk full")
        return real(tmp, config, source, split, count, bar)

    monkeypatch.setattr(synthetic, "_write_split", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        make_synthetic_world(tmp_path / "w", n_images_per_split=SMALL)
    assert list(tmp_path.iterdir()) == []


def test_failed_overwrite_keeps_old_world(tmp_path, monkeypatch):
    root = make_synthetic_world(tmp_path / "w", n_images_per_split={"val": 1}, seed=5)
    before = world_digest(root)
    monkeypatch.setattr(synthetic, "_write_split", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        make_synthetic_world(root, n_images_per_split={"val": 1}, seed=6, overwrite=True)
    assert world_digest(root) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w"]


def test_default_world_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CONSISTENCY_AMP_CACHE", str(tmp_path))
    config = SyntheticConfig(n_images_per_split={"train": 2}, seed=3)
    root = default_world(config)
    assert root == tmp_path / "synthetic" / f"world-{config.digest}"
    stamp = (root / "Omni3D" / "KITTI_train.json").stat().st_mtime_ns
    assert default_world(config) == root
    assert (root / "Omni3D" / "KITTI_train.json").stat().st_mtime_ns == stamp     # reused, not rebuilt
    other = default_world(SyntheticConfig(n_images_per_split={"train": 2}, seed=4))
    assert other != root and root.exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"seed": -1}, "seed: expected a non-negative integer"),
    ({"seed": 1.5}, "seed: expected a non-negative integer"),
    ({"n_images_per_split": {"dev": 2}}, "n_images_per_split: unknown split 'dev'"),
    ({"n_images_per_split": {"train": 2.5}}, r"n_images_per_split\['train'\]"),
    ({"n_images_per_split": "many"}, "n_images_per_split: expected an integer or a dict"),
    ({"sources": ("nuScenes",)}, "source: unknown source 'nuScenes'"),
    ({"sources": ()}, "sources: expected at least one source"),
    ({"indoor_size": (640, 0)}, "indoor_size: expected two integers >= 32"),
    ({"png_compress_level": 12}, "png_compress_level: expected 0..9"),
])
def test_bad_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SyntheticConfig(**kwargs)


def test_custom_sizes_scale_intrinsics(tmp_path):
    root = make_synthetic_world(tmp_path / "w", n_images_per_split={"train": 1}, indoor_size=(320, 240), outdoor_size=(621, 188))
    sun, kitti = (load_omni3d_root(root, splits=("train",))[k][0] for k in ("SUNRGBD_train", "KITTI_train"))
    assert (sun.width, sun.height, kitti.width, kitti.height) == (320, 240, 621, 188)
    assert 250 <= sun.K[0, 0] <= 290 and 350 <= kitti.K[0, 0] <= 361
    assert sun.load_image().size == (320, 240)


_DIGEST_SCRIPT = """
import sys
from consistency_amp.world.synthetic import make_synthetic_world, world_digest
print(world_digest(make_synthetic_world(sys.argv[1], n_images_per_split={"train": 2, "test": 1}, seed=21)))
"""


def test_same_bytes_in_another_process(tmp_path):
    here = world_digest(make_synthetic_world(tmp_path / "a", n_images_per_split={"train": 2, "test": 1}, seed=21))
    res = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT, str(tmp_path / "b")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == here
    other = world_digest(make_synthetic_world(tmp_path / "c", n_images_per_split={"train": 2, "test": 1}, seed=22))
    assert other != here
