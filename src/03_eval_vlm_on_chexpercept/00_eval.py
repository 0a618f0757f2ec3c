"""Stage 03: evaluate a VLM (or a baseline) on the CheXpercept benchmark, one dialogue per case.

The release's script name and flags. The code is :mod:`chexpercept_cli.eval`, also
installed as the console command ``chexpercept-eval``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.eval import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
