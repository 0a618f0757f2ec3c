"""Stage 04: the strict and judged readings of runs made with a judge (``judge_summary.csv``).

Reads the ``status``, ``judge`` and ``judge_audit`` fields Stage 03 writes into
``all_results.json`` with ``--judge`` (docs/parsing.md, "Judge model") and writes
``judge_summary.csv`` and the report's "Judge model" section (docs/metrics.md, "Strict and
judged readings").

- The **strict** reading (:func:`strict_results`) is the run as if it had no judge: every
  ``judged`` question becomes ``unparseable`` and wrong, with no answer, and its stage is
  scored again (a stage is correct only when all its questions are). Stage 03's oracle fires on
  this reading, so the strict reading is exactly what the run without a judge recorded; the
  end-to-end rows then stop the case's correct prefix at the judged question, as they stop it at
  any wrong one (Stage 03 never stops a dialogue on a wrong answer:
  docs/evaluation_protocol.md, "Turn order").
- The **judged** reading is the file as Stage 03 wrote it: a judged question is scored by the
  judge's answer.

The headline tables use the strict reading unless Stage 04 is given ``--judged``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chexpercept.analysis.bootstrap import proportion_interval
from chexpercept.analysis.release_tables import SETTINGS, RunMetrics
from utils.status import Status

#: The two readings, in report order.
READINGS: tuple[str, ...] = ("strict", "judged")
#: ``judge_summary.csv``.
JUDGE_CSV = "judge_summary.csv"
#: Its columns after the identity columns (docs/metrics.md, "Strict and judged readings").
JUDGE_COLUMNS: tuple[str, ...] = ("judge", "metric", "reading", "path", "setting", "stage",
                                  "value", "k", "n", "ci_low", "ci_high")
#: The result blocks of stages 1-4, in stage order.
STAGE_SECTIONS: tuple[str, ...] = ("detection_qa", "contour_evaluation_qa",
                                   "contour_revision_qa", "attribute_extraction_qa")
_JUDGED = Status.JUDGED


@dataclass(frozen=True)
class JudgeSummary:
    """What Stage 04 reports of one run made with a judge.

    Attributes:
        judge: The judge's ``PROVIDER:MODEL`` (the manifest's ``judge.model``; '' unknown).
        headline: The reading of the run's headline tables (``strict`` or ``judged``).
        readings: ``strict`` / ``judged`` -> the release tables under that reading.
        judged: Per stage 1-4, ``(judged questions, answered questions)`` of the scored cases.
        audited: Audited ``ok`` questions (``judge_audit``) of the scored cases.
        agreed: Of ``audited``, those whose judge answer equals the parser's.
    """

    judge: str
    headline: str
    readings: Mapping[str, RunMetrics]
    judged: tuple[tuple[int, int], ...]
    audited: int
    agreed: int


def _questions(case: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(stage 1-4, question result) of every answered question of a case result."""
    out = []
    for stage, section in enumerate(STAGE_SECTIONS, 1):
        block = case.get(section)
        if not isinstance(block, dict) or not block:
            continue
        if "status" in block:
            out.append((stage, block))
        else:
            out.extend((stage, v) for v in block.values()
                       if isinstance(v, dict) and "status" in v)
    return out


def has_judge(data: Any) -> bool:
    """Whether any question of a parsed ``all_results.json`` was read by a judge."""
    return isinstance(data, dict) and any(
        q.get("status") == _JUDGED or "judge" in q or "judge_audit" in q
        for case in data.values() if isinstance(case, dict) for _, q in _questions(case))


def _strict_case(case: dict[str, Any]) -> dict[str, Any]:
    """One case result in the strict reading (see the module docstring)."""
    if not any(q.get("status") == _JUDGED for _, q in _questions(case)):
        return case
    case = copy.deepcopy(case)
    for section in STAGE_SECTIONS:
        block = case.get(section)
        if not isinstance(block, dict) or not block:
            continue
        if block.get("status") == _JUDGED:
            block.update(status=Status.UNPARSEABLE, correct=False)
            for key in ("response", "responses"):
                if isinstance(block.get(key), str):
                    block[key] = ""
            continue
        subs = {k: v for k, v in block.items() if isinstance(v, dict) and "status" in v}
        changed = False
        for sub, result in subs.items():
            if result.get("status") == _JUDGED:
                result.update(status=Status.UNPARSEABLE, correct=False)
                if isinstance(block.get("responses"), dict) and sub in block["responses"]:
                    block["responses"][sub] = ""
                changed = True
        if changed:
            block["correct"] = all(v.get("correct") is True for v in subs.values())
    return case


