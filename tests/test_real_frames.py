"""Real KITTI and SUN RGB-D frames read as Omni3D scenes (consistency_amp.world.real_frames).

The frames live outside the project (../shared/data/real_samples, or $CONSISTENCY_AMP_REAL_SAMPLES); tests that
need them skip with a message when they are absent. Tolerances are justified in nbs/12_real_frames.ipynb."""
import shutil
from itertools import combinations

import numpy as np
import pytest

from consistency_amp.world.geometry import box_corners, box_iou, project_points
from consistency_amp.world.omni3d import load_omni3d
from consistency_amp.world.omni3d_writer import write_omni3d
from consistency_amp.world.real_frames import (REAL_SAMPLES_ENV, kitti_scene, label_box_coverage, load_real_samples,
                                         read_kitti_calib, read_kitti_label, read_sunrgbd_calib, read_sunrgbd_label,
                                         real_samples_root, sunrgbd_scene)

FRAMES = {"KITTI": ["000007", "000076", "000142", "000217"], "SUNRGBD": ["000001", "000002", "000003", "000004"]}


@pytest.fixture(scope="module")
def root():
    path = real_samples_root()
    if path is None:
        pytest.skip(f"real samples not found (../shared/data/real_samples next to the repo, or ${REAL_SAMPLES_ENV})")
    return path


@pytest.fixture(scope="module")
def scenes(root):
    return load_real_samples(root)


def test_counts_match_source_md(scenes):
    assert [(s.source, s.image_id, len(s.objects)) for s in scenes] == [
        ("KITTI", 7, 4), ("KITTI", 76, 9), ("KITTI", 142, 14), ("KITTI", 217, 8),
        ("SUNRGBD", 1, 6), ("SUNRGBD", 2, 2), ("SUNRGBD", 3, 5), ("SUNRGBD", 4, 4)]
    for s in scenes:
        assert s.load_image().size == (s.width, s.height)


def test_every_labelled_box_inside_its_projected_3d_box(scenes):
    for s in scenes:
        coverage = label_box_coverage(s)
        assert (coverage >= 0.85).all(), (s, coverage)


def test_kitti_vehicles_project_onto_their_2d_boxes(scenes):
    ious = [box_iou(o.bbox2D_tight, o.bbox2D_trunc) for s in scenes if s.source == "KITTI"
            for o in s.objects if o.category in ("car", "van", "cyclist")]
    assert len(ious) == 23 and min(ious) >= 0.95


def test_kitti_depth_orders_bottom_edges(scenes):
    pairs = 0
    for s in scenes:
        if s.source != "KITTI": continue
        whole = [o for o in s.objects if o.truncation == 0 and o.bbox2D_tight[3] < s.height - 1]
        for a, b in combinations(whole, 2):
            if abs(a.depth - b.depth) < 2: continue
            near, far = (a, b) if a.depth < b.depth else (b, a)
            assert near.bbox2D_tight[3] > far.bbox2D_tight[3], (s, near, far)
            pairs += 1
    assert pairs >= 80


def test_objects_are_consistent_omni3d_boxes(scenes):
    for s in scenes:
        for o in s.objects:
            np.testing.assert_allclose(box_corners(o.center, o.dimensions, o.R), o.corners, atol=1e-12)
            np.testing.assert_allclose(o.R @ o.R.T, np.eye(3), atol=1e-12)
            assert np.isclose(np.linalg.det(o.R), 1) and (o.dimensions > 0).all()
            assert not o.behind_camera and o.depth > 0.5 and o.volume == np.prod(o.dimensions)


def test_kitti_K_with_offset_projects_like_P2(root):
    s = kitti_scene(root / "kitti", "000142")
    P2 = read_kitti_calib(root / "kitti/training/calib/000142.txt")["P2"]
    t = np.linalg.solve(P2[:, :3], P2[:, 3])
    for o in s.objects:
        uvw = np.c_[o.corners - t, np.ones(8)] @ P2.T
        np.testing.assert_allclose(project_points(s.K, o.corners), uvw[:, :2] / uvw[:, 2:], atol=1e-9)
    rows = [r for r in read_kitti_label(root / "kitti/training/label_2/000142.txt") if r["type"] != "DontCare"]
    for r, o in zip(rows, s.objects):
        h, w, l = r["hwl"]
        np.testing.assert_allclose(o.center, r["location"] - [0, h / 2, 0] + t)
        np.testing.assert_allclose(o.dimensions, [w, h, l])


