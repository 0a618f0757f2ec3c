"""Stage 04: per-case metric matrices, cell aggregation and stratified bootstrap CIs.

A run (or the uniform-guess baseline) becomes a :class:`CaseTable`: one row per case, one
column per metric of :data:`METRICS` (end-to-end and oracle-passed correctness of each stage,
depth, the end-to-end funnel and the seven sub-questions). Every table of the analysis is a
cell mean of these columns over a group of cases (lesion x path, either may be ``all``).

Confidence intervals: 95% percentile bootstrap over cases. Cases are resampled with
replacement *within each lesion x path stratum* (the benchmark's fixed design, paper_notes.md
section 1.3: 100 cases per lesion and path), all stages of a case together. Every cell is a
union of strata and its applicability depends only on lesion and path, so the number of
cases behind a cell is the same in every resample and a resampled cell mean is
``(W @ Z) / n`` with ``W`` the (B, n_cases) multinomial weight matrix and ``Z`` the
(n_cases, n_groups * n_metrics) matrix of masked values. It is computed without a Python loop
per resample or per cell, and without forming ``Z``: one (B, size) @ (size, n_metrics)
product per stratum, then sums of strata for the pooled groups (exact integers, so the result
equals the single product bit for bit). Weights are drawn per stratum from
``rng_for(seed, "04_analysis", "bootstrap", "<lesion>/<path>")`` over the stratum's key_ids in
sorted order, so runs on the same cases share resamples (paired comparisons), the draws are
made once per process for all runs, and the result does not depend on file order.
"""

from __future__ import annotations

import functools
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chexpercept.analysis.metrics import (
    ATTRIBUTE_DETAIL_PATH,
    PATH_STAGES,
    REVISION_DETAIL_PATH,
    REVISION_KEYS,
    SETTINGS,
    CaseScore,
    RunMetrics,
    expected_stages,
)
from chexpercept.errors import SchemaError
from chexpercept.lesions import LESIONS, NO_ATTRIBUTE_LESIONS, QA_PATHS, lesion_from_key_id
from chexpercept.rng import rng_for
from chexpercept.schema import ATTRIBUTE_KEYS, STATUSES, BenchmarkItem, CaseResult

logger = logging.getLogger(__name__)

#: Sub-questions: contour revision (stage 3) then attribute extraction (stage 4).
SUB_KEYS: tuple[str, ...] = (*REVISION_KEYS, *ATTRIBUTE_KEYS)
#: Largest depth per path, cardiomegaly bonus included (spec section 6).
MAX_DEPTH: dict[str, int] = {p: len(s) for p, s in PATH_STAGES.items()}
#: Metric columns of a :class:`CaseTable`. ``e2e:stageK`` / ``oracle:stageK``: stage K
#: correct end-to-end / on its own; ``depth``: correct-prefix length (with the cardiomegaly
#: bonus); ``reach:K``: depth >= K (share of cases still correct after K stages, the
#: end-to-end funnel; its mean over K sums to the mean depth); ``sub:<q>``: sub-question q.
METRICS: tuple[str, ...] = (
    *(f"e2e:stage{k}" for k in range(1, 5)),
    *(f"oracle:stage{k}" for k in range(1, 5)),
    "depth",
    *(f"reach:{k}" for k in range(1, 5)),
    *(f"sub:{q}" for q in SUB_KEYS),
)
#: Column of each metric / row of each group in the matrices.
METRIC_INDEX = {m: i for i, m in enumerate(METRICS)}
#: Group labels: ``all`` pools every lesion / path.
LESION_GROUPS: tuple[str, ...] = ("all", *LESIONS)
PATH_GROUPS: tuple[str, ...] = ("all", *QA_PATHS)
GROUPS: tuple[tuple[str, str], ...] = tuple((le, p) for le in LESION_GROUPS for p in PATH_GROUPS)
GROUP_INDEX = {g: i for i, g in enumerate(GROUPS)}
#: Result blocks holding each stage's question ``status`` keys (Stage 03 addition).
_STATUS_BLOCKS: dict[int, tuple[str, tuple[str, ...] | None]] = {
    1: ("detection_qa", None),
    2: ("contour_evaluation_qa", None),
    3: ("contour_revision_qa", REVISION_KEYS),
    4: ("attribute_extraction_qa", ATTRIBUTE_KEYS),
}
#: Two-sided level of every interval (95%).
CI_LEVEL = 0.95
#: Bootstrap resamples per matrix product (:func:`_block_means`).
BOOT_BLOCK = 64


