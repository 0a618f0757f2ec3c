"""Stage 00.00: sample MIMIC-ILS cases per lesion and prepare their CXRs.

The release's script name and flags. The code is :mod:`chexpercept_cli.sample_cases`, also
installed as the console command ``chexpercept-sample-cases``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.sample_cases import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
