"""Bad-input suite for `consistency_amp.world.omni3d.load_omni3d`: one case per kind of bad field, in both error modes.

raise mode: an `Omni3DFormatError` whose message names the file, the record id and the field.
skip mode: the bad record (and, for an image, its annotations) is left out, every other record loads exactly as
from the clean file, and the report counts the skip under the right (kind, field)."""
import copy, json, math
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from consistency_amp.world.omni3d import Omni3DFormatError, load_omni3d

W, H = 48, 24
K = [[40.0, 0.0, 24.0], [0.0, 40.0, 12.0], [0.0, 0.0, 1.0]]


def _annotation(ann_id, image_id, center, dims, yaw=0.0, category=(0, "chair")):
    # written independently of the package's writer: corners by Omni3D's rule (local x = l, y = h, z = w)
    c, s = math.cos(yaw), math.sin(yaw)
    R = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    w, h, l = dims
    local = np.array([[-1, -1, -1], [1, -1, -1], [1, 1, -1], [-1, 1, -1],
                      [-1, -1, 1], [1, -1, 1], [1, 1, 1], [-1, 1, 1]]) / 2 * [l, h, w]
    corners = local @ R.T + center
    uv = corners @ np.array(K).T
    uv = uv[:, :2] / uv[:, 2:]
    proj = [*uv.min(0), *uv.max(0)]
    trunc = [max(proj[0], 0), max(proj[1], 0), min(proj[2], W), min(proj[3], H)]
    return {"id": ann_id, "image_id": image_id, "dataset_id": 7, "category_id": category[0],
            "category_name": category[1], "valid3D": True, "bbox2D_tight": [-1, -1, -1, -1],
            "bbox2D_proj": [float(v) for v in proj], "bbox2D_trunc": [float(v) for v in trunc],
            "bbox3D_cam": corners.tolist(), "center_cam": list(map(float, center)), "dimensions": list(map(float, dims)),
            "R_cam": R.tolist(), "behind_camera": False, "visibility": 0.8, "truncation": 0.0,
            "segmentation_pts": 30, "lidar_pts": -1, "depth_error": 0.05}


def _dataset():
    images = [{"id": i, "dataset_id": 7, "width": W, "height": H, "file_path": f"SUNRGBD/kv1/img{i}.jpg", "K": K,
               "src_90_rotate": 0, "src_flagged": False} for i in (1, 2, 3)]
    annotations = [_annotation(10, 1, [0.0, 0.2, 3.0], [0.5, 0.9, 0.5]),
                   _annotation(11, 1, [0.8, 0.3, 4.0], [1.5, 0.7, 0.8], 0.4, (1, "table")),
                   _annotation(12, 2, [-0.5, 0.1, 2.5], [0.5, 0.9, 0.5], -0.3),
                   _annotation(13, 2, [0.4, 0.0, 5.0], [2.0, 0.5, 1.0], 1.0, (1, "table")),
                   _annotation(14, 3, [0.0, 0.0, 3.5], [0.6, 0.8, 0.6])]
    return {"info": {"id": 7, "source": "SUNRGBD", "name": "SUNRGBD Val", "split": "Val", "version": "0.1", "url": ""},
            "images": images, "annotations": annotations,
            "categories": [{"id": 0, "name": "chair", "supercategory": "furniture"},
                           {"id": 1, "name": "table", "supercategory": "furniture"}]}


@pytest.fixture
def root(tmp_path):
    "datasets/ with the three images; the JSON is written per test under datasets/Omni3D/."
    for i in (1, 2, 3):
        path = tmp_path / "datasets" / "SUNRGBD" / "kv1" / f"img{i}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (W, H), (i * 60, 80, 100)).save(path)
    (tmp_path / "datasets" / "Omni3D").mkdir()
    return tmp_path


def _write(root, data, name="SUNRGBD_val.json"):
    path = root / "datasets" / "Omni3D" / name
    path.write_text(json.dumps(data))
    return path


