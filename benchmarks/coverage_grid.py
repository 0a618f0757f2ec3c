"""Exact coverage of Stage 04's count-based intervals over the grid the tables show (issue 30
item 3; docs/metrics.md, "Coverage by method").

Every interval here depends on the cases only through counts, so its coverage is computed
exactly, not simulated: every binomial outcome weighted by its probability.

Methods:

- ``wilson`` (before): the Wilson score interval of k out of n (``bootstrap.wilson_interval``),
  which every accuracy, sensitivity, specificity, PPV, NPV and error-class rate had;
- ``wilson_cc`` (after): the continuity-corrected Wilson interval (Newcombe 1998, method 4;
  ``bootstrap.wilson_cc_interval``), what ``bootstrap.proportion_interval`` now reports;
- ``mover on wilson`` (before): balanced accuracy's MOVER interval on two Wilson intervals,
  both binomial counts enumerated;
- ``mover on wilson_cc`` (after): ``detection.balanced_accuracy_interval``, the same MOVER on
  the continuity-corrected intervals.

Grid: n = 10-30 one by one, 50, 100, 200; p in 0.02, 0.05, 0.1, 0.25, 1/3, 0.5, 2/3, 0.75,
0.9, 0.95, 0.98. MOVER: class sizes (n, n) for every n of the grid and the unequal pairs of
:data:`UNEQUAL`, sensitivity and specificity each over the p grid.

Prints per method the lowest cell (coverage, n or class sizes, p), the mean and the cells
below 94 %. ``--tiny`` runs a short grid in under a second (tests/scripts/test_benchmarks_run.py).
Nothing is random, so there is no seed.

Usage::

    python benchmarks/coverage_grid.py [--tiny]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np
from scipy import stats

from chexpercept.analysis.bootstrap import wilson_cc_interval, wilson_interval
from chexpercept.analysis.detection import balanced_accuracy_interval

NS: tuple[int, ...] = (*range(10, 31), 50, 100, 200)
PS: tuple[float, ...] = (0.02, 0.05, 0.1, 0.25, 1 / 3, 0.5, 2 / 3, 0.75, 0.9, 0.95, 0.98)
#: Unequal (positives, negatives) class sizes of the MOVER grid.
UNEQUAL: tuple[tuple[int, int], ...] = ((10, 30), (30, 10), (10, 100), (100, 10), (20, 50),
                                        (50, 20), (12, 40), (40, 12), (15, 200), (200, 15))
TINY_NS: tuple[int, ...] = (10, 12, 20)
TINY_PS: tuple[float, ...] = (0.1, 0.5, 0.9)
Z = NormalDist().inv_cdf(0.975)


def mover_on(interval: Callable) -> Callable:
    """MOVER interval of (se + sp) / 2 on the proportion interval ``interval``."""
    def mover(tp, fn, tn, fp):
        tp, fn, tn, fp = (np.asarray(x, dtype=np.float64) for x in (tp, fn, tn, fp))
        (l1, l2), (u1, u2) = interval(np.stack([tp, tn]), np.stack([tp + fn, tn + fp]))
        se, sp = tp / (tp + fn), tn / (tn + fp)
        b = (se + sp) / 2
        return (np.maximum(b - np.sqrt((se - l1) ** 2 + (sp - l2) ** 2) / 2, 0.0),
                np.minimum(b + np.sqrt((u1 - se) ** 2 + (u2 - sp) ** 2) / 2, 1.0))
    return mover


def proportion_coverage(interval: Callable, n: int, p: float) -> float:
    """Exact coverage of ``interval`` at n trials and true proportion p."""
    k = np.arange(n + 1, dtype=np.float64)
    low, high = interval(k, np.full_like(k, n))
    return float(stats.binom.pmf(k, n, p)[(low <= p) & (p <= high)].sum())


def mover_coverage(mover: Callable, n_pos: int, n_neg: int, se: float, sp: float) -> float:
    """Exact coverage of a balanced-accuracy interval: both binomial counts enumerated."""
    tp, tn = np.meshgrid(np.arange(n_pos + 1.0), np.arange(n_neg + 1.0), indexing="ij")
    low, high = mover(tp, n_pos - tp, tn, n_neg - tn)
    weight = np.outer(stats.binom.pmf(np.arange(n_pos + 1), n_pos, se),
                      stats.binom.pmf(np.arange(n_neg + 1), n_neg, sp))
    truth = (se + sp) / 2
    return float(weight[(low <= truth + 1e-12) & (truth - 1e-12 <= high)].sum())


def summary(name: str, cells: Sequence[tuple[float, str]]) -> str:
    cov = np.array([c for c, _ in cells])
    low = int(np.argmin(cov))
    return (f"| {name} | {100 * cov[low]:.1f} % | {cells[low][1]} | {100 * cov.mean():.1f} % | "
            f"{int((cov < 0.94).sum())} of {len(cov)} |")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="a short grid (test suite)")
    args = ap.parse_args(argv)
    ns, ps = (TINY_NS, TINY_PS) if args.tiny else (NS, PS)
    pairs = [(n, n) for n in ns] + ([(10, 30), (30, 10)] if args.tiny else list(UNEQUAL))
    print("| method | lowest cell | at | mean | cells below 94 % |")
    print("|---|---|---|---|---|")
    for name, interval in (("before: wilson", wilson_interval),
                           ("after: wilson_cc", wilson_cc_interval)):
        cells = [(proportion_coverage(interval, n, p), f"n = {n}, p = {p:.3g}")
                 for n in ns for p in ps]
        print(summary(name, cells))
    for name, mover in (("before: mover on wilson", mover_on(wilson_interval)),
                        ("after: mover on wilson_cc", balanced_accuracy_interval)):
        cells = [(mover_coverage(mover, a, b, se, sp),
                  f"{a}/{b}, se = {se:.3g}, sp = {sp:.3g}")
                 for a, b in pairs for se in ps for sp in ps]
        print(summary(name, cells))


if __name__ == "__main__":
    main()
