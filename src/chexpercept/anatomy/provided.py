"""Stage 01.00/01.01 anatomy I/O: provided masks -> ``chexmasku_pred/``, ``cxas_pred/``.

Validates and copies the provided masks into the Stage-01 outputs and loads one case's anatomy.

Layouts (docs/deformation.md, "Anatomy masks"): CheXmask-U ``<dicom>/{right_lung,left_lung,
heart}.png``; CXAS ``<dicom>/<class name>.png`` (class names contain spaces).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from chexpercept.anatomy.backends import ANATOMY_BACKENDS, LAYOUT_CHEXMASK, LAYOUT_CXAS
from chexpercept.anatomy.masks import CaseAnatomy, build_case_anatomy, build_lungs
from chexpercept.anatomy.names import (
    CHEXMASK_FILES,
    LUNG_NAMES,
    ZONE_NAMES,
    ZONE_SOURCE_CXAS,
    ZONE_SOURCE_THIRDS,
    ZONE_SOURCES,
)
from chexpercept.errors import ConfigError, InputError
from chexpercept.frame import (
    WORK_FRAME,
    FrameTransform,
    prepared_png,
    provided_mask_to_frame,
    read_frame_transform,
)
from chexpercept.images import read_mask, write_mask
from chexpercept.layouts import anatomy_mask_path

logger = logging.getLogger(__name__)


#: CheXmask-U files the pipeline reads (heart is copied when present but unused;
#: docs/deformation.md, "Anatomy masks").
CHEXMASK_REQUIRED: tuple[str, ...] = (CHEXMASK_FILES["right"], CHEXMASK_FILES["left"])
CHEXMASK_OPTIONAL: tuple[str, ...] = (CHEXMASK_FILES["heart"],)
#: CXAS lung classes the pipeline reads (docs/deformation.md, "Anatomy masks").
CXAS_LUNGS: tuple[str, ...] = (LUNG_NAMES["right"], LUNG_NAMES["left"])

_MAX_LISTED = 40


def check_zone_source(zone_source: str) -> str:
    """Validate ``mask_deformation.zone_mask_source``.

    The release treats any value other than ``chex_vertical_thirds`` as "CXAS"; a typo would
    silently switch the zone source, so only the two names are accepted.

    Raises:
        ConfigError: For any other value (listing the valid ones).
    """
    if zone_source not in ZONE_SOURCES:
        raise ConfigError(f"mask_deformation.zone_mask_source: unknown value {zone_source!r}; "
                          f"expected one of {', '.join(ZONE_SOURCES)}")
    return zone_source


def cxas_files(zone_source: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(required, optional)`` CXAS class names for a zone source.

    The six zone PNGs are required only when ``zone_source`` is ``cxas`` (they, and
    ``path.cxas_mask_path``, are otherwise not needed; docs/differences.md D11).
    """
    if check_zone_source(zone_source) == ZONE_SOURCE_CXAS:
        return CXAS_LUNGS + ZONE_NAMES, ()
    return CXAS_LUNGS, ZONE_NAMES


def _raise_missing(missing: Sequence[str], what: str, fix: str) -> None:
    if not missing:
        return
    listed = missing[:_MAX_LISTED]
    more = f"\n  ... and {len(missing) - _MAX_LISTED} more" if len(missing) > _MAX_LISTED else ""
    raise InputError(f"{len(missing)} {what} missing ({fix}):\n  " + "\n  ".join(listed) + more)


def find_missing(dicom_ids: Iterable[str], folder: Path, names: Sequence[str],
                 label: str) -> list[str]:
    """Lines ``<label> dicom <id>: <path>`` for every required mask file that does not exist."""
    return [f"{label} dicom {d}: {anatomy_mask_path(folder, d, n)}"
            for d in dicom_ids for n in names if not anatomy_mask_path(folder, d, n).is_file()]


@dataclass
class AnatomyPrepSummary:
    """Counts of a 01.00 run (the stage's summary line)."""

    processed: int = 0
    skipped_done: int = 0
    files_written: int = 0
    dicom_ids: list[str] = field(default_factory=list)


