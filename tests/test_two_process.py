"""OT-GRPO across two processes: `torchrun --standalone --nproc_per_node 2 tests/two_process_train.py` trains the tiny
model for two steps on CPU (gloo) with scripted completions, and this test checks, from what each rank recorded, that

* the global batch is the sampler's key order (rank 0's local batch, then rank 1's), so some pair has its x group on
  rank 0 and its x' group on rank 1;
* the reward columns TRL gathered on each rank equal a single-process recomputation (format reward + paired
  consistency reward on the whole batch), and the advantages each rank kept are its slice of the per-group
  normalisation of those rewards;
* with `share_prompt_forward` (each distinct prompt forwarded once, around DDP's forward for the prompts' pass), the
  synchronised gradient norm of the first step is the default run's;
* with `share_prompt_prefill` and completions sampled by the model, every generation on each rank prefills each
  distinct prompt once, and the completions are those of a run that prefills every row;
* TRL's evaluation on an `eval_dataset`: the evaluation batches are the in-order sampler's, split across the ranks
  (a pair's x on rank 0 and its x' on rank 1), their rewards are a single-process recomputation, and the logged
  accuracy is that of the clean labels.

(`accelerate launch --cpu --num_processes 2` silently runs a single process on a CPU-only machine; torchrun does not.)
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from two_process_train import GROUPS_PER_RANK, K, examples_of  # noqa: E402


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from consistency_amp.world.synthetic import make_synthetic_world
    return make_synthetic_world(tmp_path_factory.mktemp("world") / "world", n_images_per_split={"train": 8},
                                sources=("SUNRGBD",), indoor_size=(320, 240))


def two_processes(tmp_path_factory, world, mode) -> list[dict]:
    "What each rank of a two-process run recorded."
    out = tmp_path_factory.mktemp("ranks")
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None: pytest.skip("torchrun is not installed")
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="")
    env.setdefault("CONSISTENCY_AMP_CACHE", str(tmp_path_factory.mktemp("cache")))
    proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", str(REPO / "tests" / "two_process_train.py"),
                           str(out), str(world), str(int(mode)) if isinstance(mode, bool) else mode], cwd=REPO, env=env,
                          capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def run(tmp_path_factory, world):
    return two_processes(tmp_path_factory, world, False), examples_of(world)


def test_two_processes_ran(run):
    ranks, _ = run
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == 2 and r["distributed_type"] == "DistributedType.MULTI_CPU" for r in ranks)
    assert all(len(r["steps"]) == 2 and len(r["log"]) == 2 for r in ranks)


def test_global_batch_is_sampler_order_and_splits_a_pair(run):
    from consistency_amp.training.trainer import PairedRepeatSampler
    ranks, examples = run
    per_step = 2 * GROUPS_PER_RANK * K
    keys = list(PairedRepeatSampler(len(examples), K, pairs_per_batch=GROUPS_PER_RANK, seed=0))
    split = 0
    for step in range(2):
        local = [[row for row in r["steps"][step]["rows"]] for r in ranks]
        assert [row["key"] for row in local[0] + local[1]] == keys[step * per_step:(step + 1) * per_step]
        x_on_0 = {row["pair_id"] for row in local[0] if row["side"] == "original"}
        x_prime_on_1 = {row["pair_id"] for row in local[1] if row["side"] == "augmented"}
        split += len(x_on_0 & x_prime_on_1)
    assert split == 2      # the middle pair of each generation batch


def test_rewards_and_advantages_match_one_process(run):
    from consistency_amp.reward.pairing import paired_consistency_rewards
    from consistency_amp.reward.verifiers import format_reward_func
    ranks, _ = run
    for step in range(2):
        rows = ranks[0]["steps"][step]["rows"] + ranks[1]["steps"][step]["rows"]
        completions = ranks[0]["steps"][step]["completions"] + ranks[1]["steps"][step]["completions"]
        columns = {name: [row[name] for row in rows] for name in ("pair_id", "side", "relation", "answer_type")}
        fmt = format_reward_func(completions, answer_type=columns["answer_type"])
        consistency = paired_consistency_rewards(completions, **columns, num_generations=K)
        expected = torch.tensor([fmt, consistency]).T
        assert ranks[0]["steps"][step]["reward_names"] == ["format", "consistency"]
        for r in ranks: assert torch.equal(torch.tensor(r["steps"][step]["rewards"]), expected)
        assert 0 < sum(consistency) < len(consistency) and 0 < sum(fmt) < len(fmt)   # a non-trivial batch
        groups = expected.sum(1).view(-1, K)
        advantages = ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-4)).flatten()
        local = GROUPS_PER_RANK * K
        for r, rank in enumerate(ranks):
            torch.testing.assert_close(torch.tensor(rank["steps"][step]["advantages"]),
                                       advantages[r * local:(r + 1) * local])


def test_shared_prompts_across_two_processes(run, tmp_path_factory, world):
    ranks, _ = run
    shared = two_processes(tmp_path_factory, world, True)
    assert all(not r["fell_back"] for r in shared + ranks)
    norms = [[h["grad_norm"] for h in r["log"]] for r in shared + ranks]
    assert norms[0] == norms[1] and norms[2] == norms[3]          # each run: the ranks hold one synchronised gradient
    assert abs(norms[0][0] / norms[2][0] - 1) < 1e-5, norms       # the first step: the same gradient as rows whole


def test_prefill_once_across_two_processes(tmp_path_factory, world):
    "share_prompt_prefill under DDP: each rank's generations prefill each distinct prompt once and sample what a run prefilling every row samples."
    prefilled, sampled = (two_processes(tmp_path_factory, world, mode) for mode in ("prefill", "sampled"))
    assert [r["prefilled"] for r in prefilled] == [[True, True], [True, True]]
    assert all(not r["prefilled"] for r in sampled)   # the default: transformers' prefill of every row
    completions = [[[step["completions"] for step in r["steps"]] for r in run] for run in (prefilled, sampled)]
    assert completions[0] == completions[1] and len(completions[0][0]) == 2



def test_evaluation_across_two_processes(tmp_path_factory, world):
    "TRL's evaluation under DDP: each evaluation batch is the in-order sampler's, rewarded as on one process, and the logged accuracy is the labels'."
    from consistency_amp.reward.pairing import paired_consistency_rewards
    from consistency_amp.reward.verifiers import accuracy, format_reward_func, parse_answer
    from consistency_amp.training.trainer import PairedPromptDataset, PairedRepeatSampler
    from consistency_amp.world.spatial_pairs import spatial_pair_dataset
    ranks, examples = two_processes(tmp_path_factory, world, "eval"), examples_of(world)
    per_batch, batches = 2 * GROUPS_PER_RANK * K, len(examples) // GROUPS_PER_RANK
    keys = list(PairedRepeatSampler(len(examples), K, pairs_per_batch=GROUPS_PER_RANK, shuffle=False))
    assert batches >= 2 and [len(r["steps"]) for r in ranks] == [batches, batches]
    labels, accuracies, split = PairedPromptDataset(spatial_pair_dataset(examples, seed=0)), [], 0
    for n, steps in enumerate(zip(ranks[0]["steps"], ranks[1]["steps"])):
        rows, completions = [row for s in steps for row in s["rows"]], [c for s in steps for c in s["completions"]]
        assert [row["key"] for row in rows] == keys[n * per_batch:(n + 1) * per_batch]
        columns = {name: [row[name] for row in rows] for name in ("pair_id", "side", "relation", "answer_type")}
        expected = [format_reward_func(completions, answer_type=columns["answer_type"]),
                    paired_consistency_rewards(completions, **columns, num_generations=K)]
        for s in steps: assert torch.equal(torch.tensor(s["rewards"]), torch.tensor(expected).T)
        accuracies.append(sum(accuracy(parse_answer(c, "boolean"), labels.ground_truth(row["key"]), "boolean")
                              for c, row in zip(completions, rows)) / per_batch)
        split += len({row["pair_id"] for row in steps[0]["rows"] if row["side"] == "original"}
                     & {row["pair_id"] for row in steps[1]["rows"] if row["side"] == "augmented"})
    assert split == batches                                     # the middle pair of every batch spans the ranks
    for r in ranks: assert abs(r["metrics"]["eval_answers/accuracy"] - sum(accuracies) / batches) < 1e-6
