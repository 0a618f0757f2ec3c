"""Stage 04: option probabilities from token log-probabilities, and AUROC with a DeLong interval.

Pure functions that the option-probability feature (issue 23, item 3) builds on
(docs/metrics.md, "Option probabilities and AUROC"):

- :func:`answer_position_top_logprobs` picks the position where the answer number is emitted;
- :func:`option_probs_from_top_logprobs` turns the top-k log-probabilities at the position where
  the answer number is emitted into option probabilities;
- :func:`auroc_delong` computes the AUROC of a score against a binary truth with DeLong's
  variance (DeLong, DeLong & Clarke-Pearson 1988, Biometrics 44:837) and a logit-scale normal
  interval.

Neither is wired into Stage 03 or the Stage 04 tables yet.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import norm

from chexpercept.errors import ChexperceptError


def answer_position_top_logprobs(
    steps: Sequence[tuple[str, Mapping[str, float]]],
) -> Mapping[str, float] | None:
    """The top-k log-probabilities at the position where the answer number is emitted.

    Args:
        steps: the generated tokens in order, each ``(token text, {candidate text: logprob})``
            (the shape both vLLM's ``CompletionOutput.logprobs`` and the OpenAI ``logprobs.content``
            reduce to once decoded).

    Returns:
        The candidate map of the first step whose token text, stripped of whitespace, is a
        non-empty digit string; None when no generated token is a number (then the answer has
        no option probabilities, never a guessed one).
    """
    for token, top in steps:
        if token.strip().isdigit():
            return top
    return None


def option_probs_from_top_logprobs(
    top_logprobs: Mapping[str, float], n_options: int
) -> tuple[dict[str, float], float]:
    """Option probabilities from the top-k log-probabilities of the answer number's token.

    Args:
        top_logprobs: token text -> natural-log probability, the provider's top-k at the first
            generated token whose text (stripped of whitespace) is a digit string; tokens that
            differ only in surrounding whitespace (" 1", "1") are summed.
        n_options: number of options; option numbers are "1" .. str(n_options).

    Returns:
        ``(probs, residual)``: ``probs`` maps each option number to its mass renormalised over
        the options found in the top-k; an option absent from the top-k gets 0.0 (its true mass
        is at most the smallest listed one, which is not guessed). ``residual`` is the raw mass
        of the top-k *not* on any option number plus an option-mass bound of 0 — i.e.
        ``1 - sum(raw option mass)`` — recorded so a reader sees how much was renormalised away.

    Raises:
        ChexperceptError: ``n_options < 1``, a non-finite or positive log-probability, or no
            option number among the top-k (then there is no probability to report).
    """
    if n_options < 1:
        raise ChexperceptError(f"n_options must be >= 1, got {n_options}")
    raw = {str(i): 0.0 for i in range(1, n_options + 1)}
    for token, logprob in top_logprobs.items():
        if not math.isfinite(logprob) or logprob > 1e-9:
            raise ChexperceptError(f"invalid log-probability {logprob!r} for token {token!r}")
        key = token.strip()
        if key in raw:
            raw[key] += math.exp(logprob)
    total = sum(raw.values())
    if total <= 0.0:
        raise ChexperceptError(
            f"no option number 1..{n_options} among the top log-probabilities "
            f"{sorted(top_logprobs)}"
        )
    return {k: v / total for k, v in raw.items()}, max(0.0, 1.0 - total)


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
