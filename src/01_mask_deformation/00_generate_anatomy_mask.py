"""Stage 01.00: anatomy masks (CheXmask-U lungs/heart and CXAS classes) for every CXR of a sheet.

The release's script name and flags. The code is :mod:`chexpercept_cli.anatomy_masks`, also
installed as the console command ``chexpercept-anatomy-masks``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.anatomy_masks import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
