"""Stage 04: a run's analysis, and the tables beyond the release (CIs, lesions, statuses, ...).

:func:`analyse_run_file` turns one ``all_results.json`` into a :class:`RunAnalysis`: its case
table (:mod:`~chexpercept.analysis.case_table`), release tables
(:mod:`~chexpercept.analysis.release_tables`) and cell statistics
(:mod:`~chexpercept.analysis.bootstrap`); :func:`analyse_chance` does the same for the
uniform-guess baseline (:mod:`~chexpercept.analysis.chance`).

The new tables (:data:`EXTENDED_CSVS`; docs/metrics.md, "Output files"; docs/differences.md
D44) are written next to the release CSVs (never changing them): in
``all_models_oracle_<setting>/`` in all-models mode, in the run's ``oracle_<setting>/`` folder
in single-model mode. Every table is long format, carries the number of cases behind each
cell (``n_cases``), 95% interval bounds (``ci_low``/``ci_high``; docs/metrics.md,
"Bootstrap") and a ``chance`` row group (uniform guessing, ``model = chance``), except
``stage_status.csv`` (answer statuses and missing stages, not accuracies) and the
option-position tables (``option_position_accuracy.csv``, ``always_k_baselines.csv``: counts
and shares, no intervals; the always-k rows are baselines themselves). Values are
fractions in [0, 1] (depth in stages); an empty cell (no cases) is an empty field.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.analysis.auroc import AUROC_COLUMNS, OptionScores, auroc_rows, option_scores
from chexpercept.analysis.bootstrap import LESION_GROUPS, PATH_GROUPS, CellStats, cell_stats
from chexpercept.analysis.case_table import (
    MAX_DEPTH,
    REVISION_KEYS,
    SUB_KEYS,
    CaseTable,
    results_case_table,
    structural,
)
from chexpercept.analysis.chance import CHANCE, chance_table
from chexpercept.analysis.detection import DETECTION_COLUMNS, detection_rows
from chexpercept.analysis.error_anatomy import (
    CLASS_COLUMNS,
    CONFUSION_COLUMNS,
    ErrorAnatomy,
    confusion_rows,
    error_class_rows,
)
from chexpercept.analysis.judge_report import JUDGE_COLUMNS, JUDGE_CSV, JudgeSummary, judge_rows
from chexpercept.analysis.option_order import BASELINE_COLUMNS, POSITION_COLUMNS, OptionTables
from chexpercept.analysis.release_tables import (
    ATTRIBUTE_DETAIL_PATH,
    SETTINGS,
    RunMetrics,
    format_cell,
    run_metrics,
)
from chexpercept.analysis.runs import RunRef
from chexpercept.analysis.sampling import SAMPLING_COLUMNS
from chexpercept.files import write_csv_atomic
from chexpercept.lesions import QA_PATHS
from chexpercept.run_store import RunStore
from chexpercept.schema import STATUSES, BenchmarkItem

logger = logging.getLogger(__name__)

STAGE_CI_CSV = "stage_accuracy_ci.csv"
LESION_CSV = "lesion_stage_accuracy.csv"
SUBQUESTION_CSV = "subquestion_accuracy.csv"
STATUS_CSV = "stage_status.csv"
FUNNEL_CSV = "e2e_funnel.csv"
DETECTION_CSV = "detection_metrics.csv"
ERROR_CONFUSION_CSV = "error_confusion.csv"
ERROR_CLASSES_CSV = "error_classes.csv"
OPTION_POSITION_CSV = "option_position_accuracy.csv"
ALWAYS_K_CSV = "always_k_baselines.csv"
AUROC_CSV = "auroc.csv"
SAMPLING_CSV = "sampling_variance.csv"
#: The new CSVs, in writing order.
EXTENDED_CSVS: tuple[str, ...] = (STAGE_CI_CSV, LESION_CSV, SUBQUESTION_CSV, FUNNEL_CSV,
                                  STATUS_CSV, DETECTION_CSV, ERROR_CONFUSION_CSV,
                                  ERROR_CLASSES_CSV, OPTION_POSITION_CSV, ALWAYS_K_CSV,
                                  AUROC_CSV, SAMPLING_CSV)

#: Identity columns of every new table (runs identified by provider, model and variant).
ID_COLUMNS: tuple[str, ...] = ("model", "provider", "model_name", "variant")
_CI = ("value", "ci_low", "ci_high", "n_cases")
STAGE_CI_COLUMNS = (*ID_COLUMNS, "path", "setting", "metric", *_CI)
LESION_COLUMNS = (*ID_COLUMNS, "lesion", "path", "setting", "stage", *_CI)
SUBQUESTION_COLUMNS = (*ID_COLUMNS, "lesion", "path", "question", *_CI)
FUNNEL_COLUMNS = (*ID_COLUMNS, "lesion", "path", "after_stages", *_CI)
STATUS_COLUMNS = (*ID_COLUMNS, "stage", "n_cases", "n_missing", "n_questions",
                  *(f"rate({s})" for s in STATUSES))

_SETTING_KIND = {"end_to_end": "e2e", "oracle_passed": "oracle"}


@dataclass(frozen=True)
class RunAnalysis:
    """Everything Stage 04 derives from one run.

    Attributes:
        run: The run (``None`` for the chance baseline).
        metrics: Release tables (:class:`RunMetrics`; ``None`` for chance).
        table: Per-case metric matrix.
        cells: Cell means with bootstrap CIs.
        unfinished: Cases Stage 03 left unfinished (a turn got no answer), key_id -> reason:
            missing, not scored (:func:`case_table.split_unfinished`).
        option_order: Accuracy by the correct option's displayed position and the always-k
            baselines (:func:`option_order.option_tables`; set by the Stage 04 pass,
            ``passes.run_pass``), None for chance or when not computed.
        errors: The run's error anatomy (:func:`error_anatomy.analyse_errors`; set by the
            Stage 04 pass, ``passes.run_pass``), None for chance or when not computed.
        option_scores: P("Yes") of the detection and contour-evaluation answers of a run made
            with ``--option-probs`` (:func:`auroc.option_scores`); None otherwise and for
            chance.
        sampling: Rows of ``sampling_variance.csv`` of a ``--samples K`` run (K > 1;
            :func:`chexpercept.analysis.sampling.analyse_samples`), without the identity
            columns; empty for a one-sample run and for chance.
        judge: Both readings, the judged shares and the audit agreement of a run made with
            ``--judge`` (:class:`~chexpercept.analysis.judge_report.JudgeSummary`; set by the
            Stage 04 pass); None for other runs and for chance.
    """

    run: RunRef | None
    metrics: RunMetrics | None
    table: CaseTable
    cells: CellStats
    unfinished: dict[str, str] = field(default_factory=dict)
    option_order: OptionTables | None = None
    errors: ErrorAnatomy | None = None
    option_scores: OptionScores | None = None
    sampling: tuple[dict[str, Any], ...] = ()
    judge: JudgeSummary | None = None

    @property
    def name(self) -> str:
        """The run's name in report.md and the figures: its label, or ``chance``.

        The label (``RunRef.label``) is the folder name, plus the protocol of a non-default run;
        the CSVs' ``model`` column keeps the folder name (:meth:`ids`).
        """
        return self.run.label if self.run is not None else CHANCE

    def ids(self) -> dict[str, str]:
        """The identity columns of this run's rows (:data:`ID_COLUMNS` -> text)."""
        if self.run is None:
            return {"model": CHANCE, "provider": "", "model_name": "uniform guess",
                    "variant": ""}
        return {"model": self.run.name, "provider": self.run.provider,
                "model_name": self.run.model_name, "variant": self.run.variant}


