"""Stage 02.01: sample the benchmark cases and export the released layout.

The release's script name and flags. The code is :mod:`chexpercept_cli.export_benchmark`, also
installed as the console command ``chexpercept-export``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.export_benchmark import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
