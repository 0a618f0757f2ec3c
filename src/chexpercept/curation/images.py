"""Stage 00.00 image preparation: MIMIC-CXR-JPG files -> flat ``<mimic_cxr_path>/<dicom_id>.png``.

The release assumes this flat 1024 x 1024 PNG copy exists but never makes it (spec section 0
"Images", section 8 item 24). We make it: 8-bit gray, plain resize to 1024 x 1024 (aspect
ratio not kept, so that MIMIC-ILS's square lesion masks stay aligned; same rule as
``chexpercept.io.read_cxr``), written atomically; existing PNGs are kept (resume).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from chexpercept.errors import InputError
from chexpercept.io import WORK_SIZE, write_png_atomic

logger = logging.getLogger(__name__)


def prepared_png(cxr_dir: str | Path, dicom_id: str) -> Path:
    """``<mimic_cxr_path>/<dicom_id>.png`` (release flat layout)."""
    return Path(cxr_dir) / f"{dicom_id}.png"


def missing_sources(images: Mapping[str, str], jpg_root: str | Path) -> list[str]:
    """One ``dicom_id: path`` line per source JPG that does not exist."""
    return [f"{dicom_id}: {Path(jpg_root) / rel}" for dicom_id, rel in images.items()
            if not (Path(jpg_root) / rel).is_file()]


def convert_jpg(src: str | Path, dst: str | Path, size: int = WORK_SIZE) -> None:
    """Convert one CXR to an 8-bit gray ``size`` x ``size`` PNG (bilinear, aspect not kept).

    Raises:
        InputError: If the source cannot be decoded.
    """
    try:
        with Image.open(src) as im:
            im.load()
            if im.mode in ("I", "I;16", "I;16B", "F"):
                arr = np.asarray(im, dtype=np.float64)
                lo, hi = float(arr.min()), float(arr.max())
                arr = np.zeros_like(arr) if hi <= lo else (arr - lo) / (hi - lo) * 255.0
                im = Image.fromarray(np.round(arr).astype(np.uint8))
            elif im.mode != "L":
                im = im.convert("RGB").convert("L")
            if im.size != (size, size):
                im = im.resize((size, size), Image.BILINEAR)
            arr8 = np.asarray(im, dtype=np.uint8)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read image {src}: {exc}") from None
    write_png_atomic(dst, arr8)


@dataclass(frozen=True)
class PrepareSummary:
    """Outcome of :func:`prepare_images`.

    Attributes:
        converted: PNGs written now.
        skipped: PNGs already present (resume).
    """

    converted: int
    skipped: int


def prepare_images(images: Mapping[str, str], jpg_root: str | Path,
                   cxr_dir: str | Path, *, iterate=iter) -> PrepareSummary:
    """Convert every sampled dicom's JPG into the flat working-frame PNG folder.

    All sources are checked before anything is converted; every missing one is reported at once.

    Args:
        images: ``dicom_id -> image_path`` (relative to ``jpg_root``, e.g. ``files/p10/...``).
        jpg_root: ``path.mimic_cxr_jpg_path``.
        cxr_dir: ``path.mimic_cxr_path`` (created if needed).
        iterate: Wraps the item loop (e.g. a progress bar); default plain iteration.

    Returns:
        Counts of converted and already-present PNGs.

    Raises:
        InputError: Naming each dicom_id whose JPG is missing (with its path), or an image that
            cannot be decoded.
    """
    todo = {d: rel for d, rel in images.items() if not prepared_png(cxr_dir, d).is_file()}
    missing = missing_sources(todo, jpg_root)
    if missing:
        raise InputError(f"{len(missing)} source JPG(s) missing under {jpg_root} "
                         f"(path.mimic_cxr_jpg_path):\n  " + "\n  ".join(missing))
    for dicom_id in iterate(list(todo)):
        convert_jpg(Path(jpg_root) / todo[dicom_id], prepared_png(cxr_dir, dicom_id))
    return PrepareSummary(converted=len(todo), skipped=len(images) - len(todo))
