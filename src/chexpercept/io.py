"""Core: atomic file writing, image/mask reading in the 1024x1024 working frame, artifact paths.

Every artifact path of the pipeline is built by exactly one function here (nnU-Net habit), so
the on-disk layout (original_release_spec.md section 1) is defined in one place. Defaults keep
the release's locations (``src/NN_*/outputs/...``); every CLI can override its roots.
"""

from __future__ import annotations

import contextlib
import csv
import io as _io
import json
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from chexpercept.errors import InputError, SchemaError

#: Side of the square working frame in pixels (spec section 0: all geometry at 1024x1024).
WORK_SIZE = 1024

#: Version of the artifacts this code writes, recorded in every ``run_meta.json``.
SCHEMA_VERSION = "1.0"

# --------------------------------------------------------------------------------------
# Atomic writes
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path next to ``path``; rename it onto ``path`` only if the block succeeds.

    A crash never leaves a half-written ``path``: either the old file or the new one exists.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + rename)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays, tuples, sets and Paths into plain JSON types."""
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [to_jsonable(v) for v in sorted(obj)]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def dumps_json(obj: Any, *, indent: int | None = 2) -> str:
    """Deterministic JSON text (insertion order kept, UTF-8, trailing newline)."""
    return json.dumps(to_jsonable(obj), indent=indent, ensure_ascii=False) + "\n"


def write_json_atomic(path: str | Path, obj: Any, *, indent: int | None = 2) -> None:
    """Write ``obj`` as JSON atomically; numpy types are converted (see :func:`to_jsonable`)."""
    write_text_atomic(path, dumps_json(obj, indent=indent))


def read_json(path: str | Path) -> Any:
    """Read a JSON file.

    Raises:
        InputError: If the file is missing.
        SchemaError: If it is not valid JSON (the message gives line and column).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"file not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}): "
                          f"{exc.msg}") from None


def append_jsonl(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append one JSON record as a line and flush it to disk (crash-safe progress log)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(to_jsonable(record), ensure_ascii=False) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file; a truncated last line (killed writer) is ignored, others must parse.

    Raises:
        SchemaError: If a line other than the last one is not valid JSON.
    """
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise SchemaError(f"{path}: line {i + 1} is not valid JSON") from None
    return out


def write_csv_atomic(
    path: str | Path, rows: Iterable[Mapping[str, Any]], columns: Sequence[str]
) -> None:
    """Write rows as CSV with exactly ``columns`` in that order, atomically.

    Missing values are written as empty cells; extra keys are an error (no silent drop).

    Raises:
        SchemaError: If a row has a key not in ``columns``.
    """
    buf = _io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for i, row in enumerate(rows):
        extra = set(row) - set(columns)
        if extra:
            raise SchemaError(f"{path}: row {i} has keys not in the columns: {sorted(extra)}")
        writer.writerow({c: "" if row.get(c) is None else row.get(c) for c in columns})
    write_text_atomic(path, buf.getvalue())


def read_csv_rows(path: str | Path, required: Sequence[str] = ()) -> list[dict[str, str]]:
    """Read a CSV as a list of string dicts (all cells as text, blanks as '').

    Args:
        path: The CSV file.
        required: Columns that must be present.

    Raises:
        InputError: If the file is missing.
        SchemaError: If required columns are missing (named in the message).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"file not found: {path}")
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise SchemaError(f"{path}: missing column(s) {missing}; found {header}")
        return [{k: (v if v is not None else "") for k, v in row.items()} for row in reader]


# --------------------------------------------------------------------------------------
# Images and masks
# --------------------------------------------------------------------------------------


def png_bytes(array: np.ndarray) -> bytes:
    """Encode a uint8 (H, W) or (H, W, 3) array as PNG bytes (deterministic, no metadata)."""
    buf = _io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def write_png_atomic(path: str | Path, array: np.ndarray) -> None:
    """Write a uint8 (H, W) or (H, W, 3) array as a PNG atomically."""
    if array.dtype != np.uint8:
        raise TypeError(f"write_png_atomic({path}): expected uint8, got {array.dtype}")
    write_bytes_atomic(path, png_bytes(array))


