"""Stage 04: fast columnar scoring of a loaded ``all_results.json`` straight into a CaseTable.

The reference path (``schema.parse_all_results`` -> :func:`metrics.score_case` per case ->
:func:`tables.case_table`) builds a pydantic model and a :class:`~metrics.CaseScore` per
case. This module reads the same raw records with plain dict look-ups of only the fields
Stage 04 uses, collects one flat row of small ints per case and derives every metric column
with a few numpy operations. It is used only when every record is regular: it checks
everything the reference path validates (record a JSON object whose ``key_id`` is its key,
``qa_path`` one of ``lesions.QA_PATHS``, ``detection_qa`` present, every stage block an
object, ``correct`` flags booleans, ``status`` values in ``schema.STATUSES``, a known lesion
prefix) and returns None at the first irregularity, so that the caller re-runs the reference
path, which raises the error naming the file and every key_id at fault. Both paths give
identical tables (``tests/analysis/test_columnar.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from chexpercept.analysis.metrics import PATH_STAGES, REVISION_KEYS
from chexpercept.analysis.tables import MAX_DEPTH, METRIC_INDEX, METRICS, SUB_KEYS, CaseTable
from chexpercept.lesions import LESIONS, NO_ATTRIBUTE_LESIONS, QA_PATHS
from chexpercept.schema import ATTRIBUTE_KEYS, STATUSES

_BLOCKS = ("detection_qa", "contour_evaluation_qa", "contour_revision_qa",
           "attribute_extraction_qa")
_PATH_INDEX = {p: i for i, p in enumerate(QA_PATHS)}
_LESION_INDEX = {le: i for i, le in enumerate(LESIONS)}
_STATUS_INDEX = {s: i for i, s in enumerate(STATUSES)}
_EMPTY: dict[str, Any] = {}
#: Per (path index, no-attribute lesion): the expected stages (``metrics.expected_stages``).
_STAGES = {(p, no_attr): tuple(s for s in PATH_STAGES[path] if not (no_attr and s == 4))
           for p, path in enumerate(QA_PATHS) for no_attr in (False, True)}
#: Width of a case's flat int row: 4 stage flags, 4 missing flags, 7 sub-question flags.
_ROW = 4 + 4 + len(SUB_KEYS)
_SUB_BLOCKS = ((2, REVISION_KEYS, 8), (3, ATTRIBUTE_KEYS, 8 + len(REVISION_KEYS)))


def _flag(block: Mapping[str, Any]) -> int:
    """0/1 for a boolean ``correct``, 2 when absent; raises KeyError for anything else."""
    if "correct" not in block:
        return 2
    value = block["correct"]
    if value is True:
        return 1
    if value is False:
        return 0
    raise KeyError("correct")


class Scan(NamedTuple):
    """Per-case fields read from the records (:func:`scan_records`), no reference into them.

    ``key_ids`` is one string (the key_ids joined by :data:`KEY_SEP`), so that no small
    object allocated while the parsed JSON is alive outlives it: a survivor would pin its
    allocator arena (1 MiB) and keep the freed JSON's memory resident.
    """

    key_ids: str
    n: int
    lesions: list[int]
    paths: list[int]
    flat: list[int]
    events: list[tuple[int, int, int]]


#: Separator of :attr:`Scan.key_ids` (a key_id containing it takes the plain path).
KEY_SEP = "\n"


def scan_records(data: Any, *, limit: int | None = None) -> Scan | None:
    """Read the fields Stage 04 scores from raw ``all_results.json`` data, or None.

    Args:
        data: The parsed JSON (key_id -> record); not modified.
        limit: Keep only the first ``limit`` records in file order (every record is still
            checked, as :func:`runs.load_run` validates the whole file); None keeps all.

    Returns:
        The scan (turn it into a table with :func:`table_from_scan` once ``data`` is
        dropped), or None when any record is irregular (the caller must use the reference
        path, which reports the problems).
    """
    if not isinstance(data, dict):
        return None
    keep = len(data) if limit is None else max(limit, 0)
    no_attr_ids = {_LESION_INDEX[le] for le in NO_ATTRIBUTE_LESIONS}
    key_ids: list[str] = []
    lesions: list[int] = []
    paths: list[int] = []
    flat: list[int] = []
    events: list[tuple[int, int, int]] = []  # (case, stage - 1, status index)
    lesion_of: dict[str, int] = {}
    for i, (key, rec) in enumerate(data.items()):
        if type(rec) is not dict or rec.get("key_id") != key or type(key) is not str:
            return None
        qa_path = rec.get("qa_path")
        path = _PATH_INDEX.get(qa_path) if type(qa_path) is str else None
        if path is None or "detection_qa" not in rec:
            return None
        blocks = [rec.get(b, _EMPTY) for b in _BLOCKS]
        if any(type(b) is not dict for b in blocks):
            return None
        if i >= keep:
            continue  # checked like the reference path's schema validation, not scored
        prefix = key.split("_", 1)[0]
        lesion = lesion_of.get(prefix)
        if lesion is None:
            lesion = _LESION_INDEX.get(prefix)
            if lesion is None:
                return None
            lesion_of[prefix] = lesion
        row = [0] * _ROW
        stages = _STAGES[(path, lesion in no_attr_ids)]
        try:
            for stage in stages:
                block = blocks[stage - 1]
                flag = _flag(block)
                if flag == 2:
                    row[4 + stage - 1] = 1
                else:
                    row[stage - 1] = flag
                if "status" in block and stage <= 2:
                    events.append((len(key_ids), stage - 1, _STATUS_INDEX[block["status"]]))
            for stage_index, subs, offset in _SUB_BLOCKS:
                if stage_index + 1 not in stages:
                    continue
                block = blocks[stage_index]
                for j, sub_key in enumerate(subs):
                    sub = block.get(sub_key, _EMPTY)
                    if type(sub) is not dict:
                        continue  # not a result block: flag absent (counted wrong)
                    row[offset + j] = _flag(sub) & 1
                    if "status" in sub:
                        events.append((len(key_ids), stage_index, _STATUS_INDEX[sub["status"]]))
        except (KeyError, TypeError):  # non-boolean correct, unknown or unhashable status
            return None
        key_ids.append(key)
        lesions.append(lesion)
        paths.append(path)
        flat.extend(row)
    joined = KEY_SEP.join(key_ids)
    if joined.count(KEY_SEP) != max(len(key_ids) - 1, 0):
        return None
    return Scan(joined, len(key_ids), lesions, paths, flat, events)


def table_from_scan(name: str, scan: Scan, *, key_pool: dict[str, str] | None = None
                    ) -> CaseTable:
    """Derive every metric column (``tables.METRICS``) from a :class:`Scan`.

    Args:
        name: Run folder name (the table's ``name``).
        scan: :func:`scan_records` of the run's file.
        key_pool: Optional dict shared between runs so their equal key_id strings are
            stored once.

    Returns:
        The table (0/1 values), identical to ``tables.case_table`` of the scored records.
    """
    n, lesions, paths, flat, events = scan.n, scan.lesions, scan.paths, scan.flat, scan.events
    key_ids = scan.key_ids.split(KEY_SEP) if n else []
    if key_pool is not None:
        key_ids = [key_pool.setdefault(k, k) for k in key_ids]
    lesion = np.array(lesions, dtype=np.int8)
    path = np.array(paths, dtype=np.int8)
    rows = np.array(flat, dtype=np.int8).reshape(n, _ROW)
    no_attr = np.isin(lesion, [_LESION_INDEX[le] for le in NO_ATTRIBUTE_LESIONS])
    path_stages = np.array([[s in PATH_STAGES[p] for s in range(1, 5)] for p in QA_PATHS],
                           dtype=bool)
    asked = path_stages[path]
    asked[:, 3] &= ~no_attr
    oracle = rows[:, :4].astype(bool) & asked
    prefix = np.cumprod(np.where(asked, oracle, True), axis=1, dtype=np.int8).astype(bool)
    e2e = prefix & asked
    bonus = no_attr & (path != QA_PATHS.index("lesion_free")) & prefix[:, 3]
    depth = e2e.sum(axis=1) + bonus
    max_depth = np.array([MAX_DEPTH[p] for p in QA_PATHS], dtype=np.int64)[path]

    values = np.zeros((n, len(METRICS)))
    app = np.zeros((n, len(METRICS)), dtype=bool)
    for k in range(4):
        for kind, flags in (("e2e", e2e), ("oracle", oracle)):
            m = METRIC_INDEX[f"{kind}:stage{k + 1}"]
            values[:, m] = flags[:, k]
            app[:, m] = asked[:, k]
        m = METRIC_INDEX[f"reach:{k + 1}"]
        app[:, m] = k + 1 <= max_depth
        values[:, m] = (depth >= k + 1) & app[:, m]
    values[:, METRIC_INDEX["depth"]] = depth
    app[:, METRIC_INDEX["depth"]] = True
    for j, key in enumerate(SUB_KEYS):
        m = METRIC_INDEX[f"sub:{key}"]
        values[:, m] = rows[:, 8 + j]
        app[:, m] = asked[:, 2 if key in REVISION_KEYS else 3]
    status = np.zeros((n, 4, len(STATUSES)), dtype=np.int32)
    if events:
        ev = np.array(events, dtype=np.int64)
        np.add.at(status, (ev[:, 0], ev[:, 1], ev[:, 2]), 1)
    return CaseTable(name=name, key_ids=tuple(key_ids), lesion=lesion, path=path,
                     values=values, applicable=app, missing=rows[:, 4:8].astype(bool) & asked,
                     status=status, has_status=bool(events))
