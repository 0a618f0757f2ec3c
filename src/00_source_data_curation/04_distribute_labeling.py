"""Stage 00.04: split the labeling sheets over annotators, or merge their answers back.

The release's script name and flags. The code is :mod:`chexpercept_cli.distribute_labeling`, also
installed as the console command ``chexpercept-distribute-labeling``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.distribute_labeling import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
