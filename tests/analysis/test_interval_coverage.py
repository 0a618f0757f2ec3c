"""Stage 04 intervals have the coverage they claim and are never zero-width.

Simulation (docs/metrics.md, "Bootstrap"): random answerers over case tables laid out like the
benchmark's lesion x path strata, from balanced strata to the thin, unbalanced ones ``--limit``
and ``--per_path_limit`` produce (strata of 1-3 cases), n from 10 to 200 cases per cell. Every
cell of at least ``MIN_BOOTSTRAP_CASES`` cases is scored: its 95% interval covers the true value
or not. Fixed seeds: the figures are the same on every run.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from chexpercept.analysis import cell_stats, paired_comparison
from chexpercept.analysis.bootstrap import (
    GROUPS,
    MIN_BOOTSTRAP_CASES,
    group_matrix,
    masked_values,
    wilson_interval,
)
from chexpercept.analysis.case_table import MAX_DEPTH, METRIC_INDEX, METRICS, CaseTable, layout
from chexpercept.lesions import LESIONS, QA_PATHS
from chexpercept.schema import STATUSES

#: Per-case probabilities of a right answer: spread over (0, 1), and the chance levels of the
#: benchmark's question shapes (2, 3 and 4 options).
P_CORRECT = (0.1, 0.25, 0.5, 0.75, 0.9, 1 / 2, 1 / 3, 1 / 4)
#: Bands of the cell size n in the failure messages.
N_BANDS = ((10, 20), (20, 50), (50, 100), (100, 201))
N_STRATA = len(LESIONS) * len(QA_PATHS)
#: The bootstrap's production resample count (Stage 04's --bootstrap default).
N_BOOT = 1000
DEPTH = METRIC_INDEX["depth"]


def _strata_sizes(rng: np.random.Generator, n: int, kind: int) -> np.ndarray:
    """(21,) int cases per lesion x path stratum, summing to n, in one of four layouts."""
    if kind == 0:  # every case in a random stratum: 0-3 per stratum for small n
        return np.bincount(rng.integers(0, N_STRATA, n), minlength=N_STRATA)
    if kind == 1:  # very unbalanced: a few large strata and many of 1-2 cases
        return rng.multinomial(n, rng.dirichlet(np.full(N_STRATA, 0.3)))
    if kind == 2:  # --limit: a few strata filled in file order, then one case of the next
        chosen = rng.permutation(N_STRATA)[: rng.integers(1, 4)]
        sizes = np.zeros(N_STRATA, dtype=np.int64)
        sizes[chosen] = rng.multinomial(n - 1, np.full(len(chosen), 1 / len(chosen)))
        sizes[rng.integers(0, N_STRATA)] += 1
        return sizes
    chosen = rng.permutation(N_STRATA)[: rng.integers(1, N_STRATA + 1)]  # balanced subset
    sizes = np.zeros(N_STRATA, dtype=np.int64)
    sizes[chosen] = n // len(chosen)
    sizes[chosen[: n % len(chosen)]] += 1
    return sizes


def _layout(rng: np.random.Generator, n: int, kind: int, name: str = "random") -> CaseTable:
    """A table of n cases in layout ``kind`` (values still 0), rows not in stratum order."""
    sizes = _strata_sizes(rng, n, kind)
    stratum = rng.permutation(np.repeat(np.arange(N_STRATA), sizes))
    lesion = (stratum // len(QA_PATHS)).astype(np.int8)
    path = (stratum % len(QA_PATHS)).astype(np.int8)
    _, applicable = layout(lesion, path)
    return CaseTable(
        name=name, key_ids=tuple(f"{LESIONS[le]}_s{i}_x_0" for i, le in enumerate(lesion)),
        lesion=lesion, path=path, values=np.zeros((n, len(METRICS))), applicable=applicable,
        missing=np.zeros((n, 4), bool), status=np.zeros((n, 4, len(STATUSES)), np.int32),
        has_status=False)


def _answer(rng: np.random.Generator, table: CaseTable, p_binary: np.ndarray,
            p_stage: float, name: str) -> tuple[CaseTable, np.ndarray]:
    """A random answerer's run on ``table``'s cases, and each case's expected values.

    Each accuracy column m is right with probability ``p_binary[m]`` per case, independently;
    depth is the correct-prefix length of stages each right with probability ``p_stage``,
    capped at the path's maximum depth (expected value: the sum of p_stage**K up to it).

    Returns:
        The run's table and (n_cases, n_metrics) float64 expected values.
    """
    n = table.n_cases
    values = (rng.random((n, len(METRICS))) < p_binary).astype(np.float64)
    max_depth = np.array([MAX_DEPTH[p] for p in QA_PATHS])[table.path]
    prefix = np.cumprod(rng.random((n, 4)) < p_stage, axis=1).sum(axis=1)
    values[:, DEPTH] = np.minimum(prefix, max_depth)
    truth = np.broadcast_to(p_binary, values.shape).copy()
    truth[:, DEPTH] = np.cumsum(p_stage ** np.arange(1, 5))[max_depth - 1]
    return dataclasses.replace(table, name=name, values=values), truth


def _cell_truth(table: CaseTable, truth: np.ndarray) -> np.ndarray:
    """(len(GROUPS), n_metrics) true cell values: the mean expected value of its cases."""
    _, ok = masked_values(table)
    gm = group_matrix(table).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (gm.T @ np.where(ok, truth, 0.0)) / (gm.T @ ok)


def _report(covered: dict[tuple[int, int], list[bool]]) -> str:
    lines = []
    for lo, hi in N_BANDS:
        got = covered.get((lo, hi), [])
        lines.append(f"n {lo}-{hi - 1}: {np.mean(got):.3f} of {len(got)} cells")
    return "; ".join(lines)


def _band(n: int) -> tuple[int, int]:
    return next(b for b in N_BANDS if b[0] <= n < b[1])


def _simulate(n_tables: int, seed: int, n_boot: int):
    """Coverage of every cell of ``n_tables`` random runs, by metric kind and n band."""
    rng = np.random.default_rng(seed)
    covered: dict[str, dict[tuple[int, int], list[bool]]] = {"binary": {}, "depth": {}}
    zero_width: list[str] = []
    for t in range(n_tables):
        n = int(rng.integers(MIN_BOOTSTRAP_CASES, 201))
        table, truth = _answer(rng, _layout(rng, n, t % 4), rng.choice(P_CORRECT, len(METRICS)),
                               P_CORRECT[t % len(P_CORRECT)], "random")
        cells = cell_stats(table, n_boot=n_boot, seed=t)
        true = _cell_truth(table, truth)
        values, ok = masked_values(table)
        gm = group_matrix(table)
        for g, m in zip(*np.nonzero(cells.n >= MIN_BOOTSTRAP_CASES), strict=True):
            low, high = cells.ci_low[g, m], cells.ci_high[g, m]
            kind = "depth" if m == DEPTH else "binary"
            hit = bool(low - 1e-12 <= true[g, m] <= high + 1e-12)
            covered[kind].setdefault(_band(int(cells.n[g, m])), []).append(hit)
            if not high > low:  # not even where every case has the same outcome
                cell = values[gm[:, g] & ok[:, m], m]
                zero_width.append(f"run {t}, {GROUPS[g]}, {METRICS[m]}: [{low}, {high}] "
                                  f"over {cell.tolist()}")
    return covered, zero_width


def _overall(covered: dict[tuple[int, int], list[bool]]) -> float:
    return float(np.mean([h for hits in covered.values() for h in hits]))


def test_random_answerer_intervals_cover_the_true_value_at_the_production_count():
    # 600 runs x every cell of >= 10 cases: ~70,000 accuracy and ~6,000 depth cells, with
    # Stage 04's default 1,000 resamples
    covered, zero_width = _simulate(600, seed=20240, n_boot=N_BOOT)
    binary, depth = _overall(covered["binary"]), _overall(covered["depth"])
    assert binary >= 0.93, f"accuracy coverage {binary:.3f}: {_report(covered['binary'])}"
    assert depth >= 0.93, f"depth coverage {depth:.3f}: {_report(covered['depth'])}"
    # no size of cell falls short either (the cells of one run are not independent, hence
    # the margin for noise)
    for kind, bands in covered.items():
        assert min(np.mean(h) for h in bands.values()) >= 0.92, f"{kind}: {_report(bands)}"
    assert zero_width == [], zero_width[:5]


def test_wilson_interval_exact_coverage_of_a_binomial_cell():
    # The exact coverage of the accuracy intervals (no simulation noise): every n from 10 to
    # 200 at every probability of P_CORRECT, weighted by the binomial probability of each k.
    from scipy import stats

    coverage = []
    for n in range(MIN_BOOTSTRAP_CASES, 201):
        k = np.arange(n + 1)
        low, high = wilson_interval(k, np.full(n + 1, n))
        assert (high - low > 0).all()  # never zero-width, also at k = 0 and k = n
        for p in P_CORRECT:
            coverage.append(float((stats.binom.pmf(k, n, p) * ((low <= p) & (p <= high)))
                                  .sum()))
    assert np.mean(coverage) >= 0.95 and min(coverage) >= 0.91, (np.mean(coverage),
                                                                   min(coverage))


def test_paired_difference_intervals_cover_the_true_difference():
    # two random answerers on the same cases: B - A per cell (accuracies and depth)
    rng = np.random.default_rng(7)
    hits: dict[tuple[int, int], list[bool]] = {}
    zero_width = []
    for t in range(60):
        cases = _layout(rng, int(rng.integers(MIN_BOOTSTRAP_CASES, 201)), t % 4)
        p_a, p_b = P_CORRECT[t % 8], P_CORRECT[(3 * t + 1) % 8]
        a, truth_a = _answer(rng, cases, np.full(len(METRICS), p_a), p_a, "a")
        b, truth_b = _answer(rng, cases, np.full(len(METRICS), p_b), p_b, "b")
        true = _cell_truth(a, truth_b - truth_a)
        for r in paired_comparison(a, b, n_boot=N_BOOT, seed=t):
            if r.n_cases < MIN_BOOTSTRAP_CASES:
                continue
            g = GROUPS.index((r.lesion, r.path))
            hits.setdefault(_band(r.n_cases), []).append(
                bool(r.ci_low - 1e-12 <= true[g, METRIC_INDEX[r.metric]] <= r.ci_high + 1e-12))
            if not r.ci_high > r.ci_low:
                zero_width.append(r)
    assert _overall(hits) >= 0.93, _report(hits)
    assert zero_width == []
