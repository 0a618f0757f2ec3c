"""Coverage of the paired accuracy-difference intervals of ``02_compare_runs.py`` (issue 30).

Two runs A and B answer the same n cases; each case is a pair of right/wrong outcomes with
``p10 = P(A right, B wrong)`` and ``p01 = P(A wrong, B right)``; the true difference of the
accuracies is ``B - A = p01 - p10``. Every interval here depends on the cases only through the
discordant counts ``(b, c) = (n01, n10)`` (B only right, A only right) and n, so its coverage
is computed exactly: every outcome of the trinomial ``(n01, n10, concordant)`` weighted by its
probability (outcomes below 1e-13 each are left out; the mass left out is printed and is below
1e-8 on the default grid), instead of a simulation with its noise.

Methods (docs/metrics.md, "Paired comparison"):

- ``bootstrap`` (before): the paired bootstrap ``02_compare_runs.py`` gave an accuracy cell
  (the cell's n cases resampled as one stratum, 1,000 resamples, expanded percentile bounds
  with ``df = n - 1``, and where no resample moves the mean the Wilson-based bound of
  ``chexpercept.analysis.bootstrap.bootstrap_interval``); its resamples come from a seeded
  generator per outcome, so its figures carry that Monte Carlo noise (about 0.1 points);
- ``tango`` (after): Tango's score interval (``chexpercept.analysis.inference``), exact.

Prints, per method, the lowest cell (its coverage, design and n), the mean over cells and the
share of cells below 94 %; ``--cells`` prints every cell. ``--tiny`` runs a short grid in a
few seconds (tests/analysis/test_paired_coverage.py runs it). No assertion on timings.

Usage::

    python benchmarks/coverage_paired.py [--tiny] [--cells] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from chexpercept.analysis.bootstrap import expanded_levels, wilson_interval
from chexpercept.analysis.inference import tango_interval

#: (p10, p01): rare discordance as two real models show it, then balanced designs.
DESIGNS: tuple[tuple[float, float], ...] = (
    (0.05, 0.15), (0.02, 0.07), (0.002, 0.01), (0.1, 0.1), (0.25, 0.25))
#: Cell sizes of the full grid: 10-30 one by one, then the benchmark's cell sizes.
NS: tuple[int, ...] = (*range(10, 31), 50, 100, 200, 400, 700)
#: The short grid: the issue's three designs at their n, and every design at a few n.
TINY: tuple[tuple[float, float, int], ...] = (
    (0.05, 0.15, 10), (0.02, 0.07, 10), (0.002, 0.01, 100),
    *((p10, p01, n) for p10, p01 in DESIGNS for n in (12, 25, 50)))
#: Resamples of the bootstrap method (Stage 04's --bootstrap default).
N_BOOT = 1000
#: Outcomes of smaller probability are left out of the enumeration.
MIN_MASS = 1e-13
NOMINAL = 0.95


@dataclass(frozen=True)
class Cell:
    """Exact coverage of one method at one design and n."""

    method: str
    p10: float
    p01: float
    n: int
    coverage: float
    mass_left_out: float


def outcomes(n: int, p10: float, p01: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(b, c, prob)``: (k,) discordant counts (B only right, A only right) and probabilities.

    Every outcome of probability >= :data:`MIN_MASS`.
    """
    b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = b + c <= n
    b, c = b[keep], c[keep]
    prob = stats.multinomial.pmf(np.stack([b, c, n - b - c], axis=1), n,
                                 [p01, p10, 1 - p01 - p10])
    big = prob >= MIN_MASS
    return b[big], c[big], prob[big]


def tango_method(b: np.ndarray, c: np.ndarray, n: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Tango's interval of every outcome (exact; ``rng`` unused)."""
    return tango_interval(b, c, np.full(b.shape, n))


def bootstrap_method(b: np.ndarray, c: np.ndarray, n: int, rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The paired bootstrap of one pooled cell per outcome (module docstring)."""
    level = float(expanded_levels(np.array([n]), np.array([n - 1]))[0])
    u = float(wilson_interval(np.zeros(1), np.array([float(n)]))[1][0])
    low, high = np.empty(len(b)), np.empty(len(b))
    for i, (bi, ci) in enumerate(zip(b.tolist(), c.tolist(), strict=True)):
        draws = rng.multinomial(n, [bi / n, ci / n, 1 - (bi + ci) / n], size=N_BOOT)
        means = (draws[:, 0] - draws[:, 1]) / n
        lo, hi = np.quantile(means, [level, 1 - level])
        if not hi > lo:  # every case alike: the Wilson-based bound of bootstrap_interval
            m = (bi - ci) / n
            lo, hi = m - u * (m + 1), m + u * (1 - m)
        low[i], high[i] = lo, hi
    return low, high


METHODS: dict[str, Callable[..., tuple[np.ndarray, np.ndarray]]] = {
    "bootstrap": bootstrap_method, "tango": tango_method}


def coverage(method: str, p10: float, p01: float, n: int, seed: int) -> Cell:
    """Exact coverage of ``method`` at one cell (bootstrap: up to its resampling noise)."""
    b, c, prob = outcomes(n, p10, p01)
    rng = np.random.default_rng([seed, n, round(p10 * 1e6), round(p01 * 1e6)])
    low, high = METHODS[method](b, c, n, rng)
    truth = p01 - p10
    covered = (low <= truth + 1e-12) & (truth - 1e-12 <= high)
    return Cell(method, p10, p01, n, float(prob[covered].sum()), float(1 - prob.sum()))


def grid(cells: Sequence[tuple[float, float, int]], methods: Sequence[str], seed: int
         ) -> list[Cell]:
    """Every method at every ``(p10, p01, n)``."""
    return [coverage(m, p10, p01, n, seed) for m in methods for p10, p01, n in cells]


def summary(results: Sequence[Cell]) -> list[str]:
    """One line per method: lowest cell, mean, cells below 94 %."""
    lines = []
    for method in dict.fromkeys(r.method for r in results):
        mine = [r for r in results if r.method == method]
        low = min(mine, key=lambda r: r.coverage)
        below = sum(r.coverage < 0.94 for r in mine)
        lines.append(f"{method:<10} lowest {100 * low.coverage:5.1f} % at (p10, p01) = "
                     f"({low.p10:g}, {low.p01:g}), n = {low.n}; mean "
                     f"{100 * np.mean([r.coverage for r in mine]):5.1f} %; "
                     f"{below} of {len(mine)} cells below 94 %")
    return lines


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true",
                        help=f"the short grid ({len(TINY)} cells; default: the full grid of "
                             f"{len(DESIGNS)} designs x {len(NS)} n)")
    parser.add_argument("--cells", action="store_true", help="print every cell (default: no)")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="comma-separated, from %(default)s (default: all)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the bootstrap's resamples (default: %(default)s)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Compute the grid and print the summary (and the cells with ``--cells``)."""
    args = build_parser().parse_args(argv)
    cells = TINY if args.tiny else [(p10, p01, n) for p10, p01 in DESIGNS for n in NS]
    start = time.perf_counter()
    results = grid(cells, args.methods.split(","), args.seed)
    if args.cells:
        for r in results:
            print(f"{r.method:<10} p10={r.p10:<6g} p01={r.p01:<6g} n={r.n:<4d} "
                  f"{100 * r.coverage:6.2f} %")
    print("\n".join(summary(results)))
    print(f"mass left out <= {max(r.mass_left_out for r in results):.1e}; "
          f"{time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
