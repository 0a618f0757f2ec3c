"""Core: the sha256 of a benchmark's image bytes, part of a Stage 03 run's identity.

See docs/evaluation_protocol.md, "Run folder". A run's answers were given on images as much as on
``chexpercept.json``; :func:`digest_files` hashes every image file the bundle's cases send
(listed by ``evaluation.cases.bundle_images``) in one streaming pass, and :func:`combined_digest`
folds the sorted ``(relative path, sha256)`` list into the manifest's
:data:`IMAGES_SHA_FIELD`. The per-file map is kept beside the run (:func:`image_digests_path`), so
a resume over a changed image names the key_id and the file (:func:`changed_images`).

Each file's sha256 is remembered in the cache (:func:`image_digest_cache_path`) under its
absolute path, size, modification time, change time and inode: a second run or a resume over an
unchanged bundle costs one ``stat`` per file. The cache is data, never code: JSON, at most
:data:`MAX_CACHE_ENTRIES` files and :data:`MAX_CACHE_BYTES` bytes, written atomically; a cache
that is missing, corrupt or too large is ignored (the digests are computed again), never an error.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chexpercept.errors import SchemaError
from chexpercept.files import file_sha256, loads_json, read_json, write_json_atomic
from chexpercept.layouts import cache_root

logger = logging.getLogger(__name__)

#: Manifest field (an identity field): sha256 of the sorted (relative path, file sha256) list of
#: every image the bundle's cases send.
IMAGES_SHA_FIELD = "benchmark_images_sha256"
#: Side file of a run folder: that digest and the per-file map it was made from.
IMAGE_DIGESTS_NAME = "image_digests.json"
#: Marker of the cache file's format (another marker: the cache is ignored).
CACHE_FORMAT = "chexpercept-image-digest-cache/1"
#: Most files the cache remembers (a full bundle sends about 40,000 images).
MAX_CACHE_ENTRIES = 200_000
#: Largest cache file read (bytes); a larger one is ignored and rewritten.
MAX_CACHE_BYTES = 64 * 2**20
#: Digest entry of an image file that does not exist (or cannot be read).
MISSING = None
#: Changed files named in a message before "... and N more".
MAX_NAMED = 10

_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ImageDigests:
    """The images of a bundle: their combined digest and each file's.

    Attributes:
        sha256: :func:`combined_digest` of ``files`` (64 hex characters).
        files: Relative path under the bundle's ``chexpercept/`` folder (``<key_id>/...``,
            ``/``-separated) -> the file's sha256 (hex), or None for a file that is missing or
            unreadable.
    """

    sha256: str
    files: dict[str, str | None]


def image_digest_cache_path() -> Path:
    """``<cache>/image_digests.json``: each image file's sha256 by path, size and times.

    Under :func:`chexpercept.layouts.cache_root` (``$CHEXPERCEPT_CACHE_DIR``).
    """
    return cache_root() / "image_digests.json"


def image_digests_path(run_dir: str | Path) -> Path:
    """``<run_dir>/image_digests.json``: the run's per-image digests (``IMAGE_DIGESTS_NAME``)."""
    return Path(run_dir) / IMAGE_DIGESTS_NAME


def combined_digest(files: Mapping[str, str | None]) -> str:
    """sha256 (hex) of ``<relative path> NUL <sha256, or '-'> LF`` over the sorted paths."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(f"{rel}\0{files[rel] or '-'}\n".encode())
    return digest.hexdigest()


def _stat_key(st: os.stat_result) -> list[int]:
    """What must be unchanged for a remembered sha256 to hold: size, mtime, ctime, inode (ns)."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _read_cache(path: Path) -> dict[str, list[Any]]:
    """The cache's entries (absolute path -> ``[size, mtime_ns, ctime_ns, ino, sha256]``).

    A missing, oversized, corrupt or foreign file gives ``{}`` (logged); a malformed entry is
    dropped. Never raises.
    """
    try:
        if not path.is_file():
            return {}
        if path.stat().st_size > MAX_CACHE_BYTES:
            logger.warning("%s: over %d bytes; ignored (image digests are computed again)",
                           path, MAX_CACHE_BYTES)
            return {}
        data = loads_json(path.read_bytes(), str(path))
    except (OSError, SchemaError) as exc:
        logger.warning("%s: unreadable image digest cache (%s); ignored (image digests are "
                       "computed again)", path, exc)
        return {}
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT \
            or not isinstance(data.get("files"), dict):
        logger.warning("%s: not an image digest cache of format %s; ignored (image digests "
                       "are computed again)", path, CACHE_FORMAT)
        return {}
    return {k: v for k, v in data["files"].items()
            if isinstance(v, list) and len(v) == 5
            and all(isinstance(n, int) and not isinstance(n, bool) for n in v[:4])
            and isinstance(v[4], str) and _HEX64.fullmatch(v[4])}


