"""Stage 04: cell means of a case table over lesion x path groups, with bootstrap intervals.

Every table of the analysis is a cell mean of a :class:`~chexpercept.analysis.case_table.
CaseTable` column over a group of cases (lesion x path, either may be ``all``).

Confidence intervals (docs/metrics.md, "Bootstrap"): 95% percentile bootstrap over cases. Cases
are resampled with replacement *within each lesion x path stratum* (the benchmark's fixed
design of 100 cases per lesion and path, docs/paper.md, "Benchmark size"), all stages of a case
together. Every cell is a union of strata and its applicability depends only on lesion and
path, so the number of cases behind a cell is the same in every resample and a resampled cell
mean is ``(W @ Z) / n`` with ``W`` the (B, n_cases) multinomial weight matrix and ``Z`` the
(n_cases, n_groups * n_metrics) matrix of masked values. It is computed without a Python loop
per resample or per cell, and without forming ``Z``: one (B, size) @ (size, n_metrics)
product per stratum, then sums of strata for the pooled groups (exact integers, so the result
equals the single product bit for bit). Weights are drawn per stratum from
``rng_for(seed, "04_analysis", "bootstrap", "<lesion>/<path>")`` over the stratum's key_ids in
sorted order, so runs on the same cases share resamples (paired comparisons), the draws are
made once per process for all runs, and the result does not depend on file order.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chexpercept.analysis.case_table import METRIC_INDEX, METRICS, CaseTable
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
#: Fewest cases behind a cell for a bootstrap interval (docs/metrics.md, "Bootstrap"): a mean
#: of n binary values resamples to at most n + 1 values, so for small n the percentile
#: interval is far too narrow (zero-width at n = 1); such a cell gets no interval and the
#: tables show its count instead.
MIN_BOOTSTRAP_CASES = 10
#: Bootstrap resamples per matrix product (:func:`_resampled_sums`).
BOOT_BLOCK = 64


@dataclass(frozen=True)
class CellStats:
    """Cell means of a table over :data:`GROUPS` x :data:`METRICS`.

    Attributes:
        name: The table's name.
        value: (n_groups, n_metrics) float64 mean; NaN for an empty cell.
        n: (n_groups, n_metrics) int64 number of cases behind the cell.
        ci_low: (n_groups, n_metrics) float64 lower 2.5% bootstrap percentile (NaN: none,
            also for cells of fewer than :data:`MIN_BOOTSTRAP_CASES` cases).
        ci_high: (n_groups, n_metrics) float64 upper 97.5% percentile (NaN: none).
        n_boot: Number of bootstrap resamples (0: no CIs).
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


def _strata(table: CaseTable) -> list[tuple[int, int, np.ndarray]]:
    """``(lesion, path, rows)`` of every non-empty stratum in (lesion, path) order.

    ``rows`` is (size,) int64, the stratum's row indices ordered by key_id.
    """
    strata: dict[tuple[int, int], list[int]] = {}
    for i, (le, p) in enumerate(zip(table.lesion.tolist(), table.path.tolist(), strict=True)):
        strata.setdefault((le, p), []).append(i)
    return [(le, p, np.array(sorted(idx, key=lambda i: table.key_ids[i]), dtype=np.int64))
            for (le, p), idx in sorted(strata.items())]


@functools.lru_cache(maxsize=len(LESIONS) * len(QA_PATHS))
def _stratum_counts(seed: int, label: str, size: int, n_boot: int) -> np.ndarray:
    """(B, size) read-only multinomial counts of one stratum (cached across runs).

    The draws depend only on the seed, the stratum label and its size, so every run on the
    same cases reuses them (column j = the stratum's j-th key_id in sorted order). Stored in
    the smallest unsigned dtype that holds ``size`` (a count never exceeds it): uint8 for
    the paper's 100-case strata, a quarter of float32's memory.
    """
    rng = rng_for(seed, "04_analysis", "bootstrap", label)
    # (B, size) draws with replacement -> per-row counts via one flat bincount
    draws = rng.integers(0, size, (n_boot, size)) + size * np.arange(n_boot)[:, None]
    counts = np.bincount(draws.ravel(), minlength=n_boot * size).reshape(n_boot, size)
    counts = counts.astype(np.min_scalar_type(size))
    counts.flags.writeable = False
    return counts


