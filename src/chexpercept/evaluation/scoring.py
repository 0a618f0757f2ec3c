"""Stage 03: all-or-nothing scoring of parsed answers (docs/evaluation_protocol.md, "Scoring").

There is no partial credit. Single choice: the parsed option equals the ground truth.
Multi-select (expansion, contraction, location): the parsed set equals the ground-truth set.
Stage 3 is correct iff expansion, contraction and revision result are all correct; Stage 4 iff
all four attribute questions are. An answer whose status is not ``ok`` is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable

from chexpercept.evaluation.parsing import OK, ParsedAnswer


def is_correct(parsed: ParsedAnswer, ground_truth: int | Iterable[int], *,
               multi_select: bool) -> bool:
    """Whether one parsed answer is correct.

    Args:
        parsed: Output of :func:`~chexpercept.evaluation.parsing.parse_answer`.
        ground_truth: 1-based option index, or the indices of a multi-select answer.
        multi_select: Score by set equality (else exact single-option match).

    Returns:
        True only for an ``ok`` answer that matches exactly.
    """
    if parsed.status != OK or not parsed.answer:
        return False
    if multi_select:
        gt = {int(i) for i in ground_truth} if not isinstance(ground_truth, int) \
            else {ground_truth}
        return set(parsed.answer) == gt
    if not isinstance(ground_truth, int):
        raise TypeError(f"single-choice ground truth must be an int, got {ground_truth!r}")
    return parsed.answer == (ground_truth,)


def stage_correct(sub_correct: Iterable[bool]) -> bool:
    """All-or-nothing stage score.

    Used for Stage 3 (expansion, contraction, revision result) and Stage 4 (distribution,
    location, severity/measurement, comparison).

    Args:
        sub_correct: Correctness of every sub-question of the stage (none may be missing).

    Returns:
        True iff every sub-question is correct (False for an empty stage).
    """
    values = list(sub_correct)
    return bool(values) and all(values)
