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
import sys
from collections.abc import Sequence
from pathlib import Path

from chexpercept import io
from chexpercept.curation.sheets import positive_dicoms, prepare_negatives
from chexpercept.schema import NEGATIVE_SHEET_COLUMNS, load_chexpercept_config
from utils.cli import add_common_args, add_config_arg, run_main, setup_logging

logger = logging.getLogger("03_prepare_negative_annotation")

DEFAULT_CONFIG = str(io.repo_root() / "cfg" / "config.yaml")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, DEFAULT_CONFIG)
    parser.add_argument(
        "--samples-per-lesion", "--samples_per_lesion", dest="samples_per_lesion", type=int,
        default=None,
        help="Negatives per lesion (default: source_data_curation.samples_per_lesion_negative).")
    parser.add_argument(
        "--positive-csv", "--positive_csv", dest="positive_csv", default=None,
        help="Positive labeling sheet whose dicoms are excluded (default: "
             "rosalia_pred/labeling_sheet.csv of the Stage 00 output; positives are always "
             "excluded).")
    parser.add_argument(
        "--output-dir", "--output_dir", dest="output_dir", default=None,
        help="Stage 00 output folder (default: <path.work_dir>/00_source_data_curation, or "
             "src/00_source_data_curation/outputs).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Copy negatives and write the negative sheet."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config)
    out = Path(args.output_dir) if args.output_dir else io.stage_output_dir("00",
                                                                            cfg.path.work_dir)
    layout = io.CurationLayout(out)
    setup_logging(args.log_level, layout.negative_sheet.parent,
                  name="03_prepare_negative_annotation", progress=not args.no_progress)
    k = (args.samples_per_lesion if args.samples_per_lesion is not None
         else cfg.source_data_curation.samples_per_lesion_negative)
    explicit = args.positive_csv is not None
    positive_csv = Path(args.positive_csv) if explicit else layout.positive_sheet()
    exclude = positive_dicoms(layout, positive_csv, explicit=explicit)
    outcome = prepare_negatives(layout, cxr_dir=cfg.path.mimic_cxr_path, samples_per_lesion=k,
                                exclude=exclude)
    for lesion, msg in outcome.shortfalls.items():
        logger.warning("%s: %s", lesion, msg)
    io.write_csv_atomic(layout.negative_sheet, outcome.rows, NEGATIVE_SHEET_COLUMNS)
    io.write_json_atomic(layout.negative_summary, {
        "samples_per_lesion": k, "excluded_positive_dicoms": len(exclude),
        "rows": len(outcome.rows), "copied": outcome.copied, "skipped": outcome.skipped,
        "shortfalls": outcome.shortfalls})
    logger.info("done: %d negative(s), %d copied, %d skipped (already there), failed 0; "
                "sheet %s", len(outcome.rows), outcome.copied, outcome.skipped,
                layout.negative_sheet)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
