"""Stage 04: sampling variance of a ``--samples K`` run (reads its per-sample ``all_results``).

A Stage 03 run with ``--samples K`` > 1 holds sample 0 in ``all_results.json`` and sample k in
``all_results_sample_<k>.json`` (docs/evaluation_protocol.md, "Sampling"). For each stage
accuracy Stage 04 reports (end-to-end and oracle-passed, stages 1-4, per path and pooled) this
module gives, over the cases every sample finished (docs/metrics.md, "Sampling variance"):

- the mean over cases and samples;
- the between-sample SD: the sample SD (ddof 1) of the K per-sample accuracies;
- a 95% interval that holds both the cases and the samples: a cluster bootstrap over cases,
  each case keeping its K samples (:func:`chexpercept.analysis.bootstrap.cluster_interval`);

and, per stage, the answer consistency across samples: the share of cases whose K samples give
the same parsed answer (``agree_all``) and the mean share of agreeing sample pairs
(``agree_pairwise``), each with the same cluster interval.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from chexpercept.analysis.bootstrap import PATH_GROUPS, cluster_interval
from chexpercept.analysis.case_table import (
    METRIC_INDEX,
    STAGE_FIELDS,
    CaseTable,
    results_case_table,
)
from chexpercept.analysis.error_anatomy import QUESTIONS, case_answers
from chexpercept.errors import SchemaError
from chexpercept.lesions import QA_PATHS

logger = logging.getLogger(__name__)

#: Turn name -> its stage block (``all_results.json`` section).
SECTION_OF = {question: section for question, section, _ in QUESTIONS}

#: The stage accuracies whose sampling variance is reported (the columns of
#: ``stage_accuracy_ci.csv``: end-to-end and oracle-passed, stages 1-4).
SAMPLING_METRICS: tuple[str, ...] = (*(f"e2e:stage{k}" for k in range(1, 5)),
                                     *(f"oracle:stage{k}" for k in range(1, 5)))
#: Answer-consistency measures per stage (module docstring).
CONSISTENCY_METRICS: tuple[str, ...] = (*(f"agree_all:stage{k}" for k in range(1, 5)),
                                        *(f"agree_pairwise:stage{k}" for k in range(1, 5)))
#: Columns of ``sampling_variance.csv`` after the run identity columns.
SAMPLING_COLUMNS: tuple[str, ...] = ("path", "metric", "samples", "value", "sd_between_samples",
                                     "ci_low", "ci_high", "n_cases")


def _stage_answers(data: dict[str, Any], key_ids: Sequence[str]) -> list[list[str | None]]:
    """Per case (``key_ids`` order) the parsed answer of each stage 1-4, as comparable text.

    A stage's answer is the option numbers chosen on each of its questions, read by
    :func:`chexpercept.analysis.error_anatomy.case_answers` (the one reader of stored answers:
    ``"3,1"`` and ``"1,3"`` are the same choice). None when the stage was not asked, or when
    any of its questions has no answer (a status other than ``ok``, or no option named): a
    failed answer is neither agreement nor disagreement.
    """
    out = []
    for key_id in key_ids:
        chosen: dict[str, list[tuple[int, ...] | None]] = {}
        for a in case_answers(data[key_id]):
            chosen.setdefault(SECTION_OF[a.question], []).append(a.chosen)
        out.append([None if not (v := chosen.get(STAGE_FIELDS[k])) or None in v else repr(v)
                    for k in range(1, 5)])
    return out


def _agreement(answers: Sequence[Sequence[str | None]]) -> tuple[float, float] | None:
    """``(all agree, share of agreeing pairs)`` of one case's K answers to a stage.

    None when some sample has no answer for the stage (it was not asked, or not reached).
    """
    if any(a is None for a in answers):
        return None
    pairs = list(combinations(answers, 2))
    return float(len(set(answers)) == 1), sum(a == b for a, b in pairs) / len(pairs)


def sampling_rows(tables: Sequence[CaseTable], answers: Sequence[list[list[str | None]]], *,
                  n_boot: int, seed: int) -> list[dict[str, Any]]:
    """Rows of ``sampling_variance.csv`` for one run (without its identity columns).

    Args:
        tables: One case table per sample, sample 0 first, over the same cases in the same
            row order (:func:`analyse_samples` aligns them).
        answers: Per sample, per case, the parsed answer of each stage (:func:`_stage_answers`).
        n_boot: Bootstrap resamples (0: no intervals).
        seed: Bootstrap seed.

    Returns:
        One row per path group (``all`` first) and metric (:data:`SAMPLING_METRICS`, then
        :data:`CONSISTENCY_METRICS`) with cases: ``path, metric, samples, value,
        sd_between_samples`` (NaN for the consistency rows), ``ci_low, ci_high, n_cases``.
    """
    k = len(tables)
    first = tables[0]
    order = np.argsort(np.array(first.key_ids, dtype=object), kind="stable")  # key_id order
    rows: list[dict[str, Any]] = []
    for group in PATH_GROUPS:
        in_group = np.ones(first.n_cases, dtype=bool) if group == "all" else \
            first.path == QA_PATHS.index(group)
        for metric in SAMPLING_METRICS:
            m = METRIC_INDEX[metric]
            rows_ok = in_group & np.logical_and.reduce([t.applicable[:, m] for t in tables])
            ordered = order[rows_ok[order]]
            if not len(ordered):
                continue
            x = np.stack([t.values[ordered, m] for t in tables], axis=1)  # (n, K)
            per_sample = x.mean(axis=0)
            low, high = cluster_interval(x.mean(axis=1), 0.0, 1.0, n_boot=n_boot, seed=seed,
                                         label=f"{group}/{metric}")
            rows.append({"path": group, "metric": metric, "samples": k,
                         "value": float(x.mean()),
                         "sd_between_samples": float(per_sample.std(ddof=1)),
                         "ci_low": low, "ci_high": high, "n_cases": len(ordered)})
        for stage in range(1, 5):
            found = [(i, _agreement([a[i][stage - 1] for a in answers]))
                     for i in order.tolist() if in_group[i]]
            found = [(i, g) for i, g in found if g is not None]
            if not found:
                continue
            for j, name in enumerate(("agree_all", "agree_pairwise")):
                values = np.array([g[j] for _, g in found])
                low, high = cluster_interval(values, 0.0, 1.0, n_boot=n_boot, seed=seed,
                                             label=f"{group}/{name}:stage{stage}")
                rows.append({"path": group, "metric": f"{name}:stage{stage}", "samples": k,
                             "value": float(values.mean()), "sd_between_samples": math.nan,
                             "ci_low": low, "ci_high": high, "n_cases": len(found)})
    return rows


def analyse_samples(samples: Sequence[dict[str, Any]], paths: Sequence[str | Path], name: str,
                    *, n_boot: int, seed: int,
                    key_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Sampling-variance rows of one run from its K parsed results files.

    Only the cases every sample finished are used (a case unfinished in one sample is missing
    in all, logged once), in sample 0's file order.

    Args:
        samples: The parsed ``all_results`` of each sample, sample 0 first (K >= 2); the
            unfinished cases are removed from them.
        paths: Their files (named in errors and warnings).
        name: The run folder name.
        n_boot: Bootstrap resamples (0: no intervals).
        seed: Bootstrap seed.
        key_ids: Only these cases (the run's scored cases under ``--limit``: the first N
            finished ones of sample 0's file, as every other table); None: all.

    Returns:
        :func:`sampling_rows` of the run.

    Raises:
        SchemaError: As :func:`case_table.results_case_table`, naming the sample's file; or
            a sample whose case has another QA path or ground truth than sample 0's.
    """
    scanned = [results_case_table(data, path, name)[0] for data, path in zip(samples, paths,
                                                                             strict=True)]
    if key_ids is not None:
        keep = set(key_ids)
        scanned = [_rows_of(t, [k for k in t.key_ids if k in keep]) for t in scanned]
    common = set(scanned[0].key_ids).intersection(*(t.key_ids for t in scanned[1:]))
    dropped = len(set().union(*(t.key_ids for t in scanned))) - len(common)
    if dropped:
        logger.warning("%s: %d case(s) not finished in every one of the %d samples are left "
                       "out of the sampling variance", name, dropped, len(samples))
    key_ids = [k for k in scanned[0].key_ids if k in common]
    _check_same_cases(samples, paths, key_ids)
    tables = [_rows_of(t, key_ids) for t in scanned]
    answers = [_stage_answers(data, key_ids) for data in samples]
    return sampling_rows(tables, answers, n_boot=n_boot, seed=seed)


