"""Stage 04: the tables beyond the release (CIs, per lesion, sub-questions, statuses, funnel).

Written next to the release CSVs (never changing them): in ``all_models_oracle_<setting>/``
in all-models mode, in the run's ``oracle_<setting>/`` folder in single-model mode. Every
table is long format, carries the number of cases behind each cell (``n_cases``), 95%
bootstrap bounds (``ci_low``/``ci_high``, :mod:`chexpercept.analysis.tables`) and a
``chance`` row group (uniform guessing, ``model = chance``), except ``stage_status.csv``
(answer statuses and missing stages, not accuracies). Values are fractions in [0, 1] (depth
in stages); an empty cell (no cases) is an empty field.
"""

from __future__ import annotations

import array
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from chexpercept import io
from chexpercept.analysis._memory import gc_paused, release_free_memory
from chexpercept.analysis.metrics import SETTINGS, RunMetrics
from chexpercept.analysis.report import format_cell
from chexpercept.analysis.runs import (
    RunRef,
    score_run,
    split_unfinished,
    validate_results,
    warn_incomplete,
)
from chexpercept.analysis.tables import (
    CHANCE_QUESTIONS,
    LESION_GROUPS,
    MAX_DEPTH,
    PATH_GROUPS,
    SUB_KEYS,
    CaseTable,
    CellStats,
    case_table,
    cell_stats,
    chance_table,
    question_chance,
    run_metrics,
    structural,
)
from chexpercept.errors import ChexperceptError, SchemaError
from chexpercept.io import write_csv_atomic
from chexpercept.lesions import QA_PATHS
from chexpercept.schema import (
    STATUSES,
    BenchmarkItem,
    CaseResult,
    load_benchmark,
)

logger = logging.getLogger(__name__)

STAGE_CI_CSV = "stage_accuracy_ci.csv"
LESION_CSV = "lesion_stage_accuracy.csv"
SUBQUESTION_CSV = "subquestion_accuracy.csv"
STATUS_CSV = "stage_status.csv"
FUNNEL_CSV = "e2e_funnel.csv"
#: The new CSVs, in writing order.
EXTENDED_CSVS: tuple[str, ...] = (STAGE_CI_CSV, LESION_CSV, SUBQUESTION_CSV, FUNNEL_CSV,
                                  STATUS_CSV)

#: Identity columns of every new table (runs identified by provider, model and variant).
ID_COLUMNS: tuple[str, ...] = ("model", "provider", "model_name", "variant")
_CI = ("value", "ci_low", "ci_high", "n_cases")
STAGE_CI_COLUMNS = (*ID_COLUMNS, "path", "setting", "metric", *_CI)
LESION_COLUMNS = (*ID_COLUMNS, "lesion", "path", "setting", "stage", *_CI)
SUBQUESTION_COLUMNS = (*ID_COLUMNS, "lesion", "path", "question", *_CI)
FUNNEL_COLUMNS = (*ID_COLUMNS, "lesion", "path", "after_stages", *_CI)
STATUS_COLUMNS = (*ID_COLUMNS, "stage", "n_cases", "n_missing", "n_questions",
                  *(f"rate({s})" for s in STATUSES))

#: ``model`` value of the uniform-guess rows.
CHANCE = "chance"
#: ``path`` label of pooled attribute sub-questions (release detail CSV, spec section 6).
POOLED_ATTRIBUTE_PATH = "revision_required+revision_free"
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
            missing, not scored (:func:`runs.split_unfinished`).
    """

    run: RunRef | None
    metrics: RunMetrics | None
    table: CaseTable
    cells: CellStats
    unfinished: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``model`` column value: the run folder name, or ``chance``."""
        return self.run.name if self.run is not None else CHANCE

    def ids(self) -> dict[str, str]:
        """The identity columns of this run's rows."""
        if self.run is None:
            return {"model": CHANCE, "provider": "", "model_name": "uniform guess",
                    "variant": ""}
        return {"model": self.run.name, "provider": self.run.provider,
                "model_name": self.run.model_name, "variant": self.run.variant}