def warn_incomplete(run: RunRef, table: CaseTable) -> None:
    """One warning listing (the first five of) the cases that lack an expected stage result.

    Args:
        run: The run (its file is named).
        table: Its case table (:attr:`~case_table.CaseTable.missing`).
    """
    incomplete = [k for k, m in zip(table.key_ids, table.missing.any(axis=1).tolist(),
                                    strict=True) if m]
    if incomplete:
        logger.warning("%s: %d case(s) lack an expected stage result (counted wrong, not "
                       "skipped): %s%s", run.all_results, len(incomplete),
                       ", ".join(incomplete[:5]), " ..." if len(incomplete) > 5 else "")


def analyse_run_file(run: RunRef, *, n_boot: int, seed: int, limit: int | None = None,
                     key_pool: dict[str, str] | None = None,
                     results: dict[str, Any] | None = None) -> RunAnalysis:
    """Read one run's ``all_results.json`` (once) and derive everything Stage 04 reports.

    The file becomes the run's case table (:func:`case_table.read_case_table`, which
    validates it); the release tables (:func:`release_tables.run_metrics`) and the cell
    means with bootstrap intervals (:func:`bootstrap.cell_stats`) are computed from it.
    Expected stages with no result are counted wrong (docs/differences.md D41) and listed in
    one warning.

    Args:
        run: The run.
        n_boot: Bootstrap resamples (0: no CIs).
        seed: Bootstrap seed.
        limit: Use only the first ``limit`` finished cases in file order (``--limit``);
            None: all.
        key_pool: Optional dict shared across runs so equal key_ids are stored once.
        results: The run's ``all_results.json`` when the caller parsed it already (its
            unfinished cases are removed from it); None reads the file.

    Returns:
        The run's :class:`RunAnalysis`.

    Raises:
        InputError: If the file is missing.
        SchemaError: On invalid JSON, or naming the file and every key_id whose record
            breaks the schema, cannot be scored or has an unknown status.
    """
    source: str | Path = run.all_results
    if results is None:  # as case_table.read_case_table, keeping the data for option_scores
        store = RunStore(run.run_dir)
        results = store.read_results(validate=False, missing_ok=False)
        source = store.results_path
    table, unfinished = results_case_table(results, source, run.name, limit=limit,
                                           key_pool=key_pool)
    warn_incomplete(run, table)
    return RunAnalysis(run, run_metrics(table, run.name), table,
                       cell_stats(table, n_boot=n_boot, seed=seed), unfinished,
                       option_scores=option_scores(results, table, source))


