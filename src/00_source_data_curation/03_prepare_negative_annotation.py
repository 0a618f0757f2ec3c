"""Stage 00.03: copy the sampled negative CXRs and write the negative labeling sheet.

The release's script name and flags. The code is :mod:`chexpercept_cli.negative_sheet`, also
installed as the console command ``chexpercept-negative-sheet``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.negative_sheet import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
