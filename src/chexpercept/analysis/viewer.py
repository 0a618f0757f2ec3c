"""Stage 04: the case viewer, a static HTML folder that shows each dialogue of one or more runs.

Reads, per run, ``<run_dir>/all_results.json`` (stage results, ``chat_history``),
``<run_dir>/records.jsonl`` (parsed answer, status and parser reason per turn, the oracle
action before it) and ``<run_dir>/run_manifest.json`` (model, settings, commit), and writes
``<out_dir>/viewer/``:

- ``index.html``, ``viewer.js``, ``viewer.css``: copied from ``viewer_assets/`` (plain files,
  no build step, nothing fetched from the network);
- ``data/index.js``: one compact script assigning ``window.CHEX_INDEX`` (every case's lesion,
  path and per-stage result per run, the runs' manifests); loaded by a ``<script>`` tag, which
  works from ``file://`` where ``fetch()`` does not;
- ``data/r<run>_c<chunk>.js``: the dialogues, :data:`CHUNK_SIZE` cases per file, loaded only
  when a case of the chunk is opened (or a text search needs the replies);
- with ``image_max_side``: ``images/<hash>.jpg``, small copies of the images for sharing the
  folder, decoded by the one image loader (docs/images.md, "Image loading"); otherwise the
  pages reference the bundle's PNGs by relative path (nothing copied).

Every image a ``chat_history`` names must be a file of its case's bundle folder,
``<bundle>/chexpercept/<key_id>/...``, checked by the bundle's one path rule
(:meth:`chexpercept.layouts.BenchmarkLayout.case_file`: no ``..``, symbolic links resolved
inside the bundle; docs/benchmark_format.md, "Paths a bundle names"); any other path is
refused, so neither a copy nor a link of a file outside the bundle reaches the viewer folder.

The page layout and keys are in docs/viewer.md. The run's files are found and read through
:class:`~chexpercept.run_store.RunStore`; ``records.jsonl`` is read without the store's repair
of a torn last line (:func:`read_turn_records`), so a viewer written while Stage 03 still runs
never touches its files.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from chexpercept.analysis.error_anatomy import ERROR_CLASSES
from chexpercept.analysis.runs import RunRef
from chexpercept.errors import InputError, SchemaError
from chexpercept.files import write_bytes_atomic, write_text_atomic
from chexpercept.layouts import BenchmarkLayout, key_id_problem
from chexpercept.lesions import (
    LESIONS,
    NO_ATTRIBUTE_LESIONS,
    QA_PATHS,
    expected_stages,
    lesion_from_key_id,
)
from chexpercept.provenance import redact_secrets
from chexpercept.run_store import RunStore
from chexpercept.schema import STATUSES
from utils.imaging import load_image

logger = logging.getLogger(__name__)

#: Folder written into the analysis folder.
VIEWER_DIR = "viewer"
#: The page to open.
VIEWER_HTML = "index.html"
#: Static files copied from the package's ``viewer_assets/``.
ASSET_FILES = ("index.html", "viewer.js", "viewer.css")
#: Cases per lazily loaded detail file: about 1.3 MB per file with nine turns of half-kB
#: questions and replies, which a case page loads and renders in about 0.2 s
#: (docs/viewer.md, "Performance").
CHUNK_SIZE = 200
#: Manifest fields the viewer shows (nothing else of the manifest is copied; the server
#: address in ``provider_runtime`` stays out).
MANIFEST_FIELDS = ("provider", "model", "provider_settings", "oracle_setting", "no_thinking",
                   "seed", "protocol_version", "system_prompt_sha256", "benchmark_json_sha256",
                   "benchmark_images_sha256",
                   "git_commit", "git_dirty", "created_at")
#: Stage result blocks of ``all_results.json``, stage 1..4.
_BLOCKS = ("detection_qa", "contour_evaluation_qa", "contour_revision_qa",
           "attribute_extraction_qa")
_RECORD_FIELDS = ("parsed", "answer", "status", "detail", "correct", "finish_reason",
                  "latency_s", "attempts", "usage", "error")


@dataclass(frozen=True)
class ViewerRun:
    """One run shown by the viewer.

    Attributes:
        name: Label (``<provider>_<model>[_no_thinking]``).
        oracle_setting: ``explicit`` / ``implicit`` / ``none``.
        run_dir: The ``oracle_<setting>/`` folder.
    """

    name: str
    oracle_setting: str
    run_dir: Path

    @classmethod
    def from_ref(cls, ref: RunRef) -> ViewerRun:
        """The viewer's view of a discovered run."""
        return cls(ref.name, ref.oracle_setting, Path(ref.run_dir))

    @property
    def label(self) -> str:
        """``<name>.oracle_<setting>`` (unique among runs of one results folder)."""
        return f"{self.name}.oracle_{self.oracle_setting}"


