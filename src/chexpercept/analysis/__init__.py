"""Stage 04: score Stage 03 ``all_results.json`` files and write the release's CSVs and plots.

Reads nothing but ``all_results.json`` (validated with ``schema.parse_all_results``); writes the
per-model CSVs next to each file and the all-models CSVs and plots in
``io.all_models_dir(output_dir, oracle_setting)`` (original_release_spec.md section 6, with
defects 12, 13, 21 and 31 fixed).
"""

from chexpercept.analysis.metrics import (
    CaseScore,
    RunMetrics,
    expected_stages,
    score_case,
    summarize,
)
from chexpercept.analysis.plots import write_plots
from chexpercept.analysis.report import (
    format_summary_table,
    write_all_models_csvs,
    write_model_csvs,
)
from chexpercept.analysis.runs import ORACLE_SETTINGS, RunRef, discover_runs, load_run, score_run

__all__ = [
    "ORACLE_SETTINGS",
    "CaseScore",
    "RunMetrics",
    "RunRef",
    "discover_runs",
    "expected_stages",
    "format_summary_table",
    "load_run",
    "score_case",
    "score_run",
    "summarize",
    "write_all_models_csvs",
    "write_model_csvs",
    "write_plots",
]
