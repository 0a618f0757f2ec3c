"""Stage 04: per-case scoring and per-path metrics computed from ``all_results.json`` records.

Definitions follow original_release_spec.md section 6 (``accumulate_result_for_case``) and
paper_notes.md section 2.3, with two deliberate departures from the release:

- defect 12 (spec section 8): a stage the case should have reached (by its ``qa_path`` and
  lesion) whose result dict is empty or lacks ``correct`` counts as WRONG and ends the
  end-to-end prefix; the release skipped it, inflating end-to-end accuracy and depth;
- defect 31: a bucket with no cases is NaN (an empty CSV cell, "n/a" in plots), not 0.0.

Stage numbers are 1 (detection), 2 (contour evaluation), 3 (contour revision) and
4 (attribute extraction). All accuracies are fractions in [0, 1]; depth is a count of stages.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chexpercept.errors import InputError, SchemaError
from chexpercept.lesions import NO_ATTRIBUTE_LESIONS, QA_PATHS, lesion_from_key_id
from chexpercept.schema import (
    ATTRIBUTE_DETAIL_COLUMNS,
    ATTRIBUTE_KEYS,
    REVISION_DETAIL_COLUMNS,
    SUMMARY_COLUMNS,
    CaseResult,
)

logger = logging.getLogger(__name__)

#: Result-dict field of each stage, in dialogue order (spec section 6, ``stage_order``).
STAGE_FIELDS: dict[int, str] = {
    1: "detection_qa",
    2: "contour_evaluation_qa",
    3: "contour_revision_qa",
    4: "attribute_extraction_qa",
}

#: Stages each path asks (spec section 5.2 "Paths"; paper_notes.md section 1.2).
PATH_STAGES: dict[str, tuple[int, ...]] = {
    "revision_required": (1, 2, 3, 4),
    "revision_free": (1, 2, 4),
    "lesion_free": (1,),
}

#: The two rows per path (spec section 6): gated prefix accuracy and raw per-stage accuracy.
SETTINGS: tuple[str, str] = ("end_to_end", "oracle_passed")

#: Contour-revision sub-questions reported for revision-required cases (oracle view).
REVISION_KEYS: tuple[str, ...] = ("expansion", "contraction", "revision_result")

#: ``path`` cell of the two detail CSVs (spec section 6).
REVISION_DETAIL_PATH = "revision_required"
ATTRIBUTE_DETAIL_PATH = "revision_required+revision_free"


def expected_stages(qa_path: str, lesion: str) -> tuple[int, ...]:
    """Stages a case of ``qa_path`` and ``lesion`` is asked, in order.

    RR = 1-4, RF = 1, 2, 4, LF = 1; cardiomegaly has no stage 4 (spec section 5.2).

    Args:
        qa_path: One of ``lesions.QA_PATHS``.
        lesion: One of ``lesions.LESIONS``.

    Returns:
        Stage numbers in dialogue order.

    Raises:
        InputError: If ``qa_path`` is unknown.
    """
    if qa_path not in PATH_STAGES:
        raise InputError(f"unknown qa_path '{qa_path}'; expected one of {', '.join(QA_PATHS)}")
    stages = PATH_STAGES[qa_path]
    if lesion in NO_ATTRIBUTE_LESIONS:
        stages = tuple(s for s in stages if s != 4)
    return stages


@dataclass(frozen=True)
class CaseScore:
    """Scores of one case.

    Attributes:
        key_id: The case id.
        qa_path: ``revision_required`` / ``revision_free`` / ``lesion_free``.
        lesion: Lesion parsed from the key_id.
        stages: Stages the case should have reached (:func:`expected_stages`).
        oracle: Stage -> the stage's own ``correct`` flag (False when missing).
        e2e: Stage -> correct AND every earlier expected stage correct.
        depth: Length of the correct prefix, +1 for cardiomegaly RR/RF cases whose last
            stage is end-to-end correct, so the maximum is 4 (RR), 3 (RF), 1 (LF)
            (spec section 6; paper_notes.md section 2.3).
        missing: Expected stages whose result dict was empty or lacked ``correct``
            (counted wrong; release defect 12).
        revision_detail: RR only: ``expansion``/``contraction``/``revision_result`` flags.
        attribute_detail: RR/RF with a stage 4 only: the four attribute flags.
    """

    key_id: str
    qa_path: str
    lesion: str
    stages: tuple[int, ...]
    oracle: dict[int, bool]
    e2e: dict[int, bool]
    depth: int
    missing: tuple[int, ...] = ()
    revision_detail: dict[str, bool] | None = None
    attribute_detail: dict[str, bool] | None = None


def _flag(block: Mapping[str, Any], where: str, problems: list[str]) -> bool | None:
    """The ``correct`` flag of a result block: True/False, None when absent."""
    if not isinstance(block, Mapping) or "correct" not in block:
        return None
    value = block["correct"]
    if not isinstance(value, bool):
        problems.append(f"{where}.correct: expected true/false, found {value!r}")
        return None
    return value


def score_case(result: CaseResult) -> CaseScore:
    """Score one validated ``all_results.json`` record.

    Args:
        result: One record (``schema.CaseResult``).

    Returns:
        The case's :class:`CaseScore`.

    Raises:
        InputError: If the key_id does not start with a lesion name.
        SchemaError: If a ``correct`` flag is not a boolean (naming key_id and field).
    """
    key_id = result.key_id
    lesion = lesion_from_key_id(key_id)
    stages = expected_stages(result.qa_path, lesion)
    problems: list[str] = []
    oracle: dict[int, bool] = {}
    e2e: dict[int, bool] = {}
    missing: list[int] = []
    prefix_ok = True
    depth = 0
    for stage in stages:
        name = STAGE_FIELDS[stage]
        flag = _flag(getattr(result, name), f"{key_id}: {name}", problems)
        if flag is None:
            missing.append(stage)
        correct = bool(flag)
        oracle[stage] = correct
        prefix_ok = prefix_ok and correct
        e2e[stage] = prefix_ok
        depth += int(prefix_ok)
    if lesion in NO_ATTRIBUTE_LESIONS and result.qa_path != "lesion_free" and e2e[stages[-1]]:
        depth += 1

    revision_detail = None
    if 3 in stages:
        block = result.contour_revision_qa
        revision_detail = {}
        for key in REVISION_KEYS:
            sub = block.get(key, {}) if isinstance(block, Mapping) else {}
            revision_detail[key] = bool(_flag(sub, f"{key_id}: contour_revision_qa.{key}",
                                              problems))
    attribute_detail = None
    if 4 in stages:
        block = result.attribute_extraction_qa
        attribute_detail = {}
        for key in ATTRIBUTE_KEYS:
            sub = block.get(key, {}) if isinstance(block, Mapping) else {}
            attribute_detail[key] = bool(_flag(sub, f"{key_id}: attribute_extraction_qa.{key}",
                                               problems))
    if problems:
        raise SchemaError("; ".join(problems))
    return CaseScore(key_id=key_id, qa_path=result.qa_path, lesion=lesion, stages=stages,
                     oracle=oracle, e2e=e2e, depth=depth, missing=tuple(missing),
                     revision_detail=revision_detail, attribute_detail=attribute_detail)


def _mean(values: Sequence[bool | int | float]) -> float:
    """Mean of ``values``; NaN for an empty bucket (defect 31), never 0.0."""
    return float(sum(values)) / len(values) if values else math.nan


@dataclass(frozen=True)
class RunMetrics:
    """Metrics of one evaluation run (one model folder, one oracle setting).

    Rows are dicts keyed by the schema's CSV columns; accuracy values are floats in [0, 1]
    (NaN for an empty bucket), ``depth`` is a mean count of stages in [0, 4].

    Attributes:
        model: The run folder name ``<provider>_<model>[_no_thinking]`` (defect 31: unique
            across providers).
        summary: 6 rows, paths {revision_required, revision_free, lesion_free} x settings
            {end_to_end, oracle_passed}; columns ``schema.SUMMARY_COLUMNS``.
        revision_detail: 1 row; columns ``schema.REVISION_DETAIL_COLUMNS``.
        attribute_detail: 1 row; columns ``schema.ATTRIBUTE_DETAIL_COLUMNS``.
        n_cases: Cases per path.
        n_missing: Expected stage results that were empty/lacked ``correct`` (counted wrong).
    """

    model: str
    summary: list[dict[str, Any]]
    revision_detail: list[dict[str, Any]]
    attribute_detail: list[dict[str, Any]]
    n_cases: dict[str, int] = field(default_factory=dict)
    n_missing: int = 0


def summarize(scores: Iterable[CaseScore], model: str) -> RunMetrics:
    """Aggregate case scores into the release's three tables (spec section 6 "Metrics").

    ``acc(stageK)`` is the mean over the path's cases that are asked stage K; the
    ``end_to_end`` row uses the gated flags, the ``oracle_passed`` row the stages' own flags
    (so stage 1 is the same in both); ``depth`` is the path's mean depth in both rows.

    Args:
        scores: Case scores of one run.
        model: Value of the ``model`` column (the run folder name).

    Returns:
        The run's :class:`RunMetrics`.
    """
    scores = list(scores)
    by_path = {p: [s for s in scores if s.qa_path == p] for p in QA_PATHS}
    summary: list[dict[str, Any]] = []
    for path in QA_PATHS:
        cases = by_path[path]
        depth = _mean([s.depth for s in cases])
        for setting in SETTINGS:
            row: dict[str, Any] = {"path": path, "model": model, "setting": setting}
            for stage in STAGE_FIELDS:
                flags = [(s.e2e if setting == "end_to_end" else s.oracle)[stage]
                         for s in cases if stage in s.stages]
                row[f"acc(stage{stage})"] = _mean(flags)
            row["depth"] = depth
            summary.append(row)
    rr = [s.revision_detail for s in scores if s.revision_detail is not None]
    revision = {"path": REVISION_DETAIL_PATH, "model": model}
    for key in REVISION_KEYS:
        revision[f"acc({key})"] = _mean([d[key] for d in rr])
    attr = [s.attribute_detail for s in scores if s.attribute_detail is not None]
    attribute = {"path": ATTRIBUTE_DETAIL_PATH, "model": model}
    for key in ATTRIBUTE_KEYS:
        attribute[f"acc({key})"] = _mean([d[key] for d in attr])
    for row, columns in ((summary[0], SUMMARY_COLUMNS), (revision, REVISION_DETAIL_COLUMNS),
                         (attribute, ATTRIBUTE_DETAIL_COLUMNS)):
        if tuple(row) != tuple(columns):  # pragma: no cover - guards the schema constants
            raise SchemaError(f"internal: row keys {tuple(row)} != columns {tuple(columns)}")
    return RunMetrics(model=model, summary=summary, revision_detail=[revision],
                      attribute_detail=[attribute],
                      n_cases={p: len(by_path[p]) for p in QA_PATHS},
                      n_missing=sum(len(s.missing) for s in scores))
