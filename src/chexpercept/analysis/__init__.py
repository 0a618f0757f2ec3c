"""Stage 04: score Stage 03 ``all_results.json`` files into tables, plots and a report.

Reads ``all_results.json`` (each once; regular files are checked and scored field by field
by :mod:`chexpercept.analysis._columnar`, any irregular one goes through
``schema.parse_all_results`` for the error report) and, for the chance baseline,
``chexpercept.json``; writes the release's per-model CSVs next to each file and the
all-models CSVs and plots in ``io.all_models_dir(output_dir, oracle_setting)``
(original_release_spec.md section 6, with defects 12, 13, 21 and 31 fixed), plus the tables
of :mod:`chexpercept.analysis.extended` (bootstrap CIs, per lesion, sub-questions, statuses,
funnel, chance rows), two more plots and ``report.md``; and paired run comparisons
(:mod:`chexpercept.analysis.compare`).
"""

from chexpercept.analysis.compare import COMPARE_COLUMNS, mcnemar, paired_comparison
from chexpercept.analysis.extended import (
    EXTENDED_CSVS,
    RunAnalysis,
    analyse_chance,
    analyse_run,
    analyse_run_file,
    load_benchmark_or_none,
    load_chance_or_none,
    write_extended_csvs,
)
from chexpercept.analysis.markdown import render_report, write_report
from chexpercept.analysis.metrics import (
    CaseScore,
    RunMetrics,
    expected_stages,
    score_case,
    summarize,
)
from chexpercept.analysis.plots import EXTRA_PLOT_NAMES, write_plots
from chexpercept.analysis.report import (
    format_summary_table,
    write_all_models_csvs,
    write_model_csvs,
)
from chexpercept.analysis.runs import (
    ORACLE_SETTINGS,
    RunRef,
    discover_runs,
    load_run,
    run_from_dir,
    score_run,
)
from chexpercept.analysis.tables import CaseTable, CellStats, case_table, cell_stats, chance_table

__all__ = [
    "COMPARE_COLUMNS",
    "EXTENDED_CSVS",
    "EXTRA_PLOT_NAMES",
    "ORACLE_SETTINGS",
    "CaseScore",
    "CaseTable",
    "CellStats",
    "RunAnalysis",
    "RunMetrics",
    "RunRef",
    "analyse_chance",
    "analyse_run",
    "analyse_run_file",
    "case_table",
    "cell_stats",
    "chance_table",
    "discover_runs",
    "expected_stages",
    "format_summary_table",
    "load_benchmark_or_none",
    "load_chance_or_none",
    "load_run",
    "mcnemar",
    "paired_comparison",
    "render_report",
    "run_from_dir",
    "score_case",
    "score_run",
    "summarize",
    "write_all_models_csvs",
    "write_extended_csvs",
    "write_model_csvs",
    "write_plots",
    "write_report",
]
