"""Core: schemas of every artifact that crosses a stage boundary, and of the config file.

Stages meet only through these on-disk artifacts:

- 00 -> 01/02: labeling sheets (CSV columns below) and candidate masks;
- 01 -> 02: ``deformation_results.json`` (:class:`DeformationCase`) + ``deformed_masks/``;
- 02 -> 03: ``chexpercept.json`` (:class:`BenchmarkItem`) + the image bundle;
- 03 -> 04: ``all_results.json`` (:class:`CaseResult`).

Field names follow the original release exactly (each artifact's page is listed in
docs/README.md).
Models that read released files allow extra fields (the release has optional extras such as
``revision_sequential_qa``); the config model forbids unknown keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from chexpercept.errors import InputError, SchemaError
from chexpercept.lesions import LESIONS
from utils.status import ANSWER_STATUSES

# ======================================================================================
# Config (cfg/*.yaml): the release's keys plus ours, each documented in cfg/config_example.yaml
# ======================================================================================


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PathConfig(_Strict):
    """``path.*``: inputs and anatomy mask folders."""

    mimic_cxr_jpg_path: str | None = None
    """Root of a MIMIC-CXR-JPG tree (``files/pNN/p<subject>/s<study>/<dicom_id>.jpg``).
    Stage 00 prepares it into ``mimic_cxr_path``; None if ``mimic_cxr_path`` is already filled."""
    mimic_cxr_path: str
    """Flat folder of ``<dicom_id>.png`` CXRs in the 1024x1024 working frame (release layout)."""
    mimic_meta_path: str | None = None
    """MIMIC-CXR-JPG ``metadata.csv`` (dicom_id, subject_id, study_id, ViewPosition, ...)."""
    mimic_split_meta_path: str | None = None
    """MIMIC-CXR-JPG ``split.csv`` (dicom_id, study_id, subject_id, split)."""
    mimic_report_path: str | None = None
    """Root of report text files ``<pNN>/<p subject>/<s study>.txt``."""
    mimic_ils_path: str | None
    """MIMIC-ILS ``mimic_ils_instruction_answer.json`` (required with ``source: mimic-ils``;
    may be left out when ``source_data_curation.source`` names only public sources)."""
    nih_cxr14_path: str | None = None
    """``source: nih-cxr14``: the NIH ChestX-ray14 download, images in ``images/<name>.png``
    (docs/curation.md, "Public sources")."""
    rsna_pneumonia_path: str | None = None
    """``source: rsna-pneumonia``: the Kaggle download, ``stage_2_train_images/<id>.dcm``."""
    vindr_cxr_path: str | None = None
    """``source: vindr-cxr``: the PhysioNet download, ``train/<image_id>.dicom``."""
    source_tables_path: str | None = None
    """Folder holding the public sources' annotation tables under their published names; None
    reads the copies shipped in the installed ``torchxrayvision`` package (``data/``)."""
    mimic_ils_seg_mask_path: str | None = None
    """MIMIC-ILS ``lesion_mask/`` folder (used by the ``provided`` segmenter)."""
    chexmask_path: str | None = None
    """CheXmask-U masks ``<dicom>/{right_lung,left_lung,heart}.png``; default: Stage 01 output."""
    cxas_mask_path: str | None = None
    """CXAS masks ``<dicom>/<class name>.png``; default: Stage 01 output."""
    work_dir: str | None = None
    """Root of stage outputs (``<work_dir>/NN_<stage>/``); None keeps the release's
    ``src/NN_<stage>/outputs``."""

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        """An empty string (e.g. an unset ``${VAR:-}``) means "not set"."""
        return None if isinstance(value, str) and not value.strip() else value


class HuggingFaceConfig(_Strict):
    """``huggingface.*``: cache locations exported as HF_HOME / HF_HUB_CACHE when set."""

    hf_home: str | None = None
    hf_hub_cache: str | None = None


class CurationConfig(_Strict):
    """``source_data_curation.*`` (Stage 00)."""

    max_samples_per_lesion: int = Field(3000, ge=1)
    """Positives kept per lesion, global pairs first then basic (release ``--max-samples``)."""
    samples_per_lesion_negative: int = Field(100, ge=0)
    """Negatives sampled per lesion (release ``--samples-per-lesion``; paper: 100)."""
    source: list[Literal["mimic-ils", "nih-cxr14", "rsna-pneumonia", "vindr-cxr"]] = [
        "mimic-ils"]
    """Where cases come from: ``mimic-ils`` (credentialed MIMIC-CXR-JPG + MIMIC-ILS), or one or
    more public box sources (docs/curation.md, "Public sources"); one name or a list of public
    ones."""
    segmenter: Literal["provided", "rosalia", "box-anatomy", "sam2-box"] = "provided"
    """Candidate-mask source: ``provided`` = the MIMIC-ILS lesion mask; ``rosalia`` = ROSALIA;
    ``box-anatomy`` = a public source's box intersected with the lungs (the heart for
    cardiomegaly), CPU, no weights; ``sam2-box`` = SAM2 prompted with the box (weights from
    ``mask_deformation.sam2_checkpoint``)."""
    reader_iou: float = Field(0.4, ge=0.0, le=1.0)
    """Public sources with several readers (VinDr-CXR): boxes of one lesion whose IoU is at
    least this are one finding (docs/curation.md, "Reader merge rule")."""
    min_readers: int = Field(2, ge=1)
    """Readers who must agree on a finding for it to be kept (VinDr-CXR: 2 of 3)."""
    box_anatomy_path: str | None = None
    """``box-anatomy``: CheXmask-U-layout anatomy masks ``<dicom_id>/{right_lung,left_lung,
    heart}.png`` (read like ``path.chexmask_path``, in the frame ``anatomy.provided_frame``
    names); None uses ``path.chexmask_path``."""
    box_anatomy_frame: Literal["original", "work"] | None = None
    """``box-anatomy``: frame of the masks in ``box_anatomy_path``: ``work`` for Stage 01.00
    outputs (``<work_dir>/01_mask_deformation/chexmasku_pred``), ``original`` for masks on the
    original images; None follows ``anatomy.provided_frame``."""
    box_smoothing_px: int = Field(7, ge=0)
    """``box-anatomy``: radius of the opening + closing that smooths the box-lung cut
    (docs/curation.md, "Public sources")."""
    num_annotators: int = Field(6, ge=1)
    """Annotators the sheets are split over (paper: 6 experts)."""
    positive_views: list[str] = ["PA", "AP"]
    """ViewPosition values accepted when ``mimic_meta_path`` is given (frontal views); applied
    to positives and negatives alike."""
    @field_validator("source", mode="before")
    @classmethod
    def _source_one_or_list(cls, value: Any) -> Any:
        """``source: nih-cxr14`` is short for ``source: [nih-cxr14]``."""
        return [value] if isinstance(value, str) else value

    ils_splits: list[Literal["train", "val", "test"]] = ["train"]
    """MIMIC-ILS splits read (release: ``train`` only; docs/curation.md, "Sampling")."""
    mimic_cxr_splits: list[Literal["train", "validate", "test"]] | None = None
    """MIMIC-CXR-JPG official splits kept (``split`` column of ``path.mimic_split_meta_path``);
    None keeps every split (no split CSV needed)."""
    prepare_mode: Literal["letterbox", "stretch"] = "letterbox"
    """How CXRs enter the 1024x1024 working frame: ``letterbox`` keeps the aspect ratio (long
    side 1024, centred, black padding); ``stretch`` is the release's plain resize. The transform
    is recorded per dicom (``<mimic_cxr_path>/<dicom_id>.transform.json``)."""
    rosalia_weights: str | None = None
    """``segmenter: rosalia``: local ROSALIA checkpoint folder (HF layout of
    ``checkone/ROSALIA-7B-v1``: ``config.json`` + weight shards), loaded with LISA's
    ``LISAForCausalLM.from_pretrained`` (docs/curation.md, "Candidate masks")."""
    rosalia_tokenizer: str | None = None
    """``segmenter: rosalia``: local tokenizer folder (release: ``xinlai/LISA-7B-v1``); None
    uses ``rosalia_weights``."""
    rosalia_vision_tower: str | None = None
    """``segmenter: rosalia``: local CLIP ViT-L/14 folder (release:
    ``openai/clip-vit-large-patch14``); required, nothing is downloaded."""
    lisa_path: str | None = None
    """``segmenter: rosalia``: the LISA code checkout made by ``setup.sh``; None means
    ``src/00_source_data_curation/LISA``."""
    rosalia_max_new_tokens: int = Field(512, ge=1)
    """``segmenter: rosalia``: generation budget of ``model.evaluate`` (release: 512)."""


class OptimalMaskGenerationConfig(_Strict):
    """``optimal_mask_generation.*``: accepted for compatibility; unused (as in the release)."""

    output_path: str | None = None


class AnatomyConfig(_Strict):
    """``anatomy.*`` (Stage 01.00)."""

    backend: list[Literal["provided", "cxas", "chexmask-u", "models"]] = ["provided"]
    """Anatomy sources, one name or a list. ``cxas`` runs the CXAS network (torchxrayvision's
    UNet-ResNet50) into ``cxas_pred/``; ``chexmask-u`` runs HybridGNet (CheXmask-U) into
    ``chexmasku_pred/``; a layout no model writes is copied from the ``provided`` masks
    (``path.chexmask_path`` / ``path.cxas_mask_path``). ``models`` (deprecated) means
    ``[cxas, chexmask-u]``."""
    provided_frame: Literal["original", "work"] = "original"
    """Frame of provided anatomy masks: ``original`` = they cover the original CXR (its own
    size, or stretched to a square like MIMIC-ILS masks) and are mapped with the recorded
    Stage 00 transform; ``work`` = already in the prepared 1024x1024 frame (plain copy)."""
    device: str = "cuda"
    """Torch device of the ``cxas`` / ``chexmask-u`` models (``cuda``, ``cuda:1``, ``cpu``)."""
    batch_size: int = Field(4, ge=1)
    """Images per forward pass of the anatomy models."""
    cxas_weights: str | None = None
    """``cxas``: local ``baseline_models_cxas_UNet_ResNet50_default_repack.pth`` (torchxrayvision
    release v1) or the CXAS package's ``UNet_ResNet50_default.pth``; nothing is downloaded."""
    cxas_classes: list[str] = ["right lung", "left lung", "right upper zone lung",
                               "right mid zone lung", "right lung base", "left upper zone lung",
                               "left mid zone lung", "left lung base", "heart"]
    """``cxas``: the CXAS classes written as ``<dicom>/<class name>.png`` (names of the 159-label
    set; default: the ones the pipeline reads plus the heart; docs/deformation.md, "Anatomy
    masks")."""
    chexmask_u_path: str | None = None
    """``chexmask-u``: the CheXmask-U checkout made by ``setup.sh``; None means
    ``src/01_mask_deformation/CheXmask-U``."""
    chexmask_u_weights: str | None = None
    """``chexmask-u``: local HybridGNet weights (``pytorch_model.bin`` of the HF repo
    ``mcosarinsky/CheXmask-U`` subfolder ``v1_skip``, or CheXmask's ``bestMSE.pt``)."""
    chexmask_u_config: str | None = None
    """``chexmask-u``: the model's ``config.json``; None uses ``config.json`` next to the
    weights if present, else the published defaults (latents 64, input 1024, skip on)."""

    @field_validator("backend", mode="before")
    @classmethod
    def _one_or_list(cls, value: Any) -> Any:
        """``backend: cxas`` is short for ``backend: [cxas]``."""
        return [value] if isinstance(value, str) else value


