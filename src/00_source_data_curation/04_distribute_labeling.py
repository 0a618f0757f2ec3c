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
import sys
from collections.abc import Sequence
from pathlib import Path

from chexpercept import io
from chexpercept.curation.sheets import SheetTask, distribute, merge_annotations
from chexpercept.schema import load_chexpercept_config
from utils.cli import add_common_args, add_config_arg, run_main, setup_logging

logger = logging.getLogger("04_distribute_labeling")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, None)
    parser.add_argument(
        "--positive-csv", "--positive_csv", dest="positive_csv", default=None,
        help="Positive sheet (default: rosalia_pred/labeling_sheet.csv of the Stage 00 output).")
    parser.add_argument(
        "--negative-csv", "--negative_csv", dest="negative_csv", default=None,
        help="Negative sheet (default: negative/labeling_sheet.csv of the Stage 00 output).")
    parser.add_argument(
        "--num-annotators", "--num_annotators", dest="num_annotators", type=int, default=None,
        help="Annotators A, B, ... (default: source_data_curation.num_annotators of --config, "
             "else 6).")
    parser.add_argument(
        "--merge", action="store_true",
        help="Merge the annotator sheets back into the main sheets (default: off, distribute).")
    parser.add_argument(
        "--allow-unreviewed", "--allow_unreviewed", dest="allow_unreviewed",
        action="store_true",
        help="With --merge: accept blank optimal? values (kept blank, i.e. not accepted) instead "
             "of reporting them as not reviewed (default: off, every row must be reviewed).")
    parser.add_argument(
        "--force", action="store_true",
        help="Distribute even if annotator sheets already hold review values, erasing them "
             "(default: off, refuse).")
    parser.add_argument(
        "--output-dir", "--output_dir", dest="output_dir", default=None,
        help="Stage 00 output folder holding distribute/ (default: from --config's "
             "path.work_dir, else src/00_source_data_curation/outputs).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Distribute the sheets, or merge the annotators' answers back."""
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg = load_chexpercept_config(args.config) if args.config else None
    if args.output_dir:
        out = Path(args.output_dir)
    else:
        out = io.stage_output_dir("00", cfg.path.work_dir if cfg else None)
    layout = io.CurationLayout(out)
    n = args.num_annotators if args.num_annotators is not None else (
        cfg.source_data_curation.num_annotators if cfg else 6)
    if n < 1 or n > 26:
        parser.error(f"--num-annotators must be in [1, 26], got {n}")
    setup_logging(args.log_level, None, name="04_distribute_labeling",
                  progress=not args.no_progress)
    tasks = [SheetTask("positive", Path(args.positive_csv or layout.positive_sheet()), "target"),
             SheetTask("negative", Path(args.negative_csv or layout.negative_sheet), "lesion")]
    if args.merge:
        counts = merge_annotations(layout, tasks, n, allow_unreviewed=args.allow_unreviewed)
        for task, c in counts.items():
            logger.info("%s: accepted %d, rejected %d, unreviewed %d", task, c["accepted"],
                        c["rejected"], c["unreviewed"])
        logger.info("done: merged %d annotator(s) into %s and %s", n, tasks[0].path,
                    tasks[1].path)
        return 0
    counts = distribute(layout, tasks, n, overwrite=args.force)
    for task, per in counts.items():
        logger.info("%s: %s", task, ", ".join(f"{a}={k}" for a, k in per.items()))
    logger.info("done: distributed over %d annotator(s) into %s", n, out / "distribute")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
