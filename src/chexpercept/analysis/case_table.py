"""Stage 04: read a run's ``all_results.json`` into its per-case table (:class:`CaseTable`).

The case table is the only representation of a scored run: the release tables
(:mod:`~chexpercept.analysis.release_tables`), the new tables
(:mod:`~chexpercept.analysis.extended`), the cell means and bootstrap intervals
(:mod:`~chexpercept.analysis.bootstrap`) and the paired comparison all derive from it, and the
chance baseline (:mod:`~chexpercept.analysis.chance`) is a table of the same layout.

:func:`read_case_table` is the one reader. It reads only the fields Stage 04 scores, with plain
dict look-ups (no model object per case), into one flat row of small ints per case, and derives
every metric column with a few numpy operations. It validates what ``schema.CaseResult``
validates and what scoring needs (a boolean ``correct``, a known lesion prefix, ``status`` in
``schema.STATUSES``), collects every problem and raises once, naming the file and every key_id
at fault; the wording of the schema problems comes from ``schema.parse_all_results``, called on
the faulty records only. Definitions: docs/metrics.md, "Stage accuracy",
"End-to-end and oracle-passed", "Depth", "Sub-questions".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from chexpercept.errors import ChexperceptError, SchemaError
from chexpercept.lesions import (
    LESIONS,
    NO_ATTRIBUTE_LESIONS,
    PATH_STAGES,
    QA_PATHS,
    expected_stages,
    lesion_from_key_id,
)
from chexpercept.run_store import RunStore
from chexpercept.schema import ATTRIBUTE_KEYS, STATUSES, parse_all_results

logger = logging.getLogger(__name__)

#: Result block of each stage, in dialogue order (1 detection, 2 contour evaluation,
#: 3 contour revision, 4 attribute extraction).
STAGE_FIELDS: dict[int, str] = {
    1: "detection_qa",
    2: "contour_evaluation_qa",
    3: "contour_revision_qa",
    4: "attribute_extraction_qa",
}
#: Contour-revision sub-questions (revision-required cases; docs/metrics.md, "Sub-questions").
REVISION_KEYS: tuple[str, ...] = ("expansion", "contraction", "revision_result")
#: Sub-questions: contour revision (stage 3) then attribute extraction (stage 4).
SUB_KEYS: tuple[str, ...] = (*REVISION_KEYS, *ATTRIBUTE_KEYS)
#: Largest depth per path, cardiomegaly bonus included (docs/metrics.md, "Depth").
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
#: Column of each metric in :attr:`CaseTable.values`.
METRIC_INDEX = {m: i for i, m in enumerate(METRICS)}
#: Record keys a damaged record may carry that Stage 04 never reads (left out of validation).
UNUSED_RECORD_KEYS: tuple[str, ...] = ("chat_history", "token_usage", "_chat_history_idx")


def structural(lesion: str, path: str, metric: str) -> bool:
    """Whether ``metric`` can have cases in the lesion x path group (``all`` allowed).

    Used to leave out rows that no benchmark could fill (stage 3 on revision-free, stage 4
    for cardiomegaly, funnel levels past the path's maximum depth); a cell that could have
    cases but has none is kept and written as NA.

    Args:
        lesion: One of ``lesions.LESIONS`` or ``all``.
        path: One of ``lesions.QA_PATHS`` or ``all``.
        metric: One of :data:`METRICS`.

    Returns:
        True if some case of the group is asked the metric.
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


@dataclass(frozen=True)
class CaseTable:
    """Per-case metric matrix of one run (or of the chance baseline).

    Attributes:
        name: Run folder name, or ``chance``.
        key_ids: Case ids, in table row order (file order for a run).
        lesion: (n,) int8 index into ``lesions.LESIONS``.
        path: (n,) int8 index into ``lesions.QA_PATHS``.
        values: (n, len(METRICS)) float64; 0/1 flags (depth: 0-4) for a run, probabilities
            for chance, NaN where chance is unknown (benchmark item missing).
        applicable: (n, len(METRICS)) bool; the metric is defined for the case (stage asked,
            funnel level within the path's maximum depth, ...).
        missing: (n, 4) bool; expected stage result absent (counted wrong,
            docs/differences.md D41).
        status: (n, 4, len(STATUSES)) int32; per stage, number of questions with each status.
        has_status: Whether any question carried a ``status`` key (False for release files,
            whose status rates are then NA).
        prompt_tokens: Prompt tokens of the scored cases' calls, summed (their
            ``token_usage.input_tokens``; 0 where the file has none).
        cached_prompt_tokens: Of those, the tokens the engine found in its prefix cache
            (``token_usage.cached_input_tokens``; docs/design.md, "KV cache at scale").
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
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0

    @property
    def prefix_cache_hit_rate(self) -> float:
        """``cached_prompt_tokens / prompt_tokens`` in [0, 1]; NaN without prompt tokens."""
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else \
            float("nan")

    @property
    def n_cases(self) -> int:
        """Number of cases (rows)."""
        return len(self.key_ids)


#: (n_paths, 4) bool: the path asks stage k + 1.
_PATH_ASKS = np.array([[s in PATH_STAGES[p] for s in range(1, 5)] for p in QA_PATHS], dtype=bool)
_NO_ATTRIBUTE = [LESIONS.index(le) for le in NO_ATTRIBUTE_LESIONS]
_LESION_FREE = QA_PATHS.index("lesion_free")


def layout(lesion: np.ndarray, path: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stages asked and metrics defined, from each case's lesion and path alone.

    Args:
        lesion: (n,) int index into ``lesions.LESIONS``.
        path: (n,) int index into ``lesions.QA_PATHS``.

    Returns:
        ``(asked, applicable)``: (n, 4) bool, stage k + 1 asked (:func:`expected_stages`),
        and (n, len(METRICS)) bool, :attr:`CaseTable.applicable`.
    """
    asked = _PATH_ASKS[path]
    asked[:, 3] &= ~np.isin(lesion, _NO_ATTRIBUTE)
    max_depth = np.array([MAX_DEPTH[p] for p in QA_PATHS], dtype=np.int64)[path]
    app = np.zeros((len(path), len(METRICS)), dtype=bool)
    for k in range(4):
        app[:, METRIC_INDEX[f"e2e:stage{k + 1}"]] = asked[:, k]
        app[:, METRIC_INDEX[f"oracle:stage{k + 1}"]] = asked[:, k]
        app[:, METRIC_INDEX[f"reach:{k + 1}"]] = k + 1 <= max_depth
    app[:, METRIC_INDEX["depth"]] = True
    for key in SUB_KEYS:
        app[:, METRIC_INDEX[f"sub:{key}"]] = asked[:, 2 if key in REVISION_KEYS else 3]
    return asked, app


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


#: The per-stage result blocks of an ``all_results.json`` record.
_STAGE_BLOCKS = ("detection_qa", "contour_evaluation_qa", "contour_revision_qa",
                 "attribute_extraction_qa")


def split_unfinished(path: str | Path, data: Any) -> dict[str, str]:
    """Remove the cases Stage 03 marked ``unfinished`` from ``data``; key_id -> reason.

    A case is unfinished when a turn got no answer (a fault of the network or the server) or
    the run stopped before it finished: it is missing, never a wrong answer of the model
    (docs/engines.md, "Faults"; docs/metrics.md, "Stage accuracy"), so it is not scored and
    the report says the run is incomplete. Logs one warning naming the file when there are any.

    Args:
        path: The ``all_results.json`` (for the warning).
        data: Its parsed content (key_id -> record); modified in place.

    Returns:
        key_id -> the recorded reason, in file order (empty for a complete run).

    Raises:
        SchemaError: For an ``unfinished`` marker that is not an object, or one on a case that
            also holds stage results (Stage 03 never writes either: the file was edited or
            mixed from two runs); names the file and every such key_id.
    """
    if not isinstance(data, dict):
        return {}
    out: dict[str, str] = {}
    bad: list[str] = []
    for key_id, record in data.items():
        if not isinstance(record, dict) or "unfinished" not in record:
            continue
        marker = record["unfinished"]
        if not isinstance(marker, dict):
            bad.append(f"{key_id}: 'unfinished' is {type(marker).__name__}, not an object")
        elif any(record.get(b) for b in _STAGE_BLOCKS):
            bad.append(f"{key_id}: marked unfinished but holds stage results")
        else:
            out[key_id] = str(marker.get("reason") or "unfinished")
    if bad:
        raise SchemaError(f"{path}: {len(bad)} inconsistent 'unfinished' marker(s) (Stage 03 "
                          f"rebuilds this file from records.jsonl when re-run):\n  "
                          + "\n  ".join(bad[:20]))
    for key_id in out:
        del data[key_id]
    if out:
        logger.warning("%s: incomplete run: %d case(s) got no answer for a turn or were not "
                       "reached (counted as missing, not as wrong answers; re-run Stage 03 to "
                       "complete them), e.g. %s: %s", path, len(out), next(iter(out)),
                       next(iter(out.values()))[:200])
    return out


_PATH_INDEX = {p: i for i, p in enumerate(QA_PATHS)}
_LESION_INDEX = {le: i for i, le in enumerate(LESIONS)}
_STATUS_INDEX = {s: i for i, s in enumerate(STATUSES)}
_EMPTY: dict[str, Any] = {}
_BLOCKS = tuple(STAGE_FIELDS.values())
#: Per (path index, no-attribute lesion): the expected stages (:func:`expected_stages`).
_STAGES = {(p, no_attr): tuple(s for s in PATH_STAGES[path] if not (no_attr and s == 4))
           for p, path in enumerate(QA_PATHS) for no_attr in (False, True)}
#: Width of a case's flat int row: 4 stage flags, 4 missing flags, 7 sub-question flags.
_ROW = 4 + 4 + len(SUB_KEYS)
#: (stage, sub-question keys, offset of their flags in the row).
_SUB_BLOCKS = ((3, REVISION_KEYS, 8), (4, ATTRIBUTE_KEYS, 8 + len(REVISION_KEYS)))


class _Scan(NamedTuple):
    """Per-case fields read from the records: small ints and the key_ids, in file order."""

    key_ids: list[str]
    n: int
    lesions: list[int]
    paths: list[int]
    flat: list[int]
    events: list[tuple[int, int, int]]
    tokens: tuple[int, int] = (0, 0)  # (prompt, cached prompt) of the scored cases


def _status(block: Mapping[str, Any], where: str, key: str, problems: list[str]) -> int | None:
    """Index of ``block["status"]`` in ``schema.STATUSES``; None (and a problem) if unknown."""
    status = block["status"]
    index = _STATUS_INDEX.get(status) if isinstance(status, str) else None
    if index is None:
        problems.append(f"{key}: {where}.status: expected one of {', '.join(STATUSES)}, "
                        f"found {status!r}")
    return index


def _score_record(key: str, stages: tuple[int, ...], blocks: list[dict[str, Any]],
                  row: list[int], events: list[tuple[int, int, int]], case: int,
                  bad_flags: list[str], bad_status: list[str]) -> None:
    """Fill one case's flat row and status events from its result blocks.

    Flags: ``row[s - 1]`` stage s correct, ``row[4 + s - 1]`` its result missing (empty block
    or no ``correct``: counted wrong, docs/differences.md D41), ``row[8 + j]`` sub-question j
    correct (an absent sub-question block counts wrong). Non-boolean ``correct`` flags go to
    ``bad_flags``, unknown statuses to ``bad_status``.
    """
    for stage in stages:
        block = blocks[stage - 1]
        if "correct" not in block:
            row[4 + stage - 1] = 1
        elif (flag := block["correct"]) is True:
            row[stage - 1] = 1
        elif flag is not False:
            bad_flags.append(f"{key}: {_BLOCKS[stage - 1]}.correct: expected true/false, "
                             f"found {flag!r}")
        if stage <= 2 and "status" in block:
            status = _status(block, _BLOCKS[stage - 1], key, bad_status)
            if status is not None:
                events.append((case, stage - 1, status))
    for stage, subs, offset in _SUB_BLOCKS:
        if stage not in stages:
            continue
        for j, sub_key in enumerate(subs):
            sub = blocks[stage - 1].get(sub_key, _EMPTY)
            if type(sub) is not dict:
                continue  # not a result block: flag absent (counted wrong)
            if "correct" in sub:
                if (flag := sub["correct"]) is True:
                    row[offset + j] = 1
                elif flag is not False:
                    bad_flags.append(f"{key}: {_BLOCKS[stage - 1]}.{sub_key}.correct: expected "
                                     f"true/false, found {flag!r}")
            if "status" in sub:
                status = _status(sub, f"{_BLOCKS[stage - 1]}.{sub_key}", key, bad_status)
                if status is not None:
                    events.append((case, stage - 1, status))


def _scan(data: Any, source: str | Path, limit: int | None) -> _Scan:
    """Check every record and read the scored fields of the first ``limit`` ones.

    Raises:
        SchemaError: Listing, under the file name, every record that breaks the schema
            (``schema.CaseResult``, or a ``key_id`` that differs from its key), that cannot be
            scored (unknown lesion prefix, non-boolean ``correct``) or has an unknown status.
    """
    if not isinstance(data, dict):
        raise SchemaError(f"{source}: expected a JSON object keyed by key_id")
    keep = len(data) if limit is None else max(limit, 0)
    no_attr_ids = {_LESION_INDEX[le] for le in NO_ATTRIBUTE_LESIONS}
    key_ids: list[str] = []
    lesions: list[int] = []
    paths: list[int] = []
    flat: list[int] = []
    events: list[tuple[int, int, int]] = []  # (case, stage - 1, status index)
    lesion_of: dict[str, int] = {}
    invalid: dict[str, Any] = {}  # breaks schema.CaseResult: worded by parse_all_results
    renamed: list[str] = []
    unscorable: list[str] = []
    bad_status: list[str] = []
    prompt = cached = 0
    for i, (key, rec) in enumerate(data.items()):
        qa_path = rec.get("qa_path") if type(rec) is dict else None
        path = _PATH_INDEX.get(qa_path) if type(qa_path) is str else None
        blocks = [rec.get(b, _EMPTY) for b in _BLOCKS] if path is not None else []
        if (path is None or "detection_qa" not in rec or type(rec.get("key_id")) is not str
                or any(type(b) is not dict for b in blocks)):
            invalid[key] = rec
            continue
        if rec["key_id"] != key:
            renamed.append(f"{key}: record key_id is '{rec['key_id']}'")
            continue
        if i >= keep:
            continue  # checked like every record, not scored
        prefix = key.split("_", 1)[0]
        lesion = lesion_of.get(prefix)
        if lesion is None:
            lesion = _LESION_INDEX.get(prefix)
            if lesion is None:
                unscorable.append(f"{key}: {_lesion_error(key)}")
                continue
            lesion_of[prefix] = lesion
        row = [0] * _ROW
        bad_flags: list[str] = []
        _score_record(key, _STAGES[(path, lesion in no_attr_ids)], blocks, row, events,
                      len(key_ids), bad_flags, bad_status)
        if bad_flags:
            unscorable.append(f"{key}: " + "; ".join(bad_flags))
        key_ids.append(key)
        lesions.append(lesion)
        paths.append(path)
        flat.extend(row)
        usage = rec.get("token_usage")
        if type(usage) is dict:
            p, c = usage.get("input_tokens"), usage.get("cached_input_tokens")
            prompt += p if type(p) is int else 0
            cached += c if type(c) is int else 0
    _raise_problems(source, invalid, renamed, unscorable, bad_status)
    return _Scan(key_ids, len(key_ids), lesions, paths, flat, events, (prompt, cached))


def _lesion_error(key: str) -> str:
    """The message of ``lesions.lesion_from_key_id`` for a key_id without a lesion prefix."""
    try:
        lesion_from_key_id(key)
    except ChexperceptError as exc:
        return str(exc)
    return f"key_id '{key}': no lesion prefix"  # pragma: no cover - the caller checked it


def _raise_problems(source: str | Path, invalid: Mapping[str, Any], renamed: list[str],
                    unscorable: list[str], bad_status: list[str]) -> None:
    """Raise one SchemaError with every problem of the file (nothing when there is none)."""
    sections = []
    if invalid:
        unused = set(UNUSED_RECORD_KEYS)
        records = {k: {f: v for f, v in r.items() if f not in unused} if isinstance(r, dict)
                   else r for k, r in invalid.items()}
        try:
            parse_all_results(records, source)
        except SchemaError as exc:
            sections.append(str(exc))
        else:  # pragma: no cover - not plain JSON objects (e.g. Mapping subclasses)
            sections.append(f"{source}: {len(records)} record(s) are not JSON objects: "
                            + ", ".join(records))
    elif renamed:
        sections.append(f"{source}: {len(renamed)} schema problem(s):\n  " + "\n  ".join(renamed))
    if unscorable:
        sections.append(f"{source}: {len(unscorable)} case(s) cannot be scored:\n  "
                        + "\n  ".join(unscorable))
    if bad_status:
        sections.append(f"{source}: {len(bad_status)} bad status value(s):\n  "
                        + "\n  ".join(bad_status))
    if sections:
        raise SchemaError("\n".join(sections))


def _table(name: str, scan: _Scan, key_pool: dict[str, str] | None) -> CaseTable:
    """Derive every metric column (:data:`METRICS`) from a :class:`_Scan`."""
    n, key_ids = scan.n, scan.key_ids
    if key_pool is not None:
        key_ids = [key_pool.setdefault(k, k) for k in key_ids]
    lesion = np.array(scan.lesions, dtype=np.int8)
    path = np.array(scan.paths, dtype=np.int8)
    rows = np.array(scan.flat, dtype=np.int8).reshape(n, _ROW)
    asked, app = layout(lesion, path)
    oracle = rows[:, :4].astype(bool) & asked
    prefix = np.cumprod(np.where(asked, oracle, True), axis=1, dtype=np.int8).astype(bool)
    e2e = prefix & asked
    bonus = np.isin(lesion, _NO_ATTRIBUTE) & (path != _LESION_FREE) & prefix[:, 3]
    depth = e2e.sum(axis=1) + bonus

    values = np.zeros((n, len(METRICS)))
    for k in range(4):
        values[:, METRIC_INDEX[f"e2e:stage{k + 1}"]] = e2e[:, k]
        values[:, METRIC_INDEX[f"oracle:stage{k + 1}"]] = oracle[:, k]
        m = METRIC_INDEX[f"reach:{k + 1}"]
        values[:, m] = (depth >= k + 1) & app[:, m]
    values[:, METRIC_INDEX["depth"]] = depth
    for j, key in enumerate(SUB_KEYS):
        values[:, METRIC_INDEX[f"sub:{key}"]] = rows[:, 8 + j]
    status = np.zeros((n, 4, len(STATUSES)), dtype=np.int32)
    if scan.events:
        ev = np.array(scan.events, dtype=np.int64)
        np.add.at(status, (ev[:, 0], ev[:, 1], ev[:, 2]), 1)
    return CaseTable(name=name, key_ids=tuple(key_ids), lesion=lesion, path=path,
                     values=values, applicable=app, missing=rows[:, 4:8].astype(bool) & asked,
                     status=status, has_status=bool(scan.events),
                     prompt_tokens=scan.tokens[0], cached_prompt_tokens=scan.tokens[1])


def case_table(name: str, records: Mapping[str, Any], *, source: str | Path = "all_results",
               limit: int | None = None, key_pool: dict[str, str] | None = None) -> CaseTable:
    """Validate and score in-memory ``all_results.json`` records into a :class:`CaseTable`.

    Args:
        name: Run folder name (the table's ``name``).
        records: key_id -> record (the parsed file, unfinished cases already removed by
            :func:`split_unfinished`); not modified.
        source: File name used in error messages.
        limit: Score only the first ``limit`` records in file order (every record is still
            validated); None scores all.
        key_pool: Optional dict shared between runs so their equal key_id strings are
            stored once.

    Returns:
        The run's table: rows in record order, 0/1 values (depth 0-4).

    Raises:
        SchemaError: Naming ``source`` and every key_id whose record breaks the schema
            (including a ``key_id`` field that differs from its key), cannot be scored
            (unknown lesion prefix, non-boolean ``correct``) or has a ``status`` outside
            ``schema.STATUSES`` (all problems, one error).
    """
    return _table(name, _scan(records, source, limit), key_pool)


def read_case_table(run_dir: str | Path, name: str, *, limit: int | None = None,
                    key_pool: dict[str, str] | None = None
                    ) -> tuple[CaseTable, dict[str, str]]:
    """Read one run's ``all_results.json`` (once, through its run store) into its table.

    The cases Stage 03 marked unfinished are removed first (:func:`split_unfinished`); the
    parsed file is dropped before the table is built, so only the table outlives the call.

    Args:
        run_dir: The run folder (``<results-dir>/<run>/oracle_<setting>/``), read through
            :class:`chexpercept.run_store.RunStore`.
        name: Run folder name (the table's ``name``).
        limit: Score only the first ``limit`` finished cases in file order (``--limit``);
            None scores all.
        key_pool: Optional dict shared between runs so equal key_ids are stored once.

    Returns:
        ``(table, unfinished)``: the table (see :func:`case_table`) and the unfinished cases,
        key_id -> reason, in file order.

    Raises:
        InputError: If the file is missing.
        SchemaError: On invalid JSON, or any problem listed by :func:`case_table`.
    """
    store = RunStore(run_dir)
    # Validated while scanned (_scan names every bad key_id), not twice.
    data = store.read_results(validate=False, missing_ok=False)
    return results_case_table(data, store.results_path, name, limit=limit, key_pool=key_pool)


def results_case_table(data: Any, path: str | Path, name: str, *, limit: int | None = None,
                       key_pool: dict[str, str] | None = None
                       ) -> tuple[CaseTable, dict[str, str]]:
    """:func:`read_case_table` of an already parsed ``all_results.json``.

    Stage 04 parses each run once and hands the same object to the viewer first
    (``viewer.convert_run``, read only) and then here.

    Args:
        data: The parsed file (key_id -> record); the unfinished cases are removed from it
            (:func:`split_unfinished`), nothing else is changed.
        path: The file (named in errors and warnings).
        name: Run folder name (the table's ``name``).
        limit: As :func:`read_case_table`.
        key_pool: As :func:`read_case_table`.

    Returns:
        ``(table, unfinished)`` as :func:`read_case_table`.

    Raises:
        SchemaError: On any problem listed by :func:`case_table`.
    """
    unfinished = split_unfinished(path, data)
    return _table(name, _scan(data, path, limit), key_pool), unfinished