def write_mask(path: str | Path, mask: np.ndarray) -> None:
    """Write a boolean mask as an 8-bit L PNG with values 0/255 (spec section 3.5).

    Args:
        path: Destination PNG.
        mask: (H, W) bool (or anything where nonzero means foreground).
    """
    write_png_atomic(path, np.where(np.asarray(mask) > 0, 255, 0).astype(np.uint8))


def read_mask(path: str | Path, *, size: int | None = WORK_SIZE) -> np.ndarray:
    """Read a mask PNG as a boolean array in the working frame.

    Multi-channel masks (e.g. ROSALIA's 3-channel output) use channel 0. Foreground is any
    value > 0 (spec section 4.3 reads masks as L and compares > 0). Masks of another size are
    resized with nearest-neighbour interpolation.

    Args:
        path: The PNG file.
        size: Output side in pixels (default 1024); None keeps the file's size.

    Returns:
        (size, size) bool.

    Raises:
        InputError: If the file is missing or cannot be decoded.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"mask not found: {path}")
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode not in ("L", "1", "P", "I", "I;16"):
                im = im.getchannel(0)
            elif im.mode != "L":
                im = im.convert("L")
            if size is not None and im.size != (size, size):
                im = im.resize((size, size), Image.NEAREST)
            arr = np.asarray(im)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read mask {path}: {exc}") from None
    return arr > 0


def read_cxr(path: str | Path, *, size: int | None = WORK_SIZE) -> np.ndarray:
    """Read a CXR image as 8-bit grayscale in the working frame.

    RGB/RGBA images are converted to luminance; 16-bit images are rescaled to 8 bit by their
    min/max. Images of another size are resized with bilinear interpolation (aspect ratio is
    not kept: MIMIC-ILS masks are square, see data/sample_test/README.md).

    Args:
        path: PNG or JPG file.
        size: Output side in pixels (default 1024); None keeps the file's size.

    Returns:
        (size, size) uint8.

    Raises:
        InputError: If the file is missing or cannot be decoded.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"image not found: {path}")
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode in ("I", "I;16", "I;16B", "F"):
                arr = np.asarray(im, dtype=np.float64)
                lo, hi = float(arr.min()), float(arr.max())
                arr = np.zeros_like(arr) if hi <= lo else (arr - lo) / (hi - lo) * 255.0
                im = Image.fromarray(np.round(arr).astype(np.uint8))
            elif im.mode != "L":
                im = im.convert("RGB").convert("L")
            if size is not None and im.size != (size, size):
                im = im.resize((size, size), Image.BILINEAR)
            return np.asarray(im).copy()
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read image {path}: {exc}") from None


# --------------------------------------------------------------------------------------
# Run metadata
# --------------------------------------------------------------------------------------


def git_state(repo: str | Path) -> dict[str, Any]:
    """The git commit and dirty flag of ``repo`` (None/None outside a git checkout)."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                                    capture_output=True, text=True, timeout=10,
                                    check=True).stdout.strip())
        return {"git_commit": commit, "git_dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}


def package_versions(names: Sequence[str]) -> dict[str, str | None]:
    """Installed versions of ``names`` (None when a package is not installed)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


_META_PACKAGES = ("chexpercept", "numpy", "scipy", "pandas", "pillow", "opencv-python-headless",
                  "scikit-image", "matplotlib", "pydantic", "vllm", "transformers", "torch",
                  "openai", "google-genai")


