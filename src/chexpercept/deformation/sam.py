"""Stage 01.01 ``sam2`` / ``sam3`` backends: SAM refinement of optimal masks and SAM-realised edits.

The paper's method (docs/deformation.md, "SAM refinement" and "Deformation candidates"):
optimal components are refined with point prompts on a 64-px grid inside each component
(iteratively accumulated, previous best logits fed back); each deformation is realised by a SAM
prediction on the CXR prompted with grid points of the target (label 1), the expansion points
(label 1) and the contraction points (label 0), with the morphological target of
:mod:`chexpercept.deformation.morphological` as the perturbed mask input. Everything else
(anatomy selection, point collection, verification, retries, QA chain, fakes) is the
morphological pipeline's, through :func:`chexpercept.deformation.morphological.deform_case`'s
``realise`` hook.

Deliberate differences from the release (docs/differences.md D17, D15): the best-scoring mask's
logits are used; no state is shared between predictions, so retries never start from a failed
step; refined components are renumbered after empty ones are dropped, so ids have no gaps.

Prompts (docs/deformation.md, "SAM prompts"): every point that reaches the predictor is checked
to lie inside the image it embedded (rejected, never clipped:
:func:`chexpercept.deformation.points.check_points_in_image`), and an empty component is skipped
with a recorded reason (:class:`ComponentSkip`) instead of prompting at the NaN centroid of no
pixels.

torch, sam2 and sam3 are imported only when a model is loaded (:func:`load_predictor`).
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import cv2
import numpy as np

from chexpercept.deformation.points import check_points_in_image
from chexpercept.errors import ConfigError
from chexpercept.images import WORK_SIZE

logger = logging.getLogger(__name__)

#: Grid step of prompt points (docs/deformation.md, "Grid points": 64-px grid).
GRID_STEP_PX = 64
#: Logit of a "certainly foreground" mask-input pixel: ln(1 / 1e-8) (docs/deformation.md,
#: "SAM refinement").
MASK_LOGIT = 18.42
#: Side of SAM's low-resolution mask input (sam2: 256; docs/deformation.md, "SAM refinement").
SAM2_LOWRES = 256
#: At most this many grid points of the target join an edit prompt (ours: keeps prompts short).
MAX_EDIT_GRID_POINTS = 16
#: SAM backends (config ``mask_deformation.backend``).
SAM_BACKENDS: tuple[str, ...] = ("sam2", "sam3")
#: :class:`ComponentSkip` reasons (``deformation_results/summary.json``, ``skipped_components``).
SKIP_EMPTY_COMPONENT = "empty_component"
SKIP_REFINED_TOO_SMALL = "refined_below_min_size"


class PointPredictor(Protocol):
    """What the backends need from a SAM predictor (``SAM2ImagePredictor`` has exactly this)."""

    def set_image(self, image: np.ndarray) -> None:
        """Embed an (H, W, 3) uint8 RGB image."""

    def predict(self, point_coords: np.ndarray | None = None,
                point_labels: np.ndarray | None = None, box: Any = None,
                mask_input: np.ndarray | None = None, multimask_output: bool = True,
                return_logits: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Masks (C, H, W), scores (C,), low-res logits (C, h, w)."""


@dataclass(frozen=True)
class SamSettings:
    """How to build the SAM predictor (picklable; config ``mask_deformation.*``).

    Attributes:
        backend: ``sam2`` or ``sam3``.
        checkpoint: Local checkpoint file.
        config: ``sam2``: Hydra config name inside the sam2 package or a YAML path.
        bpe_path: ``sam3``: CLIP BPE vocabulary file.
        device: ``cuda``, ``cuda:<i>`` or ``cpu``; a bare ``cuda`` with several GPUs visible
            becomes ``cuda:(worker index % n)``.
    """

    backend: str
    checkpoint: str
    config: str = "configs/sam2.1/sam2.1_hiera_t.yaml"
    bpe_path: str | None = None
    device: str = "cuda"


