"""Stage 01.00 driver: provided masks and/or models -> ``chexmasku_pred/``, ``cxas_pred/``.

Chooses, per output layout, who writes it (``anatomy.backend``): a model backend
(:mod:`chexpercept.anatomy.backends`) or the provided masks (:mod:`chexpercept.anatomy.provided`),
then runs them over the unique dicoms and writes ``anatomy_summary.json``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from chexpercept.anatomy.backends import (
    LAYOUT_CHEXMASK,
    AnatomySegmenter,
    ModelRunSummary,
    create_anatomy_segmenter,
    resolve_backends,
    run_anatomy_segmenter,
)
from chexpercept.anatomy.provided import AnatomyPrepSummary, prepare_provided_anatomy
from chexpercept.errors import ConfigError
from chexpercept.layouts import DeformationLayout

if TYPE_CHECKING:
    from chexpercept.config_schema import ChexperceptConfig

logger = logging.getLogger(__name__)


@dataclass
class AnatomyReport:
    """What a 01.00 run did (written as ``anatomy_summary.json``)."""

    backends: list[str]
    provided_layouts: list[str]
    dicoms: int
    provided: dict[str, Any] | None = None
    models: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> list[dict[str, str]]:
        """Failed dicoms of every model backend (``{backend, dicom_id, reason}``)."""
        return [{"backend": m["backend"], **f} for m in self.models for f in m["failed"]]

    def to_json(self) -> dict[str, Any]:
        """The ``anatomy_summary.json`` record."""
        return {"backends": self.backends, "provided_layouts": self.provided_layouts,
                "dicoms": self.dicoms, "provided": self.provided, "models": self.models,
                "failed": self.failed}


def create_segmenters(cfg: ChexperceptConfig) -> tuple[list[AnatomySegmenter], list[str]]:
    """Resolve ``anatomy.backend`` and load every model once (fails before any work is done).

    Returns:
        ``(segmenters, provided_layouts)``.

    Raises:
        ConfigError: For unknown names or missing weights; when the deprecated ``models`` alias
            is used the message says so.
        MissingDependencyError: If a backend's packages or checkout are missing.
    """
    names = list(cfg.anatomy.backend)
    models, provided = resolve_backends(names)
    segmenters = []
    for name in models:
        try:
            segmenters.append(create_anatomy_segmenter(name, cfg.anatomy))
        except ConfigError as exc:
            if "models" in names:
                raise ConfigError(f"anatomy.backend 'models' (deprecated alias of [cxas, "
                                  f"chexmask-u]): {exc}") from exc
            raise
    return segmenters, provided


def generate_anatomy(
    cfg: ChexperceptConfig, dicom_ids: Sequence[str], layout: DeformationLayout, *,
    segmenters: Sequence[AnatomySegmenter] | None = None,
    provided_layouts: Sequence[str] | None = None,
    progress: Callable[[Iterator[Any], int], Iterator[Any]] | None = None,
) -> AnatomyReport:
    """Write the anatomy masks of every unique dicom (provided copies, then each model).

    Args:
        cfg: The config (``anatomy.*``, ``path.*``, ``mask_deformation.zone_mask_source``).
        dicom_ids: dicom ids (duplicates are processed once).
        layout: Stage 01 layout (``chexmasku_pred/``, ``cxas_pred/``).
        segmenters: Already created backends (default: :func:`create_segmenters`).
        provided_layouts: Layouts copied from provided masks (given with ``segmenters``).
        progress: Optional ``progress(iterable, total)`` wrapper for the model loops.

    Returns:
        The run's report (not yet written).

    Raises:
        ConfigError / InputError / MissingDependencyError: As the backends raise them.
    """
    if segmenters is None:
        segmenters, provided_layouts = create_segmenters(cfg)
    elif provided_layouts is None:
        raise ConfigError("provided_layouts must be given with segmenters")
    unique = list(dict.fromkeys(dicom_ids))
    report = AnatomyReport(backends=list(cfg.anatomy.backend),
                           provided_layouts=list(provided_layouts or []), dicoms=len(unique))
    if provided_layouts:
        prov: AnatomyPrepSummary = prepare_provided_anatomy(
            unique, chexmask_src=cfg.path.chexmask_path, cxas_src=cfg.path.cxas_mask_path,
            chexmask_out=layout.chexmask_dir, cxas_out=layout.cxas_dir,
            zone_source=cfg.mask_deformation.zone_mask_source, cxr_dir=cfg.path.mimic_cxr_path,
            frame=cfg.anatomy.provided_frame, layouts=provided_layouts)
        report.provided = {"processed": prov.processed, "skipped_done": prov.skipped_done,
                           "files_written": prov.files_written}
        logger.info("provided %s: processed %d, skipped (done) %d, %d file(s) written",
                    "+".join(provided_layouts), prov.processed, prov.skipped_done,
                    prov.files_written)
    for seg in segmenters:
        out = layout.chexmask_dir if seg.layout == LAYOUT_CHEXMASK else layout.cxas_dir
        run: ModelRunSummary = run_anatomy_segmenter(
            seg, unique, cxr_dir=cfg.path.mimic_cxr_path, out_dir=out,
            batch_size=cfg.anatomy.batch_size, progress=progress)
        report.models.append(asdict(run))
        logger.info("%s: processed %d, skipped (done) %d, failed %d; %d file(s) in %s",
                    seg.name, run.processed, run.skipped_done, len(run.failed),
                    run.files_written, out)
    return report


__all__ = ["AnatomyReport", "create_segmenters", "generate_anatomy"]