def write_run_meta(out_dir: str | Path, *, stage: str, config: Any, seeds: Mapping[str, int],
                   repo_root: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``<out_dir>/run_meta.json``: schema version, resolved config (secrets removed),
    seeds, git state, package versions, timestamps.

    Timestamps and versions make this file differ between runs; it is kept apart from the
    artifacts that must be byte-identical.
    """
    cfg = config.model_dump(mode="json") if hasattr(config, "model_dump") else config
    meta = {
        "schema_version": SCHEMA_VERSION,
        "stage": stage,
        "config": _redact(cfg),
        "seeds": dict(seeds),
        **git_state(repo_root),
        "python": platform.python_version(),
        "packages": package_versions(_META_PACKAGES),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **(dict(extra) if extra else {}),
    }
    path = Path(out_dir) / "run_meta.json"
    write_json_atomic(path, meta)
    return path


_SECRET_WORDS = ("key", "token", "secret", "password", "credential")


def _redact(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {k: ("<redacted>" if any(w in str(k).lower() for w in _SECRET_WORDS) and v
                    else _redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact(v) for v in obj]
    return obj


# --------------------------------------------------------------------------------------
# Artifact paths (one function per artifact; release defaults, spec section 1)
# --------------------------------------------------------------------------------------

STAGE_DIRS = {
    "00": "src/00_source_data_curation",
    "01": "src/01_mask_deformation",
    "02": "src/02_qa_generation",
    "03": "src/03_eval_vlm_on_chexpercept",
    "04": "src/04_analyze_eval_result",
}


def repo_root() -> Path:
    """The repository root (the folder holding ``pyproject.toml`` above this package)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "src" / "chexpercept").is_dir():
            return parent
    return Path.cwd()


def stage_output_dir(stage: str, work_dir: str | Path | None = None) -> Path:
    """Output folder of a stage ("00".."04").

    Args:
        stage: Two-digit stage number.
        work_dir: Config ``path.work_dir``; when set, outputs go to ``<work_dir>/NN_<stage>``,
            otherwise to the release's ``<repo>/src/NN_<stage>/outputs``.
    """
    if work_dir:
        return Path(work_dir) / Path(STAGE_DIRS[stage]).name
    return repo_root() / STAGE_DIRS[stage] / "outputs"


@dataclass(frozen=True)
class CurationLayout:
    """Stage 00 artifact paths under ``out`` (default ``src/00_source_data_curation/outputs``)."""

    out: Path

    def segmentation_info(self, kind: str) -> Path:
        """``{global,basic}_segmentation_info.json`` or ``global_segmentation_negative_info.json``."""
        names = {"global": "global_segmentation_info.json",
                 "basic": "basic_segmentation_info.json",
                 "negative": "global_segmentation_negative_info.json"}
        return self.out / names[kind]

    @property
    def candidate_root(self) -> Path:
        """Root of candidate (ROSALIA-layout) masks: ``rosalia_pred/``."""
        return self.out / "rosalia_pred"

    def candidate_mask(self, target: str, pair_id: str) -> Path:
        """``rosalia_pred/<target>/<pair_id>/pred_mask.png``."""
        return self.candidate_root / target / pair_id / "pred_mask.png"

    def candidate_image(self, target: str, pair_id: str) -> Path:
        """``rosalia_pred/<target>/<pair_id>/pred_img.png``."""
        return self.candidate_root / target / pair_id / "pred_img.png"

    def review_plot(self, target: str, key_id: str) -> Path:
        """``rosalia_pred/plots/<target>/<key_id>.png`` (annotator review figure)."""
        return self.candidate_root / "plots" / target / f"{key_id}.png"

    def candidate_results(self, part: int | None = None) -> Path:
        """``rosalia_pred/results[_part<p>].json``."""
        return self.candidate_root / (f"results_part{part}.json" if part is not None
                                      else "results.json")

    def positive_sheet(self, part: int | None = None) -> Path:
        """``rosalia_pred/labeling_sheet[_part<p>].csv``."""
        return self.candidate_root / (f"labeling_sheet_part{part}.csv" if part is not None
                                      else "labeling_sheet.csv")

    def negative_image(self, lesion: str, key_id: str) -> Path:
        """``negative/<lesion>/<key_id>.png``."""
        return self.out / "negative" / lesion / f"{key_id}.png"

    @property
    def negative_sheet(self) -> Path:
        """``negative/labeling_sheet.csv``."""
        return self.out / "negative" / "labeling_sheet.csv"

    def annotator_dir(self, annotator: str, task: str) -> Path:
        """``distribute/annotator_<X>/<positive|negative>/``."""
        return self.out / "distribute" / f"annotator_{annotator}" / task

    @property
    def sampling_summary(self) -> Path:
        """``sampling_summary.json``: Stage 00.00 counts, dropped pairs and the inputs hash."""
        return self.out / "sampling_summary.json"

    def candidate_summary(self, part: int | None = None) -> Path:
        """``rosalia_pred/summary[_part<p>].json``: Stage 00.01 processed/skipped/failed items."""
        return self.candidate_root / (f"summary_part{part}.json" if part is not None
                                      else "summary.json")

    @property
    def negative_summary(self) -> Path:
        """``negative/summary.json``: Stage 00.03 counts and shortfalls."""
        return self.out / "negative" / "summary.json"


