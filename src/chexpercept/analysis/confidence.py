"""Stage 04: AUROC with a 95 % interval (docs/metrics.md, "Option probabilities and AUROC").

:func:`auroc_interval` computes the AUROC of a score against a binary truth (the Mann-Whitney
AUC, ties counting one half) with the score-type interval of Newcombe (2006, Stat Med 25:559,
"method 5"): the AUCs ``theta`` whose Hanley-McNeil variance, with both sample sizes replaced
by ``(m + n) / 2``, puts the estimate within ``z`` standard errors. It never degenerates: an AUC
of exactly 0 or 1, or all scores tied, gets a finite interval of positive width. It is the
table's interval because its simulated coverage stays near 95 % at every cell of the grid of
docs/metrics.md, "Option probabilities and AUROC", where DeLong's interval on the logit scale
(:func:`auroc_delong`, kept for comparison; ``benchmarks/coverage_auroc.py`` computes it
vectorised) has no interval at 0 and 1 and covers less near them.

The scores are the option probabilities Stage 03 recorded with ``--option-probs`` (computed
there: ``chexpercept.evaluation.option_probs``); ``analysis.auroc`` builds the table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from chexpercept.analysis.inference import BISECTION_STEPS
from chexpercept.errors import ChexperceptError


def _pair_wins(scores: Sequence[float], truth: Sequence[bool]) -> np.ndarray:
    """(m, n) float64: 1 where positive i outscores negative j, 0.5 if tied, else 0.

    Raises:
        ChexperceptError: lengths differ, or fewer than 2 positives or 2 negatives.
    """
    x = np.asarray(scores, dtype=np.float64)
    y = np.asarray(truth, dtype=bool)
    if x.shape != y.shape or x.ndim != 1:
        raise ChexperceptError(f"scores {x.shape} and truth {y.shape} must be equal 1-d shapes")
    pos, neg = x[y], x[~y]
    if pos.size < 2 or neg.size < 2:
        raise ChexperceptError(f"AUROC needs >= 2 positives and negatives, got {pos.size} and "
                               f"{neg.size}")
    return (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])


def newcombe_variance(theta: np.ndarray | float, m: int, n: int) -> np.ndarray:
    """Newcombe's (2006) variance of an AUC ``theta`` from m positives and n negatives.

    The Hanley-McNeil (1982) variance ``theta (1 - theta) / (m n) * [1 + (m - 1) (1 - theta) /
    (2 - theta) + (n - 1) theta / (1 + theta)]`` with ``m - 1`` and ``n - 1`` both replaced by
    ``(m + n) / 2 - 1``, which makes it symmetric in ``theta`` and ``1 - theta``.

    Args:
        theta: AUC value(s) in [0, 1].
        m: Positives (>= 1).
        n: Negatives (>= 1).

    Returns:
        float64 array of theta's shape; 0 at theta = 0 and 1.
    """
    t = np.asarray(theta, dtype=np.float64)
    k = (m + n) / 2 - 1
    return t * (1 - t) / (m * n) * (1 + k * ((1 - t) / (2 - t) + t / (1 + t)))


def newcombe_interval(auc: np.ndarray | float, m: int, n: int, level: float = 0.95
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Score-type interval of an AUC (Newcombe 2006, method 5): ``|auc - t| <= z sd(t)``.

    The set of ``t`` in [0, 1] with ``(auc - t)**2 <= z**2 * newcombe_variance(t, m, n)``;
    ``(auc - t) / sd(t)`` decreases in t (checked over m, n = 2-1,000 in
    tests/analysis/test_confidence.py), so each bound is found by bisection on its side of the
    estimate, vectorised over ``auc``. An AUC of 1 gets ``[low, 1]`` with ``low < 1`` (0.899
    at m = n = 20), one of 0 the mirror image.

    Args:
        auc: Estimate(s) in [0, 1].
        m: Positives (>= 1).
        n: Negatives (>= 1).
        level: Two-sided level in (0, 1).

    Returns:
        ``(low, high)``: float64 arrays of auc's shape, ``0 <= low < high <= 1``.
    """
    z = NormalDist().inv_cdf(0.5 + level / 2)
    a = np.asarray(auc, dtype=np.float64)

    def excess(t: np.ndarray) -> np.ndarray:  # standardised distance of t from the estimate
        with np.errstate(divide="ignore", invalid="ignore"):
            return (a - t) / np.sqrt(newcombe_variance(t, m, n))

    lo, hi = np.zeros(a.shape), a.copy()  # excess: +inf at 0 (for a > 0), 0 at the estimate
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        out = (mid > 0) & (excess(mid) > z)
        lo, hi = np.where(out, mid, lo), np.where(out, hi, mid)
    low = np.where(a > 0, hi, 0.0)
    lo, hi = a.copy(), np.ones(a.shape)
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        inside = (mid < 1) & (excess(mid) >= -z)
        lo, hi = np.where(inside, mid, lo), np.where(inside, hi, mid)
    high = np.where(a < 1, lo, 1.0)
    return low, high


