"""Stage 02.02: validate a benchmark bundle (ours or the released one) and print its stats.

The release's script name and flags. The code is :mod:`chexpercept_cli.validate_bundle`, also
installed as the console command ``chexpercept-validate``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.validate_bundle import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
