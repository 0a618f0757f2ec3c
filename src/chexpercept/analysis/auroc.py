"""Stage 04: AUROC of the recorded option probabilities, detection and contour evaluation.

A run made with ``00_eval.py --option-probs`` records each answered turn's option probabilities
in ``all_results.json`` (the question block's ``option_probs``; docs/metrics.md, "Option
probabilities and AUROC"). Two questions are yes/no and get an AUROC with Newcombe's (2006)
score-type interval, which every AUROC gets, 0 and 1 included
(:func:`chexpercept.analysis.confidence.auroc_interval`), per lesion and pooled:

- ``detection`` (Stage 1): positive = lesion present (paths ``revision_required`` and
  ``revision_free``), negative = ``lesion_free``; score = P("Yes");
- ``contour_evaluation`` (Stage 2): positive = the contour needs a major revision (path
  ``revision_required``), negative = it does not (``revision_free``); score = P("Yes", it
  needs a revision).

P("Yes") is read without assuming where "Yes" is shown: on a positive case the ground truth is
the Yes option, so the score is the probability of the ground-truth option; on a negative case
it is one minus it (two options, renormalised to sum 1). Only turns whose ``option_probs``
status is ``ok`` are scored; the others (no parsed answer, no log-probabilities, ...) are
counted in ``n_without_probs`` and never scored as 0. A run without option probabilities
gets no rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chexpercept.analysis.case_table import CaseTable
from chexpercept.analysis.confidence import auroc_interval
from chexpercept.errors import SchemaError
from chexpercept.lesions import LESIONS, QA_PATHS

#: The yes/no questions with an AUROC: name -> (``all_results.json`` block, positive paths,
#: paths that ask it).
AUROC_QUESTIONS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "detection": ("detection_qa", ("revision_required", "revision_free"),
                  ("revision_required", "revision_free", "lesion_free")),
    "contour_evaluation": ("contour_evaluation_qa", ("revision_required",),
                           ("revision_required", "revision_free")),
}
#: Columns of ``auroc.csv`` (after the run's identity columns).
AUROC_COLUMNS: tuple[str, ...] = ("question", "lesion", "auroc", "ci_low", "ci_high",
                                  "n_positive", "n_negative", "n_without_probs", "note",
                                  "share_without_probs", "n_asked", "auroc_worst", "auroc_best",
                                  "share_large_residual")
#: Largest share of a cell's asked turns without usable probabilities at which the cell still
#: gets an AUROC point estimate (docs/metrics.md, "Option probabilities and AUROC", "Missing
#: probabilities"): above it the bound [auroc_worst, auroc_best] is at least about 0.36 wide.
MAX_SHARE_WITHOUT_PROBS = 0.2
#: A turn's ``residual`` (probability mass at the answer token outside the option numbers)
#: above which it counts in ``share_large_residual`` (docs/metrics.md, "Option probabilities
#: and AUROC", "The top-k floor"): more than half the mass was on other tokens.
LARGE_RESIDUAL = 0.5
#: Fewest positives and negatives an AUROC needs (an AUROC of one case per class is 0, 1/2 or 1).
MIN_PER_CLASS = 2


@dataclass(frozen=True)
class OptionScores:
    """The per-case P("Yes") of the two yes/no questions of one run.

    Attributes:
        lesion: (n,) int8 index into ``lesions.LESIONS`` (the case table's).
        path: (n,) int8 index into ``lesions.QA_PATHS``.
        scores: question (:data:`AUROC_QUESTIONS`) -> (n,) float64 P("Yes") in [0, 1]; NaN
            where the question was not asked or has no usable probabilities.
        without: question -> (n,) bool; asked and answered but without usable probabilities
            (``option_probs`` status other than ``ok``).
        residual: question -> (n,) float64 ``residual`` of the scored turns (NaN elsewhere, and
            where Stage 03 recorded none); None: not recorded.
    """

    lesion: np.ndarray
    path: np.ndarray
    scores: dict[str, np.ndarray]
    without: dict[str, np.ndarray]
    residual: dict[str, np.ndarray] | None = None


def _p_yes(block: Mapping[str, Any], positive: bool, where: str) -> float | None:
    """P("Yes") of one answered yes/no block, or None without usable option probabilities.

    Raises:
        SchemaError: For an ``option_probs`` that is not what Stage 03 writes (names ``where``).
    """
    op = block.get("option_probs")
    if op is None:
        return None
    if not isinstance(op, Mapping) or not isinstance(op.get("status"), str):
        raise SchemaError(f"{where}: option_probs must be an object with a status, got {op!r}")
    if op["status"] != "ok":
        return None
    probs, gt = op.get("probs"), block.get("ground_truth")
    valid = (isinstance(probs, Mapping) and len(probs) == 2 and isinstance(gt, int)
             and str(gt) in probs
             and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                     and 0.0 <= v <= 1.0 for v in probs.values())
             and abs(sum(probs.values()) - 1.0) <= 1e-6)  # Stage 03 renormalises to sum 1
    if not valid:
        raise SchemaError(f"{where}: option_probs of a yes/no question must map its 2 option "
                          f"numbers (the ground truth {gt!r} among them) to probabilities in "
                          f"[0, 1] summing to 1, got {op!r}")
    p_true = float(probs[str(gt)])
    return p_true if positive else 1.0 - p_true


def option_scores(results: Mapping[str, Any], table: CaseTable,
                  source: str | Path = "all_results.json") -> OptionScores | None:
    """P("Yes") of every scored case's detection and contour-evaluation answers.

    Args:
        results: The parsed ``all_results.json`` (key_id -> case result), already checked by
            the case table (the cases of ``table`` are in it).
        table: The run's case table: its key_ids (the scored cases, ``--limit`` applied), lesion
            and path indices.
        source: The file, named in errors.

    Returns:
        The scores, or None when no case carries ``option_probs`` (a run made without
        ``--option-probs``: no AUROC rows).

    Raises:
        SchemaError: For a malformed ``option_probs`` (names the file and the key_id).
    """
    n = table.n_cases
    scores = {q: np.full(n, np.nan) for q in AUROC_QUESTIONS}
    without = {q: np.zeros(n, dtype=bool) for q in AUROC_QUESTIONS}
    residual = {q: np.full(n, np.nan) for q in AUROC_QUESTIONS}
    seen = False
    for i, key_id in enumerate(table.key_ids):
        path = QA_PATHS[int(table.path[i])]
        case = results[key_id]
        for question, (block_name, positives, asking) in AUROC_QUESTIONS.items():
            block = case.get(block_name) if path in asking else None
            if not block:
                continue
            seen = seen or "option_probs" in block
            p = _p_yes(block, path in positives, f"{source}: {key_id}: {block_name}")
            if p is None:
                without[question][i] = "option_probs" in block
            else:
                scores[question][i] = p
                r = block["option_probs"].get("residual")
                if isinstance(r, (int, float)) and not isinstance(r, bool):
                    residual[question][i] = float(r)
    if not seen:
        return None
    return OptionScores(table.lesion, table.path, scores, without, residual)


def mann_whitney_u(score: np.ndarray, truth: np.ndarray) -> float:
    """Mann-Whitney U of the positives: pairs (positive above negative) + 1/2 per tie.

    Args:
        score: (n,) float scores.
        truth: (n,) bool, True = positive.

    Returns:
        U in [0, n_pos * n_neg] (average ranks, so ties count one half).
    """
    score, truth = np.asarray(score, dtype=float), np.asarray(truth, dtype=bool)
    _, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)
    ranks = (upper - (counts - 1) / 2.0)[inverse]  # average 1-based ranks
    n_pos = int(truth.sum())
    return float(ranks[truth].sum() - n_pos * (n_pos + 1) / 2.0)


def auroc_bounds(score: np.ndarray, truth: np.ndarray, missing_pos: int,
                 missing_neg: int) -> tuple[float, float]:
    """Worst- and best-case AUROC had the turns without probabilities been scored.

    Worst: every missing positive scored 0 and every missing negative 1 (the ends of the
    probability range); best: the reverse. Ties with observed scores at 0 or 1 count one half,
    as in the Mann-Whitney AUC (docs/metrics.md, "Option probabilities and AUROC", "Missing
    probabilities", where the closed form is written out).

    Args:
        score: (n,) observed scores in [0, 1].
        truth: (n,) bool, True = positive.
        missing_pos: positive turns without probabilities.
        missing_neg: negative turns without probabilities.

    Returns:
        (worst, best); NaN, NaN when a class has no turn at all.
    """
    score, truth = np.asarray(score, dtype=float), np.asarray(truth, dtype=bool)
    n_pos, n_neg = int(truth.sum()), int((~truth).sum())
    big_p, big_n = n_pos + missing_pos, n_neg + missing_neg
    if big_p == 0 or big_n == 0:
        return math.nan, math.nan
    u = mann_whitney_u(score, truth) if n_pos and n_neg else 0.0
    pos0, pos1 = int((score[truth] == 0).sum()), int((score[truth] == 1).sum())
    neg0, neg1 = int((score[~truth] == 0).sum()), int((score[~truth] == 1).sum())
    worst = u + 0.5 * missing_pos * neg0 + 0.5 * missing_neg * pos1
    best = (u + missing_pos * (n_neg - 0.5 * neg1) + missing_neg * (n_pos - 0.5 * pos0)
            + missing_pos * missing_neg)
    return worst / (big_p * big_n), best / (big_p * big_n)


def auroc_rows(scores: OptionScores) -> list[dict[str, Any]]:
    """Rows of ``auroc.csv``: per question, each lesion with cases, then ``all``.

    Lesions in ``LESIONS`` order.

    Returns:
        Rows with the keys of :data:`AUROC_COLUMNS`. A cell with fewer than
        :data:`MIN_PER_CLASS` positives or negatives has NaN AUROC and bounds and a ``note``;
        every other cell has both bounds, also at an AUROC of exactly 0 or 1.
        ``share_without_probs`` = ``n_without_probs / n_asked`` (``n_asked``: scored plus
        without probabilities); ``auroc_worst``/``auroc_best``: :func:`auroc_bounds` (NaN where
        the AUROC needs more cases); a cell whose share exceeds
        :data:`MAX_SHARE_WITHOUT_PROBS` keeps its bounds and share but has an empty AUROC and
        interval and a ``note``; ``share_large_residual``: share of scored turns with
        ``residual`` > :data:`LARGE_RESIDUAL` (NaN without scored turns or residuals).
    """
    rows = []
    for question, (_, positives, _) in AUROC_QUESTIONS.items():
        positive_paths = [QA_PATHS.index(p) for p in positives]
        score, without = scores.scores[question], scores.without[question]
        for li, lesion in [*enumerate(LESIONS), (None, "all")]:
            in_cell = np.ones_like(without) if li is None else scores.lesion == li
            has = in_cell & ~np.isnan(score)
            if not (has.any() or (in_cell & without).any()):
                continue
            truth = np.isin(scores.path[has], positive_paths)
            n_pos, n_neg = int(truth.sum()), int((~truth).sum())
            miss = in_cell & without
            miss_pos = int(np.isin(scores.path[miss], positive_paths).sum())
            n_without = int(miss.sum())
            n_asked = int(has.sum()) + n_without
            share = n_without / n_asked
            resid = (scores.residual[question][has] if scores.residual is not None
                     else np.array([]))
            resid = resid[~np.isnan(resid)]
            row = {"question": question, "lesion": lesion, "auroc": math.nan,
                   "ci_low": math.nan, "ci_high": math.nan, "n_positive": n_pos,
                   "n_negative": n_neg, "n_without_probs": n_without,
                   "note": "", "share_without_probs": share, "n_asked": n_asked,
                   "auroc_worst": math.nan, "auroc_best": math.nan,
                   "share_large_residual": (float((resid > LARGE_RESIDUAL).mean())
                                            if resid.size else math.nan)}
            if n_pos < MIN_PER_CLASS or n_neg < MIN_PER_CLASS:
                row["note"] = (f"needs >= {MIN_PER_CLASS} positives and {MIN_PER_CLASS} "
                               f"negatives with probabilities")
            else:
                row["auroc_worst"], row["auroc_best"] = auroc_bounds(
                    score[has], truth, miss_pos, n_without - miss_pos)
                if share > MAX_SHARE_WITHOUT_PROBS:
                    row["note"] = (f"refused: {share:.1%} of turns without probabilities "
                                   f"(> {MAX_SHARE_WITHOUT_PROBS:.0%}); see auroc_worst/best")
                else:
                    row["auroc"], row["ci_low"], row["ci_high"] = auroc_interval(score[has],
                                                                                 truth)
            rows.append(row)
    return rows
