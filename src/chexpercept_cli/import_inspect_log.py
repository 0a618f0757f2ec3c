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

from chexpercept.integrations.inspect_log import convert_inspect_log
from chexpercept_cli.converters import converter_parser, run_converter
from utils.cli import run_main

logger = logging.getLogger("03_import_inspect_log")


def _add_input(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log", required=True,
                        help="The inspect eval log of the chexpercept task (.eval or .json; "
                             "required).")


def build_parser() -> argparse.ArgumentParser:
    """The converter's argument parser."""
    return converter_parser(__doc__, _add_input,
                            bundle_default="the log's benchmark_dir task argument")


def main(argv: Sequence[str] | None = None) -> int:
    """Convert the log; returns the exit code (3 when a case is unfinished)."""
    return run_converter(build_parser(), argv, lambda a: convert_inspect_log(
        a.log, a.output_path, benchmark_dir=a.benchmark_dir, overwrite=a.overwrite), logger)


def run() -> int:
    """Run the console command ``chexpercept-import-inspect`` (:func:`main` under ``run_main``)."""
    return run_main(main)
