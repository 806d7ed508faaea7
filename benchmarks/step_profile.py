"""One OT-GRPO training step under `torch.profiler`: where its time goes (issue 23, item 1).

Used by `bench_step_time.py --profile`: the first step after the warm-up is recorded with `torch.profiler` (CPU, and
CUDA on a GPU, with Python stacks), and three tables are printed:

* **regions**: the step's phases and the model parts the issue suspects, each labelled with `record_function` by
  this module: TRL's generation, rewards, the log-probability forwards (split into the no-grad pass of the old or
  reference policy and the loss forward), the backward, the vision tower (each call; under gradient checkpointing a
  recomputation shows up as a call inside the backward), the language model and LoRA dropout. Wall milliseconds
  (inclusive) and, on a GPU, the kernel time launched inside them;
* **operators**: the aten operators by self time (device time on a GPU, else CPU);
* **Python frames**: the Python functions by self time (interpreter time not spent in a child frame or operator),
  which is where launch-bound overhead shows up.

On the CPU the tables are only a check that the path runs: a tiny model's step is mostly Python. On a GPU, kernel
time against the step's wall time says whether the step is launch-bound.
"""
import json
import re
import tempfile
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

PYTHON_FRAME = re.compile(r"^.+\.py\(\d+\): .+$")   # how the profiler names a Python frame with with_stack=True
# Threads parked on a lock or condition (the profiler's, the dataloader's, the autograd engine's) record their whole
# wait as self time: kept out of the tables, their total reported on its own.
IDLE = re.compile(r"^(threading\.py\(\d+\): wait|<built-in method acquire of _thread\.lock object.*)$")
REGION = "region: "
NOT_KERNELS = ("Command Buffer Full",)   # device-side profiler events that are no kernel's time
# Regions in the order they are printed; the module regions are matched by the attribute name of the module.
PHASES = ("generate", "rewards", "log-probs, no grad (old/ref policy)", "log-probs, loss forward", "backward",
          "optimizer step")
MODULES = {"vision tower": "visual", "language model": "language_model", "LoRA dropout": "lora_dropout"}


def _labelled(fn, label):
    def wrapper(*args, **kwargs):
        with record_function(REGION + (label() if callable(label) else label)): return fn(*args, **kwargs)
    return wrapper


def label_trainer(trainer) -> None:
    "Label the trainer's phases with `record_function` (instance attributes: the class is untouched)."
    for name, label in (("_generate", "generate"), ("_calculate_rewards", "rewards")):
        setattr(trainer, name, _labelled(getattr(trainer, name), label))
    trainer._get_per_token_logps_and_entropies = _labelled(
        trainer._get_per_token_logps_and_entropies,
        lambda: PHASES[3] if torch.is_grad_enabled() else PHASES[2])
    trainer.accelerator.backward = _labelled(trainer.accelerator.backward, "backward")


def label_optimizer(optimizer) -> None:
    "Label the optimizer's step (the Trainer builds the optimizer at train start: call this from on_train_begin)."
    if optimizer is not None and not getattr(optimizer.step, "_step_profile", False):
        optimizer.step = _labelled(optimizer.step, "optimizer step")
        optimizer.step._step_profile = True


def label_modules(model) -> list:
    """Label every call of the vision tower, the language model and each LoRA dropout module (forward hooks, so a
    checkpointing recomputation is labelled too). Returns the hook handles: `h.remove()` undoes them."""
    handles = []
    for name, module in model.named_modules():
        parts = name.split(".")
        # a LoRA dropout is `<layer>.lora_dropout.<adapter>`; the other regions are the module of that attribute name
        attr = parts[-2] if len(parts) > 1 and parts[-2] == MODULES["LoRA dropout"] else parts[-1]
        label = next((lab for lab, a in MODULES.items() if a == attr), None)
        if attr == MODULES["LoRA dropout"] and parts[-1] == attr: label = None   # the ModuleDict itself
        if label is None: continue
        stack = []
        def pre(module, args, kwargs, label=label, stack=stack):
            rf = record_function(REGION + label); rf.__enter__(); stack.append(rf)
        def post(module, args, kwargs, output, stack=stack):
            stack.pop().__exit__(None, None, None)
        handles += [module.register_forward_pre_hook(pre, with_kwargs=True),
                    module.register_forward_hook(post, with_kwargs=True)]
    return handles