def _image(data, i): return next(im for im in data["images"] if im["id"] == i)
def _ann(data, i): return next(a for a in data["annotations"] if a["id"] == i)


def _set(record_getter, key, value):
    def edit(data):
        rec = record_getter(data)
        if value is _DELETE: del rec[key]
        else: rec[key] = value
    return edit


_DELETE = object()

# (case name, edit, kind, record id, field, extra text in message)
IMAGE_CASES = [
    ("image missing id", _set(lambda d: _image(d, 2), "id", _DELETE), "image", "#1", "id", "missing key"),
    ("image missing width", _set(lambda d: _image(d, 2), "width", _DELETE), "image", 2, "width", "missing key"),
    ("image missing file_path", _set(lambda d: _image(d, 2), "file_path", _DELETE), "image", 2, "file_path", "missing key"),
    ("image missing K", _set(lambda d: _image(d, 2), "K", _DELETE), "image", 2, "K", "missing key"),
    ("image width not int", _set(lambda d: _image(d, 2), "width", "48"), "image", 2, "width", "expected an integer"),
    ("image height zero", _set(lambda d: _image(d, 2), "height", 0), "image", 2, "height", "must be positive"),
    ("image K wrong shape", _set(lambda d: _image(d, 2), "K", [[40, 0, 24], [0, 40, 12]]), "image", 2, "K",
     "expected shape 3x3, got 2x3"),
    ("image K non-finite", _set(lambda d: _image(d, 2), "K", [[float("inf"), 0, 24], [0, 40, 12], [0, 0, 1]]),
     "image", 2, "K", "non-finite"),
    ("image K zero focal", _set(lambda d: _image(d, 2), "K", [[0, 0, 24], [0, 40, 12], [0, 0, 1]]), "image", 2, "K",
     "focal lengths must be positive"),
    ("image file missing", _set(lambda d: _image(d, 2), "file_path", "SUNRGBD/kv1/gone.jpg"), "image", 2, "file_path",
     "image not found: "),
    ("image size mismatch", _set(lambda d: _image(d, 2), "width", 50), "image", 2, "width", "is 48x24, the record says 50x24"),
    ("image flag not bool", _set(lambda d: _image(d, 2), "src_flagged", "no"), "image", 2, "src_flagged", "expected true or false"),
    ("image path leaves the root", _set(lambda d: _image(d, 2), "file_path", "../../SUNRGBD/kv1/img2.jpg"), "image", 2,
     "file_path", "must be a relative path inside the image root"),
    ("image path absolute", _set(lambda d: _image(d, 2), "file_path", "/etc/hosts"), "image", 2, "file_path",
     "must be a relative path inside the image root"),
    ("image K boolean", _set(lambda d: _image(d, 2), "K", [[True, 0, 24], [0, 40, 12], [0, 0, 1]]), "image", 2, "K",
     "got a boolean"),
]

