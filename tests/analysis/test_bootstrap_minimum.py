"""Cells too small for a bootstrap interval carry none, and the tables show the count."""

from __future__ import annotations

import math

from chexpercept.analysis import case_table, cell_stats, paired_comparison
from chexpercept.analysis.bootstrap import MIN_BOOTSTRAP_CASES
from chexpercept.analysis.markdown import _num, _pct


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
