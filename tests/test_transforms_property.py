"""The central property of `consistency_amp.world.transforms`, at scale.

For every sampled transformation T of a (scene, question):

    ground_truth(T(scene), T(question)) == phi_T(ground_truth(scene, question)),

where the left side is recomputed by `tasks.ground_truth` from the *transformed* geometry (flipped and shifted 2D
box centres, mirrored 3D centres and corners, cropped intrinsics) and the transformed question, and phi_T comes from
the composition rule (`relation_of`). Checked on thousands of random hand-built scenes (with skewed cameras, tight
boxes that differ from the projected ones, objects cut by the image border), on the synthetic world
(`synthetic.make_synthetic_world`) and on the real KITTI / SUN RGB-D frames (skipped when absent). Alongside, the
transformed geometry is checked to be a consistent camera + scene (projections of the transformed corners match the
transformed 2D boxes; rendered pixels land where the transformed geometry projects them), and a wrong composition
rule is shown to fail the same check.
"""
import math

import numpy as np
import pytest
from PIL import Image, ImageDraw

from consistency_amp.world.geometry import box_corners, project_box, project_points, yaw_rotation
from consistency_amp.world.omni3d import Object3D, Scene
from consistency_amp.world.tasks import BOOLEAN_TASKS, NUMERIC_TASKS, TASKS, TEMPLATES, Question, ground_truth, task_values
from consistency_amp.world.transforms import (MIRRORED_CORNER_ORDER, TRANSFORM_NAMES, Transform, answer_pair,
                                        apply_transform, available_transforms, negations, phi, relation_of,
                                        sample_transform)

CATEGORIES = ("table", "chair", "lamp", "bin", "sofa", "car")


# --- random hand-built scenes ------------------------------------------------------------------------------------

def random_camera(rng):
    "A SUN RGB-D-like or KITTI-like camera, sometimes with a skew term (Omni3D has none; the maths must not care)."
    width, height = (640, 480) if rng.random() < 0.6 else (1242, 375)
    f = rng.uniform(0.7, 1.2) * width
    skew = rng.uniform(-10, 10) if rng.random() < 0.3 else 0.0
    K = np.array([[f, skew, width / 2 + rng.uniform(-30, 30)], [0, f * rng.uniform(0.95, 1.05), height / 2 + rng.uniform(-20, 20)],
                  [0, 0, 1.0]])
    return K, width, height


def random_scene(rng, image_id=0):
    "3..7 objects in front of the camera; some cut by the border; tight boxes inside the projected ones (like annotations)."
    K, W, H = random_camera(rng)
    objects, attempts = [], 0
    n = int(rng.integers(3, 8))
    while len(objects) < n and attempts < 500:
        attempts += 1
        R = yaw_rotation(rng.uniform(-np.pi, np.pi))
        if rng.random() < 0.3:   # a small pitch/roll too: R is a general rotation
            a = rng.uniform(-0.2, 0.2)
            R = np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]]) @ R
        center = [rng.uniform(-3, 3), rng.uniform(-0.5, 1.0), rng.uniform(2.5, 12)]
        o = Object3D.from_box(len(objects) + 1, CATEGORIES[rng.integers(len(CATEGORIES))], center,
                              rng.uniform(0.3, 2.0, 3), R, K, W, H)
        if o.behind_camera or o.bbox2D_trunc is None or o.truncation > 0.4: continue
        if rng.random() < 0.7:   # an annotated tight box: the visible box shrunk a little, off-centre
            x1, y1, x2, y2 = o.bbox2D_trunc
            dx, dy = (x2 - x1) * rng.uniform(0, 0.15, 2), (y2 - y1) * rng.uniform(0, 0.15, 2)
            o.bbox2D_tight = np.array([x1 + dx[0], y1 + dy[0], x2 - dx[1], y2 - dy[1]])
        objects.append(o)
    return Scene(image_id, f"{image_id}.png", W, H, K, "SUNRGBD" if W == 640 else "KITTI", "train", objects)


def random_question(rng, scene, task):
    "A random question of `task` about random objects of `scene`, or None when its compared values tie."
    ids = [int(i) for i in rng.permutation([o.id for o in scene.objects])]
    template = int(rng.integers(len(TEMPLATES[task])))
    if task == "counting": return Question(task, (), template, category=scene.object(ids[0]).category)
    if task == "absolute_distance":
        return Question(task, tuple(ids[:2]), template, order=(1, 2) if rng.random() < 0.5 else (2, 1))
    n, order = (3, (2, 3)) if task == "relative_distance" else (2, (1, 2))
    if len(ids) < n: return None
    q = Question(task, tuple(ids[:n]), template, int(rng.integers(2)), order[::-1] if rng.random() < 0.5 else order)
    a, b = task_values(scene, q)
    return None if a == b else q   # a tie has no opposite; the task filters require a gap


def check_property(scene, question, T):
    y, y_t, relation = answer_pair(scene, question, T)
    assert y_t == phi(relation, y), (scene, question, T, y, y_t, relation)
    return relation


