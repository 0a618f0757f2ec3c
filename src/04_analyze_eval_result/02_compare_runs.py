"""Stage 04: paired comparison of two Stage 03 runs on the same benchmark cases.

The release's script name and flags. The code is :mod:`chexpercept_cli.compare_runs`, also
installed as the console command ``chexpercept-compare``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.compare_runs import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
