"""Core: atomic file writes and JSON / JSONL / CSV reading and writing.

A file is written to a temporary sibling and renamed into place, so a reader never sees half a
file and a killed writer leaves the old one (docs/design.md, "Resume").
"""

from __future__ import annotations

import contextlib
import csv
import gc
import hashlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chexpercept.errors import InputError, SchemaError

# --------------------------------------------------------------------------------------
# Atomic writes
# --------------------------------------------------------------------------------------


def _file_mode() -> int:
    """0o666 minus the process umask (what ``open(path, "w")`` would give)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_FILE_MODE = _file_mode()


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path next to ``path``; rename it onto ``path`` only if the block succeeds.

    A crash never leaves a half-written ``path``: either the old file or the new one exists.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, _FILE_MODE)  # mkstemp makes 0600; outputs get the usual umask-based mode
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + rename)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


#: Types returned by :func:`to_jsonable` as they are (checked by exact type first: most values
#: of a record are these, and ``isinstance`` against the ``Mapping`` ABC is slow).
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays, tuples, sets and Paths into plain JSON types."""
    kind = type(obj)
    if kind in _JSON_SCALARS:
        return obj
    if kind is dict:
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if kind is list:
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [to_jsonable(v) for v in sorted(obj)]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def dumps_json(obj: Any, *, indent: int | None = 2) -> str:
    """Deterministic JSON text (insertion order kept, UTF-8, trailing newline)."""
    return json.dumps(to_jsonable(obj), indent=indent, ensure_ascii=False) + "\n"


def write_json_atomic(path: str | Path, obj: Any, *, indent: int | None = 2) -> None:
    """Write ``obj`` as JSON atomically; numpy types are converted (see :func:`to_jsonable`)."""
    write_text_atomic(path, dumps_json(obj, indent=indent))


def _json_error(exc: ValueError | RecursionError, where: str) -> SchemaError:
    """The :class:`SchemaError` for a parser failure ``exc`` on the JSON of ``where``.

    Besides malformed text the parser fails on input it cannot hold: nesting deeper than the
    interpreter's recursion limit (``[[[...`` 200,000 deep raises ``RecursionError``) or an
    integer of more digits than ``sys.get_int_max_str_digits()`` (``ValueError``).
    """
    if isinstance(exc, json.JSONDecodeError):
        return SchemaError(f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}): "
                           f"{exc.msg}")
    if isinstance(exc, UnicodeDecodeError):
        return SchemaError(f"{where}: not UTF-8 text (byte {exc.start}), so not JSON")
    if isinstance(exc, RecursionError):
        return SchemaError(f"{where}: not usable JSON: arrays or objects nested inside one "
                           f"another deeper than the parser can follow "
                           f"({sys.getrecursionlimit()} levels)")
    return SchemaError(f"{where}: not usable JSON: {exc}")


def loads_json(text: str | bytes, where: str) -> Any:
    """Parse JSON text that came from ``where`` (a file, a file's line, a dataset column).

    Raises:
        SchemaError: Naming ``where``, if the text is not valid JSON, is nested too deeply to
            parse or holds a number too long to parse.
    """
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _json_error(exc, where) from None


def read_json(path: str | Path) -> Any:
    """Read a JSON file (the one reader of every JSON artifact and input).

    The cyclic garbage collector is paused while the text is parsed: parsed JSON holds no
    reference cycles, and a large file would otherwise set the collector off many times
    (``json.loads`` of a 9 MiB benchmark-sized file: 19 ms instead of 22 ms).

    Raises:
        InputError: If the file is missing.
        SchemaError: If it is not UTF-8, not valid JSON (the message gives line and column),
            nested too deeply to parse or holds a number too long to parse; the message names
            the file.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _json_error(exc, str(path)) from None
    enabled = gc.isenabled()
    gc.disable()
    try:
        return loads_json(text, str(path))
    finally:
        if enabled:
            gc.enable()


def append_jsonl(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append one JSON record as a line and flush it to disk (crash-safe progress log)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(to_jsonable(record), ensure_ascii=False) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file; a truncated last line (killed writer) is ignored, others must parse.

    Raises:
        SchemaError: If the file is not UTF-8, a line other than the last one is not valid
            JSON, or any line is nested too deeply or holds a number too long to parse
            (naming the file and the line).
    """
    path = Path(path)
    if not path.is_file():
        return []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise _json_error(exc, str(path)) from None
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise SchemaError(f"{path}: line {i + 1} is not valid JSON") from None
        except (ValueError, RecursionError) as exc:
            raise _json_error(exc, f"{path}, line {i + 1}") from None
    return out


def write_csv_atomic(
    path: str | Path, rows: Iterable[Mapping[str, Any]], columns: Sequence[str]
) -> None:
    """Write rows as CSV with exactly ``columns`` in that order, atomically.

    Missing values are written as empty cells; extra keys are an error (no silent drop).

    Raises:
        SchemaError: If a row has a key not in ``columns``.
    """
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for i, row in enumerate(rows):
        extra = set(row) - set(columns)
        if extra:
            raise SchemaError(f"{path}: row {i} has keys not in the columns: {sorted(extra)}")
        writer.writerow({c: "" if row.get(c) is None else row.get(c) for c in columns})
    write_text_atomic(path, buf.getvalue())


def read_csv_rows(path: str | Path, required: Sequence[str] = ()) -> list[dict[str, str]]:
    """Read a CSV as a list of string dicts (all cells as text, blanks as '').

    Args:
        path: The CSV file.
        required: Columns that must be present.

    Raises:
        InputError: If the file is missing.
        SchemaError: If required columns are missing (named in the message).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"file not found: {path}")
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise SchemaError(f"{path}: missing column(s) {missing}; found {header}")
        return [{k: (v if v is not None else "") for k, v in row.items()} for row in reader]


#: Bytes read at a time by :func:`file_sha256`.
SHA256_CHUNK_BYTES = 1 << 20


def file_sha256(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes, streamed in :data:`SHA256_CHUNK_BYTES` chunks.

    Raises:
        OSError: If the file cannot be read.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(SHA256_CHUNK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()
