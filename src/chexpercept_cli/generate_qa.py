"""Stage 02.00: generate the QA items and their images for every accepted case.

Reads Stage 01 ``deformation_results.json`` and ``deformed_masks/``, the Stage 00 positive and
negative labeling sheets, the anatomy masks (default distractors) and the CXRs. Writes, under
``--output-dir`` (default ``src/02_qa_generation/outputs`` or ``<path.work_dir>/02_qa_generation``):

- ``qa_results/qa_results.json`` (release schema, docs/benchmark_format.md, "JSON fields");
- ``qa_results/qa_labeling.csv`` (review sheet) and ``qa_results/qa_visualizations/`` (the review
  figure each row names; ``--no-review-figures`` skips them);
- ``qa_results/summary.json`` (counts, and every case that could not be built, with reasons);
- ``qa_results/items/<key_id>.json`` (per-case results; a re-run resumes from them);
- ``chexpercept/<key_id>/...`` (images, docs/benchmark_format.md, "Image bundle"; options named
  ``option_<i>.png``);
- ``run_meta.json`` and ``logs/``.

Differences from the release: the revision-free split is seeded (not the first N rows);
revision-free cases omit the three ``contour_revision_qa_*`` questions and the mask
combinations (never rendered or asked; optional in the schema); revision option images are
``option_<i>.png`` (no answer in the name); a case that cannot be built completely (missing
mask, 0 positive zones, ...) is left out and listed with its reason in ``summary.json``;
``--with-sequential-qa`` is refused (exit 2); the ``<key_id>_<qa_type>_qa.png`` review figures
named in ``qa_labeling.csv`` are drawn (the release named figures it never drew).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from chexpercept.config_schema import load_chexpercept_config
from chexpercept.layouts import default_config_path
from chexpercept.qa import DEFAULT_NUM_WORKERS, generate_qa_from_config
from utils.cli import (
    add_aliased_arg,
    add_allow_failures_arg,
    add_common_args,
    add_config_arg,
    failures_exit_code,
    log_dir_hook,
    progress_hook,
    run_main,
)

logger = logging.getLogger("02_generate_qa")

def build_parser() -> argparse.ArgumentParser:
    """The CLI (release flags plus ``--chexmask-dir`` / ``--cxas-dir``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, default_config_path())
    parser.add_argument("--deformation-results-json", type=Path, default=None,
                        help="Stage 01 results (default: <stage 01 outputs>/deformation_results/"
                             "deformation_results.json).")
    parser.add_argument("--positive-labeling-sheet", type=Path, default=None,
                        help="Positive sheet (default: <stage 00 outputs>/rosalia_pred/"
                             "labeling_sheet.csv).")
    parser.add_argument("--negative-labeling-sheet", type=Path, default=None,
                        help="Negative sheet (default: <stage 00 outputs>/negative/"
                             "labeling_sheet.csv).")
    parser.add_argument("--positive-annotation-csv", type=Path, default=None,
                        help="Replaces the positive sheet for selecting accepted cases (column "
                             "'optimal' or 'optimal?'); dicom ids still come from the sheet "
                             "(default: none).")
    parser.add_argument("--negative-annotation-csv", type=Path, default=None,
                        help="The same for negatives (default: none).")
    parser.add_argument("--deformed-mask-dir", type=Path, default=None,
                        help="Root of <key_id>/<stem>.png masks (default: <stage 01 outputs>/"
                             "deformed_masks).")
    parser.add_argument("--chexmask-dir", type=Path, default=None,
                        help="CheXmask-U masks <dicom>/{right,left}_lung.png (default: "
                             "path.chexmask_path, else <stage 01 outputs>/chexmasku_pred).")
    parser.add_argument("--cxas-dir", type=Path, default=None,
                        help="CXAS masks <dicom>/{right,left} lung.png (default: "
                             "path.cxas_mask_path, else <stage 01 outputs>/cxas_pred).")
    parser.add_argument("--output-dir", type=Path, default=None,
                        help="Stage 02 output folder (default: path.work_dir/02_qa_generation, "
                             "else src/02_qa_generation/outputs).")
    add_aliased_arg(parser, "with_sequential_qa", action="store_true",
                    help="Release flag for revision_sequential_qa; NOT supported here (the "
                         "benchmark does not use it); passing it exits with code 2 "
                         "(default: off).")
    parser.add_argument("--no-review-figures", action="store_true",
                        help="Do not draw the review figures that qa_labeling.csv names "
                             "(qa_results/qa_visualizations/<plot_name>; default: drawn).")
    add_allow_failures_arg(parser)
    add_common_args(parser, workers=DEFAULT_NUM_WORKERS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, load the config, run Stage 02 and report where the outputs went."""
    args = build_parser().parse_args(argv)
    if args.with_sequential_qa:
        print("error: --with-sequential-qa is not supported: the sequential QA "
              "(revision_sequential_qa) is broken in the release (docs/differences.md D30) and "
              "unused by the benchmark; run without it", file=sys.stderr)
        return 2
    cfg = load_chexpercept_config(args.config)
    report = generate_qa_from_config(
        cfg, deformation_results_json=args.deformation_results_json,
        positive_labeling_sheet=args.positive_labeling_sheet,
        negative_labeling_sheet=args.negative_labeling_sheet,
        positive_annotation_csv=args.positive_annotation_csv,
        negative_annotation_csv=args.negative_annotation_csv,
        deformed_mask_dir=args.deformed_mask_dir, chexmask_dir=args.chexmask_dir,
        cxas_dir=args.cxas_dir, output_dir=args.output_dir, num_workers=args.num_workers,
        review_figures=not args.no_review_figures, progress=progress_hook("cases"),
        on_log_dir=log_dir_hook(args, "00_generate_qa"))
    for line in report.lines():
        logger.info("%s", line)
    failed, total, what = report.failure_counts()
    return failures_exit_code(failed, total, what=what, summary=report.layout.summary_json,
                              allow=args.allow_failures)


def run() -> int:
    """Run the console command ``chexpercept-generate-qa`` (:func:`main` under ``run_main``)."""
    return run_main(main)
