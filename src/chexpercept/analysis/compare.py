"""Stage 04: paired comparison of two runs on the same cases (``paired_comparisons/*.csv``).

Both runs' :class:`~chexpercept.analysis.case_table.CaseTable` rows are aligned by key_id and
every cell's difference ``B - A`` gets a 95% interval (docs/metrics.md, "Paired comparison"):

- an accuracy (one right/wrong outcome per case and run) gets Tango's (1998) score interval for
  the difference of paired proportions from its discordant counts
  (:func:`~chexpercept.analysis.inference.tango_interval`) and the score test of no difference
  (McNemar's chi-square without continuity correction,
  :func:`~chexpercept.analysis.inference.score_test_p`), which that interval inverts: the
  interval excludes 0 exactly when p < 0.05;
- depth (0-4 per case) gets the paired bootstrap: the per-case differences resampled as
  :func:`bootstrap.bootstrap_interval` resamples a depth (within lesion x path strata where
  each has enough cases, else the cell as one; expanded percentiles; docs/metrics.md,
  "Bootstrap"), so both runs share every resample. Depth gets no p-value.

The p-values of one comparison are one family: each also gets its Holm-adjusted value
(:func:`~chexpercept.analysis.inference.holm`; docs/metrics.md, "Primary endpoint and
multiplicity").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from chexpercept.analysis.bootstrap import (
    GROUP_INDEX,
    bootstrap_interval,
    group_matrix,
    has_interval,
    masked_values,
    value_range,
)
from chexpercept.analysis.case_table import METRIC_INDEX, METRICS, CaseTable, structural
from chexpercept.analysis.inference import holm, score_test_p, tango_interval
from chexpercept.analysis.runs import RunRef
from chexpercept.errors import InputError
from chexpercept.lesions import LESIONS, QA_PATHS

#: ``mcnemar_test`` of an accuracy cell: the score test (McNemar 1947, no continuity
#: correction; Tango's score test at a difference of 0).
SCORE_TEST = "score"
#: Groups reported: every lesion pooled over paths, and every path pooled over lesions.
COMPARE_GROUPS: tuple[tuple[str, str], ...] = (
    ("all", "all"), *(("all", p) for p in QA_PATHS), *((le, "all") for le in LESIONS))
#: Metrics compared (binary ones get the score interval and test; depth the bootstrap interval).
COMPARE_METRICS: tuple[str, ...] = tuple(m for m in METRICS if not m.startswith("reach:"))
#: Columns of the paired-comparison CSV.
COMPARE_COLUMNS: tuple[str, ...] = (
    "lesion", "path", "metric", "n_cases", "value_a", "value_b", "diff_b_minus_a",
    "ci_low", "ci_high", "n_a_only_correct", "n_b_only_correct", "mcnemar_test", "p_value",
    "p_holm")


@dataclass(frozen=True)
class PairedRow:
    """One compared cell (see :data:`COMPARE_COLUMNS`).

    ``test`` is :data:`SCORE_TEST` for an accuracy cell with cases and None otherwise;
    ``p_value`` its two-sided p and ``p_holm`` the Holm-adjusted p over every p-value of the
    comparison (None without a test).
    """

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
    p_holm: float | None = None

    def as_row(self) -> dict[str, Any]:
        """The CSV row (keys :data:`COMPARE_COLUMNS`)."""
        return dict(zip(COMPARE_COLUMNS, (
            self.lesion, self.path, self.metric, self.n_cases, self.value_a, self.value_b,
            self.diff, self.ci_low, self.ci_high, self.a_only, self.b_only, self.test,
            self.p_value, self.p_holm), strict=True))


logger = logging.getLogger(__name__)


def comparison_labels(a: RunRef, b: RunRef) -> tuple[str, str]:
    """The names of runs A and B in the header and the CSV name: ``<label>.oracle_<setting>``.

    ``<label>`` is :attr:`RunRef.label`: the folder name, plus every identity field of the run's
    manifest that differs from the defaults, so two runs of one model under two protocols
    (``--option-order``, ``--samples``, ``--temperature``, ``--seed``, ``--judge``) get two
    names. Two runs whose names are still equal (the same run, or two copies of it) are told
    apart as ``<name>.A`` and ``<name>.B``, with a warning.

    Args:
        a: Run A.
        b: Run B.

    Returns:
        ``(label_a, label_b)``, never equal.
    """
    label_a, label_b = (f"{r.label}.oracle_{r.oracle_setting}" for r in (a, b))
    if label_a != label_b:
        return label_a, label_b
    logger.warning("runs A (%s) and B (%s) have the same name and protocol (%s); they are "
                   "named %s.A and %s.B", a.run_dir, b.run_dir, label_a, label_a, label_a)
    return f"{label_a}.A", f"{label_b}.B"


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
        n_boot: Paired bootstrap resamples of the depth cells (0: no intervals at all, as
            in every table of Stage 04).
        seed: Bootstrap seed.
        label_a: Run A's name for messages.
        label_b: Run B's name for messages.

    Returns:
        One row per group of :data:`COMPARE_GROUPS` x metric of :data:`COMPARE_METRICS` that
        the benchmark can fill; value NaN where the cell has no cases; no interval (NaN)
        where it has fewer than ``bootstrap.MIN_BOOTSTRAP_CASES`` (docs/metrics.md,
        "Bootstrap"). Accuracy cells with cases carry the score test and its Holm-adjusted
        p-value (family: every such cell of the comparison).

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
    _, highest = value_range(a)
    # right/wrong cells: the accuracies, and depth where every case's maximum is 1 (lesion-free)
    binary = np.array([m != "depth" for m in METRICS])[None, :] | (gm.T @ (highest > 1) == 0)
    low, high = _intervals(a, va, vb, ok, n, binary, a_only, b_only, n_boot=n_boot, seed=seed)
    p_values = score_test_p(b_only, a_only)
    rows = []
    for lesion, path in COMPARE_GROUPS:
        g = GROUP_INDEX[(lesion, path)]
        for metric in COMPARE_METRICS:
            if not structural(lesion, path, metric):
                continue
            m = METRIC_INDEX[metric]
            cnt = int(n[g, m])
            tested = bool(binary[g, m]) and cnt > 0
            rows.append(PairedRow(
                lesion, path, metric, cnt, float(mean_a[g, m]), float(mean_b[g, m]),
                float(mean_b[g, m] - mean_a[g, m]), float(low[g, m]), float(high[g, m]),
                int(a_only[g, m]) if tested else None, int(b_only[g, m]) if tested else None,
                SCORE_TEST if tested else None, float(p_values[g, m]) if tested else None))
    adjusted = holm(np.array([np.nan if r.p_value is None else r.p_value for r in rows]))
    return [r if r.p_value is None else replace(r, p_holm=float(q))
            for r, q in zip(rows, adjusted, strict=True)]


def _intervals(a: CaseTable, va: np.ndarray, vb: np.ndarray, ok: np.ndarray, n: np.ndarray,
               binary: np.ndarray, a_only: np.ndarray, b_only: np.ndarray, *, n_boot: int,
               seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(len(GROUPS), n_metrics) bounds of B - A: Tango where ``binary``, else the bootstrap.

    NaN for cells of fewer than ``MIN_BOOTSTRAP_CASES`` cases, and everywhere when
    ``n_boot`` is 0 (module docstring).
    """
    low, high = np.full(n.shape, np.nan), np.full(n.shape, np.nan)
    if n_boot <= 0 or not a.n_cases:
        return low, high
    d = [METRIC_INDEX["depth"]]
    # the per-case depth difference, resampled once: both runs see the same resamples (paired)
    _, highest = value_range(a)
    low[:, d], high[:, d] = bootstrap_interval(
        a, np.where(ok, vb - va, 0.0)[:, d], ok[:, d], -highest[:, d], highest[:, d],
        n_boot=n_boot, seed=seed)
    score = binary & has_interval(n)
    low[score], high[score] = tango_interval(b_only[score], a_only[score], n[score])
    return low, high


