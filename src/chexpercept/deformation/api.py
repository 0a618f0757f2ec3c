"""Stage 01.01 as a Python API: ``deformed_masks/`` and ``deformation_results/`` from a config.

``src/01_mask_deformation/01_deform_mask.py`` parses its flags and calls :func:`deform_masks`;
a notebook can call it directly, and a script under ``if __name__ == "__main__":`` (worker
processes are spawned, and each imports the script again)::

    from chexpercept.config_schema import load_chexpercept_config
    from chexpercept.deformation import deform_masks

    if __name__ == "__main__":
        cfg = load_chexpercept_config("cfg/config_sample_test.yaml")
        run = deform_masks(cfg, num_workers=2)
        print(run.summary.line())

What is written and how a case is deformed: docs/deformation.md ("Outputs").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chexpercept.anatomy.names import ZONE_SOURCE_CXAS
from chexpercept.anatomy.provided import check_zone_source
from chexpercept.callbacks import OnLogDir, Progress
from chexpercept.deformation.morphological import DeformationParams
from chexpercept.deformation.pipeline import (
    REASON_UNEXPECTED,
    DeformationSettings,
    DeformationSummary,
    build_tasks,
    check_backend,
    run_deformation,
)
from chexpercept.errors import ConfigError
from chexpercept.files import read_csv_rows
from chexpercept.layouts import CurationLayout, DeformationLayout, repo_root, stage_output_dir
from chexpercept.provenance import write_run_meta
from chexpercept.schema import POSITIVE_SHEET_COLUMNS, accepted_key_ids
from utils.ray_pool import RayWorkers

if TYPE_CHECKING:
    from chexpercept.config_schema import ChexperceptConfig

logger = logging.getLogger(__name__)


#: Worker processes of ``01_deform_mask.py`` (``--num-workers``) when not given.
DEFAULT_NUM_WORKERS = 8

_SHEET_REQUIRED = ("key_id", "dicom_id", "target", "pair_id")


@dataclass(frozen=True)
class DeformationRun:
    """Result of :func:`deform_masks`.

    Attributes:
        summary: Counts and failures (also written as ``deformation_results/summary.json``).
        cases: Accepted cases of the sheet (processed, skipped or failed).
        summary_json: ``deformation_results/summary.json``.
    """

    summary: DeformationSummary
    cases: int
    summary_json: Path

    @property
    def unexpected_failure(self) -> bool:
        """Whether a case failed on an unexpected error (the CLI exits 1 then)."""
        return REASON_UNEXPECTED in self.summary.failed

    def failure_counts(self) -> tuple[int, int, str]:
        """``(failed, total, what)`` for the stage's exit code (``failures_exit_code``)."""
        return sum(len(v) for v in self.summary.failed.values()), self.cases, "case(s)"

    def line(self) -> str:
        """The stage's last log line."""
        return f"summary: {self.summary.line()}; summary file {self.summary_json}"


def _settings(cfg: ChexperceptConfig, *, out01: Path, seed: int, chexmask_dir: str | Path,
              cxas_dir: str | Path, cxas_zone_dir: str | Path | None) -> DeformationSettings:
    """Worker settings; backend and zone source are checked first.

    Raises:
        ConfigError: For an unknown backend or zone source, SAM settings that are missing, or
            CXAS zones without a zone folder.
    """
    md = cfg.mask_deformation
    sam = check_backend(md.backend, md)
    zone_source = check_zone_source(md.zone_mask_source)
    if zone_source == ZONE_SOURCE_CXAS and not cxas_zone_dir:
        raise ConfigError("mask_deformation.zone_mask_source is 'cxas', so path.cxas_mask_path "
                          "(CXAS zone masks <dicom>/<zone>.png) must be set in the config or "
                          "--cxas-zone-dir given")
    return DeformationSettings(
        out_dir=str(out01), seed=seed, params=DeformationParams.from_config(md),
        chexmask_dir=str(chexmask_dir), cxas_dir=str(cxas_dir), zone_source=zone_source,
        cxas_zone_dir=str(cxas_zone_dir) if cxas_zone_dir else None, sam=sam)


