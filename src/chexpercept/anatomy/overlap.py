"""Stage 01 anatomy: ``geometrical_mask_infos`` (lesion overlap with lungs, zones and regions).

Implements the release's ``process_mask.get_geometrical_mask_info`` (docs/deformation.md, "Lung
geometry"): ``overlap_ratio = |lesion ∧ ref| / |ref|`` (the fraction of the *anatomy* covered).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from chexpercept.anatomy.masks import CaseAnatomy
from chexpercept.anatomy.names import LUNG_NAMES

#: A lung "contains" the lesion if it covers >= 1 % of the lung (docs/deformation.md, "Lung
#: geometry").
LUNG_OVERLAP_THRESHOLD = 0.01
#: A zone/region "contains" the lesion if it covers >= 20 % of it (docs/deformation.md, "Lung
#: geometry").
REGION_OVERLAP_THRESHOLD = 0.2


def overlap_ratio(lesion: np.ndarray, ref: np.ndarray) -> tuple[float, int]:
    """Fraction of ``ref`` covered by ``lesion`` and the intersection size.

    Args:
        lesion: (H, W) bool.
        ref: (H, W) bool anatomy mask.

    Returns:
        ``(ratio, size)``: ratio in [0, 1] (0.0 for an empty ``ref``), size in pixels.
    """
    ref_size = int(np.count_nonzero(ref))
    inter = int(np.count_nonzero(lesion & ref))
    return (inter / ref_size if ref_size else 0.0), inter


def ensure_best_overlap(group: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Promote the best-covered entry when no entry of ``group`` has ``has_overlap``.

    The highest-ratio entry (first one on ties) is set True if its ratio is > 0
    (``_ensure_best_overlap``, docs/deformation.md, "Lung geometry"). Edits ``group`` in place.

    Returns:
        ``group``.
    """
    if not group or any(v["has_overlap"] for v in group.values()):
        return group
    best = max(group, key=lambda k: group[k]["overlap_ratio"])
    if group[best]["overlap_ratio"] > 0:
        group[best]["has_overlap"] = True
    return group


def _region_group(lesion: np.ndarray, masks: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    group: dict[str, dict[str, Any]] = {}
    for name, mask in masks.items():
        ratio, _ = overlap_ratio(lesion, mask)
        group[name] = {"has_overlap": ratio >= REGION_OVERLAP_THRESHOLD, "overlap_ratio": ratio}
    return ensure_best_overlap(group)


def geometrical_mask_info(
    component: np.ndarray, component_id: str, anatomy: CaseAnatomy
) -> dict[str, Any]:
    """Overlap of one optimal component with the case's anatomy.

    Args:
        component: (H, W) bool optimal component mask.
        component_id: Its ``mask_component_id`` (``"0"``, ``"1"``, ...).
        anatomy: The case's lungs, zones and (non-cardiomegaly) lung regions.

    Returns:
        ``{"mask_component_id", "overlap": {"left lung", "right lung", "zones"[, "lung_regions"]}}``
        exactly as the release (docs/deformation.md, "Lung geometry"). Lungs: ``has_overlap``
        iff ratio >= 0.01 and ``size`` = intersection pixels (0 below the threshold);
        zones/regions: ``has_overlap`` iff ratio >= 0.2, best entry promoted. ``lung_regions``
        is absent for cardiomegaly.
    """
    overlap: dict[str, Any] = {}
    for side in ("left", "right"):
        ratio, size = overlap_ratio(component, anatomy.lung(side))
        has = ratio >= LUNG_OVERLAP_THRESHOLD
        overlap[LUNG_NAMES[side]] = {"has_overlap": has, "overlap_ratio": ratio,
                                     "size": size if has else 0}
    overlap["zones"] = _region_group(component, anatomy.zones)
    if anatomy.lung_regions is not None:
        overlap["lung_regions"] = _region_group(component, anatomy.lung_regions)
    return {"mask_component_id": component_id, "overlap": overlap}


def overlapping_anatomy(info: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``lesion_overlap``: the entries of a geometrical info with ``has_overlap`` True.

    Args:
        info: One ``geometrical_mask_infos`` entry.

    Returns:
        ``{"zones": {name: {"overlap_ratio", "key": "zones"}}, "lung_regions": {...}}``
        (``lung_regions`` is ``{}`` for cardiomegaly; docs/deformation.md, "Outputs").
    """
    out: dict[str, dict[str, dict[str, Any]]] = {"zones": {}, "lung_regions": {}}
    for key in ("zones", "lung_regions"):
        for name, entry in (info["overlap"].get(key) or {}).items():
            if entry["has_overlap"]:
                out[key][name] = {"overlap_ratio": entry["overlap_ratio"], "key": key}
    return out


__all__ = [
    "LUNG_OVERLAP_THRESHOLD",
    "REGION_OVERLAP_THRESHOLD",
    "ensure_best_overlap",
    "geometrical_mask_info",
    "overlap_ratio",
    "overlapping_anatomy",
]
