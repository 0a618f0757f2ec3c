"""Option probabilities from top log-probabilities, and AUROC with DeLong's interval."""

import math

import numpy as np
import pytest

from chexpercept.analysis.confidence import auroc_delong
from chexpercept.errors import ChexperceptError
from chexpercept.evaluation.option_probs import (
    answer_position,
    option_probs_from_top_logprobs,
)


def test_option_probs_renormalise_and_merge_whitespace():
    top = {"1": math.log(0.5), " 1": math.log(0.1), "2": math.log(0.2), "The": math.log(0.1)}
    probs, residual = option_probs_from_top_logprobs(top, 3)
    assert probs == pytest.approx({"1": 0.75, "2": 0.25, "3": 0.0})
    assert residual == pytest.approx(0.2)


def test_answer_position_is_first_digit_token():
    steps = [("Answer", {"Answer": -0.1}), (":", {":": -0.1}), (" 2", {" 2": -0.2, " 1": -1.9}),
             ("3", {"3": -0.1})]
    assert answer_position(steps)[2] == {" 2": -0.2, " 1": -1.9}
    assert answer_position([("No", {"No": -0.1})]) is None


def test_option_probs_refuse_when_no_option_listed():
    with pytest.raises(ChexperceptError, match="no option number"):
        option_probs_from_top_logprobs({"A": math.log(0.9)}, 2)


def test_auroc_hand_computed():
    # positives 0.9, 0.6, 0.4; negatives 0.5, 0.4, 0.1: pairs won 3 + 3 + (0.5 + 1) = 7.5 of 9
    auc, low, high = auroc_delong([0.9, 0.6, 0.4, 0.5, 0.4, 0.1], [1, 1, 1, 0, 0, 0])
    assert auc == pytest.approx(7.5 / 9)
    # DeLong by hand: v10 = (1, 1, 1/2), v01 = (2/3, 5/6, 1)
    var = np.var([1, 1, 1 / 2], ddof=1) / 3 + np.var([2 / 3, 5 / 6, 1], ddof=1) / 3
    half = 1.959963984540054 * math.sqrt(var) / (auc * (1 - auc))
    logit = math.log(auc / (1 - auc))
    assert low == pytest.approx(1 / (1 + math.exp(-(logit - half))))
    assert high == pytest.approx(1 / (1 + math.exp(-(logit + half))))


def test_auroc_perfect_has_no_interval():
    auc, low, high = auroc_delong([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0])
    assert auc == 1.0 and math.isnan(low) and math.isnan(high)


def test_auroc_delong_coverage_by_simulation():
    # binormal model, true AUC = Phi(d / sqrt(2)); 40 positives, 40 negatives, 400 draws
    rng = np.random.default_rng(23)
    d = 1.0
    true_auc = 0.5 * (1 + math.erf(d / 2))
    hits = 0
    for _ in range(400):
        scores = np.concatenate([rng.normal(d, 1, 40), rng.normal(0, 1, 40)])
        truth = np.r_[np.ones(40, bool), np.zeros(40, bool)]
        _, low, high = auroc_delong(scores, truth)
        hits += low <= true_auc <= high
    assert hits / 400 >= 0.93
