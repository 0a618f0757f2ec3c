"""Stage 04: write the case viewer of one or more Stage 03 runs (a static HTML folder).

The release's script name and flags. The code is :mod:`chexpercept_cli.view_cases`, also
installed as the console command ``chexpercept-view``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.view_cases import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