def _hash_file(path: str) -> str:
    """sha256 (hex) of a file's bytes (:func:`chexpercept.files.file_sha256`)."""
    return file_sha256(path)


def digest_files(files: Mapping[str, Path]) -> ImageDigests:
    """Each file's sha256, from the cache where the file is unchanged, and their combination.

    One ``stat`` per file; a file not in the cache, or changed since (size, modification or
    change time, inode), is read once in chunks. The cache is rewritten (atomically) only when
    a file was hashed; an unwritable cache is a warning.

    Args:
        files: Relative path (``<key_id>/...``, ``/``-separated) -> the file.

    Returns:
        The digests; a file that is missing or unreadable has None (it counts, as ``-``, in
        the combined digest; the bundle validator refuses it in a selected case).
    """
    cache_path = image_digest_cache_path()
    cache = _read_cache(cache_path)
    out: dict[str, str | None] = {}
    used: dict[str, list[Any]] = {}
    hashed = 0
    for rel, path in files.items():
        where = os.path.abspath(path)
        try:
            key = _stat_key(os.stat(where))
            known = cache.get(where)
            if known is not None and known[:4] == key:
                sha = known[4]
            else:
                sha = _hash_file(where)
                hashed += 1
        except OSError as exc:
            logger.debug("image %s: %s (its digest is 'missing')", path, exc)
            out[rel] = MISSING
            continue
        out[rel] = sha
        used[where] = [*key, sha]
    if hashed:
        _write_cache(cache_path, used)
    logger.debug("image digests: %d file(s), %d read, %d from the cache %s", len(files), hashed,
                len(used) - hashed, cache_path)
    return ImageDigests(combined_digest(out), out)


def _write_cache(path: Path, used: dict[str, list[Any]]) -> None:
    """Merge ``used`` into the cache file (re-read: another process may have added entries).

    At most :data:`MAX_CACHE_ENTRIES`: this computation's entries first, then the older ones.
    """
    merged = dict(used)
    for where, entry in _read_cache(path).items():
        if len(merged) >= MAX_CACHE_ENTRIES:
            break
        merged.setdefault(where, entry)
    if len(merged) > MAX_CACHE_ENTRIES:
        merged = dict(list(merged.items())[:MAX_CACHE_ENTRIES])
    try:
        write_json_atomic(path, {"format": CACHE_FORMAT, "files": merged}, indent=None)
    except OSError as exc:
        logger.warning("image digests not remembered in %s (%s); they are computed again next "
                       "time", path, exc)


def write_run_digests(run_dir: str | Path, digests: ImageDigests) -> None:
    """Write ``<run_dir>/image_digests.json`` atomically (:func:`image_digests_path`)."""
    write_json_atomic(image_digests_path(run_dir),
                      {IMAGES_SHA_FIELD: digests.sha256, "files": digests.files})


def read_run_digests(run_dir: str | Path) -> dict[str, str | None] | None:
    """The per-file map a run recorded, or None when the file is missing or not such a map.

    Never raises: a damaged side file only loses the names in a refusal (logged).
    """
    path = image_digests_path(run_dir)
    if not path.is_file():
        return None
    try:
        data = read_json(path)
    except (OSError, SchemaError) as exc:
        logger.warning("%s: unreadable (%s)", path, exc)
        return None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(
            v is None or isinstance(v, str) for v in files.values()):
        logger.warning("%s: no per-image map ('files')", path)
        return None
    return files


def changed_images(old: Mapping[str, str | None], new: Mapping[str, str | None]) -> list[str]:
    """One line per image whose digest differs, naming its key_id and relative path.

    Args:
        old: The map a run recorded (:func:`read_run_digests`).
        new: The bundle's map now (:attr:`ImageDigests.files`).

    Returns:
        ``<key_id>: <relative path> (<what changed>)`` lines in path order; empty when equal.
    """
    def short(sha: str | None) -> str:
        return "missing" if sha is None else f"sha256 {sha[:12]}"

    lines = []
    for rel in sorted(set(old) | set(new)):
        before, after = old.get(rel, "absent"), new.get(rel, "absent")
        if before == after:
            continue
        key_id, _, inside = rel.partition("/")
        was = "not sent" if rel not in old else short(before)
        now = "not sent" if rel not in new else short(after)
        lines.append(f"{key_id}: {inside or rel} (was {was}, now {now})")
    return lines


def named_changes(lines: list[str]) -> str:
    """``lines`` joined by ``; ``, at most :data:`MAX_NAMED` then ``... and N more``."""
    shown = "; ".join(lines[:MAX_NAMED])
    return shown + (f"; ... and {len(lines) - MAX_NAMED} more" if len(lines) > MAX_NAMED else "")
