"""Stage 00.01 candidate masks from public sources' boxes: ``box-anatomy`` and ``sam2-box``.

Both read the item's boxes (original pixels, ``boxes`` of the segmentation-info entry) and map
them into the 1024 x 1024 working frame with the CXR's recorded transform; their candidates go
to the same ``optimal?`` review as every other candidate (docs/curation.md, "Public sources").

- ``box-anatomy`` (CPU, no weights): the boxes intersected with the lungs of the anatomy masks
  (CheXmask-U layout), smoothed; cardiomegaly is the heart mask, not a box.
- ``sam2-box``: SAM2 prompted with each box (GPU, or slowly CPU), kept inside the box;
  cardiomegaly is prompted with its box like the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from chexpercept.curation.segmenters import EmptyPredictionError, Segmenter, SegmentResult
from chexpercept.errors import ConfigError, InputError
from chexpercept.frame import (
    WORK_FRAME,
    FrameTransform,
    prepared_png,
    provided_mask_to_frame,
    read_frame_transform,
)
from chexpercept.images import WORK_SIZE, read_mask
from chexpercept.layouts import anatomy_mask_path

if TYPE_CHECKING:
    from chexpercept.config_schema import ChexperceptConfig

logger = logging.getLogger(__name__)

#: CheXmask-U file names read by ``box-anatomy`` (docs/deformation.md, "Anatomy masks").
LUNG_FILES = ("right_lung", "left_lung")
HEART_FILE = "heart"


def boxes_of(item: Mapping[str, Any]) -> list[tuple[float, float, float, float]]:
    """The item's boxes ``(x0, y0, x1, y1)`` in original pixels.

    Raises:
        InputError: If the item has no boxes (not a public-source entry).
    """
    boxes = item.get("boxes")
    if not boxes:
        raise InputError(f"{item.get('target')}_{item.get('pair_id')}: no boxes in its "
                         f"segmentation-info entry (box segmenters need a public source)")
    return [(float(b["x0"]), float(b["y0"]), float(b["x1"]), float(b["y1"])) for b in boxes]


def box_to_frame(box: tuple[float, float, float, float], t: FrameTransform | None,
                 frame: tuple[int, int] | None = None) -> tuple[int, int, int, int]:
    """A box in original pixels -> integer pixel bounds in the working frame.

    Args:
        box: ``(x0, y0, x1, y1)`` original pixels (x1, y1 exclusive).
        t: The CXR's transform; None scales from ``frame`` (default 1024 x 1024) to 1024.
        frame: ``(width, height)`` of the original when ``t`` is None.

    Returns:
        ``(c0, r0, c1, r1)``: columns ``[c0, c1)`` and rows ``[r0, r1)``, clipped to the frame.
    """
    x0, y0, x1, y1 = box
    if t is not None:
        (x0, y0), (x1, y1) = t.point_to_frame(x0, y0), t.point_to_frame(x1, y1)
    else:
        w, h = frame or (WORK_SIZE, WORK_SIZE)
        x0, x1, y0, y1 = (x0 * WORK_SIZE / w, x1 * WORK_SIZE / w, y0 * WORK_SIZE / h,
                          y1 * WORK_SIZE / h)
    clip = lambda v: int(min(max(v, 0), WORK_SIZE))  # noqa: E731
    return clip(np.floor(x0)), clip(np.floor(y0)), clip(np.ceil(x1)), clip(np.ceil(y1))


def box_mask(item: Mapping[str, Any], t: FrameTransform | None) -> np.ndarray:
    """(1024, 1024) bool union of the item's boxes in the working frame."""
    mask = np.zeros((WORK_SIZE, WORK_SIZE), bool)
    frame = tuple(item["box_frame"]) if item.get("box_frame") else None
    for box in boxes_of(item):
        c0, r0, c1, r1 = box_to_frame(box, t, frame)  # type: ignore[arg-type]
        mask[r0:r1, c0:c1] = True
    return mask