def check_sam_settings(backend: str, md: Any) -> SamSettings:
    """Validate the SAM keys of ``mask_deformation`` and build :class:`SamSettings`.

    Raises:
        ConfigError: Listing every missing key or file.
    """
    from pathlib import Path

    problems = []
    if not md.sam2_checkpoint and backend == "sam2":
        problems.append("mask_deformation.sam2_checkpoint (e.g. sam2.1_hiera_tiny.pt) is not set")
    if backend == "sam3":
        if not md.sam3_checkpoint:
            problems.append("mask_deformation.sam3_checkpoint (sam3.pt) is not set")
        if not md.sam3_bpe_path:
            problems.append("mask_deformation.sam3_bpe_path (bpe_simple_vocab_16e6.txt.gz) is "
                            "not set")
    ckpt = md.sam2_checkpoint if backend == "sam2" else md.sam3_checkpoint
    if ckpt and not Path(ckpt).is_file():
        problems.append(f"checkpoint not found: {ckpt}")
    if backend == "sam3" and md.sam3_bpe_path and not Path(md.sam3_bpe_path).is_file():
        problems.append(f"BPE file not found: {md.sam3_bpe_path}")
    if problems:
        raise ConfigError(f"mask_deformation.backend {backend!r}: " + "; ".join(problems))
    return SamSettings(backend=backend, checkpoint=str(ckpt), config=md.sam2_config,
                       bpe_path=md.sam3_bpe_path, device=md.device)


# --------------------------------------------------------------------------------------
# Model loading (one per process)
# --------------------------------------------------------------------------------------

_PREDICTORS: dict[SamSettings, PointPredictor] = {}


def worker_device(device: str, worker_index: int, n_gpus: int) -> str:
    """Device of worker ``worker_index``: a bare ``cuda`` maps to ``cuda:(i % n)`` when n > 1."""
    if device == "cuda" and n_gpus > 1:
        return f"cuda:{worker_index % n_gpus}"
    return device


def _worker_index() -> int:
    ident = multiprocessing.current_process()._identity  # (k,) in pool workers, () in main
    return ident[0] - 1 if ident else 0


def load_sam2(checkpoint: str, config: str, device: str) -> PointPredictor:
    """``SAM2ImagePredictor`` from a local checkpoint (docs/deformation.md, "SAM refinement").

    See :func:`utils.sam2_models.load_sam2_predictor` (arguments and errors).
    """
    from utils.sam2_models import load_sam2_predictor

    return load_sam2_predictor(checkpoint, config, device,
                               what="mask_deformation.backend 'sam2'")


class Sam3PointPredictor:
    """SAM3 behind the :class:`PointPredictor` interface (``predict_inst``; low-res 288)."""

    def __init__(self, model: Any, processor: Any) -> None:
        self.model = model
        self.processor = processor
        self.state: Any = None

    def set_image(self, image: np.ndarray) -> None:
        """Embed an (H, W, 3) uint8 RGB image."""
        from PIL import Image

        self.state = self.processor.set_image(Image.fromarray(image))

    def predict(self, point_coords=None, point_labels=None, box=None, mask_input=None,
                multimask_output=True, return_logits=False):
        """Same contract as ``SAM2ImagePredictor.predict``."""
        return self.model.predict_inst(self.state, point_coords=point_coords,
                                       point_labels=point_labels, box=box,
                                       mask_input=mask_input, multimask_output=multimask_output,
                                       return_logits=return_logits)


def load_sam3(checkpoint: str, bpe_path: str, device: str) -> PointPredictor:
    """SAM3 image model with point prompts from local files (docs/deformation.md, "SAM refinement").

    Needs a GPU environment (sam3 imports triton and creates CUDA tensors at build time).

    Raises:
        MissingDependencyError: If sam3 is not installed.
    """
    from utils.deps import require

    require("sam3", "sam3", "mask_deformation.backend 'sam3'")
    from sam3.model.sam3_image_processor import Sam3Processor
    from sam3.model_builder import build_sam3_image_model

    model = build_sam3_image_model(bpe_path=bpe_path, checkpoint_path=checkpoint,
                                   load_from_HF=False, device=device,
                                   enable_inst_interactivity=True)
    return Sam3PointPredictor(model, Sam3Processor(model, device=device))


