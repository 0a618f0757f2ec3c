"""Stage 04: recompute each ``correct`` flag of ``all_results.json``.

Stage 04 never trusts a stored flag (docs/metrics.md, "Recomputed correctness"). Each
question result that carries a ``status`` (Stage 03 of this project wrote it) is scored again
from its parsed answer (``response`` / ``responses``, in original option numbers under every
``--option-order``) and the answer key, by the rule Stage 03 used
(:func:`chexpercept.scoring.answer_correct`). The answer key is the bundle's when Stage 04 has
the bundle the run was made on (:func:`load_answer_keys`; :func:`bundle_sha256` is checked
against the run manifest's ``benchmark_json_sha256``), else the block's stored
``ground_truth``. A ``judged`` question is scored by the judge's answer it stores (the strict
reading is derived later, ``judge_report.strict_results``); any status but ``ok`` or
``judged`` must be wrong. A stage's flag must equal all of its sub-questions', and a circular
run's ``circular_correct`` can be true only where ``correct`` is. A release-format question
(no ``status``) keeps its flag: what the release parsed is not known.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from chexpercept.errors import SchemaError
from chexpercept.files import read_json
from chexpercept.layouts import key_id_problem
from chexpercept.schema import ATTRIBUTE_KEYS, MULTI_SELECT, BenchmarkItem
from chexpercept.scoring import answer_correct
from utils.errors import ChexperceptError
from utils.status import Status

logger = logging.getLogger(__name__)

#: An answer key: question name (``detection_qa``, ``contour_evaluation_qa``, a revision or
#: attribute sub-question) -> 1-based option index or sorted indices (multi-select).
AnswerKey = dict[str, int | tuple[int, ...]]
#: Revision sub-questions and their benchmark fields.
_REVISION = {"expansion": "contour_revision_qa_expansion",
             "contraction": "contour_revision_qa_contraction",
             "revision_result": "contour_revision_qa_revision_result"}
#: Blocks holding sub-questions, and their sub-question keys.
_SUB_BLOCKS = {"contour_revision_qa": tuple(_REVISION), "attribute_extraction_qa": ATTRIBUTE_KEYS}
#: Single-question blocks and their answer field (the release's two spellings).
_SINGLE_BLOCKS = {"detection_qa": "response", "contour_evaluation_qa": "responses"}
#: Multi-select questions by their ``all_results.json`` name.
_MULTI = frozenset({"expansion", "contraction", "location"})
#: Statuses whose stored answer is scored (a ``judged`` answer is the judge's reading).
_SCORED = (Status.OK, Status.JUDGED)
#: Problems listed in one error (the count says how many there are in all).
_SHOWN = 20


def bundle_sha256(benchmark_dir: str | Path) -> str | None:
    """sha256 (hex) of ``<benchmark_dir>/chexpercept.json`` (Stage 03's); None: no file."""
    path = Path(benchmark_dir) / "chexpercept.json"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _gt(value: Any) -> int | tuple[int, ...]:
    return value if isinstance(value, int) else tuple(sorted(int(i) for i in value))


def answer_key(item: BenchmarkItem) -> AnswerKey:
    """The answer key of one benchmark item (``answer_index`` of each question it has)."""
    key: AnswerKey = {"detection_qa": _gt(item.detection_qa.answer_index)}
    cq = item.contour_qa
    if cq is not None:
        key["contour_evaluation_qa"] = _gt(cq.contour_eval_qa.answer_index)
        for sub, name in _REVISION.items():
            qa = getattr(cq, name)
            if qa is not None:
                key[sub] = _gt(qa.answer_index)
    aq = item.attribute_extraction_qa
    if aq is not None:
        for sub, qa in (("distribution", aq.distribution), ("location", aq.location),
                        ("severity/measurement", aq.severity_measurement),
                        ("comparison", aq.comparison)):
            key[sub] = _gt(qa.answer_index)
    return key


def load_answer_keys(benchmark_dir: str | Path | None) -> dict[str, AnswerKey] | None:
    """key_id -> :func:`answer_key` of ``<benchmark_dir>/chexpercept.json``; None if unavailable.

    Items are validated one at a time as ``schema.BenchmarkItem`` (the bundle reader's model);
    a missing or invalid file gives None (the chance loader has warned about it).
    """
    if benchmark_dir is None:
        return None
    try:
        data = read_json(Path(benchmark_dir) / "chexpercept.json")
        if not isinstance(data, dict):
            return None
        return {k: answer_key(BenchmarkItem.model_validate(v)) for k, v in data.items()}
    except (ChexperceptError, ValidationError):
        return None


def _answer(value: Any) -> tuple[int, ...] | None:
    """A stored parsed answer (``"2"``, ``"1,3"``, ``""``, a list) as indices; None: unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return (value,)
    if isinstance(value, list):
        return tuple(sorted(value)) if all(type(i) is int for i in value) else None
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")] if value.strip() else []
        return tuple(sorted(int(p) for p in parts)) if all(p.isdigit() for p in parts) else None
    return None


def _questions(record: Mapping[str, Any]) -> Iterator[tuple[str, str, dict, Any, Any]]:
    """(where, question name, result dict, stored answer, stored ground truth) of each question."""
    for block_name, field in _SINGLE_BLOCKS.items():
        block = record.get(block_name)
        if isinstance(block, dict) and "status" in block:
            yield block_name, block_name, block, block.get(field), block.get("ground_truth")
    for block_name, subs in _SUB_BLOCKS.items():
        block = record.get(block_name)
        if not isinstance(block, dict):
            continue
        answers, truths = block.get("responses"), block.get("ground_truth")
        for sub in subs:
            result = block.get(sub)
            if isinstance(result, dict) and "status" in result:
                yield (f"{block_name}.{sub}", sub, result,
                       answers.get(sub) if isinstance(answers, dict) else None,
                       truths.get(sub) if isinstance(truths, dict) else None)


def _flag(value: Any) -> str:
    return "true" if value is True else "false" if value is False else repr(value)


class _Case:
    """The recomputation of one record: its new flags and what disagrees with the stored ones."""

    def __init__(self, key_id: str, record: Mapping[str, Any], key: AnswerKey | None) -> None:
        self.key_id = key_id
        self.problems: list[str] = []  # cannot be recomputed (always an error)
        self.disagree: list[str] = []  # stored flag or ground truth differs from the recomputed
        self.flags: dict[str, bool] = {}  # where -> recomputed correct
        self.truths: dict[str, int | tuple[int, ...]] = {}  # where -> the key's ground truth
        for where, name, result, answer, stored_gt in _questions(record):
            self._question(where, name, result, answer, stored_gt, key)
        for block_name, subs in _SUB_BLOCKS.items():
            block = record.get(block_name)
            wheres = [f"{block_name}.{s}" for s in subs if isinstance(block, dict) and s in block]
            if wheres and all(w in self.flags for w in wheres):  # every sub-question scored
                self._compare(block_name, block.get("correct"),
                              all(self.flags[w] for w in wheres), "all its sub-questions")

    def _compare(self, where: str, stored: Any, correct: bool, why: str) -> None:
        self.flags[where] = correct
        if stored is not correct:
            self.disagree.append(f"{self.key_id}: {where}: stored correct {_flag(stored)}, "
                                 f"recomputed {_flag(correct)} ({why})")

    def _question(self, where: str, name: str, result: dict, answer: Any, stored_gt: Any,
                  key: AnswerKey | None) -> None:
        status = result.get("status")
        if key is not None:
            if name not in key:
                self.problems.append(f"{self.key_id}: {where}: the bundle has no such question")
                return
            gt = key[name]
            if stored_gt is not None and _gt_or_none(stored_gt) != gt:
                self.truths[where] = gt
                self.disagree.append(f"{self.key_id}: {where}: stored ground_truth "
                                     f"{stored_gt!r}, the bundle's answer key {_text(gt)}")
        else:
            gt = _gt_or_none(stored_gt)
            if gt is None:
                self.problems.append(f"{self.key_id}: {where}: no ground_truth to score against "
                                     f"(found {stored_gt!r})")
                return
        multi = name in _MULTI or name in MULTI_SELECT
        if status in _SCORED:
            indices = _answer(answer)
            if indices is None:
                self.problems.append(f"{self.key_id}: {where}: status {status} but the parsed "
                                     f"answer {answer!r} is not a list of option numbers")
                return
            try:
                correct = answer_correct(indices, Status.OK, gt, multi_select=multi)
            except TypeError:
                self.problems.append(f"{self.key_id}: {where}: ground truth {gt!r} of a "
                                     f"single-choice question is not one option")
                return
            why = f"answer {answer!r} vs answer key {_text(gt)}"
        else:
            correct, why = False, f"status {status}: no answer"
        self._compare(where, result.get("correct"), correct, why)
        if result.get("circular_correct") is True and not correct:
            self.disagree.append(f"{self.key_id}: {where}: stored circular_correct true, but the "
                                 f"question itself is wrong ({why})")


def _gt_or_none(value: Any) -> int | tuple[int, ...] | None:
    try:
        return None if isinstance(value, bool) else _gt(value)
    except (TypeError, ValueError):
        return None


def _text(gt: int | tuple[int, ...]) -> str:
    return str(gt) if isinstance(gt, int) else "[" + ", ".join(map(str, gt)) + "]"


def _rewritten(record: Mapping[str, Any], case: _Case) -> dict[str, Any]:
    """A copy of ``record`` holding the recomputed flags and the key's ground truths."""
    out = dict(record)
    for where, correct in case.flags.items():
        block_name, _, sub = where.partition(".")
        block = out[block_name] = dict(out[block_name])
        result = block
        if sub:
            result = block[sub] = dict(block[sub])
            if where in case.truths and isinstance(block.get("ground_truth"), dict):
                truths = block["ground_truth"] = dict(block["ground_truth"])
                truths[sub] = _json_gt(case.truths[where])
        elif where in case.truths:
            block["ground_truth"] = _json_gt(case.truths[where])
        result["correct"] = correct
        if "circular_correct" in result:
            result["circular_correct"] = bool(result["circular_correct"]) and correct
    return out


def _json_gt(gt: int | tuple[int, ...]) -> int | list[int]:
    return gt if isinstance(gt, int) else list(gt)


def rescore_results(data: Any, path: str | Path, answer_keys: Mapping[str, AnswerKey] | None,
                    *, other_bundle: bool = False) -> Any:
    """Recompute the ``correct`` flags of a parsed ``all_results.json`` (module docstring).

    Args:
        data: The parsed file (key_id -> record); not modified. Anything but a JSON object is
            returned as it is (the case-table reader words that error).
        path: The file (named in the error).
        answer_keys: :func:`load_answer_keys` of the run's bundle; None: each block's stored
            ``ground_truth`` is the answer key.
        other_bundle: The keys are of another bundle than the run's (``--allow-other-bundle``):
            the recomputed flags (and the keys' ground truths) replace the stored ones instead
            of a disagreement being an error.

    Returns:
        ``data`` itself when every stored flag agrees; with ``other_bundle``, a copy in which
        the records that disagree are rewritten.

    Raises:
        SchemaError: Naming ``path``, and every key_id and question block whose stored flag
            (or ground truth) disagrees with the recomputed one, unless ``other_bundle``, or
            that cannot be recomputed (an unreadable answer, a case or question the bundle
            lacks).
    """
    if not isinstance(data, dict):
        return data
    problems: list[str] = []
    disagree: list[str] = []
    rewritten: dict[str, dict[str, Any]] = {}
    for key_id, record in data.items():
        unsafe = key_id_problem(key_id)
        if unsafe is not None:  # a path-like key_id is refused by name (layouts), first
            problems.append(f"key_id {key_id!r} {unsafe}")
            continue
        if not isinstance(record, dict):
            continue
        key = None if answer_keys is None else answer_keys.get(key_id)
        if answer_keys is not None and key is None:
            if any(True for _ in _questions(record)):
                problems.append(f"{key_id}: not in the bundle's chexpercept.json")
            continue
        case = _Case(key_id, record, key)
        problems.extend(case.problems)
        if case.disagree:
            disagree.extend(case.disagree)
            rewritten[key_id] = _rewritten(record, case)
    if other_bundle and not problems:
        if rewritten:
            logger.warning("%s: %d case(s) rescored against the other bundle's answer keys "
                           "(--allow-other-bundle), e.g. %s", path, len(rewritten), disagree[0])
        return {k: rewritten.get(k, r) for k, r in data.items()} if rewritten else data
    problems.extend(disagree)
    if problems:
        against = ("the bundle's answer keys" if answer_keys is not None
                   else "the ground_truth stored in each block")
        raise SchemaError(
            f"{path}: {len(problems)} stored correct flag(s) disagree with the correctness "
            f"Stage 04 recomputes from each turn's parsed answer and {against} (the file was "
            f"edited, or the run was scored against other answer keys; re-run Stage 03, which "
            f"rebuilds all_results.json from records.jsonl, or pass the run's own bundle with "
            f"--benchmark-dir):\n  " + "\n  ".join(problems[:_SHOWN])
            + (f"\n  ... and {len(problems) - _SHOWN} more" if len(problems) > _SHOWN else ""))
    return data
