"""Does the minimal-pairing consistency reward favour correct answers? python research/reward_direction.py
A scripted model answers each of K completions of x and of x' = T(x) correctly with probability p, independently; the
project's own reward (`trainer.paired_consistency_rewards`, minimal pairing) scores them, and GRPO's group-normalised
advantage is averaged over correct and over wrong completions (400 pairs per row)."""
import numpy as np
from consistency_amp.training.trainer import SIDES, paired_consistency_rewards
K, rng = 8, np.random.default_rng(0)
text = lambda answer: f"<think>x</think><answer>{answer}</answer>"
for p in (0.5, 0.6, 0.65, 0.76, 0.9):
    for relation in ("same", "opposite"):
        correct_adv, wrong_adv = [], []
        for _ in range(400):
            truth = bool(rng.integers(2)); truth_prime = truth if relation == "same" else not truth
            x = [truth if rng.random() < p else not truth for _ in range(K)]
            x_prime = [truth_prime if rng.random() < p else not truth_prime for _ in range(K)]
            rewards = np.array(paired_consistency_rewards([text(a) for a in x + x_prime], ["p"] * 2 * K,
                                                          [SIDES[0]] * K + [SIDES[1]] * K, [relation] * 2 * K,
                                                          ["boolean"] * 2 * K, K))
            correct = np.array([a == truth for a in x] + [a == truth_prime for a in x_prime])
            for side in (slice(0, K), slice(K, 2 * K)):
                r, c = rewards[side], correct[side]
                if r.std() == 0: continue
                advantage = (r - r.mean()) / r.std()
                correct_adv += list(advantage[c]); wrong_adv += list(advantage[~c])
        print(f"p={p:.2f} {relation:8s} mean advantage: correct {np.mean(correct_adv):+.3f}, wrong {np.mean(wrong_adv):+.3f}")
