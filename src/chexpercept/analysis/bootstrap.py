"""Stage 04: cell means of a case table over lesion x path groups, with 95% intervals.

Every table of the analysis is a cell mean of a :class:`~chexpercept.analysis.case_table.
CaseTable` column over a group of cases (lesion x path, either may be ``all``).

Intervals (docs/metrics.md, "Bootstrap"), for cells of at least :data:`MIN_BOOTSTRAP_CASES`
cases:

- an accuracy (every metric but ``depth``: one 0/1 outcome per case) gets the Wilson score
  interval of its k correct out of n cases (:func:`wilson_interval`). It needs no resampling,
  its coverage at small n is known (mean 95.1%, never below 91.4% for n = 10-200 at
  accuracies from 0.1 to 0.9 and the chance levels of the benchmark's questions;
  docs/metrics.md, "Bootstrap"), and it is never zero-width, also not at 0 or n correct;
- a mean of several values (``depth``, 0-4, and the paired depth differences of
  :mod:`~chexpercept.analysis.compare`) gets a bootstrap interval over cases
  (:func:`bootstrap_interval`). Cases are resampled with replacement *within each lesion x
  path stratum* (the benchmark's fixed design of 100 cases per lesion and path,
  docs/paper.md, "Benchmark size") when every stratum with cases in the cell has at least
  :data:`MIN_STRATUM_CASES` of them; otherwise the cell's cases are resampled as one stratum
  (a stratum of one case never varies, so resampling it apart shrank the interval, down to
  zero width). The bounds are expanded percentiles (Hesterberg 2015): the
  ``Phi(sqrt(n / df) * t(0.025, df))`` and upper percentiles of the resampled means, with
  ``df = n - H`` for n cases in H resampled strata, which undoes the too-narrow spread of
  resampling n cases (the plug-in variance is ``df / n`` of the unbiased one). Where no
  resample moves the mean (every case alike, within each stratum resampled apart), the
  interval is the bound of :func:`bootstrap_interval` instead, so no interval is zero-width.

All stages of a case are resampled together. Every cell is a union of strata and the cases it
counts depend only on lesion and path, so the number of cases behind a cell is the same in every
resample and a resampled cell mean is a resampled sum over a fixed n. The stratified sums are
one (B, size) @ (size, n_metrics) product per stratum, then sums of strata for the pooled
groups (exact integers, so the result equals one dense product bit for bit); a pooled cell is
one (B, n) @ (n, m) product over its cases for the m metrics sharing them. Weights are drawn
from ``rng_for(seed, "04_analysis", "bootstrap", label)`` over the cases in key_id order (a
stratum's label is ``<lesion>/<path>``, a pooled cell's ``pooled:`` and the ``+``-joined labels
of its strata), so runs on the same cases share resamples (paired comparisons), the draws are
made once per process for all runs, and the result does not depend on file order.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from chexpercept.analysis.case_table import MAX_DEPTH, METRIC_INDEX, METRICS, CaseTable
from chexpercept.lesions import LESIONS, QA_PATHS
from chexpercept.rng import rng_for

#: Group labels: ``all`` pools every lesion / path.
LESION_GROUPS: tuple[str, ...] = ("all", *LESIONS)
PATH_GROUPS: tuple[str, ...] = ("all", *QA_PATHS)
#: Row of each group in the cell matrices: lesion-major, ``all`` first.
GROUPS: tuple[tuple[str, str], ...] = tuple((le, p) for le in LESION_GROUPS for p in PATH_GROUPS)
GROUP_INDEX = {g: i for i, g in enumerate(GROUPS)}
#: Two-sided level of every interval (95%).
CI_LEVEL = 0.95
#: Fewest cases behind a cell for an interval (docs/metrics.md, "Bootstrap"): the tables show
#: the count of a smaller cell instead; the coverage of the intervals is checked from 10 cases
#: up (tests/analysis/test_interval_coverage.py).
MIN_BOOTSTRAP_CASES = 10
#: Fewest counted cases of a lesion x path stratum for resampling the strata of a cell apart
#: (docs/metrics.md, "Bootstrap"): with a smaller stratum in it, the cell is resampled as one
#: stratum. Chosen by simulation (depth coverage 94.4% at 2, 94.7% at 5, 94.9% at 10 and
#: when never split; the docs section).
MIN_STRATUM_CASES = 5
#: Metrics with one 0/1 outcome per case (Wilson intervals); ``depth`` is bootstrapped.
BINARY_METRICS: tuple[str, ...] = tuple(m for m in METRICS if m != "depth")
#: Bootstrap resamples per matrix product (:func:`_blocked_product`).
BOOT_BLOCK = 64

_BINARY = np.array([m in BINARY_METRICS for m in METRICS], dtype=bool)
#: (len(GROUPS), n_lesions * n_paths) bool: stratum ``lesion * n_paths + path`` is in the group.
_GROUP_STRATA = np.array(
    [[g_le in ("all", le) and g_p in ("all", p) for le in LESIONS for p in QA_PATHS]
     for g_le, g_p in GROUPS], dtype=bool)


@dataclass(frozen=True)
class CellStats:
    """Cell means of a table over :data:`GROUPS` x :data:`METRICS`.

    Attributes:
        name: The table's name.
        value: (n_groups, n_metrics) float64 mean; NaN for an empty cell.
        n: (n_groups, n_metrics) int64 number of cases behind the cell.
        ci_low: (n_groups, n_metrics) float64 lower 95% bound in the value's units (Wilson for
            accuracies, bootstrap for depth; module docstring); NaN: none, also for cells of
            fewer than :data:`MIN_BOOTSTRAP_CASES` cases.
        ci_high: (n_groups, n_metrics) float64 upper bound (NaN: none).
        n_boot: Number of bootstrap resamples (0: no intervals at all).
    """

    name: str
    value: np.ndarray
    n: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    n_boot: int

    def get(self, lesion: str, path: str, metric: str) -> tuple[float, float, float, int]:
        """``(value, ci_low, ci_high, n)`` of one cell.

        Args:
            lesion: One of ``lesions.LESIONS`` or ``all``.
            path: One of ``lesions.QA_PATHS`` or ``all``.
            metric: One of ``case_table.METRICS``.

        Returns:
            The cell's mean, bounds (NaN: none) and number of cases.

        Raises:
            KeyError: If the group or metric is unknown.
        """
        g, m = GROUP_INDEX[(lesion, path)], METRIC_INDEX[metric]
        return (float(self.value[g, m]), float(self.ci_low[g, m]), float(self.ci_high[g, m]),
                int(self.n[g, m]))


def group_matrix(table: CaseTable) -> np.ndarray:
    """Membership of each case in each lesion x path group.

    Args:
        table: The cases (only ``lesion`` and ``path`` are used).

    Returns:
        (n_cases, len(GROUPS)) bool, columns in :data:`GROUPS` order.
    """
    n = table.n_cases
    lesion_ok = [np.ones(n, bool)] + [table.lesion == i for i in range(len(LESIONS))]
    path_ok = [np.ones(n, bool)] + [table.path == j for j in range(len(QA_PATHS))]
    return np.stack([le & p for le in lesion_ok for p in path_ok], axis=1)


def masked_values(table: CaseTable) -> tuple[np.ndarray, np.ndarray]:
    """The values that count towards cell means, and where they are.

    A value counts when the metric applies to the case and is known (not NaN).

    Args:
        table: A run's or the chance table.

    Returns:
        ``(values, ok)``: (n_cases, n_metrics) float64 values, 0 where not counted, and
        (n_cases, n_metrics) bool, True where counted.
    """
    ok = table.applicable & np.isfinite(table.values)
    return np.where(ok, table.values, 0.0), ok


def wilson_interval(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval (Wilson 1927) at :data:`CI_LEVEL` of k successes in n trials.

    ``(k + z**2 / 2 -+ z * sqrt(k * (n - k) / n + z**2 / 4)) / (n + z**2)`` with z the
    normal quantile of 0.975; it contains k / n, and its coverage at small n is far closer to
    the nominal level than the normal-approximation (Wald) interval that a percentile
    bootstrap of a proportion imitates (Brown, Cai & DasGupta 2001).

    Args:
        k: Array of successes (integer-valued floats), 0 <= k <= n.
        n: Array of trials, same shape, > 0.

    Returns:
        ``(low, high)``: float64 arrays of k's shape in [0, 1]; low is exactly 0 where k = 0
        and high exactly 1 where k = n.
    """
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    z = NormalDist().inv_cdf(0.5 + CI_LEVEL / 2)
    centre = (k + z * z / 2) / (n + z * z)
    half = z * np.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    low = np.where(k <= 0, 0.0, np.maximum(centre - half, 0.0))
    high = np.where(k >= n, 1.0, np.minimum(centre + half, 1.0))
    return low, high


