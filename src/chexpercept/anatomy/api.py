"""Stage 01.00 as a Python API: anatomy masks (``chexmasku_pred/``, ``cxas_pred/``) from a config.

``src/01_mask_deformation/00_generate_anatomy_mask.py`` parses its flags and calls
:func:`generate_anatomy_masks`; a notebook can call it directly::

    from chexpercept.anatomy import generate_anatomy_masks
    from chexpercept.config_schema import load_chexpercept_config

    run = generate_anatomy_masks(load_chexpercept_config("cfg/config_sample_test.yaml"))
    print(run.line())

Who writes each layout (provided masks or a model backend): docs/deformation.md,
"Anatomy masks".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chexpercept.anatomy.generate import AnatomyReport, create_segmenters, generate_anatomy
from chexpercept.callbacks import OnLogDir, Progress
from chexpercept.files import read_csv_rows, write_json_atomic
from chexpercept.layouts import CurationLayout, DeformationLayout, repo_root, stage_output_dir
from chexpercept.provenance import package_versions, write_run_meta

if TYPE_CHECKING:
    from chexpercept.config_schema import ChexperceptConfig

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class AnatomyMasksRun:
    """Result of :func:`generate_anatomy_masks`.

    Attributes:
        report: What each source did (written as ``anatomy_summary.json``).
        meta_csv: The sheet whose ``dicom_id`` values were processed.
        layout: The Stage 01 paths (``chexmasku_pred/``, ``cxas_pred/``, the summary).
    """

    report: AnatomyReport
    meta_csv: Path
    layout: DeformationLayout

    def line(self) -> str:
        """The stage's last log line (counts summed over the sources)."""
        r = self.report
        processed = (r.provided or {}).get("processed", 0) + sum(
            m["processed"] for m in r.models)
        skipped = (r.provided or {}).get("skipped_done", 0) + sum(
            m["skipped_done"] for m in r.models)
        return (f"done: {r.dicoms} unique dicom(s); processed {processed}, skipped (done) "
                f"{skipped}, failed {len(r.failed)} (summed over sources); outputs in "
                f"{self.layout.chexmask_dir} and {self.layout.cxas_dir}; summary "
                f"{self.layout.anatomy_summary_json}")


def generate_anatomy_masks(
    cfg: ChexperceptConfig, *, meta_csv: str | Path | None = None,
    output_dir: str | Path | None = None, progress: Progress | None = None,
    on_log_dir: OnLogDir | None = None,
) -> AnatomyMasksRun:
    """Stage 01.00: the anatomy masks of every unique dicom of a sheet, once per dicom.

    Loads every model backend of ``anatomy.backend`` before any work, copies the layouts no
    model writes from the provided masks, runs the models, then writes ``anatomy_summary.json``
    and ``run_meta.json`` (docs/deformation.md, "Anatomy masks"; docs/differences.md D12).

    Args:
        cfg: The loaded config (``anatomy.*``, ``path.*``).
        meta_csv: CSV with a ``dicom_id`` column (None: the Stage 00 positive sheet
            ``rosalia_pred/labeling_sheet.csv``; every row, reviewed or not).
        output_dir: Stage 01 output folder (None: ``<path.work_dir>/01_mask_deformation``, else
            ``src/01_mask_deformation/outputs``).
        progress: Wraps the model batch loops.
        on_log_dir: Called with ``logs/`` of the output folder before any model is loaded.

    Returns:
        The run (``line()`` is the stage's summary line); failed dicoms are listed in it.

    Raises:
        ConfigError: For unknown backends or missing weights.
        InputError: If the sheet or a required provided mask is missing (all listed).
        MissingDependencyError: If a backend's packages or checkout are missing.
    """
    out01 = Path(output_dir) if output_dir else stage_output_dir("01", cfg.path.work_dir)
    layout = DeformationLayout(out01)
    if on_log_dir is not None:
        on_log_dir(layout.logs_dir)
    backend = "+".join(cfg.anatomy.backend)  # names checked by the config schema
    segmenters, provided_layouts = create_segmenters(cfg)  # loads models; fails before work
    sheet = Path(meta_csv) if meta_csv else CurationLayout(
        stage_output_dir("00", cfg.path.work_dir)).positive_sheet()
    rows = read_csv_rows(sheet, required=("dicom_id",))
    dicom_ids = [r["dicom_id"].strip() for r in rows if r["dicom_id"].strip()]
    logger.info("anatomy (%s): %d row(s), %d unique dicom(s) from %s", backend, len(rows),
                len(set(dicom_ids)), sheet)
    report = generate_anatomy(cfg, dicom_ids, layout, segmenters=segmenters,
                              provided_layouts=provided_layouts, progress=progress)
    write_json_atomic(layout.anatomy_summary_json, report.to_json())
    write_run_meta(out01, stage="01.00", config=cfg, seeds={"seed": cfg.seed},
                      repo_root=repo_root(),
                      extra={"meta_csv": str(sheet),
                             "model_packages": package_versions(["torch", "torchxrayvision"])})
    return AnatomyMasksRun(report=report, meta_csv=sheet, layout=layout)


__all__ = ["AnatomyMasksRun", "generate_anatomy_masks"]
