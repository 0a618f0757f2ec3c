"""Stage 03 ``option_probs`` of one answered turn: recorded only where the answer's token is."""

import math

import pytest

from chexpercept.evaluation.option_probs import OPTION_PROBS_STATUSES, turn_option_probs


def _steps(*tokens: tuple[str, dict[str, float]]) -> list[tuple[str, dict[str, float]]]:
    return list(tokens)


ANSWER_1 = _steps(("Answer:", {"Answer:": -0.01}),
                  (" 1", {" 1": math.log(0.6), "1": math.log(0.2), " 2": math.log(0.1),
                          "The": math.log(0.1)}))


def test_ok_at_the_answer_token_whitespace_variants_summed():
    op = turn_option_probs(ANSWER_1, 2, (1,))
    assert op["status"] == "ok" and op["token_index"] == 1
    assert op["probs"] == pytest.approx({"1": 0.8 / 0.9, "2": 0.1 / 0.9})
    assert op["residual"] == pytest.approx(0.1)


@pytest.mark.parametrize(("steps", "answer", "status"), [
    (None, (1,), "missing"),  # the provider sent no log-probabilities: never zeros
    (ANSWER_1, None, "no_answer"),  # the parser read no answer
    (_steps(("Yes", {"Yes": -0.1})), (1,), "no_number"),
    (_steps(("Case", {"Case": -0.1}), (" 2", {" 2": -0.1}), ("0", {"0": -0.1}),
            (" 1", {" 1": -0.1})), (1,), "mismatch"),  # a number before the answer
    (_steps((" 1", {" 1": 0.0})), (1,), "ok"),
    (_steps(("7", {"7": -0.1, "8": -3.0})), (7,), "no_option"),  # 7 is not among 2 options
])
def test_each_reason_is_a_status_without_probabilities(steps, answer, status):
    op = turn_option_probs(steps, 2, answer)
    assert op["status"] == status and status in OPTION_PROBS_STATUSES
    assert ("probs" in op) == (status == "ok")


def test_multi_select_answer_token_is_any_of_the_chosen_options():
    steps = _steps(("3", {"3": math.log(0.5), "1": math.log(0.5)}), (",", {",": 0.0}),
                   (" 1", {" 1": 0.0}))
    op = turn_option_probs(steps, 4, (1, 3))
    assert op["status"] == "ok" and op["probs"]["3"] == pytest.approx(0.5)


def test_probabilities_are_keyed_by_original_options_when_shown_in_another_order():
    # displayed position i shows original option order[i - 1]; the model answered displayed 1
    order = (2, 1)
    op = turn_option_probs(ANSWER_1, 2, (1,), original=lambda d: order[d - 1])
    assert op["status"] == "ok"
    assert op["probs"] == pytest.approx({"1": 0.1 / 0.9, "2": 0.8 / 0.9})
    assert list(op["probs"]) == ["1", "2"]