class MaskDeformationConfig(_Strict):
    """``mask_deformation.*`` (Stage 01.01). Defaults: docs/qa_generation.md, "Thresholds"."""

    backend: Literal["morphological", "sam3", "sam2"] = "morphological"
    zone_mask_source: str = "chex_vertical_thirds"
    save_visualization: bool = False
    min_component_size_px: int = Field(1000, ge=1)
    max_deformation_retries: int = Field(10, ge=1)
    min_point_distance_px: int = Field(50, ge=0)
    kernel_size_px: int = Field(32, ge=1)
    max_regions_per_case: int = Field(3, ge=1)
    sam2_checkpoint: str | None = None
    """``backend: sam2``: local checkpoint (``sam2.1_hiera_tiny.pt`` ...; ``{"model": state}``)."""
    sam2_config: str = "configs/sam2.1/sam2.1_hiera_t.yaml"
    """``backend: sam2``: Hydra config name inside the sam2 package, or a path to a YAML file."""
    sam3_checkpoint: str | None = None
    """``backend: sam3``: local ``sam3.pt``."""
    sam3_bpe_path: str | None = None
    """``backend: sam3``: CLIP BPE vocabulary ``bpe_simple_vocab_16e6.txt.gz``."""
    device: str = "cuda"
    """Torch device of SAM backends; with several GPUs visible, worker i uses ``cuda:(i % n)``."""


