"""Generate the synthetic sample-test dataset (MIMIC-shaped, deterministic, git-ignored).

Writes ``data/sample_test/generated/`` (or ``--out``): MIMIC-CXR-JPG tree + metadata/split CSVs,
reports, MIMIC-ILS JSON + lesion masks, CheXmask-U/CXAS-layout anatomy masks and
``answer_key.json``. Re-running with the same seed and recipe does nothing; otherwise the folder
is rebuilt atomically. The recipe is documented in ``data/sample_test/README.md``.
Needs pydicom and pydicom-data for the one real radiograph: ``pip install -e ".[fixtures]"``.

Example::

    python scripts/sample_test/make_fixtures.py --out data/sample_test/generated --seed 0
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from chexpercept.synth import default_fixture_dir, make_fixtures
from utils.cli import add_common_args, run_main, setup_logging

logger = logging.getLogger("make_fixtures")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(default_fixture_dir()),
                        help=f"Output folder (default: {default_fixture_dir()}).")
    parser.add_argument("--seed", type=int, default=0, help="Generator seed (default: 0).")
    parser.add_argument("--force", action="store_true",
                        help="Rebuild even if an up-to-date fixture exists (default: off).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Build (or confirm) the fixture folder."""
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, None, name="make_fixtures", progress=not args.no_progress)
    build = make_fixtures(args.out, args.seed, force=args.force)
    state = "built" if build.built else "already up to date"
    logger.info("fixture %s: %s", state, build.paths.root)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
