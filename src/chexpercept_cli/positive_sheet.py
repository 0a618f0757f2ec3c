"""Stage 00.02: merge sharded Stage 00.01 outputs into the positive labeling sheet.

Reads ``<base-out>/results_part<p>.json`` and ``labeling_sheet_part<p>.csv`` for p < N and
writes ``<base-out>/results.json`` and ``labeling_sheet.csv`` (columns
``POSITIVE_SHEET_COLUMNS``). A missing part is an error naming it (no half merge). An unsharded
run is never clobbered: with no part files, or when the unsharded outputs are newer than every
part, nothing is written (exit 0) unless ``--force``.

Example::

    python src/00_source_data_curation/02_prepare_positive_annotation.py --total-parts 4
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from chexpercept.curation import merge_candidate_parts
from chexpercept.layouts import CurationLayout, stage_output_dir
from utils.cli import add_aliased_arg, add_common_args, add_config_arg, run_main, start_logging

logger = logging.getLogger("02_prepare_positive_annotation")

DEFAULT_BASE_OUT = CurationLayout(stage_output_dir("00")).candidate_root


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, None)
    add_aliased_arg(
        parser, "base_out", default=None,
        help=f"The rosalia_pred folder (default: rosalia_pred under the Stage 00 output of "
             f"--config's path.work_dir, else {DEFAULT_BASE_OUT}).")
    add_aliased_arg(parser, "total_parts", type=int, default=4,
                    help="Number of parts to merge (default: 4, as the release).")
    parser.add_argument(
        "--force", action="store_true",
        help="Merge even if the unsharded outputs are newer than the parts (default: off).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Merge the part files (or explain why nothing was written)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.total_parts < 1:
        parser.error(f"--total-parts must be >= 1, got {args.total_parts}")
    start_logging(args, name="02_prepare_positive_annotation")
    outcome = merge_candidate_parts(args.base_out, config_path=args.config,
                                    total_parts=args.total_parts, force=args.force)
    logger.info("%s", outcome.line())
    return 0


def run() -> int:
    """Run the console command ``chexpercept-positive-sheet`` (:func:`main` under ``run_main``)."""
    return run_main(main)
