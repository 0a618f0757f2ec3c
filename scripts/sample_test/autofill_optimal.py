"""Fill the ``optimal?`` column of a labeling sheet (sample test / demos).

Writes ``--value`` (default ``y``) into every row's ``optimal?`` column (legacy ``optimal`` if
that is the column present) and rewrites the CSV atomically with its column order unchanged.
The value must be one the pipeline reads strictly (y/yes/1/true, n/no/0/false, or blank).

Example::

    python scripts/sample_test/autofill_optimal.py \
        src/00_source_data_curation/outputs/rosalia_pred/labeling_sheet.csv
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from chexpercept.errors import InputError, SchemaError
from chexpercept.files import read_csv_rows, write_csv_atomic
from chexpercept.schema import OPTIMAL_COLUMN, parse_optimal
from utils.cli import add_common_args, run_main, setup_logging

logger = logging.getLogger("autofill_optimal")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", help="The labeling sheet to fill in place.")
    parser.add_argument("--value", default="y",
                        help="Value written into every row (default: y).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Fill the column and rewrite the sheet."""
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, None, name="autofill_optimal", progress=not args.no_progress)
    try:
        parse_optimal(args.value)
    except ValueError:
        raise InputError(f"--value {args.value!r} is not a valid optimal? value (use y/yes/1/"
                         f"true, n/no/0/false, or an empty string)") from None
    path = Path(args.csv)
    if not path.is_file():
        raise InputError(f"file not found: {path}")
    with open(path, newline="", encoding="utf-8") as fh:
        columns = next(csv.reader(fh), [])
    column = "optimal" if "optimal" in columns else OPTIMAL_COLUMN
    if column not in columns:
        raise SchemaError(f"{path}: no '{OPTIMAL_COLUMN}' (or 'optimal') column; found {columns}")
    rows = read_csv_rows(path)
    for row in rows:
        row[column] = args.value
    write_csv_atomic(path, rows, columns)
    logger.info("done: set %s=%r in %d row(s) of %s", column, args.value, len(rows), path)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