def test_sunrgbd_matches_votenet_recipe(root):
    sun = root / "sunrgbd" / "sunrgbd_trainval"
    for frame in FRAMES["SUNRGBD"]:
        s = sunrgbd_scene(sun, frame)
        Rtilt, K = read_sunrgbd_calib(sun / f"calib/{frame}.txt")
        for row, o in zip(read_sunrgbd_label(sun / f"label/{frame}.txt"), s.objects):
            w, l, h = row["half_wlh"]
            c, s_ = np.cos(row["heading"]), np.sin(row["heading"])
            local = np.array([[-l, l, l, -l, -l, l, l, -l], [w, w, -w, -w, w, w, -w, -w], [h, h, h, h, -h, -h, -h, -h]])
            upright = (np.array([[c, -s_, 0], [s_, c, 0], [0, 0, 1]]) @ local).T + row["centroid"]
            cam = upright @ Rtilt
            theirs = np.c_[cam[:, 0], -cam[:, 2], cam[:, 1]]
            assert np.linalg.norm(o.corners[:, None] - theirs[None], axis=-1).min(1).max() < 1e-4
            # and the 2D label box is top-left + size
            np.testing.assert_allclose(o.bbox2D_tight[2:] - o.bbox2D_tight[:2], [row["bbox"][2] - row["bbox"][0],
                                                                                  row["bbox"][3] - row["bbox"][1]])


def test_real_scenes_round_trip_through_omni3d_json(root, scenes, tmp_path):
    for source, dataset_root in (("KITTI", root / "kitti"), ("SUNRGBD", root / "sunrgbd" / "sunrgbd_trainval")):
        mine = [s for s in scenes if s.source == source]
        for k, o in enumerate(o for s in mine for o in s.objects):
            o.category_id = {"car": 0}.get(o.category, o.category_id)  # leave the rest for the writer to assign
        path = write_omni3d(mine, tmp_path / f"{source}_{mine[0].split}.json")
        back = load_omni3d(path, image_root=dataset_root)
        assert [len(s.objects) for s in back] == [len(s.objects) for s in mine]
        for a, b in zip(back, mine):
            for oa, ob in zip(a.objects, b.objects):
                ob.category_id = oa.category_id  # the writer assigned ids to unassigned categories
            assert a == b


def test_env_var_override(tmp_path, monkeypatch):
    monkeypatch.setenv(REAL_SAMPLES_ENV, str(tmp_path))
    assert real_samples_root() == tmp_path
    monkeypatch.setenv(REAL_SAMPLES_ENV, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match=REAL_SAMPLES_ENV):
        real_samples_root()
    with pytest.raises(FileNotFoundError, match="real samples folder not found"):
        real_samples_root(tmp_path / "nope")


def test_bad_native_files(tmp_path):
    (tmp_path / "training" / "label_2").mkdir(parents=True)
    label = tmp_path / "training" / "label_2" / "000001.txt"
    label.write_text("Car 0.00 0 -1.56 564.62 174.59 616.43 224.74 1.61 1.66 3.20 -0.69 1.69 25.01 -1.59\n"
                     "Car 0.00 0 -1.56 564.62 174.59 616.43 224.74 1.61 1.66 3.20 -0.69 1.69 25.01\n")
    with pytest.raises(ValueError, match=r"000001.txt:2: expected 14 values, got 13"):
        read_kitti_label(label)
    label.write_text("Car 0.00 0 -1.56 564.62 174.59 616.43 abc 1.61 1.66 3.20 -0.69 1.69 25.01 -1.59\n")
    with pytest.raises(ValueError, match=r"000001.txt:1: not a number"):
        read_kitti_label(label)
    with pytest.raises(FileNotFoundError, match="KITTI image not found"):
        kitti_scene(tmp_path, "000001")
    with pytest.raises(FileNotFoundError, match="KITTI calib file not found"):
        read_kitti_calib(tmp_path / "calib.txt")
    calib = tmp_path / "calib.txt"
    calib.write_text("0.97959 0.012593 0.20061 0.012593 0.99223 -0.12377 -0.20061 0.12377 0.97182\n")
    with pytest.raises(ValueError, match="expected 2 lines"):
        read_sunrgbd_calib(calib)
    sun_label = tmp_path / "sun.txt"
    sun_label.write_text("bed 328 152 346 320 1.04 4.16 -0.24 0.94 -1.15 0.98 -0.12 -0.99\n")
    with pytest.raises(ValueError, match=r"sun.txt:1: non-positive half size"):
        read_sunrgbd_label(sun_label)


def test_missing_samples_message(tmp_path, monkeypatch):
    monkeypatch.delenv(REAL_SAMPLES_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no settings.ini above: nothing to find
    assert real_samples_root() is None
    with pytest.raises(FileNotFoundError, match=REAL_SAMPLES_ENV):
        load_real_samples()
