"""Stage 01 deformation: deformation-point collection and distractor (fake) point sampling.

Implements the release's deformation-point collection (docs/deformation.md, "Deformation
candidates") and its fake points (docs/deformation.md, "Fake masks and points"). Points are
``[x, y]`` int pixels in the 1024 × 1024 frame. All randomness comes from the caller's
``numpy.random.Generator``.
:func:`check_points_in_image` is the one rule for prompt points that reach a SAM predictor
(docs/deformation.md, "SAM prompts").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chexpercept.deformation._morph import CONTRACTION, EXPANSION, MorphStack, level_iterations

#: Widths (points) at depth 1 (docs/deformation.md, "Deformation candidates").
FIRST_WIDTHS: tuple[int, ...] = (2, 3, 4)
#: Minimum spacing of depth-1 points (docs/deformation.md, "Deformation candidates").
MIN_POINT_SPACING_PX = 30
#: Point-collection attempts per anatomy (docs/deformation.md, "Deformation candidates").
POINT_ATTEMPTS = 3
#: Fake points: at least / at most this many per list (docs/deformation.md, "Fake masks and
#: points").
MIN_FAKE_POINTS = 2
MAX_FAKE_POINTS = 5
#: Fallback fake points lie this far (pixels) from the step centre (docs/deformation.md,
#: "Fake masks and points").
FALLBACK_RADIUS_PX = (100, 300)
#: Fallback candidates are taken on this grid stride (pixels) to keep sampling cheap (ours).
FALLBACK_STRIDE_PX = 4
#: At most this many offending points are named in a :class:`PromptPointError` message.
_NAMED_POINTS = 5


class PromptPointError(ValueError):
    """A prompt point outside the image (docs/deformation.md, "SAM prompts"): a bug upstream."""


def check_points_in_image(points: Sequence[Sequence[float]] | np.ndarray,
                          image_hw: tuple[int, int], *, what: str = "prompt point"
                          ) -> np.ndarray:
    """Prompt points as SAM takes them, after checking that every one lies inside the image.

    The rule (docs/deformation.md, "SAM prompts"): a point ``[x, y]`` is kept only when
    ``0 <= x <= width - 1`` and ``0 <= y <= height - 1`` (a pixel of the image; the 1024 × 1024
    working frame in Stage 01), and is never clipped. Every prompt point is a pixel of a mask in
    that frame (a grid point, a contour pixel, a centroid), so one outside is a bug upstream
    (another frame, x and y swapped, the centroid of an empty mask); clipping would move it to a
    pixel nobody chose, and a contraction point clipped onto the border can land inside the
    lesion. NaN and infinite coordinates are outside too.

    Args:
        points: (N, 2) ``[x, y]`` pixels (int or float); N may be 0.
        image_hw: ``(height, width)`` of the image the predictor embedded, in pixels.
        what: How to call the points in the error message.

    Returns:
        (N, 2) float32 ``[x, y]`` pixels, the points unchanged.

    Raises:
        PromptPointError: Naming the points outside (up to 5) and the allowed ranges.
    """
    arr = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    height, width = int(image_hw[0]), int(image_hw[1])
    xs, ys = arr[:, 0], arr[:, 1]
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(arr).all(axis=1) | (xs < 0) | (xs > width - 1) | (ys < 0) | \
            (ys > height - 1)
    if bad.any():
        named = ", ".join(f"[{x:g}, {y:g}]" for x, y in arr[bad][:_NAMED_POINTS])
        more = f" and {int(bad.sum()) - _NAMED_POINTS} more" if bad.sum() > _NAMED_POINTS else ""
        raise PromptPointError(
            f"{int(bad.sum())} {what}(s) outside the {width} x {height} image: {named}{more}; "
            f"x must be in [0, {width - 1}] and y in [0, {height - 1}] (docs/deformation.md, "
            f"'SAM prompts': such points are rejected, never clipped)")
    return arr.astype(np.float32)


@dataclass(frozen=True)
class PointSet:
    """Points collected for one anatomy.

    Attributes:
        points: ``[x, y]`` int pixels, depth 1 first.
        widths: Points per depth level (``anatomy_depth_width_levels``).
    """

    points: list[list[int]]
    widths: list[int]


def far_from(
    cands: np.ndarray, pts: Sequence[Sequence[int]] | np.ndarray, dist: float
) -> np.ndarray:
    """Which candidates are at least ``dist`` pixels from every point of ``pts``.

    Args:
        cands: (N, 2) int (x, y).
        pts: (M, 2) int (x, y); empty means "all candidates pass".
        dist: Minimum distance in pixels.

    Returns:
        (N,) bool.
    """
    pts = np.asarray(pts, dtype=np.int64).reshape(-1, 2)
    if len(pts) == 0 or len(cands) == 0 or dist <= 0:
        return np.ones(len(cands), bool)
    d2 = ((cands[:, None, :] - pts[None, :, :]) ** 2).sum(-1)
    return (d2 >= dist * dist).all(axis=1)


def _inside(cands: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return mask[cands[:, 1], cands[:, 0]] if len(cands) else np.zeros(0, bool)


def _collect_once(
    stack: MorphStack, op: str, constraint: np.ndarray, depth: int, iterations_per_depth: int,
    rng: np.random.Generator, avoid: np.ndarray, avoid_dist: float,
    first_widths: Sequence[int], min_spacing: float,
) -> PointSet | None:
    points: list[np.ndarray] = []
    widths: list[int] = []
    prev: list[np.ndarray] = []
    for d in range(1, depth + 1):
        cands = stack.contour(op, level_iterations(op, d, iterations_per_depth))
        cands = cands[_inside(cands, constraint)]
        cands = cands[far_from(cands, avoid, avoid_dist)]
        if len(cands) == 0:
            return None
        if d == 1:
            width = int(rng.choice(np.asarray(first_widths)))
            first = cands[int(rng.integers(len(cands)))]
            chosen = [first]
            for _ in range(width - 1):
                ok = far_from(cands, np.array(chosen), min_spacing)
                if not ok.any():
                    return None
                sub = cands[ok]
                chosen.append(sub[int(np.argmin(((sub - first) ** 2).sum(1)))])
        else:
            width = int(rng.integers(2, widths[-1])) if widths[-1] > 2 else 2
            k = min(width, len(prev))
            picks = rng.choice(len(prev), size=k, replace=False)
            used = np.zeros(len(cands), bool)
            chosen = []
            for i in picks:
                if used.all():
                    return None
                d2 = ((cands - prev[int(i)]) ** 2).sum(1).astype(np.float64)
                d2[used] = np.inf
                j = int(np.argmin(d2))
                used[j] = True
                chosen.append(cands[j])
        widths.append(width)
        points.extend(chosen)
        prev = chosen
    if len(points) != sum(widths) or not points:
        return None
    return PointSet(points=[[int(p[0]), int(p[1])] for p in points], widths=widths)


def collect_points(
    stack: MorphStack, op: str, constraint: np.ndarray, depth: int, rng: np.random.Generator,
    *, iterations_per_depth: int = 1, avoid: Sequence[Sequence[int]] = (),
    avoid_dist: float = 0.0, first_widths: Sequence[int] = FIRST_WIDTHS,
    min_spacing: float = MIN_POINT_SPACING_PX, attempts: int = POINT_ATTEMPTS,
) -> PointSet | None:
    """Collect deformation points on the dilated (expansion) or eroded (contraction) contours.

    At each depth d = 1..``depth`` the candidates are the external contour of the mask dilated
    2·d·``iterations_per_depth`` times (expansion) or eroded d·``iterations_per_depth`` times
    (contraction), inside ``constraint`` and at least ``avoid_dist`` from ``avoid``. Depth 1
    takes a width from ``first_widths``, one random candidate and then the candidates nearest to
    it that are >= ``min_spacing`` from the points already chosen; deeper levels take a width in
    {2, ..., previous - 1} (2 if previous <= 2) and, for that many sampled previous points, the
    nearest unused candidate (docs/deformation.md, "Deformation candidates").

    Args:
        stack: The base mask's :class:`MorphStack` (32 × 32 ellipse kernel).
        op: ``"expansion"`` or ``"contraction"``.
        constraint: (H, W) bool region the points must lie in.
        depth: Depth levels (2 for lung lesions, 1 for cardiomegaly).
        rng: The case's generator.
        iterations_per_depth: Kernel iterations per depth unit (release: 1).
        avoid: Points to keep away from (``[x, y]``).
        avoid_dist: Minimum distance to ``avoid`` in pixels (release: 50 between opposite ops).
        first_widths: Widths allowed at depth 1.
        min_spacing: Minimum spacing of depth-1 points in pixels (release: 30).
        attempts: Attempts before giving up (release: 3).

    Returns:
        The :class:`PointSet`, or None if no attempt found ``sum(widths)`` points.
    """
    avoid_arr = np.asarray(avoid, dtype=np.int64).reshape(-1, 2)
    for _ in range(attempts):
        found = _collect_once(stack, op, constraint, depth, iterations_per_depth, rng, avoid_arr,
                              avoid_dist, first_widths, min_spacing)
        if found is not None:
            return found
    return None


def _greedy_spread(cands: np.ndarray, chosen: list[list[int]], target: int, min_dist: float,
                   rng: np.random.Generator) -> None:
    cands = cands[far_from(cands, chosen, min_dist)]
    while len(chosen) < target and len(cands):
        p = cands[int(rng.integers(len(cands)))]
        chosen.append([int(p[0]), int(p[1])])
        cands = cands[far_from(cands, [p], min_dist)]


def sample_fake_points(
    stack: MorphStack, outside: bool, constraint: np.ndarray, depth: int,
    center: Sequence[int], avoid: Sequence[Sequence[int]], rng: np.random.Generator,
    *, iterations_per_depth: int = 1, min_dist: float = 100.0,
) -> list[list[int]]:
    """Distractor click locations for one step mask (docs/deformation.md, "Fake masks and points").

    ``outside`` points lie on the contour of the step mask dilated depth·iterations times
    (``fake_points_expansion``), inside points on the eroded contour (``fake_points_contraction``).
    Candidates lie in ``constraint`` and >= ``min_dist`` from ``center``, ``avoid`` and each other.
    The number aimed at is drawn from 2..5 (the release adds "up to 4" random points after the
    first). Up to 3 attempts (the 2nd adds a depth level, the 3rd also an iteration per depth)
    until >= 2 points; then random ``constraint`` pixels at 100-300 px from ``center`` top the
    list up to 2, preferring pixels on the correct side of the mask (the release's fallback
    ignores the side, so a tiny lesion may get a "contraction" point outside it).

    Args:
        stack: The step mask's :class:`MorphStack`.
        outside: True for points outside the mask (dilated contour), False for inside.
        constraint: (H, W) bool (lung union; whole image for cardiomegaly).
        depth: Depth levels (release: 2, 1 for cardiomegaly).
        center: The step's ``center_point`` ``[x, y]``.
        avoid: Recorded deformation points the fakes must stay away from.
        rng: The case's generator.
        iterations_per_depth: Kernel iterations per depth unit (release: 1).
        min_dist: Minimum distance in pixels (release: 100).

    Returns:
        0..5 ``[x, y]`` points (fewer than 2 only when no pixel of ``constraint`` qualifies).
    """
    op = EXPANSION if outside else CONTRACTION
    keep_out = [list(center), *[list(p) for p in avoid]]
    target = int(rng.integers(MIN_FAKE_POINTS, MAX_FAKE_POINTS + 1))
    chosen: list[list[int]] = []
    for attempt in range(3):
        d = depth + (1 if attempt >= 1 else 0)
        it = iterations_per_depth + (1 if attempt >= 2 else 0)
        cands = stack.contour(op, d * it)
        cands = cands[_inside(cands, constraint)]
        cands = cands[far_from(cands, keep_out, min_dist)]
        _greedy_spread(cands, chosen, target, min_dist, rng)
        if len(chosen) >= MIN_FAKE_POINTS:
            return chosen
    lo, hi = FALLBACK_RADIUS_PX
    side = ~stack.mask if outside else stack.mask
    for area in (constraint & side, constraint):  # the release's fallback ignores the side
        ys, xs = np.nonzero(area[::FALLBACK_STRIDE_PX, ::FALLBACK_STRIDE_PX])
        cands = np.stack([xs, ys], axis=1).astype(np.int64) * FALLBACK_STRIDE_PX
        r2 = ((cands - np.asarray(center, dtype=np.int64)) ** 2).sum(1)
        cands = cands[(r2 >= lo * lo) & (r2 <= hi * hi)]
        cands = cands[far_from(cands, keep_out, min_dist)]
        _greedy_spread(cands, chosen, MIN_FAKE_POINTS, min_dist, rng)
        if len(chosen) >= MIN_FAKE_POINTS:
            break
    return chosen


__all__ = ["PointSet", "PromptPointError", "check_points_in_image", "collect_points", "far_from",
           "sample_fake_points"]
