"""Stage 03: split a run into parts by key_id and merge the parts' ``all_results.json``.

A case belongs to part ``stable_hash(key_id) % total_parts`` (blake2b, ``chexpercept.rng``), so
its part does not depend on the JSON order, on ``--limit``/``--per_path_limit`` or on the
machine. Part ``i`` of ``n`` runs in ``<run_dir>/part_<i>_of_<n>/`` (``layouts.eval_part_dir``) with
its own ``run_manifest.json``, ``records.jsonl`` and ``all_results.json``, so parts can run on
different GPUs or machines at once and each resumes on its own. :func:`merge_parts` checks that
every part is present, was run with the same settings and is complete, then builds the run's
combined ``all_results.json`` (benchmark order) and manifest.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.errors import ConfigError, InputError
from chexpercept.evaluation.cases import Bundle, bundle_image_digests, plan_cases
from chexpercept.evaluation.option_order import apply_option_order
from chexpercept.image_digests import IMAGES_SHA_FIELD, changed_images, named_changes
from chexpercept.layouts import eval_part_dir, run_manifest_path
from chexpercept.rng import stable_hash
from chexpercept.run_store import IDENTITY_FIELDS, SELECTION_FIELD, RunStore, identity_diffs

logger = logging.getLogger(__name__)

#: Manifest field holding ``{"part": i, "total_parts": n}`` (parts) or
#: ``{"total_parts": n, "merged": true}`` (a merged run).
SHARDING_FIELD = "sharding"
#: Problems listed in full in a refusal before the rest are counted.
_MAX_LISTED = 20


def check_part(part: int | None, total_parts: int) -> None:
    """Check ``--part``/``--total-parts``.

    Args:
        part: Part index in ``[0, total_parts)``, or None for an unsharded run.
        total_parts: Number of parts (>= 1).

    Raises:
        ConfigError: If ``total_parts < 1``, ``part`` is outside ``[0, total_parts)``, or
            ``total_parts > 1`` without ``part``.
    """
    if total_parts < 1:
        raise ConfigError(f"--total-parts must be >= 1, got {total_parts}")
    if part is None:
        if total_parts > 1:
            raise ConfigError(f"--total-parts {total_parts} needs --part (0..{total_parts - 1})")
        return
    if not 0 <= part < total_parts:
        raise ConfigError(f"--part must be in 0..{total_parts - 1} for --total-parts "
                          f"{total_parts}, got {part}")


def part_of(key_id: str, total_parts: int) -> int:
    """The part a case belongs to: ``blake2b-64(key_id) mod total_parts``.

    Args:
        key_id: The case's key_id.
        total_parts: Number of parts (>= 1).

    Returns:
        Part index in ``[0, total_parts)``; the same in every process and on every machine.
    """
    return stable_hash(key_id) % total_parts


def select_part(key_ids: Sequence[str], part: int | None, total_parts: int) -> list[str]:
    """The key_ids of ``part`` (order kept); all of them when ``part`` is None.

    Raises:
        ConfigError: See :func:`check_part`.
    """
    check_part(part, total_parts)
    if part is None:
        return list(key_ids)
    return [k for k in key_ids if part_of(k, total_parts) == part]


def part_sharding(part: int, total_parts: int) -> dict[str, int]:
    """The manifest's ``sharding`` value of one part (an identity field: resume compares it)."""
    return {"part": part, "total_parts": total_parts}


@dataclass
class MergedRun:
    """A merge's outputs (not yet written).

    Attributes:
        all_results: Combined ``all_results.json`` content, in benchmark order.
        manifest: Combined ``run_manifest.json`` content.
        cases_per_part: Number of cases each part contributed.
        warnings: Non-fatal differences between parts (code version, packages).
    """

    all_results: dict[str, Any]
    manifest: dict[str, Any]
    cases_per_part: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _listed(problems: Sequence[str]) -> str:
    shown = "\n  ".join(problems[:_MAX_LISTED])
    more = len(problems) - _MAX_LISTED
    return shown + (f"\n  ... and {more} more" if more > 0 else "")


def _part_env(manifest: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in manifest.items() if k not in IDENTITY_FIELDS}