def wilson_cc_interval(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Continuity-corrected Wilson interval (Newcombe 1998, Stat Med 17:857, method 4).

    The reported interval of every proportion (:func:`proportion_interval`): the plain Wilson
    interval's exact coverage falls to 89.8% (n = 11, p = 0.95) over the grid of
    docs/metrics.md, "Coverage by method", this one's lowest cell is 95.1%
    (``benchmarks/coverage_grid.py``).

    Args:
        k: Array of successes (integer-valued floats), 0 <= k <= n.
        n: Array of trials, same shape, > 0.

    Returns:
        ``(low, high)``: float64 arrays of k's shape in [0, 1]; low exactly 0 where k = 0,
        high exactly 1 where k = n; contains k / n.
    """
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    z = NormalDist().inv_cdf(0.5 + CI_LEVEL / 2)
    p, z2 = k / n, z * z
    den = 2 * (n + z2)
    lo_in = np.maximum(z2 - 2 - 1 / n + 4 * p * (n * (1 - p) + 1), 0.0)
    hi_in = np.maximum(z2 + 2 - 1 / n + 4 * p * (n * (1 - p) - 1), 0.0)
    low = (2 * n * p + z2 - 1 - z * np.sqrt(lo_in)) / den
    high = (2 * n * p + z2 + 1 + z * np.sqrt(hi_in)) / den
    return (np.where(k <= 0, 0.0, np.clip(low, 0.0, 1.0)),
            np.where(k >= n, 1.0, np.clip(high, 0.0, 1.0)))


def has_interval(n: np.ndarray | int) -> np.ndarray | bool:
    """The one small-cell rule of every Stage 04 table (docs/metrics.md, "Small cells").

    A cell gets an interval only when it has at least :data:`MIN_BOOTSTRAP_CASES` cases;
    every table writer (stage accuracies, depth, funnel, sub-questions, detection metrics,
    error classes, paired comparison, sampling variance, ``report.md`` and the viewer) asks
    this function, so no table can apply another threshold.

    Args:
        n: Number of cases behind the cell (int or integer array).

    Returns:
        bool (or a bool array of n's shape): True where an interval is reported.
    """
    out = np.asarray(n) >= MIN_BOOTSTRAP_CASES
    return bool(out) if out.ndim == 0 else out


def proportion_interval(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reported interval of a proportion k / n (NaN for a small cell).

    Continuity-corrected Wilson (:func:`wilson_cc_interval`) where :func:`has_interval`.

    Every table that reports a count proportion (stage accuracies, lesion-free depth,
    detection metrics, error classes) takes its interval from here, so one proportion
    reported in two tables has one interval (docs/metrics.md, "Small cells").

    Args:
        k: Array of successes (integer-valued), 0 <= k <= n.
        n: Array of trials, same shape (0 allowed: NaN).

    Returns:
        ``(low, high)``: float64 arrays of k's shape; NaN where n < :data:`MIN_BOOTSTRAP_CASES`.
    """
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    ok = has_interval(n)
    low, high = np.full(k.shape, np.nan), np.full(k.shape, np.nan)
    if np.any(ok):
        lo, hi = wilson_cc_interval(k[ok], n[ok])
        low[ok], high[ok] = lo, hi
    return low, high


def _strata(table: CaseTable) -> list[tuple[int, int, np.ndarray]]:
    """``(lesion, path, rows)`` of every non-empty stratum in (lesion, path) order.

    ``rows`` is (size,) int64, the stratum's row indices ordered by key_id.
    """
    strata: dict[tuple[int, int], list[int]] = {}
    for i, (le, p) in enumerate(zip(table.lesion.tolist(), table.path.tolist(), strict=True)):
        strata.setdefault((le, p), []).append(i)
    return [(le, p, np.array(sorted(idx, key=lambda i: table.key_ids[i]), dtype=np.int64))
            for (le, p), idx in sorted(strata.items())]


def _stratum_label(le: int, p: int) -> str:
    return f"{LESIONS[le]}/{QA_PATHS[p]}"


def _draw_counts(seed: int, label: str, size: int, n_boot: int) -> np.ndarray:
    """(B, size) read-only multinomial counts of one resampled unit.

    The draws depend only on the seed, the unit's label (a stratum's ``<lesion>/<path>``, a
    pooled cell's ``pooled:...``) and its size, so every run on the same cases can reuse them
    (column j = the unit's j-th case in key_id order). Stored in the smallest unsigned dtype
    that holds ``size`` (a count never exceeds it): uint8 for the paper's 100-case strata, a
    quarter of float32's memory.
    """
    rng = rng_for(seed, "04_analysis", "bootstrap", label)
    # (B, size) draws with replacement -> per-row counts via one flat bincount
    draws = rng.integers(0, size, (n_boot, size)) + size * np.arange(n_boot)[:, None]
    counts = np.bincount(draws.ravel(), minlength=n_boot * size).reshape(n_boot, size)
    counts = counts.astype(np.min_scalar_type(size))
    counts.flags.writeable = False
    return counts


#: Counts of each stratum, cached across runs (all 21 strata of one benchmark).
_stratum_counts = functools.lru_cache(maxsize=len(LESIONS) * len(QA_PATHS))(_draw_counts)
#: Counts of the cells resampled as one stratum, cached across runs; few and small in the
#: runs that have them (``--limit``), at most 32 x 4 MB when a full run has a thin stratum.
_pooled_counts = functools.lru_cache(maxsize=32)(_draw_counts)


def _strata_blocks(strata: Sequence[tuple[int, int, np.ndarray]], n_boot: int, seed: int
                   ) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """``(lesion, path, rows, counts)`` per stratum: rows (size,) int64, counts (B, size) uint."""
    return [(le, p, rows, _stratum_counts(int(seed), _stratum_label(le, p), len(rows),
                                          int(n_boot)))
            for le, p, rows in strata]


def strata_weights(table: CaseTable, n_boot: int, seed: int) -> np.ndarray:
    """Bootstrap weights (multinomial counts), resampling within each lesion x path stratum.

    These are the weights of every cell that is resampled stratum by stratum
    (:func:`bootstrap_interval`).

    Args:
        table: The cases (only ``key_ids``, ``lesion``, ``path`` are used).
        n_boot: Number of resamples B.
        seed: Seed (``--seed``).

    Returns:
        (B, n_cases) float32; row b holds how often each case is drawn in resample b; each
        stratum's weights sum to its size.
    """
    weights = np.zeros((n_boot, table.n_cases), dtype=np.float32)
    for _, _, rows, counts in _strata_blocks(_strata(table), n_boot, seed):
        weights[:, rows] = counts
    return weights


def _blocked_product(counts: np.ndarray, v32: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = counts @ v32``, :data:`BOOT_BLOCK` resamples at a time.

    That keeps each product below OpenBLAS's multithreading threshold (M * N * K <= 65536 *
    4): worker threads cost far more than they gain on products this small (measured 10-50x
    slower on a busy 2-core machine). Values are 0/1 or small integers, so every float32 sum
    is an exact integer (< 2**24) whatever the order.
    """
    for start in range(0, counts.shape[0], BOOT_BLOCK):
        stop = min(start + BOOT_BLOCK, counts.shape[0])
        np.matmul(counts[start:stop].astype(np.float32, copy=False), v32, out=out[start:stop])


def _resampled_sums(values: np.ndarray,
                    blocks: Sequence[tuple[int, int, np.ndarray, np.ndarray]]) -> np.ndarray:
    """Stratified resampled cell sums: (B, n_groups, k) float32 from per-stratum weights.

    Per stratum, (B, size) @ (size, k) products give the resampled sums; the groups (``all``
    pools) are sums of strata.

    Args:
        values: (n_cases, k) float64 masked values (:func:`masked_values`).
        blocks: ``(lesion, path, rows, counts)`` per stratum, counts (B, size) of
            non-negative integers (any numeric dtype).
    """
    n_boot = blocks[0][3].shape[0] if blocks else 0
    strata = np.zeros((len(LESIONS), len(QA_PATHS), n_boot, values.shape[1]), dtype=np.float32)
    v32 = values.astype(np.float32)
    for le, p, rows, counts in blocks:
        _blocked_product(counts, v32[rows], strata[le, p])
    return _pool(strata).transpose(1, 0, 2)


def _pool(strata: np.ndarray) -> np.ndarray:
    """Group sums from stratum sums: (n_lesions, n_paths, ...) -> (len(GROUPS), ...)."""
    by_lesion, by_path = strata.sum(axis=1), strata.sum(axis=0)
    total = by_path.sum(axis=0)
    out = np.empty((len(GROUPS), *strata.shape[2:]), dtype=strata.dtype)
    for g, (lesion, path) in enumerate(GROUPS):
        p = QA_PATHS.index(path) if path != "all" else None
        if lesion == "all":
            out[g] = total if p is None else by_path[p]
        else:
            le = LESIONS.index(lesion)
            out[g] = by_lesion[le] if p is None else strata[le, p]
    return out


def _group_sums(table: CaseTable, x: np.ndarray) -> np.ndarray:
    """(len(GROUPS), n_metrics) float64 sums of the columns of ``x`` (n_cases, n_metrics).

    Per-stratum ``bincount`` sums pooled by :func:`_pool`: no BLAS call, whose worker threads
    dominate at this size on a busy machine (the full analysis took 1.7x the wall time with
    a matrix product here, measured with benchmarks/bench_analysis.py on 2 shared cores);
    exact for integer-valued ``x`` (0/1 flags, depths, counts).
    """
    stratum = table.lesion.astype(np.int64) * len(QA_PATHS) + table.path
    n_strata = len(LESIONS) * len(QA_PATHS)
    strata = np.stack([np.bincount(stratum, weights=x[:, m], minlength=n_strata)
                       for m in range(x.shape[1])], axis=1)
    return _pool(strata.reshape(len(LESIONS), len(QA_PATHS), x.shape[1]))


@dataclass(frozen=True)
class ResampledCells:
    """Resampled cell sums of :func:`resampled_cells`.

    Attributes:
        sums: (B, len(GROUPS), k) float64 resampled sums; NaN where the cell is not resampled
            (fewer than :data:`MIN_BOOTSTRAP_CASES` cases).
        n: (len(GROUPS), k) int64 cases behind each cell (the same in every resample).
        df: (len(GROUPS), k) int64 ``n - H``, H the number of strata resampled apart (1 for a
            pooled cell); 0 where the cell is not resampled.
        stratified: (len(GROUPS), k) bool, resampled stratum by stratum (else pooled or not
            resampled).
    """

    sums: np.ndarray
    n: np.ndarray
    df: np.ndarray
    stratified: np.ndarray


def resampled_cells(table: CaseTable, values: np.ndarray, ok: np.ndarray, *, n_boot: int,
                    seed: int) -> ResampledCells:
    """Resampled sums of every cell with :data:`MIN_BOOTSTRAP_CASES` cases or more.

    A cell is resampled within its lesion x path strata when each stratum with counted cases
    in it has at least :data:`MIN_STRATUM_CASES`, else as one stratum of its counted cases
    (module docstring; docs/metrics.md, "Bootstrap").

    Args:
        table: The cases (``key_ids``, ``lesion``, ``path``).
        values: (n_cases, k) float64 small integers (0/1, depths, their differences), so
            every float32 sum is exact; 0 where not counted (a run's
            :func:`masked_values` columns, or a paired difference).
        ok: (n_cases, k) bool, True where counted; a cell's counted cases must be the same for
            every run compared with the same draws (true for runs: it depends only on lesion
            and path).
        n_boot: Resamples B (> 0).
        seed: Bootstrap seed.

    Returns:
        The :class:`ResampledCells`.
    """
    strata = _strata(table)
    n_cols = values.shape[1]
    per_stratum = np.zeros((len(LESIONS) * len(QA_PATHS), n_cols), dtype=np.int64)
    for le, p, rows in strata:
        per_stratum[le * len(QA_PATHS) + p] = ok[rows].sum(axis=0)
    member = _GROUP_STRATA.astype(np.int64)
    n = member @ per_stratum
    n_strata = member @ (per_stratum > 0)
    thin = (member @ ((per_stratum > 0) & (per_stratum < MIN_STRATUM_CASES))) > 0
    wanted = has_interval(n)
    stratified = wanted & ~thin
    sums = np.full((n_boot, len(GROUPS), n_cols), np.nan)
    if stratified.any():
        cols = np.flatnonzero(stratified.any(axis=0))
        strat = _resampled_sums(values[:, cols], _strata_blocks(strata, n_boot, seed))
        sums[:, :, cols] = np.where(stratified[:, cols], strat, np.nan)
    # pooled cells: one resampled unit per distinct set of counted cases
    units: dict[tuple[str, bytes], tuple[np.ndarray, list[tuple[int, int]]]] = {}
    for g, c in zip(*np.nonzero(wanted & thin), strict=True):
        parts = [(le, p, rows[ok[rows, c]]) for le, p, rows in strata
                 if _GROUP_STRATA[g, le * len(QA_PATHS) + p]]
        rows = np.concatenate([r for _, _, r in parts])
        label = "pooled:" + "+".join(_stratum_label(le, p) for le, p, r in parts if len(r))
        units.setdefault((label, rows.tobytes()), (rows, []))[1].append((int(g), int(c)))
    v32 = values.astype(np.float32)
    for (label, _), (rows, cells) in units.items():
        counts = _pooled_counts(int(seed), label, len(rows), int(n_boot))
        cols = np.array([c for _, c in cells])
        out = np.empty((n_boot, len(cells)), dtype=np.float32)
        _blocked_product(counts, np.ascontiguousarray(v32[np.ix_(rows, cols)]), out)
        for j, (g, c) in enumerate(cells):
            sums[:, g, c] = out[:, j]
    df = np.where(stratified, n - n_strata, np.where(wanted, n - 1, 0))
    return ResampledCells(sums=sums, n=n, df=df, stratified=stratified)


def t_quantile(p: float, df: np.ndarray) -> np.ndarray:
    """Student t quantile of level ``p`` by the Cornish-Fisher expansion (A&S 26.7.5).

    Four terms in ``1 / df``; off from the exact quantile by less than 3e-5 for df >= 8 (the
    fewest :func:`resampled_cells` gives a cell of 10 cases) and 1e-10 from df = 100. It keeps
    scipy.stats (over a second to import) out of Stage 04.

    Args:
        p: Level in (0, 1).
        df: Array of degrees of freedom (> 0).

    Returns:
        float64 array of df's shape.
    """
    x = NormalDist().inv_cdf(p)
    nu = np.asarray(df, dtype=np.float64)
    g1 = (x ** 3 + x) / 4
    g2 = (5 * x ** 5 + 16 * x ** 3 + 3 * x) / 96
    g3 = (3 * x ** 7 + 19 * x ** 5 + 17 * x ** 3 - 15 * x) / 384
    g4 = (79 * x ** 9 + 776 * x ** 7 + 1482 * x ** 5 - 1920 * x ** 3 - 945 * x) / 92160
    return x + g1 / nu + g2 / nu ** 2 + g3 / nu ** 3 + g4 / nu ** 4


def expanded_levels(n: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Lower percentile level of the expanded percentile interval (Hesterberg 2015).

    ``Phi(sqrt(n / df) * t_df(alpha))`` with alpha = (1 - :data:`CI_LEVEL`) / 2: the level at
    which the resampled means of n cases with ``df`` degrees of freedom reach the t interval's
    bound (0.0086 at n = 10 pooled, 0.0231 at n = 100, 0.0244 at n = 2,100 in 21 strata).

    Args:
        n: Array of case counts (> df).
        df: Array of degrees of freedom (>= 1), same shape.

    Returns:
        float64 array of levels in (0, alpha]; the upper level is 1 minus it.
    """
    n, df = np.asarray(n, dtype=np.float64), np.asarray(df, dtype=np.float64)
    x = np.sqrt(n / df) * t_quantile((1 - CI_LEVEL) / 2, df)
    return np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in x.ravel().tolist()],
                    dtype=np.float64).reshape(x.shape)


