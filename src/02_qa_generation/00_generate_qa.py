"""Stage 02.00: generate the QA items and their images for every accepted case.

The release's script name and flags. The code is :mod:`chexpercept_cli.generate_qa`, also
installed as the console command ``chexpercept-generate-qa``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.generate_qa import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
