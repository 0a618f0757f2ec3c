"""Cells too small for an interval carry none (the tables show the count); thin strata and
constant cells still get intervals of non-zero width."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from chexpercept.analysis import (
    case_table,
    cell_stats,
    chance_table,
    paired_comparison,
)
from chexpercept.analysis.bootstrap import MIN_BOOTSTRAP_CASES
from chexpercept.analysis.markdown import _num, _pct
from chexpercept.lesions import LESIONS
from chexpercept.schema import BenchmarkItem

ATTRS = ("distribution", "location", "severity/measurement", "comparison")


def _table(builders, name, flags):
    mk = builders.make_case
    cases = [mk(f"effusion_s{i}_negative_0", "lesion_free", s1=f) for i, f in enumerate(flags)]
    cases.append(mk("edema_s900_negative_0", "lesion_free", s1=True))  # a 1-case lesion
    return case_table(name, {c["key_id"]: c for c in cases})


def test_small_cells_get_no_interval_and_show_their_count(builders):
    flags = [i % 2 == 0 for i in range(MIN_BOOTSTRAP_CASES)]
    cells = cell_stats(_table(builders, "a", flags), n_boot=200, seed=0)
    value, low, high, n = cells.get("edema", "lesion_free", "e2e:stage1")
    assert (value, n) == (1.0, 1) and math.isnan(low) and math.isnan(high)
    value, low, high, n = cells.get("effusion", "lesion_free", "e2e:stage1")
    assert n == MIN_BOOTSTRAP_CASES and low < value < high  # enough cases: an interval
    assert _pct(cells, "edema", "lesion_free", "e2e:stage1") == "100.0 (n=1)"
    assert _pct(cells, "effusion", "lesion_free", "e2e:stage1").startswith("50.0 [")
    assert _num(cells, "edema", "lesion_free", "depth") == "1.00 (n=1)"
    # without resampling there is no interval to miss: no count either
    plain = cell_stats(_table(builders, "a", flags), n_boot=0)
    assert _pct(plain, "edema", "lesion_free", "e2e:stage1") == "100.0"


def test_paired_comparison_leaves_small_cells_without_interval(builders):
    flags = [i % 2 == 0 for i in range(MIN_BOOTSTRAP_CASES)]
    a = _table(builders, "a", flags)
    b = _table(builders, "b", [True] * MIN_BOOTSTRAP_CASES)
    rows = {(r.lesion, r.path, r.metric): r for r in paired_comparison(a, b, n_boot=200,
                                                                       seed=0)}
    small = rows[("edema", "all", "e2e:stage1")]
    assert small.n_cases == 1 and math.isnan(small.ci_low) and math.isnan(small.ci_high)
    big = rows[("all", "lesion_free", "e2e:stage1")]
    assert big.n_cases == MIN_BOOTSTRAP_CASES + 1 and not math.isnan(big.ci_low)


def _thin_strata_run(builders, seed=1):
    """12 cases, one per lesion x path stratum (as --limit gives), random outcomes."""
    rng = np.random.default_rng(seed)
    cases = []
    for i, lesion in enumerate(le for le in LESIONS if le != "cardiomegaly"):
        for path in ("revision_required", "revision_free"):
            attr = {k: bool(rng.random() < 0.25) for k in ATTRS}
            cases.append(builders.make_case(f"{lesion}_s{i}_positive_{len(path)}", path,
                                            s1=bool(rng.random() < 0.5), s4=all(attr.values()),
                                            attr=attr))
    return case_table("random_baseline", {c["key_id"]: c for c in cases})


def test_strata_of_one_case_no_longer_give_zero_width_intervals(builders):
    # issue 23: location 25.0 [25.0, 25.0] over 12 cases in 12 strata of one case each
    table = _thin_strata_run(builders)
    cells = cell_stats(table, n_boot=1000, seed=0)
    value, low, high, n = cells.get("all", "all", "sub:location")
    assert (value, n) == (0.25, 12) and low < value < high
    assert _pct(cells, "all", "all", "sub:location") == "25.0 [6.7, 57.2]"  # corrected Wilson, 3 of 12
    value, low, high, n = cells.get("all", "all", "depth")
    assert n == 12 and low < value < high  # the cell resampled as one stratum
    shown = np.isfinite(cells.ci_low)
    assert shown.any() and (cells.ci_high[shown] > cells.ci_low[shown]).all()
    # the paired comparison resamples such a cell as one stratum too
    other = _thin_strata_run(builders, seed=2)
    rows = [r for r in paired_comparison(table, other, n_boot=1000, seed=0)
            if r.n_cases >= MIN_BOOTSTRAP_CASES and (r.a_only or r.b_only)]
    assert rows and all(r.ci_low < r.diff < r.ci_high for r in rows)


def test_a_cell_whose_cases_all_agree_gets_a_bound_not_a_point(builders):
    # a deterministic baseline: every case right -> nothing to resample; the interval says how
    # far the accuracy could be from 1 given n cases (Wilson), never [100.0, 100.0]
    mk = builders.make_case
    cases = [mk(f"effusion_s{i}_positive_0", "revision_required") for i in range(20)]
    cells = cell_stats(case_table("oracle_baseline", {c["key_id"]: c for c in cases}),
                       n_boot=200, seed=0)
    z2 = NormalDist().inv_cdf(0.975) ** 2
    u = z2 / (20 + z2)  # Wilson upper bound of 0 out of 20
    value, low, high, n = cells.get("all", "all", "e2e:stage4")
    # an accuracy: the continuity-corrected Wilson interval of 20 of 20 (docs "Bootstrap")
    assert (value, high, n) == (1.0, 1.0, 20) and low == pytest.approx(0.7995, abs=5e-5)
    value, low, high, n = cells.get("all", "all", "depth")  # depth 4 (the maximum) everywhere
    assert (value, high) == (4.0, 4.0) and low == pytest.approx(4 * (1 - u))
    assert _num(cells, "all", "all", "depth") == f"4.00 [{4 * (1 - u):.2f}, 4.00]"
    # two runs that agree on every case: the difference is bounded, not pinned to 0
    same = paired_comparison(case_table("a", {c["key_id"]: c for c in cases}),
                             case_table("b", {c["key_id"]: c for c in cases}), n_boot=200,
                             seed=0)
    (r,) = [r for r in same if (r.lesion, r.path, r.metric) == ("all", "all", "e2e:stage1")]
    assert r.diff == 0 and (r.ci_low, r.ci_high) == pytest.approx((-u, u))
    assert r.p_value == 1.0


def test_intervals_are_refused_for_the_chance_table(bench_builder):
    keys = [f"effusion_s{i}_negative_0" for i in range(MIN_BOOTSTRAP_CASES)]
    item = BenchmarkItem.model_validate(bench_builder("lesion_free"))
    table = chance_table({k: item for k in keys}, [(k, "lesion_free") for k in keys])
    assert np.isnan(cell_stats(table).ci_low).all()
    with pytest.raises(ValueError, match="chance table takes n_boot=0"):
        cell_stats(table, n_boot=10)


def test_lesion_free_depth_has_the_stage1_accuracy_interval(builders):
    """Lesion-free depth is the 0/1 stage-1 outcome: the same proportion gets one interval
    (the Wilson interval of its count; docs/metrics.md, "Small cells"), 4/14 included."""
    from chexpercept.analysis.bootstrap import wilson_cc_interval

    flags = [i < 4 for i in range(14)]
    cells = cell_stats(_table(builders, "a", flags), n_boot=300, seed=0)
    for lesion in ("effusion", "all"):
        acc = cells.get(lesion, "lesion_free", "e2e:stage1")
        depth = cells.get(lesion, "lesion_free", "depth")
        assert acc == depth
    low, high = wilson_cc_interval(np.array([4]), np.array([14]))
    assert cells.get("effusion", "lesion_free", "depth")[1:3] == (low[0], high[0])


def test_one_small_cell_rule_for_every_interval():
    """bootstrap.has_interval is the only threshold: the proportion and cluster intervals
    (detection, error classes, accuracies; sampling variance) are empty below it."""
    from chexpercept.analysis.bootstrap import (
        cluster_interval,
        has_interval,
        proportion_interval,
    )

    assert not has_interval(MIN_BOOTSTRAP_CASES - 1) and has_interval(MIN_BOOTSTRAP_CASES)
    low, high = proportion_interval(np.array([1, 1, 0]), np.array([1, 9, 10]))
    assert np.isnan(low[:2]).all() and np.isnan(high[:2]).all()
    assert low[2] == 0 and 0 < high[2] < 1
    small = cluster_interval(np.ones(MIN_BOOTSTRAP_CASES - 1), 0.0, 1.0, n_boot=50, seed=0,
                             label="x")
    assert all(math.isnan(x) for x in small)
    big = cluster_interval(np.r_[np.ones(5), np.zeros(5)], 0.0, 1.0, n_boot=50, seed=0,
                           label="x")
    assert big[0] < 0.5 < big[1]
