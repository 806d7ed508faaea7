"""Bad input to consistency_amp.reward.pairing fails loudly, naming the argument, record or choice that is wrong."""
import numpy as np
import pytest

from consistency_amp.core import PAIRINGS
from consistency_amp.reward.pairing import (consistency_reward_func, consistency_rewards, minimal_coupling,
                                     pair_rewards, pair_rewards_batch, rewards_from_coupling, verifier_matrix)

GOOD = [[0.0, 1.0], [1.0, 0.0]]


@pytest.mark.parametrize("V, message", [
    ([0.0, 1.0], "V must be an n0 x n1 matrix (2-D), got shape (2,)"),
    (np.zeros((2, 2, 2)), "V must be an n0 x n1 matrix (2-D), got shape (2, 2, 2)"),
    (0.5, "got shape ()"),
    ([[0.0, np.nan], [1.0, 0.0]], "non-finite verifier score at index (0, 1)"),
    ([[0.0, 1.0], [-np.inf, 0.0]], "non-finite verifier score at index (1, 0)"),
    ([[0.0, 1.1], [1.0, 0.0]], "within [0, 1]; found values in [0, 1.1]"),
    ([[-0.5, 1.0], [1.0, 0.0]], "within [0, 1]; found values in [-0.5, 1]"),
    ([["a", "b"]], "verifier scores must be numbers"),
    ([[0.0, 1.0], [1.0]], "verifier scores must be numbers"),   # ragged
])
@pytest.mark.parametrize("strategy", PAIRINGS)
def test_bad_matrix(V, message, strategy):
    with pytest.raises(ValueError) as e: pair_rewards(V, strategy)
    assert message in str(e.value)


@pytest.mark.parametrize("strategy", ["min", "Minimal", "ot", None, 0])
def test_unknown_strategy_lists_choices(strategy):
    for call in (lambda: pair_rewards(GOOD, strategy), lambda: pair_rewards_batch([GOOD], strategy),
                 lambda: consistency_rewards([True], [False], "same", strategy)):
        with pytest.raises(ValueError, match="pairing strategy must be one of 'minimal', 'random', 'one_to_all'"): call()


def test_unknown_strategy_even_for_empty_groups():
    with pytest.raises(ValueError, match="pairing strategy must be one of"): pair_rewards(np.zeros((0, 3)), "greedy")
    with pytest.raises(ValueError, match="pairing strategy must be one of"): consistency_rewards([None], [None], "same", "greedy")


def test_batch_shape_and_values():
    with pytest.raises(ValueError, match=r"Vs must be a stack of G matrices \(G x n0 x n1\) \(3-D\), got shape \(2, 2\)"):
        pair_rewards_batch(GOOD)
    Vs = np.zeros((4, 3, 3)); Vs[2, 1, 0] = np.nan
    with pytest.raises(ValueError, match=r"Vs has a non-finite verifier score at index \(2, 1, 0\)"): pair_rewards_batch(Vs)
    Vs[2, 1, 0] = 2.0
    with pytest.raises(ValueError, match=r"Vs must hold verifier scores within \[0, 1\]"): pair_rewards_batch(Vs)


def test_coupling_arguments():
    with pytest.raises(ValueError, match="at least one completion on each side; V has shape \\(0, 3\\)"):
        minimal_coupling(np.zeros((0, 3)))
    with pytest.raises(ValueError, match=r"gamma has shape \(2, 3\) but V has shape \(2, 2\)"):
        rewards_from_coupling(GOOD, np.full((2, 3), 1 / 6))


def test_verifier_matrix_relation_and_types():
    with pytest.raises(ValueError, match="relation must be one of 'same', 'opposite', 'numeric'; got 'equal'"):
        verifier_matrix([True], [False], "equal")
    with pytest.raises(ValueError, match="relation must be one of"):
        consistency_rewards([None], [None], "invariant")          # checked even when nothing is valid
    with pytest.raises(TypeError, match="bool"):                   # a boolean answer under the numeric relation
        consistency_rewards([True], [1.0], "numeric")


# a TRL-shaped batch: one pair, two generations per side
def _completion(answer):
    return [{"role": "assistant", "content": f"<think>r</think><answer>{answer}</answer>"}]


def _batch(**overrides):
    batch = dict(completions=[_completion("True"), _completion("False"), _completion("True"), _completion("True")],
                 pair_id=[7, 7, 7, 7], side=["original", "original", "augmented", "augmented"],
                 relation=["opposite"] * 4, answer_type=["boolean"] * 4)
    batch.update(overrides)
    return batch


def test_reward_func_accepts_the_good_batch():
    rewards = consistency_reward_func(**_batch(), trainer_state=None, log_metric=None)
    assert len(rewards) == 4 and all(isinstance(r, float) and 0 <= r <= 1 for r in rewards)


@pytest.mark.parametrize("overrides, error, message", [
    (dict(side=["original"] * 4), ValueError, "pair_id 7 has no augmented completions in this batch"),
    (dict(side=["augmented"] * 4), ValueError, "pair_id 7 has no original completions in this batch"),
    (dict(side=["original", "Original", "augmented", "augmented"]), ValueError, "side[1] is 'Original'"),
    (dict(pair_id=[7, 7, 7]), ValueError, "column 'pair_id' has 3 values but there are 4 completions"),
    (dict(relation="opposite"), TypeError, "'relation' must be a list with one value per completion"),
    (dict(answer_type=None), TypeError, "'answer_type' must be a list"),
    (dict(relation=["opposite", "opposite", "same", "opposite"]), ValueError, "pair_id 7: its completions disagree on 'relation'"),
    (dict(answer_type=["boolean"] * 3 + ["numeric"]), ValueError, "disagree on 'answer_type'"),
    (dict(relation=["flip"] * 4), ValueError, "relation must be one of"),
    (dict(answer_type=["bool"] * 4), ValueError, "answer_type must be one of"),
    (dict(completions="<think>r</think><answer>True</answer>"), TypeError, "'completions' must be a list"),
    (dict(completions=[None, None, None, None]), TypeError, "must be a str"),
])
def test_reward_func_bad_columns(overrides, error, message):
    with pytest.raises(error) as e: consistency_reward_func(**_batch(**overrides))
    assert message in str(e.value)


def test_reward_func_unknown_strategy():
    with pytest.raises(ValueError, match="must be one of"): consistency_reward_func(**_batch(), strategy="best")