class BenchmarkSamplingConfig(_Strict):
    """``qa_generation.sampling.*``: cases per lesion and path in the exported benchmark."""

    lesion_free: int = Field(100, ge=0)
    revision_free: int = Field(100, ge=0)
    revision_required: int = Field(100, ge=0)
    distinct_cxrs: bool = True
    """Never select two cases on the same CXR (dicom_id), so cases = CXRs as in the paper
    (docs/paper.md, "Benchmark size": 2,100 cases on 2,100 CXRs)."""

    def per_path(self) -> dict[str, int]:
        """Cases wanted per path: ``{lesion_free, revision_free, revision_required: n}``."""
        return {"lesion_free": self.lesion_free, "revision_free": self.revision_free,
                "revision_required": self.revision_required}


class QAGenerationConfig(_Strict):
    """``qa_generation.*`` (Stage 02)."""

    no_deformation_ratio: dict[str, float] = {"default": 0.5}
    """Fraction of each lesion's positives presented revision-free (keys: lesion or default)."""
    sampling: BenchmarkSamplingConfig = BenchmarkSamplingConfig()
    qa_results_path: str | None = None
    chexpercept_path: str | None = None

    @field_validator("no_deformation_ratio")
    @classmethod
    def _check_ratio(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [k for k in value if k != "default" and k not in LESIONS]
        if bad:
            raise ValueError(f"unknown lesion key(s) {bad}; expected 'default' or one of {LESIONS}")
        out_of_range = {k: v for k, v in value.items() if not 0.0 <= v <= 1.0}
        if out_of_range:
            raise ValueError(f"ratios must be in [0, 1], found {out_of_range}")
        return value


class EvalConfig(_Strict):
    """``eval_vlm_on_chexpercept.*`` (Stage 03)."""

    output_path: str | None = None


class ChexperceptConfig(_Strict):
    """The whole ``cfg/config*.yaml`` file."""

    seed: int = Field(0, ge=0)
    """The one seed every random choice derives from (chexpercept.rng.rng_for)."""
    path: PathConfig
    huggingface: HuggingFaceConfig = HuggingFaceConfig()
    source_data_curation: CurationConfig = CurationConfig()
    optimal_mask_generation: OptimalMaskGenerationConfig = OptimalMaskGenerationConfig()
    anatomy: AnatomyConfig = AnatomyConfig()
    mask_deformation: MaskDeformationConfig = MaskDeformationConfig()
    qa_generation: QAGenerationConfig = QAGenerationConfig()
    eval_vlm_on_chexpercept: EvalConfig = EvalConfig()

    @model_validator(mode="before")
    @classmethod
    def _public_needs_no_ils(cls, data: Any) -> Any:
        """``path.mimic_ils_path`` may be left out when only public sources are read."""
        if not isinstance(data, dict) or not isinstance(data.get("path"), dict):
            return data
        cur = data.get("source_data_curation")
        source = cur.get("source") if isinstance(cur, dict) else None
        names = [source] if isinstance(source, str) else source
        if names and "mimic-ils" not in names and "mimic_ils_path" not in data["path"]:
            data = {**data, "path": {**data["path"], "mimic_ils_path": None}}
        return data


def load_chexpercept_config(path: str | Path) -> ChexperceptConfig:
    """Load a CheXpercept config; ``${ROOT}`` expands to the repository root.

    Raises:
        ConfigError: Naming the file and every bad key.
    """
    from chexpercept.io import repo_root
    from utils.config import load_config

    return load_config(path, ChexperceptConfig, variables={"ROOT": str(repo_root())})


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

    relative_path: str


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
    relative_path: str


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


def qa_path_of(item: BenchmarkItem) -> str:
    """Path of a case: lesion_free / revision_free / revision_required.

    docs/benchmark_format.md, "QA paths".
    """
    if item.detection_qa.answer != "Yes":
        return "lesion_free"
    if item.contour_qa is None:
        raise SchemaError("positive case without contour_qa")
    return "revision_free" if item.contour_qa.no_deformation else "revision_required"


def _validation_lines(exc: ValidationError, prefix: str) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        lines.append(f"{prefix}{loc}: {err['msg']}")
    return lines


def parse_benchmark(data: Any, path: str | Path) -> dict[str, BenchmarkItem]:
    """Validate a loaded ``chexpercept.json`` mapping; every bad key_id is reported at once.

    Raises:
        SchemaError: Naming the file, each key_id and field at fault.
    """
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: expected a JSON object keyed by key_id")
    items: dict[str, BenchmarkItem] = {}
    problems: list[str] = []
    for key_id, value in data.items():
        try:
            items[key_id] = BenchmarkItem.model_validate(value)
        except ValidationError as exc:
            problems.extend(_validation_lines(exc, f"{key_id}: "))
    if problems:
        raise SchemaError(f"{path}: {len(problems)} schema problem(s):\n  " + "\n  ".join(problems))
    return items


def load_benchmark(path: str | Path) -> dict[str, BenchmarkItem]:
    """Read and validate ``chexpercept.json`` (released or ours).

    Raises:
        InputError: If the file is missing.
        SchemaError: On bad JSON or schema.
    """
    from chexpercept.io import read_json

    return parse_benchmark(read_json(path), path)


def parse_deformation_results(data: Any, path: str | Path) -> dict[str, DeformationCase]:
    """Validate a loaded ``deformation_results.json``; every bad key_id is reported at once.

    Raises:
        SchemaError: Naming the file, each key_id and field at fault.
    """
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: expected a JSON object keyed by key_id")
    out: dict[str, DeformationCase] = {}
    problems: list[str] = []
    for key_id, value in data.items():
        try:
            out[key_id] = DeformationCase.model_validate(value)
        except ValidationError as exc:
            problems.extend(_validation_lines(exc, f"{key_id}: "))
    if problems:
        raise SchemaError(f"{path}: {len(problems)} schema problem(s):\n  " + "\n  ".join(problems))
    return out


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
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: expected a JSON object keyed by key_id")
    out: dict[str, CaseResult] = {}
    problems: list[str] = []
    for key_id, value in data.items():
        try:
            out[key_id] = CaseResult.model_validate(value)
        except ValidationError as exc:
            problems.extend(_validation_lines(exc, f"{key_id}: "))
    if problems:
        raise SchemaError(f"{path}: {len(problems)} schema problem(s):\n  " + "\n  ".join(problems))
    return out


#: Stage 04 CSV columns (docs/metrics.md, "Output files").
SUMMARY_COLUMNS = ("path", "model", "setting", "acc(stage1)", "acc(stage2)", "acc(stage3)",
                   "acc(stage4)", "depth")
REVISION_DETAIL_COLUMNS = ("path", "model", "acc(expansion)", "acc(contraction)",
                           "acc(revision_result)")
ATTRIBUTE_DETAIL_COLUMNS = ("path", "model", "acc(distribution)", "acc(location)",
                            "acc(severity/measurement)", "acc(comparison)")


def require_keys(mapping: Mapping[str, Any], keys: Iterable[str], where: str) -> None:
    """Raise one InputError listing every key of ``keys`` missing from ``mapping``."""
    missing = [k for k in keys if k not in mapping]
    if missing:
        raise InputError(f"{where}: missing key(s) {missing}")
