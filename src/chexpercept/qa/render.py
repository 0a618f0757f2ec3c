"""Stage 02: images of one case for the bundle ``chexpercept/<key_id>/``.

docs/qa_generation.md, "Rendering"; docs/benchmark_format.md, "Image bundle".

Everything is drawn with numpy/cv2 at exactly 1024x1024 (the working frame), so output
bytes are deterministic. The CXR is read with :func:`chexpercept.images.read_cxr` (the one image
loader: RGB, alpha, 16-bit, palette, EXIF orientation and other sizes are handled there;
docs/images.md, "Image loading") and written back as 8-bit RGB. Every mask must already have
the CXR's working-frame shape: a mismatch fails the case, naming both files (docs/images.md,
"Masks and images").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from chexpercept.errors import InputError
from chexpercept.images import WORK_SIZE, check_mask_shape, read_mask
from chexpercept.layouts import (
    CONTOUR_EVAL_RELPATH,
    CONTOUR_QA_DIR,
    DETECTION_IMAGE,
    POINTS_IMAGE,
    REVISION_DIR,
    anatomy_mask_path,
)
from chexpercept.qa import _text
from chexpercept.qa._errors import CaseBuildError

#: Overlay colour (RGB in [0, 1]) and opacity of every mask overlay (cyan, alpha 0.5;
#: docs/qa_generation.md, "Rendering").
OVERLAY_RGB = (0.0, 1.0, 1.0)
OVERLAY_ALPHA = 0.5
#: Point marker radius and white rim width in pixels (radius 15, 2-px rim; release).
POINT_RADIUS_PX = 15
POINT_RIM_PX = 2
#: ``default_dilated`` / ``default_eroded``: 5x5 square kernel, 3 iterations (release).
DEFAULT_KERNEL = np.ones((5, 5), np.uint8)
DEFAULT_ITERATIONS = 3


def to_rgb(gray: np.ndarray) -> np.ndarray:
    """Stack a (H, W) uint8 grayscale image into (H, W, 3) uint8 RGB."""
    return np.repeat(np.asarray(gray, dtype=np.uint8)[:, :, None], 3, axis=2)


def overlay_mask(gray: np.ndarray, mask: np.ndarray, *, rgb: Sequence[float] = OVERLAY_RGB,
                 alpha: float = OVERLAY_ALPHA) -> np.ndarray:
    """Blend a colour over a grayscale CXR where ``mask`` is set.

    ``out = img * (1 - alpha * m) + rgb * alpha * m`` with the image in [0, 1], rounded to 8 bit
    (docs/qa_generation.md, "Rendering").

    Args:
        gray: (H, W) uint8 CXR.
        mask: (H, W) bool.
        rgb: Colour, 3 floats in [0, 1] (default cyan).
        alpha: Opacity in [0, 1] (default 0.5).

    Returns:
        (H, W, 3) uint8 RGB.

    Raises:
        InputError: If the mask's shape is not the image's (never resized to fit).
    """
    out = to_rgb(gray)
    m = np.asarray(mask, dtype=bool)
    if m.shape != out.shape[:2]:
        raise InputError(f"mask is {m.shape[1]}x{m.shape[0]} pixels but the image is "
                         f"{out.shape[1]}x{out.shape[0]}; masks are never resized to fit "
                         f"(docs/images.md, 'Masks and images')")
    # Only masked pixels change (elsewhere the formula gives the gray value back exactly), so
    # blend just those: same bytes as blending the whole frame, several times faster.
    img = out[m].astype(np.float64) / 255.0
    color = np.asarray(rgb, dtype=np.float64)[None, :]
    out[m] = np.clip(np.rint((img * (1.0 - alpha) + color * alpha) * 255.0), 0, 255
                     ).astype(np.uint8)
    return out


def draw_points(rgb: np.ndarray, options: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Draw each point option as a filled coloured disc with a white rim.

    Disc radius 15 px, rim 2 px outside it (docs/qa_generation.md, "Rendering"); no
    anti-aliasing, so output is deterministic. The ``None`` option (``point`` null) is not drawn.

    Args:
        rgb: (H, W, 3) uint8 image (not modified).
        options: ``{"point": [x, y] | None, "color": name}`` as in chexpercept.json.

    Returns:
        (H, W, 3) uint8 copy with the points drawn.
    """
    out = np.ascontiguousarray(rgb.copy())
    for option in options:
        point = option.get("point")
        if point is None:
            continue
        center = (int(point[0]), int(point[1]))
        cv2.circle(out, center, POINT_RADIUS_PX + POINT_RIM_PX, (255, 255, 255), -1,
                   lineType=cv2.LINE_8)
        cv2.circle(out, center, POINT_RADIUS_PX, _text.POINT_RGB[option["color"]], -1,
                   lineType=cv2.LINE_8)
    return out


