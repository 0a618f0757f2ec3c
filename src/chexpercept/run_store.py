"""The run store: the one owner of a Stage 03 run folder (Stage 03 writes it, Stage 04 reads it).

See docs/evaluation_protocol.md, "Run folder".

A run folder (``layouts.eval_run_dir``, or ``layouts.eval_part_dir`` for one part of a sharded
run) holds:

- ``run_manifest.json``: what the run is (the identity fields, compared on resume) and where it
  ran (git state, packages; not compared);
- ``records.jsonl``: one line per answered turn, appended as the turn completes: the source of
  truth a resumed run is rebuilt from;
- ``faults.jsonl``: one line per turn that got no answer (a fault, never scored;
  docs/engines.md, "Faults");
- ``all_results.json``: the release's per-case results, rewritten atomically from the records;
- ``image_digests.json``: the sha256 of each benchmark image when the run started
  (:mod:`chexpercept.image_digests`), so a resume over a changed image names it.

Every runner, the shard merge and Stage 04 go through :class:`RunStore`; nothing else opens these
files. Durability: each record is written and flushed to the OS as its turn completes, so a killed
process (SIGKILL) loses at most the requests in flight; ``fsync`` runs every ``fsync_every``
records or ``fsync_interval_s`` seconds and at close (an fsync per record would stall the async
runner's event loop; only a machine crash can lose the un-fsynced tail). A partial last line left
by a killed writer is dropped when the records are loaded.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from chexpercept import schema
from chexpercept.errors import ConfigError, InputError, SchemaError
from chexpercept.files import (
    append_jsonl,
    loads_json,
    read_json,
    read_jsonl,
    to_jsonable,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from chexpercept.image_digests import (
    IMAGES_SHA_FIELD,
    ImageDigests,
    changed_images,
    image_digests_path,
    named_changes,
    read_run_digests,
    write_run_digests,
)
from chexpercept.layouts import (
    all_results_path,
    faults_path,
    records_path,
    run_manifest_path,
    sample_results_path,
)

logger = logging.getLogger(__name__)

#: Manifest fields that must match for a run to be resumed (or parts to be merged).
IDENTITY_FIELDS = ("provider", "model", "provider_settings", "oracle_setting", "no_thinking",
                   "seed", "system_prompt_sha256", "benchmark_json_sha256", IMAGES_SHA_FIELD,
                   "protocol_version", "sharding", "option_probs", "option_order",
                   "sampling", "judge")
#: The value of an identity field a manifest written before the field existed stands for
#: (``option_order``: such a run showed the options in the release order).
IDENTITY_DEFAULTS: dict[str, Any] = {"option_order": "release"}
#: Identity fields whose absence means "not known" rather than a value: a manifest written
#: before the field existed is compared on the other fields only (``benchmark_images_sha256``:
#: such a run did not record its images, so they cannot be checked).
IDENTITY_UNKNOWN_WHEN_ABSENT = (IMAGES_SHA_FIELD,)
#: Manifest field of a ``--samples K`` run with K > 1 (an identity field): ``samples`` (K) and
#: ``seeds`` (each sample's seed, ``rng.sample_seed``); absent for K = 1.
SAMPLING_FIELD = "sampling"
#: Manifest field (not an identity field) of how the provider decodes by default:
#: ``default_temperature`` (``ChatModel.default_temperature``) and ``sampling``
#: (``ChatModel.sampling``: ``temperature``, ``seeded``, ``deterministic`` or null). Stage 04's
#: run labels read it (docs/metrics.md, "Run labels"); absent from manifests written before it.
PROVIDER_DECODING_FIELD = "provider_decoding"
#: Record and fault field of a sample k >= 1 (K > 1 runs record it for every sample; absent
#: means sample 0).
SAMPLE_FIELD = "sample"
#: Manifest field (an identity field) of a run made with ``--judge``, and the field of the judge's
#: reading in a record and in a question's block of ``all_results.json`` (docs/parsing.md,
#: "Judge model").
JUDGE_FIELD = "judge"
#: Field of a ``faults.jsonl`` entry holding the model's completion that arrived but could not be
#: recorded because the judge gave no answer (``evaluation.judge``; docs/parsing.md, "Judge
#: model"): a resume re-judges it instead of asking the model again.
KEPT_REPLY_FIELD = "reply"
#: Manifest field of a sharded part: its ``--limit`` / ``--per_path_limit`` (not an identity).
SELECTION_FIELD = "selection"
#: fsync ``records.jsonl`` after this many appended records ...
FSYNC_EVERY = 256
#: ... or after this many seconds, whichever comes first.
FSYNC_INTERVAL_S = 1.0

#: key_id -> turn name -> record.
Records = dict[str, dict[str, dict[str, Any]]]


def _write_members(path: Path, members: Iterable[str]) -> None:
    """Write a results file atomically from encoded members (:meth:`RunStore.write_results`)."""
    members = list(members)
    write_text_atomic(path, "{\n  " + ",\n  ".join(members) + "\n}\n" if members else "{}\n")


def identity_diffs(old: Mapping[str, Any], new: Mapping[str, Any], *, old_name: str,
                   new_name: str, sep: str = ": ", skip: Sequence[str] = ()) -> list[str]:
    """One line per identity field (:data:`IDENTITY_FIELDS`) whose values differ.

    Args:
        old: One manifest.
        new: The other manifest.
        old_name: How the messages name ``old`` ("run folder", "part 0").
        new_name: How they name ``new``.
        sep: Text between a name and its value.
        skip: Identity fields not compared.

    Returns:
        ``'<field>' (<old_name><sep><value>, <new_name><sep><value>)`` lines; empty when they
        agree. A field a manifest lacks counts as its :data:`IDENTITY_DEFAULTS` value; a field
        of :data:`IDENTITY_UNKNOWN_WHEN_ABSENT` that either lacks is not compared.
    """
    def value(manifest: Mapping[str, Any], k: str) -> Any:
        return manifest.get(k, IDENTITY_DEFAULTS.get(k))

    unknown = {k for k in IDENTITY_UNKNOWN_WHEN_ABSENT if k not in old or k not in new}
    return [f"'{k}' ({old_name}{sep}{value(old, k)!r}, {new_name}{sep}{value(new, k)!r})"
            for k in IDENTITY_FIELDS
            if k not in skip and k not in unknown and value(old, k) != value(new, k)]


class RecordWriter:
    """Append-only JSONL writer: flush per record, fsync in batches (see the module docstring).

    Args:
        path: ``records.jsonl``.
        fsync_every: Records between two fsyncs.
        fsync_interval_s: Seconds between two fsyncs.

    Attributes:
        written: Records written since it was opened.
    """

    def __init__(self, path: Path, fsync_every: int = FSYNC_EVERY,
                 fsync_interval_s: float = FSYNC_INTERVAL_S) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.fsync_every = fsync_every
        self.fsync_interval_s = fsync_interval_s
        self._pending = 0
        self._last_sync = time.monotonic()
        self.written = 0

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record line and flush it to the OS."""
        # json handles the record's dicts/lists/tuples natively; to_jsonable only for the rest
        # (Paths, numpy scalars): walking every record with it cost ~0.4 ms per turn.
        self._fh.write(json.dumps(record, ensure_ascii=False, default=to_jsonable) + "\n")
        self._fh.flush()
        self.written += 1
        self._pending += 1
        if (self._pending >= self.fsync_every
                or time.monotonic() - self._last_sync >= self.fsync_interval_s):
            self.sync()

    def sync(self) -> None:
        """Fsync what was written."""
        if self._pending:
            os.fsync(self._fh.fileno())
            self._pending = 0
        self._last_sync = time.monotonic()

    def close(self) -> None:
        """Fsync, then close (idempotent)."""
        if not self._fh.closed:
            self.sync()
            self._fh.close()


