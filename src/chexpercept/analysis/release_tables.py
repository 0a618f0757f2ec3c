"""Stage 04: the release's three tables of a run, from its case table, as CSVs and as text.

Per run, :func:`run_metrics` reduces a :class:`~chexpercept.analysis.case_table.CaseTable` to
the release's rows (docs/metrics.md, "Stage accuracy", "End-to-end and oracle-passed",
"Depth", "Sub-questions"): ``model_performance_summary.csv`` (``schema.SUMMARY_COLUMNS``) and
the two detail CSVs (``schema.REVISION_DETAIL_COLUMNS``, ``schema.ATTRIBUTE_DETAIL_COLUMNS``),
written next to each ``all_results.json`` (``layouts.MODEL_*_CSV``) and, every run's rows
together, in ``layouts.all_models_dir`` (``layouts.ALL_*_CSV``); docs/metrics.md, "Output
files". Values are written with :data:`FLOAT_FORMAT` and an empty bucket as an empty cell
(docs/differences.md D43), so re-runs give byte-identical CSVs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chexpercept.analysis.case_table import METRIC_INDEX, REVISION_KEYS, CaseTable
from chexpercept.errors import SchemaError
from chexpercept.files import write_csv_atomic
from chexpercept.layouts import (
    ALL_ATTRIBUTE_CSV,
    ALL_REVISION_CSV,
    ALL_SUMMARY_CSV,
    MODEL_ATTRIBUTE_CSV,
    MODEL_REVISION_CSV,
    MODEL_SUMMARY_CSV,
)
from chexpercept.lesions import QA_PATHS
from chexpercept.schema import (
    ATTRIBUTE_DETAIL_COLUMNS,
    ATTRIBUTE_KEYS,
    REVISION_DETAIL_COLUMNS,
    SUMMARY_COLUMNS,
)

#: The two rows per path: gated prefix accuracy and raw per-stage accuracy
#: (docs/metrics.md, "End-to-end and oracle-passed").
SETTINGS: tuple[str, str] = ("end_to_end", "oracle_passed")
#: ``path`` cell of the two detail CSVs.
REVISION_DETAIL_PATH = "revision_required"
ATTRIBUTE_DETAIL_PATH = "revision_required+revision_free"


@dataclass(frozen=True)
class RunMetrics:
    """The release's tables of one evaluation run (one model folder, one oracle setting).

    Rows are dicts keyed by the schema's CSV columns; accuracy values are floats in [0, 1]
    (NaN for an empty bucket), ``depth`` is a mean count of stages in [0, 4].

    Attributes:
        model: The run folder name ``<provider>_<model>[_no_thinking]`` (unique across
            providers, docs/differences.md D43).
        summary: 6 rows, paths {revision_required, revision_free, lesion_free} x settings
            {end_to_end, oracle_passed}; columns ``schema.SUMMARY_COLUMNS``.
        revision_detail: 1 row; columns ``schema.REVISION_DETAIL_COLUMNS``.
        attribute_detail: 1 row; columns ``schema.ATTRIBUTE_DETAIL_COLUMNS``.
        n_cases: Cases per path.
        n_missing: Expected stage results that were empty/lacked ``correct`` (counted wrong,
            docs/differences.md D41).
    """

    model: str
    summary: list[dict[str, Any]]
    revision_detail: list[dict[str, Any]]
    attribute_detail: list[dict[str, Any]]
    n_cases: dict[str, int] = field(default_factory=dict)
    n_missing: int = 0


def _bucket_mean(values: np.ndarray) -> float:
    """Mean of a 1-D bucket of 0/1 flags or depths; NaN when empty (docs/differences.md D43).

    The sum is an exact integer, so the quotient does not depend on the summation order.
    """
    return float(values.sum()) / len(values) if len(values) else math.nan


def run_metrics(table: CaseTable, model: str) -> RunMetrics:
    """The release's three tables of a run, from its :class:`~case_table.CaseTable`.

    ``acc(stageK)`` is the mean over the path's cases that are asked stage K; the
    ``end_to_end`` row uses the gated flags, the ``oracle_passed`` row the stages' own flags
    (so stage 1 is the same in both); ``depth`` is the path's mean depth in both rows. The
    detail rows are the sub-questions' means over the cases asked their stage.

    Args:
        table: The run's table (0/1 values; :func:`case_table.read_case_table`).
        model: Value of the ``model`` column (the run folder name).

    Returns:
        The run's :class:`RunMetrics`.

    Raises:
        SchemaError: If a row's keys differ from the schema's CSV columns (an internal
            inconsistency, never the input's fault).
    """
    values, app = table.values, table.applicable
    summary: list[dict[str, Any]] = []
    for p, path in enumerate(QA_PATHS):
        in_path = table.path == p
        depth = _bucket_mean(values[in_path, METRIC_INDEX["depth"]])
        for setting in SETTINGS:
            kind = "e2e" if setting == "end_to_end" else "oracle"
            row: dict[str, Any] = {"path": path, "model": model, "setting": setting}
            for stage in range(1, 5):
                m = METRIC_INDEX[f"{kind}:stage{stage}"]
                row[f"acc(stage{stage})"] = _bucket_mean(values[in_path & app[:, m], m])
            row["depth"] = depth
            summary.append(row)
    details = []
    for label, keys in ((REVISION_DETAIL_PATH, REVISION_KEYS),
                        (ATTRIBUTE_DETAIL_PATH, ATTRIBUTE_KEYS)):
        row = {"path": label, "model": model}
        for key in keys:
            m = METRIC_INDEX[f"sub:{key}"]
            row[f"acc({key})"] = _bucket_mean(values[app[:, m], m])
        details.append(row)
    for row, columns in ((summary[0], SUMMARY_COLUMNS), (details[0], REVISION_DETAIL_COLUMNS),
                         (details[1], ATTRIBUTE_DETAIL_COLUMNS)):
        if tuple(row) != tuple(columns):  # pragma: no cover - guards the schema constants
            raise SchemaError(f"internal: row keys {tuple(row)} != columns {tuple(columns)}")
    return RunMetrics(model=model, summary=summary, revision_detail=[details[0]],
                      attribute_detail=[details[1]],
                      n_cases={p: int((table.path == i).sum()) for i, p in enumerate(QA_PATHS)},
                      n_missing=int(table.missing.sum()))


#: Fixed number format of every CSV value (fractions in [0, 1]; depth in [0, 4]).
FLOAT_FORMAT = "%.6f"
#: Decimals of :data:`FLOAT_FORMAT`.
FLOAT_DECIMALS = 6
#: Significant digits of a non-zero value too small for its fixed decimals
#: (:func:`format_number`; docs/metrics.md, "Chance": chance values of late stages are tiny).
SMALL_VALUE_DIGITS = 3


def format_number(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` decimals, or 3 significant digits where that hides it.

    A non-zero value smaller in magnitude than ``10 * 10**-decimals`` (one that would show as
    0, or with a single significant digit) is written with :data:`SMALL_VALUE_DIGITS`
    significant digits (``%g``, e.g. ``0.0977``, ``1.53e-08``), so a non-zero chance value never
    reads "0" (docs/metrics.md, "Chance"). Zero stays ``0.0...``.

    Args:
        value: A finite number (the caller handles NaN).
        decimals: Fixed decimals (1 for percent, 2 for depth, :data:`FLOAT_DECIMALS` in CSVs).

    Returns:
        The text.
    """
    if value != 0 and abs(value) < 10.0 ** (1 - decimals):
        return f"{value:.{SMALL_VALUE_DIGITS}g}"
    return f"{value:.{decimals}f}"


def format_cell(value: Any) -> Any:
    """CSV text of one cell: floats with :data:`FLOAT_FORMAT`, NaN/None as None (empty cell).

    A non-zero float below ``1e-5`` gets 3 significant digits instead (:func:`format_number`),
    so no non-zero value is written as ``0.000000``.

    Args:
        value: A cell value (float, int, str or None).

    Returns:
        The formatted text for floats, None for NaN/None, anything else unchanged.
    """
    if value is None:
        return None
    if isinstance(value, float):
        return None if math.isnan(value) else format_number(value, FLOAT_DECIMALS)
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
        (run_dir / MODEL_SUMMARY_CSV, metrics.summary, SUMMARY_COLUMNS),
        (run_dir / MODEL_REVISION_CSV, metrics.revision_detail, REVISION_DETAIL_COLUMNS),
        (run_dir / MODEL_ATTRIBUTE_CSV, metrics.attribute_detail, ATTRIBUTE_DETAIL_COLUMNS),
    ]
    for path, rows, columns in out:
        write_csv_atomic(path, _formatted(rows), columns)
    return [p for p, _, _ in out]


def write_all_models_csvs(all_metrics: Sequence[RunMetrics], out_dir: str | Path) -> list[Path]:
    """Write the three all-models CSVs (rows of every run, in run order) into ``out_dir``.

    Args:
        all_metrics: Metrics of every run, in discovery (sorted folder) order.
        out_dir: ``layouts.all_models_dir(output_dir, oracle_setting)``.

    Returns:
        Paths written (summary, contour revision detail, attribute detail).
    """
    out_dir = Path(out_dir)
    out = [
        (out_dir / ALL_SUMMARY_CSV, [r for m in all_metrics for r in m.summary],
         SUMMARY_COLUMNS),
        (out_dir / ALL_REVISION_CSV, [r for m in all_metrics for r in m.revision_detail],
         REVISION_DETAIL_COLUMNS),
        (out_dir / ALL_ATTRIBUTE_CSV, [r for m in all_metrics for r in m.attribute_detail],
         ATTRIBUTE_DETAIL_COLUMNS),
    ]
    for path, rows, columns in out:
        write_csv_atomic(path, _formatted(rows), columns)
    return [p for p, _, _ in out]


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else format_number(100.0 * value, 1)


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
                         "n/a" if math.isnan(depth) else format_number(depth, 2),
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