def analyse_chance(benchmark: Mapping[str, BenchmarkItem | Mapping[str, float]] | None,
                   analyses: Sequence[RunAnalysis]) -> RunAnalysis:
    """The uniform-guess baseline over the union of the runs' cases.

    Args:
        benchmark: Benchmark items, or their question probabilities
            (:func:`chance.load_chance_or_none`); None: every chance value NA.
        analyses: The analysed runs (their cases, first occurrence order).

    Returns:
        The chance :class:`RunAnalysis` (no CIs); cases absent from the benchmark are NA,
        with one warning.

    Raises:
        InputError: If a key_id has no lesion prefix.
    """
    cases: dict[str, str] = {}
    for a in analyses:
        for key_id, path in zip(a.table.key_ids, a.table.path.tolist(), strict=True):
            cases.setdefault(key_id, QA_PATHS[path])
    if benchmark is not None:
        absent = [k for k in cases if k not in benchmark]
        if absent:
            logger.warning("%d evaluated case(s) are not in the benchmark (e.g. %s): their "
                           "chance values are NA", len(absent), absent[0])
    table = chance_table(benchmark, list(cases.items()))
    return RunAnalysis(None, None, table, cell_stats(table))


def _cell(cells: CellStats, lesion: str, path: str, metric: str) -> dict[str, Any]:
    value, low, high, n = cells.get(lesion, path, metric)
    return {"value": value, "ci_low": low, "ci_high": high, "n_cases": n}


def stage_ci_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Companion of ``model_performance_summary.csv``: every release cell with CI and n.

    Args:
        a: A run's (or the chance) analysis.

    Returns:
        Rows keyed by :data:`STAGE_CI_COLUMNS`: path x setting x metric (``acc(stage1..4)``,
        ``depth``), in the release order.
    """
    rows = []
    for path in QA_PATHS:
        for setting in SETTINGS:
            for k in range(1, 6):
                metric = "depth" if k == 5 else f"{_SETTING_KIND[setting]}:stage{k}"
                label = "depth" if k == 5 else f"acc(stage{k})"
                rows.append({**a.ids(), "path": path, "setting": setting, "metric": label,
                             **_cell(a.cells, "all", path, metric)})
    return rows


def lesion_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Accuracy by lesion x path x setting x stage (``all`` pools), plus depth per path.

    Args:
        a: A run's (or the chance) analysis.

    Returns:
        Rows keyed by :data:`LESION_COLUMNS`; cells no benchmark could fill are left out
        (:func:`case_table.structural`).
    """
    rows = []
    for lesion in LESION_GROUPS:
        for path in PATH_GROUPS:
            for setting in SETTINGS:
                for k in range(1, 6):
                    if k == 5 and (path == "all" or setting == "oracle_passed"):
                        continue  # depth: one value per path (identical in both settings)
                    metric = "depth" if k == 5 else f"{_SETTING_KIND[setting]}:stage{k}"
                    if not structural(lesion, path, metric):
                        continue
                    rows.append({**a.ids(), "lesion": lesion, "path": path,
                                 "setting": setting if k < 5 else "end_to_end",
                                 "stage": "depth" if k == 5 else f"acc(stage{k})",
                                 **_cell(a.cells, lesion, path, metric)})
    return rows