@dataclass(frozen=True)
class DeformationLayout:
    """Stage 01 artifact paths under ``out`` (default ``src/01_mask_deformation/outputs``)."""

    out: Path

    @property
    def chexmask_dir(self) -> Path:
        """``chexmasku_pred/`` (``<dicom>/{right_lung,left_lung,heart}.png``)."""
        return self.out / "chexmasku_pred"

    @property
    def cxas_dir(self) -> Path:
        """``cxas_pred/`` (``<dicom>/<class name>.png``)."""
        return self.out / "cxas_pred"

    @property
    def deformed_masks_root(self) -> Path:
        """``deformed_masks/`` (holds one ``<key_id>/`` folder per case)."""
        return self.out / "deformed_masks"

    def deformed_mask_dir(self, key_id: str) -> Path:
        """``deformed_masks/<key_id>/``."""
        return self.deformed_masks_root / key_id

    def deformed_mask(self, key_id: str, stem: str) -> Path:
        """``deformed_masks/<key_id>/<stem>.png``."""
        return self.deformed_mask_dir(key_id) / f"{stem}.png"

    @property
    def results_json(self) -> Path:
        """``deformation_results/deformation_results.json``."""
        return self.out / "deformation_results" / "deformation_results.json"

    @property
    def summary_json(self) -> Path:
        """``deformation_results/summary.json`` (counts and failed cases with reasons)."""
        return self.out / "deformation_results" / "summary.json"

    def item_json(self, key_id: str) -> Path:
        """Per-case result written as soon as a case finishes (resume): ``deformation_results/items/<key_id>.json``."""
        return self.out / "deformation_results" / "items" / f"{key_id}.json"

    @property
    def logs_dir(self) -> Path:
        """``logs/``."""
        return self.out / "logs"


def anatomy_mask_path(anatomy_dir: str | Path, dicom_id: str, name: str) -> Path:
    """``<anatomy_dir>/<dicom_id>/<name>.png`` (CheXmask-U and CXAS output layouts)."""
    return Path(anatomy_dir) / dicom_id / f"{name}.png"


@dataclass(frozen=True)
class QALayout:
    """Stage 02 artifact paths under ``out`` (default ``src/02_qa_generation/outputs``)."""

    out: Path

    @property
    def qa_results_json(self) -> Path:
        """``qa_results/qa_results.json`` (all generated cases, release schema)."""
        return self.out / "qa_results" / "qa_results.json"

    @property
    def qa_labeling_csv(self) -> Path:
        """``qa_results/qa_labeling.csv``."""
        return self.out / "qa_results" / "qa_labeling.csv"

    @property
    def bundle_dir(self) -> Path:
        """``chexpercept/`` (per-key_id image folders)."""
        return self.out / "chexpercept"

    @property
    def summary_json(self) -> Path:
        """``qa_results/summary.json`` (counts and cases that could not be built, with reasons)."""
        return self.out / "qa_results" / "summary.json"

    def item_json(self, key_id: str) -> Path:
        """Per-case result (resume): ``qa_results/items/<key_id>.json``."""
        return self.out / "qa_results" / "items" / f"{key_id}.json"

    def case_dir(self, key_id: str) -> Path:
        """``chexpercept/<key_id>/`` (the case's image folder, spec section 4.4)."""
        return self.bundle_dir / key_id


#: Relative paths inside ``<bundle>/<key_id>/`` (spec section 4.4).
DETECTION_IMAGE = "detection_qa/xray.png"
CONTOUR_QA_DIR = "contour_qa"
CONTOUR_EVAL_RELPATH = "contour_eval_qa/xray_with_mask.png"  # relative to contour_qa/
REVISION_DIR = "contour_qa/contour_revision_qa"
POINTS_IMAGE = "xray_with_mask_and_points.png"  # relative to REVISION_DIR


