"""Bad input to consistency_amp.reward.verifiers fails loudly, with a message that names the parameter, value or column.

Unparseable *model output* is not bad input (it scores 0); wrong types, unknown names and broken labels are."""
import math

import numpy as np
import pytest

from consistency_amp.reward.verifiers import (ANSWER_TYPES, RELATIONS, accuracy, accuracy_reward_func, completion_text,
                                       consistency, extract_answer, format_reward, format_reward_func, parse_answer,
                                       parse_boolean, parse_numeric)

GOOD = "<think>The lamp is nearer.</think><answer>True</answer>"
GOOD_NUMERIC = "<think>Three chairs.</think><answer>3</answer>"


# --- completions ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("completion", [None, 3, b"<think>r</think>", {"content": GOOD}, ("<think>",), [GOOD], [None]])
def test_completion_of_wrong_type(completion):
    with pytest.raises(TypeError, match="completion must be a str or a list of message dicts"):
        completion_text(completion)

@pytest.mark.parametrize("content", [3, {"text": GOOD}, ["<think>"]])
def test_message_content_of_wrong_type(content):
    with pytest.raises(TypeError, match="message content must be a str or a list of"):
        extract_answer([{"role": "assistant", "content": content}])

@pytest.mark.parametrize("completion", [[], [{"role": "user", "content": GOOD}], [{"role": "system", "content": "x"}]])
def test_conversation_without_assistant(completion):
    with pytest.raises(ValueError, match="no assistant message"):
        format_reward(completion, "boolean")


# --- parsers -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("parse", [parse_boolean, parse_numeric])
@pytest.mark.parametrize("text", [None, 1, 1.4, True, [" True "], b"True"])
def test_parsers_take_text_only(parse, text):
    with pytest.raises(TypeError, match="answer text must be a str"):
        parse(text)


# --- names: answer types and relations -----------------------------------------------------------------------------
@pytest.mark.parametrize("answer_type", ["bool", "Boolean", "number", "", None, 1, ("boolean",)])
def test_unknown_answer_type_lists_choices(answer_type):
    choices = ", ".join(map(repr, ANSWER_TYPES))
    for call in (lambda: parse_answer(GOOD, answer_type), lambda: format_reward(GOOD, answer_type),
                 lambda: accuracy(True, True, answer_type)):
        with pytest.raises(ValueError, match=f"answer_type must be one of {choices}; got"):
            call()

@pytest.mark.parametrize("relation", ["negation", "equal", "identity", "Same", "", None, True])
def test_unknown_relation_lists_choices(relation):
    with pytest.raises(ValueError, match="relation must be one of 'same', 'opposite', 'numeric'; got") as info:
        consistency(True, False, relation)
    assert repr(relation) in str(info.value)
    assert RELATIONS == ("same", "opposite", "numeric")


# --- verifier types ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("y, y_star", [(True, 1.0), (1.0, True), (np.bool_(True), 2.0), (1.0, np.bool_(False))])
def test_booleans_to_numeric_accuracy(y, y_star):
    with pytest.raises(TypeError, match="must be a real number.* got bool"):
        accuracy(y, y_star, "numeric")

@pytest.mark.parametrize("y, y_star", [(1.0, True), (True, 1.0), (1, False), (True, 0), (True, None), ("True", True)])
def test_numbers_to_boolean_accuracy(y, y_star):
    with pytest.raises(TypeError, match="must be a bool"):
        accuracy(y, y_star, "boolean")

@pytest.mark.parametrize("relation", ["same", "opposite"])
@pytest.mark.parametrize("y, y_prime", [(1.0, True), (True, 0.0), (1, 1), ("True", False)])
def test_numbers_to_boolean_consistency(relation, y, y_prime):
    with pytest.raises(TypeError, match="for a boolean verifier"):
        consistency(y, y_prime, relation)

@pytest.mark.parametrize("y, y_prime", [(True, 1.0), (2.0, False), ("3", 3.0), (3.0, [3.0])])
def test_non_numbers_to_numeric_consistency(y, y_prime):
    with pytest.raises(TypeError, match="for a numeric verifier"):
        consistency(y, y_prime, "numeric")

