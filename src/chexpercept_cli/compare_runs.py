"""Stage 04: paired comparison of two Stage 03 runs on the same benchmark cases.

Reads ``<run-a>/all_results.json`` and ``<run-b>/all_results.json`` (``oracle_<setting>/``
folders of two runs, e.g. two models, or one model under two oracle settings) and writes
``<output-dir>/paired_comparisons/<A>_vs_<B>.csv`` (``<A>`` = ``<label>.oracle_<setting>``,
the label being the run folder name plus each identity field of its manifest that differs from
the defaults, e.g. ``+order=shuffled``, so two protocols of one model get two names
(docs/metrics.md, "Run labels"); ``<output-dir>`` defaults to the folder that holds both runs,
i.e. next to the inputs):
per stage (end-to-end and oracle-passed), sub-question and depth, for all cases, each path
and each lesion, the accuracies of A and B, the difference B - A with a 95% interval (Tango's
score interval for accuracies, a paired bootstrap stratified by lesion x path for depth), the
discordant counts, the score test (McNemar without continuity correction, which the interval
inverts) and its Holm-adjusted p-value over the comparison (docs/metrics.md, "Paired
comparison"). Runs whose key_id sets differ are refused, with the key_ids that differ. The
pooled accuracy rows are printed, then the primary endpoint (mean depth over all cases).

Example::

    python src/04_analyze_eval_result/02_compare_runs.py --run-a RESULTS/openai_gpt-5.4/oracle_none
        --run-b RESULTS/gemini_gemini-3.1-pro/oracle_none
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from chexpercept.analysis.api import compare_runs
from chexpercept.config_schema import load_chexpercept_config
from utils.cli import add_common_args, add_config_arg, non_negative_int, run_main, setup_logging

logger = logging.getLogger("04_analyze_eval_result")

DEFAULT_BOOTSTRAP = 1000


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, None)
    parser.add_argument("--run-a", "--run_a", dest="run_a", required=True,
                        help="Run A: a Stage 03 oracle_<setting>/ folder (or its "
                             "all_results.json). Required; no default.")
    parser.add_argument("--run-b", "--run_b", dest="run_b", required=True,
                        help="Run B, compared with A as B - A. Required; no default.")
    parser.add_argument("--output-dir", "--output_dir", dest="output_dir", default=None,
                        help="Folder receiving paired_comparisons/<A>_vs_<B>.csv (default: "
                             "the deepest folder holding both run folders, next to the "
                             "inputs; the source tree is never written by default).")
    parser.add_argument("--bootstrap", type=non_negative_int, default=DEFAULT_BOOTSTRAP,
                        help="Paired bootstrap resamples of the depth cells; 0 writes no "
                             "intervals at all (default: %(default)s).")
    add_common_args(parser, seed=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Compare the two runs, write the CSV, print the pooled rows."""
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, None, name="02_compare_runs", progress=not args.no_progress)
    seed = args.seed if args.seed is not None else (
        load_chexpercept_config(args.config).seed if args.config else 0)
    result = compare_runs(args.run_a, args.run_b, output_dir=args.output_dir,
                          n_boot=args.bootstrap, seed=seed)
    print(result.text)
    print(f"\nOutput:\n  {result.csv_path}")
    return 0


def run() -> int:
    """Run the console command ``chexpercept-compare`` (:func:`main` under ``run_main``)."""
    return run_main(main)
