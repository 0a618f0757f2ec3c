"""Stage 04: the uniform-guess (chance) baseline, from ``chexpercept.json``'s option counts.

Reads ``<benchmark-dir>/chexpercept.json`` (its items' options only) and builds the chance
rows' :class:`~chexpercept.analysis.case_table.CaseTable` of expected values
(docs/metrics.md, "Chance"). A missing or invalid benchmark is not an error for Stage 04: the
chance rows become NA, with one warning.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from chexpercept.analysis.case_table import (
    METRIC_INDEX,
    METRICS,
    REVISION_KEYS,
    SUB_KEYS,
    CaseTable,
    layout,
)
from chexpercept.errors import ChexperceptError
from chexpercept.files import read_json
from chexpercept.lesions import (
    LESIONS,
    NO_ATTRIBUTE_LESIONS,
    QA_PATHS,
    expected_stages,
    lesion_from_key_id,
)
from chexpercept.schema import ATTRIBUTE_KEYS, STATUSES, BenchmarkItem, load_benchmark

logger = logging.getLogger(__name__)

#: ``model`` value (and table name) of the uniform-guess rows.
CHANCE = "chance"


def _single(options: Sequence | None) -> float:
    """Uniform-guess probability of a single-choice question with ``options``."""
    return 1.0 / len(options) if options else math.nan


def _multi(n_real_options: int) -> float:
    """Uniform guess over the valid answer sets of a multi-select question.

    Valid sets: every non-empty subset of the ``n_real_options`` non-None options, plus
    "None" alone: ``2**k - 1 + 1 = 2**k`` sets (docs/metrics.md, "Chance": location has 8).
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
        ``stage1``, ``stage2`` and each of ``case_table.SUB_KEYS`` -> probability in (0, 1]
        or NaN.
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
    """The uniform-guess baseline as a :class:`~case_table.CaseTable` of expected values.

    Per case: a stage's probability is the product of its questions' probabilities
    (:func:`question_chance`), ``e2e`` the product along the prefix, ``reach:K`` the
    probability of the first K stages all correct (the cardiomegaly bonus level equals the
    last stage's), ``depth`` the expected depth (sum of ``reach``). Cell means then average
    these over the cases of the cell (docs/metrics.md, "Chance").

    Args:
        benchmark: ``chexpercept.json`` items by key_id, or their precomputed
            :func:`question_chance` dicts; None when not available (every value NaN, i.e. NA
            rows).
        cases: (key_id, qa_path) of the cases to cover (the union over the analysed runs).

    Returns:
        The chance table (``name`` = ``chance``): values are probabilities in [0, 1] (depth
        in [0, 4]); cases absent from the benchmark are NaN; no statuses, nothing missing.

    Raises:
        InputError: If a key_id has no lesion prefix.
    """
    lesions = [lesion_from_key_id(k) for k, _ in cases]
    n = len(cases)
    lesion = np.array([LESIONS.index(x) for x in lesions], dtype=np.int8)
    path = np.array([QA_PATHS.index(p) for _, p in cases], dtype=np.int8)
    _, app = layout(lesion, path)
    values = np.full((n, len(METRICS)), np.nan)
    for i, ((key_id, qa_path), lesion_name) in enumerate(zip(cases, lesions, strict=True)):
        item = benchmark.get(key_id) if benchmark is not None else None
        if item is None:
            continue
        q = item if isinstance(item, Mapping) else question_chance(item)
        stage_p = {1: q["stage1"], 2: q["stage2"],
                   3: math.prod(q[k] for k in REVISION_KEYS),
                   4: math.prod(q[k] for k in ATTRIBUTE_KEYS)}
        prefix = 1.0
        reach = []
        for stage in expected_stages(qa_path, lesion_name):
            prefix *= stage_p[stage]
            values[i, METRIC_INDEX[f"oracle:stage{stage}"]] = stage_p[stage]
            values[i, METRIC_INDEX[f"e2e:stage{stage}"]] = prefix
            reach.append(prefix)
        if lesion_name in NO_ATTRIBUTE_LESIONS and qa_path != "lesion_free":
            reach.append(prefix)  # depth bonus: reached iff the last stage is correct
        for k, p in enumerate(reach, start=1):
            values[i, METRIC_INDEX[f"reach:{k}"]] = p
        values[i, METRIC_INDEX["depth"]] = sum(reach)
        for key in SUB_KEYS:
            if app[i, METRIC_INDEX[f"sub:{key}"]]:
                values[i, METRIC_INDEX[f"sub:{key}"]] = q[key]
    return CaseTable(name=CHANCE, key_ids=tuple(k for k, _ in cases), lesion=lesion,
                     path=path, values=values, applicable=app,
                     missing=np.zeros((n, 4), dtype=bool),
                     status=np.zeros((n, 4, len(STATUSES)), dtype=np.int32), has_status=False)


def load_chance_or_none(benchmark_dir: str | Path | None
                        ) -> dict[str, dict[str, float]] | None:
    """Per-question uniform-guess probabilities of ``chexpercept.json``, or None.

    Validates the file as ``schema.load_benchmark`` does but keeps only
    :func:`question_chance` of each item, validating item by item and dropping the models,
    so the benchmark never sits in memory whole. A missing or invalid file is not an error:
    one warning (naming the file and the first problem), and None.

    Args:
        benchmark_dir: Folder holding ``chexpercept.json`` (``--benchmark-dir``), or None.

    Returns:
        key_id -> question (:data:`CHANCE_QUESTIONS`) -> probability in (0, 1] or NaN, for
        :func:`chance_table`; None when the benchmark is not available.
    """
    if benchmark_dir is None:
        logger.warning("no --benchmark-dir: chance rows are NA")
        return None
    path = Path(benchmark_dir) / "chexpercept.json"
    try:
        data = read_json(path)
    except ChexperceptError as exc:
        logger.warning("benchmark not available (%s): chance rows are NA",
                       str(exc).splitlines()[0])
        return None
    if isinstance(data, dict):
        try:  # item by item: one model at a time, only the probabilities are kept
            return {key_id: question_chance(BenchmarkItem.model_validate(value))
                    for key_id, value in data.items()}
        except ValidationError:
            pass
    try:  # invalid: the reference validator words the warning (every problem, file named)
        load_benchmark(path)
    except ChexperceptError as exc:
        logger.warning("benchmark not available (%s): chance rows are NA",
                       str(exc).splitlines()[0])
    return None
