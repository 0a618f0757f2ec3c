"""Stage 01 anatomy: the names of lungs, zones and lung regions, in the release's order.

Names are from the patient's perspective (patient-right = image-left) and are the exact keys of
``geometrical_mask_infos`` in ``deformation_results.json`` (docs/deformation.md, "Lung geometry").
"""

from __future__ import annotations

SIDES: tuple[str, ...] = ("right", "left")
"""Lung sides in the release's order (right first)."""

LUNG_NAMES: dict[str, str] = {"left": "left lung", "right": "right lung"}
"""Key of each side's lung in ``overlap`` (also the CXAS class name)."""

ZONE_SUFFIXES: tuple[str, ...] = ("upper zone lung", "mid zone lung", "lung base")
"""Zone name suffixes, top to bottom (docs/deformation.md, "Anatomy masks"; CXAS class names)."""

ZONE_NAMES: tuple[str, ...] = tuple(f"{side} {z}" for side in SIDES for z in ZONE_SUFFIXES)
"""The six zone keys: ``right upper zone lung`` ... ``left lung base``."""

AXIAL_REGIONS: tuple[str, ...] = ("right medial lung", "left medial lung", "right lateral lung",
                                  "left lateral lung")
"""Axial (medial/lateral halves) regions, in the release's dict order."""

PERIPHERAL_REGIONS: tuple[str, ...] = ("right peripheral lung", "left peripheral lung")
"""Radial (peripheral band) regions, in the release's dict order."""

CPA_NAMES: tuple[str, ...] = ("right costophrenic angle", "left costophrenic angle")
"""Costophrenic-angle regions (peripheral band below 3/4 of the lung height)."""

CHEXMASK_FILES: dict[str, str] = {"right": "right_lung", "left": "left_lung", "heart": "heart"}
"""CheXmask-U file stems (``<dicom>/<stem>.png``; docs/deformation.md, "Anatomy masks")."""

ZONE_SOURCE_THIRDS = "chex_vertical_thirds"
"""``mask_deformation.zone_mask_source`` value for zones by vertical thirds (release default)."""
ZONE_SOURCE_CXAS = "cxas"
"""``mask_deformation.zone_mask_source`` value for the CXAS zone PNGs."""
ZONE_SOURCES: tuple[str, ...] = (ZONE_SOURCE_THIRDS, ZONE_SOURCE_CXAS)


def side_of(name: str) -> str:
    """Side (``"right"``/``"left"``) of a lung, zone or region name (its first word).

    Raises:
        ValueError: If ``name`` does not start with a side.
    """
    side = name.split(" ", 1)[0]
    if side not in SIDES:
        raise ValueError(f"anatomy name {name!r} does not start with 'right' or 'left'")
    return side


def combined_region_name(region: str, zone: str) -> str:
    """Key of a region ∩ zone intersection, e.g. ``right lateral lung & right mid zone lung``."""
    return f"{region} & {zone}"


def lung_region_names() -> tuple[str, ...]:
    """The 20 lung-region keys in the release's insertion order.

    CPAs (right, left), then axial (right medial, left medial, right lateral, left lateral), then
    peripheral (right, left), each intersected with its side's (upper, mid, base) zones
    (docs/deformation.md, "Lung geometry").
    """
    names = list(CPA_NAMES)
    for region in AXIAL_REGIONS + PERIPHERAL_REGIONS:
        side = side_of(region)
        names.extend(combined_region_name(region, f"{side} {z}") for z in ZONE_SUFFIXES)
    return tuple(names)


LUNG_REGION_NAMES: tuple[str, ...] = lung_region_names()
"""The 20 lung-region keys (18 region ∩ zone intersections + 2 CPAs)."""
