"""Stage 01.01: deform the approved candidate masks into suboptimal masks with distractors.

The release's script name and flags. The code is :mod:`chexpercept_cli.deform_masks`, also
installed as the console command ``chexpercept-deform-masks``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.deform_masks import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