def merge_parts(bundle: Bundle, run_dir: str | Path, total_parts: int,
                key_ids: Sequence[str] | None = None,
                selection: dict[str, int | None] | None = None) -> MergedRun:
    """Check the parts of a sharded run and combine them.

    Checks, collecting every problem before raising once:

    - every ``part_<i>_of_<n>/`` exists with a ``run_manifest.json`` for part ``i`` of ``n``;
    - every part's identity fields (``store.IDENTITY_FIELDS``: provider, model, provider
      settings, oracle setting, seed, prompt and benchmark hashes, ...) equal part 0's, and the
      benchmark hash equals ``bundle``'s;
    - every selected case of each part has a record for every turn of its path in the part's
      ``records.jsonl``, and an entry in the part's ``all_results.json``;
    - no part holds a case that belongs to another part.

    Args:
        bundle: The benchmark the parts ran on.
        run_dir: ``<output-path>/<provider>_<model>/oracle_<setting>/`` (the parts' parent).
        total_parts: Number of parts the run was split into.
        key_ids: Cases that must be complete (the parts' ``--limit``/``--per_path_limit``
            selection); None means every case of the benchmark.
        selection: The merge's own ``{"limit": ..., "per_path_limit": ...}``, compared with
            what the parts recorded (a difference is named); None skips the comparison.

    Returns:
        The merged results and manifest. Every finished case of every part is included.

    Raises:
        ConfigError: If ``total_parts < 1``, or ``run_dir`` holds an unsharded run.
        InputError: Naming each missing part, differing manifest field, incomplete key_id
            (with its missing turns) and stale ``all_results.json``.
    """
    check_part(0, total_parts)
    run_dir = Path(run_dir)
    existing = RunStore(run_dir).read_manifest()
    if existing is not None and not existing.get(SHARDING_FIELD, {}).get("merged"):
        raise ConfigError(f"{run_manifest_path(run_dir)}: {run_dir} holds an unsharded run; "
                          f"merged parts would overwrite its all_results.json. Use another "
                          f"--output-path for sharded runs.")
    wanted = list(bundle.items) if key_ids is None else list(key_ids)
    problems: list[str] = []
    manifests = _part_manifests(run_dir, total_parts, problems)
    first_part = min(manifests)
    warnings = _check_manifests(bundle, manifests, selection, problems)
    _check_images(bundle, run_dir, total_parts, manifests, problems)
    # the turns the parts asked: their option order adds the circular rotations (an identity
    # field, so every part has the first part's; docs/evaluation_protocol.md, "Option order")
    reference = manifests[first_part]
    order, seed = reference.get("option_order", "release"), reference.get("seed", 0)
    planned = {c.key_id: apply_option_order(c, order, seed)
               for c in plan_cases(bundle, [k for k in wanted if k in bundle.items])}
    unknown = [k for k in wanted if k not in bundle.items]
    if unknown:
        problems.append(f"{len(unknown)} selected key_id(s) not in {bundle.layout.json_path}: "
                        f"{', '.join(unknown[:_MAX_LISTED])}")
    incomplete: list[str] = []
    part_results = {part: _check_part(bundle, RunStore(eval_part_dir(run_dir, part,
                                                                        total_parts)),
                                      part, total_parts, wanted, planned, incomplete, problems)
                    for part in manifests}
    if incomplete:
        problems.append(f"{len(incomplete)} case(s) are incomplete (re-run their part's "
                        f"command to finish them):\n    " + "\n    ".join(
                            incomplete[:_MAX_LISTED])
                        + (f"\n    ... and {len(incomplete) - _MAX_LISTED} more"
                           if len(incomplete) > _MAX_LISTED else ""))
    if problems:
        raise InputError(f"{run_dir}: cannot merge {total_parts} part(s); {len(problems)} "
                         f"problem(s):\n  " + _listed(problems))
    merged: dict[str, Any] = {}
    counts = [0] * total_parts
    for key_id in bundle.items:
        for part, results in part_results.items():
            if key_id in results:
                merged[key_id] = results[key_id]
                counts[part] += 1
    manifest = {**manifests[first_part],
                SHARDING_FIELD: {"total_parts": total_parts, "merged": True},
                "parts": [{"part": p, "run_dir": str(eval_part_dir(run_dir, p, total_parts)),
                           **{k: v for k, v in _part_env(manifests[p]).items()
                              if k != SHARDING_FIELD}}
                          for p in sorted(manifests)],
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    for warning in warnings:
        logger.warning("%s", warning)
    return MergedRun(merged, manifest, counts, warnings)


def _part_manifests(run_dir: Path, total_parts: int,
                    problems: list[str]) -> dict[int, dict[str, Any]]:
    """Each part's manifest (a missing or mislabelled one is a problem).

    Raises:
        InputError: If no part has a usable manifest (lists ``problems``).
    """
    manifests: dict[int, dict[str, Any]] = {}
    for part in range(total_parts):
        part_store = RunStore(eval_part_dir(run_dir, part, total_parts))
        path = part_store.manifest_path
        manifest = part_store.read_manifest()
        if manifest is None:
            problems.append(f"part {part} of {total_parts} is missing: no {path} (run 00_eval.py "
                            f"with --part {part} --total-parts {total_parts})")
        elif manifest.get(SHARDING_FIELD) != part_sharding(part, total_parts):
            problems.append(f"{path}: holds sharding {manifest.get(SHARDING_FIELD)!r}, expected "
                            f"{part_sharding(part, total_parts)}")
        else:
            manifests[part] = manifest
    if not manifests:
        raise InputError(f"{run_dir}: cannot merge {total_parts} part(s):\n  "
                         + _listed(problems))
    return manifests


def _check_images(bundle: Bundle, run_dir: Path, total_parts: int,
                  manifests: dict[int, dict[str, Any]], problems: list[str]) -> None:
    """Compare each part's ``benchmark_images_sha256`` with the bundle's images now.

    A part whose images differ is a problem naming each changed image by key_id and relative
    path (from the part's ``image_digests.json``; the digests alone when it is lost). A part
    written before the field existed is not checked (docs/evaluation_protocol.md, "Run
    folder"). The parts agree with one another through :func:`identity_diffs`.
    """
    ran = {part: m[IMAGES_SHA_FIELD] for part, m in manifests.items()
           if m.get(IMAGES_SHA_FIELD) is not None}
    if not ran:
        return
    images = bundle_image_digests(bundle)
    for part, sha in sorted(ran.items()):
        if sha == images.sha256:
            continue
        recorded = RunStore(eval_part_dir(run_dir, part, total_parts)).read_image_digests()
        lines = changed_images(recorded, images.files) if recorded is not None else []
        what = (f"{len(lines)} image(s) differ: {named_changes(lines)}" if lines else
                f"'{IMAGES_SHA_FIELD}' {sha!r}, the bundle's now {images.sha256!r}")
        problems.append(f"part {part} ran on other images than {bundle.layout.images_dir} "
                        f"({what}); pass the --benchmark-dir the parts used, or run the parts "
                        f"on these images under another --output-path")


def _check_manifests(bundle: Bundle, manifests: dict[int, dict[str, Any]],
                     selection: dict[str, int | None] | None, problems: list[str]) -> list[str]:
    """Compare the parts' manifests with the first part's and with the bundle.

    Appends each difference that forbids the merge to ``problems``; returns the warnings
    (code version, packages).
    """
    first_part = min(manifests)
    reference = manifests[first_part]
    if reference.get("benchmark_json_sha256") != bundle.json_sha256:
        problems.append(f"part {first_part} ran on another chexpercept.json (sha256 "
                        f"{reference.get('benchmark_json_sha256')}) than {bundle.layout.json_path} "
                        f"(sha256 {bundle.json_sha256}); pass the --benchmark-dir the parts "
                        f"used")
    selections = {part: m.get(SELECTION_FIELD) for part, m in manifests.items()
                  if m.get(SELECTION_FIELD) is not None}  # parts of earlier versions lack it
    if len({json.dumps(v, sort_keys=True) for v in selections.values()}) > 1:
        problems.append("the parts selected different cases: " + "; ".join(
            f"part {p} ran with {_selection_flags(v)}" for p, v in sorted(selections.items()))
            + "; run every part with the same --limit/--per_path_limit")
    elif selections and selection is not None:
        ran = next(iter(selections.values()))
        if _selection_flags(ran) != _selection_flags(selection):
            problems.append(f"the parts ran with {_selection_flags(ran)} but the merge was "
                            f"given {_selection_flags(selection)}; pass the same to the merge")
    warnings = []
    for part, manifest in manifests.items():
        diffs = identity_diffs(reference, manifest, old_name=f"part {first_part}",
                               new_name=f"part {part}", skip=(SHARDING_FIELD,))
        if diffs:
            problems.append(f"part {part} was run with other settings than part {first_part}: "
                            + "; ".join(diffs))
        warnings += [f"parts {first_part} and {part} differ in {k}"
                     for k in ("git_commit", "packages") if manifest.get(k) != reference.get(k)]
    return warnings


def _check_part(bundle: Bundle, part_store: RunStore, part: int, total_parts: int,
                wanted: Sequence[str], planned: Mapping[str, Any], incomplete: list[str],
                problems: list[str]) -> dict[str, Any]:
    """One part's ``all_results.json``, after checking it against its records.

    Appends to ``incomplete`` each of the part's selected cases that lacks a turn, and to
    ``problems`` finished cases missing from ``all_results.json`` and cases of other parts.
    """
    recorded = part_store.recorded_turns()
    results = part_store.read_results()
    stale = []
    for key_id in wanted:
        if key_id not in planned or part_of(key_id, total_parts) != part:
            continue
        missing = [t.spec.name for t in planned[key_id].turns
                   if t.spec.name not in recorded.get(key_id, set())]
        if missing:
            incomplete.append(f"part {part}: {key_id} lacks {', '.join(missing)}")
        elif key_id not in results:
            stale.append(key_id)
    if stale:
        problems.append(f"{part_store.results_path} lacks {len(stale)} finished case(s) (e.g. "
                        f"{stale[0]}); re-run the part's command to rebuild it (no request "
                        f"is sent again)")
    foreign = [k for k in (*results, *recorded) if k in bundle.items
               and part_of(k, total_parts) != part]
    if foreign:
        problems.append(f"{part_store.run_dir} holds {len(set(foreign))} case(s) of other parts "
                        f"(e.g. {foreign[0]}); was it run with another --total-parts?")
    return results


def _selection_flags(selection: Any) -> str:
    """A part's recorded selection as the flags that made it."""
    if not isinstance(selection, dict):
        return "an unknown selection"
    flags = [f"--{name} {selection[name]}" for name in ("limit", "per_path_limit")
             if selection.get(name) is not None]
    return " ".join(flags) or "no --limit/--per_path_limit"


def write_merged(run_dir: str | Path, merged: MergedRun) -> Path:
    """Write the merged ``all_results.json`` then ``run_manifest.json`` (each atomically).

    Returns:
        The ``all_results.json`` path.
    """
    return RunStore(run_dir).write_merged(merged.all_results, merged.manifest)
