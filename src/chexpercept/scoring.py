"""Core: the answer rule of Stages 03 and 04 (docs/evaluation_protocol.md, "Scoring").

Stage 03 scores each parsed answer with it (``evaluation.scoring.is_correct``); Stage 04
recomputes every stored ``correct`` flag of ``all_results.json`` with it
(``analysis.rescore``), so both stages apply the one rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from utils.status import Status


def answer_correct(answer: Sequence[int] | None, status: str, ground_truth: int | Iterable[int],
                   *, multi_select: bool) -> bool:
    """Whether one answer, in original option numbers, is correct.

    Args:
        answer: Sorted distinct 1-based option indices (None or empty: no answer).
        status: The answer's status; only ``ok`` can be correct.
        ground_truth: 1-based option index, or the indices of a multi-select answer.
        multi_select: Score by set equality (else exact single-option match).

    Returns:
        True only for an ``ok`` answer that matches exactly.

    Raises:
        TypeError: For a single-choice ground truth that is not an int.
    """
    if status != Status.OK or not answer:
        return False
    if multi_select:
        gt = {int(i) for i in ground_truth} if not isinstance(ground_truth, int) \
            else {ground_truth}
        return set(answer) == gt
    if not isinstance(ground_truth, int):
        raise TypeError(f"single-choice ground truth must be an int, got {ground_truth!r}")
    return tuple(answer) == (ground_truth,)
