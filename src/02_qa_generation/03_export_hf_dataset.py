"""Stage 02.03: write a benchmark bundle as a Hugging Face dataset (parquet shards + dataset card).

A new script (the release had none). The code is :mod:`chexpercept_cli.export_hf_dataset`, also
installed as the console command ``chexpercept-export-hf``; ``--help`` lists the flags.
"""

import sys

from chexpercept_cli.export_hf_dataset import build_parser, main  # noqa: F401 - this script's interface
from utils.cli import run_main

if __name__ == "__main__":
    sys.exit(run_main(main))
