"""Stage 03: write the run folder of an inspect_ai eval log of the ``chexpercept`` task.

Reads the log that ``inspect eval src/chexpercept/integrations/inspect_task.py ...`` wrote
(``.eval`` or ``.json``; the replies of every sample) and the benchmark bundle it ran on;
writes ``<output-path>/inspect_<model>/oracle_<setting>/`` with ``run_manifest.json``,
``records.jsonl``, ``faults.jsonl`` and ``all_results.json`` (release schema) through Stage 03's
own runner and run store, so ``01_analyze_model_performance.py`` and the viewer read it as any
run (docs/integrations.md, "inspect_ai"). A sample that failed in inspect is written as
``unfinished`` (exit code 3, as ``00_eval.py``).

Example:
    python src/03_eval_vlm_on_chexpercept/02_import_inspect_log.py \
        --log outputs/inspect_logs/2026-12-03T10-00-00_chexpercept_XXXX.eval \
        --output-path src/03_eval_vlm_on_chexpercept/outputs
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from chexpercept.evaluation.session import UNFINISHED_EXIT
from chexpercept.integrations.inspect_log import convert_inspect_log
from chexpercept.layouts import stage_output_dir
from utils.cli import add_common_args, run_main, setup_logging

logger = logging.getLogger("03_import_inspect_log")


def build_parser() -> argparse.ArgumentParser:
    """The converter's argument parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", required=True,
                        help="The inspect eval log of the chexpercept task (.eval or .json; "
                             "required).")
    parser.add_argument("--output-path", "--output_path", dest="output_path",
                        default=str(stage_output_dir("03")),
                        help="Root of run folders, as 00_eval.py's (default: %(default)s).")
    parser.add_argument("--benchmark-dir", "--benchmark_dir", dest="benchmark_dir",
                        default=None,
                        help="The bundle the log ran on (default: the log's benchmark_dir "
                             "task argument).")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace an earlier conversion in the same run folder (default: "
                             "off; a folder written from another log is refused).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Convert the log; returns the exit code (3 when a case is unfinished)."""
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, None, progress=not args.no_progress)
    summary = convert_inspect_log(args.log, args.output_path,
                                  benchmark_dir=args.benchmark_dir, overwrite=args.overwrite)
    logger.info("%s", summary.line())
    message = summary.unfinished_message()
    if message:
        logger.warning("%s", message)
        return UNFINISHED_EXIT
    return 0


def run() -> int:
    """Run the console command ``chexpercept-import-inspect`` (:func:`main` under ``run_main``)."""
    return run_main(main)