def sweep(scenes, rng, questions_per_task=3, transforms_per_question=4):
    "Check the property on random questions and sampled transformations; returns the count of each relation."
    counts = {"same": 0, "opposite": 0, "numeric": 0}
    for scene in scenes:
        if len(scene.objects) < 2: continue
        for task in TASKS:
            for _ in range(questions_per_task):
                question = random_question(rng, scene, task)
                if question is None: continue
                for _ in range(transforms_per_question):
                    counts[check_property(scene, question, sample_transform(rng, scene, question))] += 1
    return counts


# --- the property on hand-built scenes ----------------------------------------------------------------------------

def test_property_on_random_scenes():
    rng = np.random.default_rng(0)
    scenes = [random_scene(rng, i) for i in range(120)]
    counts = sweep(scenes, rng)
    assert sum(counts.values()) > 7000, counts
    assert min(counts.values()) > 1000, counts   # every relation is exercised, not just "same"


@pytest.mark.parametrize("name", TRANSFORM_NAMES)
def test_each_transformation_alone(name):
    "Every single transformation, forced on, on every task that has it: the property holds for each on its own."
    rng = np.random.default_rng(1)
    for i in range(40):
        scene = random_scene(rng, i)
        for task in TASKS:
            if name not in available_transforms(task): continue
            question = random_question(rng, scene, task)
            if question is None: continue
            T = sample_transform(rng, scene, question, p=1.0)
            T = Transform(**{n: getattr(T, n) for n in (name,)})   # keep only `name`
            assert T.applied == (name,)
            check_property(scene, question, T)


def test_wrong_rules_fail():
    "The check has teeth: ignoring any one equivariance, or letting the flip negate every task, breaks it."
    rng = np.random.default_rng(2)
    wrong = {"no_flip": 0, "no_relation_swap": 0, "no_order_swap": 0, "flip_negates_all": 0}
    for i in range(60):
        scene = random_scene(rng, i)
        for task in BOOLEAN_TASKS:
            question = random_question(rng, scene, task)
            if question is None: continue
            T = sample_transform(rng, scene, question)
            y, y_t, _ = answer_pair(scene, question, T)
            n = negations(T, task)
            rules = {"no_flip": n - (T.flip and task == "orientation"), "no_relation_swap": n - T.relation_swap,
                     "no_order_swap": n - T.order_swap, "flip_negates_all": n + (T.flip and task != "orientation")}
            for rule, m in rules.items():
                wrong[rule] += y_t != phi("opposite" if m % 2 else "same", y)
    assert all(v > 10 for v in wrong.values()), wrong


def test_sampling_frequencies_and_numeric_tasks():
    rng = np.random.default_rng(3)
    scene = random_scene(rng)
    for task in TASKS:
        question = None
        while question is None: question = random_question(rng, scene, task)
        Ts = [sample_transform(rng, scene, question) for _ in range(3000)]
        for name in TRANSFORM_NAMES:
            freq = np.mean([name in T.applied for T in Ts])
            if name in available_transforms(task): assert abs(freq - 0.5) < 0.04, (task, name, freq)
            else: assert freq == 0, (task, name, freq)
        if task in NUMERIC_TASKS:
            assert not any(T.relation_swap for T in Ts)
            assert {relation_of(T, task) for T in Ts} == {"numeric"}
        else:
            assert {relation_of(T, task) for T in Ts} == {"same", "opposite"}


def test_marker_swap_property_and_its_wrong_rule():
    "Beyond the paper: with the marker swap sampled too, the property holds; a rule that ignores the swap breaks it."
    rng = np.random.default_rng(5)
    swapped = wrong = 0
    for i in range(80):
        scene = random_scene(rng, i)
        for task in TASKS:
            question = random_question(rng, scene, task)
            if question is None: continue
            T = sample_transform(rng, scene, question, marker_swap=True)
            relation = check_property(scene, question, T)
            if T.marker_swap and task in BOOLEAN_TASKS:
                swapped += 1
                y, y_t, _ = answer_pair(scene, question, T)
                wrong += y_t != phi({"same": "opposite", "opposite": "same"}[relation], y)
            if task == "counting": assert not T.marker_swap
    assert swapped > 50 and wrong == swapped, (swapped, wrong)   # every marker-swapped boolean pair negates


# --- the transformed geometry is a consistent camera + scene ------------------------------------------------------