def _truth(record: Any) -> tuple[Any, ...]:
    """A case record's QA path and every question block's ground truth (its identity)."""
    if not isinstance(record, dict):
        return (None,)
    return (record.get("qa_path"), *((name, block.get("ground_truth"))
                                     for name, block in record.items()
                                     if isinstance(block, dict) and "ground_truth" in block))


def _check_same_cases(samples: Sequence[dict[str, Any]], paths: Sequence[str | Path],
                      key_ids: Sequence[str]) -> None:
    """Refuse a sample whose case has another QA path or ground truth than in sample 0.

    Raises:
        SchemaError: Naming the sample's file and the key_id (a results file of another
            benchmark or run copied into the run folder).
    """
    for data, path in zip(samples[1:], paths[1:], strict=True):
        for key_id in key_ids:
            if _truth(data[key_id]) != _truth(samples[0][key_id]):
                raise SchemaError(f"{path}: {key_id}: QA path or ground truth differs from "
                                  f"sample 0's ({paths[0]}); every sample of a --samples run "
                                  f"asks the same cases")


def _rows_of(table: CaseTable, key_ids: Sequence[str]) -> CaseTable:
    """``table`` restricted to ``key_ids``, in that order."""
    index = {k: i for i, k in enumerate(table.key_ids)}
    rows = np.array([index[k] for k in key_ids], dtype=np.int64)
    return CaseTable(table.name, tuple(key_ids), table.lesion[rows], table.path[rows],
                     table.values[rows], table.applicable[rows], table.missing[rows],
                     table.status[rows], table.has_status)
