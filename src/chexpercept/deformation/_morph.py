"""Stage 01 deformation: morphology primitives (cumulative dilations/erosions, contours, edits).

All masks are (1024, 1024) bool in the working frame; points are (x, y) int pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import cv2
import numpy as np

EXPANSION = "expansion"
CONTRACTION = "contraction"
OPERATIONS: tuple[str, ...] = (EXPANSION, CONTRACTION)

#: Radius of the edit neighbourhood around a point = NBHD_SCALE × (distance of the point to the
#: mask boundary) + NBHD_MARGIN_PX. Our choice (the release used SAM3 prompts instead): the
#: neighbourhood always reaches back from the point to the mask, so the edit is a local bulge
#: or notch connected to the mask.
NBHD_SCALE = 1.25
NBHD_MARGIN_PX = 16

_SQUARE3 = np.ones((3, 3), np.uint8)


@lru_cache(maxsize=8)
def ellipse_kernel(size_px: int) -> np.ndarray:
    """A ``size_px`` × ``size_px`` elliptical structuring element (release: 32)."""
    return cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (size_px, size_px))


def opposite(op: str) -> str:
    """The opposite operation (the revision of a deformation)."""
    return CONTRACTION if op == EXPANSION else EXPANSION


def level_iterations(op: str, depth: int, iterations_per_depth: int) -> int:
    """Kernel iterations of depth ``depth``: 2 per depth for expansion, 1 for contraction.

    The release's rule (docs/deformation.md, "Deformation candidates").
    """
    return (2 if op == EXPANSION else 1) * depth * iterations_per_depth


def contour_pixels(mask: np.ndarray) -> np.ndarray:
    """Pixels of the external 1-px contours of ``mask``.

    Args:
        mask: (H, W) bool.

    Returns:
        (N, 2) int64 (x, y), in row-major order (deterministic).
    """
    u8 = mask.astype(np.uint8)
    contours, _ = cv2.findContours(u8, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    canvas = np.zeros_like(u8)
    if contours:
        cv2.drawContours(canvas, contours, -1, 1, 1)
    ys, xs = np.nonzero(canvas)
    return np.stack([xs, ys], axis=1).astype(np.int64)


class MorphStack:
    """Lazily cached cumulative dilations/erosions, contours and distance maps of one mask.

    Args:
        mask: (H, W) bool base mask (never modified).
        kernel_size_px: Side of the elliptical kernel (config ``mask_deformation.kernel_size_px``).
    """

    def __init__(self, mask: np.ndarray, kernel_size_px: int) -> None:
        self.mask = mask.astype(bool)
        self._u8 = self.mask.astype(np.uint8)
        self._kernel = ellipse_kernel(int(kernel_size_px))
        self._levels: dict[str, list[np.ndarray]] = {EXPANSION: [self._u8],
                                                     CONTRACTION: [self._u8]}
        self._contours: dict[tuple[str, int], np.ndarray] = {}
        self._dist: dict[str, np.ndarray] = {}
        self.area_px = int(np.count_nonzero(self.mask))

    def level(self, op: str, iterations: int) -> np.ndarray:
        """The mask dilated (expansion) / eroded (contraction) ``iterations`` times, (H, W) bool."""
        levels = self._levels[op]
        fn = cv2.dilate if op == EXPANSION else cv2.erode
        while len(levels) <= iterations:
            levels.append(fn(levels[-1], self._kernel))
        return levels[iterations].astype(bool)

    def contour(self, op: str, iterations: int) -> np.ndarray:
        """(N, 2) int64 (x, y) contour pixels of :meth:`level` (cached)."""
        key = (op, iterations)
        if key not in self._contours:
            self._contours[key] = contour_pixels(self.level(op, iterations))
        return self._contours[key]

    def distance(self, op: str) -> np.ndarray:
        """Distance (pixels, float32) to the mask (expansion) or to the background (contraction)."""
        if op not in self._dist:
            src = (1 - self._u8) if op == EXPANSION else self._u8
            self._dist[op] = cv2.distanceTransform(src, cv2.DIST_L2, 5)
        return self._dist[op]


def edit_delta(
    stack: MorphStack, op: str, points: Sequence[Sequence[int]], region: np.ndarray,
    iterations: int,
) -> np.ndarray:
    """The pixels a morphological edit at ``points`` adds (expansion) or removes (contraction).

    Expansion: ``(dilated ∖ mask) ∩ N ∩ region``; contraction: ``(mask ∖ inner) ∩ N ∩ region``
    where ``dilated`` / ``inner`` are the mask dilated / eroded ``iterations`` times (``inner`` one
    more 3×3 erosion, so points on the eroded contour are removed) and ``N`` is the union of discs
    of radius ``NBHD_SCALE · t + NBHD_MARGIN_PX`` around each point, ``t`` its distance to the mask
    boundary. This replaces the release's SAM3 prompt (docs/deformation.md, "Deformation
    candidates"; docs/differences.md D13).

    Args:
        stack: The base mask's :class:`MorphStack`.
        op: ``"expansion"`` or ``"contraction"``.
        points: (x, y) pixels, normally on the contour of ``stack.level(op, iterations)``.
        region: (H, W) bool anatomy the edit is confined to.
        iterations: Kernel iterations of the deepest level the points were taken from.

    Returns:
        (H, W) bool delta.
    """
    level = stack.level(op, iterations)
    if op == EXPANSION:
        band = level & ~stack.mask
    else:
        inner = cv2.erode(level.astype(np.uint8), _SQUARE3).astype(bool)
        band = stack.mask & ~inner
    dist = stack.distance(op)
    nbhd = np.zeros(stack.mask.shape, np.uint8)
    for x, y in points:
        radius = int(np.ceil(NBHD_SCALE * float(dist[y, x]) + NBHD_MARGIN_PX))
        cv2.circle(nbhd, (int(x), int(y)), radius, 1, -1)
    return band & nbhd.astype(bool) & region


def compose(
    base: np.ndarray, adds: Sequence[np.ndarray], removes: Sequence[np.ndarray],
    min_component_px: int,
) -> np.ndarray:
    """Apply edits to ``base`` and clean the result.

    ``(base ∪ adds) ∖ removes``; then 8-connected components that do not touch ``base``
    (detached additions) or are smaller than ``min_component_px`` (contraction fragments; the
    release also filters components < 1000 px after each prediction; docs/deformation.md,
    "Deformation candidates") are dropped.

    Args:
        base: (H, W) bool mask the edits were computed on.
        adds: (H, W) bool expansion deltas.
        removes: (H, W) bool contraction deltas.
        min_component_px: Smallest component kept (config ``min_component_size_px``).

    Returns:
        (H, W) bool new mask (possibly empty).
    """
    new = base.copy()
    for a in adds:
        new |= a
    for r in removes:
        new &= ~r
    n, labels, stats, _ = cv2.connectedComponentsWithStats(new.astype(np.uint8), connectivity=8)
    if n <= 1:
        return new
    touching = np.zeros(n, bool)
    touching[np.unique(labels[base & new])] = True
    keep = touching & (stats[:, cv2.CC_STAT_AREA] >= min_component_px)
    keep[0] = False
    return keep[labels]


def points_verified(
    mask: np.ndarray, expansion_points: Sequence[Sequence[int]],
    contraction_points: Sequence[Sequence[int]],
) -> bool:
    """Release acceptance check ``verify_deformation``.

    docs/deformation.md, "Deformation candidates".

    Every expansion point must be inside ``mask`` and every contraction point outside.
    """
    return (all(mask[y, x] for x, y in expansion_points)
            and not any(mask[y, x] for x, y in contraction_points))


def changed_enough(new: np.ndarray, ref: np.ndarray, min_frac: float, min_px: int) -> bool:
    """Whether ``new`` differs visibly from ``ref``.

    At least ``max(min_frac × |ref|, min_px)`` pixels must change (our threshold: 1 % of the
    component area and 100 px, so each step is a visible edit; not in the release).
    """
    changed = int(np.count_nonzero(new ^ ref))
    return changed >= max(min_frac * int(np.count_nonzero(ref)), min_px) and bool(new.any())
