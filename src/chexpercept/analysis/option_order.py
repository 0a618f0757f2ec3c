"""Stage 04: option-position tables (issue 23 item 2; docs/metrics.md, "Option order").

Reads ``all_results.json`` records (``{key_id: record}``) and, for every single-choice
question, finds the displayed position of the correct option. Under the release order the
displayed position is the ground truth itself; a block that carries ``"option_order"`` (a list:
displayed position i shows original option ``option_order[i]``, 1-based) maps the original
ground truth to its displayed position. Multi-select questions (ground truth a list) are not
counted: they have no single correct position.

Two tables:

* :func:`position_accuracy`: per question, per displayed position of the correct option, the
  number of questions and the share answered correctly (and ``circular_correct`` where the run
  recorded it).
* :func:`always_k_baselines`: per question and k, the accuracy of always answering displayed
  option k, i.e. the share of questions whose correct option is shown at position k (computed
  from the ground truths alone; under the release order "always 1" scores 1.0 on positive
  detection, where "Yes" is option 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

#: Sections whose block is one question (the others hold one block per sub-question).
SINGLE_SECTIONS = ("detection_qa", "contour_evaluation_qa")
#: Sections that hold sub-question blocks keyed by the ``ground_truth`` mapping's keys.
SUB_SECTIONS = ("contour_revision_qa", "attribute_extraction_qa")

POSITION_COLUMNS = ("question", "path", "position", "n", "accuracy", "circular_accuracy")
BASELINE_COLUMNS = ("question", "path", "k", "n", "accuracy")


def _displayed(gt: int, order: Any, where: str) -> int:
    """Displayed 1-based position of original option ``gt`` under ``order`` (None: release).

    Raises:
        ValueError: ``order`` is not a permutation of 1..n containing ``gt`` (names ``where``).
    """
    if order is None:
        return gt
    if (not isinstance(order, list) or sorted(order) != list(range(1, len(order) + 1))
            or gt not in order):
        raise ValueError(f"{where}: option_order {order!r} is not a 1-based permutation "
                         f"containing the ground truth {gt}")
    return order.index(gt) + 1


def _questions(records: Mapping[str, Any]):
    """Yield ``(question, qa_path, displayed_position, correct, circular_correct_or_None)``.

    Raises:
        ValueError: a single-choice ground truth that is not a positive int, or a bad
            ``option_order`` (the message names the key_id and block).
    """
    for key_id, rec in records.items():
        if not isinstance(rec, Mapping):
            continue
        for section in SINGLE_SECTIONS + SUB_SECTIONS:
            block = rec.get(section)
            if not isinstance(block, Mapping) or "ground_truth" not in block:
                continue
            if section in SINGLE_SECTIONS:
                items = [(section, block["ground_truth"], block)]
            else:
                gts = block["ground_truth"]
                if not isinstance(gts, Mapping):
                    continue
                items = [(f"{section}.{sub}", gt, block.get(sub) or {})
                         for sub, gt in gts.items()]
            for question, gt, flags in items:
                if isinstance(gt, list) or "correct" not in flags:
                    continue  # multi-select, or not asked in this run
                where = f"{key_id}: {question}"
                if isinstance(gt, bool) or not isinstance(gt, int) or gt < 1:
                    raise ValueError(f"{where}: ground truth {gt!r} is not a 1-based option")
                pos = _displayed(gt, flags.get("option_order"), where)
                yield (question, str(rec.get("qa_path", "")), pos, flags["correct"] is True,
                       flags.get("circular_correct"))


def position_accuracy(records: Mapping[str, Any]) -> pd.DataFrame:
    """Accuracy by the correct option's displayed position, per question and QA path.

    Args:
        records: ``all_results.json`` content (``{key_id: record}``).

    Returns:
        DataFrame with :data:`POSITION_COLUMNS` (``path``: the record's ``qa_path``);
        ``circular_accuracy`` is NaN where no question in the cell has ``circular_correct``.
        Sorted by question, path, position.
    """
    rows: dict[tuple[str, str, int], list] = {}
    for question, path, pos, ok, circ in _questions(records):
        cell = rows.setdefault((question, path, pos), [0, 0, 0, 0])
        cell[0] += 1
        cell[1] += ok
        if circ is not None:
            cell[2] += 1
            cell[3] += circ is True
    out = [(q, path, p, n, c / n, (cc / nc) if nc else float("nan"))
           for (q, path, p), (n, c, nc, cc) in sorted(rows.items())]
    return pd.DataFrame(out, columns=list(POSITION_COLUMNS))


def always_k_baselines(records: Mapping[str, Any]) -> pd.DataFrame:
    """Accuracy of always answering displayed option k, per question and QA path.

    k runs from 1 to the largest displayed correct position seen for the question (an option
    never correct scores 0 and is left out).

    Args:
        records: ``all_results.json`` content.

    Returns:
        DataFrame with :data:`BASELINE_COLUMNS` (``path``: the record's ``qa_path``), sorted
        by question, path, k.
    """
    positions: dict[tuple[str, str], list[int]] = {}
    for question, path, pos, _, _ in _questions(records):
        positions.setdefault((question, path), []).append(pos)
    out = []
    for question, path in sorted(positions):
        pos = positions[(question, path)]
        out += [(question, path, k, len(pos), pos.count(k) / len(pos))
                for k in range(1, max(pos) + 1)]
    return pd.DataFrame(out, columns=list(BASELINE_COLUMNS))
