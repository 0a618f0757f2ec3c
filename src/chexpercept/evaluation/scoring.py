"""Stage 03: all-or-nothing scoring of parsed answers (docs/evaluation_protocol.md, "Scoring").

There is no partial credit. Single choice: the parsed option equals the ground truth.
Multi-select (expansion, contraction, location): the parsed set equals the ground-truth set.
Stage 3 is correct iff expansion, contraction and revision result are all correct; Stage 4 iff
all four attribute questions are. An answer whose status is not ``ok`` is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable

from chexpercept.evaluation.parsing import ParsedAnswer
from chexpercept.scoring import answer_correct


def is_correct(parsed: ParsedAnswer, ground_truth: int | Iterable[int], *,
               multi_select: bool) -> bool:
    """Whether one parsed answer is correct.

    Args:
        parsed: Output of :func:`~chexpercept.evaluation.parsing.parse_answer`.
        ground_truth: 1-based option index, or the indices of a multi-select answer.
        multi_select: Score by set equality (else exact single-option match).

    Returns:
        True only for an ``ok`` answer that matches exactly (``chexpercept.scoring``, the rule
        Stage 04 also recomputes stored flags with).
    """
    return answer_correct(parsed.answer, parsed.status, ground_truth, multi_select=multi_select)


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