@dataclass(frozen=True)
class CaseTable:
    """Per-case metric matrix of one run (or of the chance baseline).

    Attributes:
        name: Run folder name, or ``chance``.
        key_ids: Case ids, in table row order.
        lesion: (n,) int8 index into ``lesions.LESIONS``.
        path: (n,) int8 index into ``lesions.QA_PATHS``.
        values: (n, len(METRICS)) float64; 0/1 for a run, probabilities for chance, NaN
            where chance is unknown (benchmark item missing).
        applicable: (n, len(METRICS)) bool; the metric is defined for the case (stage asked,
            funnel level within the path's maximum depth, ...).
        missing: (n, 4) bool; expected stage result absent (counted wrong, defect 12).
        status: (n, 4, len(STATUSES)) int32; per stage, number of questions with each status.
        has_status: Whether any question carried a ``status`` key (False for release files,
            whose status rates are then NA).
    """

    name: str
    key_ids: tuple[str, ...]
    lesion: np.ndarray
    path: np.ndarray
    values: np.ndarray
    applicable: np.ndarray
    missing: np.ndarray
    status: np.ndarray
    has_status: bool

    @property
    def n_cases(self) -> int:
        """Number of cases (rows)."""
        return len(self.key_ids)


def _empty(name: str, key_ids: Sequence[str], lesions: Sequence[str],
           paths: Sequence[str]) -> dict:
    n = len(key_ids)
    return {"name": name, "key_ids": tuple(key_ids),
            "lesion": np.array([LESIONS.index(x) for x in lesions], dtype=np.int8),
            "path": np.array([QA_PATHS.index(x) for x in paths], dtype=np.int8),
            "values": np.zeros((n, len(METRICS))),
            "applicable": np.zeros((n, len(METRICS)), dtype=bool),
            "missing": np.zeros((n, 4), dtype=bool),
            "status": np.zeros((n, 4, len(STATUSES)), dtype=np.int32)}


def _fill_structure(app: np.ndarray, i: int, lesion: str, qa_path: str) -> tuple[int, ...]:
    """Mark the metrics a case of ``lesion``/``qa_path`` defines; return its stages."""
    stages = expected_stages(qa_path, lesion)
    for stage in stages:
        app[i, METRIC_INDEX[f"e2e:stage{stage}"]] = True
        app[i, METRIC_INDEX[f"oracle:stage{stage}"]] = True
    app[i, METRIC_INDEX["depth"]] = True
    for k in range(1, MAX_DEPTH[qa_path] + 1):
        app[i, METRIC_INDEX[f"reach:{k}"]] = True
    for key in SUB_KEYS:
        stage = 3 if key in REVISION_KEYS else 4
        app[i, METRIC_INDEX[f"sub:{key}"]] = stage in stages
    return stages


def _statuses(result: CaseResult, stage: int, problems: list[str]) -> list[str]:
    field_name, subs = _STATUS_BLOCKS[stage]
    block = getattr(result, field_name)
    blocks = [block] if subs is None else [block.get(k) for k in subs]
    out = []
    for sub, b in zip(subs or (None,), blocks, strict=True):
        if isinstance(b, Mapping) and "status" in b:
            if b["status"] not in STATUSES:
                where = field_name + (f".{sub}" if sub else "")
                problems.append(f"{result.key_id}: {where}.status: expected one of "
                                f"{', '.join(STATUSES)}, found {b['status']!r}")
                continue
            out.append(b["status"])
    return out


