"""Stage 03: merge the parts of a sharded evaluation run into one ``all_results.json``.

The release's script name and flags. The code is :mod:`chexpercept_cli.merge_parts`, also
installed as the console command ``chexpercept-merge-parts``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.merge_parts import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