def format_comparison(rows: Sequence[PairedRow], label_a: str, label_b: str) -> str:
    """Plain-text table of the pooled rows (lesion ``all``): difference, interval, p-values.

    The accuracy rows of every path, then the primary endpoint (docs/metrics.md, "Primary
    endpoint and multiplicity"): the mean depth over all cases with its paired bootstrap
    interval.

    Args:
        rows: :func:`paired_comparison` rows.
        label_a: Run A's name (title).
        label_b: Run B's name (title).

    Returns:
        The table text (percentage points; depth in stages), without a trailing newline.
    """
    n_tests = sum(r.p_value is not None for r in rows)
    lines = [f"B - A, A = {label_a}, B = {label_b} (percentage points; 95% Tango score "
             f"interval; p: score test (McNemar, no continuity correction), which the "
             f"interval inverts; p_holm: Holm-adjusted over the comparison's {n_tests} "
             f"p-values)"]
    header = f"{'path':<18} {'metric':<28} {'n':>5} {'A %':>6} {'B %':>6} {'B-A':>6} " \
             f"{'95% CI':>15} {'p':>8} {'p_holm':>8}"
    lines += [header, "-" * len(header)]
    for r in rows:
        if r.lesion != "all" or r.metric.startswith("sub:") or r.metric == "depth":
            continue
        p = "n/a" if r.p_value is None else f"{r.p_value:.3g}"
        q = "n/a" if r.p_holm is None else f"{r.p_holm:.3g}"
        lines.append(f"{r.path:<18} {r.metric:<28} {r.n_cases:>5} {_pct(r.value_a):>6} "
                     f"{_pct(r.value_b):>6} {_pct(r.diff):>6} {_ci(r, _pct):>15} {p:>8} "
                     f"{q:>8}")
    primary = next((r for r in rows if (r.lesion, r.path, r.metric) == ("all", "all", "depth")),
                   None)
    if primary is not None:
        lines.append(f"primary endpoint, mean depth over all {primary.n_cases} cases (stages): "
                     f"A {_num(primary.value_a)}, B {_num(primary.value_b)}, B - A "
                     f"{_num(primary.diff)} {_ci(primary, _num)} (95% paired bootstrap)")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f}"


def _num(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def _ci(r: PairedRow, fmt: Callable[[float], str]) -> str:
    """``[low, high]``, or the case count of a cell too small for an interval, or n/a."""
    if not math.isnan(r.ci_low):
        return f"[{fmt(r.ci_low)}, {fmt(r.ci_high)}]"
    return f"n={r.n_cases}" if r.n_cases > 0 and not has_interval(r.n_cases) else "n/a"


__all__ = ["COMPARE_COLUMNS", "SCORE_TEST", "PairedRow", "check_same_cases",
           "format_comparison", "paired_comparison"]
