"""`python -m consistency_amp.training.train` with scripted completions and a slow step, for the fault tests
(`tests/test_run_faults.py`): run as `python tests/fault_train.py <train flags>` or under torchrun.

The tiny model's own completions never parse, so every reward would be 0 and every adapter would trivially equal
every other; the completions are instead drawn with torch's RNG from three scripted answers (so a resumed run must
restore the RNG state to match an uninterrupted one). FAULT_STEP_DELAY seconds of sleep per generation give a test
time to send a signal mid-run; FAULT_PID_DIR, when set, receives one `rank<r>.pid` file per process;
FAULT_DISK_FULL_AT_STEP makes writing that step's log line fail as a full disk does; FAULT_DISK_FULL_IN_CHECKPOINT makes
the checkpoint of that step fail in `optimizer.pt`, part written, as torch.save fails on a full disk (its own message,
from torch 2.13 on a full tmpfs); FAULT_KILL_BEFORE_ADAPTER kills the
process (SIGKILL) after the last step's checkpoint, just before the final adapter is saved; FAULT_NO_FLOCK=<errno> makes
every `flock` fail with that error, as on a file system without file locks (Lustre without -o flock: ENOSYS; NFS
without its lock service: ENOLCK); FAULT_OOM_AT_STEP makes that training step fail as a GPU out of memory does; FAULT_OOM_AT_LOAD makes the model fail to load
as weights too large for the GPU do.
"""
import os
import sys
import time
from pathlib import Path

SCRIPTED = ("<think>a</think><answer>True</answer>", "<think>b</think><answer>False</answer>", "<answer>?</answer>")


def scripted_generation():
    import torch
    from consistency_amp.training.trainer import OTGRPOTrainer
    delay = float(os.environ.get("FAULT_STEP_DELAY", "0"))

    def generate(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        time.sleep(delay)
        tok = self.processing_class.tokenizer
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        picks = torch.randint(len(SCRIPTED), (len(prompt_ids),)).tolist()
        return [tok(SCRIPTED[i], add_special_tokens=False).input_ids + [eos] for i in picks], None

    OTGRPOTrainer._generate_single_turn = generate


def disk_full_at(step: int):
    "Writing the log line of `step` fails with ENOSPC, as on a full disk."
    import errno
    import consistency_amp.training.run_callback as rc
    append = rc.append_jsonl

    def failing(path, record):
        if record.get("step") == step: raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        append(path, record)

    rc.append_jsonl = failing


def disk_full_in_checkpoint(step: int):
    "torch.save of checkpoint-`step`'s optimizer.pt writes part of the file, then fails as torch's zip writer does."
    import torch
    save = torch.save

    def failing(obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)) and Path(f).name == "optimizer.pt" and Path(f).parent.name == f"checkpoint-{step}":
            Path(f).write_bytes(b"PK\x03\x04" + bytes(60))
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
        return save(obj, f, *args, **kwargs)

    torch.save = failing


def killed_before_adapter():
    "SIGKILL instead of saving the final adapter: the run ends with its last checkpoint and no adapter."
    import signal
    import consistency_amp.training.train as entry
    entry.save_final_adapter = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)


def out_of_memory_at(step: int):
    "Training step `step` fails with torch.OutOfMemoryError, as a GPU out of memory does."
    import torch
    from consistency_amp.training.trainer import OTGRPOTrainer
    training_step = OTGRPOTrainer.training_step

    def failing(self, *args, **kwargs):
        if self.state.global_step + 1 == step:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                         "79.11 GiB of which 1.06 GiB is free.")
        return training_step(self, *args, **kwargs)

    OTGRPOTrainer.training_step = failing


def out_of_memory_at_load():
    "The model's weights do not fit: `from_pretrained` fails with torch.OutOfMemoryError, as on a GPU too small for them."
    import torch
    import transformers

    def failing(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 260.00 MiB. GPU 0 has a total capacity of "
                                     "23.64 GiB of which 120.00 MiB is free.")

    transformers.AutoModelForImageTextToText.from_pretrained = failing


def no_flock(code: int):
    "Every fcntl.flock fails with `code`, as on a file system that gives no file locks."
    import fcntl

    def refused(fd, operation): raise OSError(code, os.strerror(code))

    fcntl.flock = refused


if __name__ == "__main__":
    if os.environ.get("FAULT_PID_DIR"):
        Path(os.environ["FAULT_PID_DIR"], f"rank{os.environ.get('RANK', '0')}.pid").write_text(str(os.getpid()))
    scripted_generation()
    if os.environ.get("FAULT_DISK_FULL_AT_STEP"): disk_full_at(int(os.environ["FAULT_DISK_FULL_AT_STEP"]))
    if os.environ.get("FAULT_DISK_FULL_IN_CHECKPOINT"): disk_full_in_checkpoint(int(os.environ["FAULT_DISK_FULL_IN_CHECKPOINT"]))
    if os.environ.get("FAULT_KILL_BEFORE_ADAPTER"): killed_before_adapter()
    if os.environ.get("FAULT_NO_FLOCK"): no_flock(int(os.environ["FAULT_NO_FLOCK"]))
    if os.environ.get("FAULT_OOM_AT_STEP"): out_of_memory_at(int(os.environ["FAULT_OOM_AT_STEP"]))
    if os.environ.get("FAULT_OOM_AT_LOAD"): out_of_memory_at_load()
    from consistency_amp.training.train import main
    main(sys.argv[1:])