class RunStore:
    """A Stage 03 run folder: its manifest, records, faults and ``all_results.json``.

    Args:
        run_dir: The run folder (created by :meth:`open`).

    Attributes:
        run_dir: The run folder.
        manifest_path: ``run_manifest.json``.
        records_path: ``records.jsonl``.
        faults_path: ``faults.jsonl``.
        results_path: ``all_results.json``.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.manifest_path = run_manifest_path(self.run_dir)
        self.records_path = records_path(self.run_dir)
        self.faults_path = faults_path(self.run_dir)
        self.results_path = all_results_path(self.run_dir)

    # -- manifest ---------------------------------------------------------------------------
    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when the folder has none.

        Raises:
            SchemaError: If the file is not valid JSON.
        """
        return read_json(self.manifest_path) if self.manifest_path.is_file() else None

    def open(self, manifest: Mapping[str, Any], *, overwrite: bool = False,
             images: ImageDigests | None = None) -> bool:
        """Create the run (write ``manifest``) or check that it is the run already there.

        Args:
            manifest: The command's manifest (``session.build_manifest``).
            overwrite: Delete the folder's manifest, records, faults, results (every
                sample's) and image digests first.
            images: The bundle's image digests (``evaluation.cases.bundle_image_digests``;
                their sha256 is the manifest's ``benchmark_images_sha256``): a new run keeps
                the per-file map in ``image_digests.json``, so that a resume over a changed
                image names its key_id and file (docs/evaluation_protocol.md, "Run folder").

        Returns:
            True when an existing run is resumed.

        Raises:
            ConfigError: If the folder's manifest differs in an identity field (names each
                field; a changed image by key_id and relative path), or the folder holds
                outputs but no manifest.
        """
        # every sample's results count too: a K=3 run overwritten by K<=2 left a stale
        # all_results_sample_2.json next to the new run
        samples = (sorted(self.run_dir.glob(sample_results_path(self.run_dir, 0).name
                                            .replace("_0.json", "_*.json")))
                   if self.run_dir.is_dir() else [])
        outputs = (self.records_path, self.faults_path, self.results_path, *samples)
        if overwrite:
            for path in (self.manifest_path, *outputs, image_digests_path(self.run_dir)):
                if path.exists():
                    path.unlink()
                    logger.info("--overwrite: removed %s", path)
        existing = self.read_manifest()
        if existing is not None:
            diffs = identity_diffs(existing, manifest, old_name="run folder has",
                                   new_name="this command has", sep=" ")
            images_changed = self._changed_images(existing, manifest, images)
            if images_changed:
                diffs = [d for d in diffs if not d.startswith(f"'{IMAGES_SHA_FIELD}'")]
            if diffs or images_changed:
                what = "; ".join(
                    ([f"field(s) differ: {'; '.join(diffs)}"] if diffs else [])
                    + ([f"{len(images_changed)} benchmark image(s) differ from those the run "
                        f"started with ('{IMAGES_SHA_FIELD}'): {named_changes(images_changed)}"]
                       if images_changed else []))
                raise ConfigError(f"{self.manifest_path}: cannot resume this run: {what}. To "
                                  f"run this command as a new run, give it another "
                                  f"--output-path (the run here stays as it is); --overwrite "
                                  f"would erase this run's manifest, records and results and "
                                  f"start afresh in {self.run_dir}.")
            if images is not None and existing.get(IMAGES_SHA_FIELD) == images.sha256 \
                    and not image_digests_path(self.run_dir).is_file():
                write_run_digests(self.run_dir, images)  # lost: the same map, so rewritten
            logger.info("resuming the run in %s", self.run_dir)
            return True
        leftovers = [str(p) for p in outputs if p.exists()]
        if leftovers:
            raise ConfigError(f"{self.run_dir}: holds {', '.join(leftovers)} but no "
                              f"run_manifest.json (an older or foreign run): give this command "
                              f"another --output-path (those files stay as they are); "
                              f"--overwrite would erase them and start afresh here.")
        if images is not None:  # first: a manifest never names digests it lacks the map of
            write_run_digests(self.run_dir, images)
        write_json_atomic(self.manifest_path, to_jsonable(dict(manifest)))
        return False

    def _changed_images(self, existing: Mapping[str, Any], manifest: Mapping[str, Any],
                        images: ImageDigests | None) -> list[str]:
        """The images that differ from the run's (``image_digests.changed_images``).

        Empty when the digests agree, when either manifest predates the field (logged: the
        images cannot be checked), or when the run's ``image_digests.json`` is lost (the
        identity diff then names the field alone).
        """
        old, new = existing.get(IMAGES_SHA_FIELD), manifest.get(IMAGES_SHA_FIELD)
        if old is None or new is None:
            if new is not None:
                logger.warning("%s has no '%s' (written before images were part of a run's "
                               "identity): the benchmark images cannot be checked against "
                               "those the run started with", self.manifest_path,
                               IMAGES_SHA_FIELD)
            return []
        if old == new or images is None:
            return []
        recorded = read_run_digests(self.run_dir)
        return [] if recorded is None else changed_images(recorded, images.files)

    def read_image_digests(self) -> dict[str, str | None] | None:
        """The per-image map the run recorded (``image_digests.json``), or None."""
        return read_run_digests(self.run_dir)

    # -- records and faults -----------------------------------------------------------------
    @staticmethod
    def _repair(path: Path) -> None:
        """Drop a partial last line left by a killed writer, so appends stay line-aligned."""
        if not path.is_file():
            return
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            logger.warning("%s: dropping an incomplete last line (%d bytes)", path,
                           len(data) - cut)
            write_bytes_atomic(path, data[:cut])

    def load_records(self) -> Records:
        """Repair a torn last line, then index the records (:meth:`read_records`).

        For the run's own writer: the repair lets the next record start on a line of its own.

        Raises:
            SchemaError: See :meth:`read_records`.
        """
        self._repair(self.records_path)
        return self.read_records()

    def load_sample_records(self) -> dict[int, Records]:
        """Repair a torn last line, then :meth:`read_sample_records` (the run's own writer).

        Raises:
            SchemaError: See :meth:`read_sample_records`.
        """
        self._repair(self.records_path)
        return self.read_sample_records()

    def read_records(self) -> Records:
        """The records of sample 0 indexed by key_id and turn, read only.

        The file is not touched (a run may still be appending to it): a torn last line is
        skipped, not repaired. A duplicate (key_id, turn) keeps its first record (logged).
        Samples k >= 1 of a ``--samples K`` run: :meth:`read_sample_records`.

        Raises:
            SchemaError: On a line that is not JSON or a record without ``key_id``/``turn``.
        """
        return self.read_sample_records().get(0, {})

    def read_sample_records(self) -> dict[int, Records]:
        """Sample index -> its records, indexed as :meth:`read_records`.

        Sample 0 holds every record without a ``sample`` field.

        Raises:
            SchemaError: On a line that is not JSON, a record without ``key_id``/``turn`` or
                with a ``sample`` that is not an integer >= 0.
        """
        by_sample: dict[int, Records] = {}
        for rec in read_jsonl(self.records_path):
            try:
                key_id, turn = rec["key_id"], rec["turn"]
                sample = rec.get(SAMPLE_FIELD, 0)
            except (KeyError, TypeError, AttributeError):
                raise SchemaError(f"{self.records_path}: record without key_id/turn: "
                                  f"{rec!r}") from None
            if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
                raise SchemaError(f"{self.records_path}: {key_id}/{turn}: '{SAMPLE_FIELD}' "
                                  f"must be an integer >= 0, got {sample!r}")
            turns = by_sample.setdefault(sample, {}).setdefault(key_id, {})
            if turn in turns:
                logger.warning("%s: duplicate record for %s/%s%s; keeping the first",
                               self.records_path, key_id, turn,
                               f" (sample {sample})" if sample else "")
                continue
            turns[turn] = rec
        return by_sample

    def recorded_turns(self) -> dict[str, set[str]]:
        """key_id -> the turn names that have a record (read only: no repair)."""
        return {key_id: set(turns) for key_id, turns in self.read_records().items()}

    def writer(self, fsync_every: int = FSYNC_EVERY,
               fsync_interval_s: float = FSYNC_INTERVAL_S) -> RecordWriter:
        """A writer appending to ``records.jsonl`` (the caller closes it)."""
        return RecordWriter(self.records_path, fsync_every, fsync_interval_s)

    def append_fault(self, fault: Mapping[str, Any]) -> None:
        """Append one no-answer entry to ``faults.jsonl`` (fsync'd: faults are rare).

        A torn last line (a killed writer) is dropped first, so the entry starts a line.
        """
        self._repair(self.faults_path)
        append_jsonl(self.faults_path, fault)

    def _faults(self) -> list[dict[str, Any]]:
        """The entries of ``faults.jsonl``; a line that is no JSON object is skipped (warned).

        The file is a log of what got no answer, not a source of truth: a bad line must not
        stop a resume. Every line goes through :func:`chexpercept.files.loads_json`, so a line
        that is not JSON, is nested too deeply to parse or holds a number too long to parse,
        or an entry without a string ``key_id`` and ``turn``, is one warning naming the file
        and the line (its turn is asked again, as it has no record), never a traceback.
        """
        out = []
        if not self.faults_path.is_file():
            return out
        for number, line in enumerate(self.faults_path.read_text(encoding="utf-8",
                                                                 errors="replace")
                                      .splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = loads_json(line, f"{self.faults_path}, line {number}")
            except SchemaError as exc:
                logger.warning("%s; the line is skipped (faults.jsonl is a log, not a source of "
                               "truth)", exc)
                continue
            if not isinstance(entry, dict) or not all(
                    isinstance(entry.get(k), str) for k in ("key_id", "turn")):
                logger.warning("%s: line %d is not a fault entry (a JSON object with string "
                               "key_id and turn); skipped", self.faults_path, number)
                continue
            out.append(entry)
        return out

    def unanswered(self, records: Records, sample: int = 0) -> dict[str, str]:
        """key_id -> reason of the last fault of ``sample`` whose turn still has no record.

        Args:
            records: The sample's records.
            sample: Sample index (a fault without a ``sample`` field is sample 0's).
        """
        out: dict[str, str] = {}
        for rec in self._faults():
            key_id, turn = rec.get("key_id"), rec.get("turn")
            if rec.get(SAMPLE_FIELD, 0) != sample:
                continue
            if isinstance(key_id, str) and turn not in records.get(key_id, {}):
                out[key_id] = str(rec.get("error") or "no answer")
        return out

    def kept_replies(self, records: Records, sample: int = 0) -> dict[str, dict[str, Any]]:
        """key_id -> the last fault entry of ``sample`` without a record, if it keeps a reply.

        The reply is the model's completion the judge did not read (:data:`KEPT_REPLY_FIELD`).

        Args:
            records: The sample's records.
            sample: Sample index (a fault without a ``sample`` field is sample 0's).
        """
        last: dict[str, dict[str, Any]] = {}
        for rec in self._faults():
            key_id, turn = rec.get("key_id"), rec.get("turn")
            if rec.get(SAMPLE_FIELD, 0) != sample or not isinstance(key_id, str):
                continue
            if turn not in records.get(key_id, {}):
                last[key_id] = rec
        return {k: rec for k, rec in last.items() if isinstance(rec.get(KEPT_REPLY_FIELD), dict)}

    # -- all_results.json -------------------------------------------------------------------
    def write_results(self, members: Iterable[str]) -> None:
        """Write ``all_results.json`` atomically from encoded members.

        Args:
            members: ``"<key_id>": <indent-2 value shifted one level>`` texts in file order
                (``session.encode_member``); the file is then byte-identical to
                ``files.write_json_atomic`` of the same object.
        """
        _write_members(self.results_path, members)

    def sample_results_path(self, sample: int) -> Path:
        """The results file of ``sample`` (``all_results.json`` for 0).

        Sample k >= 1: ``all_results_sample_<k>.json`` (``layouts.sample_results_path``).
        """
        return self.results_path if sample == 0 else sample_results_path(self.run_dir, sample)

    def write_sample_results(self, sample: int, members: Iterable[str]) -> None:
        """Write sample ``sample``'s results file atomically from encoded members.

        ``all_results.json`` for sample 0, ``all_results_sample_<k>.json`` for k >= 1
        (:meth:`sample_results_path`); the members as in :meth:`write_results`.
        """
        if sample == 0:
            self.write_results(members)
        else:
            _write_members(self.sample_results_path(sample), members)

    def samples(self) -> int:
        """K of a ``--samples K`` run, from the manifest (1 without one or for K = 1).

        Raises:
            SchemaError: If the manifest's ``sampling.samples`` is not an integer >= 1.
        """
        manifest = self.read_manifest() or {}
        sampling = manifest.get(SAMPLING_FIELD)
        if sampling is None:
            return 1
        k = sampling.get("samples") if isinstance(sampling, dict) else None
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise SchemaError(f"{self.manifest_path}: '{SAMPLING_FIELD}.samples' must be an "
                              f"integer >= 1, got {k!r}")
        return k

    def read_sample_results(self, sample: int) -> Any:
        """The parsed results of sample ``sample`` (not validated; Stage 04 validates them).

        Raises:
            InputError: If the file is missing.
            SchemaError: If it is not valid JSON.
        """
        path = self.sample_results_path(sample)
        if not path.is_file():
            raise InputError(f"{path}: missing (sample {sample} of the --samples run in "
                             f"{self.run_dir}; re-run Stage 03 to finish it)")
        return read_json(path)

    def read_results(self, *, validate: bool = True, missing_ok: bool = True) -> Any:
        """The parsed ``all_results.json``.

        Args:
            validate: Check the file against the schema (``schema.parse_all_results``). Stage 04
                passes False: its case table validates every block it scores, naming the
                key_ids (``analysis.case_table``), so a second pass would only cost time.
            missing_ok: Return ``{}`` when the file does not exist yet (a run not started);
                False raises instead.

        Raises:
            InputError: If the file is missing and ``missing_ok`` is False.
            SchemaError: If the file is not valid JSON or (``validate``) fails the schema;
                the message names the file.
        """
        if missing_ok and not self.results_path.is_file():
            return {}
        data = read_json(self.results_path)
        if validate:
            schema.parse_all_results(data, self.results_path)
        return data

    def write_merged(self, results: Mapping[str, Any], manifest: Mapping[str, Any]) -> Path:
        """Write a merged run: ``all_results.json`` then ``run_manifest.json`` (each atomic).

        Returns:
            The ``all_results.json`` path.
        """
        write_json_atomic(self.results_path, to_jsonable(dict(results)))
        write_json_atomic(self.manifest_path, to_jsonable(dict(manifest)))
        return self.results_path