def load_predictor(settings: SamSettings) -> PointPredictor:
    """The process's predictor for ``settings`` (built once per process, then reused)."""
    if settings in _PREDICTORS:
        return _PREDICTORS[settings]
    device = settings.device
    if device == "cuda":
        import torch

        device = worker_device(device, _worker_index(), torch.cuda.device_count())
    logger.info("loading %s from %s on %s", settings.backend, settings.checkpoint, device)
    if settings.backend == "sam2":
        predictor = load_sam2(settings.checkpoint, settings.config, device)
    elif settings.backend == "sam3":
        predictor = load_sam3(settings.checkpoint, str(settings.bpe_path), device)
    else:
        raise ConfigError(f"mask_deformation.backend {settings.backend!r}: expected one of "
                          f"{SAM_BACKENDS}")
    _PREDICTORS[settings] = predictor
    return predictor


# --------------------------------------------------------------------------------------
# Prompts and predictions
# --------------------------------------------------------------------------------------


def _describe(arr: np.ndarray) -> str:
    """``dtype uint8, shape (1024, 1024), values [0, 3, 255]`` (at most 8 distinct values)."""
    if arr.size == 0:
        values = "no values"
    elif arr.dtype.kind in "biuf":
        distinct = np.unique(arr)
        values = (f"values {distinct.tolist()}" if len(distinct) <= 8 else
                  f"{len(distinct)} distinct values in [{distinct[0]}, {distinct[-1]}]")
    else:
        values = "non-numeric values"
    return f"dtype {arr.dtype}, shape {arr.shape}, {values}"


def binary_mask(mask: Any, name: str, image_hw: tuple[int, int] | None = None) -> np.ndarray:
    """Check a mask handed to SAM and return it as bool (docs/deformation.md, "SAM refinement").

    Accepted: a 2-D array of dtype bool, or of an integer dtype whose values are all 0/1 or all
    0/255 (a mask read from a PNG). Anything else is refused, never guessed: a float array
    (probabilities or logits?), other values, another number of dimensions, or (with
    ``image_hw``) another size than the image.

    Args:
        mask: (H, W) bool, 0/1 integer or 0/255 integer.
        name: The argument's name, for the message (``mask_input``, ``target``, ...).
        image_hw: ``(height, width)`` the mask must have (the embedded image's), or None.

    Returns:
        (H, W) bool; foreground is 1 / 255.

    Raises:
        ValueError: Naming ``name``, its dtype, shape and the values found, and what is accepted.
    """
    arr = np.asarray(mask)
    ok = arr.ndim == 2 and (image_hw is None or arr.shape == tuple(image_hw))
    if ok and arr.dtype != bool:
        ok = arr.dtype.kind in "iu" and (
            bool(((arr == 0) | (arr == 1)).all()) or bool(((arr == 0) | (arr == 255)).all()))
    if not ok:
        size = "" if image_hw is None else f" of the image's size {tuple(image_hw)}"
        raise ValueError(f"{name}: expected a 2-D mask{size} of dtype bool, or integer with "
                         f"values 0/1 or 0/255; got {_describe(arr)}")
    return arr.astype(bool, copy=False) if arr.dtype == bool else arr > 0


