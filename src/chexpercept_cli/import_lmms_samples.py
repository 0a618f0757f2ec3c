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

from chexpercept.integrations.lmms_eval_samples import convert_lmms_samples
from chexpercept_cli.converters import converter_parser, run_converter
from utils.cli import run_main

logger = logging.getLogger("03_import_lmms_samples")


def _add_input(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", required=True,
                        help="The lmms-eval samples file of one chexpercept_* task (.jsonl, "
                             "written with --log_samples; required).")
    parser.add_argument("--model", required=True,
                        help="The model's name for the run folder lmms_<model> and pricing "
                             "(the samples file does not record it; required).")


def build_parser() -> argparse.ArgumentParser:
    """The converter's argument parser."""
    return converter_parser(__doc__, _add_input, bundle_default="the one recorded in the "
                            "samples, the run's $CHEXPERCEPT_BENCHMARK_DIR")


def main(argv: Sequence[str] | None = None) -> int:
    """Convert the samples; returns the exit code (3 when a case is unfinished)."""
    return run_converter(build_parser(), argv, lambda a: convert_lmms_samples(
        a.samples, a.output_path, model=a.model, benchmark_dir=a.benchmark_dir,
        overwrite=a.overwrite), logger)


def run() -> int:
    """Run the console command ``chexpercept-import-lmms`` (:func:`main` under ``run_main``)."""
    return run_main(main)
