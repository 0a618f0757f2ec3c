"""Stage 00.01 candidate-mask segmenters: one interface, a registry, and the ``provided`` backend.

A segmenter turns a prepared CXR (``<mimic_cxr_path>/<dicom_id>.png``, 1024 x 1024 working frame)
and the pair's instruction into a candidate lesion mask plus the model's text; it is written to
``rosalia_pred/<target>/<pair_id>/pred_mask.png`` (docs/curation.md, "Candidate masks").
``provided`` reads the MIMIC-ILS lesion mask of the pair; ``rosalia`` runs ROSALIA (LISA
architecture; :mod:`chexpercept.curation._rosalia`, loaded only when created).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from chexpercept.errors import ConfigError, InputError
from chexpercept.frame import (
    FrameTransform,
    frame_transform,
    prepared_png,
    provided_mask_to_frame,
    read_frame_transform,
)
from chexpercept.images import WORK_SIZE, read_mask
from utils import imaging

if TYPE_CHECKING:
    from chexpercept.config_schema import ChexperceptConfig


class EmptyPredictionError(InputError):
    """The segmenter produced no mask for a pair (recorded as a failed item, with the text)."""


@dataclass(frozen=True)
class SegmentResult:
    """One candidate.

    Attributes:
        mask: (1024, 1024) bool candidate lesion mask in the working frame.
        text: The segmenter's text answer (``results.json`` ``output_text``).
    """

    mask: np.ndarray
    text: str


class Segmenter(ABC):
    """Candidate-mask source for Stage 00.01 (registry name in :attr:`name`)."""

    name: str = ""

    @abstractmethod
    def segment(self, image: np.ndarray, instruction: str, *,
                item: Mapping[str, Any]) -> SegmentResult:
        """Segment one pair.

        Args:
            image: (1024, 1024) uint8 grayscale CXR, working frame.
            instruction: The deterministic instruction (:func:`candidates.instruction_for`).
            item: The work item (``dicom_id``, ``target``, ``pair_id``, ``location``,
                ``seg_mask_path``, ``answer``); model backends ignore it.

        Returns:
            The mask ((1024, 1024) bool) and the text.

        Raises:
            InputError: If the pair cannot be segmented (the item is recorded as failed).
        """


def provided_mask(item: Mapping[str, Any], seg_mask_root: str | Path | None,
                  transform: FrameTransform | None = None, *,
                  image_path: str | Path | None = None) -> np.ndarray:
    """The MIMIC-ILS lesion mask of a pair, mapped into the working frame.

    MIMIC-ILS masks are square (512 or 1024) and cover the original CXR stretched to a square.
    With the CXR's recorded ``transform`` the mask is first turned like the image when the
    source had an EXIF orientation (:func:`chexpercept.frame.orient_provided_mask`), then
    mapped like the image (resize to the original H x W, then the letterbox/stretch;
    :func:`chexpercept.frame.provided_mask_to_frame`). Without one (a hand-filled
    release-style PNG folder) the mask covers the 1024 x 1024 PNG ``image_path`` (same
    orientation rule, its own EXIF tag) and is resized (nearest) to it; without ``image_path``
    either, it is only resized.

    Args:
        item: The work item (``seg_mask_path``).
        seg_mask_root: ``path.mimic_ils_seg_mask_path``.
        transform: The CXR's transform (``<mimic_cxr_path>/<dicom_id>.transform.json``).
        image_path: The prepared CXR ``<mimic_cxr_path>/<dicom_id>.png`` (named in errors).

    Returns:
        (1024, 1024) bool.

    Raises:
        InputError: If the pair has no ``seg_mask_path``, ``path.mimic_ils_seg_mask_path`` is
            unset, the file is missing / unreadable, or its shape fits neither the stored nor
            the upright image (naming both files; the caller records it as failed).
    """
    rel = item.get("seg_mask_path")
    if not rel:
        raise InputError("pair has no seg_mask_path")
    if not seg_mask_root:
        raise InputError("path.mimic_ils_seg_mask_path is not set")
    path = Path(seg_mask_root) / rel
    if transform is None and image_path is not None and Path(image_path).is_file():
        header = imaging.inspect_image(image_path)  # flat PNG: the mask covers it, stretched
        transform = replace(frame_transform(*header.size, "stretch", WORK_SIZE),
                            orientation=header.orientation)
    if transform is None:  # no recorded transform: the mask covers the image stretched to 1024
        return read_mask(path, size=WORK_SIZE, resize=True)
    return provided_mask_to_frame(path, transform, image_path)


class ProvidedSegmenter(Segmenter):
    """The MIMIC-ILS lesion mask of the pair (text: the pair's ``answer``, else ``[SEG]``)."""

    name = "provided"

    def __init__(self, seg_mask_root: str | Path | None, cxr_dir: str | Path) -> None:
        """Args: ``path.mimic_ils_seg_mask_path`` and ``path.mimic_cxr_path`` (transforms)."""
        self.seg_mask_root = seg_mask_root
        self.cxr_dir = cxr_dir

    def segment(self, image: np.ndarray, instruction: str, *,
                item: Mapping[str, Any]) -> SegmentResult:
        """Read and map the pair's MIMIC-ILS mask (see :func:`provided_mask`)."""
        dicom_id = item["dicom_id"]
        mask = provided_mask(item, self.seg_mask_root, read_frame_transform(self.cxr_dir, dicom_id),
                             image_path=prepared_png(self.cxr_dir, dicom_id))
        return SegmentResult(mask, str(item.get("answer") or "[SEG]"))


def _create_provided(cfg: ChexperceptConfig) -> Segmenter:
    return ProvidedSegmenter(cfg.path.mimic_ils_seg_mask_path, cfg.path.mimic_cxr_path)


_REGISTRY: dict[str, str | Callable[[ChexperceptConfig], Segmenter]] = {
    "provided": _create_provided,
    "rosalia": "chexpercept.curation._rosalia:create_rosalia_segmenter",
    # Public-source boxes (docs/curation.md, "Public sources").
    "box-anatomy": "chexpercept.curation.box_segmenters:create_box_anatomy_segmenter",
    "sam2-box": "chexpercept.curation.box_segmenters:create_sam2_box_segmenter",
}
"""name -> factory ``f(config) -> Segmenter`` or ``"module:function"`` (imported on creation)."""


def segmenter_names() -> tuple[str, ...]:
    """Registered names (``source_data_curation.segmenter`` choices plus plugins)."""
    return tuple(_REGISTRY)


def register_segmenter(name: str,
                       factory: str | Callable[[ChexperceptConfig], Segmenter]) -> None:
    """Register (or replace) a segmenter factory (plugins and tests)."""
    _REGISTRY[name] = factory


def create_segmenter(name: str, cfg: ChexperceptConfig) -> Segmenter:
    """Create the segmenter ``name`` (loading its model once).

    Raises:
        ConfigError: For an unknown name (listing the valid ones) or a missing config key.
        MissingDependencyError: If the backend's packages or checkout are missing.
    """
    factory = _REGISTRY.get(name)
    if factory is None:
        raise ConfigError(f"source_data_curation.segmenter {name!r}: expected one of "
                          f"{segmenter_names()}")
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    return factory(cfg)


__all__ = [
    "EmptyPredictionError",
    "ProvidedSegmenter",
    "SegmentResult",
    "Segmenter",
    "create_segmenter",
    "provided_mask",
    "register_segmenter",
    "segmenter_names",
]
