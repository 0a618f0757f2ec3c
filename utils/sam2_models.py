"""Loading a SAM2 image predictor from local files (nothing is downloaded).

One loader for every SAM2 user: the Stage 01 deformation backend (``mask_deformation.backend:
sam2``) and the Stage 00 ``sam2-box`` candidate segmenter; both read the
``mask_deformation.sam2_checkpoint`` / ``sam2_config`` settings (docs/deformation.md, "SAM
refinement"). sam2, torch and hydra are imported only when a predictor is loaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from utils.deps import require
from utils.errors import InputError
from utils.weights import load_weights

logger = logging.getLogger(__name__)


def load_sam2_predictor(checkpoint: str, config: str, device: str, *, what: str) -> Any:
    """``SAM2ImagePredictor`` from a local ``{"model": state_dict}`` checkpoint (Meta's format).

    Args:
        checkpoint: The checkpoint file, loaded strictly.
        config: A config name inside the sam2 package (``configs/sam2.1/sam2.1_hiera_t.yaml``)
            or a path to a YAML file with a ``model`` node.
        device: Torch device (``cpu``, ``cuda:0``).
        what: What needs sam2, for the install message (a config key and its value).

    Returns:
        A ``sam2.sam2_image_predictor.SAM2ImagePredictor``.

    Raises:
        MissingDependencyError: If sam2 is not installed (names the install line and ``what``).
        InputError: If the checkpoint does not fit the config, holds pickled objects besides
            tensors (never unpickled) or is no torch checkpoint
            (:func:`utils.weights.load_weights`).
    """
    require("sam2", "sam", what)
    from sam2.build_sam import build_sam2
    from sam2.sam2_image_predictor import SAM2ImagePredictor

    state = load_weights(checkpoint, "mask_deformation.sam2_checkpoint")
    try:
        if Path(config).is_file():
            from hydra.utils import instantiate
            from omegaconf import OmegaConf

            model = instantiate(OmegaConf.load(config).model, _recursive_=True)
        else:  # built without weights; sam2's own loader is not used (the file is read above)
            model = build_sam2(config, ckpt_path=None, device=device)
        model.load_state_dict(state["model"], strict=True)
        model = model.to(device).eval()
    except (RuntimeError, KeyError, TypeError) as exc:
        raise InputError(f"cannot load SAM2 checkpoint {checkpoint} with config {config} "
                         f"(mask_deformation.sam2_checkpoint / sam2_config): {exc}") from None
    logger.info("SAM2 %s loaded on %s", checkpoint, device)
    return SAM2ImagePredictor(model)
