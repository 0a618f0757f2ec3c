"""Stage 04: clinical detection metrics of Stage 1 (detection) per lesion and pooled.

Positives are the lesion-present cases (paths ``revision_required`` and ``revision_free``),
negatives the ``lesion_free`` cases (docs/benchmark_format.md, "QA paths"). The ground truth
comes from the path, never from option position ("Yes" is always option 1); where the key_id's
MIMIC-ILS pair id names its pair type (``<study_id>_<positive|negative>_<k>``), that type must
agree with the path, else :func:`check_pair_types` raises SchemaError. Positives and negatives
are independent samples: the benchmark matches no lesion-free case to a positive
(docs/metrics.md, "Detection metrics"). A case's detection
answer is read from the case table's ``oracle:stage1`` flag, so a failed, unparsed or missing
answer counts as wrong, as accuracy does (docs/metrics.md, "Stage accuracy"): on a positive it
is a false negative, on a negative a false positive.

Metrics (definitions: docs/metrics.md, "Detection metrics"): sensitivity TP/(TP+FN),
specificity TN/(TN+FP), PPV TP/(TP+FP), NPV TN/(TN+FN), each with the continuity-corrected
Wilson interval of :func:`chexpercept.analysis.bootstrap.proportion_interval` (none below
``MIN_BOOTSTRAP_CASES`` cases: docs/metrics.md, "Small cells"); balanced accuracy
(sensitivity + specificity) / 2 with the MOVER interval (Newcombe 1998; Zou & Donner 2008)
built from the two continuity-corrected Wilson intervals, whose exact coverage over the grid of
docs/metrics.md, "Coverage by method" is printed by benchmarks/coverage_grid.py (lowest cell
91.8 %, at 16/16 cases with sensitivity = specificity = 0.02 or 0.98).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chexpercept.analysis.bootstrap import has_interval, proportion_interval, wilson_cc_interval
from chexpercept.analysis.case_table import METRIC_INDEX, CaseTable
from chexpercept.errors import SchemaError
from chexpercept.lesions import LESIONS, QA_PATHS, pair_type_from_key_id

#: Metric names, in the order of the CSV rows.
DETECTION_METRICS: tuple[str, ...] = (
    "sensitivity", "specificity", "balanced_accuracy", "ppv", "npv",
)
#: Columns of the detection metrics table (long format).
DETECTION_COLUMNS: tuple[str, ...] = (
    "lesion", "metric", "value", "ci_low", "ci_high", "k", "n_cases",
)
_NEGATIVE_PATH = QA_PATHS.index("lesion_free")


def check_pair_types(table: CaseTable, *, source: str | Path | None = None) -> None:
    """Refuse cases whose pair id's type disagrees with their QA path.

    A key_id whose pair id reads ``..._positive_<k>`` must be on a lesion-present path, one
    reading ``..._negative_<k>`` on ``lesion_free`` (docs/benchmark_format.md, "Files";
    the detection ground truth is the MIMIC-ILS pair type, docs/qa_generation.md,
    "Question types").
    A key_id without such a token is not checked.

    Args:
        table: A run's (or the chance) case table; ``key_ids`` and ``path`` are read.
        source: The run's results file, named in the error; None: the run's name is.

    Raises:
        SchemaError: Naming the file (or run) and every disagreeing key_id with its type
            and path.
    """
    bad = []
    for key_id, path in zip(table.key_ids, table.path.tolist(), strict=True):
        kind = pair_type_from_key_id(key_id)
        if kind is not None and (kind == "negative") != (path == _NEGATIVE_PATH):
            bad.append(f"{key_id}: pair id says {kind}, qa_path is '{QA_PATHS[path]}'")
    if bad:
        where = source if source is not None else f"run '{table.name}'"
        raise SchemaError(f"{where}: {len(bad)} case(s) whose pair id's "
                          f"positive/negative type disagrees with the QA path (detection "
                          f"ground truth):\n  " + "\n  ".join(bad))


def confusion_counts(correct: np.ndarray, positive: np.ndarray) -> tuple[int, int, int, int]:
    """``(tp, fn, tn, fp)`` of detection answers.

    Args:
        correct: (n,) bool; the detection answer was correct (failed/unparsed = False).
        positive: (n,) bool; the case has the lesion.

    Returns:
        Four ints.
    """
    correct, positive = np.asarray(correct, bool), np.asarray(positive, bool)
    return (int((correct & positive).sum()), int((~correct & positive).sum()),
            int((correct & ~positive).sum()), int((~correct & ~positive).sum()))


def balanced_accuracy_interval(tp: int, fn: int, tn: int, fp: int) -> tuple[float, float]:
    """MOVER interval of balanced accuracy from the corrected Wilson intervals of sens. and spec.

    ``L = b - sqrt((se - l_se)**2 + (sp - l_sp)**2) / 2`` and
    ``U = b + sqrt((u_se - se)**2 + (u_sp - sp)**2) / 2`` with ``b = (se + sp) / 2``
    (Zou & Donner 2008, sum of two independent proportions, halved).

    Args:
        tp: True positives (int or array); tp + fn > 0.
        fn: False negatives, same shape.
        tn: True negatives, same shape; tn + fp > 0.
        fp: False positives, same shape.

    Returns:
        ``(low, high)`` in [0, 1]: floats for scalar counts, float64 arrays otherwise.

    Raises:
        ValueError: If there are no positives or no negatives.
    """
    tp, fn, tn, fp = (np.asarray(x, dtype=np.float64) for x in (tp, fn, tn, fp))
    if np.any(tp + fn == 0) or np.any(tn + fp == 0):
        raise ValueError("balanced accuracy needs both positives and negatives")
    (l1, l2), (u1, u2) = wilson_cc_interval(np.stack([tp, tn]),
                                            np.stack([tp + fn, tn + fp]))
    se, sp = tp / (tp + fn), tn / (tn + fp)
    b = (se + sp) / 2
    low = np.maximum(b - np.sqrt((se - l1) ** 2 + (sp - l2) ** 2) / 2, 0.0)
    high = np.minimum(b + np.sqrt((u1 - se) ** 2 + (u2 - sp) ** 2) / 2, 1.0)
    if low.ndim == 0:
        return float(low), float(high)
    return low, high


def metric_rows(tp: int, fn: int, tn: int, fp: int) -> list[dict]:
    """One row per metric of :data:`DETECTION_METRICS` (value, ci_low, ci_high, k, n_cases).

    A metric without cases (e.g. PPV with no "Yes" answers) has NaN value and bounds,
    n_cases = 0.
    Balanced accuracy's k is NaN (it is not a count).
    """
    rows = []
    for name, k, n in (("sensitivity", tp, tp + fn), ("specificity", tn, tn + fp),
                       ("balanced_accuracy", None, None), ("ppv", tp, tp + fp),
                       ("npv", tn, tn + fn)):
        if name == "balanced_accuracy":
            if tp + fn and tn + fp:
                val = (tp / (tp + fn) + tn / (tn + fp)) / 2
                # an interval needs both of its proportions to have one (docs/metrics.md,
                # "Small cells")
                lo, hi = (balanced_accuracy_interval(tp, fn, tn, fp)
                          if has_interval(tp + fn) and has_interval(tn + fp)
                          else (float("nan"), float("nan")))
            else:
                lo = hi = val = float("nan")
            rows.append({"metric": name, "value": val, "ci_low": lo, "ci_high": hi,
                         "k": float("nan"), "n_cases": tp + fn + tn + fp})
            continue
        if n:
            lo, hi = proportion_interval(np.array([k]), np.array([n]))
            rows.append({"metric": name, "value": k / n, "ci_low": float(lo[0]),
                         "ci_high": float(hi[0]), "k": k, "n_cases": n})
        else:
            rows.append({"metric": name, "value": float("nan"), "ci_low": float("nan"),
                         "ci_high": float("nan"), "k": 0, "n_cases": 0})
    return rows


def detection_rows(table: CaseTable, chance: bool = False) -> list[dict]:
    """Detection metrics per lesion (in :data:`LESIONS` order) and pooled (``all``).

    Args:
        table: A run's case table (0/1 flags), or the chance table (probabilities of a
            correct answer) with ``chance=True``.
        chance: Give the expected metrics of uniform guessing: sensitivity and specificity
            the mean chance over positives / negatives, PPV and NPV ratios of expected
            counts; no interval (a known value, not an estimate), k empty.

    Returns:
        Rows with the keys of :data:`DETECTION_COLUMNS`.

    Raises:
        SchemaError: From :func:`check_pair_types`.
    """
    check_pair_types(table)
    col = METRIC_INDEX["oracle:stage1"]
    asked = table.applicable[:, col]
    positive = table.path != _NEGATIVE_PATH
    rows = []
    for li, lesion in [*enumerate(LESIONS), (None, "all")]:
        sel = asked if li is None else asked & (table.lesion == li)
        if not sel.any():
            continue
        if chance:
            p, pos = table.values[sel, col], positive[sel]
            tp, fn = p[pos].sum(), (1 - p[pos]).sum()
            tn, fp = p[~pos].sum(), (1 - p[~pos]).sum()
            nan = float("nan")
            for row in metric_rows(tp, fn, tn, fp):
                rows.append({"lesion": lesion, **row, "ci_low": nan, "ci_high": nan,
                             "k": nan, "n_cases": int(sel.sum())})
            continue
        correct = table.values[sel, col] == 1
        for row in metric_rows(*confusion_counts(correct, positive[sel])):
            rows.append({"lesion": lesion, **row})
    return rows