def _same_dir(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def mask_frame(cxr_dir: str | Path | None, dicom_id: str,
               frame: str) -> tuple[FrameTransform | None, Path | None]:
    """The frame a provided anatomy mask of ``dicom_id`` is drawn in, and its CXR file.

    ``frame`` ``work``: the working frame itself (:data:`chexpercept.frame.WORK_FRAME`: a
    square at any scale). ``original`` with a Stage 00 transform recorded in ``cxr_dir``: that
    transform and the prepared CXR (named in errors). Otherwise ``(None, None)``: the
    documented release frame, the mask covering the image stretched to 1024 x 1024
    (docs/images.md, "Masks and images").

    Raises:
        SchemaError: If the recorded transform is malformed.
    """
    if frame == "work":
        return WORK_FRAME, None
    transform = read_frame_transform(cxr_dir, dicom_id) if cxr_dir is not None else None
    if transform is None:
        return None, None
    return transform, prepared_png(str(cxr_dir), dicom_id)


def read_provided_mask(path: Path, transform: FrameTransform | None,
                       image_path: Path | None) -> np.ndarray:
    """A provided anatomy mask in the working frame (:func:`mask_frame`'s frame).

    With a frame: the CXR's EXIF turn, the shape check and the transform
    (:func:`chexpercept.frame.provided_mask_to_frame`); without one, the release frame's plain
    resize (nearest).

    Raises:
        InputError: If the file cannot be read or its shape fits neither grid of its CXR
            (naming the mask file, the CXR file and the sizes).
    """
    if transform is None:
        return read_mask(path, resize=True)
    return provided_mask_to_frame(path, transform, image_path)


def prepare_provided_anatomy(
    dicom_ids: Sequence[str], *, chexmask_src: str | Path | None, cxas_src: str | Path | None,
    chexmask_out: Path, cxas_out: Path, zone_source: str,
    cxr_dir: str | Path | None = None, frame: str = "original",
    layouts: Sequence[str] = (LAYOUT_CHEXMASK, LAYOUT_CXAS),
) -> AnatomyPrepSummary:
    """Backend ``provided`` of 01.00: validate the provided masks and copy them, resized to 1024.

    Every unique dicom (duplicates are processed once; docs/differences.md D12) gets the required
    CheXmask-U (``right_lung``, ``left_lung``) and CXAS (``right lung``, ``left lung``, plus the
    six zones when ``zone_source`` is ``cxas``) files, and the optional ones (``heart``, CXAS zones)
    when present. With ``frame`` ``original`` and a Stage 00 transform recorded for the dicom
    (``<cxr_dir>/<dicom_id>.transform.json``), each mask is taken to cover the original CXR (at
    its own size, or stretched to a square) and mapped like the image
    (:func:`chexpercept.frame.provided_mask_to_frame`: the CXR's EXIF turn for a mask in the
    source's stored grid, a shape check, resize to the original H x W, then letterbox or
    stretch); with ``frame`` ``work`` it must be square and is resized (nearest) to
    1024 × 1024; with neither (no transform recorded) it is resized to 1024 × 1024, the release
    frame (docs/images.md, "Masks and images"). Masks are written as 0/255 L PNGs, atomically.
    A dicom whose outputs all exist is skipped (resume). When a source folder is the output
    folder, files are only validated. Only the ``layouts`` given are handled (the
    others are written by model backends, :mod:`chexpercept.anatomy.backends`).

    Args:
        dicom_ids: dicom ids (duplicates allowed).
        chexmask_src: Provided CheXmask-U folder (config ``path.chexmask_path``).
        cxas_src: Provided CXAS folder (config ``path.cxas_mask_path``).
        chexmask_out: Stage-01 ``chexmasku_pred/``.
        cxas_out: Stage-01 ``cxas_pred/``.
        zone_source: ``mask_deformation.zone_mask_source``.
        cxr_dir: ``path.mimic_cxr_path`` (where the transforms are); None: plain resize.
        frame: ``anatomy.provided_frame`` (``original`` or ``work``).
        layouts: Which of ``chexmask`` / ``cxas`` to copy (default both).

    Returns:
        The run's counts.

    Raises:
        ConfigError: If a source folder is not configured.
        InputError: Listing every missing required file (dicom and path) at once; or naming
            the mask file, its CXR and both sizes when a mask's shape fits neither the stored
            nor the upright grid of its CXR (``work``: is not square).
    """
    problems = []
    if LAYOUT_CHEXMASK in layouts and not chexmask_src:
        problems.append("path.chexmask_path (CheXmask-U masks <dicom>/{right_lung,left_lung}.png)")
    if LAYOUT_CXAS in layouts and not cxas_src:
        problems.append("path.cxas_mask_path (CXAS masks <dicom>/<class name>.png)")
    if problems:
        raise ConfigError("anatomy.backend 'provided' needs " + " and ".join(problems)
                          + " in the config (or a model backend: cxas, chexmask-u)")
    unique = list(dict.fromkeys(dicom_ids))
    cx_required, cx_optional = cxas_files(zone_source)
    sources = []
    if LAYOUT_CHEXMASK in layouts:
        sources.append((Path(str(chexmask_src)), chexmask_out, CHEXMASK_REQUIRED,
                        CHEXMASK_OPTIONAL, "CheXmask-U"))
    if LAYOUT_CXAS in layouts:
        sources.append((Path(str(cxas_src)), cxas_out, cx_required, cx_optional, "CXAS"))
    missing = [line for src, _, req, _, label in sources
               for line in find_missing(unique, src, req, label)]
    _raise_missing(missing, "anatomy mask file(s)",
                   "anatomy.backend 'provided' reads path.chexmask_path and path.cxas_mask_path")
    summary = AnatomyPrepSummary(dicom_ids=unique)
    for dicom in unique:
        jobs = []
        for src, dst, req, opt, _label in sources:
            if _same_dir(src, dst):
                continue
            for name in list(req) + [n for n in opt if anatomy_mask_path(src, dicom, n).is_file()]:
                jobs.append((anatomy_mask_path(src, dicom, name),
                             anatomy_mask_path(dst, dicom, name)))
        if all(dst.is_file() for _, dst in jobs):
            summary.skipped_done += 1
            continue
        transform, image = mask_frame(cxr_dir, dicom, frame)
        for src_path, dst_path in jobs:
            write_mask(dst_path, read_provided_mask(src_path, transform, image))
            summary.files_written += 1
        summary.processed += 1
    return summary


def load_case_anatomy(
    dicom_id: str, lesion: np.ndarray, *, with_regions: bool, chexmask_dir: str | Path,
    cxas_dir: str | Path, zone_source: str = ZONE_SOURCE_THIRDS,
    cxas_zone_dir: str | Path | None = None,
) -> CaseAnatomy:
    """Read one case's anatomy masks and build lungs, zones and lung regions.

    Args:
        dicom_id: The case's dicom id.
        lesion: (1024, 1024) bool optimal combined lesion mask (OR-ed into the lungs it touches).
        with_regions: Build the 20 lung regions (False for cardiomegaly).
        chexmask_dir: CheXmask-U folder (``<dicom>/{left,right}_lung.png``).
        cxas_dir: CXAS folder for the lungs (``<dicom>/{left,right} lung.png``).
        zone_source: ``chex_vertical_thirds`` or ``cxas``.
        cxas_zone_dir: CXAS folder for the zone PNGs (config ``path.cxas_mask_path``); read only
            when ``zone_source`` is ``cxas``.

    Returns:
        The case's :class:`CaseAnatomy`.

    Raises:
        ConfigError: If ``zone_source`` is ``cxas`` and ``cxas_zone_dir`` is not set.
        InputError: Naming the dicom and every missing file.
    """
    use_cxas_zones = check_zone_source(zone_source) == ZONE_SOURCE_CXAS
    if use_cxas_zones and not cxas_zone_dir:
        raise ConfigError("mask_deformation.zone_mask_source is 'cxas', so path.cxas_mask_path "
                          "(CXAS masks <dicom>/<zone name>.png) must be set in the config")
    chex, cx = Path(chexmask_dir), Path(cxas_dir)
    missing = (find_missing([dicom_id], chex, CHEXMASK_REQUIRED, "CheXmask-U")
               + find_missing([dicom_id], cx, CXAS_LUNGS, "CXAS"))
    if use_cxas_zones:
        missing += find_missing([dicom_id], Path(str(cxas_zone_dir)), ZONE_NAMES, "CXAS zone")
    _raise_missing(missing, "anatomy mask file(s)",
                   "run 01.00 00_generate_anatomy_mask.py or pass --chexmask-dir/--cxas-dir")
    left, right = build_lungs(
        read_mask(anatomy_mask_path(chex, dicom_id, CHEXMASK_FILES["left"])),
        read_mask(anatomy_mask_path(chex, dicom_id, CHEXMASK_FILES["right"])),
        read_mask(anatomy_mask_path(cx, dicom_id, LUNG_NAMES["left"])),
        read_mask(anatomy_mask_path(cx, dicom_id, LUNG_NAMES["right"])),
        lesion,
    )
    cxas_zones = None
    if use_cxas_zones:
        cxas_zones = {z: read_mask(anatomy_mask_path(str(cxas_zone_dir), dicom_id, z))
                      for z in ZONE_NAMES}
    return build_case_anatomy(left, right, with_regions=with_regions, cxas_zones=cxas_zones)


__all__ = [
    "ANATOMY_BACKENDS",
    "AnatomyPrepSummary",
    "check_zone_source",
    "cxas_files",
    "find_missing",
    "load_case_anatomy",
    "prepare_provided_anatomy",
]
