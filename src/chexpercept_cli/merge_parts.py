"""Stage 03: merge the parts of a sharded evaluation run into one ``all_results.json``.

Reads ``<run-dir>/part_<i>_of_<n>/{run_manifest.json,records.jsonl,all_results.json}`` for
every part written by ``00_eval.py --part i --total-parts n`` and ``<benchmark-dir>/
chexpercept.json``; writes ``<run-dir>/all_results.json`` (benchmark order, release schema) and
``<run-dir>/run_manifest.json`` (the parts' shared settings plus each part's environment), each
atomically. It refuses, naming what is wrong, when a part is missing, was run with other
settings, or has a case without a record for every turn of its path.

Example:
    python src/03_eval_vlm_on_chexpercept/01_merge_parts.py \
        --run-dir src/03_eval_vlm_on_chexpercept/outputs/opensource_medgemma1.5/oracle_implicit \
        --total-parts 4
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from chexpercept.evaluation import load_bundle, select_key_ids
from chexpercept.evaluation.sharding import merge_parts, write_merged
from chexpercept.layouts import default_benchmark_dir
from utils.cli import add_common_args, positive_int, run_main, setup_logging

logger = logging.getLogger("03_merge_parts")



def build_parser() -> argparse.ArgumentParser:
    """The merge script's argument parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", "--run_dir", dest="run_dir", required=True,
                        help="The run folder holding part_<i>_of_<n>/ "
                             "(<output-path>/<provider>_<model>/oracle_<setting>/; required).")
    parser.add_argument("--total-parts", "--total_parts", dest="total_parts",
                        type=positive_int, required=True,
                        help="Number of parts the run was split into (required).")
    parser.add_argument("--benchmark-dir", "--benchmark_dir", dest="benchmark_dir",
                        default=str(default_benchmark_dir()),
                        help="The benchmark the parts ran on (default: %(default)s).")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="The --limit the parts ran with: only these cases must be "
                             "complete (default: every case).")
    parser.add_argument("--per_path_limit", "--per-path-limit", dest="per_path_limit",
                        type=positive_int, default=None,
                        help="The --per_path_limit the parts ran with (default: none).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Merge the parts; returns the exit code."""
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, None, progress=not args.no_progress)
    bundle = load_bundle(args.benchmark_dir)
    key_ids = select_key_ids(bundle, limit=args.limit, per_path_limit=args.per_path_limit)
    merged = merge_parts(bundle, args.run_dir, args.total_parts, key_ids,
                         selection={"limit": args.limit, "per_path_limit": args.per_path_limit})
    path = write_merged(args.run_dir, merged)
    logger.info("merged %d part(s): %d case(s) (per part: %s); output: %s", args.total_parts,
                len(merged.all_results), ", ".join(map(str, merged.cases_per_part)), path)
    return 0


def run() -> int:
    """Run the console command ``chexpercept-merge-parts`` (:func:`main` under ``run_main``)."""
    return run_main(main)
