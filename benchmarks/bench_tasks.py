"""Timing of the task datasets: all six tasks' train/test splits from 1,000 synthetic images on one core.

usage: python benchmarks/bench_tasks.py [--images 1000] [--seed 0] [--world DIR] [--max-per-image 1]

Makes (or, with --world DIR holding one, reuses) a synthetic Omni3D world of `--images` images split evenly over
SUNRGBD and KITTI (60/20/20 over Omni3D's train/val/test files), then times what `build_task_splits(root)` does:
  * load: reading the six JSON files (`load_sources`, image sizes checked against the PNG headers);
  * build: single-object filters, pair/group filters, selection, wording and ground truth for the six tasks and both
    sources, and the 80/20 split;
and `dataset_statistics` on the result. The process is pinned to one CPU core (where the OS allows) and numerical
libraries to one thread. Making the world is timed separately (see bench_synthetic.py) and not counted.
Target: load + build in under 60 s on one core, judged on CPU time (on a shared machine the wall clock also counts
whatever else runs on that core).
"""
import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import argparse, platform, tempfile, time
from pathlib import Path

from consistency_amp.world.synthetic import make_synthetic_world
from consistency_amp.world.task_splits import build_task_splits, dataset_statistics, load_sources
from consistency_amp.world.tasks import TASKS

from one_core import pin_to_one_core  # benchmarks/ is on sys.path when a script runs

TARGET_SECONDS = 60.0
SOURCES = ("SUNRGBD", "KITTI")


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def per_split(images: int) -> dict:
    per_source = images // len(SOURCES)
    val = test = per_source // 5
    return {"train": per_source - val - test, "val": val, "test": test}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=1000, help="synthetic images in all (split evenly over the two sources)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic world")
    ap.add_argument("--world", type=Path, default=None, help="folder of a synthetic world to reuse or create (default: a temporary one)")
    ap.add_argument("--max-per-image", type=int, default=1, help="questions per image and task")
    args = ap.parse_args()
    if args.images < 2 * len(SOURCES): ap.error("--images must be at least 4")

    pinned = pin_to_one_core()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.world or Path(tmp) / "world"
        if (root / "synthetic_world.json").is_file():
            print(f"reusing the synthetic world at {root}")
        else:
            _, wall, cpu = timed(lambda: make_synthetic_world(root, n_images_per_split=per_split(args.images), seed=args.seed))
            print(f"made a synthetic world of {args.images} images at {root} in {wall:.1f} s wall, {cpu:.1f} s CPU (not counted)")

        by_source, load_wall, load_cpu = timed(lambda: load_sources(root, SOURCES))
        n_images = sum(len(v) for v in by_source.values())
        splits, build_wall, build_cpu = timed(lambda: build_task_splits(by_source, TASKS, SOURCES, max_per_image=args.max_per_image))
        stats, stats_wall, stats_cpu = timed(lambda: dataset_statistics(splits))

    total_cpu, total_wall = load_cpu + build_cpu, load_wall + build_wall
    print(f"python {platform.python_version()}, {platform.machine()}, {pinned}")
    print(f"{n_images} images, {sum(len(s.objects) for v in by_source.values() for s in v)} objects")
    print(f"load  (6 JSON files)         {load_wall:7.2f} s wall  {load_cpu:7.2f} s CPU")
    print(f"build (6 tasks x 2 sources)  {build_wall:7.2f} s wall  {build_cpu:7.2f} s CPU")
    print(f"dataset_statistics           {stats_wall:7.2f} s wall  {stats_cpu:7.2f} s CPU")
    print(f"total load + build           {total_wall:7.2f} s wall  {total_cpu:7.2f} s CPU  "
          f"({1000 * total_cpu / n_images:.1f} ms CPU per image; target < {TARGET_SECONDS:.0f} s: "
          f"{'met' if total_cpu < TARGET_SECONDS else 'MISSED'})")
    print(stats[["n", "train", "test", "true_rate"]].to_string())


if __name__ == "__main__":
    main()
