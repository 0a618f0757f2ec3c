"""Stage 02.01: sample the benchmark cases and export the released layout.

Reads ``qa_results/qa_results.json`` and the image bundle ``chexpercept/<key_id>/`` written by
``00_generate_qa.py``. Writes ``<benchmark-dir>/chexpercept.json`` (same schema as
qa_results.json; lesion order, then path, then key_id), ``<benchmark-dir>/chexpercept/<key_id>/``
(hard links, or copies), ``<benchmark-dir>/sampling_summary.json`` and
``<benchmark-dir>/stats.csv`` (cases, CXRs and QA items per lesion, path and stage; also printed)
and, when Stage 00 recorded them, ``<benchmark-dir>/data_sources.json`` (licence and citation of
each source; mixing a redistributable with a restricted source is refused unless
``--allow-mixed-licences``).
Cases per lesion and path come from ``qa_generation.sampling`` (paper: 100 each, at most one case
per CXR with ``distinct_cxrs``); a shortfall takes all and is logged. The written bundle is then
checked by the shared validator (``chexpercept.bundle``; exit 2 on a problem).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from chexpercept.bundle import format_stats_table
from chexpercept.config_schema import load_chexpercept_config
from chexpercept.layouts import DEFAULT_BENCHMARK_DIR, default_config_path
from chexpercept.qa import LINK_MODES, export_benchmark_from_config
from utils.cli import add_common_args, add_config_arg, run_main, start_logging

logger = logging.getLogger("02_export_benchmark")


def build_parser() -> argparse.ArgumentParser:
    """The CLI (new script; the release copied qa_results.json by hand)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, default_config_path())
    parser.add_argument("--qa-results-json", type=Path, default=None,
                        help="Stage 02 results (default: <stage 02 outputs>/qa_results/"
                             "qa_results.json).")
    parser.add_argument("--bundle-dir", type=Path, default=None,
                        help="Stage 02 image bundle with <key_id>/ folders (default: "
                             "<stage 02 outputs>/chexpercept).")
    parser.add_argument("--benchmark-dir", type=Path, default=None,
                        help=f"Output root (default: <repo>/{DEFAULT_BENCHMARK_DIR}).")
    parser.add_argument("--link", choices=LINK_MODES, default="hardlink",
                        help="How case files are placed: hardlink (falls back to a copy where "
                             "linking fails) or copy (default: hardlink; choices: %(choices)s).")
    parser.add_argument("--allow-mixed-licences", action="store_true",
                        help="Export even when a redistributable source (nih-cxr14) meets a "
                             "restricted one (mimic-ils, vindr-cxr); the bundle is then "
                             "restricted as a whole (default: refuse, naming each source's "
                             "licence category).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, load the config, sample and export, and report where the outputs went."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config)
    start_logging(args)
    report = export_benchmark_from_config(
        cfg, qa_results_json=args.qa_results_json, bundle_dir=args.bundle_dir,
        benchmark_dir=args.benchmark_dir, link=args.link,
        allow_mixed_licences=args.allow_mixed_licences)
    print(format_stats_table(report.stats))
    for line in report.lines():
        logger.info("%s", line)
    return 0


def run() -> int:
    """Run the console command ``chexpercept-export`` (:func:`main` under ``run_main``)."""
    return run_main(main)
