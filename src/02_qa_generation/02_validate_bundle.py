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
import sys
from collections.abc import Sequence
from pathlib import Path

from chexpercept.bundle import format_stats_table, stats_rows, validate_benchmark_dir
from chexpercept.io import repo_root
from utils.cli import add_common_args, run_main, setup_logging

logger = logging.getLogger("02_validate_bundle")

DEFAULT_BENCHMARK_DIR = "data/chexpercept"
#: ``--names``: ``auto`` detects our bundles (marker / ``option_<i>.png``); ``strict`` makes
#: answer-revealing names errors; ``release`` makes them warnings.
NAME_RULES = {"auto": None, "strict": True, "release": False}


def build_parser() -> argparse.ArgumentParser:
    """The CLI (new script; the release had no validator)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark-dir", "--benchmark_dir", dest="benchmark_dir", type=Path,
                        default=None,
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
    benchmark_dir = args.benchmark_dir or repo_root() / DEFAULT_BENCHMARK_DIR
    setup_logging(args.log_level, None, progress=not args.no_progress)
    check, items = validate_benchmark_dir(benchmark_dir, strict_names=NAME_RULES[args.names])
    check.log_warnings()
    print(format_stats_table(stats_rows(items)))
    logger.info("bundle valid: %d case(s), %d image(s) checked (%d need conversion), %d "
                "warning(s); names rule: %s -> %s", len(check.cases), check.images,
                len(check.conversions), len(check.warnings),
                "strict" if check.strict_names else "release", benchmark_dir)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