def case_table(name: str, scores: Sequence[CaseScore],
               results: Mapping[str, CaseResult] | None = None) -> CaseTable:
    """Build a run's :class:`CaseTable` from its case scores (and records, for statuses).

    Args:
        name: Run folder name.
        scores: :func:`metrics.score_case` of every case.
        results: The validated records by key_id; their per-question ``status`` keys fill
            :attr:`CaseTable.status` (None: no status information).

    Returns:
        The run's table (0/1 values).

    Raises:
        SchemaError: If a ``status`` value is not one of ``schema.STATUSES`` (all listed).
    """
    t = _empty(name, [s.key_id for s in scores], [s.lesion for s in scores],
               [s.qa_path for s in scores])
    values, app, problems = t["values"], t["applicable"], []
    has_status = False
    for i, s in enumerate(scores):
        stages = _fill_structure(app, i, s.lesion, s.qa_path)
        for stage in stages:
            values[i, METRIC_INDEX[f"e2e:stage{stage}"]] = s.e2e[stage]
            values[i, METRIC_INDEX[f"oracle:stage{stage}"]] = s.oracle[stage]
            if stage in s.missing:
                t["missing"][i, stage - 1] = True
        values[i, METRIC_INDEX["depth"]] = s.depth
        for k in range(1, MAX_DEPTH[s.qa_path] + 1):
            values[i, METRIC_INDEX[f"reach:{k}"]] = s.depth >= k
        for detail in (s.revision_detail, s.attribute_detail):
            for key, flag in (detail or {}).items():
                values[i, METRIC_INDEX[f"sub:{key}"]] = flag
        if results is not None:
            for stage in stages:
                for status in _statuses(results[s.key_id], stage, problems):
                    t["status"][i, stage - 1, STATUSES.index(status)] += 1
                    has_status = True
    if problems:
        raise SchemaError(f"{name}: {len(problems)} bad status value(s):\n  "
                          + "\n  ".join(problems))
    return CaseTable(has_status=has_status, **t)


def _bucket_mean(values: np.ndarray) -> float:
    """Mean of a 1-D bucket (NaN when empty, defect 31), as ``metrics._mean`` computes it."""
    return float(values.sum()) / len(values) if len(values) else math.nan


