"""Stage 00.03: copy the sampled negative CXRs and write the negative labeling sheet.

Reads ``global_segmentation_negative_info.json`` (Stage 00.00), the positive dicoms (the
positive sheet, default ``rosalia_pred/labeling_sheet.csv``, plus the positive segmentation
info JSONs; always excluded, docs/differences.md D8) and ``path.mimic_cxr_path/<dicom_id>.png``.
Writes ``negative/<lesion>/<key_id>.png``, ``negative/labeling_sheet.csv`` (columns
``lesion, key_id, dicom_id, optimal?``) and ``negative/summary.json``. A dicom is used for at
most one lesion. Existing copies are kept (resume).

Example::

    python src/00_source_data_curation/03_prepare_negative_annotation.py --config cfg/config.yaml \
        --samples-per-lesion 100
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from chexpercept.config_schema import load_chexpercept_config
from chexpercept.curation import prepare_negative_sheet
from chexpercept.layouts import default_config_path
from utils.cli import (
    add_aliased_arg,
    add_common_args,
    add_config_arg,
    add_output_dir_arg,
    log_dir_hook,
    run_main,
)

logger = logging.getLogger("03_prepare_negative_annotation")



def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, default_config_path())
    add_aliased_arg(
        parser, "samples_per_lesion", type=int, default=None,
        help="Negatives per lesion (default: source_data_curation.samples_per_lesion_negative).")
    add_aliased_arg(
        parser, "positive_csv", default=None,
        help="Positive labeling sheet whose dicoms are excluded (default: "
             "rosalia_pred/labeling_sheet.csv of the Stage 00 output; positives are always "
             "excluded).")
    add_output_dir_arg(
        parser, "Stage 00 output folder (default: <path.work_dir>/00_source_data_curation, or "
                "src/00_source_data_curation/outputs).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Copy negatives and write the negative sheet."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config)
    report = prepare_negative_sheet(
        cfg, output_dir=args.output_dir, samples_per_lesion=args.samples_per_lesion,
        positive_csv=args.positive_csv,
        on_log_dir=log_dir_hook(args, "03_prepare_negative_annotation"))
    logger.info("%s", report.line())
    return 0


def run() -> int:
    """Run the console command ``chexpercept-negative-sheet`` (:func:`main` under ``run_main``)."""
    return run_main(main)
