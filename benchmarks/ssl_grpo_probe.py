"""Probe (issue 24, Figure 5): can TRL's own GRPOTrainer train the self-supervised pretext tasks' rows as they are
(`world.ssl_tasks.SSLExample.row()`: several images per prompt for the jigsaw tasks), with the tiny offline
Qwen2.5-VL on the CPU? One optimizer step per task; prints the prompt tokens per row and the step time.

    python benchmarks/ssl_grpo_probe.py            # about a minute on 2 cores

Its answer decides how Figure 5's baselines are trained (summarised in nbs/23_ssl_tasks.ipynb, last section).
"""
import tempfile
import time

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from consistency_amp.reward.ssl import SSL_TASKS, ssl_accuracy_reward_func, ssl_format_reward_func
from consistency_amp.training.models import load_model
from consistency_amp.world.ssl_tasks import ssl_examples
from consistency_amp.world.synthetic import default_world


def one_step(rows: list[dict]) -> dict:
    "One GRPO step (K = 2, 4 completions) on `rows`; TRL's first log line."
    model, processor = load_model()
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=1, num_generations=2, per_device_train_batch_size=4,
                      max_completion_length=8, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      logging_steps=1, remove_unused_columns=False, disable_tqdm=True)
    data = Dataset.from_list([{k: r[k] for k in ("images", "prompt", "ground_truth", "task")} for r in rows])
    trainer = GRPOTrainer(model=model, reward_funcs=[ssl_format_reward_func, ssl_accuracy_reward_func], args=args,
                          train_dataset=data, processing_class=processor)
    trainer.train()
    return next(h for h in trainer.state.log_history if "loss" in h)


if __name__ == "__main__":
    built = ssl_examples(default_world())
    print(f"{'task':20s} {'images/prompt':>13s} {'tokens/prompt':>13s} {'step s':>7s}")
    for task in SSL_TASKS:
        rows = [e.row() for e in built[task][:8]]
        start = time.perf_counter()
        log = one_step(rows)
        tokens = log["num_tokens"] / 4 - log["completions/mean_length"]     # 4 completions per step
        print(f"{task:20s} {len(rows[0]['images']):13d} {tokens:13.0f} {time.perf_counter() - start:7.1f}")
