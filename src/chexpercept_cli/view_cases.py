r"""Stage 04: write the case viewer of one or more Stage 03 runs (a static HTML folder).

Reads ``<run-dir>/all_results.json``, ``records.jsonl`` and ``run_manifest.json`` of each
``--run-dir`` (an ``oracle_<setting>/`` folder) and writes ``<output-dir>/viewer/``:
``index.html`` (open it from the file system; no server, nothing from the network), the page's
script and style, ``data/*.js`` (case index and lazily loaded dialogues) and, with
``--copy-images``, small JPEG copies of the images. Without it the viewer links the bundle's
images. Two runs are shown side by side. What the pages show: docs/viewer.md. Stage 04's
``01_analyze_model_performance.py`` writes the same viewer into ``all_models_oracle_<setting>/``.

Example::

    python src/04_analyze_eval_result/03_view_cases.py \\
        --run-dir RESULTS/openai_gpt-5.4/oracle_implicit \\
        --run-dir RESULTS/gemini_gemini-3.1-pro/oracle_implicit
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from chexpercept.analysis import run_from_dir
from chexpercept.analysis.viewer import ViewerRun, write_viewer
from chexpercept.evaluation import SYSTEM_PROMPT
from utils.cli import add_common_args, positive_int, run_main, setup_logging

logger = logging.getLogger("04_analyze_eval_result")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", "--run_dir", dest="run_dirs", action="append",
                        required=True,
                        help="A Stage 03 oracle_<setting>/ folder; repeat for more runs (the "
                             "first two are shown side by side). Required; no default.")
    parser.add_argument("--output-dir", "--output_dir", dest="output_dir", default=None,
                        help="Folder receiving viewer/ (default: the first --run-dir).")
    parser.add_argument("--copy-images", "--copy_images", dest="copy_images", type=positive_int,
                        default=None, metavar="MAX_SIDE",
                        help="Put JPEG copies of the images, longer side at most MAX_SIDE "
                             "pixels, into viewer/images/ for sharing (default: none, link the "
                             "bundle's images).")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Write the viewer and print where it is."""
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, None, name="03_view_cases", progress=not args.no_progress)
    runs = [ViewerRun.from_ref(run_from_dir(d)) for d in args.run_dirs]
    out_dir = Path(args.output_dir) if args.output_dir else runs[0].run_dir
    page = write_viewer(runs, out_dir, system_prompt=SYSTEM_PROMPT,
                        image_max_side=args.copy_images)
    print(f"Case viewer (open in a browser): {page.resolve().as_uri()}")
    logger.info("done: %d run(s), 0 failed; output %s", len(runs), page)
    return 0


def run() -> int:
    """Run the console command ``chexpercept-view`` (:func:`main` under ``run_main``)."""
    return run_main(main)
