"""Stage 00.00: read MIMIC-ILS, bucket the pairs and draw the seeded per-lesion sample.

Reads ``path.mimic_ils_path`` (``train`` split only) and optionally the MIMIC-CXR-JPG metadata
CSV; produces the release's ``global_segmentation_info.json``, ``basic_segmentation_info.json``
and ``global_segmentation_negative_info.json`` contents (docs/curation.md, "Sampling").
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.errors import InputError, SchemaError
from chexpercept.files import read_csv_rows, read_json
from chexpercept.lesions import LESIONS, make_key_id, validate_lesion
from chexpercept.rng import rng_for

logger = logging.getLogger(__name__)

Entry = dict[str, Any]
Buckets = dict[str, list[Entry]]

_STUDY_KEYS = ("subject_id", "dicom_id", "image_path", "instruction_answer_pairs")
_PAIR_KEYS = ("pair_id", "type", "target")


@dataclass
class SourcePool:
    """MIMIC-ILS train pairs bucketed as the release does (docs/curation.md, "Sampling").

    Attributes:
        global_info: lesion -> positive ``global`` pairs (file order).
        basic_info: lesion -> first ``basic`` positive pair per study for targets without a
            global pair in that study.
        negative_info: lesion -> ``global`` negative pairs (non-global negatives are ignored).
    """

    global_info: Buckets
    basic_info: Buckets
    negative_info: Buckets

    def counts(self) -> dict[str, dict[str, int]]:
        """Entries per bucket and lesion."""
        return {name: {les: len(b[les]) for les in LESIONS}
                for name, b in (("global", self.global_info), ("basic", self.basic_info),
                                ("negative", self.negative_info))}


@dataclass
class Selection(SourcePool):
    """The sampled pool plus what was left out and why.

    Attributes:
        dropped: ``{key_id, dicom_id, reason}`` for every pair removed before sampling
            (e.g. a non-frontal view).
        shortfalls: lesion -> message, where fewer negatives were available than requested.
    """

    dropped: list[dict[str, str]] = field(default_factory=list)
    shortfalls: dict[str, str] = field(default_factory=dict)


def _empty() -> Buckets:
    return {lesion: [] for lesion in LESIONS}


def load_train_split(path: str | Path) -> dict[str, Any]:
    """Read the ``train`` split of a MIMIC-ILS JSON (the release reads only train).

    Raises:
        InputError: If the file is missing.
        SchemaError: If it is not JSON or has no ``train`` mapping.
    """
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("train"), dict):
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise SchemaError(f"{path}: expected a JSON object with a 'train' mapping of "
                          f"study_id -> study; found {found}")
    return data["train"]


def load_splits(path: str | Path, splits: Sequence[str] = ("train",)) -> dict[str, Any]:
    """Read and merge the given MIMIC-ILS splits (``train``/``val``/``test``), in that order.

    Entries stay release-shaped (no split field); the caller records which splits were read.

    Args:
        path: ``path.mimic_ils_path``.
        splits: ``source_data_curation.ils_splits`` (default ``["train"]``, the release's).

    Returns:
        ``study_id -> study`` over all requested splits.

    Raises:
        InputError: If the file is missing.
        SchemaError: If a requested split is absent or not a mapping, or a study_id appears in
            two splits (all problems listed).
    """
    data = read_json(path)
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: expected a JSON object with split mappings "
                          f"{list(splits)}; found {type(data).__name__}")
    merged: dict[str, Any] = {}
    problems: list[str] = []
    for split in splits:
        block = data.get(split)
        if not isinstance(block, dict):
            problems.append(f"split {split!r} missing or not a mapping (found splits: "
                            f"{sorted(data)}; config source_data_curation.ils_splits)")
            continue
        for study_id, study in block.items():
            if study_id in merged:
                problems.append(f"study {study_id} appears in more than one split")
                continue
            merged[study_id] = study
    if problems:
        raise SchemaError(f"{path}: " + "; ".join(problems))
    return merged


def report_path(report_root: str | Path | None, subject_id: str, study_id: str) -> str | None:
    """``<report_root>/<subject_id[:3]>/<subject_id>/<study_id>.txt`` (None without a root)."""
    if not report_root:
        return None
    return str(Path(report_root) / subject_id[:3] / subject_id / f"{study_id}.txt")


def bucket_pairs(train: Mapping[str, Any], *, source: str | Path,
                 report_root: str | Path | None = None) -> SourcePool:
    """Bucket MIMIC-ILS train pairs into global / basic-fallback positives and negatives.

    Each entry is the pair dict plus ``report_path``, ``study_id``, ``dicom_id`` and
    ``image_path`` (release entry shape). The location list is read from ``location``
    (the release read ``reported_location``, docs/differences.md D1).

    Args:
        train: ``study_id -> study`` mapping from :func:`load_train_split`.
        source: The MIMIC-ILS file, for messages.
        report_root: ``path.mimic_report_path`` (None leaves ``report_path`` null).

    Returns:
        The bucketed pool; each bucket keeps file order.

    Raises:
        SchemaError: Listing every study or pair that lacks a required field.
        InputError: Listing every pair whose target is not one of the seven lesions (study and
            pair_id named).
    """
    pool = SourcePool(_empty(), _empty(), _empty())
    shape_problems: list[str] = []
    lesion_problems: list[str] = []
    for study_id, study in train.items():
        if not isinstance(study, dict):
            shape_problems.append(f"study {study_id}: expected an object")
            continue
        missing = [k for k in _STUDY_KEYS if k not in study]
        if missing:
            shape_problems.append(f"study {study_id}: missing {missing}")
            continue
        shared = {"report_path": report_path(report_root, str(study["subject_id"]), study_id),
                  "study_id": study_id, "dicom_id": study["dicom_id"],
                  "image_path": study["image_path"]}
        pairs = study["instruction_answer_pairs"] or {}
        valid: dict[str, list[dict[str, Any]]] = {"positive_pairs": [], "negative_pairs": []}
        for kind in valid:
            for pair in pairs.get(kind, []) or []:
                absent = [k for k in _PAIR_KEYS if k not in pair]
                if absent:
                    shape_problems.append(f"study {study_id} pair {pair.get('pair_id', '?')}: "
                                          f"missing {absent}")
                    continue
                try:
                    validate_lesion(pair["target"])
                except InputError:
                    lesion_problems.append(f"study {study_id} pair_id {pair['pair_id']}: "
                                           f"target {pair['target']!r}")
                    continue
                valid[kind].append(pair)
        with_global = set()
        for pair in valid["positive_pairs"]:
            if pair["type"] == "global":
                pool.global_info[pair["target"]].append({**pair, **shared})
                with_global.add(pair["target"])
        basic_done: set[str] = set()
        for pair in valid["positive_pairs"]:
            target = pair["target"]
            if pair["type"] == "basic" and target not in with_global and target not in basic_done:
                pool.basic_info[target].append({**pair, **shared})
                basic_done.add(target)
        for pair in valid["negative_pairs"]:
            if pair["type"] == "global":
                pool.negative_info[pair["target"]].append({**pair, **shared})
    if shape_problems:
        raise SchemaError(f"{source}: {len(shape_problems)} malformed MIMIC-ILS entr(ies):\n  "
                          + "\n  ".join(shape_problems))
    if lesion_problems:
        raise InputError(f"{source}: unknown lesion target(s) (expected one of "
                         f"{', '.join(LESIONS)}):\n  " + "\n  ".join(lesion_problems))
    return pool


def read_view_positions(meta_csv: str | Path) -> dict[str, str]:
    """``dicom_id -> ViewPosition`` from a MIMIC-CXR-JPG metadata CSV.

    Raises:
        InputError: If the file is missing.
        SchemaError: If ``dicom_id`` or ``ViewPosition`` columns are missing.
    """
    rows = read_csv_rows(meta_csv, required=("dicom_id", "ViewPosition"))
    return {r["dicom_id"]: r["ViewPosition"].strip() for r in rows}


def read_split_map(split_csv: str | Path) -> dict[str, str]:
    """``dicom_id -> split`` from a MIMIC-CXR-JPG ``split.csv`` (train/validate/test).

    Raises:
        InputError: If the file is missing.
        SchemaError: If ``dicom_id`` or ``split`` columns are missing.
    """
    rows = read_csv_rows(split_csv, required=("dicom_id", "split"))
    return {r["dicom_id"]: r["split"].strip() for r in rows}


def filter_splits(pool: SourcePool, split_of: Mapping[str, str],
                  allowed: Sequence[str]) -> tuple[SourcePool, list[dict[str, str]]]:
    """Keep only pairs whose dicom is in an allowed MIMIC-CXR split (all three buckets).

    Args:
        pool: The bucketed pool.
        split_of: ``dicom_id -> split`` (:func:`read_split_map`).
        allowed: ``source_data_curation.mimic_cxr_splits``.

    Returns:
        The filtered pool and one ``{key_id, dicom_id, reason}`` record per dropped pair.
    """
    return filter_views(pool, split_of, allowed, what="split", source="split CSV")


def filter_views(pool: SourcePool, views: Mapping[str, str],
                 allowed: Sequence[str], *, what: str = "view",
                 source: str = "metadata") -> tuple[SourcePool, list[dict[str, str]]]:
    """Keep only pairs whose dicom has an allowed ViewPosition (applied to all three buckets).

    Args:
        pool: The bucketed pool.
        views: ``dicom_id -> ViewPosition`` (:func:`read_view_positions`).
        allowed: Accepted views (config ``source_data_curation.positive_views``).
        what: Name of the attribute in drop reasons.
        source: Name of the lookup file in drop reasons.

    Returns:
        The filtered pool and one ``{key_id, dicom_id, reason}`` record per dropped pair.
    """
    allowed_set = set(allowed)
    dropped: list[dict[str, str]] = []

    def keep(entries: list[Entry]) -> list[Entry]:
        out = []
        for e in entries:
            view = views.get(e["dicom_id"])
            if view in allowed_set:
                out.append(e)
                continue
            reason = (f"dicom not in {source}" if view is None
                      else f"{what} {view!r} not in {sorted(allowed_set)}")
            dropped.append({"key_id": make_key_id(e["target"], e["pair_id"]),
                            "dicom_id": e["dicom_id"], "reason": reason})
        return out

    filtered = SourcePool(*({les: keep(b[les]) for les in LESIONS}
                            for b in (pool.global_info, pool.basic_info, pool.negative_info)))
    return filtered, dropped


def _pick(rng: Any, n: int, k: int) -> list[int]:
    """``min(k, n)`` distinct indices drawn with ``rng``, returned in ascending (file) order."""
    if k >= n:
        return list(range(n))
    return sorted(int(i) for i in rng.choice(n, size=k, replace=False))


def sample_pool(pool: SourcePool, *, seed: int, max_positive: int,
                negatives_per_lesion: int) -> Selection:
    """Seeded per-lesion sample of the pool.

    Positives (the release's ``build_work_list`` rule): up to ``max_positive`` per lesion,
    global pairs first, basic pairs filling the rest; when a bucket has more entries than
    needed, a random subset is drawn. Negatives: ``negatives_per_lesion`` per lesion, drawn
    among dicoms used by no sampled positive (of any lesion), whose study has no sampled
    positive either, and used by no other lesion's negatives (negatives disjoint from
    positives, here by dicom_id AND study_id; a dicom serves one lesion; docs/curation.md,
    "Sampling" and "Negatives", docs/differences.md D2, D8). Lesions are processed in
    ``LESIONS`` order, each with ``rng_for(seed, "curation", lesion)``; the result keeps file
    order within each lesion.

    Args:
        pool: The (view-filtered) pool.
        seed: Config seed.
        max_positive: ``source_data_curation.max_samples_per_lesion``.
        negatives_per_lesion: ``source_data_curation.samples_per_lesion_negative``.

    Returns:
        The selection (``dropped`` empty; the caller adds view drops).
    """
    sel = Selection(_empty(), _empty(), _empty())
    rngs = {lesion: rng_for(seed, "curation", lesion) for lesion in LESIONS}
    for lesion in LESIONS:
        rng = rngs[lesion]
        g, b = pool.global_info[lesion], pool.basic_info[lesion]
        sel.global_info[lesion] = [g[i] for i in _pick(rng, len(g), max_positive)]
        room = max_positive - len(sel.global_info[lesion])
        sel.basic_info[lesion] = [b[i] for i in _pick(rng, len(b), room)] if room > 0 else []
    positives = [e for bucket in (sel.global_info, sel.basic_info)
                 for entries in bucket.values() for e in entries]
    positive_dicoms = {e["dicom_id"] for e in positives}
    positive_studies = {str(e["study_id"]) for e in positives}
    used: set[str] = set()
    for lesion in LESIONS:
        seen: set[str] = set()
        candidates = []
        for e in pool.negative_info[lesion]:
            d = e["dicom_id"]
            if (d in positive_dicoms or str(e["study_id"]) in positive_studies or d in used
                    or d in seen):
                continue
            seen.add(d)
            candidates.append(e)
        chosen = [candidates[i] for i in _pick(rngs[lesion], len(candidates),
                                               negatives_per_lesion)]
        sel.negative_info[lesion] = chosen
        used.update(e["dicom_id"] for e in chosen)
        if len(chosen) < negatives_per_lesion:
            sel.shortfalls[lesion] = (f"{len(chosen)} of {negatives_per_lesion} negatives "
                                      f"available ({len(pool.negative_info[lesion])} global "
                                      f"negative pairs before excluding positive "
                                      f"dicoms/studies and used dicoms)")
            logger.warning("%s: only %s", lesion, sel.shortfalls[lesion])
    return sel


def inputs_hash(files: Sequence[str | Path | None], params: Mapping[str, Any]) -> str:
    """SHA-256 over the bytes of ``files`` (None entries skipped) and the JSON of ``params``.

    Used to decide whether Stage 00.00 outputs are current (inputs and seed unchanged).
    """
    h = hashlib.sha256()
    for f in files:
        if f is None:
            h.update(b"<none>")
            continue
        h.update(str(Path(f).name).encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    h.update(json.dumps(dict(params), sort_keys=True, default=str).encode())
    return h.hexdigest()


def selected_dicoms(sel: SourcePool) -> dict[str, str]:
    """``dicom_id -> image_path`` of every entry in the three buckets (first seen wins)."""
    out: dict[str, str] = {}
    for bucket in (sel.global_info, sel.basic_info, sel.negative_info):
        for lesion in LESIONS:
            for e in bucket[lesion]:
                out.setdefault(e["dicom_id"], e["image_path"])
    return out