def mask_input_logits(mask_input: Any, image_hw: tuple[int, int],
                      size: int = SAM2_LOWRES) -> np.ndarray | None:
    """What :func:`best_prediction` hands SAM as ``mask_input``.

    Args:
        mask_input: None; low-res logits ``(1, s, s)`` float with ``s == size`` (SAM's own,
            for an image of any size) or ``s`` below the image's sides (a previous prediction's,
            fed back as they came); or a full-size mask,
            (H, W) = ``image_hw``, bool / 0-1 / 0-255 integer (:func:`binary_mask`), which is
            turned into logits by :func:`mask_logits`.
        image_hw: ``(height, width)`` of the embedded image (1024 × 1024 working frame).
        size: Low-res side for a converted mask (256 for sam2).

    Returns:
        None, or (1, s, s) float32 logits.

    Raises:
        ValueError: For anything else, naming ``mask_input``, its dtype, shape and values.
    """
    if mask_input is None:
        return None
    arr = np.asarray(mask_input)
    # SAM's own low-res logits are ``size`` x ``size`` whatever the image: an image of side
    # <= 256 px gets (1, 256, 256) back, which must go back in (issue 29: they were refused)
    if (arr.ndim == 3 and arr.dtype.kind == "f" and arr.shape[0] == 1
            and arr.shape[1] == arr.shape[2]
            and (arr.shape[1] == size or arr.shape[1] < min(image_hw))
            and np.isfinite(arr).all()):
        return arr.astype(np.float32, copy=False)
    if arr.ndim == 2:
        return mask_logits(binary_mask(arr, "mask_input", image_hw), size)
    raise ValueError(f"mask_input: expected low-res logits (1, s, s) float, finite, s = {size} "
                     f"or below the image's {tuple(image_hw)}, or a 2-D mask of the image's "
                     f"size (bool, or integer 0/1 or 0/255); got {_describe(arr)}")


def grid_points(mask: np.ndarray, step: int = GRID_STEP_PX) -> list[list[int]]:
    """Grid points ``(x, y)``, x, y in {0, 64, ...}, that lie inside ``mask`` (row-major order).

    Args:
        mask: (H, W) bool, or integer 0/1 or 0/255 (:func:`binary_mask`).
        step: Grid step in pixels (64; docs/deformation.md, "Grid points").

    Raises:
        ValueError: For another kind of mask (:func:`binary_mask`).
    """
    mask = binary_mask(mask, "mask")
    ys, xs = np.mgrid[0:mask.shape[0]:step, 0:mask.shape[1]:step]
    inside = mask[ys, xs]
    return [[int(x), int(y)] for x, y in zip(xs[inside], ys[inside], strict=True)]


def mask_logits(mask: np.ndarray, size: int = SAM2_LOWRES) -> np.ndarray:
    """A mask as SAM mask-input logits: +18.42 where the (area-downscaled) mask is >= 0.5.

    Args:
        mask: (H, W) bool, or integer 0/1 or 0/255 (:func:`binary_mask`).
        size: Low-res side (256 for sam2).

    Returns:
        (1, size, size) float32.

    Raises:
        ValueError: For another kind of mask, naming ``mask_input`` (:func:`binary_mask`).
    """
    mask = binary_mask(mask, "mask_input")
    small = cv2.resize(mask.astype(np.float32), (size, size), interpolation=cv2.INTER_AREA)
    return np.where(small >= 0.5, MASK_LOGIT, -MASK_LOGIT).astype(np.float32)[None]


