"""Stage 04: option-position tables (issue 23 item 2; docs/metrics.md, "Option order").

Reads ``all_results.json`` records (``{key_id: record}``) and, for every single-choice
question, finds the displayed position of the correct option. Under the release order the
displayed position is the ground truth itself; a block that carries ``"option_order"`` (a list:
displayed position i shows original option ``option_order[i]``, 1-based) maps the original
ground truth to its displayed position. Multi-select questions (ground truth a list) are not
counted: they have no single correct position.

Two tables:

* :func:`position_accuracy`: per question, per displayed position of the correct option, the
  number of questions and the share answered correctly (and ``circular_correct`` where the run
  recorded it).
* :func:`always_k_baselines`: per question and k, the accuracy of always answering displayed
  option k, i.e. the share of questions whose correct option is shown at position k (computed
  from the ground truths alone; under the release order "always 1" scores 1.0 on positive
  detection, where "Yes" is option 1). k runs over every option the question has, read from
  the benchmark bundle as the chance rows read it (:func:`option_counts`).

Stage 04 computes both per run from the parsed ``all_results.json`` of its pass
(:func:`option_tables`, ``passes.run_pass``) and writes them as ``option_position_accuracy.csv``
and ``always_k_baselines.csv`` (docs/metrics.md, "Option order").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from chexpercept.errors import SchemaError

#: Sections whose block is one question (the others hold one block per sub-question).
SINGLE_SECTIONS = ("detection_qa", "contour_evaluation_qa")
#: Sections that hold sub-question blocks keyed by the ``ground_truth`` mapping's keys.
SUB_SECTIONS = ("contour_revision_qa", "attribute_extraction_qa")

POSITION_COLUMNS = ("question", "path", "position", "n", "accuracy", "circular_accuracy")
BASELINE_COLUMNS = ("question", "path", "k", "n", "accuracy")
#: Question name of this module -> its key in ``chance.question_chance`` (single choice only).
CHANCE_KEYS: dict[str, str] = {
    "detection_qa": "stage1", "contour_evaluation_qa": "stage2",
    "contour_revision_qa.revision_result": "revision_result",
    "attribute_extraction_qa.distribution": "distribution",
    "attribute_extraction_qa.severity/measurement": "severity/measurement",
    "attribute_extraction_qa.comparison": "comparison"}


def option_counts(chance: Mapping[str, Mapping[str, float]] | None
                  ) -> dict[str, dict[str, int]] | None:
    """Each single-choice question's number of options, from the benchmark's chance values.

    ``chance.question_chance`` gives a single-choice question with n options the probability
    exactly ``1/n`` (docs/metrics.md, "Chance"), read from the bundle's ``answer_options``; this
    inverts it, so the bundle is read once for both tables.

    Args:
        chance: ``chance.load_chance_or_none`` (key_id -> question -> probability), or None.

    Returns:
        key_id -> question name (:data:`CHANCE_KEYS`) -> option count; None when ``chance`` is.
    """
    if chance is None:
        return None
    out = {}
    for key_id, probs in chance.items():
        counts = {}
        for question, key in CHANCE_KEYS.items():
            p = probs.get(key, math.nan)
            if p > 0:  # NaN (the item lacks the question) compares False
                counts[question] = round(1.0 / p)
        out[key_id] = counts
    return out


def _displayed(gt: int, order: Any, where: str) -> int:
    """Displayed 1-based position of original option ``gt`` under ``order`` (None: release).

    Raises:
        ValueError: ``order`` is not a permutation of 1..n containing ``gt`` (names ``where``).
    """
    if order is None:
        return gt
    if (not isinstance(order, list) or sorted(order) != list(range(1, len(order) + 1))
            or gt not in order):
        raise ValueError(f"{where}: option_order {order!r} is not a 1-based permutation "
                         f"containing the ground truth {gt}")
    return order.index(gt) + 1


def _questions(records: Mapping[str, Any]):
    """Yield ``(key_id, question, qa_path, displayed_position, correct, circular_or_None)``.

    Raises:
        ValueError: a single-choice ground truth that is not a positive int, a bad
            ``option_order`` or a ``circular_correct`` that is not a bool (the message names the
            key_id and block).
    """
    for key_id, rec in records.items():
        if not isinstance(rec, Mapping):
            continue
        for section in SINGLE_SECTIONS + SUB_SECTIONS:
            block = rec.get(section)
            if not isinstance(block, Mapping) or "ground_truth" not in block:
                continue
            if section in SINGLE_SECTIONS:
                items = [(section, block["ground_truth"], block)]
            else:
                gts = block["ground_truth"]
                if not isinstance(gts, Mapping):
                    continue
                items = [(f"{section}.{sub}", gt, block.get(sub) or {})
                         for sub, gt in gts.items()]
            for question, gt, flags in items:
                if isinstance(gt, list) or "correct" not in flags:
                    continue  # multi-select, or not asked in this run
                where = f"{key_id}: {question}"
                if isinstance(gt, bool) or not isinstance(gt, int) or gt < 1:
                    raise ValueError(f"{where}: ground truth {gt!r} is not a 1-based option")
                pos = _displayed(gt, flags.get("option_order"), where)
                circular = flags.get("circular_correct")
                if circular is not None and not isinstance(circular, bool):
                    raise ValueError(f"{where}: circular_correct {circular!r} is not true, "
                                     f"false or absent")
                yield (key_id, question, str(rec.get("qa_path", "")), pos,
                       flags["correct"] is True, circular)


def position_accuracy(records: Mapping[str, Any]) -> pd.DataFrame:
    """Accuracy by the correct option's displayed position, per question and QA path.

    Args:
        records: ``all_results.json`` content (``{key_id: record}``).

    Returns:
        DataFrame with :data:`POSITION_COLUMNS` (``path``: the record's ``qa_path``);
        ``circular_accuracy`` is NaN where no question in the cell has ``circular_correct``.
        Sorted by question, path, position.
    """
    rows: dict[tuple[str, str, int], list] = {}
    for _, question, path, pos, ok, circ in _questions(records):
        cell = rows.setdefault((question, path, pos), [0, 0, 0, 0])
        cell[0] += 1
        cell[1] += ok
        if circ is not None:
            cell[2] += 1
            cell[3] += circ is True
    out = [(q, path, p, n, c / n, (cc / nc) if nc else float("nan"))
           for (q, path, p), (n, c, nc, cc) in sorted(rows.items())]
    return pd.DataFrame(out, columns=list(POSITION_COLUMNS))


def always_k_baselines(records: Mapping[str, Any],
                       counts: Mapping[str, Mapping[str, int]] | None = None) -> pd.DataFrame:
    """Accuracy of always answering displayed option k, per question and QA path.

    k runs from 1 to the question's number of options (the largest over the cell's cases;
    an option never correct scores 0). Without ``counts``, or for a case absent from them, the
    largest displayed correct position seen stands in for the option count.

    Args:
        records: ``all_results.json`` content.
        counts: :func:`option_counts` of the benchmark, or None.

    Returns:
        DataFrame with :data:`BASELINE_COLUMNS` (``path``: the record's ``qa_path``), sorted
        by question, path, k.

    Raises:
        ValueError: A displayed position beyond the question's option count in the benchmark
            (names the key_id and question).
    """
    positions: dict[tuple[str, str], list[int]] = {}
    n_options: dict[tuple[str, str], int] = {}
    for key_id, question, path, pos, _, _ in _questions(records):
        positions.setdefault((question, path), []).append(pos)
        n = (counts or {}).get(key_id, {}).get(question)
        if n is not None and pos > n:
            raise ValueError(f"{key_id}: {question}: correct option shown at position {pos} "
                             f"but the benchmark item has {n} options")
        n_options[(question, path)] = max(n_options.get((question, path), 0), n or pos)
    out = []
    for question, path in sorted(positions):
        pos = positions[(question, path)]
        out += [(question, path, k, len(pos), pos.count(k) / len(pos))
                for k in range(1, n_options[(question, path)] + 1)]
    return pd.DataFrame(out, columns=list(BASELINE_COLUMNS))


@dataclass(frozen=True)
class OptionTables:
    """One run's option-position tables, as rows (carried on ``extended.RunAnalysis``).

    Attributes:
        positions: Rows of :func:`position_accuracy` (keys :data:`POSITION_COLUMNS`).
        baselines: Rows of :func:`always_k_baselines` (keys :data:`BASELINE_COLUMNS`).
    """

    positions: tuple[dict[str, Any], ...]
    baselines: tuple[dict[str, Any], ...]


def option_tables(results: Mapping[str, Any], key_ids: Iterable[str],
                  counts: Mapping[str, Mapping[str, int]] | None, path: Path | str
                  ) -> OptionTables:
    """Both tables of one run over the cases Stage 04 scored.

    Args:
        results: The run's parsed ``all_results.json`` (read, not modified).
        key_ids: The scored cases (``CaseTable.key_ids``: unfinished cases and those past
            ``--limit`` left out).
        counts: :func:`option_counts` of the benchmark, or None.
        path: The run's ``all_results.json`` (named in errors).

    Returns:
        :func:`position_accuracy` and :func:`always_k_baselines` of those cases, as rows of
        plain Python values.

    Raises:
        SchemaError: A ground truth that is not a 1-based option, a bad ``option_order`` or a
            position beyond the question's option count (names the file, key_id and question).
    """
    scored = {k: results[k] for k in key_ids if k in results}
    try:
        positions, baselines = position_accuracy(scored), always_k_baselines(scored, counts)
    except ValueError as exc:
        raise SchemaError(f"{path}: {exc}") from None
    return OptionTables(tuple(_plain(r) for r in positions.to_dict("records")),
                        tuple(_plain(r) for r in baselines.to_dict("records")))


def _plain(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row with numpy scalars turned into Python ``int``/``float`` (CSV-formattable)."""
    return {k: v.item() if hasattr(v, "item") else v for k, v in row.items()}
