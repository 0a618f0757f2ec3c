"""Core: schemas of every artifact that crosses a stage boundary.

Stages meet only through these on-disk artifacts:

- 00 -> 01/02: labeling sheets (CSV columns below) and candidate masks;
- 01 -> 02: ``deformation_results.json`` (:class:`DeformationCase`) + ``deformed_masks/``;
- 02 -> 03: ``chexpercept.json`` (:class:`BenchmarkItem`) + the image bundle;
- 03 -> 04: ``all_results.json`` (:class:`CaseResult`).

Field names follow the original release exactly (each artifact's page is listed in
docs/README.md).
Models that read released files allow extra fields (the release has optional extras such as
``revision_sequential_qa``). The config file's schema is :mod:`chexpercept.config_schema`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)

from chexpercept.errors import SchemaError
from chexpercept.layouts import key_id_problem, relative_path_problem
from utils.status import ANSWER_STATUSES

# ======================================================================================
# Stage 00 labeling sheets (docs/curation.md, "Annotation sheets" and "Review semantics")
# ======================================================================================

OPTIMAL_COLUMN = "optimal?"
POSITIVE_PART_SHEET_COLUMNS = ("key_id", "dicom_id", "target", "pair_id", "mapped_location",
                               "segmentation_source", "optimal?", "plot_path")
POSITIVE_SHEET_COLUMNS = ("key_id", "dicom_id", "target", "pair_id", "mapped_location",
                          "segmentation_source", "plot_path", "optimal?")
NEGATIVE_SHEET_COLUMNS = ("lesion", "key_id", "dicom_id", "optimal?")
QA_LABELING_COLUMNS = ("plot_name", "qa_type", "key_id", "lesion_name", "pair_id", "dicom_id")

_ACCEPT = {"y", "yes", "1", "true"}
_REJECT = {"n", "no", "0", "false"}


def parse_optimal(value: Any) -> bool | None:
    """Read one ``optimal?`` cell strictly (docs/differences.md D9).

    Returns:
        True for y/yes/1/true, False for n/no/0/false (case-insensitive, stripped), None for a
        blank cell (not yet reviewed).

    Raises:
        ValueError: For anything else.
    """
    text = "" if value is None else str(value).strip().lower()
    if text in ("", "nan"):
        return None
    if text in _ACCEPT:
        return True
    if text in _REJECT:
        return False
    raise ValueError(f"invalid optimal? value {value!r}")


def accepted_key_ids(rows: Sequence[Mapping[str, str]], path: str | Path) -> list[str]:
    """key_ids whose ``optimal?`` (or legacy ``optimal``) cell accepts the case, in sheet order.

    Blank cells (not reviewed) and rejections are left out. Every invalid cell is collected and
    reported at once.

    Raises:
        SchemaError: Listing each bad row (1-based data row number, key_id, value).
    """
    if not rows:
        return []
    column = "optimal" if "optimal" in rows[0] else OPTIMAL_COLUMN
    if column not in rows[0] or "key_id" not in rows[0]:
        raise SchemaError(f"{path}: needs columns 'key_id' and '{OPTIMAL_COLUMN}'")
    accepted, bad = [], []
    for i, row in enumerate(rows, start=1):
        try:
            verdict = parse_optimal(row.get(column))
        except ValueError:
            bad.append(f"row {i} (key_id {row.get('key_id')}): {row.get(column)!r}")
            continue
        if verdict:
            accepted.append(row["key_id"])
    if bad:
        raise SchemaError(
            f"{path}: invalid '{column}' values (use y/yes/1/true to accept, n/no/0/false to "
            f"reject, blank for not reviewed): " + "; ".join(bad)
        )
    return accepted


# ======================================================================================
# Stage 01 -> 02: deformation_results.json (docs/deformation.md, "Outputs")
# ======================================================================================


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


def _inside_case_folder(text: str) -> str:
    """``text`` if it is a relative path inside its folder, else ValueError (the one rule)."""
    problem = relative_path_problem(text)
    if problem is not None:
        raise ValueError(f"{text!r} {problem}")
    return text


RelativePath = Annotated[str, AfterValidator(_inside_case_folder)]
"""A file a bundle names: relative, inside its folder (docs/benchmark_format.md, "Paths a bundle
names"; :func:`chexpercept.layouts.relative_path_problem`)."""


Point = list[int]
"""(x, y) pixel coordinates in the 1024x1024 frame."""


class LungOverlap(_Open):
    """Overlap of one lesion component with one lung (``has_overlap`` iff ratio >= 0.01)."""

    has_overlap: bool
    overlap_ratio: float
    size: int


class RegionOverlap(_Open):
    """Overlap with a zone or lung region (``has_overlap`` iff ratio >= 0.2, best promoted)."""

    has_overlap: bool
    overlap_ratio: float


class ComponentOverlap(_Open):
    """``overlap`` block of one optimal component."""

    left_lung: LungOverlap = Field(alias="left lung")
    right_lung: LungOverlap = Field(alias="right lung")
    zones: dict[str, RegionOverlap]
    lung_regions: dict[str, RegionOverlap] | None = None


class GeometricalMaskInfo(_Open):
    """One ``geometrical_mask_infos`` entry: geometry of optimal component ``mask_component_id``."""

    mask_component_id: str
    overlap: ComponentOverlap


class FakeMaskRef(_Open):
    """``{org_mask, fake_mask}`` stems of a distractor mask."""

    org_mask: str
    fake_mask: str


class StepEntry(_Open):
    """One verified deformation step (element of ``qa_deformation_results[op][sid]``).

    ``revision`` is the opposite of the step's deformation; ``revision_flow`` links the step's
    mask (``before revision``) to the mask it was made from (``after revision``).
    """

    suboptimal_component_id: str
    exp_idx: int | None = None
    cont_idx: int | None = None
    anatomy: str
    points: list[Point]
    mask_path: str
    center_point: Point
    fake_masks: list[FakeMaskRef] = []
    fake_points_expansion: list[Point] = []
    fake_points_contraction: list[Point] = []
    revision: Literal["expansion", "contraction"]
    revision_flow: dict[str, str]


class NoDeformationEntry(_Open):
    """A component left as is: ``mask_path`` = ``<sid>_no_contraction`` (holds the optimal mask)."""

    suboptimal_component_id: str
    mask_path: str


class QADeformationResults(_Open):
    """``qa_deformation_results``: steps per operation and component."""

    expansion: dict[str, list[StepEntry]] = {}
    contraction: dict[str, list[StepEntry]] = {}
    no_deformation: dict[str, list[NoDeformationEntry]] = {}


class DeformationCase(_Open):
    """One value of ``deformation_results.json`` (keyed by key_id)."""

    org_deformation_results: dict[str, Any]
    qa_deformation_results: QADeformationResults | None
    geometrical_mask_infos: list[GeometricalMaskInfo]
    qa_deformation_success: bool
    dicom_id: str | None = None
    """Our addition (not in the release): saves Stage 02 a sheet lookup."""


# ======================================================================================
# Stage 02 -> 03: chexpercept.json (docs/benchmark_format.md, "JSON fields")
# ======================================================================================


class MCQuestion(_Open):
    """A single-answer multiple-choice question; ``answer_index`` is 1-based."""

    question: str
    answer_options: list[str]
    answer: str
    answer_index: int


class ContourEvalQA(MCQuestion):
    """Stage 2; ``relative_path`` is relative to ``<key_id>/contour_qa/``."""

    relative_path: RelativePath


class PointOption(_Open):
    """A coloured point option; the last option is ``{"point": null, "color": "None"}``."""

    point: Point | None
    color: str


class PointQA(_Open):
    """Stage 3 expansion/contraction: multi-select over points; ``answer_index`` is a list."""

    question: str
    answer_options: list[PointOption]
    answer: str
    answer_index: list[int]


class MaskOption(_Open):
    """A revision-result option; ``relative_path`` is under ``contour_qa/contour_revision_qa/``."""

    type: Literal["true", "fake"]
    masks: list[str]
    relative_path: RelativePath


class RevisionResultQA(_Open):
    """Stage 3 "which revised mask is correct" (single choice)."""

    question: str
    answer_options: list[MaskOption]
    answer: str
    answer_index: int


class ContourQA(_Open):
    """``contour_qa`` of a positive case.

    The three revision questions are present for revision-required cases; the release also
    writes them for revision-free cases (not rendered, not asked), so they are optional here.
    """

    no_deformation: bool
    initial_context: str | None = None
    revision_before_masks: list[str] = []
    revision_after_masks: list[str] = []
    true_masks: dict[str, list[str]] = {}
    fake_masks: dict[str, list[str]] = {}
    true_combination: list[str] = []
    fake_combinations: list[list[str]] = []
    contour_eval_qa: ContourEvalQA
    contour_revision_qa_expansion: PointQA | None = None
    contour_revision_qa_contraction: PointQA | None = None
    contour_revision_qa_revision_result: RevisionResultQA | None = None


class DistributionQA(MCQuestion):
    """Stage 4 distribution (number of lung zones)."""

    answer_zones: list[str]


class LocationQA(_Open):
    """Stage 4 location: multi-select over 3 regions + "None of the above"."""

    question: str
    answer_options: list[str]
    answer: str
    answer_index: list[int]
    answer_zones: list[str]


class SeverityQA(MCQuestion):
    """Stage 4 severity/measurement (fraction of the selected lung)."""

    overlap_ratio: float
    selected_lung: str


class ComparisonQA(MCQuestion):
    """Stage 4 comparison of left/right lesion sizes (pixels)."""

    left_size: int
    right_size: int
    left_has_overlap: bool
    right_has_overlap: bool


class AttributeQA(_Open):
    """``attribute_extraction_qa`` (null for cardiomegaly)."""

    distribution: DistributionQA
    location: LocationQA
    severity_measurement: SeverityQA = Field(alias="severity/measurement")
    comparison: ComparisonQA


class BenchmarkItem(_Open):
    """One value of ``chexpercept.json`` / ``qa_results.json`` (keyed by key_id)."""

    detection_qa: MCQuestion
    contour_qa: ContourQA | None = None
    attribute_extraction_qa: AttributeQA | None = None
    pair_id: str
    dicom_id: str


#: Attribute sub-questions in dialogue order (docs/evaluation_protocol.md, "Turn order").
ATTRIBUTE_KEYS = ("distribution", "location", "severity/measurement", "comparison")
#: Multi-select questions (scored by set equality).
MULTI_SELECT = frozenset({"contour_revision_qa_expansion", "contour_revision_qa_contraction",
                          "location"})


def qa_path_of(item: BenchmarkItem, key_id: str | None = None) -> str:
    """Path of a case from its ground truth: lesion_free / revision_free / revision_required.

    docs/benchmark_format.md, "QA paths".

    Args:
        item: The case.
        key_id: Its key_id, named in the error (None: not named).

    Raises:
        SchemaError: If a positive case has no ``contour_qa``.
    """
    if item.detection_qa.answer != "Yes":
        return "lesion_free"
    if item.contour_qa is None:
        raise SchemaError(f"{key_id + ': ' if key_id else ''}positive case without contour_qa")
    return "revision_free" if item.contour_qa.no_deformation else "revision_required"


def _validation_lines(exc: ValidationError, prefix: str) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        lines.append(f"{prefix}{loc}: {err['msg']}")
    return lines


_Model = TypeVar("_Model", bound=BaseModel)


def _parse_keyed(model: type[_Model], data: Any, path: str | Path) -> dict[str, _Model]:
    """Validate every value of a mapping keyed by key_id; all problems in one error.

    Every key must be a safe key_id (:func:`chexpercept.layouts.key_id_problem`): it names the
    case's folders (docs/benchmark_format.md, "Paths a bundle names").

    Raises:
        SchemaError: If ``data`` is not a JSON object, or naming the file, each key_id and
            field at fault (an unsafe key_id, a ``relative_path`` that is absolute or climbs).
    """
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: expected a JSON object keyed by key_id")
    out: dict[str, _Model] = {}
    problems: list[str] = []
    for key_id, value in data.items():
        unsafe = key_id_problem(key_id)
        if unsafe is not None:
            problems.append(f"key_id {key_id!r} {unsafe}")
            continue
        try:
            out[key_id] = model.model_validate(value)
        except ValidationError as exc:
            problems.extend(_validation_lines(exc, f"{key_id}: "))
    if problems:
        raise SchemaError(f"{path}: {len(problems)} schema problem(s):\n  " + "\n  ".join(problems))
    return out


def parse_benchmark(data: Any, path: str | Path) -> dict[str, BenchmarkItem]:
    """Validate a loaded ``chexpercept.json`` mapping; every bad key_id is reported at once.

    Raises:
        SchemaError: Naming the file, each key_id and field at fault.
    """
    return _parse_keyed(BenchmarkItem, data, path)


def load_benchmark(path: str | Path) -> dict[str, BenchmarkItem]:
    """Read and validate ``chexpercept.json`` (released or ours).

    Raises:
        InputError: If the file is missing.
        SchemaError: On bad JSON or schema.
    """
    from chexpercept.files import read_json

    return parse_benchmark(read_json(path), path)


def parse_deformation_results(data: Any, path: str | Path) -> dict[str, DeformationCase]:
    """Validate a loaded ``deformation_results.json``; every bad key_id is reported at once.

    Raises:
        SchemaError: Naming the file, each key_id and field at fault.
    """
    return _parse_keyed(DeformationCase, data, path)


# ======================================================================================
# Stage 03 -> 04: all_results.json (docs/evaluation_protocol.md, "Run folder")
# ======================================================================================

STATUSES = ANSWER_STATUSES
"""Per-turn answer statuses; anything but ``ok`` scores as wrong (docs/parsing.md)."""


class CaseResult(_Open):
    """One value of ``all_results.json``.

    Unvisited stages are ``{}``. Stage 1 stores its parsed answer under ``response`` and
    Stage 2 under ``responses`` (release naming, kept; docs/evaluation_protocol.md, "Run
    folder"). A selected case Stage 03 could not finish (a turn got no answer) has empty stage
    blocks and ``unfinished`` (``next_turn``, ``turns_answered``, ``reason``); Stage 04 counts
    it as missing (docs/engines.md, "Faults").
    """

    key_id: str
    qa_path: Literal["revision_required", "revision_free", "lesion_free"]
    detection_qa: dict[str, Any]
    contour_evaluation_qa: dict[str, Any] = {}
    contour_revision_qa: dict[str, Any] = {}
    attribute_extraction_qa: dict[str, Any] = {}
    chat_history: list[list[Any]] = []
    unfinished: dict[str, Any] | None = None


def parse_all_results(data: Any, path: str | Path) -> dict[str, CaseResult]:
    """Validate a loaded ``all_results.json``.

    Raises:
        SchemaError: Naming the file and each key_id at fault.
    """
    return _parse_keyed(CaseResult, data, path)


#: Stage 04 CSV columns (docs/metrics.md, "Output files").
SUMMARY_COLUMNS = ("path", "model", "setting", "acc(stage1)", "acc(stage2)", "acc(stage3)",
                   "acc(stage4)", "depth")
REVISION_DETAIL_COLUMNS = ("path", "model", "acc(expansion)", "acc(contraction)",
                           "acc(revision_result)")
ATTRIBUTE_DETAIL_COLUMNS = ("path", "model", "acc(distribution)", "acc(location)",
                            "acc(severity/measurement)", "acc(comparison)")