ANNOTATION_CASES = [
    *[(f"annotation missing {key}", _set(lambda d: _ann(d, 12), key, _DELETE), "annotation", 12, key, "missing key")
      for key in ("image_id", "category_id", "category_name", "valid3D", "center_cam", "dimensions", "R_cam", "bbox3D_cam")],
    ("annotation missing id", _set(lambda d: _ann(d, 12), "id", _DELETE), "annotation", "#2", "id", "missing key"),
    ("center wrong shape", _set(lambda d: _ann(d, 12), "center_cam", [0.0, 1.0]), "annotation", 12, "center_cam",
     "expected shape 3, got 2"),
    ("dimensions wrong shape", _set(lambda d: _ann(d, 12), "dimensions", [[0.5, 0.9, 0.5]]), "annotation", 12, "dimensions",
     "expected shape 3, got 1x3"),
    ("R wrong shape", _set(lambda d: _ann(d, 12), "R_cam", [1, 0, 0, 0, 1, 0, 0, 0, 1]), "annotation", 12, "R_cam",
     "expected shape 3x3, got 9"),
    ("corners wrong shape", _set(lambda d: _ann(d, 12), "bbox3D_cam", [[0, 0, 1]] * 4), "annotation", 12, "bbox3D_cam",
     "expected shape 8x3, got 4x3"),
    ("2D box wrong shape", _set(lambda d: _ann(d, 12), "bbox2D_proj", [1, 2, 3]), "annotation", 12, "bbox2D_proj",
     "expected shape 4, got 3"),
    ("2D box inverted", _set(lambda d: _ann(d, 12), "bbox2D_tight", [30, 5, 10, 20]), "annotation", 12, "bbox2D_tight",
     "x2 < x1"),
    ("center non-finite", _set(lambda d: _ann(d, 12), "center_cam", [0.0, float("nan"), 2.5]), "annotation", 12,
     "center_cam", "non-finite"),
    ("corners non-finite", lambda d: _ann(d, 12)["bbox3D_cam"][5].__setitem__(2, float("inf")), "annotation", 12,
     "bbox3D_cam", "non-finite"),
    ("center not numeric", _set(lambda d: _ann(d, 12), "center_cam", ["a", "b", "c"]), "annotation", 12, "center_cam",
     "not numeric"),
    ("dimension zero", lambda d: _ann(d, 12)["dimensions"].__setitem__(0, 0.0), "annotation", 12, "dimensions",
     "must be positive"),
    ("dimension negative", lambda d: _ann(d, 12)["dimensions"].__setitem__(2, -0.5), "annotation", 12, "dimensions",
     "must be positive"),
    ("unknown image", _set(lambda d: _ann(d, 12), "image_id", 99), "annotation", 12, "image_id", "no image with id 99"),
    ("unknown category", _set(lambda d: _ann(d, 12), "category_id", 5), "annotation", 12, "category_id",
     "5 is not in the file's 'categories'"),
    ("duplicate annotation id", _set(lambda d: _ann(d, 13), "id", 12), "annotation", 12, "id", "duplicate annotation id"),
    ("visibility out of range", _set(lambda d: _ann(d, 12), "visibility", 1.2), "annotation", 12, "visibility",
     "outside [0, 1]"),
    ("truncation not a number", _set(lambda d: _ann(d, 12), "truncation", "low"), "annotation", 12, "truncation",
     "expected a finite number"),
    ("valid3D not bool", _set(lambda d: _ann(d, 12), "valid3D", "true"), "annotation", 12, "valid3D", "expected true or false"),
    ("center boolean", _set(lambda d: _ann(d, 12), "center_cam", [0.0, True, 2.5]), "annotation", 12, "center_cam",
     "got a boolean"),
    ("center implausibly large", _set(lambda d: _ann(d, 12), "center_cam", [0.0, 1e300, 2.5]), "annotation", 12,
     "center_cam", "not a plausible coordinate"),
    ("R not a rotation", _set(lambda d: _ann(d, 12), "R_cam", [[2, 0, 0], [0, 1, 0], [0, 0, 1]]), "annotation", 12,
     "R_cam", "not a rotation"),
    ("R a reflection", _set(lambda d: _ann(d, 12), "R_cam", [[-1, 0, 0], [0, 1, 0], [0, 0, 1]]), "annotation", 12,
     "R_cam", "not a rotation"),
    ("category name empty", _set(lambda d: _ann(d, 12), "category_name", ""), "annotation", 12, "category_name",
     "non-empty string"),
]

CASES = IMAGE_CASES + ANNOTATION_CASES


@pytest.fixture
def clean(root):
    return load_omni3d(_write(root, _dataset(), "SUNRGBD_train.json"))