def analyse_run(run: RunRef, results: Mapping[str, CaseResult], *, n_boot: int,
                seed: int, unfinished: Mapping[str, str] | None = None) -> RunAnalysis:
    """Score a run (release tables) and build its case table and cell statistics.

    Args:
        run: The run.
        results: Its validated records (:func:`runs.load_run`), read once.
        n_boot: Bootstrap resamples (0: no CIs).
        seed: Bootstrap seed.
        unfinished: The run's unfinished cases (:func:`runs.split_unfinished`), if known.

    Returns:
        The run's :class:`RunAnalysis`.

    Raises:
        SchemaError: If a case cannot be scored or a status value is unknown.
    """
    scores, metrics = score_run(run, results)
    try:
        table = case_table(run.name, scores, results)
    except SchemaError as exc:  # bad status values: name the file, like every other error
        raise SchemaError(f"{run.all_results}: {str(exc).removeprefix(run.name + ': ')}"
                          ) from None
    return RunAnalysis(run, metrics, table, cell_stats(table, n_boot=n_boot, seed=seed),
                       dict(unfinished or {}))


def analyse_run_file(run: RunRef, *, n_boot: int, seed: int, limit: int | None = None,
                     key_pool: dict[str, str] | None = None) -> RunAnalysis:
    """Read, validate and analyse one run's ``all_results.json`` (read once, then dropped).

    Regular files take the columnar fast path (:mod:`chexpercept.analysis._columnar`: only
    the fields Stage 04 reads, no model per case); a file with any irregularity goes through
    :func:`runs.validate_results` and :func:`analyse_run`, which raise the errors naming the
    file and every key_id at fault. Both paths give the same tables and CSVs.

    Args:
        run: The run.
        n_boot: Bootstrap resamples (0: no CIs).
        seed: Bootstrap seed.
        limit: Use only the first ``limit`` cases in file order (``--limit``); None: all.
        key_pool: Optional dict shared across runs so equal key_ids are stored once.

    Returns:
        The run's :class:`RunAnalysis`.

    Raises:
        InputError: If the file is missing.
        SchemaError: On invalid JSON or schema, an unscorable case or an unknown status.
    """
    from chexpercept.analysis._columnar import scan_records, table_from_scan

    with gc_paused():  # parsed JSON is acyclic
        data = io.read_json(run.all_results)
    unfinished = split_unfinished(run.all_results, data)
    scan = scan_records(data, limit=limit)
    if scan is None:
        logger.debug("%s: irregular records, using the validating path", run.all_results)
        results = validate_results(run.all_results, data, limit=limit)
        del data
        return analyse_run(run, results, n_boot=n_boot, seed=seed, unfinished=unfinished)
    del data  # before building anything that outlives this call (see _columnar.Scan)
    table = table_from_scan(run.name, scan, key_pool=key_pool)
    del scan
    warn_incomplete(run, [k for k, m in zip(table.key_ids, table.missing.any(axis=1).tolist(),
                                            strict=True) if m])
    analysis = RunAnalysis(run, run_metrics(table, run.name), table,
                           cell_stats(table, n_boot=n_boot, seed=seed), unfinished)
    release_free_memory()  # the parsed file's and the bootstrap's transient buffers
    return analysis


def load_chance_or_none(benchmark_dir: str | Path | None
                        ) -> dict[str, dict[str, float]] | None:
    """Per-question uniform-guess probabilities of ``chexpercept.json``, or None.

    Like :func:`load_benchmark_or_none` (same validation, same warning when the file is
    missing or invalid) but keeps only :func:`tables.question_chance` of each item, validating
    item by item and dropping the models, so the benchmark never sits in memory whole.

    Returns:
        key_id -> question -> probability (for :func:`analyse_chance`), or None.
    """
    if benchmark_dir is None:
        logger.warning("no --benchmark-dir: chance rows are NA")
        return None
    path = Path(benchmark_dir) / "chexpercept.json"
    try:
        with gc_paused():  # parsed JSON is acyclic
            data = io.read_json(path)
    except ChexperceptError as exc:
        logger.warning("benchmark not available (%s): chance rows are NA",
                       str(exc).splitlines()[0])
        return None
    if isinstance(data, dict):
        # Keep only floats in one buffer while the parsed file is alive; the per-key dicts are
        # built after it is dropped (small survivors would pin its allocator arenas).
        keys: list[str] = []
        probs = array.array("d")
        try:
            for key_id, value in data.items():
                q = question_chance(BenchmarkItem.model_validate(value))
                probs.extend(q[name] for name in CHANCE_QUESTIONS)
                keys.append(key_id)
                data[key_id] = None  # free the raw item as we go
        except ValidationError:
            pass
        else:
            joined = "\n".join(keys)
            if joined.count("\n") == len(keys) - 1:  # no key_id holds the separator
                del keys, data
                keys = joined.split("\n")
            width = len(CHANCE_QUESTIONS)
            return {k: dict(zip(CHANCE_QUESTIONS, probs[i * width:(i + 1) * width],
                                strict=True)) for i, k in enumerate(keys)}
    try:  # invalid: the reference validator words the warning (every problem, file named)
        load_benchmark(path)
    except ChexperceptError as exc:
        logger.warning("benchmark not available (%s): chance rows are NA",
                       str(exc).splitlines()[0])
    return None


