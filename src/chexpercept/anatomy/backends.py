"""Stage 01.00 anatomy model backends: one interface, a registry, and the per-dicom runner.

A backend segments one prepared CXR (``<mimic_cxr_path>/<dicom_id>.png``, 1024 x 1024 working
frame) into named masks and writes them in its layout: CheXmask-U ``chexmasku_pred/<dicom>/
{right_lung,left_lung,heart}.png`` or CXAS ``cxas_pred/<dicom>/<class name>.png``
(docs/deformation.md, "Anatomy masks"). Models run on the working-frame image, so their masks
are in the working frame already (the letterbox is CheXmask's own pad-to-square input
convention; docs/curation.md, "Working frame").
"""

from __future__ import annotations

import importlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from chexpercept.errors import ConfigError, InputError
from chexpercept.images import WORK_SIZE, read_cxr, write_mask
from chexpercept.layouts import anatomy_mask_path

if TYPE_CHECKING:
    from chexpercept.config_schema import AnatomyConfig

logger = logging.getLogger(__name__)

LAYOUT_CHEXMASK = "chexmask"
"""Output layout ``chexmasku_pred/<dicom>/<stem>.png``."""
LAYOUT_CXAS = "cxas"
"""Output layout ``cxas_pred/<dicom>/<class name>.png``."""

MODEL_BACKENDS: tuple[str, ...] = ("cxas", "chexmask-u")
"""Anatomy backends that run a model (``anatomy.backend``)."""
ANATOMY_BACKENDS: tuple[str, ...] = ("provided", *MODEL_BACKENDS, "models")
"""``anatomy.backend`` names; ``models`` is the deprecated alias of ``[cxas, chexmask-u]``."""
DEPRECATED_ALIASES: dict[str, tuple[str, ...]] = {"models": MODEL_BACKENDS}

_REGISTRY: dict[str, tuple[str | Callable[..., AnatomySegmenter], str]] = {
    "cxas": ("chexpercept.anatomy._cxas:create_cxas_segmenter", LAYOUT_CXAS),
    "chexmask-u": ("chexpercept.anatomy._chexmasku:create_chexmasku_segmenter", LAYOUT_CHEXMASK),
}
"""name -> (factory or ``"module:function"``, output layout)."""


class AnatomySegmenter(ABC):
    """Segments prepared CXRs into named anatomy masks.

    Subclasses set :attr:`name`, :attr:`layout` and :attr:`output_names` and implement
    :meth:`segment_batch`. The model is loaded once, when the object is created.
    """

    name: str = ""
    """Registry name (``cxas``, ``chexmask-u``)."""
    layout: str = ""
    """:data:`LAYOUT_CHEXMASK` or :data:`LAYOUT_CXAS`."""
    output_names: tuple[str, ...] = ()
    """File stems written per dicom (``<dicom>/<name>.png``)."""

    @abstractmethod
    def segment_batch(self, images: Sequence[np.ndarray]) -> list[dict[str, np.ndarray]]:
        """Segment several CXRs.

        Args:
            images: Each (1024, 1024) uint8 grayscale, working frame.

        Returns:
            Per image ``{name: (1024, 1024) bool}`` with every name of :attr:`output_names`.
        """

    def segment(self, image: np.ndarray) -> dict[str, np.ndarray]:
        """Segment one CXR ((1024, 1024) uint8) into ``{name: (1024, 1024) bool}``."""
        return self.segment_batch([image])[0]


def register_anatomy_segmenter(name: str, factory: str | Callable[..., AnatomySegmenter],
                               layout: str) -> None:
    """Register (or replace) a backend: ``factory(cfg: AnatomyConfig) -> AnatomySegmenter``.

    ``factory`` may be a ``"module:function"`` string, imported when the backend is created.
    Plugins and tests use this; names stay short and lowercase.

    Raises:
        ValueError: If ``layout`` is not :data:`LAYOUT_CHEXMASK` or :data:`LAYOUT_CXAS`.
    """
    if layout not in (LAYOUT_CHEXMASK, LAYOUT_CXAS):
        raise ValueError(f"layout must be {LAYOUT_CHEXMASK!r} or {LAYOUT_CXAS!r}, got {layout!r}")
    _REGISTRY[name] = (factory, layout)


def create_anatomy_segmenter(name: str, cfg: AnatomyConfig) -> AnatomySegmenter:
    """Create (and load the model of) the backend ``name``.

    Raises:
        ConfigError: For an unknown name (listing the valid ones), or missing/invalid weights.
        MissingDependencyError: If the backend's packages or checkout are missing.
    """
    entry = _REGISTRY.get(name)
    if entry is None:
        raise ConfigError(f"anatomy.backend: unknown model backend {name!r}; expected one of "
                          f"{sorted(_REGISTRY)} or 'provided'")
    factory = entry[0]
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    return factory(cfg)