def option_image_name(index: int) -> str:
    """Our revision-option image name: ``option_<i>.png`` (1-based; does not reveal the answer).

    The release's ``option_<i>_mask_{answer|fake}.png`` names leak the answer; readers use each
    option's ``relative_path``, so both spellings are read.
    """
    return f"option_{index}.png"


@dataclass(frozen=True)
class BenchmarkLayout:
    """The exported/released benchmark: ``<root>/chexpercept.json`` + ``<root>/chexpercept/``."""

    root: Path

    @property
    def json_path(self) -> Path:
        """``chexpercept.json``."""
        return self.root / "chexpercept.json"

    @property
    def images_dir(self) -> Path:
        """``chexpercept/``."""
        return self.root / "chexpercept"

    @property
    def sampling_summary_json(self) -> Path:
        """``sampling_summary.json`` (cases available/selected per lesion and path, shortfalls)."""
        return self.root / "sampling_summary.json"

    def case_dir(self, key_id: str) -> Path:
        """``chexpercept/<key_id>/``."""
        return self.images_dir / key_id

    def detection_image(self, key_id: str) -> Path:
        """``chexpercept/<key_id>/detection_qa/xray.png``."""
        return self.case_dir(key_id) / DETECTION_IMAGE

    def contour_eval_image(self, key_id: str, relative_path: str = CONTOUR_EVAL_RELPATH) -> Path:
        """``chexpercept/<key_id>/contour_qa/<relative_path>``."""
        return self.case_dir(key_id) / CONTOUR_QA_DIR / relative_path

    def points_image(self, key_id: str) -> Path:
        """``chexpercept/<key_id>/contour_qa/contour_revision_qa/xray_with_mask_and_points.png``."""
        return self.case_dir(key_id) / REVISION_DIR / POINTS_IMAGE

    def option_image(self, key_id: str, relative_path: str) -> Path:
        """``chexpercept/<key_id>/contour_qa/contour_revision_qa/<relative_path>``."""
        return self.case_dir(key_id) / REVISION_DIR / relative_path


def eval_run_dir(output_path: str | Path, provider: str, model: str, oracle_setting: str,
                 *, no_thinking: bool = False) -> Path:
    """``<output-path>/<provider>_<model>[_no_thinking]/oracle_<setting>/`` (spec section 5.8).

    ``/`` in a model id (HF ids, local paths) is replaced by ``--`` so the run stays one folder.
    """
    safe_model = model.strip("/").replace("/", "--")
    name = f"{provider}_{safe_model}" + ("_no_thinking" if no_thinking else "")
    return Path(output_path) / name / f"oracle_{oracle_setting}"


def all_results_path(run_dir: str | Path) -> Path:
    """``<run_dir>/all_results.json``."""
    return Path(run_dir) / "all_results.json"


def records_path(run_dir: str | Path) -> Path:
    """``<run_dir>/records.jsonl``: one line per finished case/turn (resume log)."""
    return Path(run_dir) / "records.jsonl"


def run_manifest_path(run_dir: str | Path) -> Path:
    """``<run_dir>/run_manifest.json``: what a Stage 03 run is (resume refuses a mismatch)."""
    return Path(run_dir) / "run_manifest.json"


#: Stage 04 per-model CSV names (spec section 6), written next to ``all_results.json``.
MODEL_SUMMARY_CSV = "model_performance_summary.csv"
MODEL_REVISION_CSV = "model_performance_detail_contour_revision.csv"
MODEL_ATTRIBUTE_CSV = "model_performance_detail_attribute_extraction.csv"
#: Stage 04 all-models CSV names, in ``all_models_oracle_<setting>/``.
ALL_SUMMARY_CSV = "all_models_summary.csv"
ALL_REVISION_CSV = "all_models_contour_revision_detail.csv"
ALL_ATTRIBUTE_CSV = "all_models_attribute_extraction_detail.csv"
PLOT_NAMES = ("plot_stage_accuracy.png", "plot_contour_revision_detail.png",
              "plot_attribute_extraction_detail.png", "plot_depth_heatmap.png")


def all_models_dir(out_root: str | Path, oracle_setting: str) -> Path:
    """``<out_root>/all_models_oracle_<setting>/`` (default out_root: ``src/04_analyze_eval_result``)."""
    return Path(out_root) / f"all_models_oracle_{oracle_setting}"