def load_benchmark_or_none(benchmark_dir: str | Path | None) -> dict[str, BenchmarkItem] | None:
    """``chexpercept.json`` of ``benchmark_dir``, or None (with one warning) if unavailable.

    A missing or invalid benchmark is not an error for Stage 04: only the chance rows need
    it, and they become NA.
    """
    if benchmark_dir is None:
        logger.warning("no --benchmark-dir: chance rows are NA")
        return None
    path = Path(benchmark_dir) / "chexpercept.json"
    try:
        return load_benchmark(path)
    except ChexperceptError as exc:
        first = str(exc).splitlines()[0]
        logger.warning("benchmark not available (%s): chance rows are NA", first)
        return None


def analyse_chance(benchmark: Mapping[str, BenchmarkItem | Mapping[str, float]] | None,
                   analyses: Sequence[RunAnalysis]) -> RunAnalysis:
    """The uniform-guess baseline over the union of the runs' cases.

    Args:
        benchmark: Benchmark items, or their question probabilities
            (:func:`load_chance_or_none`); None: every chance value NA.
        analyses: The analysed runs (their cases, first occurrence order).

    Returns:
        The chance :class:`RunAnalysis` (no CIs).
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

    Rows: path x setting x metric (``acc(stage1..4)``, ``depth``), in the release order.
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
    """Accuracy by lesion x path x setting x stage (``all`` pools), plus depth per path."""
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
    """
    rows = []
    for lesion in LESION_GROUPS:
        for key in SUB_KEYS:
            paths = (("revision_required", "revision_required"),) if key in (
                "expansion", "contraction", "revision_result") else (
                ("all", POOLED_ATTRIBUTE_PATH), ("revision_required", "revision_required"),
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
    K = 1 .. the path's maximum depth; the mean over K sums to the mean depth.
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

    ``n_missing`` counts expected stage results that were absent (counted wrong, release
    defect 12). ``rate(<status>)`` is the share of the stage's answered questions with that
    status; NA when the results carry no ``status`` keys (release files).
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


_BUILDERS = {STAGE_CI_CSV: (stage_ci_rows, STAGE_CI_COLUMNS, True),
             LESION_CSV: (lesion_rows, LESION_COLUMNS, True),
             SUBQUESTION_CSV: (subquestion_rows, SUBQUESTION_COLUMNS, True),
             FUNNEL_CSV: (funnel_rows, FUNNEL_COLUMNS, True),
             STATUS_CSV: (status_rows, STATUS_COLUMNS, False)}


def extended_rows(analyses: Sequence[RunAnalysis], chance: RunAnalysis | None
                  ) -> dict[str, list[dict[str, Any]]]:
    """Rows of every new table: each run in order, then the chance rows (where they apply)."""
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


def model_colors(names: Sequence[str]) -> dict[str, str]:
    """A fixed colour per model (tab20 in sorted-name order); chance is grey.

    The same run gets the same colour in every plot of one analysis.
    """
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
               "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#393b79", "#637939"]
    ordered = sorted(n for n in set(names) if n != CHANCE)
    colors = {n: palette[i % len(palette)] for i, n in enumerate(ordered)}
    colors[CHANCE] = "#7f7f7f"
    return colors

