"""Stage 01 anatomy: lung, zone and lung-region masks built from CheXmask-U/CXAS masks.

Implements the release's ``prepare_lung_masks``, ``_build_cxas_cache`` and ``anatomy_masks.py``
(docs/deformation.md, "Anatomy masks" and "Lung geometry"). All masks are
(1024, 1024) bool in the working frame; patient-right = image-left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import cv2
import numpy as np

from chexpercept.anatomy.names import (
    AXIAL_REGIONS,
    CPA_NAMES,
    PERIPHERAL_REGIONS,
    SIDES,
    ZONE_NAMES,
    ZONE_SUFFIXES,
    combined_region_name,
    side_of,
)

#: Peripheral erosion width used when the right lung is empty (docs/deformation.md, "Lung
#: geometry").
DEFAULT_AVG_WIDTH_PX = 50
#: Costophrenic angle = peripheral band below this fraction of the lung height
#: (docs/deformation.md, "Lung geometry").
CPA_HEIGHT_FRAC = 0.75


@dataclass(frozen=True)
class CaseAnatomy:
    """The anatomy masks of one case, all (1024, 1024) bool.

    Attributes:
        left_lung: Patient-left lung (image right), lesion components touching it OR-ed in.
        right_lung: Patient-right lung (image left), lesion components touching it OR-ed in.
        zones: The six zone masks keyed by :data:`~chexpercept.anatomy.names.ZONE_NAMES`.
        lung_regions: The 20 lung-region masks in release order, or None for cardiomegaly.
    """

    left_lung: np.ndarray
    right_lung: np.ndarray
    zones: dict[str, np.ndarray]
    lung_regions: dict[str, np.ndarray] | None

    def lung(self, side: str) -> np.ndarray:
        """The lung of ``side`` (``"left"`` or ``"right"``)."""
        return self.left_lung if side == "left" else self.right_lung

    @property
    def lung_union(self) -> np.ndarray:
        """Union of both lungs, (1024, 1024) bool."""
        return self.left_lung | self.right_lung


def _components(mask: np.ndarray) -> tuple[int, np.ndarray]:
    """4-connected components (scipy ``label``'s default structure, as in the release)."""
    n, labels = cv2.connectedComponents(mask.astype(np.uint8), connectivity=4)
    return n, labels


def augment_lungs_with_lesion(
    left: np.ndarray, right: np.ndarray, lesion: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """OR every connected component of ``lesion`` that touches a lung into that lung.

    A component touches a lung when it shares at least one pixel with it, so a lesion that
    obscures the lung border still counts as inside "its" lung (docs/deformation.md, "Anatomy
    masks").

    Args:
        left: (H, W) bool patient-left lung.
        right: (H, W) bool patient-right lung.
        lesion: (H, W) bool lesion (optimal combined) mask.

    Returns:
        ``(left, right)``, new (H, W) bool arrays.
    """
    left, right = left.copy(), right.copy()
    n, labels = _components(lesion)
    if n <= 1:
        return left, right
    touch_left = np.unique(labels[left & lesion])
    touch_right = np.unique(labels[right & lesion])
    for ids, lung in ((touch_left, left), (touch_right, right)):
        ids = ids[ids > 0]
        if ids.size:
            lung |= np.isin(labels, ids)
    return left, right


def build_lungs(
    chex_left: np.ndarray, chex_right: np.ndarray, cxas_left: np.ndarray,
    cxas_right: np.ndarray, lesion: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Lung masks: CheXmask-U ∧ CXAS per side, then lesion components OR-ed in.

    Args:
        chex_left: (H, W) bool CheXmask-U ``left_lung``.
        chex_right: (H, W) bool CheXmask-U ``right_lung``.
        cxas_left: (H, W) bool CXAS ``left lung``.
        cxas_right: (H, W) bool CXAS ``right lung``.
        lesion: (H, W) bool lesion mask (all optimal components).

    Returns:
        ``(left, right)`` (H, W) bool (docs/deformation.md, "Anatomy masks").
    """
    return augment_lungs_with_lesion(chex_left & cxas_left, chex_right & cxas_right, lesion)


def vertical_third_zones(left: np.ndarray, right: np.ndarray) -> dict[str, np.ndarray]:
    """Zones by vertical thirds of each lung's y-extent (``chex_vertical_thirds``).

    With ``h = ymax - ymin + 1``, ``b1 = ymin + h // 3`` and ``b2 = ymin + 2 * h // 3``:
    upper = rows ``y <= b1``, mid = ``b1 < y <= b2``, base = ``y > b2`` (docs/deformation.md,
    "Anatomy masks"). An empty lung gives three empty zones.

    Args:
        left: (H, W) bool patient-left lung.
        right: (H, W) bool patient-right lung.

    Returns:
        The six zones, (H, W) bool, keyed and ordered as ``ZONE_NAMES``.
    """
    zones: dict[str, np.ndarray] = {}
    for side, lung in (("right", right), ("left", left)):
        rows = np.flatnonzero(lung.any(axis=1))
        if rows.size == 0:
            for z in ZONE_SUFFIXES:
                zones[f"{side} {z}"] = np.zeros_like(lung)
            continue
        ymin, ymax = int(rows[0]), int(rows[-1])
        h = ymax - ymin + 1
        b1, b2 = ymin + h // 3, ymin + 2 * h // 3
        y = np.arange(lung.shape[0])[:, None]
        zones[f"{side} upper zone lung"] = lung & (y <= b1)
        zones[f"{side} mid zone lung"] = lung & (y > b1) & (y <= b2)
        zones[f"{side} lung base"] = lung & (y > b2)
    return {name: zones[name] for name in ZONE_NAMES}


def restrict_zones(
    zones: Mapping[str, np.ndarray], lung_union: np.ndarray
) -> dict[str, np.ndarray]:
    """CXAS zones AND the lung union (lung lesions; docs/deformation.md, "Anatomy masks")."""
    return {name: zones[name] & lung_union for name in ZONE_NAMES}


def _extent(mask: np.ndarray, axis: int) -> tuple[int, int] | None:
    idx = np.flatnonzero(mask.any(axis=axis))
    if idx.size == 0:
        return None
    return int(idx[0]), int(idx[-1])


def axial_regions(left: np.ndarray, right: np.ndarray) -> dict[str, np.ndarray]:
    """Medial/lateral halves of each lung, split at ``mid_x = (xmax + xmin) // 2``.

    ``left medial`` = left lung at ``x < mid``, ``left lateral`` = ``x >= mid``; ``right medial``
    = right lung at ``x >= mid``, ``right lateral`` = ``x < mid`` (docs/deformation.md, "Lung
    geometry").

    Returns:
        (H, W) bool masks keyed and ordered as ``AXIAL_REGIONS``.
    """
    out: dict[str, np.ndarray] = {}
    x = np.arange(left.shape[1])[None, :]
    for side, lung in (("right", right), ("left", left)):
        ext = _extent(lung, axis=0)
        if ext is None:
            out[f"{side} medial lung"] = np.zeros_like(lung)
            out[f"{side} lateral lung"] = np.zeros_like(lung)
            continue
        mid = (ext[0] + ext[1]) // 2
        low, high = lung & (x < mid), lung & (x >= mid)
        out[f"{side} medial lung"] = high if side == "right" else low
        out[f"{side} lateral lung"] = low if side == "right" else high
    return {name: out[name] for name in AXIAL_REGIONS}


def _row_width(lung: np.ndarray, y: int) -> int:
    return int(lung[y].sum())


def peripheral_regions(left: np.ndarray, right: np.ndarray) -> dict[str, np.ndarray]:
    """Peripheral band of each lung: the lung minus everything medial of an eroded core.

    ``e = int(avg_width / 2)`` where ``avg_width`` is the mean right-lung row width (pixels) at
    ``y = ymin + (ymax - ymin) // 3`` and ``ymin + 2 * (ymax - ymin) // 3`` (50 if the right lung
    is empty). Both lungs are eroded with an e×e square (reflect border); the core of a side is
    the largest connected component of the eroded lung. Rows from the lung top to the core's top
    row are cut medial of the core's top point, rows inside the core's extent medial of the core's
    most lateral pixel in that row, rows from the core's bottom row down medial of its bottom
    point (docs/deformation.md, "Lung geometry"). The top/bottom point is the core's most
    lateral pixel in its first/last row. A side whose core is empty keeps the whole lung as
    periphery.

    Returns:
        (H, W) bool masks keyed and ordered as ``PERIPHERAL_REGIONS``.
    """
    y_ext = _extent(right, axis=1)
    if y_ext is None:
        avg_width = float(DEFAULT_AVG_WIDTH_PX)
    else:
        ymin, ymax = y_ext
        ys = (ymin + (ymax - ymin) // 3, ymin + 2 * (ymax - ymin) // 3)
        avg_width = float(np.mean([_row_width(right, y) for y in ys]))
    e = max(int(avg_width / 2), 1)
    kernel = np.ones((e, e), np.uint8)
    eroded = cv2.erode((left | right).astype(np.uint8), kernel,
                       borderType=cv2.BORDER_REFLECT).astype(bool)
    out: dict[str, np.ndarray] = {}
    for side, lung in (("right", right), ("left", left)):
        out[f"{side} peripheral lung"] = _peripheral_band(lung, eroded & lung, side)
    return {name: out[name] for name in PERIPHERAL_REGIONS}


def _peripheral_band(lung: np.ndarray, eroded: np.ndarray, side: str) -> np.ndarray:
    n, labels, stats, _ = cv2.connectedComponentsWithStats(eroded.astype(np.uint8), connectivity=8)
    if n <= 1 or not lung.any():
        return lung.copy()
    core = labels == (1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA])))
    rows = np.flatnonzero(core.any(axis=1))
    top, bottom = int(rows[0]), int(rows[-1])
    width = lung.shape[1]
    # Per-row cut position: the core's most lateral x (right lung: min x; left lung: max x).
    cut = np.empty(lung.shape[0], np.int64)
    if side == "right":
        first = np.where(core, np.arange(width)[None, :], width).min(axis=1)
    else:
        first = np.where(core, np.arange(width)[None, :], -1).max(axis=1)
    cut[top:bottom + 1] = first[top:bottom + 1]
    cut[:top] = first[top]
    cut[bottom + 1:] = first[bottom]
    x = np.arange(width)[None, :]
    keep = x < cut[:, None] if side == "right" else x > cut[:, None]
    return lung & keep


def costophrenic_angles(
    peripheral: Mapping[str, np.ndarray], left: np.ndarray, right: np.ndarray
) -> dict[str, np.ndarray]:
    """Costophrenic angles: the peripheral band below 3/4 of its lung's height.

    Rows above ``ymin + int(0.75 (ymax - ymin))`` of the lung are zeroed (docs/deformation.md,
    "Lung geometry").

    Returns:
        (H, W) bool masks keyed and ordered as ``CPA_NAMES``.
    """
    out: dict[str, np.ndarray] = {}
    for name in CPA_NAMES:
        side = side_of(name)
        lung = left if side == "left" else right
        band = peripheral[f"{side} peripheral lung"].copy()
        ext = _extent(lung, axis=1)
        if ext is not None:
            band[: ext[0] + int(CPA_HEIGHT_FRAC * (ext[1] - ext[0]))] = False
        out[name] = band
    return out


def build_lung_regions(
    left: np.ndarray, right: np.ndarray, zones: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The 20 lung regions in the release's dict order.

    CPAs first, then each axial and peripheral region intersected with each same-side zone,
    keyed ``"<region> & <side> <zone>"`` (docs/deformation.md, "Lung geometry"; order of
    :data:`~chexpercept.anatomy.names.LUNG_REGION_NAMES`).

    Args:
        left: (H, W) bool patient-left lung (lesion-augmented).
        right: (H, W) bool patient-right lung (lesion-augmented).
        zones: The six zone masks.

    Returns:
        20 (H, W) bool masks.
    """
    axial = axial_regions(left, right)
    peripheral = peripheral_regions(left, right)
    regions: dict[str, np.ndarray] = dict(costophrenic_angles(peripheral, left, right))
    for name, mask in list(axial.items()) + list(peripheral.items()):
        side = side_of(name)
        for z in ZONE_SUFFIXES:
            zone = f"{side} {z}"
            regions[combined_region_name(name, zone)] = mask & zones[zone]
    return regions


def build_case_anatomy(
    left: np.ndarray, right: np.ndarray, *, with_regions: bool,
    cxas_zones: Mapping[str, np.ndarray] | None = None,
) -> CaseAnatomy:
    """Assemble zones and (optionally) lung regions from lesion-augmented lungs.

    Args:
        left: (H, W) bool patient-left lung (from :func:`build_lungs`).
        right: (H, W) bool patient-right lung.
        with_regions: Build the 20 lung regions (False for cardiomegaly).
        cxas_zones: The six CXAS zone masks when ``zone_mask_source`` is ``cxas``; None for
            vertical thirds. For lung lesions they are intersected with the lung union.

    Returns:
        The case's :class:`CaseAnatomy`.
    """
    if cxas_zones is None:
        zones = vertical_third_zones(left, right)
    elif with_regions:
        zones = restrict_zones(cxas_zones, left | right)
    else:
        zones = {name: cxas_zones[name].copy() for name in ZONE_NAMES}
    regions = build_lung_regions(left, right, zones) if with_regions else None
    return CaseAnatomy(left_lung=left, right_lung=right, zones=zones, lung_regions=regions)


__all__ = [
    "CaseAnatomy",
    "SIDES",
    "augment_lungs_with_lesion",
    "axial_regions",
    "build_case_anatomy",
    "build_lung_regions",
    "build_lungs",
    "costophrenic_angles",
    "peripheral_regions",
    "restrict_zones",
    "vertical_third_zones",
]