def best_prediction(predictor: PointPredictor, points: Sequence[Sequence[int]],
                    labels: Sequence[int], mask_input: np.ndarray | None, *,
                    image_hw: tuple[int, int] = (WORK_SIZE, WORK_SIZE),
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Predict (multimask) and keep the best-scoring mask AND its logits (docs/differences.md D17).

    Args:
        predictor: The SAM predictor, with the image already set.
        points: (N, 2) ``[x, y]`` pixel prompts; each must lie inside the image, x in
            [0, width - 1] and y in [0, height - 1] (docs/deformation.md, "SAM prompts").
        labels: (N,) 1 (foreground) or 0 (background), one per point.
        mask_input: None; (1, s, s) float32 low-res logits (a previous prediction's, or
            :func:`mask_logits`); or an (H, W) mask of the image's size, bool or integer
            0/1 or 0/255, converted by :func:`mask_logits` (:func:`mask_input_logits`).
        image_hw: ``(height, width)`` of the embedded image (1024 × 1024 working frame).

    Returns:
        ((H, W) bool mask, (1, h, w) float32 logits of that mask).

    Raises:
        PromptPointError: For a point outside the image (rejected, never clipped), naming it.
        ValueError: If ``labels`` does not have one label per point, or ``mask_input`` is
            none of the accepted kinds (naming its dtype, shape and values).
    """
    coords = check_points_in_image(points, image_hw)
    if len(labels) != len(coords):
        raise ValueError(f"{len(coords)} prompt point(s) but {len(labels)} label(s)")
    mask_input = mask_input_logits(mask_input, image_hw)
    masks, scores, logits = predictor.predict(
        point_coords=coords, point_labels=np.asarray(labels, dtype=np.int32),
        mask_input=mask_input, multimask_output=True)
    best = int(np.argmax(np.asarray(scores)))
    return np.asarray(masks[best]) > 0, np.asarray(logits[best], dtype=np.float32)[None]


def keep_large(mask: np.ndarray, min_px: int) -> np.ndarray:
    """Union of the 4-connected components of ``mask`` with >= ``min_px`` pixels."""
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=4)
    keep = [i for i in range(1, n) if stats[i, cv2.CC_STAT_AREA] >= min_px]
    return np.isin(labels, keep) if keep else np.zeros_like(mask, dtype=bool)


def _rgb(gray_or_mask: np.ndarray) -> np.ndarray:
    arr = gray_or_mask.astype(np.uint8) * 255 if gray_or_mask.dtype == bool else gray_or_mask
    return np.ascontiguousarray(np.repeat(arr[..., None], 3, axis=2))


def refine_component(predictor: PointPredictor, component: np.ndarray,
                     min_px: int) -> np.ndarray:
    """SAM refinement of one optimal component on the component's own mask image.

    See docs/deformation.md, "SAM refinement".

    Start at the centroid (if inside, else the nearest inside grid point), then add each other
    inside grid point (label 1), feeding the previous best logits back as mask input. Every
    prompt point is a pixel of the component, so it lies inside the image (docs/deformation.md,
    "SAM prompts"). An empty component has no centroid and no point: nothing is predicted.

    Args:
        predictor: The SAM predictor.
        component: (1024, 1024) bool component, or integer 0/1 or 0/255 (:func:`binary_mask`).
        min_px: Components of the result below this size are dropped (1000).

    Returns:
        (1024, 1024) bool refined mask (may be empty; empty for an empty ``component``, the
        predictor untouched).

    Raises:
        ValueError: For another kind of ``component`` (:func:`binary_mask`).
    """
    component = binary_mask(component, "component")
    if not component.any():
        return np.zeros_like(component, dtype=bool)
    predictor.set_image(_rgb(component))
    grid = grid_points(component)
    ys, xs = np.nonzero(component)
    cx, cy = int(round(xs.mean())), int(round(ys.mean()))
    if component[cy, cx]:
        start = [cx, cy]
    elif grid:
        start = min(grid, key=lambda p: (p[0] - cx) ** 2 + (p[1] - cy) ** 2)
    else:
        start = [int(xs[len(xs) // 2]), int(ys[len(ys) // 2])]
    points = [start]
    frame = (int(component.shape[0]), int(component.shape[1]))
    mask, logits = best_prediction(predictor, points, [1], None, image_hw=frame)
    for pt in grid:
        if pt == start:
            continue
        points.append(pt)
        mask, logits = best_prediction(predictor, points, [1] * len(points), logits,
                                       image_hw=frame)
    return keep_large(mask, min_px)


@dataclass(frozen=True)
class ComponentSkip:
    """A candidate component that refinement dropped, and why (docs/deformation.md).

    Recorded per case in ``deformation_results/summary.json`` (``skipped_components``).

    Attributes:
        component: Index of the component among the candidate's optimal components (largest
            first, before refinement renumbers the kept ones).
        reason: :data:`SKIP_EMPTY_COMPONENT` (no pixel, so no prompt point) or
            :data:`SKIP_REFINED_TOO_SMALL` (SAM left no part of >= ``min_px`` pixels).
        detail: One sentence for people.
    """

    component: int
    reason: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        """The ``summary.json`` entry (without the case's ``key_id``)."""
        return asdict(self)


def refine_components(predictor: PointPredictor, components: Sequence[np.ndarray],
                      min_px: int, *, skipped: list[ComponentSkip] | None = None
                      ) -> list[np.ndarray]:
    """Refine every component; empty ones are skipped, empty results dropped, order kept.

    The list index is the ``mask_component_id``, so ids stay contiguous (docs/differences.md D15).

    Args:
        predictor: The SAM predictor.
        components: (1024, 1024) bool optimal components, largest first.
        min_px: Components of a result below this size are dropped (1000).
        skipped: If given, one :class:`ComponentSkip` per component left out is appended
            (an empty component is never sent to the predictor).

    Returns:
        The non-empty refined (1024, 1024) bool masks.
    """
    out = []
    for i, comp in enumerate(components):
        if not comp.any():
            skip = ComponentSkip(i, SKIP_EMPTY_COMPONENT,
                                 "the component has no pixel, so no prompt point; skipped")
            logger.warning("component %d: %s", i, skip.detail)
        else:
            refined = refine_component(predictor, comp, min_px)
            if refined.any():
                out.append(refined)
                continue
            skip = ComponentSkip(i, SKIP_REFINED_TOO_SMALL,
                                 f"SAM refinement left no part of >= {min_px} px")
            logger.info("component %d: %s", i, skip.detail)
        if skipped is not None:
            skipped.append(skip)
    return out


class SamRealiser:
    """The ``realise`` step of :func:`deform_case` for one case (CXR embedded once).

    Each call is independent: the prompt and mask input are rebuilt from its arguments, so no
    state carries over between steps or retries (docs/differences.md D17).
    """

    def __init__(self, predictor: PointPredictor, cxr: np.ndarray, min_px: int) -> None:
        """Embed the case's CXR.

        Args:
            predictor: The SAM predictor.
            cxr: (1024, 1024) uint8 CXR.
            min_px: Components of a prediction below this size are dropped (1000).
        """
        self.predictor = predictor
        self.min_px = min_px
        #: ``(height, width)`` of the embedded CXR: prompt points must lie inside it.
        self.image_hw = (int(cxr.shape[0]), int(cxr.shape[1]))
        predictor.set_image(_rgb(cxr))

    def __call__(self, base: np.ndarray, target: np.ndarray,
                 expansion_points: Sequence[Sequence[int]],
                 contraction_points: Sequence[Sequence[int]]) -> np.ndarray:
        """SAM prediction of the edited mask.

        Args:
            base: (1024, 1024) bool mask before the edit (unused: the target carries it).
            target: (1024, 1024) morphological target (the perturbed mask input): bool, or
                integer 0/1 or 0/255 (:func:`binary_mask`), of the CXR's size.
            expansion_points: [x, y] points that must end up inside (label 1).
            contraction_points: [x, y] points that must end up outside (label 0).

        Returns:
            (1024, 1024) bool predicted mask (components >= ``min_px``).

        Raises:
            PromptPointError: For an expansion or contraction point outside the CXR
                (docs/deformation.md, "SAM prompts": rejected, never clipped).
            ValueError: For another kind of ``target``, naming it (:func:`binary_mask`).
        """
        del base
        target = binary_mask(target, "target (the mask input)", self.image_hw)
        grid = grid_points(target)
        if len(grid) > MAX_EDIT_GRID_POINTS:
            idx = np.linspace(0, len(grid) - 1, MAX_EDIT_GRID_POINTS).round().astype(int)
            grid = [grid[int(i)] for i in idx]
        points = [*grid, *map(list, expansion_points), *map(list, contraction_points)]
        labels = [1] * (len(grid) + len(expansion_points)) + [0] * len(contraction_points)
        if not points:
            return np.zeros_like(target, dtype=bool)
        mask, _ = best_prediction(self.predictor, points, labels, mask_logits(target),
                                  image_hw=self.image_hw)
        return keep_large(mask, self.min_px)


__all__ = [
    "GRID_STEP_PX",
    "MASK_LOGIT",
    "SAM_BACKENDS",
    "SKIP_EMPTY_COMPONENT",
    "SKIP_REFINED_TOO_SMALL",
    "ComponentSkip",
    "PointPredictor",
    "Sam3PointPredictor",
    "SamRealiser",
    "SamSettings",
    "best_prediction",
    "binary_mask",
    "check_sam_settings",
    "grid_points",
    "load_predictor",
    "load_sam2",
    "load_sam3",
    "mask_input_logits",
    "mask_logits",
    "refine_component",
    "refine_components",
    "worker_device",
]