def test_transformed_geometry_is_consistent():
    rng = np.random.default_rng(4)
    for i in range(150):
        scene = random_scene(rng, i)
        question = random_question(rng, scene, "depth") or Question("counting", (), 0, category=scene.objects[0].category)
        T = sample_transform(rng, scene, question, p=0.7)
        scene_t, _, _ = apply_transform(scene, None, question, T)
        if T.crop is not None: assert (scene_t.width, scene_t.height) == (T.crop[2] - T.crop[0], T.crop[3] - T.crop[1])
        for o, o_t in zip(scene.objects, scene_t.objects):
            # the corners are those of the transformed pose, in Omni3D order
            np.testing.assert_allclose(o_t.corners, box_corners(o_t.center, o_t.dimensions, o_t.R), atol=1e-9)
            np.testing.assert_allclose(np.linalg.det(o_t.R), 1.0, atol=1e-9)
            # the stored projected box is the projection of the transformed corners with the transformed K
            np.testing.assert_allclose(o_t.bbox2D_proj, project_box(o_t.corners, scene_t.K), atol=1e-6)
            # each corner projects where the image operation sends the original projection
            uv, uv_t = project_points(scene.K, o.corners), project_points(scene_t.K, o_t.corners)
            if T.crop is not None: uv = uv - T.crop[:2]
            if T.flip: uv = (np.array([scene_t.width, 0]) + uv * [-1, 1])[list(MIRRORED_CORNER_ORDER)]
            np.testing.assert_allclose(uv_t, uv, atol=1e-6)
            # the visible 2D box stays inside the (cropped) image
            x1, y1, x2, y2 = np.clip(o_t.bbox2D, 0, [scene_t.width, scene_t.height] * 2)
            assert 0 <= x1 < x2 <= scene_t.width and 0 <= y1 < y2 <= scene_t.height
            # depth, size and 3D distances are untouched
            assert o_t.depth == o.depth and o_t.volume == o.volume


def render_tags(scene):
    "A black image with a 5x5 square of a colour unique to each object at its projected 3D centre."
    image = Image.new("RGB", (scene.width, scene.height))
    draw = ImageDraw.Draw(image)
    for o in scene.objects:
        u, v = project_points(scene.K, o.center[None])[0]
        draw.rectangle([u - 2, v - 2, u + 2, v + 2], fill=(255, 17 * o.id % 256, 40 + 29 * o.id))
    return image


def test_image_and_geometry_transform_together():
    "After flip and crop of the image, each object's colour is where the transformed geometry projects its centre."
    rng = np.random.default_rng(5)
    checked = 0
    for i in range(60):
        scene = random_scene(rng, i)
        centres = np.array([project_points(scene.K, o.center[None])[0] for o in scene.objects])
        inside = (centres[:, 0] > 3) & (centres[:, 0] < scene.width - 3) & (centres[:, 1] > 3) & (centres[:, 1] < scene.height - 3)
        if not inside.all() or len(centres) < 2: continue
        gaps = np.linalg.norm(centres[:, None] - centres[None], axis=-1) + np.eye(len(centres)) * 99
        if gaps.min() < 8: continue   # overlapping tags
        question = Question("counting", (), 0, category=scene.objects[0].category)
        T = sample_transform(rng, scene, question, p=1.0)
        T = Transform(flip=T.flip, crop=T.crop)   # no jitter: it would recolour the tags
        scene_t, image_t, _ = apply_transform(scene, render_tags(scene), question, T)
        pixels = image_t.load()
        for o in scene_t.objects:
            u, v = project_points(scene_t.K, o.center[None])[0]
            assert pixels[int(u), int(v)] == (255, 17 * o.id % 256, 40 + 29 * o.id), (i, o.id, T)
            checked += 1
    assert checked > 100


# --- the synthetic world and the real frames ---------------------------------------------------------------------

def test_property_on_synthetic_world(tmp_path):
    synthetic = pytest.importorskip("consistency_amp.world.synthetic", reason="consistency_amp.world.synthetic not available")
    from consistency_amp.world.task_splits import build_examples, load_sources
    root = synthetic.make_synthetic_world(tmp_path / "world", n_images_per_split={"train": 8})
    scenes = [s for source_scenes in load_sources(root, splits=("train",)).values() for s in source_scenes]
    assert len(scenes) == 16
    rng = np.random.default_rng(6)
    counts = sweep(scenes, rng, questions_per_task=3, transforms_per_question=5)
    assert sum(counts.values()) > 1000, counts
    # and on the examples the dataset builder actually selects
    examples = [e for task in TASKS for e in build_examples(scenes, task, max_per_image=2)]
    assert examples
    for e in examples:
        for _ in range(10): check_property(e.scene, e.question, sample_transform(rng, e))


def test_property_on_real_frames():
    real_frames = pytest.importorskip("consistency_amp.world.real_frames")
    if real_frames.real_samples_root() is None: pytest.skip("real samples (../shared/data/real_samples) not found")
    from consistency_amp.world.task_splits import build_examples
    scenes = real_frames.load_real_samples()
    rng = np.random.default_rng(7)
    counts = sweep(scenes, rng, questions_per_task=5, transforms_per_question=10)
    assert sum(counts.values()) > 1000 and min(counts.values()) > 100, counts
    for e in [e for task in TASKS for e in build_examples(scenes, task, max_per_image=3)]:
        for _ in range(20): check_property(e.scene, e.question, sample_transform(rng, e))
