"""Stage 04: AUROC with a DeLong interval (docs/metrics.md, "Option probabilities and AUROC").

:func:`auroc_delong` computes the AUROC of a score against a binary truth with DeLong's
variance (DeLong, DeLong & Clarke-Pearson 1988, Biometrics 44:837) and a logit-scale normal
interval. The scores are the option probabilities Stage 03 recorded with ``--option-probs``
(computed there: ``chexpercept.evaluation.option_probs``); ``analysis.auroc`` builds the table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import norm

from chexpercept.errors import ChexperceptError


def auroc_delong(
    scores: Sequence[float], truth: Sequence[bool], level: float = 0.95
) -> tuple[float, float, float]:
    """AUROC of ``scores`` against ``truth`` with DeLong's variance and a logit-scale interval.

    Args:
        scores: shape (n,), float; higher means "positive" (e.g. the Yes option's probability).
        truth: shape (n,), bool; True for lesion present.
        level: two-sided interval level in (0, 1).

    Returns:
        ``(auc, low, high)``. Ties count one half (Mann-Whitney). The interval is
        ``expit(logit(auc) +- z * se / (auc (1 - auc)))``; when the AUC is 0 or 1 the variance
        is 0 and the interval is NaN (docs/metrics.md says why).

    Raises:
        ChexperceptError: lengths differ, or fewer than 2 positives or 2 negatives.
    """
    x = np.asarray(scores, dtype=np.float64)
    y = np.asarray(truth, dtype=bool)
    if x.shape != y.shape or x.ndim != 1:
        raise ChexperceptError(f"scores {x.shape} and truth {y.shape} must be equal 1-d shapes")
    pos, neg = x[y], x[~y]
    m, n = pos.size, neg.size
    if m < 2 or n < 2:
        raise ChexperceptError(f"AUROC needs >= 2 positives and negatives, got {m} and {n}")
    # psi[i, j] = 1 if pos_i > neg_j, 0.5 if tied, 0 otherwise; shape (m, n)
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    auc = float(psi.mean())
    v10 = psi.mean(axis=1)  # structural components of the positives, shape (m,)
    v01 = psi.mean(axis=0)  # of the negatives, shape (n,)
    var = v10.var(ddof=1) / m + v01.var(ddof=1) / n
    if auc <= 0.0 or auc >= 1.0 or var <= 0.0:
        return auc, math.nan, math.nan
    z = float(norm.ppf(0.5 + level / 2.0))
    logit = math.log(auc / (1.0 - auc))
    half = z * math.sqrt(var) / (auc * (1.0 - auc))
    return auc, 1.0 / (1.0 + math.exp(-(logit - half))), 1.0 / (1.0 + math.exp(-(logit + half)))