def test_clean_file_loads(clean):
    assert [s.image_id for s in clean] == [1, 2, 3]
    assert [[o.id for o in s.objects] for s in clean] == [[10, 11], [12, 13], [14]]
    assert clean.report.skipped == [] and clean.report.n_objects == 5


@pytest.mark.parametrize("name,edit,kind,record_id,field,text", CASES, ids=[c[0] for c in CASES])
def test_raise_names_file_record_and_field(root, name, edit, kind, record_id, field, text):
    data = _dataset()
    edit(data)
    path = _write(root, data)
    with pytest.raises(Omni3DFormatError) as info:
        load_omni3d(path)
    err = info.value
    assert (err.kind, err.record_id, err.field) == (kind, record_id, field)
    message = str(err)
    assert str(path) in message and f"{kind} id={record_id}" in message and f"field '{field}'" in message
    assert text in message


@pytest.mark.parametrize("name,edit,kind,record_id,field,text", CASES, ids=[c[0] for c in CASES])
def test_skip_keeps_everything_else(root, clean, caplog, name, edit, kind, record_id, field, text):
    data = _dataset()
    edit(data)
    loaded = load_omni3d(_write(root, data), on_error="skip")
    report = loaded.report
    assert len(report.skipped) >= 1 and report.skipped[0].kind == kind and report.skipped[0].field == field
    assert text in report.skipped[0].reason
    # which records had to go: the bad one, and for a bad image its annotations
    clean_objects = {o.id: o for s in clean for o in s.objects}
    loaded_objects = {o.id: o for s in loaded for o in s.objects}
    if kind == "image":
        assert 2 not in {s.image_id for s in loaded} and {s.image_id for s in loaded} == {1, 3}
        assert set(loaded_objects) == {10, 11, 14}
        assert report.counts() == Counter({("image", field): 1, ("annotation", "image_id"): 2})
    elif name == "duplicate annotation id":  # the first record with id 12 stays, the second (was 13) goes
        assert set(loaded_objects) == {10, 11, 12, 14}
    else:
        assert set(loaded_objects) == {10, 11, 13, 14}
        assert report.counts() == Counter({("annotation", field): 1})
    # nothing already loaded is lost or altered
    for i, o in loaded_objects.items():
        assert o == clean_objects[i]
    for s in loaded:
        assert s.K.tolist() == K and (s.source, s.split) == ("SUNRGBD", "val")
    assert report.n_objects == len(loaded_objects) and report.n_images == len(loaded)
    logged = caplog.text                       # the summary is a warning of the package's logger
    assert "SUNRGBD_val.json" in logged and f"with bad '{field}'" in logged


def test_unreadable_image(root):
    (root / "datasets" / "SUNRGBD" / "kv1" / "img3.jpg").write_bytes(b"not a jpeg at all")
    path = _write(root, _dataset())
    with pytest.raises(Omni3DFormatError, match=r"image id=3: field 'file_path': cannot read image .*img3\.jpg"):
        load_omni3d(path)
    loaded = load_omni3d(path, on_error="skip", verbose=False)
    assert [s.image_id for s in loaded] == [1, 2] and loaded.report.counts()[("annotation", "image_id")] == 1
    assert [s.image_id for s in load_omni3d(path, check_images=False)] == [1, 2, 3]  # the check can be turned off


def test_duplicate_image_keeps_first(root):
    data = _dataset()
    data["images"].append(dict(_image(data, 3), file_path="SUNRGBD/kv1/img1.jpg"))
    path = _write(root, data)
    with pytest.raises(Omni3DFormatError, match="image id=3: field 'id': duplicate image id 3"):
        load_omni3d(path)
    loaded = load_omni3d(path, on_error="skip", verbose=False)
    assert loaded[2].file_path == "SUNRGBD/kv1/img3.jpg" and [o.id for o in loaded[2].objects] == [14]


