"""Shared by the benchmark scripts: the speed targets are stated for one CPU core."""
import os


def pin_to_one_core() -> str:
    "Pin this process to the first CPU it may use; returns a description."
    if hasattr(os, "sched_setaffinity"):
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        return f"pinned to CPU {core}"
    return "not pinned (no sched_setaffinity on this OS)"
