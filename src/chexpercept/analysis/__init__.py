"""Stage 04: score Stage 03 ``all_results.json`` files into tables, plots and a report.

One scoring path: each ``all_results.json`` is read once, validated and scored into its
:class:`CaseTable` (:mod:`~chexpercept.analysis.case_table`), and everything else derives
from that table: the release's per-model and all-models CSVs
(:mod:`~chexpercept.analysis.release_tables`), the cell means with bootstrap intervals
(:mod:`~chexpercept.analysis.bootstrap`), the new tables (:mod:`~chexpercept.analysis.extended`),
the plots, ``report.md`` (:mod:`~chexpercept.analysis.markdown`), the paired run
comparisons (:mod:`~chexpercept.analysis.compare`) and the case viewer
(:mod:`~chexpercept.analysis.viewer`, docs/viewer.md). The chance rows are a table of the same
layout built from ``chexpercept.json`` (:mod:`~chexpercept.analysis.chance`). What each value
means and which file holds it: docs/metrics.md; where it departs from the original release:
docs/differences.md D41-D44.

This module is the one place the public names are re-exported from.
"""

from chexpercept.analysis.bootstrap import CellStats, cell_stats, strata_weights
from chexpercept.analysis.case_table import (
    METRICS,
    CaseTable,
    case_table,
    read_case_table,
    split_unfinished,
)
from chexpercept.analysis.chance import chance_table, load_chance_or_none, question_chance
from chexpercept.analysis.compare import (
    COMPARE_COLUMNS,
    format_comparison,
    paired_comparison,
)
from chexpercept.analysis.extended import (
    EXTENDED_CSVS,
    RunAnalysis,
    analyse_chance,
    analyse_run_file,
    write_extended_csvs,
)
from chexpercept.analysis.markdown import render_report, write_report
from chexpercept.analysis.plots import EXTRA_PLOT_NAMES, write_plots
from chexpercept.analysis.release_tables import (
    RunMetrics,
    format_cell,
    format_summary_table,
    run_metrics,
    write_all_models_csvs,
    write_model_csvs,
)
from chexpercept.analysis.runs import ORACLE_SETTINGS, RunRef, discover_runs, run_from_dir
from chexpercept.analysis.viewer import ViewerRun, write_viewer

__all__ = [
    "COMPARE_COLUMNS",
    "EXTENDED_CSVS",
    "EXTRA_PLOT_NAMES",
    "METRICS",
    "ORACLE_SETTINGS",
    "CaseTable",
    "CellStats",
    "RunAnalysis",
    "RunMetrics",
    "RunRef",
    "ViewerRun",
    "analyse_chance",
    "analyse_run_file",
    "case_table",
    "cell_stats",
    "chance_table",
    "discover_runs",
    "format_cell",
    "format_comparison",
    "format_summary_table",
    "load_chance_or_none",
    "paired_comparison",
    "question_chance",
    "read_case_table",
    "render_report",
    "run_from_dir",
    "run_metrics",
    "split_unfinished",
    "strata_weights",
    "write_all_models_csvs",
    "write_extended_csvs",
    "write_model_csvs",
    "write_plots",
    "write_report",
    "write_viewer",
]
