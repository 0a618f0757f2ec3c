"""Stage 03: write the run folder of an lmms-eval samples file of a ``chexpercept_*`` task.

The code is :mod:`chexpercept_cli.import_lmms_samples`, also installed as the console command
``chexpercept-import-lmms``; ``--help`` lists the flags (docs/integrations.md, "lmms-eval").
"""

import sys

from chexpercept_cli.import_lmms_samples import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
