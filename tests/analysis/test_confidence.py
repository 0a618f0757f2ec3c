"""Option probabilities from top log-probabilities, and the AUROC with its interval."""

import math
import runpy

import numpy as np
import pytest

from chexpercept.analysis.confidence import (
    auroc_delong,
    auroc_interval,
    newcombe_interval,
    newcombe_variance,
)
from chexpercept.errors import ChexperceptError
from chexpercept.evaluation.option_probs import (
    answer_position,
    option_probs_from_top_logprobs,
)
from chexpercept.layouts import repo_root


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


def test_delong_has_no_interval_at_a_perfect_auroc_but_the_table_interval_does():
    auc, low, high = auroc_delong([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0])
    assert auc == 1.0 and math.isnan(low) and math.isnan(high)
    for scores, auc_expected in (([0.9, 0.8, 0.2, 0.1], 1.0), ([0.1, 0.2, 0.8, 0.9], 0.0)):
        auc, low, high = auroc_interval(scores, [1, 1, 0, 0])
        assert auc == auc_expected and math.isfinite(low) and math.isfinite(high)
        assert 0.0 <= low < high <= 1.0 and low <= auc <= high
    # 20 positives all above 20 negatives: [0.899, 1]; all below: the mirror image
    truth = np.r_[np.ones(20, bool), np.zeros(20, bool)]
    auc, low, high = auroc_interval(np.r_[np.ones(20), np.zeros(20)], truth)
    assert (auc, high) == (1.0, 1.0) and low == pytest.approx(0.8987, abs=1e-4)
    auc, low0, high0 = auroc_interval(np.r_[np.zeros(20), np.ones(20)], truth)
    assert (auc, low0) == (0.0, 0.0) and high0 == pytest.approx(1 - low, abs=1e-12)
    # every score tied: AUC 1/2 with an interval of positive width around it
    auc, low, high = auroc_interval(np.full(40, 0.7), truth)
    assert auc == 0.5 and low < 0.5 < high


def test_newcombe_bounds_solve_the_score_equation():
    z = 1.959963984540054
    for auc, m, n in ((0.8, 10, 30), (0.5, 20, 20), (0.97, 50, 50), (0.1, 3, 7)):
        low, high = newcombe_interval(auc, m, n)
        for bound in (low, high):
            assert (auc - bound) ** 2 == pytest.approx(z * z * newcombe_variance(bound, m, n),
                                                       rel=1e-9)


def test_newcombe_standardised_distance_decreases():
    # the bisection of newcombe_interval relies on (auc - t) / sd(t) decreasing in t
    t = np.linspace(1e-6, 1 - 1e-6, 20001)
    for m in (2, 5, 20, 100, 1000):
        for n in (2, 5, 20, 100, 1000):
            sd = np.sqrt(newcombe_variance(t, m, n))
            for auc in np.linspace(0, 1, 21):
                assert (np.diff((auc - t) / sd) < 0).all(), (m, n, auc)


def test_auroc_interval_coverage_on_the_short_grid():
    # binormal scores (benchmarks/coverage_auroc.py --tiny: 1,000 seeded draws per cell,
    # AUC 0.95 and 0.99 at 20/20 and 10/30, 0.7 at 20/20); the full grid: docs/metrics.md
    bench = runpy.run_path(str(repo_root() / "benchmarks" / "coverage_auroc.py"))
    cells = bench["grid"](bench["TINY"], 1000, 0)
    newcombe = [c for c in cells if c.method == "newcombe"]
    low = min(newcombe, key=lambda c: c.coverage)
    assert low.coverage >= 0.94 and all(c.dropped == 0 for c in newcombe), low
    # DeLong's logit interval drops the draws that reach AUC 1 and covers less there
    (dl,) = [c for c in cells if (c.method, c.auc, c.m) == ("delong", 0.99, 20)]
    assert dl.dropped > 0.2 and dl.coverage < 0.8