def deform_masks(
    cfg: ChexperceptConfig, *, positive_sheet: str | Path | None = None,
    candidate_dir: str | Path | None = None, chexmask_dir: str | Path | None = None,
    cxas_dir: str | Path | None = None, cxas_zone_dir: str | Path | None = None,
    output_dir: str | Path | None = None, seed: int | None = None,
    num_workers: int = DEFAULT_NUM_WORKERS, progress: Progress | None = None,
    on_log_dir: OnLogDir | None = None, ray: RayWorkers | None = None,
) -> DeformationRun:
    """Stage 01.01: deform every accepted candidate mask into suboptimal masks and distractors.

    Writes ``deformed_masks/<key_id>/*.png`` and ``deformation_results/items/<key_id>.json``
    per finished case (re-runs skip them), then ``deformation_results.json`` (sheet order),
    ``summary.json`` and ``run_meta.json`` (docs/deformation.md, "Outputs"; docs/differences.md
    D19, D46). Results do not depend on ``num_workers``.

    Args:
        cfg: The loaded config (``mask_deformation.*``, ``path.*``, ``seed``).
        positive_sheet: Sheet with the ``optimal?`` column (None: the Stage 00
            ``rosalia_pred/labeling_sheet.csv``).
        candidate_dir: Root of ``<target>/<pair_id>/pred_mask.png`` (None: the Stage 00
            ``rosalia_pred/``).
        chexmask_dir: CheXmask-U masks (None: the Stage 01 ``chexmasku_pred/``).
        cxas_dir: CXAS lung masks (None: the Stage 01 ``cxas_pred/``).
        cxas_zone_dir: CXAS zone masks, read only for ``zone_mask_source: cxas`` (None:
            ``path.cxas_mask_path``).
        output_dir: Stage 01 output folder (None: ``<path.work_dir>/01_mask_deformation``, else
            ``src/01_mask_deformation/outputs``).
        seed: Overrides ``cfg.seed`` (None: the config's).
        num_workers: Worker processes (spawn), >= 1.
        progress: Wraps the case loop.
        on_log_dir: Called with ``logs/`` of the output folder before the sheet is read.
        ray: Run the cases on Ray actors (``--ray``, ``--ray-workers``) instead of
            ``num_workers`` processes; the outputs are byte-identical (docs/design.md,
            "Ray replicas").

    Returns:
        The run; failed cases are listed in its summary, not raised.

    Raises:
        ConfigError: For ``num_workers`` < 1, a bad backend or zone setting.
        InputError: If the sheet is missing or an accepted row is malformed (all listed).
        SchemaError: If a finished item does not match the results schema.
    """
    if num_workers < 1:
        raise ConfigError(f"--num-workers must be >= 1, got {num_workers}")
    md = cfg.mask_deformation
    seed = cfg.seed if seed is None else seed
    out01 = Path(output_dir) if output_dir else stage_output_dir("01", cfg.path.work_dir)
    layout = DeformationLayout(out01)
    settings = _settings(cfg, out01=out01, seed=seed,
                         chexmask_dir=chexmask_dir or layout.chexmask_dir,
                         cxas_dir=cxas_dir or layout.cxas_dir,
                         cxas_zone_dir=cxas_zone_dir or cfg.path.cxas_mask_path)
    if on_log_dir is not None:
        on_log_dir(layout.logs_dir)
    if md.save_visualization:
        logger.warning("mask_deformation.save_visualization is not supported by the "
                       "morphological backend; no debug figures are written")
    stage00 = CurationLayout(stage_output_dir("00", cfg.path.work_dir))
    sheet = Path(positive_sheet) if positive_sheet else stage00.positive_sheet()
    rows = read_csv_rows(sheet, required=_SHEET_REQUIRED)
    accepted = accepted_key_ids(rows, sheet)
    extra = sorted(set(rows[0]) - set(POSITIVE_SHEET_COLUMNS)) if rows else []
    if extra:
        logger.info("%s: extra column(s) ignored: %s", sheet, extra)
    tasks = build_tasks(rows, accepted, sheet_path=sheet,
                        candidate_root=candidate_dir or stage00.candidate_root,
                        cxr_dir=cfg.path.mimic_cxr_path)
    logger.info("deforming %d accepted case(s) of %d row(s) in %s (backend %s, %s)",
                len(tasks), len(rows), sheet, md.backend,
                f"{num_workers} worker(s)" if ray is None else f"{ray.workers} Ray worker(s)")
    summary = run_deformation(tasks, settings, num_workers=num_workers, progress=progress,
                              ray=ray)
    write_run_meta(layout.results_json.parent, stage="01.01", config=cfg,
                      seeds={"seed": seed}, repo_root=repo_root(),
                      extra={"positive_sheet": str(sheet), "num_workers": num_workers,
                             **({"ray_workers": ray.workers} if ray is not None else {})})
    return DeformationRun(summary=summary, cases=len(tasks), summary_json=layout.summary_json)


__all__ = ["DEFAULT_NUM_WORKERS", "DeformationRun", "deform_masks"]