@contextmanager
def profiled(device: torch.device, with_stack: bool = True):
    """A `torch.profiler.profile` of CPU (and CUDA on a GPU), with Python stacks unless `with_stack` is False (a GPU
    step of the 7B model at the paper's load records so many events with stacks that making the tables takes longer
    than the step; measured 2026-11-25); yields the profiler."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, with_stack=with_stack, record_shapes=False) as prof:
        yield prof
    if device.type == "cuda": torch.cuda.synchronize(device)


def _ms(us: float) -> float: return us / 1e3


def trace_self_times(trace_events: list) -> dict:
    """Calls, self and total time (microseconds) of each Python frame in a Chrome trace's events. Self time is a
    frame's duration less that of its direct children (frames and operators) on the same thread. Labelled ranges
    (`record_function`) are left out: one opens inside `__enter__`'s frame and closes in its caller's, so it does not
    nest. A generator's frame counts a call per resumption."""
    threads = defaultdict(list)
    for e in trace_events:
        if e.get("ph") == "X" and e.get("cat") in ("python_function", "cpu_op"):
            threads[(e["pid"], e["tid"])].append(e)
    totals = defaultdict(lambda: [0, 0.0, 0.0])
    for events in threads.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack, child = [], defaultdict(float)   # open events; the children's time of each, by position
        for i, e in enumerate(events + [None]):
            while stack and (e is None or events[stack[-1]]["ts"] + events[stack[-1]]["dur"] <= e["ts"]):
                j = stack.pop(); done = events[j]
                if done["cat"] == "python_function":
                    t = totals[done["name"]]; t[0] += 1; t[1] += done["dur"] - child[j]; t[2] += done["dur"]
            if e is None: break
            if stack: child[stack[-1]] += e["dur"]
            stack.append(i)
    return {name: dict(calls=c, self_us=t, total_us=total) for name, (c, t, total) in totals.items()}


def python_frames_from_trace(prof, trace_file=None) -> dict:
    """The Python frames' self times, read from the profile's Chrome trace (`trace_file` if it was exported there
    already: torch exports a profile once, 2.11 and 2.13 alike). Under torch 2.11 (the GPU machines' and vLLM 0.26's)
    `with_stack=True` puts the frames in the exported trace only, not in `events()` or `key_averages()` (found on the
    CPU, 2026-11-26), so the frames table came out empty."""
    with tempfile.TemporaryDirectory() as folder:
        if trace_file is None:
            trace_file = Path(folder) / "trace.json"; prof.export_chrome_trace(str(trace_file))
        return trace_self_times(json.loads(Path(trace_file).read_text())["traceEvents"])


