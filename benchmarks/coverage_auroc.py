"""Coverage of the AUROC intervals of Stage 04's ``auroc.csv`` (issue 30 item 2).

Binormal scores: positives ~ N(d, 1), negatives ~ N(0, 1), true AUC ``Phi(d / sqrt(2))``, at
AUC 0.5, 0.7, 0.9, 0.95 and 0.99 with 20/20, 10/30, 30/10 and 50/50 positives/negatives;
``--draws`` seeded draws per cell (``numpy.random.default_rng([seed, cell])``). Methods
(docs/metrics.md, "Option probabilities and AUROC"):

- ``delong`` (before): DeLong's variance with a normal interval on the logit scale
  (``chexpercept.analysis.confidence.auroc_delong``); an AUC of exactly 0 or 1 gets no
  interval, counted here as not covering (the share is printed as ``dropped``);
- ``delong_fallback`` (considered): DeLong's where it has one, Newcombe's at 0 and 1;
- ``newcombe`` (after): Newcombe's (2006) score-type interval
  (``confidence.newcombe_interval``), which every AUC gets.

Prints, per method, the lowest cell, the mean over cells and the cells below 94 %; ``--cells``
prints every cell. ``--tiny`` runs a short grid in a few seconds
(tests/analysis/test_confidence.py runs it). No assertion on timings.

Usage::

    python benchmarks/coverage_auroc.py [--tiny] [--cells] [--draws 4000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from chexpercept.analysis.confidence import newcombe_interval

AUCS: tuple[float, ...] = (0.5, 0.7, 0.9, 0.95, 0.99)
SIZES: tuple[tuple[int, int], ...] = ((20, 20), (10, 30), (30, 10), (50, 50))
#: The short grid: the boundary-heavy cells (the issue's 0.95 at 20/20) and one balanced one.
TINY: tuple[tuple[float, int, int], ...] = ((0.95, 20, 20), (0.99, 20, 20), (0.99, 10, 30),
                                            (0.7, 20, 20))
Z = NormalDist().inv_cdf(0.975)
METHODS = ("delong", "delong_fallback", "newcombe")


@dataclass(frozen=True)
class Cell:
    """Simulated coverage of one method at one AUC and class sizes."""

    method: str
    auc: float
    m: int
    n: int
    coverage: float
    dropped: float


def draw_aucs(auc: float, m: int, n: int, draws: int, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray]:
    """``(auc_hat, delong_var)``: (draws,) Mann-Whitney AUCs and DeLong variances."""
    d = math.sqrt(2) * NormalDist().inv_cdf(auc)
    pos = rng.normal(d, 1, (draws, m))
    neg = rng.normal(0, 1, (draws, n))
    psi = (pos[:, :, None] > neg[:, None, :]) + 0.5 * (pos[:, :, None] == neg[:, None, :])
    var = psi.mean(axis=2).var(axis=1, ddof=1) / m + psi.mean(axis=1).var(axis=1, ddof=1) / n
    return psi.mean(axis=(1, 2)), var


def delong_bounds(auc: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The logit-scale DeLong interval (NaN at 0, 1 or variance 0), as ``auroc_delong``."""
    ok = (auc > 0) & (auc < 1) & (var > 0)
    a = np.where(ok, auc, 0.5)
    logit = np.log(a / (1 - a))
    half = Z * np.sqrt(np.where(ok, var, 0)) / (a * (1 - a))
    low = np.where(ok, 1 / (1 + np.exp(-(logit - half))), np.nan)
    return low, np.where(ok, 1 / (1 + np.exp(-(logit + half))), np.nan)


def coverage(auc: float, m: int, n: int, draws: int, seed: int) -> list[Cell]:
    """Both methods at one cell, on the same draws."""
    rng = np.random.default_rng([seed, round(auc * 1000), m, n])
    est, var = draw_aucs(auc, m, n, draws, rng)
    bounds = {"delong": delong_bounds(est, var), "newcombe": newcombe_interval(est, m, n)}
    dl, nc = bounds["delong"], bounds["newcombe"]
    gap = np.isnan(dl[0])
    bounds["delong_fallback"] = (np.where(gap, nc[0], dl[0]), np.where(gap, nc[1], dl[1]))
    out = []
    for method in METHODS:
        low, high = bounds[method]
        hit = (low <= auc) & (auc <= high)  # NaN bounds: not covering
        out.append(Cell(method, auc, m, n, float(hit.mean()), float(np.isnan(low).mean())))
    return out


def grid(cells: Sequence[tuple[float, int, int]], draws: int, seed: int) -> list[Cell]:
    """Every method at every ``(auc, m, n)``, methods grouped."""
    results = [c for auc, m, n in cells for c in coverage(auc, m, n, draws, seed)]
    return sorted(results, key=lambda c: METHODS.index(c.method))


def summary(results: Sequence[Cell]) -> list[str]:
    """One line per method: lowest cell, mean, cells below 94 %."""
    lines = []
    for method in METHODS:
        mine = [r for r in results if r.method == method]
        low = min(mine, key=lambda r: r.coverage)
        lines.append(f"{method:<15} lowest {100 * low.coverage:5.1f} % at AUC {low.auc:g}, "
                     f"{low.m}/{low.n}; mean {100 * np.mean([r.coverage for r in mine]):5.1f} "
                     f"%; {sum(r.coverage < 0.94 for r in mine)} of {len(mine)} cells below "
                     f"94 %; most dropped {100 * max(r.dropped for r in mine):.1f} %")
    return lines


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true",
                        help=f"the short grid ({len(TINY)} cells; default: the full grid)")
    parser.add_argument("--cells", action="store_true", help="print every cell (default: no)")
    parser.add_argument("--draws", type=int, default=None,
                        help="draws per cell (default: 4000, 1000 with --tiny)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default: %(default)s)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Simulate the grid and print the summary (and the cells with ``--cells``)."""
    args = build_parser().parse_args(argv)
    cells = TINY if args.tiny else [(a, m, n) for a in AUCS for m, n in SIZES]
    draws = args.draws or (1000 if args.tiny else 4000)
    start = time.perf_counter()
    results = grid(cells, draws, args.seed)
    if args.cells:
        for r in results:
            print(f"{r.method:<15} AUC {r.auc:<5g} {r.m:>2}/{r.n:<2} {100 * r.coverage:6.2f} % "
                  f"(dropped {100 * r.dropped:.1f} %)")
    print("\n".join(summary(results)))
    print(f"{draws} draws per cell; {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