def resolve_backends(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``anatomy.backend`` into model backends and the layouts copied from provided masks.

    Args:
        names: ``anatomy.backend`` (after the config's one-name-or-list normalisation).

    Returns:
        ``(models, provided_layouts)``: model backends in a fixed order, without duplicates
        (``models`` expands to ``cxas, chexmask-u`` with a deprecation warning), and the layouts
        (:data:`LAYOUT_CHEXMASK`, :data:`LAYOUT_CXAS`) no model writes, which come from
        ``path.chexmask_path`` / ``path.cxas_mask_path``.

    Raises:
        ConfigError: For an unknown name, an empty list, or two backends writing one layout.
    """
    if not names:
        raise ConfigError("anatomy.backend is empty; expected provided, cxas and/or chexmask-u")
    models: list[str] = []
    for name in names:
        if name in DEPRECATED_ALIASES:
            logger.warning("anatomy.backend %r is deprecated; write %s instead", name,
                           list(DEPRECATED_ALIASES[name]))
            models.extend(DEPRECATED_ALIASES[name])
        elif name in _REGISTRY:
            models.append(name)
        elif name != "provided":
            raise ConfigError(f"anatomy.backend: unknown value {name!r}; expected one of "
                              f"{ANATOMY_BACKENDS}")
    models = list(dict.fromkeys(models))
    by_layout: dict[str, list[str]] = {}
    for m in models:
        by_layout.setdefault(layout_of(m), []).append(m)
    clashes = {lay: ms for lay, ms in by_layout.items() if len(ms) > 1}
    if clashes:
        raise ConfigError(f"anatomy.backend: several backends write the same layout {clashes}; "
                          "keep one per layout")
    written = set(by_layout)
    provided = [lay for lay in (LAYOUT_CHEXMASK, LAYOUT_CXAS) if lay not in written]
    return models, provided


def layout_of(name: str) -> str:
    """Output layout (:data:`LAYOUT_CHEXMASK` / :data:`LAYOUT_CXAS`) of a registered backend.

    Raises:
        ConfigError: For an unknown name.
    """
    if name not in _REGISTRY:
        raise ConfigError(f"anatomy.backend: unknown model backend {name!r}")
    return _REGISTRY[name][1]


@dataclass
class ModelRunSummary:
    """Counts of one backend's run over the dicoms (the stage's summary line)."""

    backend: str
    processed: int = 0
    skipped_done: int = 0
    files_written: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)


def _batches(items: Sequence[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


def dicom_done(out_dir: Path, dicom_id: str, names: Sequence[str]) -> bool:
    """Whether every ``<out_dir>/<dicom>/<name>.png`` exists (resume)."""
    return all(anatomy_mask_path(out_dir, dicom_id, n).is_file() for n in names)


def run_anatomy_segmenter(
    segmenter: AnatomySegmenter, dicom_ids: Sequence[str], *, cxr_dir: str | Path,
    out_dir: str | Path, batch_size: int = 4,
    progress: Callable[[Iterator[Any], int], Iterator[Any]] | None = None,
) -> ModelRunSummary:
    """Run one backend over the unique dicoms and write its masks as it goes.

    Each dicom is processed once (duplicates dropped, first-occurrence order); a dicom whose
    output files all exist is skipped (resume); a missing or unreadable CXR is recorded in
    ``failed`` with its reason and logged, never skipped silently. Masks are written atomically
    as 0/255 L PNGs right after their batch.

    Args:
        segmenter: The backend.
        dicom_ids: dicom ids (duplicates allowed).
        cxr_dir: ``path.mimic_cxr_path`` (``<dicom_id>.png`` in the 1024 x 1024 working frame).
        out_dir: The layout's folder (``chexmasku_pred/`` or ``cxas_pred/``).
        batch_size: Images per :meth:`AnatomySegmenter.segment_batch` call (``anatomy.batch_size``).
        progress: Optional wrapper ``progress(iterable, total)`` for a progress bar over batches.

    Returns:
        The run's counts and failures.

    Raises:
        ConfigError: If ``batch_size`` < 1.
    """
    if batch_size < 1:
        raise ConfigError(f"anatomy.batch_size must be >= 1, got {batch_size}")
    out = Path(out_dir)
    summary = ModelRunSummary(segmenter.name)
    todo = []
    for dicom in dict.fromkeys(dicom_ids):
        if dicom_done(out, dicom, segmenter.output_names):
            summary.skipped_done += 1
        else:
            todo.append(dicom)
    batches: Iterator[list[str]] = _batches(todo, batch_size)
    if progress is not None:
        batches = progress(batches, -(-len(todo) // batch_size))
    for batch in batches:
        ready, images = [], []
        for dicom in batch:
            try:
                images.append(read_cxr(Path(cxr_dir) / f"{dicom}.png", size=WORK_SIZE))
                ready.append(dicom)
            except InputError as exc:
                logger.warning("anatomy %s: dicom %s failed: %s", segmenter.name, dicom, exc)
                summary.failed.append({"dicom_id": dicom, "reason": str(exc)})
        if not ready:
            continue
        results = segmenter.segment_batch(images)
        for dicom, masks in zip(ready, results, strict=True):
            for name in segmenter.output_names:
                write_mask(anatomy_mask_path(out, dicom, name), masks[name])
                summary.files_written += 1
            summary.processed += 1
    return summary


def resolve_device(device: str, key: str) -> str:
    """Check a torch device string against what torch sees.

    Args:
        device: ``cpu``, ``cuda`` or ``cuda:<i>``.
        key: The config key, for the message.

    Returns:
        ``device`` unchanged.

    Raises:
        ConfigError: If CUDA is asked for but torch sees no GPU (or fewer than ``i + 1``).
    """
    import torch

    if device.startswith("cuda"):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if index >= n:
            raise ConfigError(f"{key} is {device!r} but torch sees {n} CUDA device(s); set "
                              f"{key}: cpu or choose a visible GPU (CUDA_VISIBLE_DEVICES)")
    return device


__all__ = [
    "ANATOMY_BACKENDS",
    "AnatomySegmenter",
    "LAYOUT_CHEXMASK",
    "LAYOUT_CXAS",
    "MODEL_BACKENDS",
    "ModelRunSummary",
    "create_anatomy_segmenter",
    "dicom_done",
    "layout_of",
    "register_anatomy_segmenter",
    "resolve_backends",
    "resolve_device",
    "run_anatomy_segmenter",
]
