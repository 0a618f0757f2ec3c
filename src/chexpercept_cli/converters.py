"""The flags and the ending the harness-log converters share.

The converters are ``02_import_inspect_log.py`` and ``03_import_lmms_samples.py``
(docs/integrations.md). Each adds its input flags; this module adds the rest and turns the run
summary into the exit code, so both read and end alike.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence

from chexpercept.evaluation.session import UNFINISHED_EXIT, RunSummary
from chexpercept.layouts import stage_output_dir
from utils.cli import add_common_args, setup_logging


def converter_parser(doc: str, add_input: Callable[[argparse.ArgumentParser], None], *,
                     bundle_default: str) -> argparse.ArgumentParser:
    """A converter's parser: its own flags, then the shared ones.

    The shared flags are ``--output-path``, ``--benchmark-dir``, ``--overwrite`` and the common
    flags (``utils.cli.add_common_args``).

    Args:
        doc: The converter module's docstring (its first paragraph is the description).
        add_input: Adds the converter's own flags (the log or samples file, ...).
        bundle_default: What ``--benchmark-dir`` defaults to, in words, for its help.
    """
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input(parser)
    parser.add_argument("--output-path", "--output_path", dest="output_path",
                        default=str(stage_output_dir("03")),
                        help="Root of run folders, as 00_eval.py's (default: %(default)s).")
    parser.add_argument("--benchmark-dir", "--benchmark_dir", dest="benchmark_dir",
                        default=None, help=f"The bundle the run read (default: {bundle_default}).")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace an earlier conversion in the same run folder (default: "
                             "off; a folder written from another file is refused).")
    add_common_args(parser)
    return parser


def run_converter(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                  convert: Callable[[argparse.Namespace], RunSummary],
                  logger: logging.Logger) -> int:
    """Parse, set up logging, convert, log the summary; the exit code.

    Returns:
        0, or ``UNFINISHED_EXIT`` (3, as ``00_eval.py``) when a case is unfinished.
    """
    args = parser.parse_args(argv)
    setup_logging(args.log_level, None, progress=not args.no_progress)
    summary = convert(args)
    logger.info("%s", summary.line())
    message = summary.unfinished_message()
    if message:
        logger.warning("%s", message)
        return UNFINISHED_EXIT
    return 0
