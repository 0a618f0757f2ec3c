"""Stage 03: write the run folder of an inspect_ai eval log of the ``chexpercept`` task.

The code is :mod:`chexpercept_cli.import_inspect_log`, also installed as the console command
``chexpercept-import-inspect``; ``--help`` lists the flags (docs/integrations.md, "inspect_ai").
"""

import sys

from chexpercept_cli.import_inspect_log import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
