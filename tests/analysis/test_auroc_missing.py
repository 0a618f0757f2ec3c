"""AUROC with its missing data (issue 30 item 7): share, worst/best bounds, refusal, residual."""

import itertools
import math

import numpy as np
import pytest

from chexpercept.analysis.auroc import (MAX_SHARE_WITHOUT_PROBS, auroc_bounds, auroc_rows,
                                        mann_whitney_u, option_scores)
from chexpercept.analysis.case_table import case_table
from tests.analysis.test_auroc import _block, _case, _results


def _auc(score, truth):
    pos = [s for s, t in zip(score, truth) if t]
    neg = [s for s, t in zip(score, truth) if not t]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def test_bounds_match_brute_force_over_every_fill_on_small_inputs():
    rng = np.random.default_rng(30)  # seeded
    levels = [0.0, 0.25, 0.5, 1.0]
    for _ in range(40):
        n = int(rng.integers(2, 6))
        score = rng.choice(levels, size=n)
        truth = np.array([True, False] + list(rng.random(n - 2) < 0.5))
        mp, mn = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        assert mann_whitney_u(score, truth) / (truth.sum() * (~truth).sum()) == pytest.approx(
            _auc(score, truth))
        fills = [_auc(list(score) + list(fp) + list(fn), list(truth) + [True] * mp
                      + [False] * mn)
                 for fp in itertools.product(levels, repeat=mp)
                 for fn in itertools.product(levels, repeat=mn)]
        worst, best = auroc_bounds(score, truth, mp, mn)
        assert worst == pytest.approx(min(fills)) and best == pytest.approx(max(fills))


def test_rows_carry_share_bounds_and_residual():
    rows = {(r["question"], r["lesion"]): r
            for r in auroc_rows(option_scores(_results(), case_table("run", _results())))}
    pooled = rows[("detection", "all")]
    assert pooled["share_without_probs"] == pytest.approx(1 / 6) and pooled["n_asked"] == 6
    # observed U = 5 of 3 x 2; one missing negative: worst 5/9, best (5 + 3)/9
    assert (pooled["auroc_worst"], pooled["auroc_best"]) == pytest.approx((5 / 9, 8 / 9))
    assert pooled["auroc_worst"] <= pooled["auroc"] <= pooled["auroc_best"]
    assert pooled["share_large_residual"] == 0.0


def test_cell_above_the_share_is_refused_but_keeps_bounds():
    results = _results()
    for k in ("effusion_s7_negative_0", "effusion_s8_negative_0"):
        results[k] = _case(k, "lesion_free", _block(2, None, "no_answer"))
    results["effusion_s1_positive_0"]["detection_qa"]["option_probs"]["residual"] = 0.7
    rows = {(r["question"], r["lesion"]): r
            for r in auroc_rows(option_scores(results, case_table("run", results)))}
    pooled = rows[("detection", "all")]
    assert pooled["share_without_probs"] == pytest.approx(3 / 8)
    assert 3 / 8 > MAX_SHARE_WITHOUT_PROBS
    assert math.isnan(pooled["auroc"]) and math.isnan(pooled["ci_low"])
    assert "refused" in pooled["note"]
    assert (pooled["auroc_worst"], pooled["auroc_best"]) == pytest.approx((5 / 15, 14 / 15))
    assert pooled["share_large_residual"] == pytest.approx(1 / 5)


def test_report_shows_bounds_share_and_names_refused_cells():
    from types import SimpleNamespace

    from chexpercept.analysis.markdown import auroc_section
    results = _results()
    for k in ("effusion_s7_negative_0", "effusion_s8_negative_0"):
        results[k] = _case(k, "lesion_free", _block(2, None, "no_answer"))
    run = SimpleNamespace(name="m1", option_scores=option_scores(results,
                                                                case_table("run", results)))
    text = "\n".join(auroc_section([run]))
    assert "n/a ([0.333, 0.933])" in text and "3 (38%)" in text
    assert "Refused an AUROC" in text and "m1 detection" in text
    ok = SimpleNamespace(name="m2", option_scores=option_scores(_results(),
                                                               case_table("run", _results())))
    text = "\n".join(auroc_section([ok]))
    assert "0.833 [" in text and "([0.556, 0.889])" in text and "Refused" not in text
