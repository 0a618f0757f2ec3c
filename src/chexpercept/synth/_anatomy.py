"""Synthetic fixtures: CheXmask-U / CXAS-layout anatomy masks and CXAS-style location names.

Everything here works on (1024, 1024) bool masks in the working frame.
"""

from __future__ import annotations

import numpy as np

#: Zone names of each lung in CXAS spelling, top to bottom ("<side> <zone>").
ZONES = ("upper zone lung", "mid zone lung", "lung base")

#: Height of the CXAS-style diaphragm band under each lung, pixels at 1024.
DIAPHRAGM_BAND_PX = 30

#: A lesion is located in a zone when it covers at least this many pixels of it (1024 frame).
#: Fixture-only rule (mimics MIMIC-ILS report locations, not a benchmark threshold).
ZONE_MIN_PX = 500


def vertical_thirds(lung: np.ndarray) -> list[np.ndarray]:
    """Split a lung into upper / mid / base by thirds of its vertical extent.

    Same rule as the ``chex_vertical_thirds`` zone source (docs/deformation.md, "Anatomy masks").

    Args:
        lung: (H, W) bool.

    Returns:
        Three (H, W) bool masks, top to bottom (all empty for an empty lung).
    """
    rows = np.flatnonzero(lung.any(axis=1))
    if rows.size == 0:
        return [np.zeros_like(lung) for _ in ZONES]
    y0, y1 = int(rows[0]), int(rows[-1]) + 1
    cuts = [y0 + round(k * (y1 - y0) / 3) for k in range(4)]
    ys = np.arange(lung.shape[0])[:, None]
    return [lung & (ys >= cuts[k]) & (ys < cuts[k + 1]) for k in range(3)]


def _between_lungs(right: np.ndarray, left: np.ndarray) -> np.ndarray:
    """Pixels strictly between the right lung's medial edge and the left lung's, row by row."""
    h, w = right.shape
    cols = np.arange(w)[None, :]
    r_any, l_any = right.any(axis=1), left.any(axis=1)
    r_max = np.where(r_any, w - 1 - np.argmax(right[:, ::-1], axis=1), -1)[:, None]
    l_min = np.where(l_any, np.argmax(left, axis=1), w)[:, None]
    return (cols > r_max) & (cols < l_min) & (r_any & l_any)[:, None]


def _below(lung: np.ndarray, band_px: int) -> np.ndarray:
    """A band of ``band_px`` rows under the lowest lung pixel of every column."""
    h = lung.shape[0]
    rows = np.arange(h)[:, None]
    has = lung.any(axis=0)[None, :]
    lowest = (h - 1 - np.argmax(lung[::-1, :], axis=0))[None, :]
    return has & (rows > lowest) & (rows <= lowest + band_px)


def anatomy_masks(right_lung: np.ndarray, left_lung: np.ndarray,
                  heart: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """CheXmask-U and CXAS-layout masks from lung silhouettes and the heart.

    Args:
        right_lung: (1024, 1024) bool, the patient's right lung silhouette (image left),
            including any part behind the heart.
        left_lung: (1024, 1024) bool, the patient's left lung silhouette.
        heart: (1024, 1024) bool.

    Returns:
        ``(chexmask, cxas)``: CheXmask-U files ``right_lung``, ``left_lung`` (lung minus heart)
        and ``heart``; CXAS classes (names with spaces, CXAS layout): ``lung``, ``right lung``,
        ``left lung`` (full silhouettes), ``heart``, the six ``<side> <zone>`` zones plus the
        bilateral ``upper zone lung`` / ``mid zone lung`` / ``lung base``, ``mediastinum``,
        ``cardiomediastinum`` and ``diaphragm``.
    """
    chexmask = {"right_lung": right_lung & ~heart, "left_lung": left_lung & ~heart,
                "heart": heart.copy()}
    cxas: dict[str, np.ndarray] = {"lung": right_lung | left_lung, "right lung": right_lung,
                                   "left lung": left_lung, "heart": heart.copy()}
    zones = {side: vertical_thirds(m) for side, m in (("right", right_lung), ("left", left_lung))}
    for k, zone in enumerate(ZONES):
        cxas[f"right {zone}"] = zones["right"][k]
        cxas[f"left {zone}"] = zones["left"][k]
        cxas[zone] = zones["right"][k] | zones["left"][k]
    heart_rows = np.flatnonzero(heart.any(axis=1))
    med = _between_lungs(right_lung, left_lung)
    if heart_rows.size:
        med[heart_rows[-1] + 1:] = False
    cxas["mediastinum"] = med | heart
    cxas["cardiomediastinum"] = med | heart
    cxas["diaphragm"] = (_below(right_lung, DIAPHRAGM_BAND_PX)
                         | _below(left_lung, DIAPHRAGM_BAND_PX)) & ~heart
    return chexmask, cxas


def location_names(lesion: str, mask: np.ndarray, cxas: dict[str, np.ndarray]) -> list[str]:
    """CXAS-style location list of a lesion, as MIMIC-ILS pairs carry it.

    ``heart`` for cardiomegaly. Otherwise, per side (right first), the zones covered by at
    least :data:`ZONE_MIN_PX` pixels, collapsed to ``<side> lung`` when all three are.

    Args:
        lesion: Lesion name.
        mask: (1024, 1024) bool lesion mask.
        cxas: CXAS masks from :func:`anatomy_masks`.

    Returns:
        Location names, e.g. ``["right lung base"]`` or ``["right lung", "left lung"]``.
    """
    if lesion == "cardiomegaly":
        return ["heart"]
    out: list[str] = []
    for side in ("right", "left"):
        hit = [z for z in ZONES if int((mask & cxas[f"{side} {z}"]).sum()) >= ZONE_MIN_PX]
        if len(hit) == len(ZONES):
            out.append(f"{side} lung")
        else:
            out.extend(f"{side} {z}" for z in hit)
    return out


def location_text(locations: list[str]) -> str:
    """Join locations as MIMIC-ILS basic instructions do ("A", "A and B", "A, B, and C")."""
    locs = list(dict.fromkeys(locations))
    if len(locs) <= 1:
        return locs[0] if locs else "right lung and left lung"
    if len(locs) == 2:
        return f"{locs[0]} and {locs[1]}"
    return ", ".join(locs[:-1]) + f", and {locs[-1]}"
