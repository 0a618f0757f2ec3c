"""Stage 02.03: write a benchmark bundle as a Hugging Face dataset (parquet shards + dataset card).

Reads a folder bundle (``<benchmark-dir>/chexpercept.json``, ``chexpercept/<key_id>/`` and,
when present, ``data_sources.json`` and ``sampling_summary.json``); checks it with the shared
validator (``chexpercept.bundle``); writes ``<out>/data/test-<i>-of-<n>.parquet`` (one row per
case, the images embedded), ``<out>/README.md`` (the dataset card: licence and data sources
from ``data_sources.json``, cases per lesion and path; a restricted bundle's card says it must
not be pushed to a public hub) and the two JSON files unchanged. ``datasets.load_dataset(
"parquet", data_dir=<out>)`` reads the result, and ``00_eval.py --benchmark-dir <out>``
evaluates it as the folder bundle (docs/hf_dataset.md). No config is read: the bundle is
self-contained. Needs the ``hf-dataset`` extra (pyarrow, datasets).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from chexpercept.bundle import format_stats_table
from chexpercept.layouts import DEFAULT_BENCHMARK_DIR
from chexpercept.qa.hf_export import DEFAULT_MAX_SHARD_MB, export_hf_dataset
from utils.cli import add_aliased_arg, add_common_args, run_main, start_logging

logger = logging.getLogger("02_export_hf_dataset")


def build_parser() -> argparse.ArgumentParser:
    """The CLI (new script; the release had no dataset export)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_aliased_arg(parser, "benchmark_dir", type=Path, default=None,
                    help=f"Folder bundle with chexpercept.json and chexpercept/ (default: "
                         f"<repo>/{DEFAULT_BENCHMARK_DIR}).")
    parser.add_argument("--out", type=Path, required=True,
                        help="Dataset folder to write (required; new, empty, or an earlier "
                             "export, which is replaced once the new one is complete).")
    parser.add_argument("--max-shard-mb", type=float, default=DEFAULT_MAX_SHARD_MB,
                        help="Upper bound of a parquet shard's embedded image bytes, in MiB "
                             "(default: %(default)s).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, export the dataset, print the stats table and where it went."""
    args = build_parser().parse_args(argv)
    start_logging(args)
    report = export_hf_dataset(args.benchmark_dir, args.out, max_shard_mb=args.max_shard_mb)
    print(format_stats_table(report.stats))
    logger.info("%s", report.line())
    return 0


def run() -> int:
    """Run the console command ``chexpercept-export-hf`` (:func:`main` under ``run_main``)."""
    return run_main(main)
