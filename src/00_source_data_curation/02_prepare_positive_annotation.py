"""Stage 00.02: merge sharded Stage 00.01 outputs into the positive labeling sheet.

The release's script name and flags. The code is :mod:`chexpercept_cli.positive_sheet`, also
installed as the console command ``chexpercept-positive-sheet``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.positive_sheet import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