def run_metrics(table: CaseTable, model: str) -> RunMetrics:
    """The release's three tables of a run, from its :class:`CaseTable`.

    Same rows and values as :func:`metrics.summarize` of the run's case scores (the sums are
    exact integers, so the quotients are bit-identical).

    Args:
        table: The run's table (0/1 values).
        model: Value of the ``model`` column (the run folder name).

    Returns:
        The run's :class:`~metrics.RunMetrics`.
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
    return RunMetrics(model=model, summary=summary, revision_detail=[details[0]],
                      attribute_detail=[details[1]],
                      n_cases={p: int((table.path == i).sum()) for i, p in enumerate(QA_PATHS)},
                      n_missing=int(table.missing.sum()))


# --------------------------------------------------------------------------------------
# Chance baseline
# --------------------------------------------------------------------------------------


def _single(options: Sequence | None) -> float:
    """Uniform-guess probability of a single-choice question with ``options``."""
    return 1.0 / len(options) if options else math.nan


def _multi(n_real_options: int) -> float:
    """Uniform guess over the valid answer sets of a multi-select question.

    Valid sets: every non-empty subset of the ``n_real_options`` non-None options, plus
    "None" alone: ``2**k - 1 + 1 = 2**k`` sets (paper_notes.md section 2.3: location has 8).
    """
    return 1.0 / 2.0 ** n_real_options


#: Keys of :func:`question_chance`: stage 1 and 2 questions, then the sub-questions.
CHANCE_QUESTIONS: tuple[str, ...] = ("stage1", "stage2", *SUB_KEYS)


def question_chance(item: BenchmarkItem) -> dict[str, float]:
    """Uniform-guess probability of every question of a benchmark item.

    Single choice: ``1/n_options``; multi-select (expansion, contraction: the non-None
    points; location: the 3 regions before "None of the above"): ``1/2**k``
    (:func:`_multi`). A question the item lacks is NaN.

    Args:
        item: One ``chexpercept.json`` value.

    Returns:
        ``stage1``, ``stage2`` and each of :data:`SUB_KEYS` -> probability in (0, 1] or NaN.
    """
    out = {"stage1": _single(item.detection_qa.answer_options), "stage2": math.nan,
           **{k: math.nan for k in SUB_KEYS}}
    cq = item.contour_qa
    if cq is not None:
        out["stage2"] = _single(cq.contour_eval_qa.answer_options)
        for key, qa in (("expansion", cq.contour_revision_qa_expansion),
                        ("contraction", cq.contour_revision_qa_contraction)):
            if qa is not None:
                out[key] = _multi(sum(o.point is not None for o in qa.answer_options))
        if cq.contour_revision_qa_revision_result is not None:
            out["revision_result"] = _single(cq.contour_revision_qa_revision_result.answer_options)
    aq = item.attribute_extraction_qa
    if aq is not None:
        out["distribution"] = _single(aq.distribution.answer_options)
        out["location"] = _multi(max(len(aq.location.answer_options) - 1, 0))
        out["severity/measurement"] = _single(aq.severity_measurement.answer_options)
        out["comparison"] = _single(aq.comparison.answer_options)
    return out


def chance_table(benchmark: Mapping[str, BenchmarkItem | Mapping[str, float]] | None,
                 cases: Sequence[tuple[str, str]]) -> CaseTable:
    """The uniform-guess baseline as a :class:`CaseTable` of expected values.

    Per case: a stage's probability is the product of its questions' probabilities
    (:func:`question_chance`), ``e2e`` the product along the prefix, ``reach:K`` the
    probability of the first K stages all correct (the cardiomegaly bonus level equals the
    last stage's), ``depth`` the expected depth (sum of ``reach``). Cell means then average
    these over the cases of the cell.

    Args:
        benchmark: ``chexpercept.json`` items by key_id, or their precomputed
            :func:`question_chance` dicts; None when not available (every value NaN, i.e. NA
            rows).
        cases: (key_id, qa_path) of the cases to cover (the union over the analysed runs).

    Returns:
        The chance table (``name`` = ``chance``); cases absent from the benchmark are NaN.
    """
    lesions = [lesion_from_key_id(k) for k, _ in cases]
    t = _empty("chance", [k for k, _ in cases], lesions, [p for _, p in cases])
    values, app = t["values"], t["applicable"]
    values[:] = math.nan
    for i, ((key_id, qa_path), lesion) in enumerate(zip(cases, lesions, strict=True)):
        stages = _fill_structure(app, i, lesion, qa_path)
        item = benchmark.get(key_id) if benchmark is not None else None
        if item is None:
            continue
        q = item if isinstance(item, Mapping) else question_chance(item)
        stage_p = {1: q["stage1"], 2: q["stage2"],
                   3: math.prod(q[k] for k in REVISION_KEYS),
                   4: math.prod(q[k] for k in ATTRIBUTE_KEYS)}
        prefix = 1.0
        reach = []
        for stage in stages:
            prefix *= stage_p[stage]
            values[i, METRIC_INDEX[f"oracle:stage{stage}"]] = stage_p[stage]
            values[i, METRIC_INDEX[f"e2e:stage{stage}"]] = prefix
            reach.append(prefix)
        if lesion in NO_ATTRIBUTE_LESIONS and qa_path != "lesion_free":
            reach.append(prefix)  # depth bonus: reached iff the last stage is correct
        for k, p in enumerate(reach, start=1):
            values[i, METRIC_INDEX[f"reach:{k}"]] = p
        values[i, METRIC_INDEX["depth"]] = sum(reach)
        for key in SUB_KEYS:
            if app[i, METRIC_INDEX[f"sub:{key}"]]:
                values[i, METRIC_INDEX[f"sub:{key}"]] = q[key]
    return CaseTable(has_status=False, **t)


# --------------------------------------------------------------------------------------
# Cells and bootstrap
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CellStats:
    """Cell means of a table over :data:`GROUPS` x :data:`METRICS`.

    Attributes:
        name: The table's name.
        value: (n_groups, n_metrics) float64 mean; NaN for an empty cell.
        n: (n_groups, n_metrics) int64 number of cases behind the cell.
        ci_low: (n_groups, n_metrics) float64 lower 2.5% bootstrap percentile (NaN: none).
        ci_high: (n_groups, n_metrics) float64 upper 97.5% percentile (NaN: none).
        n_boot: Number of bootstrap resamples (0: no CIs).
    """

    name: str
    value: np.ndarray
    n: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    n_boot: int

    def get(self, lesion: str, path: str, metric: str) -> tuple[float, float, float, int]:
        """``(value, ci_low, ci_high, n)`` of one cell (lesion/path may be ``all``)."""
        g, m = GROUP_INDEX[(lesion, path)], METRIC_INDEX[metric]
        return (float(self.value[g, m]), float(self.ci_low[g, m]), float(self.ci_high[g, m]),
                int(self.n[g, m]))


def group_matrix(table: CaseTable) -> np.ndarray:
    """(n_cases, len(GROUPS)) bool membership of each case in each lesion x path group."""
    n = table.n_cases
    lesion_ok = [np.ones(n, bool)] + [table.lesion == i for i in range(len(LESIONS))]
    path_ok = [np.ones(n, bool)] + [table.path == j for j in range(len(QA_PATHS))]
    return np.stack([le & p for le in lesion_ok for p in path_ok], axis=1)


def masked_values(table: CaseTable) -> tuple[np.ndarray, np.ndarray]:
    """``(values, ok)``: (n, n_metrics) float64 values (0 where not counted) and bool mask.

    A cell counts when the metric applies to the case and its value is known (not NaN).
    """
    ok = table.applicable & np.isfinite(table.values)
    return np.where(ok, table.values, 0.0), ok


def _strata(table: CaseTable) -> list[tuple[int, int, np.ndarray]]:
    """``(lesion, path, rows)`` of every non-empty stratum in (lesion, path) order.

    ``rows`` is (size,) int64, the stratum's row indices ordered by key_id.
    """
    strata: dict[tuple[int, int], list[int]] = {}
    for i, (le, p) in enumerate(zip(table.lesion.tolist(), table.path.tolist(), strict=True)):
        strata.setdefault((le, p), []).append(i)
    return [(le, p, np.array(sorted(idx, key=lambda i: table.key_ids[i]), dtype=np.int64))
            for (le, p), idx in sorted(strata.items())]


@functools.lru_cache(maxsize=len(LESIONS) * len(QA_PATHS))
def _stratum_counts(seed: int, label: str, size: int, n_boot: int) -> np.ndarray:
    """(B, size) read-only multinomial counts of one stratum (cached across runs).

    The draws depend only on the seed, the stratum label and its size, so every run on the
    same cases reuses them (column j = the stratum's j-th key_id in sorted order). Stored in
    the smallest unsigned dtype that holds ``size`` (a count never exceeds it): uint8 for
    the paper's 100-case strata, a quarter of float32's memory.
    """
    rng = rng_for(seed, "04_analysis", "bootstrap", label)
    # (B, size) draws with replacement -> per-row counts via one flat bincount
    draws = rng.integers(0, size, (n_boot, size)) + size * np.arange(n_boot)[:, None]
    counts = np.bincount(draws.ravel(), minlength=n_boot * size).reshape(n_boot, size)
    counts = counts.astype(np.min_scalar_type(size))
    counts.flags.writeable = False
    return counts


def _strata_blocks(table: CaseTable, n_boot: int, seed: int
                   ) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """``(lesion, path, rows, counts)`` per stratum: rows (size,) int64, counts (B, size) uint."""
    return [(le, p, rows, _stratum_counts(int(seed), f"{LESIONS[le]}/{QA_PATHS[p]}",
                                          len(rows), int(n_boot)))
            for le, p, rows in _strata(table)]


def strata_weights(table: CaseTable, n_boot: int, seed: int) -> np.ndarray:
    """Bootstrap weights (multinomial counts), resampling within each lesion x path stratum.

    Args:
        table: The cases (only ``key_ids``, ``lesion``, ``path`` are used).
        n_boot: Number of resamples B.
        seed: Seed (``--seed``).

    Returns:
        (B, n_cases) float32; row b holds how often each case is drawn in resample b; each
        stratum's weights sum to its size.
    """
    weights = np.zeros((n_boot, table.n_cases), dtype=np.float32)
    for _, _, rows, counts in _strata_blocks(table, n_boot, seed):
        weights[:, rows] = counts
    return weights


def _resampled_sums(table: CaseTable, values: np.ndarray,
                    blocks: Sequence[tuple[int, int, np.ndarray, np.ndarray]]) -> np.ndarray:
    """Resampled cell sums: (B, n_groups, n_metrics) float32 from per-stratum weights.

    Per stratum, (B, size) @ (size, n_metrics) products give the resampled sums; the groups
    (``all`` pools) are sums of strata. Run values are 0/1 or small integers, so every
    float32 sum is an exact integer (< 2**24) whatever the order. The products are made
    :data:`BOOT_BLOCK` resamples at a time: that keeps each below OpenBLAS's multithreading
    threshold (M * N * K <= 65536 * 4), and worker threads cost far more than they gain on
    products this small (measured 10-50x slower on a busy 2-core machine).

    Args:
        table: The cases.
        values: (n_cases, n_metrics) float64 masked values (:func:`masked_values`).
        blocks: ``(lesion, path, rows, counts)`` per stratum, counts (B, size) of
            non-negative integers (any numeric dtype).
    """
    n_boot = blocks[0][3].shape[0] if blocks else 0
    strata = np.zeros((len(LESIONS), len(QA_PATHS), n_boot, len(METRICS)), dtype=np.float32)
    v32 = values.astype(np.float32)
    for le, p, rows, counts in blocks:
        v = v32[rows]
        for start in range(0, n_boot, BOOT_BLOCK):
            stop = min(start + BOOT_BLOCK, n_boot)
            chunk = counts[start:stop].astype(np.float32, copy=False)
            np.matmul(chunk, v, out=strata[le, p, start:stop])
    return _pool(strata).transpose(1, 0, 2)


def _pool(strata: np.ndarray) -> np.ndarray:
    """Group sums from stratum sums: (n_lesions, n_paths, ...) -> (len(GROUPS), ...)."""
    by_lesion, by_path = strata.sum(axis=1), strata.sum(axis=0)
    total = by_path.sum(axis=0)
    out = np.empty((len(GROUPS), *strata.shape[2:]), dtype=strata.dtype)
    for g, (lesion, path) in enumerate(GROUPS):
        p = QA_PATHS.index(path) if path != "all" else None
        if lesion == "all":
            out[g] = total if p is None else by_path[p]
        else:
            le = LESIONS.index(lesion)
            out[g] = by_lesion[le] if p is None else strata[le, p]
    return out


def _group_sums(table: CaseTable, x: np.ndarray) -> np.ndarray:
    """(len(GROUPS), n_metrics) float64 sums of the columns of ``x`` (n_cases, n_metrics).

    Per-stratum ``bincount`` sums pooled by :func:`_pool`: no BLAS call (whose worker threads
    dominate at this size), exact for integer-valued ``x`` (0/1 flags, depths, counts).
    """
    stratum = table.lesion.astype(np.int64) * len(QA_PATHS) + table.path
    n_strata = len(LESIONS) * len(QA_PATHS)
    strata = np.stack([np.bincount(stratum, weights=x[:, m], minlength=n_strata)
                       for m in range(x.shape[1])], axis=1)
    return _pool(strata.reshape(len(LESIONS), len(QA_PATHS), x.shape[1]))


def bootstrap_means(table: CaseTable, weights: np.ndarray) -> np.ndarray:
    """Resampled cell means: (B, n_groups, n_metrics) float64, NaN for empty cells.

    Equal to one (B, n) @ (n, n_groups * n_metrics) product of the weights with the
    group-masked values, computed stratum by stratum (:func:`_resampled_sums`); valid because
    every cell's case count is fixed under stratified resampling (module docstring).

    Args:
        table: The cases.
        weights: (B, n_cases) float32 case weights (:func:`strata_weights`).
    """
    values, ok = masked_values(table)
    n = _group_sums(table, ok)
    blocks = [(le, p, rows, weights[:, rows]) for le, p, rows in _strata(table)]
    sums = _resampled_sums(table, values, blocks).astype(np.float64)
    if not blocks:
        sums = np.zeros((len(weights), len(GROUPS), len(METRICS)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, sums / np.where(n > 0, n, 1), np.nan)


def _percentiles(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:data:`CI_LEVEL` bounds of every column of (B, k) finite ``samples``: two (k,) arrays.

    Computed on the transposed copy, so each column's partition runs over contiguous memory
    (same order statistics and interpolation as along axis 0, several times faster).
    """
    alpha = 100 * (1 - CI_LEVEL) / 2
    low, high = np.percentile(np.ascontiguousarray(samples.T), [alpha, 100 - alpha], axis=1)
    return low, high


def percentile_ci(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower/upper :data:`CI_LEVEL` percentile bounds over axis 0 (NaN where all are NaN)."""
    alpha = 100 * (1 - CI_LEVEL) / 2
    if samples.shape[0] == 0 or not np.isfinite(samples).any():
        nan = np.full(samples.shape[1:], np.nan)
        return nan, nan.copy()
    flat = samples.reshape(samples.shape[0], -1)
    low = np.full(flat.shape[1], np.nan)
    high = low.copy()
    full = np.isfinite(flat).all(axis=0)  # the usual case: a cell is NaN in all or no resample
    if full.any():
        low[full], high[full] = _percentiles(flat[:, full])
    partial = ~full & np.isfinite(flat).any(axis=0)
    if partial.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            low[partial], high[partial] = np.nanpercentile(flat[:, partial],
                                                           [alpha, 100 - alpha], axis=0)
    return low.reshape(samples.shape[1:]), high.reshape(samples.shape[1:])


def cell_stats(table: CaseTable, *, n_boot: int = 0, seed: int = 0,
               weights: np.ndarray | None = None) -> CellStats:
    """Cell means (and bootstrap CIs) of a table over every lesion x path group.

    Intervals are computed only for non-empty cells, from the exact resampled sums
    (:func:`_resampled_sums`) divided by the cell's fixed case count.

    Args:
        table: A run's or the chance table.
        n_boot: Bootstrap resamples (0: no CIs; the chance table takes 0).
        seed: Bootstrap seed.
        weights: Precomputed :func:`strata_weights` (overrides ``n_boot``/``seed``).

    Returns:
        The table's :class:`CellStats`; an empty cell is NaN with ``n`` 0.
    """
    values, ok = masked_values(table)
    n = _group_sums(table, ok)
    if np.array_equal(values, np.floor(values)):  # a run: exact integer sums, any order
        totals = _group_sums(table, values)
    else:  # chance probabilities: the reference summation
        totals = group_matrix(table).astype(np.float64).T @ values
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(n > 0, totals / np.where(n > 0, n, 1), np.nan)
    low, high = np.full(value.shape, np.nan), np.full(value.shape, np.nan)
    blocks = None
    if weights is not None:
        if len(weights):
            blocks = [(le, p, rows, weights[:, rows]) for le, p, rows in _strata(table)]
            n_boot = len(weights)
    elif n_boot > 0 and table.n_cases:
        blocks = _strata_blocks(table, n_boot, seed)
    if blocks:
        keep = (n > 0).ravel()
        sums = _resampled_sums(table, values, blocks).reshape(n_boot, -1)[:, keep]
        means = sums.astype(np.float64) / n.ravel()[keep]
        low.ravel()[keep], high.ravel()[keep] = _percentiles(means)
    elif blocks is None:
        n_boot = 0
    return CellStats(name=table.name, value=value, n=n.astype(np.int64), ci_low=low,
                     ci_high=high, n_boot=n_boot)


def structural(lesion: str, path: str, metric: str) -> bool:
    """Whether ``metric`` can have cases in the lesion x path group (``all`` allowed).

    Used to leave out rows that no benchmark could fill (stage 3 on revision-free, stage 4
    for cardiomegaly, funnel levels past the path's maximum depth); a cell that could have
    cases but has none is kept and written as NA.
    """
    lesions = LESIONS if lesion == "all" else (lesion,)
    paths = QA_PATHS if path == "all" else (path,)
    if metric == "depth":
        return True
    kind, _, arg = metric.partition(":")
    for le in lesions:
        for p in paths:
            stages = expected_stages(p, le)
            if kind in ("e2e", "oracle") and int(arg[-1]) in stages:
                return True
            if kind == "reach" and int(arg) <= MAX_DEPTH[p]:
                return True
            if kind == "sub" and (3 if arg in REVISION_KEYS else 4) in stages:
                return True
    return False
