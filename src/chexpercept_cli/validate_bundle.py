"""Stage 02.02: validate a benchmark bundle (ours or the released one) and print its stats.

Reads ``<benchmark-dir>/chexpercept.json``, the images under ``<benchmark-dir>/chexpercept/`` and,
when present, ``<benchmark-dir>/sampling_summary.json``; writes nothing. Runs the shared validator
(``chexpercept.bundle``, the same checks as the export and Stage 03's ``--validate-only``):
schema, images present / readable / the CXR's size, option counts equal to the listed options
and the rendered images, answer indices in range and consistent, point options inside the image
frame, no answer-revealing file names (an error for our bundles, a warning for the released
one), path counts; images the loader converts before a model sees them (16-bit, palette,
alpha, CMYK, EXIF orientation) are warnings, one per file with the reason (docs/images.md,
"Image loading"). Prints the stats table (cases, CXRs and QA items per lesion, path and stage).
Exit 0 when the bundle is valid (warnings are logged), 2 listing every problem otherwise.
No config is read: the bundle is self-contained.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from chexpercept.bundle import format_stats_table
from chexpercept.layouts import DEFAULT_BENCHMARK_DIR
from chexpercept.qa import NAME_RULES, validate_benchmark
from utils.cli import add_aliased_arg, add_common_args, run_main, start_logging

logger = logging.getLogger("02_validate_bundle")


def build_parser() -> argparse.ArgumentParser:
    """The CLI (new script; the release had no validator)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_aliased_arg(parser, "benchmark_dir", type=Path, default=None,
                    help=f"Folder with chexpercept.json and chexpercept/ (default: "
                         f"<repo>/{DEFAULT_BENCHMARK_DIR}).")
    parser.add_argument("--names", choices=tuple(NAME_RULES), default="auto",
                        help="Answer-revealing file names: auto = error for bundles written by "
                             "this code, warning for the released one; strict = always an "
                             "error; release = always a warning (default: auto; choices: "
                             "%(choices)s).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, validate the bundle, print the stats table and report the result."""
    args = build_parser().parse_args(argv)
    start_logging(args)
    result = validate_benchmark(args.benchmark_dir, names=args.names)
    print(format_stats_table(result.stats))
    logger.info("%s", result.line())
    return 0


def run() -> int:
    """Run the console command ``chexpercept-validate`` (:func:`main` under ``run_main``)."""
    return run_main(main)