def test_invalid3d_is_dropped_not_an_error(root):
    data = _dataset()
    _ann(data, 13).update(valid3D=False, center_cam=[-1, -1, -1], dimensions=[-1, -1, -1], bbox3D_cam=[[-1, -1, -1]] * 8)
    loaded = load_omni3d(_write(root, data))
    assert [o.id for o in loaded[1].objects] == [12] and loaded.report.n_invalid3d == 1
    kept = load_omni3d(_write(root, data), keep_invalid3d=True)
    assert [o.valid3D for o in kept[1].objects] == [True, False]


def test_several_bad_records_are_all_counted(root, caplog):
    data = _dataset()
    del _ann(data, 10)["R_cam"]
    _ann(data, 14)["dimensions"][1] = 0
    _ann(data, 11)["image_id"] = 42
    loaded = load_omni3d(_write(root, data), on_error="skip")
    assert [[o.id for o in s.objects] for s in loaded] == [[], [12, 13], []]
    assert loaded.report.counts() == Counter({("annotation", "R_cam"): 1, ("annotation", "dimensions"): 1,
                                              ("annotation", "image_id"): 1})
    assert "skipped 3 record(s)" in caplog.text


@pytest.mark.parametrize("content,text", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object at top level"),
    (json.dumps({"images": []}), "top-level 'annotations' must be a list"),
    (json.dumps({"images": {}, "annotations": []}), "top-level 'images' must be a list"),
])
def test_bad_file(root, content, text):
    path = root / "datasets" / "Omni3D" / "SUNRGBD_test.json"
    path.write_text(content)
    for mode in ("raise", "skip"):  # a broken file cannot be skipped record by record
        with pytest.raises(Omni3DFormatError, match="SUNRGBD_test.json") as info:
            load_omni3d(path, on_error=mode)
        assert text in str(info.value)


def test_bad_category_record(root):
    data = _dataset()
    data["categories"][1] = {"id": "1", "name": "table"}
    with pytest.raises(Omni3DFormatError, match=r"category #1: field 'id': expected an integer"):
        load_omni3d(_write(root, data))


def test_missing_file_and_bad_mode(root):
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        load_omni3d(root / "nowhere.json")
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip'"):
        load_omni3d(_write(root, _dataset()), on_error="ignore")


def test_unknown_truncation_is_computed_from_the_projected_box(root):
    "visibility and truncation both -1 (as in some release files): truncation is the share of bbox2D_proj outside the image."
    data = _dataset()
    for a in data["annotations"]: a["visibility"] = a["truncation"] = -1
    _ann(data, 12)["bbox2D_proj"] = [-10.0, 0.0, 10.0, 10.0]   # half of it left of the image
    objects = {o.id: o for s in load_omni3d(_write(root, data)) for o in s.objects}
    assert objects[12].truncation == pytest.approx(1 - (10 * 10) / (20 * 10))
    for a in data["annotations"]:
        x1, y1, x2, y2 = a["bbox2D_proj"]
        inside = (min(x2, W) - max(x1, 0)) * (min(y2, H) - max(y1, 0))
        assert objects[a["id"]].truncation == pytest.approx(1 - inside / ((x2 - x1) * (y2 - y1)))
        assert objects[a["id"]].visibility is None


def test_an_empty_task_says_why(root, caplog):
    "When no example of a (task, source) survives, build_task_splits prints which filters rejected the objects."
    from consistency_amp.world.task_splits import TaskFilters, build_task_splits
    data = _dataset()
    for a in data["annotations"]: a["visibility"] = a["truncation"] = -1
    scenes = list(load_omni3d(_write(root, data)))
    splits = build_task_splits({"SUNRGBD": scenes}, sources=("SUNRGBD",), filters=TaskFilters(visibility_fallback=False))
    assert all(not split.train and not split.test for split in splits.values())
    out = caplog.text
    assert "build_task_splits: no examples of orientation, depth, size" in out and "from SUNRGBD (3 images)" in out
    assert "visibility unknown: 5" in out
