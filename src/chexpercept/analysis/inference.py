"""Stage 04: the paired score interval and test of two runs' accuracies, and Holm's adjustment.

Used by :mod:`~chexpercept.analysis.compare` for ``paired_comparisons/<A>_vs_<B>.csv``
(docs/metrics.md, "Paired comparison" and "Primary endpoint and multiplicity").

- :func:`tango_interval` is Tango's (1998) score interval for the difference of two paired
  proportions: the set of differences that Tango's score test does not reject. Its test at a
  difference of 0 (:func:`score_test_p`) is McNemar's (1947) chi-square without continuity
  correction, so the interval excludes 0 exactly when that test rejects at the interval's level;
  both come from :func:`tango_statistic`. Simulated exact coverage: docs/metrics.md and
  ``benchmarks/coverage_paired.py``.
- :func:`holm` is Holm's (1979) step-down adjustment of a family of p-values.

numpy only (no scipy): the normal quantile and tail come from :mod:`statistics` and
:func:`math.erfc`.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

#: Two-sided level of the paired interval (the tables' 95 %).
LEVEL = 0.95
#: Bisection steps per bound: [-1, 1] halved 60 times is below 1e-17, under a double's spacing.
BISECTION_STEPS = 60


def tango_statistic(b: np.ndarray, c: np.ndarray, n: np.ndarray,
                    delta: np.ndarray | float) -> np.ndarray:
    """Tango's score statistic for the paired difference ``delta`` (Tango 1998).

    With ``b`` pairs where only the first measure is a success and ``c`` where only the second
    is, out of ``n`` pairs, the difference of the two success proportions is
    ``(b - c) / n``. Under a true difference ``delta`` the constrained maximum-likelihood
    estimate of the second discordant cell is
    ``q = (sqrt(w**2 + 8 n c delta (1 - delta)) - w) / (4 n)`` with
    ``w = -(b + c) + (2 n - b + c) delta``, and the statistic is
    ``(b - c - n delta) / sqrt(n (2 q + delta (1 - delta)))``. At ``delta = 0`` it is
    ``(b - c) / sqrt(b + c)``, McNemar's statistic without continuity correction.

    Args:
        b: Array of discordant counts favouring the first measure (integer-valued floats).
        c: Array of discordant counts favouring the second, same shape.
        n: Array of pairs (> 0, >= b + c), same shape.
        delta: Hypothesised difference(s) in [-1, 1], broadcast against ``b``.

    Returns:
        float64 array: the statistic, decreasing in ``delta``; ``+inf`` / ``-inf`` where its
        variance is 0 and the numerator is positive / negative (``delta`` = -1 or 1 away from
        the estimate), 0 where both are 0 (``b = c = 0`` at ``delta = 0``).
    """
    b, c, n = (np.asarray(x, dtype=np.float64) for x in (b, c, n))
    d = np.asarray(delta, dtype=np.float64)
    w = -(b + c) + (2 * n - b + c) * d
    q = (np.sqrt(np.maximum(w * w + 8 * n * c * d * (1 - d), 0.0)) - w) / (4 * n)
    var = n * (2 * q + d * (1 - d))
    num = b - c - n * d
    with np.errstate(divide="ignore", invalid="ignore"):
        z = num / np.sqrt(var)
    flat = ~(var > 0)
    return np.where(flat, np.sign(num) * np.where(num == 0, 0.0, np.inf), z)


def score_test_p(b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Two-sided p-value of the score test of no difference (McNemar 1947, uncorrected).

    ``2 (1 - Phi(|b - c| / sqrt(b + c)))``: Tango's statistic at difference 0
    (:func:`tango_statistic`), referred to the normal distribution; 1 when ``b + c = 0``.

    Args:
        b: Array of discordant counts favouring the first measure.
        c: Array of discordant counts favouring the second, same shape.

    Returns:
        float64 array of p-values in (0, 1].
    """
    b, c = np.asarray(b, dtype=np.float64), np.asarray(c, dtype=np.float64)
    z = np.abs(tango_statistic(b, c, np.maximum(b + c, 1.0), 0.0))
    return np.array([math.erfc(v / math.sqrt(2)) for v in z.ravel().tolist()],
                    dtype=np.float64).reshape(z.shape)


def tango_interval(b: np.ndarray, c: np.ndarray, n: np.ndarray, level: float = LEVEL
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Tango's (1998) score interval for the paired difference ``(b - c) / n``.

    The differences ``delta`` in [-1, 1] with ``|tango_statistic(delta)| <= z``, z the normal
    quantile of ``(1 + level) / 2``. The statistic decreases in ``delta`` and is 0 at the
    estimate, so each bound is found by bisection on its side of the estimate (vectorised over
    all cells; :data:`BISECTION_STEPS` halvings). It is never zero-width for ``n > 0``: with
    no discordant pair, ``(b, c) = (0, 0)``, it is ``+-z**2 / (n + z**2)`` (e.g. [-27.8 %,
    27.8 %] at n = 10); when every pair is discordant one way the bound on that side is
    exactly 1 (or -1). Each bound is a difference that the test does not reject, and where
    the test of no difference does not reject (:func:`score_test_p` >= 1 - level), 0 lies in the
    interval by construction; so the interval excludes 0 exactly when that test rejects.

    Args:
        b: Array of discordant counts favouring the first measure (integer-valued).
        c: Array of discordant counts favouring the second, same shape.
        n: Array of pairs (> 0, >= b + c), same shape.
        level: Two-sided confidence level in (0, 1).

    Returns:
        ``(low, high)``: float64 arrays of ``b``'s shape, ``-1 <= low < high <= 1``.
    """
    b, c, n = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (b, c, n)))
    z = NormalDist().inv_cdf(0.5 + level / 2)
    est = (b - c) / n
    # lower bound: the statistic falls from +inf at -1 to 0 at the estimate
    lo, hi = np.full(est.shape, -1.0), est.copy()
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        above = tango_statistic(b, c, n, mid) > z
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    low = np.where(est <= -1, -1.0, hi)  # hi: the innermost point still accepted
    lo, hi = est.copy(), np.full(est.shape, 1.0)
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        inside = tango_statistic(b, c, n, mid) >= -z
        lo, hi = np.where(inside, mid, lo), np.where(inside, hi, mid)
    high = np.where(est >= 1, 1.0, lo)
    # 0 is accepted when the test of no difference does not reject: keep it inside exactly
    keep = np.abs(tango_statistic(b, c, n, 0.0)) <= z
    return np.where(keep, np.minimum(low, 0.0), low), np.where(keep, np.maximum(high, 0.0), high)


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's (1979) step-down adjusted p-values of one family.

    Sorted ascending, the i-th smallest (i = 1..m) becomes ``min(1, max_{j <= i} (m - j + 1)
    p_(j))``; rejecting where the adjusted value is below alpha controls the family-wise error
    rate at alpha under any dependence between the tests. NaN entries are not tests: they
    stay NaN and do not count in m.

    Args:
        p_values: 1-d array of p-values in [0, 1] (NaN: no test).

    Returns:
        float64 array of the same shape, each entry >= its raw p-value.
    """
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    tested = np.flatnonzero(~np.isnan(p))
    m = len(tested)
    if m == 0:
        return out
    order = tested[np.argsort(p[tested], kind="stable")]
    scaled = (m - np.arange(m)) * p[order]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out


__all__ = ["LEVEL", "holm", "score_test_p", "tango_interval", "tango_statistic"]
