"""Core: the browsing columns of the parquet form of a bundle, views of each row's ``case_json``.

A parquet benchmark row (docs/hf_dataset.md, "Columns") holds ``case_json``, the case exactly as
in ``chexpercept.json`` (what Stage 03 reads), and columns derived from it for people who browse
the dataset on a hub: the case's ``lesion``, ``qa_path``, ``pair_id``, ``dicom_id``,
``data_source``, ``initial_context`` and, per question, ``<name>_question``, ``<name>_options``,
``<name>_answer`` and ``<name>_answer_index``. One derivation, :func:`view_columns`, makes them
for the export (``chexpercept.qa.hf_export``) and checks them on reading
(``chexpercept.parquet_bundle``): a row whose columns say another thing than its ``case_json``
is refused, so what a reader sees on the hub is what Stage 03 asks (docs/hf_dataset.md,
"Reading it back").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chexpercept.lesions import expected_stages, lesion_from_key_id
from chexpercept.schema import BenchmarkItem, parse_benchmark, qa_path_of

#: The nine questions in dialogue order, named as in ``chexpercept.json`` (the four attribute
#: sub-questions as ``attribute_<sub>``): each has the columns ``<name>_question``,
#: ``<name>_options``, ``<name>_answer`` and ``<name>_answer_index`` (docs/hf_dataset.md).
QUESTION_NAMES = ("detection_qa", "contour_eval_qa", "contour_revision_qa_expansion",
                  "contour_revision_qa_contraction", "contour_revision_qa_revision_result",
                  "attribute_distribution", "attribute_location",
                  "attribute_severity_measurement", "attribute_comparison")
#: Columns of the case itself, before the question and image columns.
CASE_COLUMNS = ("key_id", "lesion", "qa_path", "pair_id", "dicom_id", "data_source",
                "initial_context")
#: Every view column, in the order written (``key_id`` is the row's own name, not a view).
VIEW_COLUMNS: tuple[str, ...] = (*CASE_COLUMNS[1:], *(
    f"{name}_{part}" for name in QUESTION_NAMES
    for part in ("question", "options", "answer", "answer_index")))


def question_columns(key_id: str, item: BenchmarkItem) -> dict[str, Any]:
    """The question columns of the questions the case's path asks (the others None)."""
    from chexpercept.bundle import ordinal, point_text  # bundle.py imports parquet_bundle.py

    lesion = lesion_from_key_id(key_id)
    asked = expected_stages(qa_path_of(item, key_id), lesion)
    found: dict[str, tuple[str, list[str], str, int | list[int]]] = {}
    det = item.detection_qa
    found["detection_qa"] = (det.question, list(det.answer_options), det.answer,
                             det.answer_index)
    contour = item.contour_qa
    if 2 in asked and contour is not None:
        ev = contour.contour_eval_qa
        found["contour_eval_qa"] = (ev.question, list(ev.answer_options), ev.answer,
                                    ev.answer_index)
    if 3 in asked and contour is not None:
        for name in ("contour_revision_qa_expansion", "contour_revision_qa_contraction"):
            qa = getattr(contour, name)
            found[name] = (qa.question, [point_text(o) for o in qa.answer_options], qa.answer,
                           qa.answer_index)
        res = contour.contour_revision_qa_revision_result
        found["contour_revision_qa_revision_result"] = (
            res.question, [f"{ordinal(i)} mask" for i in range(1, len(res.answer_options) + 1)],
            res.answer, res.answer_index)
    attrs = item.attribute_extraction_qa
    if 4 in asked and attrs is not None:
        for name, qa in (("attribute_distribution", attrs.distribution),
                         ("attribute_location", attrs.location),
                         ("attribute_severity_measurement", attrs.severity_measurement),
                         ("attribute_comparison", attrs.comparison)):
            found[name] = (qa.question, list(qa.answer_options), qa.answer, qa.answer_index)
    cols: dict[str, Any] = {}
    for name in QUESTION_NAMES:
        question, options, answer, index = found.get(name, (None, None, None, None))
        cols.update({f"{name}_question": question, f"{name}_options": options,
                     f"{name}_answer": answer,
                     f"{name}_answer_index": (None if index is None else
                                              list(index) if isinstance(index, list) else [index])})
    return cols


def view_columns(key_id: str, raw: Mapping[str, Any], item: BenchmarkItem) -> dict[str, Any]:
    """Every view column of a case (:data:`VIEW_COLUMNS`), from its ``chexpercept.json`` value.

    Args:
        key_id: The case.
        raw: Its ``chexpercept.json`` value as read.
        item: The same value, validated.
    """
    return {"lesion": lesion_from_key_id(key_id), "qa_path": qa_path_of(item, key_id),
            "pair_id": raw.get("pair_id"), "dicom_id": raw.get("dicom_id"),
            "data_source": raw.get("data_source"),
            "initial_context": item.contour_qa.initial_context if item.contour_qa else None,
            **question_columns(key_id, item)}


def view_mismatches(key_id: str, raw: Any, row: Mapping[str, Any], where: str) -> list[str]:
    """The view columns of ``row`` that disagree with its ``case_json`` value ``raw``.

    A column the row lacks is not compared (a dataset re-written without it shows nothing that
    could disagree).

    Args:
        key_id: The row's key_id.
        raw: Its parsed ``case_json``.
        row: The row (column -> value, as pyarrow reads it).
        where: The row, for a schema error's message.

    Returns:
        ``"<column> (column: <value>, case_json: <value>)"`` per disagreeing column, in
        :data:`VIEW_COLUMNS` order; empty when they agree.

    Raises:
        SchemaError: If ``raw`` is not a valid case (names ``where`` and the field).
    """
    item = parse_benchmark({key_id: raw}, where)[key_id]
    expected = view_columns(key_id, raw, item)
    return [f"{c} (column: {_short(row[c])}, case_json: {_short(expected[c])})"
            for c in VIEW_COLUMNS if c in row and row[c] != expected[c]]


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


__all__ = ["CASE_COLUMNS", "QUESTION_NAMES", "VIEW_COLUMNS", "question_columns",
           "view_columns", "view_mismatches"]