class MaskSource:
    """Loads the masks a case's images use, by stem or special ``default_*`` token.

    Stems are read from ``<deformed_mask_dir>/<stem>.png``. Tokens (docs/qa_generation.md,
    "Rendering"):
    ``default_keep`` = OR of the before-revision masks; ``default_dilated`` /
    ``default_eroded`` = that mask dilated / eroded (5x5 square, 3 iterations);
    ``default_{right,left}_lung_chex`` = ``<chexmask_dir>/<dicom>/{side}_lung.png``;
    ``default_{right,left}_lung_cxas`` = ``<cxas_dir>/<dicom>/{side} lung.png``;
    ``default_empty`` = an empty mask (the release skipped it).

    Args:
        deformed_mask_dir: ``deformed_masks/<key_id>/``.
        dicom_id: The case's image.
        chexmask_dir: CheXmask-U mask root.
        cxas_dir: CXAS mask root.
        before_stems: ``revision_before_masks`` of the case.
        cxr_path: The CXR the masks are drawn on, named when a mask's shape is not the
            working frame's (None: the message names only the mask).
    """

    def __init__(self, deformed_mask_dir: Path, dicom_id: str, chexmask_dir: Path,
                 cxas_dir: Path, before_stems: Sequence[str], *,
                 cxr_path: Path | None = None) -> None:
        self._cxr = cxr_path
        self._dir = Path(deformed_mask_dir)
        self._dicom = dicom_id
        self._chex = Path(chexmask_dir)
        self._cxas = Path(cxas_dir)
        self._before = list(before_stems)
        self._cache: dict[str, np.ndarray] = {}

    def load(self, name: str) -> np.ndarray:
        """One mask as (1024, 1024) bool.

        Raises:
            InputError: If its file is missing, unreadable or not 1024 x 1024 (naming the mask
                and the CXR), or the token is unknown.
        """
        if name not in self._cache:
            self._cache[name] = self._load(name)
        return self._cache[name]

    def union(self, names: Sequence[str]) -> np.ndarray:
        """OR of several masks, (1024, 1024) bool (all False for an empty list)."""
        out = np.zeros((WORK_SIZE, WORK_SIZE), dtype=bool)
        for name in names:
            out |= self.load(name)
        return out

    def _load(self, name: str) -> np.ndarray:
        if name == "default_keep":
            return self.union(self._before)
        if name in ("default_dilated", "default_eroded"):
            before = self.union(self._before).astype(np.uint8)
            op = cv2.dilate if name == "default_dilated" else cv2.erode
            return op(before, DEFAULT_KERNEL, iterations=DEFAULT_ITERATIONS) > 0
        if name == "default_empty":
            return np.zeros((WORK_SIZE, WORK_SIZE), dtype=bool)
        for side in ("right", "left"):
            if name == f"default_{side}_lung_chex":
                return self._read(anatomy_mask_path(self._chex, self._dicom, f"{side}_lung"))
            if name == f"default_{side}_lung_cxas":
                return self._read(anatomy_mask_path(self._cxas, self._dicom, f"{side} lung"))
        if name.startswith("default_"):
            raise InputError(f"unknown default mask token '{name}'")
        return self._read(self._dir / f"{name}.png")

    def _read(self, path: Path) -> np.ndarray:
        """A mask file that must have the CXR's (1024, 1024) working-frame shape."""
        mask = read_mask(path, size=None)
        check_mask_shape(mask, path, (WORK_SIZE, WORK_SIZE), self._cxr)
        return mask


def case_image_relpaths(item: Mapping[str, Any]) -> list[str]:
    """Bundle-relative paths (POSIX, under ``<key_id>/``) of every image a case's JSON uses.

    Args:
        item: One chexpercept.json value (plain dict).

    Returns:
        ``detection_qa/xray.png``; for positives the contour-eval image; for
        revision-required cases the points image and every option image.
    """
    paths = [DETECTION_IMAGE]
    contour = item.get("contour_qa")
    if contour:
        paths.append(f"{CONTOUR_QA_DIR}/{contour['contour_eval_qa']['relative_path']}")
        result = contour.get("contour_revision_qa_revision_result")
        if not contour.get("no_deformation") and result:
            paths.append(f"{REVISION_DIR}/{POINTS_IMAGE}")
            paths += [f"{REVISION_DIR}/{o['relative_path']}" for o in result["answer_options"]]
    return paths


def render_case(key_id: str, item: Mapping[str, Any], cxr_gray: np.ndarray, masks: MaskSource
                ) -> dict[str, np.ndarray]:
    """All images of a case, in memory, keyed by bundle-relative path.

    - ``detection_qa/xray.png``: the CXR as RGB.
    - ``contour_qa/contour_eval_qa/xray_with_mask.png``: cyan overlay of the OR of
      ``revision_after_masks`` (revision-free) or ``revision_before_masks`` (required).
    - revision-required: ``.../xray_with_mask_and_points.png`` (before overlay + points) and
      one ``option_<i>.png`` per revision-result option (overlay of the OR of its masks).

    Args:
        key_id: The case (for messages).
        item: Its chexpercept.json value.
        cxr_gray: (1024, 1024) uint8 CXR.
        masks: Mask loader of the case.

    Returns:
        ``{relative_path: (1024, 1024, 3) uint8}``; one image per option, never fewer.

    Raises:
        CaseBuildError: If any image cannot be built (docs/differences.md D26: the whole case
            fails rather than losing an option image).
    """
    images = {DETECTION_IMAGE: to_rgb(cxr_gray)}
    contour = item.get("contour_qa")
    if not contour:
        return images
    shown = contour["revision_after_masks"] if contour["no_deformation"] \
        else contour["revision_before_masks"]
    try:
        before_overlay = overlay_mask(cxr_gray, masks.union(shown))
    except InputError as exc:
        raise CaseBuildError(f"{key_id}: contour-eval mask: {exc}") from None
    images[f"{CONTOUR_QA_DIR}/{CONTOUR_EVAL_RELPATH}"] = before_overlay
    if contour["no_deformation"]:
        return images
    points = contour["contour_revision_qa_expansion"]["answer_options"]
    images[f"{REVISION_DIR}/{POINTS_IMAGE}"] = draw_points(before_overlay, points)
    for i, option in enumerate(contour["contour_revision_qa_revision_result"]["answer_options"],
                               start=1):
        try:
            mask = masks.union(option["masks"])
        except InputError as exc:
            raise CaseBuildError(f"{key_id}: revision option {i} {option['masks']}: {exc}") \
                from None
        images[f"{REVISION_DIR}/{option['relative_path']}"] = overlay_mask(cxr_gray, mask)
    return images
