"""Stage 01.00 backend ``chexmask-u``: HybridGNet landmarks (CheXmask-U) -> ``chexmasku_pred/``.

The model code comes from the ``setup.sh`` clone of github.com/mcosarinsky/CheXmask-U
(``anatomy.chexmask_u_path``, default ``src/01_mask_deformation/CheXmask-U``): its
``HybridGNet/models/HybridGNet2IGSC.py`` (``HybridGNetHF``) is imported only when the backend is
created, through :func:`utils.deps.import_from_checkout` (the clone's own ``utils``/``models``
packages never meet ours in ``sys.modules``). Weights are the local file
``anatomy.chexmask_u_weights`` (docs/deformation.md, "Anatomy masks").

Input (CheXmask convention): one-channel grayscale 1024 x 1024 scaled to
[0, 1] (``image / 255``), shape [B, 1, 1024, 1024]. Our working frame is already the CXR padded
to a square and resized to 1024 (letterbox), which is the model's preprocessing; the release fed
raw 0-255 values (docs/differences.md D12). Output: 120 landmarks (x, y) in [0, 1], times 1024:
rows 0-43 right lung, 44-93 left lung, 94-119 heart, each filled as a polygon.
The latent mean is decoded (no sampling), so results are deterministic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from chexpercept.anatomy.backends import LAYOUT_CHEXMASK, AnatomySegmenter, resolve_device
from chexpercept.anatomy.names import CHEXMASK_FILES
from chexpercept.errors import ConfigError, SchemaError
from chexpercept.files import read_json
from chexpercept.images import WORK_SIZE
from chexpercept.layouts import repo_root
from utils.deps import import_from_checkout, require
from utils.weights import load_weights

if TYPE_CHECKING:
    from chexpercept.config_schema import AnatomyConfig

logger = logging.getLogger(__name__)

_FEATURE = "anatomy.backend 'chexmask-u'"
#: Landmark rows per structure (CheXmask-U order; docs/deformation.md, "Anatomy masks").
LANDMARK_SLICES: dict[str, slice] = {CHEXMASK_FILES["right"]: slice(0, 44),
                                     CHEXMASK_FILES["left"]: slice(44, 94),
                                     CHEXMASK_FILES["heart"]: slice(94, 120)}
N_LANDMARKS = 120
#: HybridGNetHF defaults of the published ``v1_skip`` model (CheXmask-U's ``config.json``).
DEFAULT_CONFIG: dict[str, Any] = {"latents": 64, "inputsize": 1024, "K": 6,
                                  "filters": [2, 32, 32, 32, 16, 16, 16], "skip_features": 32,
                                  "eval_sampling": False, "use_skip": True}


def default_checkout() -> Path:
    """``src/01_mask_deformation/CheXmask-U`` (where ``setup.sh`` clones it)."""
    return repo_root() / "src" / "01_mask_deformation" / "CheXmask-U"


def landmarks_to_masks(landmarks: np.ndarray, size: int = WORK_SIZE) -> dict[str, np.ndarray]:
    """Fill HybridGNet landmarks into the three masks.

    Args:
        landmarks: (120, 2) float (x, y) normalised to [0, 1] (scaled by ``size``).
        size: Canvas side (1024).

    Returns:
        ``{right_lung, left_lung, heart: (size, size) bool}`` (each polygon filled with
        ``cv2.fillPoly``).

    Raises:
        SchemaError: If ``landmarks`` is not (120, 2).
    """
    pts = np.asarray(landmarks, dtype=np.float64)
    if pts.shape != (N_LANDMARKS, 2):
        raise SchemaError(f"{_FEATURE}: expected ({N_LANDMARKS}, 2) landmarks, got {pts.shape}")
    pixels = np.round(pts * size).astype(np.int32)
    out = {}
    for name, rows in LANDMARK_SLICES.items():
        canvas = np.zeros((size, size), np.uint8)
        cv2.fillPoly(canvas, [pixels[rows].reshape(-1, 1, 2)], 1)
        out[name] = canvas.astype(bool)
    return out


def normalise_input(images: Sequence[np.ndarray]) -> np.ndarray:
    """(B, 1, 1024, 1024) float32 in [0, 1] from (1024, 1024) uint8 CXRs (``image / 255``)."""
    return (np.stack([np.asarray(im, np.float32) for im in images]) / 255.0)[:, None]


class ChexmaskUSegmenter(AnatomySegmenter):
    """Lungs and heart from a landmark model.

    ``predict`` maps a [B, 1, 1024, 1024] float32 array in [0, 1] to (B, 120, 2) landmarks in
    [0, 1]; :func:`hybridgnet_predictor` builds it for the real model.
    """

    name = "chexmask-u"
    layout = LAYOUT_CHEXMASK
    output_names = (CHEXMASK_FILES["right"], CHEXMASK_FILES["left"], CHEXMASK_FILES["heart"])

    def __init__(self, predict: Callable[[np.ndarray], Any]) -> None:
        """Wrap a landmark predictor (see the class docstring)."""
        self.predict = predict

    def segment_batch(self, images: Sequence[np.ndarray]) -> list[dict[str, np.ndarray]]:
        """Segment CXRs ((1024, 1024) uint8 each) into right/left lung and heart masks."""
        landmarks = np.asarray(self.predict(normalise_input(images)), dtype=np.float64)
        if landmarks.shape[0] != len(images):
            raise SchemaError(f"{_FEATURE}: model returned {landmarks.shape[0]} landmark sets "
                              f"for {len(images)} image(s)")
        return [landmarks_to_masks(lm) for lm in landmarks]


def hybridgnet_predictor(model: Any, device: str) -> Callable[[np.ndarray], np.ndarray]:
    """Deterministic landmark predictor: encode, decode the latent mean (no sampling).

    Args:
        model: ``HybridGNetHF`` (its ``.model`` is ``Hybrid``/``HybridNoSkip``) or the inner model.
        device: Torch device the model is on.

    Returns:
        ``predict(x: (B, 1, 1024, 1024) float32) -> (B, 120, 2) float`` in [0, 1].
    """
    import torch

    net = getattr(model, "model", model)

    def predict(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            mu, _log_var, conv6, conv5 = net.encode(torch.from_numpy(x).to(device))
            out = net.decode(mu, conv6, conv5)[0]
        return out.float().cpu().numpy().reshape(x.shape[0], -1, 2)

    return predict


def _model_config(weights: Path, config_path: str | None) -> dict[str, Any]:
    path = Path(config_path).expanduser() if config_path else weights.parent / "config.json"
    config = dict(DEFAULT_CONFIG)
    if config_path and not path.is_file():
        raise ConfigError(f"anatomy.chexmask_u_config {path} is not a file")
    if path.is_file():
        data = read_json(path)
        if not isinstance(data, dict):
            raise ConfigError(f"anatomy.chexmask_u_config {path}: expected a JSON object")
        config.update(data)
    config.pop("n_nodes", None)  # recomputed by HybridGNetHF from the graph matrices
    config.pop("device", None)
    return config


def load_hybridgnet(checkout: str | Path | None, weights: str | Path | None,
                    config_path: str | None, device: str) -> Any:
    """Import ``HybridGNetHF`` from the clone and load local weights into it.

    Args:
        checkout: ``anatomy.chexmask_u_path`` (None: :func:`default_checkout`).
        weights: ``anatomy.chexmask_u_weights`` (``pytorch_model.bin`` or ``bestMSE.pt``; keys
            with or without the ``model.`` prefix).
        config_path: ``anatomy.chexmask_u_config``.
        device: Torch device.

    Returns:
        The model in eval mode on ``device``.

    Raises:
        ConfigError: If the weights are unset, missing or do not fit the model.
        InputError: If the weights file holds pickled objects besides tensors (never
            unpickled) or is no torch checkpoint (:func:`utils.weights.load_weights`).
        SchemaError: If the model config file is not JSON (naming it).
        MissingDependencyError: If the clone, torch or the clone's packages (torch_geometric,
            huggingface_hub) are missing.
    """
    if not weights:
        raise ConfigError(f"{_FEATURE} needs anatomy.chexmask_u_weights: a local HybridGNet "
                          "file (pytorch_model.bin from the HF repo mcosarinsky/CheXmask-U, "
                          "subfolder v1_skip, or CheXmask's bestMSE.pt); nothing is downloaded")
    wpath = Path(weights).expanduser()
    if not wpath.is_file():
        raise ConfigError(f"anatomy.chexmask_u_weights {wpath} is not a file")
    require("torch", "anatomy", _FEATURE)
    device = resolve_device(device, "anatomy.device")
    root = Path(checkout).expanduser() if checkout else default_checkout()
    module = import_from_checkout(
        root / "HybridGNet", ["models.HybridGNet2IGSC"], feature=_FEATURE,
        fix="run `bash setup.sh` (clones https://github.com/mcosarinsky/CheXmask-U) or set "
            "anatomy.chexmask_u_path to a clone")["models.HybridGNet2IGSC"]
    model = module.HybridGNetHF(device=device, **_model_config(wpath, config_path))
    state = load_weights(wpath, "anatomy.chexmask_u_weights", map_location=device)
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not state:
        raise ConfigError(f"anatomy.chexmask_u_weights {wpath}: expected a state dict")
    if not next(iter(state)).startswith("model."):
        state = {f"model.{k}": v for k, v in state.items()}
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ConfigError(f"anatomy.chexmask_u_weights {wpath} does not fit HybridGNetHF "
                          f"(check anatomy.chexmask_u_config / use_skip): {exc}") from exc
    return model.to(device).eval()


def create_chexmasku_segmenter(cfg: AnatomyConfig) -> ChexmaskUSegmenter:
    """Registry factory: the clone's HybridGNet with local weights on ``anatomy.device``."""
    model = load_hybridgnet(cfg.chexmask_u_path, cfg.chexmask_u_weights, cfg.chexmask_u_config,
                            cfg.device)
    return ChexmaskUSegmenter(hybridgnet_predictor(model, cfg.device))
