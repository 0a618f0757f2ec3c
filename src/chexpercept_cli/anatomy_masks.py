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
from collections.abc import Sequence

from chexpercept.anatomy import generate_anatomy_masks
from chexpercept.config_schema import load_chexpercept_config
from chexpercept.layouts import default_config_path
from utils.cli import (
    add_aliased_arg,
    add_common_args,
    add_config_arg,
    add_output_dir_arg,
    log_dir_hook,
    progress_hook,
    run_main,
)

logger = logging.getLogger("00_generate_anatomy_mask")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (release flag spellings, kebab-case aliases)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, default_config_path())
    add_aliased_arg(
        parser, "meta_csv", default=None,
        help="CSV with a dicom_id column (default: the Stage 00 positive labeling sheet "
             "rosalia_pred/labeling_sheet.csv).")
    add_output_dir_arg(
        parser, "Stage 01 output folder (default: <path.work_dir>/01_mask_deformation or "
                "src/01_mask_deformation/outputs).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Write the anatomy masks of every dicom of the sheet (provided copies and/or models)."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config)
    run = generate_anatomy_masks(
        cfg, meta_csv=args.meta_csv, output_dir=args.output_dir,
        progress=progress_hook("anatomy batches"),
        on_log_dir=log_dir_hook(args, "00_generate_anatomy_mask"))
    logger.info("%s", run.line())
    return 0


def run() -> int:
    """Run the console command ``chexpercept-anatomy-masks`` (:func:`main` under ``run_main``)."""
    return run_main(main)
