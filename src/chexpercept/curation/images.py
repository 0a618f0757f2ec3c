"""Stage 00.00 image preparation: MIMIC-CXR-JPG files -> ``<mimic_cxr_path>/<dicom_id>.png``.

The release assumes a flat 1024 x 1024 PNG copy exists but never makes it (docs/differences.md
D4; docs/curation.md, "Working frame"). We make it and KEEP THE TRANSFORM: every PNG gets a sidecar
``<dicom_id>.transform.json`` (:class:`chexpercept.frame.FrameTransform`: original size, scales,
padding) and the folder gets an index ``transforms.json``, so any working-frame mask or point
maps back to the original image (:func:`chexpercept.frame.mask_to_original`).

Modes (config ``source_data_curation.prepare_mode``): ``letterbox`` (default; aspect ratio kept,
long side 1024, centred on black) or ``stretch`` (plain resize, the release's frame). MIMIC-ILS
masks are square and cover the original image stretched to a square; Stage 00.01 maps them with
:func:`chexpercept.frame.mask_to_frame` (resize to the original H x W, then the same transform),
so masks and images stay aligned in both modes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from chexpercept.errors import InputError
from chexpercept.files import read_json, write_json_atomic
from chexpercept.frame import (
    PREPARE_MODES,
    FrameTransform,
    frame_transform,
    image_to_frame,
    prepared_png,
    read_frame_transform,
    transform_sidecar,
    transforms_index,
)
from chexpercept.images import WORK_SIZE, read_cxr, write_png_atomic
from utils import imaging

logger = logging.getLogger(__name__)


def missing_sources(images: Mapping[str, str], jpg_root: str | Path) -> list[str]:
    """One ``dicom_id: path`` line per source JPG that does not exist."""
    return [f"{dicom_id}: {Path(jpg_root) / rel}" for dicom_id, rel in images.items()
            if not (Path(jpg_root) / rel).is_file()]


def read_gray(src: str | Path) -> np.ndarray:
    """Read a CXR at its own size as 8-bit gray.

    The one loader of every path (:func:`chexpercept.images.read_cxr` without resizing, i.e.
    :func:`utils.imaging.load_image`; docs/images.md, "Image loading"): EXIF orientation
    applied, 16-bit / float rescaled by their min..max, palette resolved, alpha flattened onto
    black, colour converted to luminance. So the PNG prepared here has the pixels a model is
    shown for the same file.

    Returns:
        (H, W) uint8 at the file's (upright) resolution.

    Raises:
        InputError: If the file is missing or cannot be decoded.
    """
    return read_cxr(src, size=None)


def convert_jpg(src: str | Path, dst: str | Path, mode: str = "letterbox",
                size: int = WORK_SIZE) -> FrameTransform:
    """Convert one CXR into the working frame and record how.

    Writes the sidecar ``<stem>.transform.json`` first and the PNG last (the PNG marks the item
    done), both atomically. The sidecar records the source's EXIF orientation, which the loader
    applies, so a provided mask stored in the source's pixel grid can be turned the same way
    (docs/curation.md, "Working frame").

    Args:
        src: The original JPG/PNG.
        dst: The destination ``<dicom_id>.png``.
        mode: One of :data:`chexpercept.frame.PREPARE_MODES`.
        size: Frame side (1024).

    Returns:
        The transform used.

    Raises:
        InputError: If the source cannot be decoded.
    """
    arr = read_gray(src)
    t = replace(frame_transform(arr.shape[1], arr.shape[0], mode, size),
                orientation=imaging.inspect_image(src).orientation)
    out = image_to_frame(arr, t)
    dst = Path(dst)
    write_json_atomic(dst.with_name(f"{dst.stem}.transform.json"), t.to_json())
    write_png_atomic(dst, out)
    return t


@dataclass(frozen=True)
class PrepareSummary:
    """Outcome of :func:`prepare_images`.

    Attributes:
        converted: PNGs written now.
        skipped: PNGs already present with a transform of the requested mode (resume).
    """

    converted: int
    skipped: int


def _is_current(cxr_dir: str | Path, dicom_id: str, mode: str) -> bool:
    if not prepared_png(cxr_dir, dicom_id).is_file():
        return False
    t = read_frame_transform(cxr_dir, dicom_id)
    # A record without ``orientation`` predates it: prepare again so the EXIF turn is known.
    return (t is not None and t.mode == mode
            and "orientation" in read_json(transform_sidecar(cxr_dir, dicom_id)))


def prepare_images(images: Mapping[str, str], jpg_root: str | Path,
                   cxr_dir: str | Path, *, mode: str = "letterbox",
                   iterate=iter) -> PrepareSummary:
    """Convert every sampled dicom's JPG into the working-frame PNG folder.

    A PNG is reused only when its sidecar records the same ``mode`` and the source's
    ``orientation`` (a PNG without a sidecar, made in the other mode, or recorded before
    orientations were, is converted again). All sources still to convert are checked
    before anything is converted; every missing one is reported at once. Finally the index
    ``transforms.json`` (``{dicom_id: transform}`` of ``images``) is rewritten.

    Args:
        images: ``dicom_id -> image_path`` (relative to ``jpg_root``, e.g. ``files/p10/...``).
        jpg_root: ``path.mimic_cxr_jpg_path``.
        cxr_dir: ``path.mimic_cxr_path`` (created if needed).
        mode: ``source_data_curation.prepare_mode`` (``letterbox`` or ``stretch``).
        iterate: Wraps the item loop (e.g. a progress bar); default plain iteration.

    Returns:
        Counts of converted and already-present PNGs.

    Raises:
        InputError: Naming each dicom_id whose JPG is missing (with its path), or an image that
            cannot be decoded.
        ValueError: For an unknown ``mode``.
    """
    if mode not in PREPARE_MODES:
        raise ValueError(f"unknown prepare mode {mode!r}; expected one of {PREPARE_MODES}")
    todo = {d: rel for d, rel in images.items() if not _is_current(cxr_dir, d, mode)}
    missing = missing_sources(todo, jpg_root)
    if missing:
        raise InputError(f"{len(missing)} source JPG(s) missing under {jpg_root} "
                         f"(path.mimic_cxr_jpg_path):\n  " + "\n  ".join(missing))
    for dicom_id in iterate(list(todo)):
        convert_jpg(Path(jpg_root) / todo[dicom_id], prepared_png(cxr_dir, dicom_id), mode)
    index = {}
    for dicom_id in sorted(images):
        t = read_frame_transform(cxr_dir, dicom_id)
        if t is not None:
            index[dicom_id] = t.to_json()
    if images:
        write_json_atomic(transforms_index(cxr_dir), index)
    return PrepareSummary(converted=len(todo), skipped=len(images) - len(todo))


def transform_or_none(cxr_dir: str | Path, dicom_id: str) -> FrameTransform | None:
    """The recorded transform of a prepared CXR (None: treat masks as plain 1024 resizes)."""
    return read_frame_transform(cxr_dir, dicom_id)


__all__ = ["PrepareSummary", "convert_jpg", "missing_sources", "prepare_images",
           "read_gray", "transform_or_none", "transform_sidecar"]
