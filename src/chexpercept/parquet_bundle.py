"""Core: the parquet (Hugging Face dataset) form of a benchmark bundle, its columns and its reading.

Stage 02's ``03_export_hf_dataset.py`` writes it (:mod:`chexpercept.qa.hf_export`); Stage 03
reads it (``00_eval.py --benchmark-dir <dataset folder>``) through :func:`unpack_parquet_bundle`,
which turns it back into the folder form (``chexpercept.json`` + ``chexpercept/<key_id>/``)
under the cache (:func:`chexpercept.layouts.unpacked_bundle_dir`), so every reader, the
validator and the one image loader see exactly the bytes the folder bundle had. Layout and
columns: docs/hf_dataset.md.

Reading needs ``pyarrow`` only (extra ``hf-dataset``); writing the dataset also needs
``datasets`` for the feature metadata that makes ``datasets.load_dataset`` decode the images.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chexpercept.errors import InputError, SchemaError
from chexpercept.files import loads_json, write_json_atomic
from chexpercept.layouts import (
    BenchmarkLayout,
    key_id_problem,
    parquet_digest_index_path,
    relative_path_problem,
    unpacked_bundle_dir,
)
from chexpercept.parquet_columns import VIEW_COLUMNS, view_mismatches
from utils.deps import require

logger = logging.getLogger(__name__)

#: The one split of the dataset (a benchmark is all test data).
SPLIT = "test"
#: Folder of the shards inside the dataset folder.
DATA_DIR = "data"
#: Marker of the format, written in the dataset card (docs/hf_dataset.md, "Layout").
PARQUET_FORMAT = "chexpercept-hf-parquet/1"
#: Bundle files copied next to the shards unchanged (licences, the sampling summary).
SIDECAR_FILES = ("data_sources.json", "sampling_summary.json")

#: The case's ``chexpercept.json`` value as JSON text; what Stage 03 reads (docs/hf_dataset.md).
CASE_JSON = "case_json"
#: Single-image columns and the bundle-relative folder their image sits in.
IMAGE_COLUMNS = ("detection_image", "contour_eval_image", "points_image")
#: List-of-images column: the revision-result option images, in option order.
OPTION_IMAGES = "option_images"
#: Columns the reader needs; the question columns are views of ``case_json`` for browsing.
REQUIRED_COLUMNS = ("key_id", CASE_JSON, *IMAGE_COLUMNS, OPTION_IMAGES)
#: Cases per parquet read while unpacking (bounds memory to a few cases' images).
READ_BATCH_CASES = 8
#: Most bytes of one embedded image (docs/hf_dataset.md, "Size bounds"): above an uncompressed
#: 4096 x 4096 RGB radiograph (48 MiB); a bundle's images are 1024 x 1024 PNGs of a few MiB.
MAX_IMAGE_BYTES = 64 * 2**20
#: Most bytes of one row's columns that are read (``key_id``, ``case_json`` and the images;
#: docs/hf_dataset.md, "Size bounds"): a case holds at most 7 images.
MAX_ROW_BYTES = 512 * 2**20


@dataclass(frozen=True)
class SizeBounds:
    """What one row of a parquet benchmark may hold (docs/hf_dataset.md, "Size bounds").

    Attributes:
        max_image_bytes: Most bytes of one embedded image (default :data:`MAX_IMAGE_BYTES`).
        max_row_bytes: Most bytes of the columns read of one row (default
            :data:`MAX_ROW_BYTES`); a row group whose columns hold more than this times its
            rows is refused from the file's metadata, before any value is read.
    """

    max_image_bytes: int = MAX_IMAGE_BYTES
    max_row_bytes: int = MAX_ROW_BYTES


def shard_name(index: int, count: int) -> str:
    """``test-<index>-of-<count>.parquet`` (5 digits each; the name ``datasets`` gives a split)."""
    return f"{SPLIT}-{index:05d}-of-{count:05d}.parquet"


def parquet_files(root: str | Path) -> list[Path]:
    """The parquet shards under ``root`` (any depth, hidden names skipped), sorted by path."""
    root = Path(root)
    return sorted(p for p in root.rglob("*.parquet")
                  if p.is_file() and not any(part.startswith(".")
                                             for part in p.relative_to(root).parts))


def is_parquet_bundle(root: str | Path) -> bool:
    """Whether ``root`` is a parquet dataset folder rather than a folder bundle.

    True when it has no ``chexpercept.json`` and holds at least one ``*.parquet`` file.
    """
    root = Path(root)
    return (root.is_dir() and not BenchmarkLayout(root).json_path.exists()
            and bool(parquet_files(root)))


#: Digests already computed in this process, keyed by every file's (path, size, mtime_ns):
#: Stage 03 loads the bundle twice (selection, then the run), and a paper-sized dataset is GBs.
_DIGESTS: dict[tuple[tuple[str, int, int], ...], str] = {}
def _read_digest_index() -> dict[str, str]:
    """The cross-process digest index; empty when absent or unreadable (it is only a cache)."""
    try:
        index = json.loads(parquet_digest_index_path().read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return index if isinstance(index, dict) else {}


def _digest_files(root: Path) -> list[Path]:
    """The files the digest covers: the shards, then the sidecars present."""
    return [*parquet_files(root), *(root / n for n in SIDECAR_FILES if (root / n).is_file())]


def dataset_digest(root: str | Path) -> str:
    """sha256 (hex) of every shard's and sidecar's relative path, size and bytes, in order.

    Names the unpacked copy (:func:`unpack_parquet_bundle`): any change to a shard or a
    sidecar gives a new one. Computed once for unchanged files (same path, size and
    modification time): remembered in this process and in the cache's
    ``layouts.parquet_digest_index_path()``, so another process reuses it without reading
    the shards.
    """
    root = Path(root)
    files = _digest_files(root)
    key = tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if key in _DIGESTS:
        return _DIGESTS[key]
    key_hash = hashlib.sha256(repr(key).encode()).hexdigest()
    index = _read_digest_index()
    known = index.get(key_hash)
    if isinstance(known, str) and re.fullmatch(r"[0-9a-f]{64}", known):
        _DIGESTS[key] = known
        return known
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.relative_to(root).as_posix()}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    _DIGESTS[key] = digest.hexdigest()
    try:  # re-read: another process may have added its own entry meanwhile
        write_json_atomic(parquet_digest_index_path(),
                          {**_read_digest_index(), key_hash: _DIGESTS[key]})
    except OSError as exc:
        logger.warning("parquet digest not remembered in %s (%s); it is computed again next "
                       "time", parquet_digest_index_path(), exc)
    return _DIGESTS[key]


def unpack_parquet_bundle(root: str | Path, bounds: SizeBounds = SizeBounds()) -> Path:
    """The folder form of a parquet dataset, written once into the cache and reused.

    Each row's ``case_json`` becomes its ``chexpercept.json`` value (rows in shard-path order,
    then row order; written by :func:`chexpercept.files.write_json_atomic`, so a bundle
    exported by Stage 02 gives a byte-identical ``chexpercept.json``), each embedded image is
    written, byte for byte, to ``chexpercept/<key_id>/<its path column>``, and the sidecar files
    (:data:`SIDECAR_FILES`) are copied. The folder is built under a temporary name and renamed
    into place, so a crash never leaves a half-written bundle. Nothing is decoded here: the
    validator and the providers decode the files with the one image loader, as for a folder
    bundle (docs/hf_dataset.md, "Reading it back").

    Args:
        root: The dataset folder (shards under ``data/``, as written by Stage 02 or by
            ``datasets``' ``push_to_hub``).
        bounds: What one row may hold (:class:`SizeBounds`; docs/hf_dataset.md, "Size
            bounds"): a row group above them is refused from the shard's metadata before its
            values are read, a row or an image above them before anything of it is written.

    Returns:
        The folder bundle (``chexpercept.json`` + ``chexpercept/``) in the cache
        (:func:`chexpercept.layouts.unpacked_bundle_dir` of :func:`dataset_digest`).

    Raises:
        MissingDependencyError: If pyarrow is not installed (names the extra).
        InputError: If ``root`` holds no shard or no row, a shard lacks a needed column, a
            key_id is not a safe folder name, an image has no embedded bytes or a path
            that is absolute or climbs (names the shard and the key_id; the one path rule,
            docs/benchmark_format.md, "Paths a bundle names"), or a row group, a row or an
            image is larger than ``bounds`` (names the shard, the row and the key_id).
        SchemaError: If a ``case_json`` is not JSON, names a ``relative_path`` that is
            absolute or climbs (names shard, key_id and field), or a key_id repeats.
    """
    root = Path(root)
    if not parquet_files(root):
        raise InputError(f"{root}: no parquet shard found (a parquet benchmark holds "
                         f"{DATA_DIR}/{shard_name(0, 1)} and its siblings)")
    dest = unpacked_bundle_dir(dataset_digest(root))
    if BenchmarkLayout(dest).json_path.is_file():
        logger.info("parquet benchmark %s: using its unpacked copy %s", root, dest)
        return dest
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        items = _unpack_rows(root, BenchmarkLayout(tmp), bounds)
        if not items:  # else the unpacked copy is an empty bundle, refused later as a folder
            raise InputError(f"{root}: the parquet shards hold no case (0 rows); re-export "
                             f"it with 03_export_hf_dataset.py")
        write_json_atomic(BenchmarkLayout(tmp).json_path, items)
        for name in SIDECAR_FILES:
            if (root / name).is_file():
                shutil.copyfile(root / name, tmp / name)
        _move_into_place(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("parquet benchmark %s: %d case(s) unpacked to %s", root, len(items), dest)
    return dest


def _move_into_place(tmp: Path, dest: Path) -> None:
    """Rename ``tmp`` to ``dest``; another process that got there first wins (same content)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, dest)
    except OSError:
        if not BenchmarkLayout(dest).json_path.is_file():
            raise


def _unpack_rows(root: Path, layout: BenchmarkLayout, bounds: SizeBounds) -> dict[str, Any]:
    """Write every row's images under ``layout`` and return the cases (key_id -> value).

    Raises:
        InputError, SchemaError: As :func:`unpack_parquet_bundle`.
    """
    items: dict[str, Any] = {}
    for shard, number, row in _rows(root, bounds):
        key_id = row["key_id"]
        where = f"{shard}, row {number}, key_id {key_id!r}"
        unsafe = key_id_problem(key_id)
        if unsafe is not None:
            raise InputError(f"{where}: column key_id {unsafe}")
        if key_id in items:
            raise SchemaError(f"{where}: the key_id appears twice in the dataset")
        if not isinstance(row[CASE_JSON], (str, bytes)):
            raise SchemaError(f"{where}: column {CASE_JSON} is not JSON text")
        images = list(_row_images(row, where))
        _check_row_size(row, images, where, bounds)  # before its JSON is parsed
        items[key_id] = loads_json(row[CASE_JSON], f"{where}, column {CASE_JSON}")
        outside = [f"{field} {value!r} {relative_path_problem(value)}"
                   for field, value in _relative_paths(items[key_id], CASE_JSON)
                   if relative_path_problem(value) is not None]
        if outside:
            raise SchemaError(f"{where}: " + "; ".join(outside))
        # the browsing columns are views of case_json: one that says another thing is refused,
        # so what the hub shows is what Stage 03 asks (docs/hf_dataset.md, "Reading it back")
        differ = view_mismatches(key_id, items[key_id], row, where)
        if differ:
            raise SchemaError(f"{where}: column(s) disagree with {CASE_JSON}, which Stage 03 "
                              f"reads: " + "; ".join(differ) + " (re-export the dataset with "
                              "03_export_hf_dataset.py)")
        for relpath, data in images:
            target = layout.case_file(key_id, relpath, field=f"{where}: image path")
            if target.exists():
                raise InputError(f"{where}: two images have the path {relpath}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return items


def _check_row_size(row: dict[str, Any], images: list[tuple[str, bytes]], where: str,
                    bounds: SizeBounds) -> None:
    """Refuse a row whose image or whose read columns are larger than ``bounds``.

    Raises:
        InputError: Naming ``where`` (shard, row, key_id), the image or the row's size and the
            bound (docs/hf_dataset.md, "Size bounds").
    """
    for relpath, data in images:
        if len(data) > bounds.max_image_bytes:
            raise InputError(f"{where}: image {relpath!r} is {len(data)} bytes, more than the "
                             f"{bounds.max_image_bytes} bytes an image may hold "
                             f"(docs/hf_dataset.md, 'Size bounds'); nothing is left in the cache")
    case_json = row[CASE_JSON]
    total = (sum(len(data) for _, data in images) + len(row["key_id"])
             + len(case_json.encode() if isinstance(case_json, str) else case_json))
    if total > bounds.max_row_bytes:
        raise InputError(f"{where}: the row holds {total} bytes (case_json and images), more "
                         f"than the {bounds.max_row_bytes} bytes a row may hold "
                         f"(docs/hf_dataset.md, 'Size bounds'); nothing is left in the cache")


def _group_bytes(group: Any) -> int:
    """Uncompressed bytes of the columns read in a row group.

    They are :data:`REQUIRED_COLUMNS` and the view columns (``parquet_columns.VIEW_COLUMNS``),
    which are checked against ``case_json``.
    """
    read = {*REQUIRED_COLUMNS, *VIEW_COLUMNS}
    return sum(group.column(j).total_uncompressed_size for j in range(group.num_columns)
               if group.column(j).path_in_schema.split(".")[0] in read)


def _check_group_size(source: Any, shard: Path, index: int, first_row: int,
                      bounds: SizeBounds) -> None:
    """Refuse a row group larger than ``bounds`` allow its rows, from the metadata alone.

    A row group whose read columns hold more than ``max_row_bytes`` times its rows has a row
    above the bound; its values are not read. The message names the shard, the rows and their
    key_ids (the ``key_id`` column alone is read, when it is small enough).

    Raises:
        InputError: For such a row group (docs/hf_dataset.md, "Size bounds").
    """
    group = source.metadata.row_group(index)
    size, rows = _group_bytes(group), group.num_rows
    if size <= bounds.max_row_bytes * max(rows, 1):
        return
    key_column = next(j for j in range(group.num_columns)
                      if group.column(j).path_in_schema == "key_id")
    key_ids: list[Any] = []
    if group.column(key_column).total_uncompressed_size <= 1024 * max(rows, 1):
        key_ids = source.read_row_group(index, columns=["key_id"]).column(0).to_pylist()
    last = first_row + rows - 1
    which = f"row {first_row}" if rows == 1 else f"rows {first_row}-{last}"
    named = (f", key_id {key_ids[0]!r}" if len(key_ids) == 1 else
             f", key_ids {key_ids[:5]!r}{' ...' if len(key_ids) > 5 else ''}" if key_ids else "")
    raise InputError(f"{shard}, {which}{named}: row group {index} holds {size} bytes in the "
                     f"columns read, more than the {bounds.max_row_bytes} bytes a row may hold "
                     f"x {rows} row(s) (docs/hf_dataset.md, 'Size bounds'); its values were "
                     f"not read and nothing is left in the cache")


def _rows(root: Path, bounds: SizeBounds) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    """``(shard, row number in the shard, row)`` of every row, a few cases at a time.

    Shards in path order; each row group's size is checked from the metadata before it is read
    (:func:`_check_group_size`).

    Raises:
        InputError: For an unreadable shard, a missing column or a row group above ``bounds``.
    """
    pq = require("pyarrow.parquet", "hf-dataset", "reading a parquet benchmark")
    for shard in parquet_files(root):
        try:
            source = pq.ParquetFile(shard)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise InputError(f"{shard}: not a readable parquet file ({exc})") from None
        missing = [c for c in REQUIRED_COLUMNS if c not in source.schema_arrow.names]
        if missing:
            raise InputError(f"{shard}: missing column(s) {missing}; a parquet benchmark has "
                             f"the columns of docs/hf_dataset.md, 'Columns' (re-export it with "
                             f"03_export_hf_dataset.py)")
        read = [*REQUIRED_COLUMNS,
                *(c for c in VIEW_COLUMNS if c in source.schema_arrow.names)]  # to check them
        number = 0
        for index in range(source.metadata.num_row_groups):
            _check_group_size(source, shard, index, number, bounds)
            for batch in source.iter_batches(batch_size=READ_BATCH_CASES, row_groups=[index],
                                             columns=read):
                for row in batch.to_pylist():
                    yield shard, number, row
                    number += 1


def _row_images(row: dict[str, Any], where: str) -> Iterator[tuple[str, bytes]]:
    """Each embedded image of a row as ``(path relative to its case folder, bytes)``."""
    values = [row[c] for c in IMAGE_COLUMNS if row[c] is not None]
    values += list(row[OPTION_IMAGES] or ())
    for value in values:
        path, data = value.get("path"), value.get("bytes")
        if not data:
            raise InputError(f"{where}: image {path!r} has no embedded bytes (a parquet "
                             f"benchmark embeds every image; docs/hf_dataset.md, 'Columns')")
        problem = relative_path_problem(path)
        if problem is not None:
            raise InputError(f"{where}: image path {path!r} {problem} (expected e.g. "
                             f"detection_qa/xray.png)")
        yield path, data


def _relative_paths(value: Any, where: str) -> Iterator[tuple[str, Any]]:
    """``(field, value)`` of every ``relative_path`` key in a case's JSON, at any depth.

    These are the files a case names (docs/benchmark_format.md, "JSON fields"); each must pass
    :func:`chexpercept.layouts.relative_path_problem`.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            field = f"{where}.{key}"
            if key == "relative_path":
                yield field, item
            else:
                yield from _relative_paths(item, field)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _relative_paths(item, f"{where}[{i}]")


__all__ = [
    "CASE_JSON",
    "DATA_DIR",
    "IMAGE_COLUMNS",
    "OPTION_IMAGES",
    "PARQUET_FORMAT",
    "REQUIRED_COLUMNS",
    "MAX_IMAGE_BYTES",
    "MAX_ROW_BYTES",
    "SIDECAR_FILES",
    "SPLIT",
    "SizeBounds",
    "dataset_digest",
    "is_parquet_bundle",
    "parquet_files",
    "shard_name",
    "unpack_parquet_bundle",
]
