"""Stage 04: error anatomy, how a run fails (``error_confusion.csv``, ``error_classes.csv``).

Reads each run's ``all_results.json`` records (the parsed answers Stage 03 stored: ``response``
/ ``responses`` as option numbers, ``"2"`` or ``"1,3"``, with their ``status``) and, for the
named error classes, a few facts of the benchmark's questions (:func:`load_error_facts`, from
``<benchmark-dir>/chexpercept.json`` and the revision-result option images). Definitions:
docs/metrics.md, "Error anatomy".

* :func:`analyse_errors` reads one run; :func:`confusion_rows` gives, per question (the
  dialogue's turn names, docs/evaluation_protocol.md, "Turn order"), a confusion table of the
  chosen vs the true option(s), per lesion and pooled (``lesion = all``). An answer that is
  not ``ok`` or names no option is its own column, :data:`NO_ANSWER`, never dropped.
* :func:`case_errors`: the named error classes (:data:`ERROR_CLASSES`) of each case, with the
  questions on which each class could occur (the denominator);
  :func:`error_class_rows` counts them per lesion x question x class with the Wilson interval
  of :func:`chexpercept.analysis.bootstrap.proportion_interval` (none for fewer than
  ``MIN_BOOTSTRAP_CASES`` cases: docs/metrics.md, "Small cells").
* A wrong revised mask's IoU bin needs two option images decoded; Stage 04 leaves those
  pending in each run's pass and measures every distinct pair once for all runs
  (:func:`resolve_mask_ious`).

Answers are read in the benchmark's option numbering (the numbering of ``ground_truth``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from chexpercept.analysis._workers import worker_pool
from chexpercept.analysis.bootstrap import proportion_interval
from chexpercept.analysis.case_table import REVISION_KEYS, STAGE_FIELDS
from chexpercept.errors import ChexperceptError
from chexpercept.files import read_json
from chexpercept.layouts import BenchmarkLayout
from chexpercept.lesions import LESIONS
from chexpercept.schema import ATTRIBUTE_KEYS
from utils.imaging import load_image

logger = logging.getLogger(__name__)

#: The chosen-option label of an answer that is not ``ok`` or names no option.
NO_ANSWER = "no answer"

#: Questions in dialogue order, as ``(turn name, all_results section, sub-question key)``;
#: the turn names are the dialogue's (docs/evaluation_protocol.md, "Turn order").
QUESTIONS: tuple[tuple[str, str, str | None], ...] = (
    (STAGE_FIELDS[1], STAGE_FIELDS[1], None),
    (STAGE_FIELDS[2], STAGE_FIELDS[2], None),
    *((f"{STAGE_FIELDS[3]}_{k}", STAGE_FIELDS[3], k) for k in REVISION_KEYS),
    *((f"{STAGE_FIELDS[4]}_{k}", STAGE_FIELDS[4], k) for k in ATTRIBUTE_KEYS),
)
QUESTION_NAMES: tuple[str, ...] = tuple(q for q, _, _ in QUESTIONS)
EXPANSION_Q = f"{STAGE_FIELDS[3]}_expansion"
CONTRACTION_Q = f"{STAGE_FIELDS[3]}_contraction"
REVISION_RESULT_Q = f"{STAGE_FIELDS[3]}_revision_result"
DISTRIBUTION_Q = f"{STAGE_FIELDS[4]}_distribution"
LOCATION_Q = f"{STAGE_FIELDS[4]}_location"
COMPARISON_Q = f"{STAGE_FIELDS[4]}_comparison"

#: Comparison options 2 and 3: "the left / the right lung lesion is larger"
#: (docs/benchmark_format.md, "JSON fields"; the release's fixed option order).
COMPARISON_LEFT, COMPARISON_RIGHT = 2, 3
#: IoU bins of a wrong revised mask, ``(class, lower bound)`` from the highest bin down; the
#: bounds are this project's choice (docs/metrics.md, "Error anatomy"), not the paper's.
IOU_BINS: tuple[tuple[str, float], ...] = (
    ("wrong_mask_iou_ge_0.90", 0.90),
    ("wrong_mask_iou_0.70_0.90", 0.70),
    ("wrong_mask_iou_0.50_0.70", 0.50),
    ("wrong_mask_iou_lt_0.50", 0.0),
)
WRONG_MASK_IOU_UNKNOWN = "wrong_mask_iou_unknown"
#: Every error class, in report order, with the questions it applies to.
ERROR_CLASSES: dict[str, tuple[str, ...]] = {
    "laterality_swap": (LOCATION_Q, COMPARISON_Q),
    "zone_count_off_by_one": (DISTRIBUTION_Q,),
    "zone_count_off_by_two_or_more": (DISTRIBUTION_Q,),
    "expansion_contraction_confusion": (EXPANSION_Q, CONTRACTION_Q),
    **{name: (REVISION_RESULT_Q,) for name, _ in IOU_BINS},
    WRONG_MASK_IOU_UNKNOWN: (REVISION_RESULT_Q,),
}
#: A pixel of a mask overlay: green and blue each at least this much above red (8-bit). The
#: overlays are cyan at 50 % opacity over a grey CXR, so an overlaid pixel has
#: G - R = B - R of about 128 and a plain CXR pixel 0 (docs/benchmark_format.md, "Image bundle").
OVERLAY_MIN_CYAN = 64

CONFUSION_COLUMNS: tuple[str, ...] = ("lesion", "question", "true", "chosen", "n")
CLASS_COLUMNS: tuple[str, ...] = ("lesion", "question", "error_class", "k", "n_cases",
                                  "value", "ci_low", "ci_high")

_SIDE = re.compile(r"\b(left|right)\b")


@dataclass(frozen=True)
class CaseFacts:
    """What the error classes need of one benchmark case (docs/benchmark_format.md).

    Attributes:
        lesion_sides: Sides (``left`` / ``right``) of the lung zones the lesion involves
            (``distribution.answer_zones``); empty when the case has no Stage 4.
        location_sides: Per location option (1-based order), the side of its lung zone, or None
            (the "None of the above" option).
        point_none: 1-based index of the "None" option of the point questions, or None.
        mask_images: Per revision-result option, its image path (absolute, from the
            benchmark folder), or () when the case has no revision-result question.
    """

    lesion_sides: frozenset[str] = frozenset()
    location_sides: tuple[str | None, ...] = ()
    point_none: int | None = None
    mask_images: tuple[str, ...] = ()


def option_side(text: str) -> str | None:
    """Side of a location option: the last ``left`` / ``right`` word of its text, or None.

    Location options end with their lung zone (``... and the right lower zone lung``, ``the
    left costophrenic angle``; docs/qa_generation.md, "Question types").
    """
    sides = _SIDE.findall(text.lower())
    return sides[-1] if sides else None


def case_facts(key_id: str, item: Mapping[str, Any], layout: BenchmarkLayout) -> CaseFacts:
    """:class:`CaseFacts` of one ``chexpercept.json`` item (already validated by Stage 04).

    Args:
        key_id: The case.
        item: Its JSON object.
        layout: The benchmark bundle (``<benchmark-dir>``); the option images are built by its
            one path rule (:meth:`chexpercept.layouts.BenchmarkLayout.case_file`).

    Returns:
        The facts; fields the item lacks stay empty.

    Raises:
        SchemaError: If an option image path leaves the bundle (a symbolic link out of it;
            names the key_id, the field and ``chexpercept.json``).
    """
    attrs = item.get("attribute_extraction_qa") or {}
    contour = item.get("contour_qa") or {}
    zones = (attrs.get("distribution") or {}).get("answer_zones") or []
    lesion_sides = frozenset(s for z in zones if (s := option_side(str(z))) is not None)
    location = (attrs.get("location") or {}).get("answer_options") or []
    location_sides = tuple(None if i == len(location) - 1 else option_side(str(t))
                           for i, t in enumerate(location))
    points = (contour.get("contour_revision_qa_expansion") or {}).get("answer_options") or []
    point_none = next((i for i, p in enumerate(points, start=1)
                       if isinstance(p, Mapping) and p.get("point") is None), None)
    masks = (contour.get("contour_revision_qa_revision_result") or {}).get("answer_options") or []
    mask_images = tuple(str(layout.option_image(key_id, str(m.get("relative_path", "")), i))
                        for i, m in enumerate(masks) if isinstance(m, Mapping))
    return CaseFacts(lesion_sides, location_sides, point_none, mask_images)


def load_error_facts(benchmark_dir: str | Path | None) -> dict[str, CaseFacts] | None:
    """:class:`CaseFacts` of every case of ``<benchmark_dir>/chexpercept.json``, or None.

    Stage 04 calls this only for a benchmark its chance loader validated; a missing or
    unreadable file gives one warning and None (the classes that need facts are then not
    counted: their denominators are 0).

    Args:
        benchmark_dir: The benchmark folder (``--benchmark-dir``), or None.

    Returns:
        key_id -> facts, or None.

    Raises:
        SchemaError: If an option image path leaves the bundle (:func:`case_facts`): a
            benchmark that names a file outside itself is refused, not skipped.
    """
    if benchmark_dir is None:
        return None
    path = Path(benchmark_dir) / "chexpercept.json"
    try:
        data = read_json(path)
    except ChexperceptError as exc:
        logger.warning("error anatomy: benchmark not available (%s): laterality, expansion/"
                       "contraction and revised-mask classes are not counted",
                       str(exc).splitlines()[0])
        return None
    if not isinstance(data, dict):
        return None
    layout = BenchmarkLayout(Path(benchmark_dir))
    return {str(k): case_facts(str(k), v, layout) for k, v in data.items()
            if isinstance(v, Mapping)}


def _mask(path: str) -> np.ndarray:
    """(H, W) bool: the cyan overlay pixels of an option image (:data:`OVERLAY_MIN_CYAN`)."""
    rgb = np.asarray(load_image(Path(path)).convert("RGB"), dtype=np.int16)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return ((g - r) >= OVERLAY_MIN_CYAN) & ((b - r) >= OVERLAY_MIN_CYAN)


def _read_mask(path: str) -> np.ndarray | str:
    """:func:`_mask`, or why it cannot be read (an unreadable image, no overlay pixel)."""
    try:
        mask = _mask(path)
    except ChexperceptError as exc:
        return str(exc).splitlines()[0]
    return mask if mask.any() else f"{path}: no cyan overlay pixel"


def _ious_against(true_image: str, chosen_images: Sequence[str]
                  ) -> list[tuple[float | None, str]]:
    """IoU of each chosen option's mask with the true option's, decoding each image once.

    Returns:
        Per chosen image ``(iou, "")``, or ``(None, reason)`` when it cannot be measured.
    """
    true = _read_mask(true_image)
    out: list[tuple[float | None, str]] = []
    for chosen_image in chosen_images:
        chosen = _read_mask(chosen_image)
        if isinstance(true, str) or isinstance(chosen, str):
            out.append((None, true if isinstance(true, str) else str(chosen)))
        elif chosen.shape != true.shape:
            out.append((None, f"{chosen_image} and {true_image} differ in size"))
        else:
            out.append((float((chosen & true).sum()) / int((chosen | true).sum()), ""))
    return out


def mask_iou(chosen_image: str, true_image: str) -> float | None:
    """IoU in [0, 1] of the masks drawn on two revision-result option images, or None.

    The masks are read back from the overlays (:data:`OVERLAY_MIN_CYAN`); the bundle stores
    mask stems, not the masks or their IoUs. None when an image cannot be read, the two differ
    in size, or either shows no overlay pixel (no mask could be read back).
    """
    return _ious_against(true_image, [chosen_image])[0][0]


def mask_ious(pairs: Iterable[tuple[str, str]], *, jobs: int = 1
              ) -> dict[tuple[str, str], float | None]:
    """:func:`mask_iou` of distinct ``(chosen image, true image)`` pairs, each image decoded once.

    A 1024 x 1024 option image takes tens of milliseconds to decode, so Stage 04 measures
    only the pairs some run chose, once for all runs, grouped by the true image and spread
    over ``jobs`` worker processes (the result does not depend on ``jobs``). One warning
    counts the pairs whose IoU is unknown and gives the first reason.

    Args:
        pairs: ``(chosen option image, true option image)`` paths.
        jobs: Worker processes (1: this process).

    Returns:
        pair -> IoU in [0, 1], or None (unknown).
    """
    groups: dict[str, list[str]] = {}
    for chosen, true in sorted(set(pairs)):
        groups.setdefault(true, []).append(chosen)
    trues = list(groups)
    if jobs > 1 and len(trues) > 1:
        with worker_pool(min(jobs, len(trues))) as pool:
            results = list(pool.map(_ious_against, trues, [groups[t] for t in trues],
                                    chunksize=max(1, len(trues) // (4 * jobs))))
    else:
        results = [_ious_against(t, groups[t]) for t in trues]
    out: dict[tuple[str, str], float | None] = {}
    reasons = []
    for true, measured in zip(trues, results, strict=True):
        for chosen, (iou, reason) in zip(groups[true], measured, strict=True):
            out[(chosen, true)] = iou
            if iou is None:
                reasons.append(reason)
    if reasons:
        logger.warning("error anatomy: the IoU of %d distinct chosen wrong revised mask(s) is "
                       "unknown (counted as %s), e.g. %s", len(reasons), WRONG_MASK_IOU_UNKNOWN,
                       reasons[0])
    return out


#: Option numbers of the common single-option answers, parsed once.
_SINGLE = {str(i): (i,) for i in range(1, 10)}


def _indices(value: Any) -> tuple[int, ...] | None:
    """Option numbers of a ground truth or a stored parsed answer (``2``, ``[1, 3]``, ``"1,3"``).

    Parsed JSON holds plain types, so exact type checks (no ``bool`` passes as an int).
    """
    kind = type(value)
    if kind is str:
        single = _SINGLE.get(value)
        if single is not None:
            return single
    elif kind is int:
        return (value,) if value >= 1 else None
    elif kind is list:
        out = [v for v in value if type(v) is int and v >= 1]
        return tuple(sorted(set(out))) if out and len(out) == len(value) else None
    if kind is str:
        parts = [p.strip() for p in value.split(",")]
        if parts and all(p.isdigit() and int(p) >= 1 for p in parts):
            return tuple(sorted({int(p) for p in parts}))
    return None


class Answer(NamedTuple):
    """One asked question of one case.

    Attributes:
        question: Turn name (:data:`QUESTION_NAMES`).
        true: 1-based option number(s) of the ground truth, ascending.
        chosen: The parsed answer's option number(s), or None (:data:`NO_ANSWER`).
        unreadable: The status is ``ok`` (or absent) but the stored text names no option.
    """

    question: str
    true: tuple[int, ...]
    chosen: tuple[int, ...] | None
    unreadable: bool = False


def case_answers(record: Mapping[str, Any]) -> list[Answer]:
    """The asked questions of one ``all_results.json`` record, in dialogue order.

    A question counts as asked when its block holds a ground truth and a ``correct`` flag. Its
    answer is None when its ``status`` is not ``ok`` or its stored answer names no option.
    """
    out = []
    for question, section, sub in QUESTIONS:  # parsed JSON: plain dicts only
        block = record.get(section)
        if type(block) is not dict or not block:
            continue
        if sub is None:
            flags, gt = block, block.get("ground_truth")
            reply = block.get("response", block.get("responses"))
        else:
            flags = block.get(sub)
            gts, replies = block.get("ground_truth"), block.get("responses")
            gt = gts.get(sub) if type(gts) is dict else None
            reply = replies.get(sub) if type(replies) is dict else None
        if type(flags) is not dict or "correct" not in flags:
            continue
        true = _indices(gt)
        if true is None:
            continue
        ok = flags.get("status", "ok") == "ok"
        chosen = _indices(reply) if ok else None
        out.append(Answer(question, true, chosen, ok and chosen is None))
    return out


def _label(option: tuple[int, ...] | None) -> str:
    return NO_ANSWER if option is None else ",".join(map(str, option))


def _iou_class(iou: float | None) -> str:
    if iou is None:
        return WRONG_MASK_IOU_UNKNOWN
    return next(name for name, low in IOU_BINS if iou >= low)


@dataclass
class CaseErrors:
    """The error classes of one case.

    Attributes:
        eligible: ``(question, class)`` pairs on which the class could occur (denominators).
        errors: The ``(question, class)`` pairs that occurred (a subset of ``eligible``).
        mask_pair: ``(chosen, true)`` option images of a wrong revised mask whose IoU bin is
            still to be measured (``case_errors(..., measure=False)``), else None.
    """

    eligible: list[tuple[str, str]] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    mask_pair: tuple[str, str] | None = None

    def add(self, question: str, name: str, occurred: bool) -> None:
        """Count one question for class ``name``; ``occurred``: the error happened."""
        self.eligible.append((question, name))
        if occurred:
            self.errors.append((question, name))

    @property
    def classes(self) -> set[str]:
        """Names of the classes that occurred."""
        return {name for _, name in self.errors}


def case_errors(answers: Sequence[Answer], facts: CaseFacts | None, *,
                measure: bool = True) -> CaseErrors:
    """The error classes of one case (definitions: docs/metrics.md, "Error anatomy").

    Args:
        answers: :func:`case_answers` of the case's record.
        facts: Its benchmark facts, or None (then only the classes that need none are counted:
            zone count and the comparison's laterality swap).
        measure: Measure a wrong revised mask's IoU now (:func:`mask_iou`); False leaves its
            bin open and records the two images in :attr:`CaseErrors.mask_pair` (every
            revision-result class is still counted in the denominators).

    Returns:
        The case's :class:`CaseErrors`.
    """
    out = CaseErrors()
    by_q = {a.question: a for a in answers}
    for a in answers:
        chosen = a.chosen
        if a.question == DISTRIBUTION_Q:
            off = abs(chosen[0] - a.true[0]) if chosen is not None and len(chosen) == 1 else 0
            out.add(a.question, "zone_count_off_by_one", off == 1)
            out.add(a.question, "zone_count_off_by_two_or_more", off >= 2)
        elif a.question == COMPARISON_Q and a.true[0] in (COMPARISON_LEFT, COMPARISON_RIGHT):
            other = COMPARISON_LEFT + COMPARISON_RIGHT - a.true[0]
            out.add(a.question, "laterality_swap", chosen == (other,))
        elif a.question == LOCATION_Q and facts is not None and len(facts.lesion_sides) == 1:
            (side,) = facts.lesion_sides
            sides = facts.location_sides
            if any(s is not None and s != side for s in sides):
                named = [sides[i - 1] if i <= len(sides) else None for i in chosen or ()]
                out.add(a.question, "laterality_swap",
                        bool(named) and all(s is not None and s != side for s in named))
        elif a.question in (EXPANSION_Q, CONTRACTION_Q) and facts is not None \
                and facts.point_none is not None:
            other = by_q.get(CONTRACTION_Q if a.question == EXPANSION_Q else EXPANSION_Q)
            other_points = set(other.true) - {facts.point_none} if other is not None else set()
            if other_points:
                out.add(a.question, "expansion_contraction_confusion",
                        bool(set(chosen or ()) & other_points))
        elif a.question == REVISION_RESULT_Q:
            wrong = chosen is not None and chosen != a.true
            name: str | None = WRONG_MASK_IOU_UNKNOWN
            if wrong and facts is not None and len(chosen) == 1 \
                    and max(chosen[0], a.true[0]) <= len(facts.mask_images):
                pair = (facts.mask_images[chosen[0] - 1], facts.mask_images[a.true[0] - 1])
                if measure:
                    name = _iou_class(mask_iou(*pair))
                else:
                    name, out.mask_pair = None, pair
            for cls, _ in (*IOU_BINS, (WRONG_MASK_IOU_UNKNOWN, 0.0)):
                out.add(a.question, cls, wrong and cls == name)
    return out


@dataclass
class ErrorAnatomy:
    """One run's error anatomy (:func:`analyse_errors`).

    Attributes:
        confusion: ``(lesion, question, true, chosen) -> n``, lesions :data:`LESIONS`
            (pooled rows are added when written).
        classes: ``(lesion, question, class) -> [k, n]``: errors and cases asked.
        case_classes: key_id -> the classes that occurred (cases with none left out).
        unreadable: Answers with an ``ok`` status whose stored text named no option.
        pending: key_id -> ``(chosen, true)`` option images of a wrong revised mask whose IoU
            bin :func:`resolve_mask_ious` has still to fill in (empty once resolved).
    """

    confusion: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    classes: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    case_classes: dict[str, set[str]] = field(default_factory=dict)
    unreadable: int = 0
    pending: dict[str, tuple[str, str]] = field(default_factory=dict)

    def resolve(self, ious: Mapping[tuple[str, str], float | None]) -> None:
        """Count each pending wrong revised mask in its IoU bin (``ious``: :func:`mask_ious`)."""
        for key_id, pair in self.pending.items():
            name = _iou_class(ious.get(pair))
            self.classes[(key_id.split("_", 1)[0], REVISION_RESULT_Q, name)][0] += 1
            self.case_classes.setdefault(key_id, set()).add(name)
        self.pending = {}


def resolve_mask_ious(anatomies: Iterable[ErrorAnatomy | None], *, jobs: int = 1) -> None:
    """Measure the pending wrong revised masks of every run at once and fill in their bins.

    The runs of one benchmark choose among the same option images, so each distinct pair is
    measured once for all runs (:func:`mask_ious`).

    Args:
        anatomies: The runs' error anatomies (None entries are skipped); changed in place.
        jobs: Worker processes for the measurements.
    """
    todo = [a for a in anatomies if a is not None and a.pending]
    if not todo:
        return
    ious = mask_ious((p for a in todo for p in a.pending.values()), jobs=jobs)
    for a in todo:
        a.resolve(ious)


def analyse_errors(records: Mapping[str, Any], key_ids: Iterable[str],
                   facts: Mapping[str, CaseFacts] | None, source: str | Path = "all_results",
                   *, measure: bool = True) -> ErrorAnatomy:
    """Confusion counts and error classes of the scored cases of one run.

    Args:
        records: The run's ``all_results.json`` (key_id -> record); only read.
        key_ids: The cases Stage 04 scored (its case table's, so ``--limit`` and unfinished
            cases are handled as in every other table).
        facts: :func:`load_error_facts`, or None.
        source: The file, named in the warning about unreadable stored answers.
        measure: Measure wrong revised masks' IoUs now (:func:`mask_ious`, in this process);
            False leaves them in :attr:`ErrorAnatomy.pending` for :func:`resolve_mask_ious`
            (Stage 04 measures them once for all runs).

    Returns:
        The run's :class:`ErrorAnatomy`.
    """
    out = ErrorAnatomy()
    for key_id in key_ids:
        record = records.get(key_id)
        if type(record) is not dict:
            continue
        lesion = key_id.split("_", 1)[0]
        answers = case_answers(record)
        for a in answers:
            key = (lesion, a.question, _label(a.true), _label(a.chosen))
            out.confusion[key] = out.confusion.get(key, 0) + 1
        out.unreadable += sum(a.unreadable for a in answers)
        errors = case_errors(answers, facts.get(key_id) if facts is not None else None,
                             measure=False)
        for question, name in errors.eligible:
            cell = out.classes.setdefault((lesion, question, name), [0, 0])
            cell[1] += 1
        for question, name in errors.errors:
            out.classes[(lesion, question, name)][0] += 1
        if errors.errors:
            out.case_classes[key_id] = errors.classes
        if errors.mask_pair is not None:
            out.pending[key_id] = errors.mask_pair
    if measure:
        resolve_mask_ious([out])
    if out.unreadable:
        logger.warning("%s: %d answer(s) with status ok store no option numbers (a release "
                       "file?): counted as '%s' in the error tables", source, out.unreadable,
                       NO_ANSWER)
    return out


def _option_key(label: str) -> tuple[int, tuple[int, ...]]:
    """Sort key of an option label: option numbers in order, :data:`NO_ANSWER` last."""
    return (1, ()) if label == NO_ANSWER else (0, tuple(int(p) for p in label.split(",")))


def confusion_rows(anatomy: ErrorAnatomy) -> list[dict[str, Any]]:
    """Rows of ``error_confusion.csv`` (:data:`CONFUSION_COLUMNS`): per lesion, then pooled.

    Rows: question (dialogue order) x lesion (:data:`LESIONS`, then ``all``) x true x chosen
    (option order, :data:`NO_ANSWER` last); only combinations that occurred.
    """
    pooled: dict[tuple[str, str, str, str], int] = {}
    for (_, q, t, c), n in anatomy.confusion.items():
        pooled[("all", q, t, c)] = pooled.get(("all", q, t, c), 0) + n
    cells = {**anatomy.confusion, **pooled}
    lesion_order = {le: i for i, le in enumerate((*LESIONS, "all"))}
    q_order = {q: i for i, q in enumerate(QUESTION_NAMES)}
    keys = sorted(cells, key=lambda k: (q_order[k[1]], lesion_order.get(k[0], len(LESIONS)),
                                        k[0], _option_key(k[2]), _option_key(k[3])))
    return [{"lesion": le, "question": q, "true": t, "chosen": c, "n": cells[(le, q, t, c)]}
            for le, q, t, c in keys]


def error_class_rows(anatomy: ErrorAnatomy) -> list[dict[str, Any]]:
    """Rows of ``error_classes.csv`` (:data:`CLASS_COLUMNS`): per lesion, then pooled.

    Each class and question it applies to, per lesion with cases asked and pooled
    (``lesion = all``, always written; NA rate without cases): ``k`` errors out of
    ``n_cases`` eligible questions, rate ``value = k / n_cases`` with its 95 % Wilson interval.
    Wrong revised masks still pending are measured first (:func:`resolve_mask_ious`).
    """
    resolve_mask_ious([anatomy])
    pooled: dict[tuple[str, str], list[int]] = {}
    for (_, q, name), (k, n) in anatomy.classes.items():
        cell = pooled.setdefault((q, name), [0, 0])
        cell[0] += k
        cell[1] += n
    rows = []
    for name, questions in ERROR_CLASSES.items():
        for q in questions:
            for lesion in (*LESIONS, "all"):
                k, n = (pooled.get((q, name), [0, 0]) if lesion == "all"
                        else anatomy.classes.get((lesion, q, name), [0, 0]))
                if lesion != "all" and n == 0:
                    continue
                rows.append(_class_row(lesion, q, name, k, n))
    return rows


def _class_row(lesion: str, question: str, name: str, k: int, n: int) -> dict[str, Any]:
    if n == 0:
        value = low = high = float("nan")
    else:
        lo, hi = proportion_interval(np.array([k]), np.array([n]))
        value, low, high = k / n, float(lo[0]), float(hi[0])
    return {"lesion": lesion, "question": question, "error_class": name, "k": k,
            "n_cases": n, "value": value, "ci_low": low, "ci_high": high}


def class_bits(classes: Iterable[str]) -> int:
    """Bit mask of error classes: bit i for the i-th class of :data:`ERROR_CLASSES`."""
    names = list(ERROR_CLASSES)
    return sum(1 << names.index(c) for c in set(classes))
