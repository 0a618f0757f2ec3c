"""Stage 04: analyse Stage 03 results into per-path accuracy tables, detail tables and plots.

The release's script name and flags. The code is :mod:`chexpercept_cli.analyze`, also
installed as the console command ``chexpercept-analyze``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.analyze import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