@pytest.mark.parametrize("y_star", [None, "1.4", [1.4]])
def test_numeric_ground_truth_must_be_a_number(y_star):
    with pytest.raises(TypeError, match="ground truth y_star must be a real number"):
        accuracy(1.4, y_star, "numeric")


# --- broken ground truth -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("y_star", [math.nan, np.float64("nan"), -1.0, -1e-9, math.inf, -math.inf, 10**400])
def test_ground_truth_not_a_magnitude(y_star):
    with pytest.raises(ValueError, match="ground truth y_star must be a finite non-negative number; got"):
        accuracy(1.0, y_star, "numeric")

def test_ground_truth_error_names_the_value():
    with pytest.raises(ValueError, match=r"got -2\.5"):
        accuracy(1.0, -2.5, "numeric")
    with pytest.raises(ValueError, match="got nan"):
        accuracy(None, math.nan, "numeric")  # checked even when the prediction is unparseable


# --- what is NOT an error: bad model output scores 0 ----------------------------------------------------------------
@pytest.mark.parametrize("y", [None, math.nan, math.inf, -1.0, 1e308, -0.5])
def test_bad_predictions_score_zero_not_raise(y):
    assert accuracy(y, 1.4, "numeric") == 0.0
    assert consistency(y, 1.4, "numeric") == 0.0
    assert consistency(1.4, y, "numeric") == 0.0


# --- TRL reward functions ------------------------------------------------------------------------------------------
def test_reward_funcs_reject_scalar_columns():
    with pytest.raises(TypeError, match="'answer_type' must be a list with one value per completion"):
        format_reward_func([GOOD, GOOD], answer_type="boolean")
    with pytest.raises(TypeError, match="'ground_truth' must be a list"):
        accuracy_reward_func([GOOD], ground_truth=True, answer_type=["boolean"])
    with pytest.raises(TypeError, match="'completions' must be a list"):
        format_reward_func(GOOD, answer_type=["boolean"])

@pytest.mark.parametrize("kwargs, column", [
    (dict(ground_truth=[True], answer_type=["boolean", "boolean"]), "ground_truth"),
    (dict(ground_truth=[True, True, True], answer_type=["boolean", "boolean"]), "ground_truth"),
    (dict(ground_truth=[True, True], answer_type=["boolean"]), "answer_type"),
    (dict(ground_truth=[True, True], answer_type=[]), "answer_type"),
])
def test_reward_func_column_length_mismatch_names_column(kwargs, column):
    with pytest.raises(ValueError, match=f"column '{column}' has \\d+ values but there are 2 completions"):
        accuracy_reward_func([GOOD, GOOD], **kwargs)

def test_format_reward_func_length_mismatch():
    with pytest.raises(ValueError, match="column 'answer_type' has 3 values but there are 2 completions"):
        format_reward_func([GOOD, GOOD], answer_type=["boolean"] * 3)

def test_reward_func_row_errors_name_the_row():
    with pytest.raises(ValueError, match="completion 1: ground truth y_star must be a finite non-negative number; got nan"):
        accuracy_reward_func([GOOD_NUMERIC, GOOD_NUMERIC], ground_truth=[3.0, math.nan], answer_type=["numeric"] * 2)
    with pytest.raises(TypeError, match="completion 0: ground truth y_star must be a bool"):
        accuracy_reward_func([GOOD], ground_truth=[1.0], answer_type=["boolean"])
    with pytest.raises(ValueError, match="completion 2: answer_type must be one of 'boolean', 'numeric'; got 'count'"):
        format_reward_func([GOOD] * 3, answer_type=["boolean", "numeric", "count"])
    with pytest.raises(TypeError, match="completion 1: completion must be a str"):
        format_reward_func([GOOD, None], answer_type=["boolean"] * 2)

def test_reward_funcs_ignore_trainer_extras():
    extras = dict(prompts=["p"], completion_ids=[[1]], trainer_state=None, log_extra=None, log_metric=None, task=["x"])
    assert format_reward_func([GOOD], answer_type=["boolean"], **extras) == [1.0]
    assert accuracy_reward_func([GOOD], ground_truth=[True], answer_type=["boolean"], **extras) == [1.0]
