"""Stage 01.00 backend ``cxas``: CXAS UNet-ResNet50 (torchxrayvision) -> ``cxas_pred/``.

Model: ``torchxrayvision.baseline_models.chestx_anatomy.UNetResNet50`` (torchxrayvision 1.5.7),
the CXAS network repacked, 159 multi-label classes (PAX-Ray++ label set; docs/deformation.md,
"Anatomy masks"). It is built with ``weights=False`` (nothing is downloaded) and the local file
``anatomy.cxas_weights`` is loaded into it.

Class-name mapping: the files are named exactly after the model's ``targets`` (the CXAS class
names, e.g. ``right lung``, ``right upper zone lung``, ``heart``), which are the names the
release wrote (docs/deformation.md, "Anatomy masks") and the names
:mod:`chexpercept.anatomy.names` uses (``LUNG_NAMES``, ``ZONE_NAMES``); ``anatomy.cxas_classes``
picks which are written.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from chexpercept.anatomy.backends import LAYOUT_CXAS, AnatomySegmenter, resolve_device
from chexpercept.errors import ConfigError, InputError
from chexpercept.images import WORK_SIZE
from utils.deps import require
from utils.weights import load_weights

if TYPE_CHECKING:
    from chexpercept.config_schema import AnatomyConfig

logger = logging.getLogger(__name__)

#: Logit threshold: sigmoid > 0.5 (torchxrayvision ``BackboneUNet.threshold``).
LOGIT_THRESHOLD = 0.0
#: The model's own grid in pixels (torchxrayvision ``UNetResNet50.input_resolution``).
CXAS_GRID = 512
#: Input range the model expects (torchxrayvision ``utils.normalize``: ``[-1024, 1024]``).
CXAS_RANGE = 1024.0
_FEATURE = "anatomy.backend 'cxas'"


def cxas_state_dict(checkpoint: Any, where: str | Path) -> dict[str, Any]:
    """The model state dict inside a CXAS / torchxrayvision checkpoint, keys aligned to txv.

    Accepts a bare state dict or one nested under ``model`` / ``state_dict`` /
    ``model_state_dict`` / ``network`` / ``net``; strips ``module.`` / ``model.`` / ``net.``
    key prefixes; maps the CXAS package's ``backbone.*`` keys to txv's ``backbone.backbone.*``
    (the same rules torchxrayvision 1.5.7 applies when it loads its own file).

    Args:
        checkpoint: What :func:`utils.weights.load_weights` returned.
        where: The file, for the message.

    Returns:
        ``{parameter name: tensor}``.

    Raises:
        ConfigError: If no state dict is found (naming ``anatomy.cxas_weights`` and the file).
    """
    if isinstance(checkpoint, Mapping):
        for key in ("model", "state_dict", "model_state_dict", "network", "net"):
            if isinstance(checkpoint.get(key), Mapping):
                checkpoint = checkpoint[key]
                break
    if not isinstance(checkpoint, Mapping) or not checkpoint:
        raise ConfigError(f"anatomy.cxas_weights {where}: expected a CXAS state dict (or a "
                          f"checkpoint dict holding one), found {type(checkpoint).__name__}")
    out = {}
    for key, value in checkpoint.items():
        for prefix in ("module.", "model.", "net."):
            if key.startswith(prefix):
                key = key[len(prefix):]
                break
        out[key] = value
    if not any(k.startswith("backbone.backbone.") for k in out):
        out = {("backbone.backbone." + k[len("backbone."):] if k.startswith("backbone.") else k): v
               for k, v in out.items()}
    return out


def load_cxas_model(weights: str | Path | None, device: str) -> Any:
    """Build torchxrayvision's CXAS UNet-ResNet50 and load local weights into it.

    Args:
        weights: ``anatomy.cxas_weights``.
        device: Torch device.

    Returns:
        The model in eval mode on ``device``.

    Raises:
        ConfigError: If ``weights`` is unset or not a file, or does not fit the architecture
            (listing missing parameter names).
        InputError: If the file holds pickled objects besides tensors (never unpickled) or
            is no torch checkpoint (:func:`utils.weights.load_weights`).
        MissingDependencyError: If torch / torchxrayvision are not installed.
    """
    if not weights:
        raise ConfigError(f"{_FEATURE} needs anatomy.cxas_weights: the local file "
                          "baseline_models_cxas_UNet_ResNet50_default_repack.pth (torchxrayvision "
                          "GitHub release v1) or UNet_ResNet50_default.pth (CXAS); nothing is "
                          "downloaded")
    path = Path(weights).expanduser()
    if not path.is_file():
        raise ConfigError(f"anatomy.cxas_weights {path} is not a file")
    require("torch", "anatomy", _FEATURE)
    device = resolve_device(device, "anatomy.device")
    xrv = require("torchxrayvision", "anatomy", _FEATURE)
    model = xrv.baseline_models.chestx_anatomy.UNetResNet50(weights=False)
    state = cxas_state_dict(load_weights(path, "anatomy.cxas_weights"), path)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing:
        raise ConfigError(f"anatomy.cxas_weights {path} does not fit the CXAS UNet-ResNet50: "
                          f"{len(missing)} parameter(s) missing, e.g. {list(missing)[:5]}")
    if unexpected:
        logger.warning("anatomy.cxas_weights %s: %d unused key(s) ignored, e.g. %s", path,
                       len(unexpected), list(unexpected)[:5])
    return model.to(device).eval()


def check_classes(classes: Sequence[str], targets: Sequence[str]) -> list[int]:
    """Indices of ``classes`` in the model's ``targets``.

    Raises:
        ConfigError: Naming every unknown class with close matches (``anatomy.cxas_classes``).
    """
    problems = []
    for name in classes:
        if name not in targets:
            close = difflib.get_close_matches(name, targets, n=3)
            problems.append(f"{name!r} (did you mean {close}?)" if close else repr(name))
    if problems:
        raise ConfigError("anatomy.cxas_classes: unknown CXAS class(es) " + ", ".join(problems))
    if not classes:
        raise ConfigError("anatomy.cxas_classes is empty")
    return [list(targets).index(n) for n in classes]


def check_cxr_batch(images: Sequence[np.ndarray]) -> np.ndarray:
    """Check CXAS input images and scale them to the model's range.

    The model expects a working-frame CXR: (1024, 1024) uint8, values 0-255, which is scaled to
    [-1024, 1024] as ``xrv.utils.normalize(img, 255)`` does. Anything else (a [0, 1] float image,
    raw 16-bit values, a non-square or other-size array, a colour image) would be segmented
    wrongly without an error (an empty mask, a grown mask, edges moved), so it is refused.

    Args:
        images: Each (1024, 1024) uint8 grayscale CXR (``chexpercept.images.read_cxr``).

    Returns:
        (B, 1, 1024, 1024) float32 in [-1024, 1024].

    Raises:
        InputError: Naming each bad image's index, shape, dtype and value range, and what is
            expected.
    """
    problems, arrays = [], []
    for i, image in enumerate(images):
        arr = np.asarray(image)
        if arr.shape != (WORK_SIZE, WORK_SIZE) or arr.dtype != np.uint8:
            values = (f"values {arr.min()}..{arr.max()}" if arr.size and
                      (arr.dtype.kind in "biuf") else "no numeric values")
            problems.append(f"image {i}: shape {arr.shape}, dtype {arr.dtype}, {values}")
        arrays.append(arr)
    if problems:
        raise InputError(f"{_FEATURE} expects (1024, 1024) uint8 working-frame CXRs (values "
                         f"0-255, as chexpercept.images.read_cxr returns; docs/deformation.md, "
                         f"'Anatomy masks'), got " + "; ".join(problems))
    if not arrays:
        return np.zeros((0, 1, WORK_SIZE, WORK_SIZE), np.float32)
    return ((2.0 * (np.stack(arrays).astype(np.float32) / 255.0) - 1.0) * CXAS_RANGE)[:, None]


def to_model_grid(x: Any) -> Any:
    """Working frame -> the model's grid: [B, C, 1024, 1024] -> [B, C, 512, 512] float tensor.

    Bilinear with antialiasing and half-pixel centres (``align_corners=False``), exactly the
    resize torchxrayvision's ``fix_resolution`` applies inside the model; done here so both
    directions of the round trip are in one place (docs/deformation.md, "Anatomy masks").
    """
    import torch.nn.functional as F

    return F.interpolate(x, size=(CXAS_GRID, CXAS_GRID), mode="bilinear", antialias=True,
                         align_corners=False)


def to_working_frame(logits: Any) -> Any:
    """The model's grid -> working frame: [B, C, 512, 512] -> [B, C, 1024, 1024] float tensor.

    Bilinear with half-pixel centres (``align_corners=False``): a working-frame pixel ``i`` is
    read at model coordinate ``(i + 0.5) / 2 - 0.5``, the inverse of :func:`to_model_grid`, so a
    mask sent through both and thresholded at 0.5 keeps its edges (at most 1 px off).
    """
    import torch.nn.functional as F

    return F.interpolate(logits, size=(WORK_SIZE, WORK_SIZE), mode="bilinear",
                         align_corners=False)


class CXASSegmenter(AnatomySegmenter):
    """CXAS masks in the working frame.

    Input: the (1024, 1024) uint8 CXR (checked: :func:`check_cxr_batch`) scaled to
    [-1024, 1024] (``xrv.utils.normalize(img, 255)``: ``(2 * img / 255 - 1) * 1024``) and brought
    to the model's 512 x 512 grid here (:func:`to_model_grid`, the resize torchxrayvision would
    otherwise do inside the model); the model repeats to 3 channels and applies ImageNet
    normalisation itself. Output logits [B, 159, 512, 512]; the chosen classes are brought back
    to 1024 x 1024 (:func:`to_working_frame`) and thresholded at logit > 0 (sigmoid > 0.5).
    Both resizes map pixel centres onto pixel centres, so the round trip keeps edges in place
    (docs/deformation.md, "Anatomy masks").
    """

    name = "cxas"
    layout = LAYOUT_CXAS

    def __init__(self, model: Any, classes: Sequence[str], device: str = "cpu") -> None:
        """Wrap a loaded model.

        Args:
            model: The CXAS network (``targets`` attribute with the 159 names; called on a
                [B, 1, H, W] float tensor in [-1024, 1024], returns [B, 159, h, w] logits).
            classes: Class names to write (``anatomy.cxas_classes``).
            device: Torch device the model is on.

        Raises:
            ConfigError: For an unknown class name.
        """
        self.model = model
        self.device = device
        self.output_names = tuple(dict.fromkeys(classes))
        self._index = check_classes(self.output_names, list(model.targets))

    def segment_batch(self, images: Sequence[np.ndarray]) -> list[dict[str, np.ndarray]]:
        """Segment CXRs into ``{class: (1024, 1024) bool}``.

        Args:
            images: Each (1024, 1024) uint8, working frame.

        Returns:
            Per image, one mask per name of :attr:`output_names`.

        Raises:
            InputError: For an image of another shape or dtype (:func:`check_cxr_batch`).
        """
        import torch

        scaled = check_cxr_batch(images)
        if not len(scaled):
            return []
        x = torch.from_numpy(scaled).to(self.device)
        with torch.inference_mode():
            logits = self.model(to_model_grid(x))[:, self._index]
            masks = (to_working_frame(logits.float()) > LOGIT_THRESHOLD).cpu().numpy()
        return [{n: masks[b, k] for k, n in enumerate(self.output_names)}
                for b in range(len(images))]


def create_cxas_segmenter(cfg: AnatomyConfig) -> CXASSegmenter:
    """Registry factory: load ``anatomy.cxas_weights`` on ``anatomy.device``."""
    model = load_cxas_model(cfg.cxas_weights, cfg.device)
    return CXASSegmenter(model, cfg.cxas_classes, cfg.device)