def _strata_blocks(table: CaseTable, n_boot: int, seed: int
                   ) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """``(lesion, path, rows, counts)`` per stratum: rows (size,) int64, counts (B, size) uint."""
    return [(le, p, rows, _stratum_counts(int(seed), f"{LESIONS[le]}/{QA_PATHS[p]}",
                                          len(rows), int(n_boot)))
            for le, p, rows in _strata(table)]


def strata_weights(table: CaseTable, n_boot: int, seed: int) -> np.ndarray:
    """Bootstrap weights (multinomial counts), resampling within each lesion x path stratum.

    Args:
        table: The cases (only ``key_ids``, ``lesion``, ``path`` are used).
        n_boot: Number of resamples B.
        seed: Seed (``--seed``).

    Returns:
        (B, n_cases) float32; row b holds how often each case is drawn in resample b; each
        stratum's weights sum to its size.
    """
    weights = np.zeros((n_boot, table.n_cases), dtype=np.float32)
    for _, _, rows, counts in _strata_blocks(table, n_boot, seed):
        weights[:, rows] = counts
    return weights


def _resampled_sums(values: np.ndarray,
                    blocks: Sequence[tuple[int, int, np.ndarray, np.ndarray]]) -> np.ndarray:
    """Resampled cell sums: (B, n_groups, n_metrics) float32 from per-stratum weights.

    Per stratum, (B, size) @ (size, n_metrics) products give the resampled sums; the groups
    (``all`` pools) are sums of strata. Run values are 0/1 or small integers, so every
    float32 sum is an exact integer (< 2**24) whatever the order. The products are made
    :data:`BOOT_BLOCK` resamples at a time: that keeps each below OpenBLAS's multithreading
    threshold (M * N * K <= 65536 * 4), and worker threads cost far more than they gain on
    products this small (measured 10-50x slower on a busy 2-core machine).

    Args:
        values: (n_cases, n_metrics) float64 masked values (:func:`masked_values`).
        blocks: ``(lesion, path, rows, counts)`` per stratum, counts (B, size) of
            non-negative integers (any numeric dtype).
    """
    n_boot = blocks[0][3].shape[0] if blocks else 0
    strata = np.zeros((len(LESIONS), len(QA_PATHS), n_boot, len(METRICS)), dtype=np.float32)
    v32 = values.astype(np.float32)
    for le, p, rows, counts in blocks:
        v = v32[rows]
        for start in range(0, n_boot, BOOT_BLOCK):
            stop = min(start + BOOT_BLOCK, n_boot)
            chunk = counts[start:stop].astype(np.float32, copy=False)
            np.matmul(chunk, v, out=strata[le, p, start:stop])
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