def strict_results(data: Mapping[str, Any]) -> dict[str, Any]:
    """A parsed ``all_results.json`` in the strict reading: judged questions unparseable, wrong.

    Cases without a judged question are the same objects; the others are copies.
    """
    return {k: _strict_case(v) if isinstance(v, dict) else v for k, v in data.items()}


def judge_counts(data: Mapping[str, Any], key_ids: Sequence[str]
                 ) -> tuple[tuple[tuple[int, int], ...], int, int]:
    """Judged shares and audit agreement over the scored cases (``key_ids``).

    Returns:
        Per stage 1-4 ``(judged, answered)`` questions, the audited questions and those of them
        the judge read as the parser did.
    """
    judged, answered = [0] * 4, [0] * 4
    audited = agreed = 0
    for key_id in key_ids:
        case = data.get(key_id)
        if not isinstance(case, dict):
            continue
        for stage, q in _questions(case):
            answered[stage - 1] += 1
            judged[stage - 1] += q.get("status") == _JUDGED
            audit = q.get("judge_audit")
            if isinstance(audit, dict):
                audited += 1
                agreed += audit.get("agrees") is True
    return tuple(zip(judged, answered, strict=True)), audited, agreed


def agreement_interval(agreed: int, audited: int) -> tuple[float, float, float]:
    """Agreement ``agreed / audited`` and its 95 % interval (NaN for no audit).

    The interval is the project's proportion interval (``bootstrap.proportion_interval``:
    continuity-corrected Wilson, none below 10 audited replies; docs/metrics.md, "Small
    cells").
    """
    if audited == 0:
        return math.nan, math.nan, math.nan
    low, high = proportion_interval(np.array([agreed]), np.array([audited]))
    return agreed / audited, float(low[0]), float(high[0])


def judge_rows(summary: JudgeSummary) -> list[dict[str, Any]]:
    """The ``judge_summary.csv`` rows of one run, without the identity columns.

    ``acc`` (per reading, path, setting, stage: the release summary's accuracy), ``depth`` (per
    reading and path), ``share_judged`` (per stage and ``all``: judged of answered questions)
    and ``audit_agreement`` (with its proportion interval).
    """
    rows: list[dict[str, Any]] = []
    blank = {"k": None, "n": None, "ci_low": None, "ci_high": None}
    for reading in READINGS:
        metrics = summary.readings[reading]
        for row in metrics.summary:
            n = metrics.n_cases.get(row["path"])
            for stage in range(1, 5):
                rows.append({"judge": summary.judge, "metric": "acc", "reading": reading,
                             "path": row["path"], "setting": row["setting"], "stage": stage,
                             "value": row[f"acc(stage{stage})"], **blank, "n": n})
            if row["setting"] == SETTINGS[0]:
                rows.append({"judge": summary.judge, "metric": "depth", "reading": reading,
                             "path": row["path"], "setting": None, "stage": None,
                             "value": row["depth"], **blank, "n": n})
    total_k = sum(k for k, _ in summary.judged)
    total_n = sum(n for _, n in summary.judged)
    for stage, (k, n) in [*enumerate(summary.judged, 1), ("all", (total_k, total_n))]:
        rows.append({"judge": summary.judge, "metric": "share_judged", "reading": None,
                     "path": "all", "setting": None, "stage": stage,
                     "value": k / n if n else math.nan, **blank, "k": k, "n": n})
    value, low, high = agreement_interval(summary.agreed, summary.audited)
    rows.append({"judge": summary.judge, "metric": "audit_agreement", "reading": None,
                 "path": "all", "setting": None, "stage": "all", "value": value,
                 "k": summary.agreed, "n": summary.audited, "ci_low": low, "ci_high": high})
    return rows
