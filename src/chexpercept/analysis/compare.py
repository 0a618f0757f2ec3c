"""Stage 04: paired comparison of two runs on the same cases (bootstrap difference + McNemar).

Both runs' :class:`~chexpercept.analysis.case_table.CaseTable` rows are aligned by key_id;
the difference ``B - A`` of every cell mean gets a paired 95% bootstrap interval (the per-case
differences resampled as :func:`bootstrap.bootstrap_interval` resamples a depth: within lesion
x path strata where each has enough cases, else the cell as one; expanded percentiles;
docs/metrics.md, "Bootstrap"), and every binary metric
McNemar's test on the discordant cases (exact two-sided binomial test below
:data:`EXACT_BELOW` discordant cases, else the continuity-corrected chi-square; McNemar 1947,
Edwards 1948).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chexpercept.analysis.bootstrap import (
    GROUP_INDEX,
    MIN_BOOTSTRAP_CASES,
    bootstrap_interval,
    group_matrix,
    masked_values,
    value_range,
)
from chexpercept.analysis.case_table import METRIC_INDEX, METRICS, CaseTable, structural
from chexpercept.errors import InputError
from chexpercept.lesions import LESIONS, QA_PATHS

#: Discordant-pair count below which McNemar uses the exact binomial test (a common rule of
#: thumb: the chi-square approximation needs b + c >= 25).
EXACT_BELOW = 25
#: Groups reported: every lesion pooled over paths, and every path pooled over lesions.
COMPARE_GROUPS: tuple[tuple[str, str], ...] = (
    ("all", "all"), *(("all", p) for p in QA_PATHS), *((le, "all") for le in LESIONS))
#: Metrics compared (binary ones get McNemar; depth gets only the bootstrap interval).
COMPARE_METRICS: tuple[str, ...] = tuple(m for m in METRICS if not m.startswith("reach:"))
#: Columns of the paired-comparison CSV.
COMPARE_COLUMNS: tuple[str, ...] = (
    "lesion", "path", "metric", "n_cases", "value_a", "value_b", "diff_b_minus_a",
    "ci_low", "ci_high", "n_a_only_correct", "n_b_only_correct", "mcnemar_test", "p_value")


def mcnemar(b: int, c: int) -> tuple[str, float]:
    """McNemar's test of ``b`` (A right, B wrong) versus ``c`` (A wrong, B right) cases.

    Args:
        b: Discordant cases only A got right.
        c: Discordant cases only B got right.

    Returns:
        ``("exact", p)`` (two-sided binomial test of b out of b + c at 1/2) when
        b + c < :data:`EXACT_BELOW`, else ``("chi2_cc", p)`` with statistic
        ``(|b - c| - 1)**2 / (b + c)`` on 1 degree of freedom. p is 1.0 when b + c = 0.
    """
    from scipy import stats

    total = b + c
    if total == 0:
        return "exact", 1.0
    if total < EXACT_BELOW:
        return "exact", float(min(1.0, stats.binomtest(b, total, 0.5).pvalue))
    statistic = (abs(b - c) - 1) ** 2 / total
    return "chi2_cc", float(stats.chi2.sf(statistic, 1))


@dataclass(frozen=True)
class PairedRow:
    """One compared cell (see :data:`COMPARE_COLUMNS`)."""

    lesion: str
    path: str
    metric: str
    n_cases: int
    value_a: float
    value_b: float
    diff: float
    ci_low: float
    ci_high: float
    a_only: int | None
    b_only: int | None
    test: str | None
    p_value: float | None

    def as_row(self) -> dict[str, Any]:
        """The CSV row (keys :data:`COMPARE_COLUMNS`)."""
        return dict(zip(COMPARE_COLUMNS, (
            self.lesion, self.path, self.metric, self.n_cases, self.value_a, self.value_b,
            self.diff, self.ci_low, self.ci_high, self.a_only, self.b_only, self.test,
            self.p_value), strict=True))


def check_same_cases(a: CaseTable, b: CaseTable, label_a: str, label_b: str) -> None:
    """Refuse two runs whose key_id sets (or a case's qa_path) differ.

    Args:
        a: Run A's table.
        b: Run B's table.
        label_a: Run A's name for messages.
        label_b: Run B's name for messages.

    Raises:
        InputError: Naming both runs, how many key_ids only each has (with examples) and the
            fix.
    """
    ka, kb = set(a.key_ids), set(b.key_ids)
    only_a, only_b = sorted(ka - kb), sorted(kb - ka)
    if only_a or only_b:
        def few(keys: Sequence[str]) -> str:
            return ", ".join(keys[:3]) + (" ..." if len(keys) > 3 else "") if keys else "none"

        raise InputError(
            f"runs do not cover the same cases: {len(only_a)} key_id(s) only in A ({label_a}): "
            f"{few(only_a)}; {len(only_b)} only in B ({label_b}): {few(only_b)}. Compare runs "
            f"made on the same benchmark with the same --limit/--per_path_limit (finish an "
            f"interrupted run with 00_eval.py --resume)")
    row_b = {k: i for i, k in enumerate(b.key_ids)}
    bad = [k for i, k in enumerate(a.key_ids) if a.path[i] != b.path[row_b[k]]]
    if bad:
        raise InputError(f"runs disagree on the qa_path of {len(bad)} case(s) (e.g. {bad[0]}): "
                         f"{label_a} vs {label_b} were not made on the same benchmark")


def _aligned(a: CaseTable, b: CaseTable) -> CaseTable:
    """``b`` with its rows in ``a``'s key_id order."""
    row = {k: i for i, k in enumerate(b.key_ids)}
    order = np.array([row[k] for k in a.key_ids], dtype=np.int64)
    return CaseTable(name=b.name, key_ids=a.key_ids, lesion=b.lesion[order], path=b.path[order],
                     values=b.values[order], applicable=b.applicable[order],
                     missing=b.missing[order], status=b.status[order], has_status=b.has_status)


def paired_comparison(a: CaseTable, b: CaseTable, *, n_boot: int, seed: int,
                      label_a: str = "A", label_b: str = "B") -> list[PairedRow]:
    """Compare run B with run A cell by cell on the same cases.

    Args:
        a: Run A's table.
        b: Run B's table (same key_ids; any order).
        n_boot: Paired bootstrap resamples (0: no intervals).
        seed: Bootstrap seed.
        label_a: Run A's name for messages.
        label_b: Run B's name for messages.

    Returns:
        One row per group of :data:`COMPARE_GROUPS` x metric of :data:`COMPARE_METRICS` that
        the benchmark can fill; value NaN where the cell has no cases; no interval (NaN)
        where it has fewer than ``bootstrap.MIN_BOOTSTRAP_CASES`` (docs/metrics.md,
        "Bootstrap").

    Raises:
        InputError: If the runs' key_id sets or paths differ (:func:`check_same_cases`).
    """
    check_same_cases(a, b, label_a, label_b)
    b = _aligned(a, b)
    va, ok = masked_values(a)
    vb, _ = masked_values(b)
    gm = group_matrix(a).astype(np.float64)
    n = gm.T @ ok
    a_only = gm.T @ (ok & (va > 0.5) & (vb < 0.5))
    b_only = gm.T @ (ok & (va < 0.5) & (vb > 0.5))
    with np.errstate(invalid="ignore", divide="ignore"):
        safe = np.where(n > 0, n, 1)
        mean_a = np.where(n > 0, (gm.T @ va) / safe, np.nan)
        mean_b = np.where(n > 0, (gm.T @ vb) / safe, np.nan)
    if n_boot > 0 and a.n_cases:
        # the per-case difference, resampled once: both runs see the same resamples (paired)
        _, highest = value_range(a)
        low, high = bootstrap_interval(a, np.where(ok, vb - va, 0.0), ok, -highest, highest,
                                       n_boot=n_boot, seed=seed)
    else:
        low = high = np.full(n.shape, np.nan)
    rows = []
    for lesion, path in COMPARE_GROUPS:
        g = GROUP_INDEX[(lesion, path)]
        for metric in COMPARE_METRICS:
            if not structural(lesion, path, metric):
                continue
            m = METRIC_INDEX[metric]
            binary = metric != "depth"
            cnt = int(n[g, m])
            test = p_value = None
            ao = bo = None
            if binary and cnt:
                ao, bo = int(a_only[g, m]), int(b_only[g, m])
                test, p_value = mcnemar(ao, bo)
            rows.append(PairedRow(lesion, path, metric, cnt, float(mean_a[g, m]),
                                  float(mean_b[g, m]), float(mean_b[g, m] - mean_a[g, m]),
                                  float(low[g, m]), float(high[g, m]), ao, bo, test, p_value))
    return rows


def format_comparison(rows: Sequence[PairedRow], label_a: str, label_b: str) -> str:
    """Plain-text table of the pooled rows (lesion ``all``): difference, interval, p-value.

    Args:
        rows: :func:`paired_comparison` rows.
        label_a: Run A's name (title).
        label_b: Run B's name (title).

    Returns:
        The table text (percentage points), without a trailing newline.
    """
    lines = [f"B - A, A = {label_a}, B = {label_b} (percentage points; 95% paired bootstrap "
             f"interval; McNemar p)"]
    header = f"{'path':<18} {'metric':<28} {'n':>5} {'A %':>6} {'B %':>6} {'B-A':>6} " \
             f"{'95% CI':>15} {'p':>8}"
    lines += [header, "-" * len(header)]
    for r in rows:
        if r.lesion != "all" or r.metric.startswith("sub:") or r.metric == "depth":
            continue

        def pct(x: float) -> str:
            return "n/a" if math.isnan(x) else f"{100 * x:.1f}"

        ci = (f"[{pct(r.ci_low)}, {pct(r.ci_high)}]" if not math.isnan(r.ci_low)
              else f"n={r.n_cases}" if 0 < r.n_cases < MIN_BOOTSTRAP_CASES else "n/a")
        p = "n/a" if r.p_value is None else f"{r.p_value:.3g}"
        lines.append(f"{r.path:<18} {r.metric:<28} {r.n_cases:>5} {pct(r.value_a):>6} "
                     f"{pct(r.value_b):>6} {pct(r.diff):>6} {ci:>15} {p:>8}")
    return "\n".join(lines)


__all__ = ["COMPARE_COLUMNS", "PairedRow", "check_same_cases", "format_comparison",
           "mcnemar", "paired_comparison"]
