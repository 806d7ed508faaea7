"""Property checks of the self-supervised tasks and rewards at scale (nbs/06_ssl_rewards, nbs/23_ssl_tasks).

Random texts never break the parsers and every reward lies in [0, 1]; on a synthetic world with both sources, every
built example's ground truth is reproduced by its own construction: rotating back restores the image, the inverse
permutation reassembles the tiles, the crop lies in the named quadrant, and the 3D ordering sorts the points by the
depth of the surface the image shows there, recomputed independently from the box faces.
"""
import itertools
import math

import numpy as np
import pytest

from consistency_amp.reward.ssl import (PERMUTATION_SIZE, SSL_TASKS, format_ssl_answer, parse_ssl_answer, random_guess_reward,
                                        ssl_reward, ssl_score, ssl_truth)
from consistency_amp.world.ssl_tasks import (quadrant_boxes, reassemble, rotate_ccw, ssl_examples, training_scenes,
                                             visible_objects)
from consistency_amp.world.prompts import load_rgb
from consistency_amp.world.synthetic import make_synthetic_world
from consistency_amp.world.task_splits import load_sources, split_of

ALPHABET = list("0123456789,;[]() .-_°<>/abcdeghilnoprstvxABTPN\n") + ["<answer>", "</answer>", "<think>", "</think>",
                                                                       "positive", "top-left", "degrees", "90"]
TRUTHS = {"ssl4rl_rotation": "180", "ssl4rl_contrastive": "negative", "ssl4rl_position": "bottom-left",
          "ssl4rl_jigsaw": "2,4,1,3", "jigsaw_image": "4,9,1,7,2,3,8,6,5", "jigsaw_3d": "6,1,3,5,2,4"}


def test_random_texts_score_in_unit_interval():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        body = "".join(rng.choice(ALPHABET, size=int(rng.integers(0, 12))))
        for text in (body, f"<think>t</think><answer>{body}</answer>"):
            for task, truth in TRUTHS.items():
                r = ssl_reward(text, truth, task)
                assert 0.0 <= r <= 1.0
                if parse_ssl_answer(text, task) is None: assert r == 0.0


def test_only_the_truth_scores_one():
    for task, truth in TRUTHS.items():
        value = ssl_truth(truth, task)
        if task in PERMUTATION_SIZE:
            n = len(value)
            candidates = itertools.permutations(range(1, n + 1)) if n <= 6 else (
                tuple(int(v) for v in np.random.default_rng(k).permutation(n) + 1) for k in range(2000))
        else: candidates = {"ssl4rl_rotation": (0, 90, 180, 270), "ssl4rl_contrastive": ("positive", "negative"),
                            "ssl4rl_position": ("top-left", "top-right", "bottom-left", "bottom-right")}[task]
        for c in candidates:
            s = ssl_score(c, truth, task)
            assert (s == 1.0) == (tuple(c) == value if task in PERMUTATION_SIZE else c == value)
            assert ssl_reward(f"<think>t</think><answer>{format_ssl_answer(c, task)}</answer>", truth, task) == s


def test_random_guess_is_below_one():
    assert all(0 < random_guess_reward(t) < 1 for t in SSL_TASKS)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_synthetic_world(tmp_path_factory.mktemp("ssl") / "world", n_images_per_split={"train": 10, "val": 0, "test": 5},
                                progress=False)


def depth_by_faces(corners, K, u, v):
    faces = ((0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 5, 4), (3, 2, 6, 7), (0, 3, 7, 4), (1, 2, 6, 5))
    d, hits = np.linalg.solve(K, [u, v, 1.0]), []
    for f in faces:
        p0, a, b = corners[f[0]], corners[f[1]] - corners[f[0]], corners[f[3]] - corners[f[0]]
        n = np.cross(a, b)
        if abs(n @ d) < 1e-12: continue
        t = (n @ p0) / (n @ d)
        s, r = np.linalg.lstsq(np.stack([a, b], 1), t * d - p0, rcond=None)[0]
        if t > 0 and -1e-9 <= s <= 1 + 1e-9 and -1e-9 <= r <= 1 + 1e-9: hits.append(t)
    return min(hits)


@pytest.mark.parametrize("source", ["SUNRGBD", "KITTI"])
def test_examples_reproduce_their_ground_truth(world, source):
    scenes = {s.image_id: s for s in training_scenes(world, source)}
    built = ssl_examples(world, source=source, seed=3)
    assert all(built[t] for t in SSL_TASKS)
    for task, examples in built.items():
        for ex in examples:
            assert ex.image_id in scenes and split_of(source, ex.image_id) == "train"
            truth = ssl_truth(ex.answer, task)
            assert ssl_reward(f"<think>t</think><answer>{ex.answer}</answer>", ex.answer, task) == 1.0
            if task == "ssl4rl_rotation":
                assert np.array_equal(np.asarray(rotate_ccw(ex.images[1], (360 - truth) % 360)), np.asarray(ex.images[0]))
            elif task in ("ssl4rl_jigsaw", "jigsaw_image"):
                boxes = ex.info["boxes"]
                size = (boxes[-1][2], boxes[-1][3])
                rebuilt = np.asarray(reassemble(ex.images, truth, boxes, size))
                original = np.asarray(load_rgb(scenes[ex.image_id]).crop((0, 0) + size))
                assert np.array_equal(rebuilt, original)
            elif task == "ssl4rl_position":
                qx1, qy1, qx2, qy2 = quadrant_boxes(*ex.images[0].size)[truth]
                x1, y1, x2, y2 = ex.info["box"]
                assert qx1 <= x1 < x2 <= qx2 and qy1 <= y1 < y2 <= qy2
            elif task == "ssl4rl_contrastive":
                a, b = ex.info["image_ids"]
                assert (truth == "positive") == (a == b) and b in scenes
            else:
                scene, shown = scenes[ex.image_id], ex.info["points"]
                ids = visible_objects(scene)
                for p in shown:
                    o = scene.object(p["object_id"])
                    assert scene.objects[ids[p["v"], p["u"]]].id == o.id
                    assert math.isclose(p["depth"], depth_by_faces(o.corners, scene.K, p["u"], p["v"]), abs_tol=1e-9)
                assert truth == tuple(1 + k for k in sorted(range(len(shown)), key=lambda k: shown[k]["depth"]))


def test_no_test_image_is_ever_used(world):
    every = training_scenes(world) + training_scenes(world, "KITTI")
    test_ids = {s.image_id for scenes in load_sources(world).values() for s in scenes if split_of(s.source, s.image_id) == "test"}
    assert test_ids and not test_ids & {s.image_id for s in every}
    for source in ("SUNRGBD", "KITTI"):
        built = ssl_examples(world, source=source, seed=11)
        used = {i for ex in built["ssl4rl_contrastive"] for i in ex.info["image_ids"]}
        assert not test_ids & (used | {ex.image_id for examples in built.values() for ex in examples})
