"""Stage 01.00: anatomy masks (CheXmask-U lungs/heart and CXAS classes) for every CXR of a sheet.

Reads the unique ``dicom_id`` values of ``--meta-csv`` (default: the Stage 00 positive labeling
sheet; all rows, reviewed or not) and, with ``anatomy.backend: provided``, the masks under
``path.chexmask_path/<dicom>/{right_lung,left_lung,heart}.png`` and
``path.cxas_mask_path/<dicom>/<class name>.png``. Every required file is checked first (one
error lists all missing ones); the masks are resized to 1024 x 1024 (nearest) and written to
``<stage-01 outputs>/chexmasku_pred/`` and ``cxas_pred/`` (same layout), once per dicom;
finished dicoms are skipped on re-run. With ``anatomy.provided_frame: original`` (default) the
provided masks are taken to cover the original CXR and mapped with the Stage 00 transform
(``path.mimic_cxr_path/<dicom_id>.transform.json``: resize to the original size, then the
letterbox), so they line up with the prepared CXR; ``work`` copies them as they are.
``anatomy.backend: models`` is not implemented yet.

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
from chexpercept.anatomy import prepare_provided_anatomy
from chexpercept.anatomy.provided import models_backend_unavailable
from chexpercept.schema import load_chexpercept_config
from utils.cli import add_common_args, add_config_arg, run_main, setup_logging

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
    """Validate and copy the provided anatomy masks of every dicom of the sheet."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config)
    out01 = (Path(args.output_dir) if args.output_dir
             else io.stage_output_dir("01", cfg.path.work_dir))
    layout = io.DeformationLayout(out01)
    setup_logging(args.log_level, layout.logs_dir, name="00_generate_anatomy_mask",
                  progress=not args.no_progress)
    backend = cfg.anatomy.backend  # one of ANATOMY_BACKENDS (checked by the config schema)
    if backend == "models":
        raise models_backend_unavailable()
    meta_csv = Path(args.meta_csv) if args.meta_csv else io.CurationLayout(
        io.stage_output_dir("00", cfg.path.work_dir)).positive_sheet()
    rows = io.read_csv_rows(meta_csv, required=("dicom_id",))
    dicom_ids = [r["dicom_id"].strip() for r in rows if r["dicom_id"].strip()]
    logger.info("anatomy (%s): %d row(s), %d unique dicom(s) from %s", backend, len(rows),
                len(set(dicom_ids)), meta_csv)
    summary = prepare_provided_anatomy(
        dicom_ids, chexmask_src=cfg.path.chexmask_path, cxas_src=cfg.path.cxas_mask_path,
        chexmask_out=layout.chexmask_dir, cxas_out=layout.cxas_dir,
        zone_source=cfg.mask_deformation.zone_mask_source, cxr_dir=cfg.path.mimic_cxr_path,
        frame=cfg.anatomy.provided_frame)
    io.write_run_meta(out01, stage="01.00", config=cfg, seeds={"seed": cfg.seed},
                      repo_root=io.repo_root(), extra={"meta_csv": str(meta_csv)})
    logger.info("done: processed %d dicom(s) (%d file(s) written), skipped (done) %d, failed 0; "
                "outputs in %s and %s", summary.processed, summary.files_written,
                summary.skipped_done, layout.chexmask_dir, layout.cxas_dir)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
