"""Stage 00.04: split the labeling sheets over annotators, or merge their answers back.

Distribute (default): rows of the positive and negative sheets are dealt round-robin per lesion
to annotators A, B, ...; each gets ``distribute/annotator_<X>/{positive,negative}/
labeling_sheet.csv`` and the review images ``<lesion>/<key_id>.png`` (positive: the review
plot; negative: the CXR).

Merge (``--merge``, docs/differences.md D10): the annotators' ``optimal?`` values are read back
strictly and written into the two main sheets; conflicts, invalid values and rows that no
annotator (or a wrong one) has are errors, listed together, and nothing is written.

Example::

    python src/00_source_data_curation/04_distribute_labeling.py --num-annotators 6
    python src/00_source_data_curation/04_distribute_labeling.py --num-annotators 6 --merge
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from chexpercept.config_schema import load_chexpercept_config
from chexpercept.curation import distribute_labeling
from utils.cli import (
    add_aliased_arg,
    add_common_args,
    add_config_arg,
    add_output_dir_arg,
    run_main,
    start_logging,
)

logger = logging.getLogger("04_distribute_labeling")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, None)
    add_aliased_arg(
        parser, "positive_csv", default=None,
        help="Positive sheet (default: rosalia_pred/labeling_sheet.csv of the Stage 00 output).")
    add_aliased_arg(
        parser, "negative_csv", default=None,
        help="Negative sheet (default: negative/labeling_sheet.csv of the Stage 00 output).")
    add_aliased_arg(
        parser, "num_annotators", type=int, default=None,
        help="Annotators A, B, ... (default: source_data_curation.num_annotators of --config, "
             "else 6).")
    parser.add_argument(
        "--merge", action="store_true",
        help="Merge the annotator sheets back into the main sheets (default: off, distribute).")
    add_aliased_arg(
        parser, "allow_unreviewed", action="store_true",
        help="With --merge: accept blank optimal? values (kept blank, i.e. not accepted) instead "
             "of reporting them as not reviewed (default: off, every row must be reviewed).")
    parser.add_argument(
        "--force", action="store_true",
        help="Distribute even if annotator sheets already hold review values, erasing them "
             "(default: off, refuse).")
    add_output_dir_arg(
        parser, "Stage 00 output folder holding distribute/ (default: from --config's "
                "path.work_dir, else src/00_source_data_curation/outputs).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Distribute the sheets, or merge the annotators' answers back."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config) if args.config else None
    start_logging(args, name="04_distribute_labeling")
    report = distribute_labeling(
        cfg, output_dir=args.output_dir, positive_csv=args.positive_csv,
        negative_csv=args.negative_csv, num_annotators=args.num_annotators, merge=args.merge,
        allow_unreviewed=args.allow_unreviewed, force=args.force)
    for line in report.lines():
        logger.info("%s", line)
    return 0


def run() -> int:
    """Run ``chexpercept-distribute-labeling``: :func:`main` under ``run_main``."""
    return run_main(main)