def bootstrap_means(table: CaseTable, weights: np.ndarray) -> np.ndarray:
    """Resampled cell means: (B, n_groups, n_metrics) float64, NaN for empty cells.

    Equal to one (B, n) @ (n, n_groups * n_metrics) product of the weights with the
    group-masked values, computed stratum by stratum (:func:`_resampled_sums`); valid because
    every cell's case count is fixed under stratified resampling (module docstring).

    Args:
        table: The cases.
        weights: (B, n_cases) float32 case weights (:func:`strata_weights`).

    Returns:
        (B, len(GROUPS), len(METRICS)) float64 resampled means; NaN where the cell is empty.
    """
    values, ok = masked_values(table)
    n = _group_sums(table, ok)
    blocks = [(le, p, rows, weights[:, rows]) for le, p, rows in _strata(table)]
    sums = _resampled_sums(values, blocks).astype(np.float64)
    if not blocks:
        sums = np.zeros((len(weights), len(GROUPS), len(METRICS)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, sums / np.where(n > 0, n, 1), np.nan)


def _percentiles(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:data:`CI_LEVEL` bounds of every column of (B, k) finite ``samples``: two (k,) arrays.

    Computed on the transposed copy (each column's partition over contiguous memory); the
    written bounds are defined by this computation (``np.percentile`` along axis 0 can
    differ in the last bit).
    """
    alpha = 100 * (1 - CI_LEVEL) / 2
    low, high = np.percentile(np.ascontiguousarray(samples.T), [alpha, 100 - alpha], axis=1)
    return low, high


def percentile_ci(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower/upper :data:`CI_LEVEL` percentile bounds over axis 0.

    Args:
        samples: (B, ...) float64 resampled statistics, NaN where undefined.

    Returns:
        ``(low, high)``, each of shape ``samples.shape[1:]``: the 2.5% and 97.5%
        percentiles over the finite resamples; NaN where every resample is NaN.
    """
    alpha = 100 * (1 - CI_LEVEL) / 2
    if samples.shape[0] == 0 or not np.isfinite(samples).any():
        nan = np.full(samples.shape[1:], np.nan)
        return nan, nan.copy()
    flat = samples.reshape(samples.shape[0], -1)
    low = np.full(flat.shape[1], np.nan)
    high = low.copy()
    full = np.isfinite(flat).all(axis=0)  # the usual case: a cell is NaN in all or no resample
    if full.any():
        low[full], high[full] = _percentiles(flat[:, full])
    partial = ~full & np.isfinite(flat).any(axis=0)
    if partial.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            low[partial], high[partial] = np.nanpercentile(flat[:, partial],
                                                           [alpha, 100 - alpha], axis=0)
    return low.reshape(samples.shape[1:]), high.reshape(samples.shape[1:])


def cell_stats(table: CaseTable, *, n_boot: int = 0, seed: int = 0,
               weights: np.ndarray | None = None) -> CellStats:
    """Cell means (and bootstrap CIs) of a table over every lesion x path group.

    Intervals are computed only for cells of at least :data:`MIN_BOOTSTRAP_CASES` cases, from
    the exact resampled sums (:func:`_resampled_sums`) divided by the cell's fixed case count.

    Args:
        table: A run's or the chance table.
        n_boot: Bootstrap resamples (0: no CIs; the chance table takes 0).
        seed: Bootstrap seed.
        weights: Precomputed :func:`strata_weights` (overrides ``n_boot``/``seed``).

    Returns:
        The table's :class:`CellStats`; an empty cell is NaN with ``n`` 0.
    """
    values, ok = masked_values(table)
    n = _group_sums(table, ok)
    if np.array_equal(values, np.floor(values)):  # a run: exact integer sums, any order
        totals = _group_sums(table, values)
    else:  # chance probabilities: one product (the summation order the values were made with)
        totals = group_matrix(table).astype(np.float64).T @ values
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(n > 0, totals / np.where(n > 0, n, 1), np.nan)
    low, high = np.full(value.shape, np.nan), np.full(value.shape, np.nan)
    blocks = None
    if weights is not None:
        if len(weights):
            blocks = [(le, p, rows, weights[:, rows]) for le, p, rows in _strata(table)]
            n_boot = len(weights)
    elif n_boot > 0 and table.n_cases:
        blocks = _strata_blocks(table, n_boot, seed)
    if blocks:
        keep = (n >= MIN_BOOTSTRAP_CASES).ravel()
        sums = _resampled_sums(values, blocks).reshape(n_boot, -1)[:, keep]
        means = sums.astype(np.float64) / n.ravel()[keep]
        low.ravel()[keep], high.ravel()[keep] = _percentiles(means)
    elif blocks is None:
        n_boot = 0
    return CellStats(name=table.name, value=value, n=n.astype(np.int64), ci_low=low,
                     ci_high=high, n_boot=n_boot)
