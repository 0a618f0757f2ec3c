"""Stage 00.01: candidate lesion masks for the sampled positives, with review plots and sheets.

The release's script name and flags. The code is :mod:`chexpercept_cli.candidate_masks`, also
installed as the console command ``chexpercept-candidate-masks``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.candidate_masks import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
