"""Stage 03: write the run folder of an lmms-eval samples file of a ``chexpercept_*`` task.

Reads the samples file that ``lmms-eval --tasks chexpercept_<setting> --log_samples ...`` wrote
(``<output_path>/<model>/<date>_samples_chexpercept_<setting>.jsonl``: the replies of every case)
and the benchmark bundle it ran on; writes ``<output-path>/lmms_<model>/oracle_<setting>/`` with
``run_manifest.json``, ``records.jsonl``, ``faults.jsonl`` and ``all_results.json`` (release
schema) through Stage 03's own runner and run store, so ``01_analyze_model_performance.py`` and
the viewer read it as any run (docs/integrations.md, "lmms-eval"). A case stopped by an empty
reply is written as ``unfinished`` (exit code 3, as ``00_eval.py``).

Example:
    python src/03_eval_vlm_on_chexpercept/03_import_lmms_samples.py \
        --samples outputs/lmms_eval/<model>/<date>_samples_chexpercept_implicit.jsonl \
        --model Qwen--Qwen2.5-VL-7B-Instruct --output-path src/03_eval_vlm_on_chexpercept/outputs
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from chexpercept.evaluation.session import UNFINISHED_EXIT
from chexpercept.integrations.lmms_eval_samples import convert_lmms_samples
from chexpercept.layouts import stage_output_dir
from utils.cli import add_common_args, run_main, setup_logging

logger = logging.getLogger("03_import_lmms_samples")


def build_parser() -> argparse.ArgumentParser:
    """The converter's argument parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", required=True,
                        help="The lmms-eval samples file of one chexpercept_* task (.jsonl, "
                             "written with --log_samples; required).")
    parser.add_argument("--model", required=True,
                        help="The model's name for the run folder lmms_<model> and pricing "
                             "(the samples file does not record it; required).")
    parser.add_argument("--output-path", "--output_path", dest="output_path",
                        default=str(stage_output_dir("03")),
                        help="Root of run folders, as 00_eval.py's (default: %(default)s).")
    parser.add_argument("--benchmark-dir", "--benchmark_dir", dest="benchmark_dir",
                        default=None,
                        help="The bundle the run read (default: the one recorded in the "
                             "samples, the run's $CHEXPERCEPT_BENCHMARK_DIR).")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace an earlier conversion in the same run folder (default: "
                             "off; a folder written from another file is refused).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Convert the samples; returns the exit code (3 when a case is unfinished)."""
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, None, progress=not args.no_progress)
    summary = convert_lmms_samples(args.samples, args.output_path, model=args.model,
                                   benchmark_dir=args.benchmark_dir, overwrite=args.overwrite)
    logger.info("%s", summary.line())
    message = summary.unfinished_message()
    if message:
        logger.warning("%s", message)
        return UNFINISHED_EXIT
    return 0


def run() -> int:
    """Run the console command ``chexpercept-import-lmms`` (:func:`main` under ``run_main``)."""
    return run_main(main)
