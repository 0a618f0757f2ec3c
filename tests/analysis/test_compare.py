"""Stage 04 paired comparison: McNemar on hand examples, paired bootstrap, refusing mismatches."""

from __future__ import annotations

import math

import pytest

from chexpercept.analysis import case_table, mcnemar, paired_comparison
from chexpercept.errors import InputError


def _table(cases, name):
    return case_table(name, {c["key_id"]: c for c in cases})


def test_mcnemar_hand_examples():
    # exact: b=1, c=5 -> two-sided binomial P = 2 * P(X <= 1 | n=6, p=1/2) = 2 * 7/64
    test, p = mcnemar(1, 5)
    assert test == "exact" and p == pytest.approx(14 / 64)
    assert mcnemar(0, 0) == ("exact", 1.0)
    assert mcnemar(3, 3)[1] == pytest.approx(1.0)
    # chi-square with continuity correction: b=10, c=30 -> (|10-30|-1)^2/40 = 9.025
    test, p = mcnemar(10, 30)
    assert test == "chi2_cc"
    from scipy import stats

    assert p == pytest.approx(stats.chi2.sf(9.025, 1))
    assert p == pytest.approx(0.002663, rel=1e-3)


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
    assert (r.a_only, r.b_only, r.test) == (0, 15, "exact")
    assert r.p_value == pytest.approx(2 * 0.5 ** 15)
    assert r.ci_low <= r.diff <= r.ci_high and r.ci_low > 0
    (d,) = [r for r in rows if (r.lesion, r.path, r.metric) == ("all", "all", "depth")]
    assert d.test is None and d.diff == pytest.approx(0.5)
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