def subquestion_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Sub-question accuracy by lesion (oracle view).

    Revision sub-questions on revision-required cases; attribute sub-questions on RR+RF
    pooled (the release detail tables) and on each of the two paths.

    Args:
        a: A run's (or the chance) analysis.

    Returns:
        Rows keyed by :data:`SUBQUESTION_COLUMNS`.
    """
    rows = []
    for lesion in LESION_GROUPS:
        for key in SUB_KEYS:
            paths = (("revision_required", "revision_required"),) if key in REVISION_KEYS else (
                ("all", ATTRIBUTE_DETAIL_PATH), ("revision_required", "revision_required"),
                ("revision_free", "revision_free"))
            for group, label in paths:
                metric = f"sub:{key}"
                if not structural(lesion, group, metric):
                    continue
                rows.append({**a.ids(), "lesion": lesion, "path": label, "question": key,
                             **_cell(a.cells, lesion, group, metric)})
    return rows


def funnel_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """End-to-end funnel: share of a path's cases still correct after K stages.

    ``after_stages = K`` is the share with depth >= K (cardiomegaly's bonus level included),
    K = 1 .. the path's maximum depth; the mean over K sums to the mean depth
    (docs/metrics.md, "Depth").

    Args:
        a: A run's (or the chance) analysis.

    Returns:
        Rows keyed by :data:`FUNNEL_COLUMNS`.
    """
    rows = []
    for lesion in LESION_GROUPS:
        for path in QA_PATHS:
            for k in range(1, MAX_DEPTH[path] + 1):
                rows.append({**a.ids(), "lesion": lesion, "path": path, "after_stages": k,
                             **_cell(a.cells, lesion, path, f"reach:{k}")})
    return rows


def status_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Per stage: cases expected to reach it, missing results, and answer-status rates.

    ``n_missing`` counts expected stage results that were absent (counted wrong,
    docs/differences.md D41). ``rate(<status>)`` is the share of the stage's answered
    questions with that status; NA when the results carry no ``status`` keys (release files).

    Args:
        a: A run's analysis.

    Returns:
        Four rows (stages 1-4) keyed by :data:`STATUS_COLUMNS`.
    """
    t = a.table
    rows = []
    for stage in range(1, 5):
        asked = t.applicable[:, stage - 1]
        counts = t.status[:, stage - 1, :].sum(axis=0)
        n_q = int(counts.sum())
        rates = {f"rate({s})": (float(c) / n_q if t.has_status and n_q else math.nan)
                 for s, c in zip(STATUSES, counts.tolist(), strict=True)}
        rows.append({**a.ids(), "stage": f"stage{stage}", "n_cases": int(asked.sum()),
                     "n_missing": int(t.missing[:, stage - 1].sum()),
                     "n_questions": n_q if t.has_status else None, **rates})
    return rows


def detection_metric_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Rows of ``detection_metrics.csv`` (:func:`detection.detection_rows`) with the run ids."""
    return [{**a.ids(), **r} for r in detection_rows(a.table, chance=a.run is None)]


def error_confusion_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Rows of ``error_confusion.csv`` (:func:`error_anatomy.confusion_rows`) with the run ids."""
    return [] if a.errors is None else [{**a.ids(), **r} for r in confusion_rows(a.errors)]


def error_classes_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Rows of ``error_classes.csv`` (:func:`error_anatomy.error_class_rows`) with the run ids."""
    return [] if a.errors is None else [{**a.ids(), **r} for r in error_class_rows(a.errors)]


def option_position_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Rows of ``option_position_accuracy.csv`` (:func:`option_order.position_accuracy`)."""
    tables = a.option_order
    return [] if tables is None else [{**a.ids(), **r} for r in tables.positions]


def always_k_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Rows of ``always_k_baselines.csv`` (:func:`option_order.always_k_baselines`)."""
    tables = a.option_order
    return [] if tables is None else [{**a.ids(), **r} for r in tables.baselines]


def auroc_table_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Rows of ``auroc.csv`` (:func:`auroc.auroc_rows`) with the run ids.

    None for a run without option probabilities, and none for chance (its AUROC is 0.5 by
    definition).
    """
    if a.option_scores is None:
        return []
    return [{**a.ids(), **r} for r in auroc_rows(a.option_scores)]


def sampling_variance_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Rows of ``sampling_variance.csv`` (:attr:`RunAnalysis.sampling`) with the run ids."""
    return [{**a.ids(), **r} for r in a.sampling]


_BUILDERS = {STAGE_CI_CSV: (stage_ci_rows, STAGE_CI_COLUMNS, True),
             LESION_CSV: (lesion_rows, LESION_COLUMNS, True),
             SUBQUESTION_CSV: (subquestion_rows, SUBQUESTION_COLUMNS, True),
             FUNNEL_CSV: (funnel_rows, FUNNEL_COLUMNS, True),
             STATUS_CSV: (status_rows, STATUS_COLUMNS, False),
             DETECTION_CSV: (detection_metric_rows, (*ID_COLUMNS, *DETECTION_COLUMNS), True),
             ERROR_CONFUSION_CSV: (error_confusion_rows, (*ID_COLUMNS, *CONFUSION_COLUMNS),
                                   False),
             ERROR_CLASSES_CSV: (error_classes_rows, (*ID_COLUMNS, *CLASS_COLUMNS), False),
             OPTION_POSITION_CSV: (option_position_rows, (*ID_COLUMNS, *POSITION_COLUMNS),
                                   False),
             ALWAYS_K_CSV: (always_k_rows, (*ID_COLUMNS, *BASELINE_COLUMNS), False),
             AUROC_CSV: (auroc_table_rows, (*ID_COLUMNS, *AUROC_COLUMNS), False),
             SAMPLING_CSV: (sampling_variance_rows, (*ID_COLUMNS, *SAMPLING_COLUMNS), False)}


def extended_rows(analyses: Sequence[RunAnalysis], chance: RunAnalysis | None
                  ) -> dict[str, list[dict[str, Any]]]:
    """Rows of every new table: each run in order, then the chance rows (where they apply).

    Args:
        analyses: The analysed runs, in run order.
        chance: The chance baseline, or None (no chance rows).

    Returns:
        CSV name (:data:`EXTENDED_CSVS`) -> rows (unformatted values).
    """
    out = {}
    for name, (build, _, with_chance) in _BUILDERS.items():
        rows = [r for a in analyses for r in build(a)]
        if with_chance and chance is not None:
            rows.extend(build(chance))
        out[name] = rows
    return out


def write_extended_csvs(analyses: Sequence[RunAnalysis], chance: RunAnalysis | None,
                        out_dir: str | Path) -> list[Path]:
    """Write the new CSVs (:data:`EXTENDED_CSVS`) into ``out_dir``.

    Args:
        analyses: The analysed runs, in run order.
        chance: The chance baseline (its rows come last in each table).
        out_dir: Destination folder.

    Returns:
        Paths written, in :data:`EXTENDED_CSVS` order.
    """
    out_dir = Path(out_dir)
    rows = extended_rows(analyses, chance)
    paths = []
    for name in EXTENDED_CSVS:
        columns = _BUILDERS[name][1]
        formatted = [{k: format_cell(v) for k, v in r.items()} for r in rows[name]]
        write_csv_atomic(out_dir / name, formatted, columns)
        paths.append(out_dir / name)
    return paths


def write_judge_csv(analyses: Sequence[RunAnalysis], out_dir: str | Path) -> list[Path]:
    """Write ``judge_summary.csv`` when any run was made with ``--judge`` (else nothing).

    Its rows (:func:`~chexpercept.analysis.judge_report.judge_rows`; docs/metrics.md, "Strict
    and judged readings") follow the identity columns, runs in run order; no chance rows.

    Returns:
        The path written, or an empty list.
    """
    judged = [a for a in analyses if a.judge is not None]
    if not judged:
        return []
    rows = [{**a.ids(), **row} for a in judged if a.judge is not None
            for row in judge_rows(a.judge)]
    path = Path(out_dir) / JUDGE_CSV
    write_csv_atomic(path, [{k: format_cell(v) for k, v in r.items()} for r in rows],
                     (*ID_COLUMNS, *JUDGE_COLUMNS))
    return [path]


def model_colors(names: Sequence[str]) -> dict[str, str]:
    """A fixed colour per model (tab20 in sorted-name order); chance is grey.

    The same run gets the same colour in every plot of one analysis.

    Args:
        names: Run names (``chance`` allowed).

    Returns:
        Name -> ``#rrggbb`` colour, for every name and ``chance``.
    """
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
               "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#393b79", "#637939"]
    ordered = sorted(n for n in set(names) if n != CHANCE)
    colors = {n: palette[i % len(palette)] for i, n in enumerate(ordered)}
    colors[CHANCE] = "#7f7f7f"
    return colors

