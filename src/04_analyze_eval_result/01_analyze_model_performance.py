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
  ``plot_lesion_heatmap.png``, ``plot_e2e_funnel.png``, ``report.md``, ``run_meta.json`` and
  a log file;
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
import sys
from collections.abc import Sequence
from pathlib import Path

from chexpercept import io
from chexpercept.analysis import (
    ORACLE_SETTINGS,
    analyse_chance,
    analyse_run_file,
    discover_runs,
    format_summary_table,
    load_chance_or_none,
    render_report,
    write_all_models_csvs,
    write_extended_csvs,
    write_model_csvs,
    write_plots,
    write_report,
)
from chexpercept.schema import load_chexpercept_config
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

DEFAULT_OUTPUT_DIR = io.repo_root() / io.STAGE_DIRS["04"]
DEFAULT_BENCHMARK_DIR = io.repo_root() / "data" / "chexpercept"
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
             f"given, else {io.stage_output_dir('03')}).")
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
        default=str(DEFAULT_BENCHMARK_DIR),
        help="Benchmark folder holding chexpercept.json, read for the chance rows' option "
             "counts; if it is missing the chance rows are NA (default: %(default)s).")
    parser.add_argument(
        "--bootstrap", type=non_negative_int, default=DEFAULT_BOOTSTRAP,
        help="Bootstrap resamples of cases for the 95%% intervals; 0 writes no intervals "
             "(default: %(default)s).")
    add_common_args(parser, seed=True)
    return parser


def _results_dir(args: argparse.Namespace) -> Path:
    if args.results_dir:
        return Path(args.results_dir)
    if args.config:
        cfg = load_chexpercept_config(args.config)
        if cfg.eval_vlm_on_chexpercept.output_path:
            return Path(cfg.eval_vlm_on_chexpercept.output_path)
        return io.stage_output_dir("03", cfg.path.work_dir)
    return io.stage_output_dir("03")


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
    all_models = not selected
    setting = args.oracle_setting
    out_dir = io.all_models_dir(args.output_dir, setting)
    setup_logging(args.log_level, out_dir if all_models else None,
                  name="01_analyze_model_performance", progress=not args.no_progress)
    results_dir = _results_dir(args)

    seed = _seed(args)
    runs = discover_runs(results_dir, setting, provider=args.provider, model=args.model)
    logger.info("analysing %d run(s) with oracle_%s in %s (bootstrap %d, seed %d)", len(runs),
                setting, results_dir, args.bootstrap, seed)
    benchmark = load_chance_or_none(args.benchmark_dir)  # question probabilities only
    analyses = []
    written: list[Path] = []
    key_pool: dict[str, str] = {}  # runs share their key_id strings
    for run in progress(runs, total=len(runs), desc="runs"):
        # each file is read once; only the per-case matrix is kept
        analysis = analyse_run_file(run, n_boot=args.bootstrap, seed=seed, limit=args.limit,
                                    key_pool=key_pool)
        written.extend(write_model_csvs(analysis.metrics, run.run_dir))
        logger.info("%s: %d case(s) (%s) -> %s", run.name, analysis.table.n_cases,
                    ", ".join(f"{p} {n}" for p, n in analysis.metrics.n_cases.items()),
                    run.run_dir)
        if benchmark is not None and args.limit is None and analysis.table.n_cases < len(benchmark):
            logger.warning("%s has results for %d of the benchmark's %d cases; the other %d are "
                           "not in any table (unfinished run? re-run Stage 03 to resume it)",
                           run.name, analysis.table.n_cases, len(benchmark),
                           len(benchmark) - analysis.table.n_cases)
        analyses.append(analysis)
    all_metrics = [a.metrics for a in analyses]

    if all_models:
        chance = analyse_chance(benchmark, analyses)
        written.extend(write_all_models_csvs(all_metrics, out_dir))
        written.extend(write_extended_csvs(analyses, chance, out_dir))
        plots = write_plots(all_metrics, out_dir, setting, analyses=analyses, chance=chance)
        written.extend(plots)
        note = (f"option counts from {args.benchmark_dir}/chexpercept.json" if benchmark
                is not None else f"NA: no valid chexpercept.json in {args.benchmark_dir}")
        written.append(write_report(out_dir, render_report(
            analyses, chance, oracle_setting=setting, n_boot=args.bootstrap, seed=seed,
            benchmark_note=note, plots=plots)))
        written.append(io.write_run_meta(
            out_dir, stage="04",
            config={"results_dir": str(results_dir), "oracle_setting": setting,
                    "limit": args.limit, "config": args.config,
                    "benchmark_dir": str(args.benchmark_dir), "bootstrap": args.bootstrap},
            seeds={"bootstrap": seed}, repo_root=io.repo_root(),
            extra={"runs": [str(r.all_results) for r in runs]}))
    else:
        for analysis in analyses:
            chance = analyse_chance(benchmark, [analysis])
            written.extend(write_extended_csvs([analysis], chance, analysis.run.run_dir))

    print(format_summary_table(all_metrics, setting))
    print("\nOutputs:")
    for path in written:
        print(f"  {path}")
    n_cases = sum(sum(m.n_cases.values()) for m in all_metrics)
    n_missing = sum(m.n_missing for m in all_metrics)
    logger.info("done: %d run(s), %d case(s), %d missing stage result(s) counted wrong, 0 "
                "failed; outputs in %s", len(all_metrics), n_cases, n_missing,
                out_dir if all_models else ", ".join(str(r.run_dir) for r in runs))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