def auroc_interval(
    scores: Sequence[float], truth: Sequence[bool], level: float = 0.95
) -> tuple[float, float, float]:
    """AUROC of ``scores`` against ``truth`` with Newcombe's score-type interval.

    Args:
        scores: shape (n,), float; higher means "positive" (e.g. the Yes option's probability).
        truth: shape (n,), bool; True for lesion present.
        level: two-sided interval level in (0, 1).

    Returns:
        ``(auc, low, high)``; ties count one half (Mann-Whitney); the interval is
        :func:`newcombe_interval`, finite and of positive width for every AUC, 0 and 1
        included.

    Raises:
        ChexperceptError: lengths differ, or fewer than 2 positives or 2 negatives.
    """
    psi = _pair_wins(scores, truth)
    auc = float(psi.mean())
    low, high = newcombe_interval(auc, psi.shape[0], psi.shape[1], level)
    return auc, float(low), float(high)


def auroc_delong(
    scores: Sequence[float], truth: Sequence[bool], level: float = 0.95
) -> tuple[float, float, float]:
    """AUROC of ``scores`` against ``truth`` with DeLong's variance and a logit-scale interval.

    DeLong, DeLong & Clarke-Pearson (1988, Biometrics 44:837). Not the table's interval
    (module docstring); kept to compare with it.

    Args:
        scores: shape (n,), float; higher means "positive" (e.g. the Yes option's probability).
        truth: shape (n,), bool; True for lesion present.
        level: two-sided interval level in (0, 1).

    Returns:
        ``(auc, low, high)``. Ties count one half (Mann-Whitney). The interval is
        ``expit(logit(auc) +- z * se / (auc (1 - auc)))``; when the AUC is 0 or 1 the variance
        is 0 and the interval is NaN.

    Raises:
        ChexperceptError: lengths differ, or fewer than 2 positives or 2 negatives.
    """
    psi = _pair_wins(scores, truth)
    m, n = psi.shape
    auc = float(psi.mean())
    var = delong_variance(psi)
    if auc <= 0.0 or auc >= 1.0 or var <= 0.0:
        return auc, math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    logit = math.log(auc / (1.0 - auc))
    half = z * math.sqrt(var) / (auc * (1.0 - auc))
    return auc, 1.0 / (1.0 + math.exp(-(logit - half))), 1.0 / (1.0 + math.exp(-(logit + half)))


def delong_variance(psi: np.ndarray) -> float:
    """DeLong's variance of the Mann-Whitney AUC from its (m, n) pair-win matrix.

    ``var(V10) / m + var(V01) / n`` (ddof 1), V10 the positives' mean wins (rows), V01 the
    negatives' (columns).

    Args:
        psi: (m, n) float64 in {0, 0.5, 1}: 1 where positive i outscores negative j.

    Returns:
        The variance (>= 0).
    """
    m, n = psi.shape
    return float(psi.mean(axis=1).var(ddof=1) / m + psi.mean(axis=0).var(ddof=1) / n)