def turn_stage(turn: str) -> int:
    """Stage (1-4) of a turn name of ``_chat_history_idx``.

    Names and stages: docs/evaluation_protocol.md, "Turn order".

    Raises:
        InputError: If the name is not a turn name.
    """
    for k, block in enumerate(_BLOCKS, start=1):
        if turn == block or turn.startswith(block + "_"):
            return k
    raise InputError(f"unknown turn name '{turn}'")


@functools.lru_cache(maxsize=64)
def _stage_or_none(turn: str) -> int | None:
    """:func:`turn_stage`, or None for a name that is not a turn (shown without stage)."""
    try:
        return turn_stage(turn)
    except InputError:
        return None


def _ground_truth(record: Mapping[str, Any], turn: str, stage: int) -> Any:
    """The ground truth of ``turn`` (of ``stage``) from the case's blocks (None when absent)."""
    name = _BLOCKS[stage - 1]
    truth = (record.get(name) or {}).get("ground_truth")
    if turn == name:
        return truth
    return truth.get(turn[len(name) + 1:]) if isinstance(truth, Mapping) else None


def _as_displayed(value: Any, order: Any) -> Any:
    """``value`` (original option number(s)) in the displayed numbering of ``order``.

    ``order`` is a record's ``option_order`` (displayed position i shows original option
    ``order[i - 1]``; docs/evaluation_protocol.md, "Option order"). The viewer shows the question
    as the model saw it, so its answer and ground truth must be numbered as displayed too. A
    value that is not an option of ``order`` (or no order) is returned unchanged.
    """
    if not isinstance(order, list):
        return value
    values = value if isinstance(value, list) else [value]
    shown = [order.index(v) + 1 if type(v) is int and v in order else v for v in values]
    return shown if isinstance(value, list) else shown[0]