def smooth(mask: np.ndarray, radius_px: int) -> np.ndarray:
    """Opening then closing with a disc of ``radius_px`` (0: unchanged); (H, W) bool."""
    if radius_px <= 0 or not mask.any():
        return mask
    k = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius_px + 1, 2 * radius_px + 1))
    m = mask.astype(np.uint8)
    m = cv2.morphologyEx(m, cv2.MORPH_OPEN, k)
    return cv2.morphologyEx(m, cv2.MORPH_CLOSE, k).astype(bool)


class BoxAnatomySegmenter(Segmenter):
    """Box x lung (heart for cardiomegaly), smoothed; CPU, no weights."""

    name = "box-anatomy"

    def __init__(self, anatomy_dir: str | Path | None, cxr_dir: str | Path, *,
                 frame: str = "original", smoothing_px: int = 7) -> None:
        """Set up the segmenter.

        Args:
            anatomy_dir: CheXmask-U-layout folder (``box_anatomy_path``).
            cxr_dir: ``path.mimic_cxr_path`` (transforms).
            frame: Frame of the anatomy masks (``anatomy.provided_frame``).
            smoothing_px: Smoothing radius in pixels.

        Raises:
            ConfigError: If ``anatomy_dir`` is unset.
        """
        if not anatomy_dir:
            raise ConfigError("segmenter box-anatomy needs anatomy masks: set "
                              "source_data_curation.box_anatomy_path or path.chexmask_path "
                              "(CheXmask-U layout <dicom_id>/{right_lung,left_lung,heart}.png)")
        self.anatomy_dir = Path(anatomy_dir)
        self.cxr_dir = cxr_dir
        self.frame = frame
        self.smoothing_px = smoothing_px

    def _anatomy(self, dicom_id: str, name: str, t: FrameTransform | None) -> np.ndarray:
        path = anatomy_mask_path(self.anatomy_dir, dicom_id, name)
        if not path.is_file():
            raise InputError(f"anatomy mask missing: {path} (box-anatomy reads "
                             f"<box_anatomy_path>/<dicom_id>/{name}.png)")
        if self.frame == "work":  # a square in the working frame (docs/images.md)
            return provided_mask_to_frame(path, WORK_FRAME)
        if t is not None:  # the CXR's EXIF turn, the shape check, then the transform
            return provided_mask_to_frame(path, t, prepared_png(self.cxr_dir, dicom_id))
        return read_mask(path, size=WORK_SIZE, resize=True)  # no transform: the release frame

    def segment(self, image: np.ndarray, instruction: str, *,
                item: Mapping[str, Any]) -> SegmentResult:
        """The candidate of one public-source item (docs/curation.md, "Public sources").

        Returns:
            (1024, 1024) bool inside the union of the boxes and the lungs (cardiomegaly: the
            heart), and a text naming what was intersected.

        Raises:
            InputError: A missing anatomy mask or no boxes (the item fails).
            EmptyPredictionError: The boxes do not overlap the lungs.
        """
        dicom_id = item["dicom_id"]
        t = read_frame_transform(self.cxr_dir, dicom_id)
        if item["target"] == "cardiomegaly":
            heart = self._anatomy(dicom_id, HEART_FILE, t)
            mask = smooth(heart, self.smoothing_px) & heart
            if not mask.any():
                raise EmptyPredictionError(f"empty heart mask for {dicom_id}")
            return SegmentResult(mask, "[SEG] box-anatomy: the heart mask (cardiomegaly)")
        lungs = self._anatomy(dicom_id, LUNG_FILES[0], t) | self._anatomy(dicom_id,
                                                                          LUNG_FILES[1], t)
        boxes = box_mask(item, t)
        region = boxes & lungs
        mask = smooth(region, self.smoothing_px) & region
        if not mask.any():
            raise EmptyPredictionError(f"the box(es) of {dicom_id} do not overlap the lungs "
                                       f"(after smoothing by {self.smoothing_px} px)")
        return SegmentResult(mask, f"[SEG] box-anatomy: {len(boxes_of(item))} box(es) "
                                   f"intersected with the lungs")


