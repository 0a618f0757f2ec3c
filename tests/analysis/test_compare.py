"""Stage 04 paired comparison: score test and Tango interval, Holm, bootstrap, mismatches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chexpercept.analysis import case_table, format_comparison, paired_comparison
from chexpercept.analysis.inference import holm, score_test_p, tango_interval
from chexpercept.errors import InputError


def _table(cases, name):
    return case_table(name, {c["key_id"]: c for c in cases})


def test_score_test_hand_examples():
    # McNemar without continuity correction: z = (b - c) / sqrt(b + c), two-sided normal p
    assert score_test_p(np.array([1]), np.array([5]))[0] == pytest.approx(
        math.erfc(4 / math.sqrt(6) / math.sqrt(2)))
    assert score_test_p(np.array([0]), np.array([0]))[0] == 1.0
    assert score_test_p(np.array([3]), np.array([3]))[0] == pytest.approx(1.0)
    # 4 vs 0 discordant: z = 2, p = 0.0455 (the exact binomial test would give 0.125)
    assert score_test_p(np.array([0]), np.array([4]))[0] == pytest.approx(0.0455003, abs=1e-7)


def test_paired_comparison_counts_difference_and_interval(builders):
    mk = builders.make_case
    keys = [f"effusion_s{i}_negative_0" for i in range(30)]
    # A: first 10 right; B: first 25 right -> a_only 0, b_only 15
    a = _table([mk(k, "lesion_free", s1=i < 10) for i, k in enumerate(keys)], "a")
    b = _table([mk(k, "lesion_free", s1=i < 25) for i, k in reversed(list(enumerate(keys)))],
               "b")
    rows = paired_comparison(a, b, n_boot=300, seed=0)
    (r,) = [r for r in rows if (r.lesion, r.path, r.metric) == ("all", "lesion_free",
                                                                   "e2e:stage1")]
    assert r.n_cases == 30 and r.value_a == pytest.approx(1 / 3)
    assert r.value_b == pytest.approx(25 / 30) and r.diff == pytest.approx(0.5)
    assert (r.a_only, r.b_only, r.test) == (0, 15, "score")
    assert r.p_value == pytest.approx(math.erfc(math.sqrt(15) / math.sqrt(2)))
    low, high = tango_interval(np.array([15]), np.array([0]), np.array([30]))
    assert (r.ci_low, r.ci_high) == pytest.approx((low[0], high[0]))
    assert r.ci_low <= r.diff <= r.ci_high and r.ci_low > 0
    # lesion-free cases only: depth is stage 1 right/wrong, so it gets the same interval and test
    (d,) = [r for r in rows if (r.lesion, r.path, r.metric) == ("all", "all", "depth")]
    assert d.diff == pytest.approx(0.5) and d.test == "score"
    assert (d.ci_low, d.p_value) == pytest.approx((r.ci_low, r.p_value))
    # Holm over every p-value of the comparison
    tested = [x for x in rows if x.p_value is not None]
    assert [x.p_holm for x in tested] == pytest.approx(
        list(holm(np.array([x.p_value for x in tested]))))
    assert all(x.p_holm is None for x in rows if x.p_value is None)
    # per lesion rows exist; a lesion without cases is NA
    (empty,) = [r for r in rows if (r.lesion, r.path, r.metric) == ("edema", "all",
                                                                    "e2e:stage1")]
    assert empty.n_cases == 0 and math.isnan(empty.diff) and empty.p_value is None


def test_identical_runs_have_zero_difference(builders):
    mk = builders.make_case
    cases = [mk("edema_s1_positive_0", "revision_required", s3=False),
             mk("edema_s2_positive_0", "revision_free")]
    rows = paired_comparison(_table(cases, "a"), _table(cases, "b"), n_boot=50, seed=0)
    assert all(r.diff == 0 or math.isnan(r.diff) for r in rows)
    assert all(r.p_value in (None, 1.0) for r in rows)


def test_runs_with_different_key_ids_are_refused(builders):
    mk = builders.make_case
    a = _table([mk("edema_s1_negative_0", "lesion_free"), mk("edema_s2_negative_0",
                                                             "lesion_free")], "a")
    b = _table([mk("edema_s1_negative_0", "lesion_free"), mk("edema_s3_negative_0",
                                                             "lesion_free")], "b")
    with pytest.raises(InputError) as exc:
        paired_comparison(a, b, n_boot=0, seed=0, label_a="runA", label_b="runB")
    msg = str(exc.value)
    assert "1 key_id(s) only in A (runA): edema_s2_negative_0" in msg
    assert "only in B (runB): edema_s3_negative_0" in msg and "--limit" in msg
    c = _table([mk("edema_s1_negative_0", "lesion_free"),
                mk("edema_s2_negative_0", "revision_free")], "c")
    with pytest.raises(InputError, match="qa_path"):
        paired_comparison(a, c, n_boot=0, seed=0)


def test_depth_keeps_the_bootstrap_and_intervals_agree_with_the_test(builders):
    mk = builders.make_case
    keys = [(f"edema_s{i}_positive_0", "revision_required") for i in range(12)] + [
        (f"edema_s{i}_negative_0", "lesion_free") for i in range(12, 24)]
    a = _table([mk(k, p, s1=i % 3 != 0, s2=i % 2 == 0) for i, (k, p) in enumerate(keys)], "a")
    b = _table([mk(k, p, s1=i % 4 != 0, s2=True) for i, (k, p) in enumerate(keys)], "b")
    rows = paired_comparison(a, b, n_boot=200, seed=1)
    (d,) = [r for r in rows if (r.lesion, r.path, r.metric) == ("all", "all", "depth")]
    assert d.test is None and d.p_value is None and d.ci_low < d.diff < d.ci_high
    for r in rows:
        if r.p_value is not None and not math.isnan(r.ci_low):
            assert (r.p_value < 0.05) == (r.ci_low > 0 or r.ci_high < 0), r
    text = format_comparison(rows, "a", "b")
    assert "p_holm" in text.splitlines()[1]
    assert "primary endpoint, mean depth over all 24 cases" in text


def test_no_bootstrap_means_no_intervals_but_tests(builders):
    mk = builders.make_case
    keys = [f"effusion_s{i}_negative_0" for i in range(12)]
    a = _table([mk(k, "lesion_free", s1=i < 2) for i, k in enumerate(keys)], "a")
    b = _table([mk(k, "lesion_free", s1=i < 9) for i, k in enumerate(keys)], "b")
    rows = paired_comparison(a, b, n_boot=0, seed=0)
    assert all(math.isnan(r.ci_low) for r in rows)
    (r,) = [r for r in rows if (r.lesion, r.path, r.metric) == ("all", "all", "e2e:stage1")]
    assert r.test == "score" and r.p_value == pytest.approx(math.erfc(math.sqrt(7 / 2)))