def value_range(table: CaseTable) -> tuple[np.ndarray, np.ndarray]:
    """Lowest and highest value each case could have in each metric.

    Args:
        table: The cases (only ``path`` is used).

    Returns:
        ``(lowest, highest)``: (n_cases, n_metrics) float64; 0 and 1 for an accuracy, 0 and
        the path's maximum depth (``case_table.MAX_DEPTH``) for depth.
    """
    highest = np.ones((table.n_cases, len(METRICS)))
    max_depth = np.array([MAX_DEPTH[p] for p in QA_PATHS], dtype=np.float64)
    highest[:, METRIC_INDEX["depth"]] = max_depth[table.path]
    return np.zeros_like(highest), highest


def bootstrap_interval(table: CaseTable, values: np.ndarray, ok: np.ndarray,
                       lowest: np.ndarray, highest: np.ndarray, *, n_boot: int, seed: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """95% bootstrap interval of every cell mean of ``values`` (module docstring).

    Where no resample moves the mean (every case of the cell has the same value, within each
    stratum where the strata are resampled apart), the percentile interval would have zero
    width; the bound for that case is used instead: with u the Wilson upper bound of 0 cases
    out of n (:func:`wilson_interval`), at most a share u of cases could differ, each at most
    to the end of its range, so the mean lies in ``[m - u * mean(v - lowest), m + u *
    mean(highest - v)]`` (for 0/1 values this is the Wilson interval of 0 or n out of n).

    Args:
        table: The cases (``key_ids``, ``lesion``, ``path``).
        values: (n_cases, k) float64 integer-valued, 0 where not counted (see
            :func:`resampled_cells`).
        ok: (n_cases, k) bool, True where counted.
        lowest: (n_cases, k) float64, the lowest value each case could have
            (:func:`value_range`).
        highest: (n_cases, k) float64, the highest.
        n_boot: Resamples B (> 0).
        seed: Bootstrap seed.

    Returns:
        ``(low, high)``: (len(GROUPS), k) float64 bounds; NaN for cells of fewer than
        :data:`MIN_BOOTSTRAP_CASES` cases. ``low < high`` wherever a case's range is not a
        single value.
    """
    cells = resampled_cells(table, values, ok, n_boot=n_boot, seed=seed)
    low = np.full(cells.n.shape, np.nan)
    high = low.copy()
    done = cells.df > 0
    if not done.any():
        return low, high
    means = cells.sums[:, done] / cells.n[done]
    levels = expanded_levels(cells.n[done], cells.df[done])
    lo, hi = np.empty(len(levels)), np.empty(len(levels))
    for level in np.unique(levels):
        at = levels == level
        lo[at], hi[at] = np.quantile(np.ascontiguousarray(means[:, at].T), [level, 1 - level],
                                     axis=1)
    low[done], high[done] = lo, hi
    flat = done & ~(high > low)
    if flat.any():
        n = cells.n[flat].astype(np.float64)
        u = wilson_interval(np.zeros(len(n)), n)[1]
        mean = _group_sums(table, values)[flat] / n
        below = _group_sums(table, np.where(ok, values - lowest, 0.0))[flat] / n
        above = _group_sums(table, np.where(ok, highest - values, 0.0))[flat] / n
        low[flat], high[flat] = mean - u * below, mean + u * above
    return low, high


def cell_stats(table: CaseTable, *, n_boot: int = 0, seed: int = 0) -> CellStats:
    """Cell means (and 95% intervals) of a table over every lesion x path group.

    Intervals (module docstring; docs/metrics.md, "Bootstrap") are computed only for cells of
    at least :data:`MIN_BOOTSTRAP_CASES` cases: Wilson for the accuracies, the bootstrap for
    depth.

    Args:
        table: A run's or the chance table.
        n_boot: Bootstrap resamples (0: no intervals; the chance table takes 0).
        seed: Bootstrap seed.

    Returns:
        The table's :class:`CellStats`; an empty cell is NaN with ``n`` 0.

    Raises:
        ValueError: If intervals are asked (``n_boot > 0``) for a table whose accuracies are
            not 0/1 per case (the chance table's probabilities).
    """
    values, ok = masked_values(table)
    n = _group_sums(table, ok)
    integer = np.array_equal(values, np.floor(values))
    if integer:  # a run: exact integer sums, any order
        totals = _group_sums(table, values)
    else:  # chance probabilities: one product (the summation order the values were made with)
        totals = group_matrix(table).astype(np.float64).T @ values
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(n > 0, totals / np.where(n > 0, n, 1), np.nan)
    low, high = np.full(value.shape, np.nan), np.full(value.shape, np.nan)
    if n_boot > 0 and table.n_cases:
        outcomes = values[:, _BINARY]
        if not integer or not ((outcomes == 0) | (outcomes == 1)).all():
            raise ValueError(f"{table.name}: intervals need one 0/1 outcome per case and "
                             f"accuracy; this table has other values (the chance table takes "
                             f"n_boot=0)")
        low[:, _BINARY], high[:, _BINARY] = proportion_interval(totals[:, _BINARY],
                                                                 n[:, _BINARY])
        cols = np.flatnonzero(~_BINARY)
        lowest, highest = value_range(table)
        low[:, cols], high[:, cols] = bootstrap_interval(
            table, values[:, cols], ok[:, cols], lowest[:, cols], highest[:, cols],
            n_boot=n_boot, seed=seed)
        # a depth cell whose every case has maximum depth 1 (lesion-free) is a 0/1 proportion,
        # the stage-1 outcome: it gets that proportion's interval (docs/metrics.md, "Small cells")
        members = group_matrix(table)
        for c in cols:
            top = np.where(members & ok[:, [c]], highest[:, [c]], -np.inf).max(axis=0)
            binary = (top == 1.0) & (n[:, c] > 0)
            low[binary, c], high[binary, c] = proportion_interval(totals[binary, c],
                                                                  n[binary, c])
    else:
        n_boot = 0
    return CellStats(name=table.name, value=value, n=n.astype(np.int64), ci_low=low,
                     ci_high=high, n_boot=n_boot)


def cluster_interval(case_means: np.ndarray, lowest: float, highest: float, *, n_boot: int,
                     seed: int, label: str) -> tuple[float, float]:
    """95% cluster-bootstrap interval of a mean over cases of a ``--samples K`` run.

    Each case is a cluster of its K samples: cases are resampled with replacement and each
    keeps its K samples together, so the interval holds the spread between cases and the
    spread between samples (docs/metrics.md, "Sampling variance"). With K samples per case the
    mean over cases and samples is the mean of the case means, so a resample is one
    multinomial count row (:func:`_draw_counts`, label ``cluster:<label>``) times the case
    means. The bounds are the expanded percentiles of :func:`expanded_levels` with n cases and
    ``df = n - 1``; where no resample moves the mean (every case alike), the bound of
    :func:`bootstrap_interval` for that case is used instead, so the interval is never
    zero-width.

    Args:
        case_means: (n,) float64, each case's mean over its K samples, cases in key_id order
            (the draws depend on the position only).
        lowest: Lowest value a case mean can take (0 for an accuracy).
        highest: Highest value (1 for an accuracy).
        n_boot: Resamples B (0: no interval).
        seed: Bootstrap seed.
        label: Names the cell (the draws depend on it, the seed and n only).

    Returns:
        ``(low, high)``; NaN, NaN for fewer than :data:`MIN_BOOTSTRAP_CASES` cases or
        ``n_boot`` 0.
    """
    values = np.asarray(case_means, dtype=np.float64)
    n = len(values)
    if not has_interval(n) or n_boot <= 0:
        return math.nan, math.nan
    counts = _draw_counts(int(seed), f"cluster:{label}", n, int(n_boot))
    means = counts.astype(np.float64) @ values / n
    level = float(expanded_levels(np.array([n]), np.array([n - 1]))[0])
    low, high = (float(x) for x in np.quantile(means, [level, 1 - level]))
    if not high > low:
        u = float(wilson_interval(np.zeros(1), np.array([float(n)]))[1][0])
        mean = float(values.mean())
        low, high = mean - u * (mean - lowest), mean + u * (highest - mean)
    return low, high
