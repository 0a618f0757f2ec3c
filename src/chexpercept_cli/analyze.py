"""Stage 04: analyse Stage 03 results into per-path accuracy tables, detail tables and plots.

Reads ``<results-dir>/<provider>_<model>[_no_thinking]/oracle_<setting>/all_results.json``
(each once; no model is called) and ``<benchmark-dir>/chexpercept.json`` (option counts for
the chance rows; NA with a warning when absent), and writes:

- next to each ``all_results.json``: ``model_performance_summary.csv``,
  ``model_performance_detail_contour_revision.csv``,
  ``model_performance_detail_attribute_extraction.csv`` (release names, columns and rows);
- all-models mode, in ``<output-dir>/all_models_oracle_<setting>/``: the three
  ``all_models_*.csv`` (release), the new tables ``stage_accuracy_ci.csv``,
  ``lesion_stage_accuracy.csv``, ``subquestion_accuracy.csv``, ``e2e_funnel.csv`` (95%
  bootstrap CIs, number of cases per cell, chance rows) and ``stage_status.csv`` (missing
  stages, answer-status rates), the four release plots (with error bars and chance),
  ``plot_lesion_heatmap.png``, ``plot_e2e_funnel.png``, the case viewer ``viewer/index.html``
  (open it in a browser; docs/viewer.md), ``report.md``, ``run_meta.json`` and a log file;
- single-model mode (``--provider``/``--model``): the new tables for each selected run go
  into its ``oracle_<setting>/`` folder instead (no plots, no report).

The ``model`` column is the run folder name ``<provider>_<model>[_no_thinking]``, so equal aliases
under different providers do not collide. All-models mode (every run) is the default when neither
``--provider`` nor ``--model`` is given; with either, only the matching runs are analysed
(the release ignored both filters: docs/differences.md). The summary table is printed;
what every file holds is in docs/metrics.md, "Output files".

Example::

    python src/04_analyze_eval_result/01_analyze_model_performance.py --oracle_setting none \
        --benchmark-dir data/chexpercept --bootstrap 1000 --seed 0
    python src/04_analyze_eval_result/01_analyze_model_performance.py --provider dummy \
        --model baseline
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from chexpercept.analysis.api import analyze
from chexpercept.config_schema import load_chexpercept_config
from chexpercept.evaluation import SYSTEM_PROMPT
from chexpercept.layouts import (
    ORACLE_SETTINGS,
    STAGE_DIRS,
    all_models_dir,
    default_benchmark_dir,
    repo_root,
    stage_output_dir,
)
from utils.cli import (
    add_common_args,
    add_config_arg,
    non_negative_int,
    positive_int,
    progress,
    run_main,
    setup_logging,
)

logger = logging.getLogger("04_analyze_eval_result")

DEFAULT_OUTPUT_DIR = repo_root() / STAGE_DIRS["04"]
DEFAULT_BOOTSTRAP = 1000


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (release flag spellings, kebab-case aliases)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, None)
    parser.add_argument(
        "--results-dir", "--results_dir", dest="results_dir", default=None,
        help=f"Stage 03 output folder holding <provider>_<model>/oracle_<setting>/ runs "
             f"(default: eval_vlm_on_chexpercept.output_path or path.work_dir of --config if "
             f"given, else {stage_output_dir('03')}).")
    parser.add_argument(
        "--oracle_setting", "--oracle-setting", dest="oracle_setting", default="implicit",
        choices=ORACLE_SETTINGS,
        help="Stage 03 oracle setting of the runs to analyse (default: implicit; choices: "
             "%(choices)s).")
    parser.add_argument(
        "--provider", default=None,
        help="Analyse only runs of this provider, i.e. folders <provider>_* (default: none, "
             "all providers).")
    parser.add_argument(
        "--model", default=None,
        help="Analyse only runs of this model, i.e. folders <provider>_<model>; add "
             "'_no_thinking' for such runs (default: none, all models).")
    parser.add_argument(
        "--all_models", "--all-models", dest="all_models", action="store_true",
        help="Analyse every run and write the all-models CSVs and plots (default: on when "
             "neither --provider nor --model is given; cannot be combined with them).")
    parser.add_argument(
        "--limit", type=positive_int, default=None,
        help="Use only the first N cases of each run, in file order (default: all).")
    parser.add_argument(
        "--output-dir", "--output_dir", dest="output_dir", default=str(DEFAULT_OUTPUT_DIR),
        help=f"Folder that receives all_models_oracle_<setting>/ (default: {DEFAULT_OUTPUT_DIR}).")
    parser.add_argument(
        "--benchmark-dir", "--benchmark_dir", dest="benchmark_dir",
        default=str(default_benchmark_dir()),
        help="Benchmark folder holding chexpercept.json, read for the chance rows' option "
             "counts; if it is missing the chance rows are NA (default: %(default)s).")
    parser.add_argument(
        "--bootstrap", type=non_negative_int, default=DEFAULT_BOOTSTRAP,
        help="Bootstrap resamples of cases for the 95%% intervals; 0 writes no intervals "
             "(default: %(default)s).")
    parser.add_argument(
        "--no-viewer", "--no_viewer", dest="viewer", action="store_false",
        help="Do not write the case viewer viewer/index.html (default: written in all-models "
             "mode).")
    parser.add_argument(
        "--viewer-copy-images", "--viewer_copy_images", dest="viewer_copy_images",
        type=positive_int, default=None, metavar="MAX_SIDE",
        help="Put JPEG copies of the images, longer side at most MAX_SIDE pixels, into the "
             "viewer folder, to share it without the bundle (default: none, the viewer links "
             "the bundle's images).")
    parser.add_argument(
        "--jobs", type=positive_int, default=None, metavar="N",
        help="Worker processes that score the runs (and write their viewer chunks) and draw "
             "the figures, one run or figure each at a time; the outputs are the same for any "
             "N (default: the CPUs this process may use).")
    parser.add_argument(
        "--judged", action="store_true",
        help="For runs made with Stage 03's --judge: score the headline tables in the judged "
             "reading (a reply the judge read counts with the judge's answer) instead of the "
             "strict one (it counts as unparseable, as without a judge); both readings are in "
             "judge_summary.csv and report.md either way (docs/metrics.md, 'Strict and judged "
             "readings') (default: off, strict).")
    parser.add_argument(
        "--allow-other-bundle", "--allow_other_bundle", dest="allow_other_bundle",
        action="store_true",
        help="Accept a --benchmark-dir whose chexpercept.json is not the one a run's "
             "run_manifest.json names (benchmark_json_sha256): that run's correctness is "
             "recomputed against this bundle's answer keys, with a warning in report.md, "
             "run_meta.json and the log (docs/metrics.md, 'Recomputed correctness') "
             "(default: off, such a run is refused).")
    add_common_args(parser, seed=True)
    return parser


def _results_dir(args: argparse.Namespace) -> Path:
    if args.results_dir:
        return Path(args.results_dir)
    if args.config:
        cfg = load_chexpercept_config(args.config)
        if cfg.eval_vlm_on_chexpercept.output_path:
            return Path(cfg.eval_vlm_on_chexpercept.output_path)
        return stage_output_dir("03", cfg.path.work_dir)
    return stage_output_dir("03")


def _seed(args: argparse.Namespace) -> int:
    if args.seed is not None:
        return args.seed
    return load_chexpercept_config(args.config).seed if args.config else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Analyse the selected runs, write the CSVs (and plots), print the summary table."""
    parser = build_parser()
    args = parser.parse_args(argv)
    selected = args.provider is not None or args.model is not None
    if args.all_models and selected:
        parser.error("--all_models cannot be combined with --provider/--model "
                     "(drop it to analyse only the matching runs)")
    setting = args.oracle_setting
    setup_logging(args.log_level, None if selected else all_models_dir(args.output_dir,
                                                                          setting),
                  name="01_analyze_model_performance", progress=not args.no_progress)
    result = analyze(_results_dir(args), setting, output_dir=args.output_dir,
                     benchmark_dir=args.benchmark_dir, provider=args.provider,
                     model=args.model, bootstrap=args.bootstrap, seed=_seed(args),
                     limit=args.limit, meta={"config": args.config}, progress=progress,
                     viewer=args.viewer, system_prompt=SYSTEM_PROMPT,
                     viewer_image_max_side=args.viewer_copy_images, jobs=args.jobs,
                     judged=args.judged, allow_other_bundle=args.allow_other_bundle)
    print(result.summary)
    print("\nOutputs:")
    for path in result.written:
        print(f"  {path}")
    if result.viewer is not None:
        print(f"\nCase viewer (open in a browser): {result.viewer.resolve().as_uri()}")
    return 0


def run() -> int:
    """Run the console command ``chexpercept-analyze`` (:func:`main` under ``run_main``)."""
    return run_main(main)
