"""Stage 01.00: anatomy masks (CheXmask-U lungs/heart and CXAS classes) for every CXR of a sheet.

Reads the unique ``dicom_id`` values of ``--meta-csv`` (default: the Stage 00 positive labeling
sheet; all rows, reviewed or not) and writes ``<stage-01 outputs>/chexmasku_pred/<dicom>/
{right_lung,left_lung,heart}.png`` and ``cxas_pred/<dicom>/<class name>.png``, once per dicom;
finished dicoms are skipped on re-run. ``anatomy.backend`` (one name or a list) says who
writes each layout:

- ``chexmask-u``: HybridGNet from the ``setup.sh`` clone (``anatomy.chexmask_u_path``) with
  local weights ``anatomy.chexmask_u_weights``, run on ``path.mimic_cxr_path/<dicom_id>.png``;
- ``cxas``: the CXAS UNet-ResNet50 of torchxrayvision with local weights
  ``anatomy.cxas_weights``, classes ``anatomy.cxas_classes``;
- a layout no model writes is copied from the provided masks ``path.chexmask_path`` /
  ``path.cxas_mask_path`` (``provided``): every required file is checked first (one error
  lists all missing ones); with ``anatomy.provided_frame: original`` (default) they are taken to
  cover the original CXR and mapped with the Stage 00 transform
  (``path.mimic_cxr_path/<dicom_id>.transform.json``: resize to the original size, then the
  letterbox); ``work`` copies them (resized to 1024 x 1024, nearest);
- ``models`` (deprecated) = ``[cxas, chexmask-u]``.

Models are loaded once, before any work; ``anatomy.device`` picks the GPU (or ``cpu``).
``anatomy_summary.json`` records counts and failed dicoms (e.g. a missing CXR) with reasons.

Example::

    python src/01_mask_deformation/00_generate_anatomy_mask.py --config cfg/config_sample_test.yaml
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from chexpercept import io
from chexpercept.anatomy import create_segmenters, generate_anatomy
from chexpercept.schema import load_chexpercept_config
from utils.cli import add_common_args, add_config_arg, progress, run_main, setup_logging

logger = logging.getLogger("00_generate_anatomy_mask")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (release flag spellings, kebab-case aliases)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, "cfg/config.yaml")
    parser.add_argument(
        "--meta-csv", "--meta_csv", dest="meta_csv", default=None,
        help="CSV with a dicom_id column (default: the Stage 00 positive labeling sheet "
             "rosalia_pred/labeling_sheet.csv).")
    parser.add_argument(
        "--output-dir", "--output_dir", dest="output_dir", default=None,
        help="Stage 01 output folder (default: <path.work_dir>/01_mask_deformation or "
             "src/01_mask_deformation/outputs).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Write the anatomy masks of every dicom of the sheet (provided copies and/or models)."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config)
    out01 = (Path(args.output_dir) if args.output_dir
             else io.stage_output_dir("01", cfg.path.work_dir))
    layout = io.DeformationLayout(out01)
    setup_logging(args.log_level, layout.logs_dir, name="00_generate_anatomy_mask",
                  progress=not args.no_progress)
    backend = "+".join(cfg.anatomy.backend)  # names checked by the config schema
    segmenters, provided_layouts = create_segmenters(cfg)  # loads models; fails before work
    meta_csv = Path(args.meta_csv) if args.meta_csv else io.CurationLayout(
        io.stage_output_dir("00", cfg.path.work_dir)).positive_sheet()
    rows = io.read_csv_rows(meta_csv, required=("dicom_id",))
    dicom_ids = [r["dicom_id"].strip() for r in rows if r["dicom_id"].strip()]
    logger.info("anatomy (%s): %d row(s), %d unique dicom(s) from %s", backend, len(rows),
                len(set(dicom_ids)), meta_csv)
    report = generate_anatomy(
        cfg, dicom_ids, layout, segmenters=segmenters, provided_layouts=provided_layouts,
        progress=lambda it, total: progress(it, total=total, desc="anatomy batches"))
    io.write_json_atomic(layout.anatomy_summary_json, report.to_json())
    io.write_run_meta(out01, stage="01.00", config=cfg, seeds={"seed": cfg.seed},
                      repo_root=io.repo_root(),
                      extra={"meta_csv": str(meta_csv),
                             "model_packages": io.package_versions(["torch", "torchxrayvision"])})
    processed = (report.provided or {}).get("processed", 0) + sum(
        m["processed"] for m in report.models)
    skipped = (report.provided or {}).get("skipped_done", 0) + sum(
        m["skipped_done"] for m in report.models)
    logger.info("done: %d unique dicom(s); processed %d, skipped (done) %d, failed %d "
                "(summed over sources); outputs in %s and %s; summary %s", report.dicoms,
                processed, skipped, len(report.failed), layout.chexmask_dir, layout.cxas_dir,
                layout.anatomy_summary_json)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