class Sam2BoxSegmenter(Segmenter):
    """SAM2 with the box as its prompt (one prediction per box, union, kept inside the box)."""

    name = "sam2-box"

    def __init__(self, predictor: Any, cxr_dir: str | Path) -> None:
        """Set up the segmenter.

        Args:
            predictor: A ``SAM2ImagePredictor`` (or any object with ``set_image``/``predict``).
            cxr_dir: ``path.mimic_cxr_path`` (transforms).
        """
        self.predictor = predictor
        self.cxr_dir = cxr_dir

    def segment(self, image: np.ndarray, instruction: str, *,
                item: Mapping[str, Any]) -> SegmentResult:
        """Prompt SAM2 with each box (single-mask output), union, clipped to the boxes.

        Raises:
            InputError: No boxes.
            EmptyPredictionError: SAM2 returned nothing inside the boxes.
        """
        t = read_frame_transform(self.cxr_dir, item["dicom_id"])
        frame = tuple(item["box_frame"]) if item.get("box_frame") else None
        self.predictor.set_image(np.repeat(image[..., None], 3, axis=2))
        out = np.zeros((WORK_SIZE, WORK_SIZE), bool)
        for box in boxes_of(item):
            c0, r0, c1, r1 = box_to_frame(box, t, frame)  # type: ignore[arg-type]
            masks, _, _ = self.predictor.predict(box=np.array([c0, r0, c1, r1], np.float32),
                                                 multimask_output=False)
            pred = np.asarray(masks[0]) > 0
            inside = np.zeros_like(out)
            inside[r0:r1, c0:c1] = True
            out |= pred & inside
        if not out.any():
            raise EmptyPredictionError(f"SAM2 gave no mask inside the box(es) of "
                                       f"{item['dicom_id']}")
        return SegmentResult(out, f"[SEG] sam2-box: {len(boxes_of(item))} box prompt(s)")


def create_box_anatomy_segmenter(cfg: ChexperceptConfig) -> Segmenter:
    """Factory of ``box-anatomy`` (registry entry in :mod:`chexpercept.curation.segmenters`)."""
    cur = cfg.source_data_curation
    return BoxAnatomySegmenter(cur.box_anatomy_path or cfg.path.chexmask_path,
                               cfg.path.mimic_cxr_path,
                               frame=cur.box_anatomy_frame or cfg.anatomy.provided_frame,
                               smoothing_px=cur.box_smoothing_px)


def create_sam2_box_segmenter(cfg: ChexperceptConfig) -> Segmenter:
    """Factory of ``sam2-box``: SAM2 from local weights (nothing is downloaded).

    The checkpoint, config and device are ``mask_deformation.sam2_checkpoint`` /
    ``sam2_config`` / ``device``.

    Raises:
        ConfigError: If the checkpoint is unset or missing.
        MissingDependencyError: If sam2 is not installed.
        InputError: If the checkpoint does not fit the config.
    """
    md = cfg.mask_deformation
    if not md.sam2_checkpoint or not Path(md.sam2_checkpoint).is_file():
        raise ConfigError(f"segmenter sam2-box needs mask_deformation.sam2_checkpoint (a local "
                          f"SAM2 checkpoint); found {md.sam2_checkpoint!r}")
    return Sam2BoxSegmenter(load_sam2_predictor(md.sam2_checkpoint, md.sam2_config, md.device),
                            cfg.path.mimic_cxr_path)


def load_sam2_predictor(checkpoint: str, config: str, device: str) -> Any:
    """``SAM2ImagePredictor`` for ``sam2-box``, from the Stage 01 SAM2 settings.

    See :func:`utils.sam2_models.load_sam2_predictor` (arguments and errors).
    """
    from utils.sam2_models import load_sam2_predictor as load

    return load(checkpoint, config, device, what="source_data_curation.segmenter 'sam2-box'")


__all__ = [
    "BoxAnatomySegmenter",
    "Sam2BoxSegmenter",
    "box_mask",
    "box_to_frame",
    "boxes_of",
    "create_box_anatomy_segmenter",
    "create_sam2_box_segmenter",
    "load_sam2_predictor",
    "smooth",
]