def profile_tables(prof, wall_s: float, top: int = 15, trace_file=None) -> dict:
    """The step's regions, top operators and top Python frames by self time, as plain dicts (JSON-ready); `trace_file`:
    where the profile's Chrome trace was exported, if it was."""
    try: events = prof.events()   # the first read parses the recorded events
    except UnicodeDecodeError as e:   # seen once, in CI (2026-11-27), with Python stacks on
        raise RuntimeError(f"torch's profiler could not decode the name of a recorded event ({e}); profile again, or "
                           "without Python stacks (--profile-no-stack)") from e
    cuda = any(e.device_type == torch.autograd.DeviceType.CUDA for e in events) or any(
        e.self_device_time_total > 0 for e in events)
    regions = defaultdict(lambda: dict(calls=0, wall_ms=0.0, device_ms=0.0))
    for e in events:   # CPU-side ranges only: on a GPU each range also appears as a GPU annotation of the same name,
        # which counted every region twice (calls 2, wall ms about doubled) in the first H100 profile (2026-11-25)
        if e.name.startswith(REGION) and e.device_type == torch.autograd.DeviceType.CPU:
            r = regions[e.name.removeprefix(REGION)]
            r["calls"] += 1; r["wall_ms"] += _ms(e.time_range.elapsed_us()); r["device_ms"] += _ms(e.device_time_total)
    averages = prof.key_averages()
    self_key = "self_device_time_total" if cuda else "self_cpu_time_total"
    operators, frames, idle_ms = [], [], 0.0
    for a in averages:
        # Python frames and waits come from the trace (below): torch 2.11 lists none here, and torch 2.13's self times
        # here misplace a labelled range's time (it opens in `__enter__`'s frame: 2.13 gave that frame 21-22 times the
        # self time the trace shows; tests/test_bench_step_time.py)
        if a.key.startswith(REGION) or PYTHON_FRAME.match(a.key) or IDLE.match(a.key): continue
        operators.append(dict(name=a.key, calls=a.count, self_cpu_ms=_ms(a.self_cpu_time_total),
                              self_device_ms=_ms(a.self_device_time_total)))
    if getattr(prof, "with_stack", False):
        for name, r in python_frames_from_trace(prof, trace_file).items():
            if IDLE.match(name): idle_ms += _ms(r["self_us"])
            elif PYTHON_FRAME.match(name):
                frames.append(dict(name=name, calls=r["calls"], self_cpu_ms=_ms(r["self_us"]), self_device_ms=0.0))
    operators.sort(key=lambda r: -r["self_device_ms" if cuda else "self_cpu_ms"])
    frames.sort(key=lambda r: -r["self_cpu_ms"])
    # GPU busy time: the device-side events themselves (kernels, copies), not the averages, whose rows hold both an
    # operator's self device time and its kernels' (summing them counted each kernel twice in the first H100 profile,
    # 2026-11-25); "Command Buffer Full" is the CUDA runtime blocking the launching thread, not a kernel
    device_total = sum(e.time_range.elapsed_us() for e in events if e.device_type == torch.autograd.DeviceType.CUDA
                       and not e.name.startswith(REGION) and e.name not in NOT_KERNELS)
    launches = sum(a.count for a in averages if a.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
    order = [p for p in PHASES if p in regions] + [m for m in MODULES if m in regions]
    return dict(wall_s=wall_s, device="cuda" if cuda else "cpu", sorted_by=self_key, with_stack=bool(frames),
                device_kernel_ms=_ms(device_total), kernel_launches=launches,
                operator_self_cpu_ms=sum(r["self_cpu_ms"] for r in operators),
                python_self_cpu_ms=sum(r["self_cpu_ms"] for r in frames), idle_wait_ms=idle_ms,
                regions={k: regions[k] for k in order}, operators=operators[:top], python_frames=frames[:top])


def format_tables(t: dict) -> str:
    "The profile as text: a summary line, then the regions, operators and Python frames tables."
    gpu = t["device"] == "cuda"
    stacks = "on" if t.get("with_stack", True) else "off"
    lines = [f"profiled step: {t['wall_s']:.2f} s wall under the profiler (Python stacks {stacks}: slower than unprofiled); "
             f"self CPU time in operators {t['operator_self_cpu_ms'] / 1e3:.2f} s, in Python frames "
             f"{t['python_self_cpu_ms'] / 1e3:.2f} s (threads waiting on locks: {t['idle_wait_ms'] / 1e3:.2f} s, "
             "left out)"
             + (f"; GPU kernels {t['device_kernel_ms'] / 1e3:.2f} s ({t['device_kernel_ms'] / 1e3 / t['wall_s']:.0%} of "
                f"the wall), {t['kernel_launches']:,} kernel launches" if gpu else ""),
             "", f"{'region':<40}{'calls':>7}{'wall ms':>12}" + (f"{'GPU ms':>12}" if gpu else "")]
    for name, r in t["regions"].items():
        lines.append(f"{name:<40}{r['calls']:>7}{r['wall_ms']:>12.1f}" + (f"{r['device_ms']:>12.1f}" if gpu else ""))
    for title, rows in (("operator", t["operators"]), ("Python frame", t["python_frames"])):
        lines += ["", f"{title + ' (by self ' + ('GPU' if gpu and title == 'operator' else 'CPU') + ' time)':<72}"
                      f"{'calls':>8}{'self CPU ms':>13}" + (f"{'self GPU ms':>13}" if gpu else "")]
        for r in rows:
            name = r["name"] if len(r["name"]) <= 70 else "..." + r["name"][-67:]
            lines.append(f"{name:<72}{r['calls']:>8}{r['self_cpu_ms']:>13.1f}"
                         + (f"{r['self_device_ms']:>13.1f}" if gpu else ""))
    return "\n".join(lines)