def read_turn_records(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """``<key_id>/<turn>`` (the records' ``request_id``) -> record ({} without records).

    Read only, through :meth:`RunStore.read_records` (a Stage 03 run may still be appending):
    the first record of a turn is kept and a torn last line is skipped, never repaired
    (docs/evaluation_protocol.md, "Run folder").

    Raises:
        SchemaError: If a line other than the last is not valid JSON, or a record lacks
            ``key_id``/``turn`` (names the file).
    """
    return {f"{key_id}/{turn}": rec
            for key_id, turns in RunStore(run_dir).read_records().items()
            for turn, rec in turns.items()}


def _manifest(run_dir: Path) -> tuple[dict[str, Any], Path | None]:
    """The shown manifest fields (secrets redacted) and the manifest's ``benchmark_dir``."""
    store = RunStore(run_dir)
    data = store.read_manifest()
    path = store.manifest_path
    if data is None:
        return {}, None
    if not isinstance(data, Mapping):
        raise InputError(f"{path}: the run manifest is not a JSON object")
    bench = data.get("benchmark_dir")
    return (redact_secrets({k: data[k] for k in MANIFEST_FIELDS if k in data}),
            Path(bench) if isinstance(bench, str) and bench else None)


class _Images:
    """Turns image paths into URLs relative to the viewer folder (copies them if asked).

    The runs of one benchmark name the same images, so each path is resolved once per process
    (:func:`_image_url`, cleared by :func:`prepare_viewer_dir`); ``missing`` counts this run's
    references to missing files. ``source`` (the run's ``all_results.json``) is named when an
    image is refused.
    """

    def __init__(self, viewer_dir: Path, max_side: int | None, benchmark_dir: Path | None,
                 source: Path | None = None):
        self.viewer_dir = viewer_dir
        self.max_side = max_side
        self.benchmark_dir = benchmark_dir
        self.source = source
        self.missing = 0

    def url(self, text: str, key_id: str) -> str | None:
        """Relative URL of case ``key_id``'s image ``text``, or None when the file is missing.

        Raises:
            SchemaError: If ``text`` is not a file of the case's bundle folder
                (:func:`bundle_image`; names ``all_results.json``, the key_id and the path).
        """
        try:
            url = _image_url(text, key_id, self.benchmark_dir, self.viewer_dir, self.max_side)
        except SchemaError as exc:
            raise SchemaError(f"{self.source}: chat_history image refused: {exc}") from None
        if url is None:
            self.missing += 1
        return url


def bundle_image(text: str, key_id: str, benchmark_dir: Path | None = None) -> Path | None:
    """The bundle file an image path of ``chat_history`` names, or None when it is missing.

    The path must name a file of the case's own folder, ``<bundle>/chexpercept/<key_id>/<rel>``;
    ``<bundle>`` is read from the path itself and, when the file is not there (the bundle
    moved), the run manifest's ``benchmark_dir``. Both go through the bundle's one path rule
    (:meth:`chexpercept.layouts.BenchmarkLayout.case_file`; docs/benchmark_format.md, "Paths a
    bundle names").

    Args:
        text: The path as ``chat_history`` records it.
        key_id: The case whose dialogue names it.
        benchmark_dir: The run manifest's ``benchmark_dir``, or None.

    Returns:
        The file, resolved; None when it exists in neither place.

    Raises:
        SchemaError: If ``key_id`` is not a safe name, ``text`` is not under
            ``chexpercept/<key_id>/``, climbs out of it (``..``), or resolves outside the
            bundle's image folder (a symbolic link).
    """
    unsafe = key_id_problem(key_id)
    if unsafe is not None:
        raise SchemaError(f"key_id {key_id!r} {unsafe}")
    parts = Path(text).parts
    at = [i for i in range(len(parts) - 1)
          if parts[i] == "chexpercept" and parts[i + 1] == key_id]
    if not at:
        raise SchemaError(f"{key_id}: image {text!r} is not a file of the case's bundle folder "
                          f"<bundle>/chexpercept/{key_id}/ (docs/benchmark_format.md, 'Paths a "
                          f"bundle names')")
    rel = "/".join(parts[at[-1] + 2:])
    roots = [Path(*parts[:at[-1]])]
    if benchmark_dir is not None:  # bundle moved: retry under the manifest's folder
        roots.append(benchmark_dir)
    for root in roots:
        path = BenchmarkLayout(root).case_file(key_id, rel, field="chat_history image")
        if path.is_file():
            return path.resolve()
    return None


@functools.lru_cache(maxsize=1 << 16)
def _image_url(text: str, key_id: str, benchmark_dir: Path | None, viewer_dir: Path,
               max_side: int | None) -> str | None:
    """URL of case ``key_id``'s image ``text`` in the viewer (None: missing), copied if asked.

    With ``max_side``, a JPEG copy of at most that side is written into ``viewer/images/``.

    Raises:
        SchemaError: If the image is not a file of the case's bundle folder
            (:func:`bundle_image`).
    """
    path = bundle_image(text, key_id, benchmark_dir)
    if path is None:
        return None
    if max_side:
        name = hashlib.sha1(str(path).encode("utf-8")).hexdigest()[:20] + ".jpg"
        target = viewer_dir / "images" / name
        if not target.is_file():
            _write_small_copy(path, target, max_side)
        return f"images/{name}"
    return urllib.parse.quote(Path(os.path.relpath(path, viewer_dir)).as_posix())


def _write_small_copy(src: Path, target: Path, max_side: int) -> None:
    """A JPEG copy of ``src`` whose longer side is at most ``max_side`` pixels.

    Decoded by :func:`utils.imaging.load_image`, the loader the models' pixels come from
    (docs/images.md, "Image loading"): a 16-bit CXR is rescaled by its own range instead of
    clipped to white, an EXIF orientation is applied (the copy is upright and, with the tag
    gone, shown so by every browser), palette and alpha are resolved. The 8-bit L or RGB result
    is shrunk with its aspect ratio kept (Lanczos) and written as a quality-85 JPEG, atomically.

    Args:
        src: The image named in ``chat_history``.
        target: The ``viewer/images/<hash>.jpg`` file.
        max_side: Longest side of the copy in pixels (``--copy-images``).

    Raises:
        InputError: If ``src`` cannot be decoded (names the file).
    """
    import io

    from PIL import Image

    image = load_image(src)
    image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    image.save(buf, format="jpeg", quality=85)
    write_bytes_atomic(target, buf.getvalue())


def _stage_codes(record: Mapping[str, Any], lesion: str, qa_path: str) -> tuple[str, int]:
    """Per-stage codes and the end-to-end depth of one case.

    Codes, stage 1-4: ``1`` right, ``0`` wrong, ``-`` not asked, ``?`` expected but absent;
    depth: stages right from stage 1 on, with the cardiomegaly bonus (docs/metrics.md,
    "Depth").
    """
    asked = expected_stages(qa_path, lesion) if qa_path in QA_PATHS else ()
    codes = []
    for k, block in enumerate(_BLOCKS, start=1):
        if k not in asked:
            codes.append("-")
            continue
        value = (record.get(block) or {}).get("correct")
        codes.append("?" if not isinstance(value, bool) else "1" if value else "0")
    depth = 0
    for k in asked:
        if codes[k - 1] != "1":
            break
        depth += 1
    if asked and depth == len(asked) and lesion in NO_ATTRIBUTE_LESIONS and qa_path != \
            "lesion_free":
        depth += 1  # the cardiomegaly bonus stage (docs/metrics.md, "Depth")
    return "".join(codes), depth


#: The question's text of a turn known only from ``records.jsonl`` (an unfinished case).
UNRECORDED_TEXT = ("(question text not recorded: all_results.json keeps the dialogue of "
                   "finished cases only; this turn's reply is from records.jsonl)")


def _answered_turns(answered: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The turns an unfinished case got answers to, from its ``records.jsonl`` records.

    An unfinished case's ``all_results.json`` entry holds no ``chat_history``
    (docs/engines.md, "Faults"), so its answered turns come from the records, in turn order;
    the question's text, images and ground truth are not recorded there (``gt`` is left out,
    the viewer says "not recorded").
    """
    turns = []
    for rec in sorted(answered, key=lambda r: (r.get("turn_index") is None,
                                               r.get("turn_index") or 0)):
        name = str(rec.get("turn", ""))
        oracle = rec.get("oracle") or {}
        turn: dict[str, Any] = {"name": name, "stage": _stage_or_none(name),
                                "text": UNRECORDED_TEXT, "prefix": oracle.get("prefix") or None,
                                "images": [], "raw": rec.get("raw", ""), "replayed": None,
                                "patched_before": list(oracle.get("patched") or [])}
        turn.update({k: rec[k] for k in _RECORD_FIELDS if k in rec})
        turns.append(turn)
    return turns


def _case_detail(record: Mapping[str, Any], key_id: str, records: Mapping[str, Any],
                 images: _Images, answered: Sequence[Mapping[str, Any]] = ()
                 ) -> dict[str, Any]:
    """The dialogue of one case as the model received it (docs/viewer.md, "Case page").

    ``answered``: the case's ``records.jsonl`` records, used only for an unfinished case
    without ``chat_history`` (its answered turns, :func:`_answered_turns`).
    """
    history = record.get("chat_history") or []
    unfinished = record.get("unfinished")
    if not history and isinstance(unfinished, Mapping):
        return {"turns": _answered_turns(answered), "unfinished": dict(unfinished)}
    index = record.get("_chat_history_idx") or {}
    names = {i: name for name, i in index.items() if isinstance(i, int)}
    turns = []
    url, basename = images.url, os.path.basename
    for i, entry in enumerate(history):
        if not isinstance(entry, list):  # a damaged entry is shown as text, never dropped
            entry = [str(entry)]
        name = names.get(i, f"turn_{i}")
        rec = records.get(f"{key_id}/{name}", {})
        oracle = rec.get("oracle") or {}
        text = str(entry[0]) if entry else ""
        prefix = oracle.get("prefix")
        if prefix and text.startswith(prefix):
            text = text[len(prefix):].lstrip("\n")
        shown = str(entry[2]) if len(entry) > 2 else ""
        original = str(entry[3]) if len(entry) > 3 else None
        stage = _stage_or_none(name)
        turn: dict[str, Any] = {
            "name": name,
            "stage": stage,
            "text": text,
            "prefix": prefix or None,
            "images": [{"url": url(p, key_id), "name": basename(p)}
                       for p in map(str, entry[1] if len(entry) > 1 else ())],
            "raw": rec.get("raw", original if original is not None else shown),
            # what later requests replayed: the ground truth when the implicit oracle patched it
            "replayed": shown if original is not None else None,
            "patched_before": list(oracle.get("patched") or []),
            "gt": _ground_truth(record, name, stage) if stage else None,
        }
        if rec:
            turn.update({k: rec[k] for k in _RECORD_FIELDS if k in rec})
            order = rec.get("option_order")
            if isinstance(order, list):  # --option-order shuffled/circular: as displayed
                turn["gt"] = _as_displayed(turn["gt"], order)
                if "answer" in turn:
                    turn["answer"] = rec.get("displayed_answer",
                                             _as_displayed(turn["answer"], order))
        turns.append(turn)
    detail: dict[str, Any] = {"turns": turns}
    if isinstance(unfinished, Mapping):
        detail["unfinished"] = dict(unfinished)
    return detail


def _dump(payload: Any) -> str:
    """Compact JSON of data that is plain JSON already.

    Skips the conversion pass of ``files.dumps_json``, which took most of the write time on a
    10,400-case run (benchmarks/bench_viewer.py).
    """
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def _statuses_mask(detail: Mapping[str, Any], record: Mapping[str, Any]) -> int:
    """Bit i set when a turn of the case has status ``STATUSES[i]``."""
    found = {t.get("status") for t in detail["turns"]}
    if found == {None}:  # no records.jsonl: the results' status keys (none in release files)
        for block in _BLOCKS:
            b = record.get(block)
            if not b or type(b) is not dict:  # parsed JSON: plain dicts only
                continue
            found.add(b.get("status"))
            for v in b.values():
                if type(v) is dict and "status" in v:
                    found.add(v["status"])
    return sum(1 << i for i, s in enumerate(STATUSES) if s in found)


@dataclass
class ViewerPart:
    """One run converted for the viewer (:func:`convert_run`); its chunk files are written.

    Attributes:
        keys: The run's key_ids in file order (position ``p`` is in chunk
            ``p // chunk_size``).
        lesions: Lesion of each key ("" for an unknown key_id prefix).
        paths: ``qa_path`` of each key ("" when absent).
        values: Per key: (stage codes, depth, status mask, unfinished flag).
        meta: The run's entry of the index (without ``system_prompt``).
        errors: Per key, the bit mask of its error classes (bit i: the i-th class of
            ``error_anatomy.ERROR_CLASSES``), set by the Stage 04 pass; None: not counted
            (the page then offers no error-class filter).
    """

    keys: list[str]
    lesions: list[str]
    paths: list[str]
    values: list[tuple[str, int, int, int]]
    meta: dict[str, Any]
    errors: list[int] | None = None


def prepare_viewer_dir(out_dir: str | Path) -> Path:
    """Create ``<out_dir>/viewer/data/`` empty of an earlier viewer's chunks and image copies.

    Returns:
        The ``viewer/`` folder.
    """
    viewer_dir = Path(out_dir) / VIEWER_DIR
    _image_url.cache_clear()  # images may have changed since an earlier viewer
    for stale in (viewer_dir / "data", viewer_dir / "images"):
        if stale.is_dir():
            shutil.rmtree(stale)
    (viewer_dir / "data").mkdir(parents=True, exist_ok=True)
    return viewer_dir


def read_run_results(run: ViewerRun | RunRef) -> dict[str, Any]:
    """The parsed ``all_results.json`` of ``run`` (read through its run store, not validated).

    Raises:
        InputError: If the file is missing or its content is not a JSON object.
        SchemaError: If it is not valid JSON.
    """
    store = RunStore(run.run_dir)
    path = store.results_path
    if not path.is_file():
        raise InputError(f"{path}: no all_results.json (is {run.run_dir} a Stage 03 run "
                         "folder?)")
    results = store.read_results(validate=False, missing_ok=False)
    if not isinstance(results, dict):
        raise InputError(f"{path}: expected a JSON object keyed by key_id")
    return results


def write_viewer(runs: Sequence[ViewerRun | RunRef], out_dir: str | Path, *,
                 system_prompt: str | None = None, image_max_side: int | None = None,
                 chunk_size: int = CHUNK_SIZE) -> Path:
    """Write the static case viewer of ``runs`` into ``<out_dir>/viewer/``.

    Cases are listed in the first run's file order, then any case only a later run has.
    Files of an earlier viewer in the folder are replaced (its ``data/`` and ``images/`` are
    removed first); images are never copied unless ``image_max_side`` is given. One run is
    held in memory at a time. Stage 04 converts each run in the pass that also scores it
    (:func:`convert_run`, :func:`write_viewer_index`), possibly in worker processes; the
    folder is byte-identical either way.

    Args:
        runs: One or more runs (typically of one benchmark bundle); the first two are shown
            side by side by default.
        out_dir: Folder that receives ``viewer/`` (e.g. ``all_models_oracle_<setting>/``).
        system_prompt: The system prompt Stage 03 sends; shown for a run whose manifest's
            ``system_prompt_sha256`` matches it, otherwise only the hash is shown.
        image_max_side: Write JPEG copies whose longer side is at most this many pixels
            into ``viewer/images/`` (to share the folder without the bundle); None: link the
            bundle's images.
        chunk_size: Cases per lazily loaded detail file.

    Returns:
        The path of ``viewer/index.html``.

    Raises:
        InputError: If ``runs`` is empty, a run has no ``all_results.json`` or its content
            is not a JSON object keyed by key_id, or (with ``image_max_side``) an image to
            copy cannot be decoded (names the file).
        SchemaError: If a ``records.jsonl`` line other than the last is not valid JSON, or a
            ``chat_history`` image is not a file of its case's bundle folder
            (:func:`bundle_image`).
    """
    if not runs:
        raise InputError("the viewer needs at least one run")
    viewer_dir = prepare_viewer_dir(out_dir)
    parts = [convert_run(r, run, read_run_results(run), viewer_dir,
                         image_max_side=image_max_side, chunk_size=chunk_size)
             for r, run in enumerate(runs)]
    return write_viewer_index(parts, viewer_dir, system_prompt=system_prompt,
                              chunk_size=chunk_size)


def write_viewer_index(parts: Sequence[ViewerPart], viewer_dir: Path, *,
                       system_prompt: str | None = None, chunk_size: int = CHUNK_SIZE) -> Path:
    """Merge the runs' parts into ``data/index.js`` and copy the page's static files.

    Rows are the first run's keys in file order, then each later run's new keys. Per run,
    ``results[r].pos[i]`` is row ``i``'s position in run ``r``'s file (None when the run
    lacks the case): the page loads chunk ``pos // chunk_size`` (docs/viewer.md, "Files").

    Args:
        parts: One :class:`ViewerPart` per run, in run order (the run index ``r`` of their
            chunk files).
        viewer_dir: The folder made by :func:`prepare_viewer_dir`.
        system_prompt: As :func:`write_viewer`.
        chunk_size: The chunk size the parts were written with.

    Returns:
        The path of ``viewer/index.html``.

    Raises:
        InputError: If ``parts`` is empty.
    """
    if not parts:
        raise InputError("the viewer needs at least one run")
    prompt_sha = (hashlib.sha256(system_prompt.encode("utf-8")).hexdigest()
                  if system_prompt is not None else None)
    order: dict[str, int] = {}  # key_id -> row; first run's file order, then new cases
    lesion_of: list[str] = []
    path_of: list[str] = []
    for part in parts:
        for key, lesion, qa_path in zip(part.keys, part.lesions, part.paths, strict=True):
            i = order.setdefault(key, len(order))
            if i == len(lesion_of):
                lesion_of.append(lesion)
                path_of.append(qa_path)
            elif not path_of[i]:
                path_of[i] = qa_path
    n = len(order)
    index_runs, results_index = [], []
    for part in parts:
        meta = dict(part.meta)
        sha = meta["manifest"].get("system_prompt_sha256")
        meta["system_prompt"] = system_prompt if sha and sha == prompt_sha else None
        index_runs.append(meta)
        pos: list[int | None] = [None] * n
        for p, key in enumerate(part.keys):
            pos[order[key]] = p
        column: dict[str, list[Any]] = {"codes": [None] * n, "depth": [None] * n,
                                        "status": [0] * n, "unfinished": [0] * n, "pos": pos}
        for p, key in enumerate(part.keys):
            i = order[key]
            (column["codes"][i], column["depth"][i], column["status"][i],
             column["unfinished"][i]) = part.values[p]
        if part.errors is not None:  # error-class bits; 0 where the run lacks the case
            column["errors"] = [0] * n
            for p, key in enumerate(part.keys):
                column["errors"][order[key]] = part.errors[p]
        results_index.append(column)
    index = {"version": 2, "lesions": list(LESIONS), "paths": list(QA_PATHS),
             "statuses": list(STATUSES), "chunk_size": chunk_size, "keys": list(order),
             "lesion": lesion_of, "path": path_of, "runs": index_runs,
             "results": results_index}
    if any(part.errors is not None for part in parts):
        index["error_classes"] = list(ERROR_CLASSES)
    data_dir = viewer_dir / "data"
    write_text_atomic(data_dir / "index.js", f"window.CHEX_INDEX = {_dump(index)};\n")
    assets = resources.files("chexpercept.analysis") / "viewer_assets"
    for name in ASSET_FILES:
        write_bytes_atomic(viewer_dir / name, (assets / name).read_bytes())
    logger.info("viewer of %d run(s), %d case(s): %s", len(parts), n, viewer_dir / VIEWER_HTML)
    return viewer_dir / VIEWER_HTML


def convert_run(r: int, run: ViewerRun | RunRef, results: Mapping[str, Any], viewer_dir: Path,
                *, image_max_side: int | None = None, chunk_size: int = CHUNK_SIZE
                ) -> ViewerPart:
    """Convert run ``r`` for the viewer and write its chunk files ``data/r<r>_c<c>.js``.

    ``results`` is only read (Stage 04 scores the same parsed file afterwards). Each chunk is
    written as soon as its last case is converted, so only one chunk's details are held.

    Args:
        r: The run's index among the viewer's runs.
        run: The run (its ``records.jsonl`` and manifest are read here).
        results: Its parsed ``all_results.json`` (:func:`read_run_results`).
        viewer_dir: The folder made by :func:`prepare_viewer_dir`.
        image_max_side: As :func:`write_viewer`.
        chunk_size: Cases per chunk file (>= 1).

    Returns:
        The run's :class:`ViewerPart`.

    Raises:
        InputError: If ``chunk_size < 1``, an entry is not a JSON object (names the file and
            key_id), or an image to copy cannot be decoded.
        SchemaError: If a ``records.jsonl`` line other than the last is not valid JSON, or a
            ``chat_history`` image is not a file of its case's bundle folder
            (:func:`bundle_image`; names the file, the key_id and the path).
    """
    if chunk_size < 1:
        raise InputError(f"chunk_size must be at least 1, got {chunk_size}")
    if not isinstance(run, ViewerRun):
        run = ViewerRun.from_ref(run)
    path = RunStore(run.run_dir).results_path
    manifest, benchmark_dir = _manifest(run.run_dir)
    images = _Images(viewer_dir, image_max_side, benchmark_dir, source=path)
    records = read_turn_records(run.run_dir)
    by_case: dict[str, list[Mapping[str, Any]]] | None = None  # grouped once, when needed
    data_dir = viewer_dir / "data"
    part = ViewerPart([], [], [], [], {})
    chunk: dict[str, Any] = {}
    for p, (key, record) in enumerate(results.items()):
        if not isinstance(record, dict):
            raise InputError(f"{path}: entry '{key}' is not a JSON object")
        key = str(key)
        lesion = lesion_from_key_id(key) if _known_lesion(key) else ""
        qa_path = str(record.get("qa_path", ""))
        codes, depth = _stage_codes(record, lesion or LESIONS[0], qa_path)
        answered: Sequence[Mapping[str, Any]] = ()
        if "unfinished" in record and not record.get("chat_history"):
            if by_case is None:
                by_case = {}
                for rec in records.values():
                    by_case.setdefault(str(rec.get("key_id")), []).append(rec)
            answered = by_case.get(key, ())
        detail = _case_detail(record, key, records, images, answered)
        part.keys.append(key)
        part.lesions.append(lesion)
        part.paths.append(qa_path)
        part.values.append((codes, depth, _statuses_mask(detail, record),
                            1 if "unfinished" in detail else 0))
        chunk[key] = detail
        if (p + 1) % chunk_size == 0:
            _write_chunk(data_dir, r, p // chunk_size, chunk)
            chunk = {}
    if chunk:
        _write_chunk(data_dir, r, (len(part.keys) - 1) // chunk_size, chunk)
    if images.missing:
        logger.warning("%s: %d image(s) named in chat_history are missing; the viewer shows "
                       "their names only", run.label, images.missing)
    part.meta = {"name": run.name, "label": run.label, "oracle_setting": run.oracle_setting,
                 "manifest": manifest, "n_cases": len(part.keys),
                 "missing_images": images.missing,
                 "chunks": list(range(-(-len(part.keys) // chunk_size)))}
    return part


def _write_chunk(data_dir: Path, r: int, c: int, chunk: Mapping[str, Any]) -> None:
    write_text_atomic(data_dir / f"r{r}_c{c}.js", f"window.chexChunk({r},{c},{_dump(chunk)});\n")


def _known_lesion(key_id: str) -> bool:
    try:
        lesion_from_key_id(key_id)
    except InputError:  # an unknown prefix is shown as an empty lesion
        return False
    return True
