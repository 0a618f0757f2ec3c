"""Core: the schema of the config file (``cfg/*.yaml``), one strict model per section.

The release's keys plus ours, each documented in ``cfg/config_example.yaml``; an unknown key
is an error naming it (``utils.config.load_config``). The schemas of the artifacts that cross
stage boundaries are in :mod:`chexpercept.schema`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from chexpercept.lesions import LESIONS


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
    from chexpercept.layouts import repo_root
    from utils.config import load_config

    return load_config(path, ChexperceptConfig, variables={"ROOT": str(repo_root())})
