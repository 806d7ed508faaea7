"""Throughput of prompt-pair construction: `prompts.make_prompt_pair` on 640x480 images, on one CPU core.

usage: python benchmarks/bench_prompts.py [--images 48] [--pairs 600] [--repeat 3] [--format jpg] [--core 0] [--blocks 16] [--seed 0]

One pair = load the image from disk (decode to RGB), sample T (`transforms.sample_transform`, each transformation with
probability 0.5), apply it to the scene, image and question, draw the markers on both images and format both
conversational prompts, and recompute the augmented ground truth: everything a training step does per example
before the processor. The images are synthetic-world scenes (`rendering.generate_image`) rendered at 640x480 and
saved as `--format` (SUN RGB-D's frames are JPEG); the examples are the ones `task_splits.build_examples` selects on
them, all six tasks mixed. The process is pinned to `--core` (Linux) so the figure is single-core.

Prints pairs/s (best of `--repeat` runs over `--pairs` pairs) for the paper's sampling (p = 0.5) and for the worst
case where every transformation is applied (p = 1): by the wall clock, and per CPU second of this process (the
single-core rate even when other processes share the core), with a per-stage breakdown in CPU milliseconds per pair;
first with Pillow's defaults, then with its buffer cache on (`prompts.use_pillow_block_cache(--blocks)`, what a data
pipeline should do: without it every new image buffer pays its page faults again).
Target: at least 150 pairs/s at p = 0.5.
"""
import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import PIL
from PIL import Image

from consistency_amp.world.prompts import load_rgb, make_prompt, make_prompt_pair, use_pillow_block_cache
from consistency_amp.world.tasks import TASKS, ground_truth
from consistency_amp.world.transforms import apply_transform, relation_of, sample_transform

TARGET = 150.0


def build_examples(folder: Path, n_images: int, fmt: str, seed: int):
    "Synthetic 640x480 scenes written as image files under `folder`, and the examples selected on them (all tasks)."
    from consistency_amp.world.rendering import generate_image, image_rng
    from consistency_amp.world.task_splits import build_examples as select
    scenes = []
    for i in range(n_images):
        source = "SUNRGBD"
        scene, image = generate_image(image_rng(seed, source, "train", i), source, image_id=i, file_path=f"{i:06d}.{fmt}",
                                      size=(640, 480))
        path = folder / scene.file_path
        image.save(path, quality=95) if fmt == "jpg" else image.save(path, compress_level=6)
        scene.image_path = path
        scenes.append(scene)
    examples = [e for task in TASKS for e in select(scenes, task, max_per_image=1)]
    order = np.random.default_rng(seed).permutation(len(examples))
    return [examples[i] for i in order], scenes


def pairs_per_second(examples, n_pairs: int, repeat: int, p: float, seed: int) -> tuple[float, float]:
    "(pairs per wall-clock second, pairs per CPU second of this process), each the best of `repeat` runs."
    wall = cpu = 0.0
    for r in range(repeat):
        rng = np.random.default_rng([seed, r])
        start, start_cpu = time.perf_counter(), time.process_time()
        for k in range(n_pairs): make_prompt_pair(examples[k % len(examples)], rng, p=p)
        wall = max(wall, n_pairs / (time.perf_counter() - start))
        cpu = max(cpu, n_pairs / (time.process_time() - start_cpu))
    return wall, cpu


def stage_breakdown(examples, n_pairs: int, p: float, seed: int) -> dict:
    "Milliseconds per pair spent in each stage of `make_prompt_pair`, timed separately."
    rng, t = np.random.default_rng(seed), dict.fromkeys(("load", "sample", "apply", "prompts", "ground truth"), 0.0)
    clock = time.process_time
    for k in range(n_pairs):
        e = examples[k % len(examples)]
        t0 = clock(); image = load_rgb(e.scene)
        t1 = clock(); T = sample_transform(rng, e.scene, e.question, p=p)
        t2 = clock(); scene_t, image_t, q_t = apply_transform(e.scene, image, e.question, T)
        t3 = clock(); make_prompt(e.scene, image, e.question, inplace=True); make_prompt(scene_t, image_t, q_t, inplace=True)
        relation_of(T, e.task)
        t4 = clock(); ground_truth(scene_t, q_t)
        t5 = clock()
        for name, dt in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)): t[name] += dt
    return {name: 1000 * v / n_pairs for name, v in t.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=48, help="distinct images (cycled through)")
    parser.add_argument("--pairs", type=int, default=600, help="pairs per timed run")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (the best is reported)")
    parser.add_argument("--format", choices=("jpg", "png"), default="jpg", help="image file format")
    parser.add_argument("--core", type=int, default=0, help="CPU core to pin to (Linux); -1: do not pin")
    parser.add_argument("--blocks", type=int, default=16, help="Pillow block cache for the main runs (prompts.use_pillow_block_cache)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.core >= 0 and hasattr(os, "sched_setaffinity"): os.sched_setaffinity(0, {args.core})
    pinned = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "n/a"

    with tempfile.TemporaryDirectory() as folder:
        examples, scenes = build_examples(Path(folder), args.images, args.format, args.seed)
        n_objects = np.mean([len(s.objects) for s in scenes])
        print(f"python {platform.python_version()}, Pillow {PIL.__version__}, numpy {np.__version__}, "
              f"{platform.processor() or platform.machine()}, cores {pinned}")
        print(f"{len(examples)} examples ({', '.join(f'{t}: {sum(e.task == t for e in examples)}' for t in TASKS)}) "
              f"on {len(scenes)} 640x480 {args.format} images, {n_objects:.1f} objects per scene\n")
        for e in examples[:20]: make_prompt_pair(e, 0)   # warm-up: imports, caches
        for blocks, p in ((0, 0.5), (args.blocks, 0.5), (args.blocks, 1.0)):
            use_pillow_block_cache(blocks)
            print(f"Pillow block cache {blocks:2d}, ", end="")
            wall, cpu = pairs_per_second(examples, args.pairs, args.repeat, p, args.seed)
            stages = stage_breakdown(examples, args.pairs, p, args.seed)
            label = "p = 0.5 (paper)" if p == 0.5 else "p = 1 (everything)"
            verdict = f"  (target >= {TARGET:.0f}: {'met' if wall >= TARGET else 'NOT met'})" if p == 0.5 else ""
            print(f"{label:18s} {wall:6.1f} pairs/s wall clock, {cpu:6.1f} pairs per CPU second{verdict}")
            print("    CPU ms per pair: " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items())
                  + f"; total {sum(stages.values()):.2f}")
        if hasattr(os, "getloadavg") and os.getloadavg()[0] > 0.75 * (os.cpu_count() or 1):
            print(f"\nnote: load average {os.getloadavg()[0]:.1f}: other processes share this core, so the wall-clock "
                  "figure is pessimistic; pairs per CPU second is this process's own single-core rate")


if __name__ == "__main__":
    main()
