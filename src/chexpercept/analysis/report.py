"""Stage 04: write the per-model and all-models CSVs and the stdout summary table.

CSV names come from ``chexpercept.io`` (``MODEL_*_CSV`` next to each ``all_results.json``,
``ALL_*_CSV`` in ``io.all_models_dir``); columns and row layout from ``chexpercept.schema``
(original_release_spec.md section 6). Values are written with :data:`FLOAT_FORMAT` and an
empty bucket as an empty cell (defect 31), so re-runs give byte-identical CSVs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chexpercept import io
from chexpercept.analysis.metrics import RunMetrics
from chexpercept.schema import ATTRIBUTE_DETAIL_COLUMNS, REVISION_DETAIL_COLUMNS, SUMMARY_COLUMNS

#: Fixed number format of every CSV value (fractions in [0, 1]; depth in [0, 4]).
FLOAT_FORMAT = "%.6f"


def format_cell(value: Any) -> Any:
    """CSV text of one cell: floats with :data:`FLOAT_FORMAT`, NaN/None as None (empty cell)."""
    if value is None:
        return None
    if isinstance(value, float):
        return None if math.isnan(value) else FLOAT_FORMAT % value
    return value


def _formatted(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{k: format_cell(v) for k, v in row.items()} for row in rows]


def write_model_csvs(metrics: RunMetrics, run_dir: str | Path) -> list[Path]:
    """Write the three per-model CSVs into the run's ``oracle_<setting>/`` folder.

    Args:
        metrics: The run's metrics.
        run_dir: ``<results-dir>/<run>/oracle_<setting>/``.

    Returns:
        Paths written (summary, contour revision detail, attribute detail).
    """
    run_dir = Path(run_dir)
    out = [
        (run_dir / io.MODEL_SUMMARY_CSV, metrics.summary, SUMMARY_COLUMNS),
        (run_dir / io.MODEL_REVISION_CSV, metrics.revision_detail, REVISION_DETAIL_COLUMNS),
        (run_dir / io.MODEL_ATTRIBUTE_CSV, metrics.attribute_detail, ATTRIBUTE_DETAIL_COLUMNS),
    ]
    for path, rows, columns in out:
        io.write_csv_atomic(path, _formatted(rows), columns)
    return [p for p, _, _ in out]


def write_all_models_csvs(all_metrics: Sequence[RunMetrics], out_dir: str | Path) -> list[Path]:
    """Write the three all-models CSVs (rows of every run, in run order) into ``out_dir``.

    Args:
        all_metrics: Metrics of every run, in discovery (sorted folder) order.
        out_dir: ``io.all_models_dir(output_dir, oracle_setting)``.

    Returns:
        Paths written (summary, contour revision detail, attribute detail).
    """
    out_dir = Path(out_dir)
    out = [
        (out_dir / io.ALL_SUMMARY_CSV, [r for m in all_metrics for r in m.summary],
         SUMMARY_COLUMNS),
        (out_dir / io.ALL_REVISION_CSV, [r for m in all_metrics for r in m.revision_detail],
         REVISION_DETAIL_COLUMNS),
        (out_dir / io.ALL_ATTRIBUTE_CSV, [r for m in all_metrics for r in m.attribute_detail],
         ATTRIBUTE_DETAIL_COLUMNS),
    ]
    for path, rows, columns in out:
        io.write_csv_atomic(path, _formatted(rows), columns)
    return [p for p, _, _ in out]


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100.0 * value:.1f}"


def format_summary_table(all_metrics: Sequence[RunMetrics], oracle_setting: str) -> str:
    """A plain-text table of every run's summary rows (for stdout).

    Columns: path, model, setting, S1-S4 accuracies in percent (1 decimal, "n/a" for an empty
    bucket), mean depth (2 decimals) and the number of cases of the path.

    Args:
        all_metrics: Metrics of the runs to show.
        oracle_setting: The Stage 03 oracle setting the runs were made with (for the title).

    Returns:
        The table text, without a trailing newline.
    """
    header = ["path", "model", "setting", "S1 %", "S2 %", "S3 %", "S4 %", "depth", "cases"]
    body = []
    for metrics in all_metrics:
        for row in metrics.summary:
            depth = row["depth"]
            body.append([row["path"], row["model"], row["setting"],
                         *(_pct(row[f"acc(stage{k})"]) for k in range(1, 5)),
                         "n/a" if math.isnan(depth) else f"{depth:.2f}",
                         str(metrics.n_cases.get(row["path"], 0))])
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    right = set(range(3, len(header)))

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    rule = "-" * len(line(header))
    title = (f"Stage accuracy per path (Stage 03 oracle setting: {oracle_setting}; "
             f"end_to_end = correct prefix, oracle_passed = per-stage)")
    return "\n".join([title, rule, line(header), rule, *(line(r) for r in body), rule])
