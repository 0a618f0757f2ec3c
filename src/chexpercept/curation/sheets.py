"""Stage 00.02-00.04: merge shard outputs, negative sheet, annotator distribution and merge-back.

Reads/writes ``rosalia_pred/{results,labeling_sheet}[_part<p>]``,
``negative/<lesion>/<key_id>.png``, ``negative/labeling_sheet.csv`` and
``distribute/annotator_<X>/{positive,negative}/``
(docs/curation.md, "Annotation sheets", "Negatives", "Labeling distribution").
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.errors import InputError, SchemaError
from chexpercept.files import read_csv_rows, read_json, write_csv_atomic, write_json_atomic
from chexpercept.layouts import CurationLayout
from chexpercept.lesions import LESIONS, make_key_id, validate_lesion
from chexpercept.schema import (
    NEGATIVE_SHEET_COLUMNS,
    OPTIMAL_COLUMN,
    POSITIVE_PART_SHEET_COLUMNS,
    POSITIVE_SHEET_COLUMNS,
    parse_optimal,
)

logger = logging.getLogger(__name__)


def copy_file_atomic(src: str | Path, dst: str | Path) -> None:
    """Copy ``src`` to ``dst`` through a temp file + rename (never a half-written ``dst``)."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)


# --------------------------------------------------------------------------------------
# 00.02 merge of shard outputs
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeOutcome:
    """Result of :func:`merge_parts`.

    Attributes:
        written: Whether ``results.json`` / ``labeling_sheet.csv`` were written.
        rows: Rows in the merged sheet (0 when nothing was written).
        message: What happened, for the log.
        base_out: The ``rosalia_pred`` folder merged in.
    """

    written: bool
    rows: int
    message: str
    base_out: Path | None = None

    def line(self) -> str:
        """The stage's log line: what happened, and where."""
        return f"{self.message} ({self.base_out})"


def merge_parts(base_out: str | Path, total_parts: int, *, force: bool = False) -> MergeOutcome:
    """Merge ``results_part<p>.json`` / ``labeling_sheet_part<p>.csv`` for p in 0..N-1.

    Fixes a release defect (docs/differences.md D7): a missing part is an error (no half merge); an
    unsharded run's outputs are never clobbered: with no part files, or when ``results.json`` is
    newer than every part file (an unsharded run after the shards, or an earlier merge), nothing
    is written unless ``force``.

    Args:
        base_out: The ``rosalia_pred`` folder.
        total_parts: Expected number of parts.
        force: Merge even if the unsharded outputs are newer than the parts.

    Returns:
        The outcome (``written`` False when there was nothing to do).

    Raises:
        InputError: If some but not all part files exist (missing ones listed), or if there are
            neither part files nor unsharded outputs.
        SchemaError: If a part sheet lacks columns.
    """
    layout = CurationLayout(Path(base_out).parent)
    root = Path(base_out)

    def part_files(p: int) -> tuple[Path, Path]:
        return (root / layout.candidate_results(p).name, root / layout.positive_sheet(p).name)

    final_results = root / layout.candidate_results().name
    final_sheet = root / layout.positive_sheet().name
    expected = [f for p in range(total_parts) for f in part_files(p)]
    present = [f for f in expected if f.is_file()]
    if not present:
        if final_results.is_file() or final_sheet.is_file():
            return MergeOutcome(False, 0, f"no part files under {root}; unsharded outputs "
                                          f"already there ({final_sheet.name}), left untouched",
                                root)
        raise InputError(f"no part files (results_part<p>.json, labeling_sheet_part<p>.csv, "
                         f"p < {total_parts}) and no unsharded outputs under {root}; run "
                         f"01_generate_rosalia_pred.py first")
    missing = [f.name for f in expected if not f.is_file()]
    if missing:
        raise InputError(f"{root}: cannot merge {total_parts} parts, missing: "
                         f"{', '.join(missing)} (rerun those parts or fix --total-parts)")
    newest_part = max(f.stat().st_mtime_ns for f in present)
    if (not force and final_results.is_file() and final_sheet.is_file()
            and min(final_results.stat().st_mtime_ns,
                    final_sheet.stat().st_mtime_ns) > newest_part):
        return MergeOutcome(False, 0, f"{final_results.name} and {final_sheet.name} are newer "
                                      f"than every part file (already merged, or written by an "
                                      f"unsharded run); left untouched (use --force to merge)",
                            root)
    results: dict[str, list[Any]] = {}
    rows: list[dict[str, str]] = []
    for p in range(total_parts):
        res_path, sheet_path = part_files(p)
        data = read_json(res_path)
        if not isinstance(data, dict):
            raise SchemaError(f"{res_path}: expected an object keyed by pair_id")
        for pair_id, entries in data.items():
            results.setdefault(pair_id, []).extend(entries)
        part_rows = read_csv_rows(sheet_path, required=POSITIVE_PART_SHEET_COLUMNS)
        rows.extend({c: r.get(c, "") for c in POSITIVE_SHEET_COLUMNS} for r in part_rows)
    write_json_atomic(final_results, results, indent=4)
    write_csv_atomic(final_sheet, rows, POSITIVE_SHEET_COLUMNS)
    return MergeOutcome(True, len(rows), f"merged {total_parts} part(s): {len(rows)} row(s)",
                        root)


# --------------------------------------------------------------------------------------
# 00.03 negative sheet
# --------------------------------------------------------------------------------------


def positive_dicoms(layout: CurationLayout, positive_csv: str | Path | None,
                    *, explicit: bool) -> set[str]:
    """dicom_ids that may not be used as negatives (docs/differences.md D8).

    Always: every dicom of ``global_segmentation_info.json`` / ``basic_segmentation_info.json``
    (when present), plus the positive sheet's ``dicom_id`` column.

    Args:
        layout: Stage 00 layout.
        positive_csv: Positive labeling sheet.
        explicit: Whether the user passed ``positive_csv`` (then it must exist).

    Raises:
        InputError: If an explicitly given positive sheet is missing.
    """
    out: set[str] = set()
    for kind in ("global", "basic"):
        path = layout.segmentation_info(kind)
        if path.is_file():
            data = read_json(path)
            out.update(e["dicom_id"] for entries in data.values() for e in entries)
    if positive_csv is not None and Path(positive_csv).is_file():
        out.update(r["dicom_id"] for r in read_csv_rows(positive_csv, required=("dicom_id",)))
    elif explicit:
        raise InputError(f"positive sheet not found: {positive_csv} (--positive-csv)")
    else:
        logger.warning("positive sheet %s not found; excluding the positive dicoms of the "
                       "segmentation_info JSONs only", positive_csv)
    return out


@dataclass
class NegativeOutcome:
    """Result of :func:`prepare_negatives`.

    Attributes:
        rows: Negative sheet rows (``NEGATIVE_SHEET_COLUMNS``).
        copied: CXR copies written now.
        skipped: CXR copies already present (resume).
        shortfalls: lesion -> message where fewer than requested were available.
    """

    rows: list[dict[str, str]] = field(default_factory=list)
    copied: int = 0
    skipped: int = 0
    shortfalls: dict[str, str] = field(default_factory=dict)


def prepare_negatives(layout: CurationLayout, *, cxr_dir: str | Path, samples_per_lesion: int,
                      exclude: Iterable[str]) -> NegativeOutcome:
    """Copy negative CXRs to ``negative/<lesion>/<key_id>.png`` and build the negative sheet.

    Per lesion (``LESIONS`` order) the first ``samples_per_lesion`` sampled negatives (already a
    seeded draw, Stage 00.00) whose dicom is not excluded are kept; kept dicoms are then
    excluded for later lesions (docs/curation.md, "Negatives").

    Args:
        layout: Stage 00 layout (reads ``global_segmentation_negative_info.json``).
        cxr_dir: ``path.mimic_cxr_path``.
        samples_per_lesion: Negatives per lesion.
        exclude: dicom_ids never used (positive dicoms).

    Returns:
        Rows and counts.

    Raises:
        InputError: If the negative info JSON is missing, or listing every missing CXR.
    """
    info_path = layout.segmentation_info("negative")
    if not info_path.is_file():
        raise InputError(f"{info_path} not found; run 00_sample_mimic_ils_case.py first")
    info = read_json(info_path)
    excluded = set(exclude)
    out = NegativeOutcome()
    plan: list[tuple[str, str, str]] = []
    for lesion in LESIONS:
        kept = []
        for e in info.get(lesion, []):
            if len(kept) >= samples_per_lesion:
                break
            if e["dicom_id"] in excluded:
                continue
            kept.append(e)
            excluded.add(e["dicom_id"])
        if len(kept) < samples_per_lesion:
            out.shortfalls[lesion] = f"{len(kept)} of {samples_per_lesion} negatives available"
        for e in kept:
            key_id = make_key_id(lesion, e["pair_id"])
            out.rows.append({"lesion": lesion, "key_id": key_id, "dicom_id": e["dicom_id"],
                             OPTIMAL_COLUMN: ""})
            plan.append((lesion, key_id, e["dicom_id"]))
    missing = [f"{key_id} (dicom {d}): {Path(cxr_dir) / f'{d}.png'}" for _, key_id, d in plan
               if not (Path(cxr_dir) / f"{d}.png").is_file()]
    if missing:
        raise InputError(f"{len(missing)} negative CXR(s) missing (path.mimic_cxr_path):\n  "
                         + "\n  ".join(missing))
    for lesion, key_id, dicom_id in plan:
        dst = layout.negative_image(lesion, key_id)
        if dst.is_file():
            out.skipped += 1
            continue
        copy_file_atomic(Path(cxr_dir) / f"{dicom_id}.png", dst)
        out.copied += 1
    return out


# --------------------------------------------------------------------------------------
# 00.04 distribution and merge-back
# --------------------------------------------------------------------------------------


def annotator_labels(n: int) -> list[str]:
    """``A``, ``B``, ... (release: ``chr(ord('A') + i)``)."""
    return [chr(ord("A") + i) for i in range(n)]


def round_robin(rows: Sequence[Mapping[str, str]], lesion_column: str,
                n: int) -> dict[str, list[Mapping[str, str]]]:
    """Split rows over ``n`` annotators: within each lesion, row i goes to annotator i % n."""
    out: dict[str, list[Mapping[str, str]]] = {a: [] for a in annotator_labels(n)}
    counters: dict[str, int] = {}
    labels = annotator_labels(n)
    for row in rows:
        lesion = row[lesion_column]
        i = counters.get(lesion, 0)
        counters[lesion] = i + 1
        out[labels[i % n]].append(row)
    return out


@dataclass(frozen=True)
class SheetTask:
    """One sheet to distribute.

    Attributes:
        task: ``positive`` or ``negative``.
        path: The main sheet.
        lesion_column: ``target`` (positive) or ``lesion`` (negative).
    """

    task: str
    path: Path
    lesion_column: str


def review_image(layout: CurationLayout, task: str, row: Mapping[str, str]) -> Path:
    """The image an annotator reviews for a row (plot for positives, CXR for negatives)."""
    if task == "positive":
        return (Path(row["plot_path"]) if row.get("plot_path")
                else layout.review_plot(row["target"], row["key_id"]))
    return layout.negative_image(row["lesion"], row["key_id"])


def _reviewed_annotator_sheets(layout: CurationLayout, tasks: Sequence[SheetTask]) -> list[str]:
    """Existing annotator sheets that already hold review values (would be overwritten)."""
    found = []
    for t in tasks:
        for sheet in sorted((layout.out / "distribute").glob(f"annotator_*/{t.task}/"
                                                             "labeling_sheet.csv")):
            rows = read_csv_rows(sheet)
            done = sum(1 for r in rows if (r.get(OPTIMAL_COLUMN) or "").strip())
            if done:
                found.append(f"{sheet} ({done} reviewed row(s))")
    return found


def distribute(layout: CurationLayout, tasks: Sequence[SheetTask],
               num_annotators: int, *, overwrite: bool = False) -> dict[str, dict[str, int]]:
    """Write ``distribute/annotator_<X>/<task>/{labeling_sheet.csv, <lesion>/<key_id>.png}``.

    Args:
        layout: Stage 00 paths.
        tasks: The positive and negative sheets.
        num_annotators: Annotators A, B, ...
        overwrite: Replace annotator sheets that already hold review values.

    Raises:
        InputError: Listing every review image that is missing, duplicated key_id or unknown
            lesion, or (without ``overwrite``) every annotator sheet that already holds review
            values, which a new distribution would erase; nothing is written then.

    Returns:
        task -> annotator -> rows assigned.
    """
    if not overwrite:
        reviewed = _reviewed_annotator_sheets(layout, tasks)
        if reviewed:
            raise InputError(
                "annotator sheets already hold review values; distributing again would erase "
                "them (merge them back with --merge first, or pass --force):\n  "
                + "\n  ".join(reviewed))
    plans = []
    missing: list[str] = []
    for t in tasks:
        rows = read_csv_rows(t.path, required=("key_id", t.lesion_column, OPTIMAL_COLUMN))
        seen: set[str] = set()
        for i, row in enumerate(rows, start=1):
            if row["key_id"] in seen:
                missing.append(f"{t.path} row {i}: key_id {row['key_id']} appears more than once")
            seen.add(row["key_id"])
            try:
                validate_lesion(row[t.lesion_column].strip(),
                                where=f"{t.path} row {i} ({t.lesion_column})")
            except InputError as exc:
                missing.append(str(exc))
        columns = list(rows[0].keys()) if rows else list(
            POSITIVE_SHEET_COLUMNS if t.task == "positive" else NEGATIVE_SHEET_COLUMNS)
        split = round_robin(rows, t.lesion_column, num_annotators)
        for row in rows:
            img = review_image(layout, t.task, row)
            if not img.is_file():
                missing.append(f"{t.task} {row['key_id']}: {img}")
        plans.append((t, columns, split))
    if missing:
        raise InputError(f"cannot distribute, {len(missing)} problem(s) (missing review images, "
                         f"duplicated key_ids, unknown lesions):\n  " + "\n  ".join(missing))
    counts: dict[str, dict[str, int]] = {}
    for t, columns, split in plans:
        counts[t.task] = {}
        for annotator, rows in split.items():
            folder = layout.annotator_dir(annotator, t.task)
            write_csv_atomic(folder / "labeling_sheet.csv", rows, columns)
            for row in rows:
                lesion = row[t.lesion_column]
                dst = folder / lesion / f"{row['key_id']}.png"
                if not dst.is_file():
                    copy_file_atomic(review_image(layout, t.task, row), dst)
            counts[t.task][annotator] = len(rows)
    return counts


def merge_annotations(layout: CurationLayout, tasks: Sequence[SheetTask],
                      num_annotators: int, *,
                      allow_unreviewed: bool = False) -> dict[str, dict[str, int]]:
    """Write the annotators' ``optimal?`` values back into the main sheets.

    docs/differences.md D10.

    Every main-sheet row must be reviewed exactly once with a valid value. Every annotator
    value is parsed strictly (:func:`chexpercept.schema.parse_optimal`). All problems are
    collected and reported at once, each naming the task, key_id and annotator sheet: a missing
    annotator sheet, an invalid value, a key_id answered by more than one annotator or twice in
    one sheet (conflicting or not), a main-sheet row no annotator has (gap), a blank value (not
    reviewed; allowed only with ``allow_unreviewed``), or an annotator row absent from the main
    sheet. Nothing is written if there is any problem.

    Args:
        layout: Stage 00 layout (annotator folders).
        tasks: The sheets to merge into.
        num_annotators: Annotators A.. the sheets were split over.
        allow_unreviewed: Accept blank values (kept blank) instead of reporting them.

    Returns:
        task -> {accepted, rejected, unreviewed} counts.

    Raises:
        InputError: Listing every problem (file, key_id, annotator, values).
    """
    problems: list[str] = []
    plans = []
    for t in tasks:
        main_rows = read_csv_rows(t.path, required=("key_id", OPTIMAL_COLUMN))
        main_keys = {r["key_id"] for r in main_rows}
        answers: dict[str, tuple[str, str, bool | None]] = {}
        for annotator in annotator_labels(num_annotators):
            sheet = layout.annotator_dir(annotator, t.task) / "labeling_sheet.csv"
            if not sheet.is_file():
                problems.append(f"{t.task}: annotator {annotator} sheet missing: {sheet}")
                continue
            for row in read_csv_rows(sheet, required=("key_id", OPTIMAL_COLUMN)):
                key_id, raw = row["key_id"], row[OPTIMAL_COLUMN].strip()
                try:
                    verdict = parse_optimal(raw)
                except ValueError:
                    problems.append(f"{t.task}: {sheet}: key_id {key_id}: invalid "
                                    f"{OPTIMAL_COLUMN} value {raw!r} (use y/n or blank)")
                    continue
                if key_id not in main_keys:
                    problems.append(f"{t.task}: {sheet}: key_id {key_id} is not in {t.path}")
                    continue
                if key_id in answers:
                    other = answers[key_id]
                    kind = "conflict" if other[2] != verdict else "reviewed twice"
                    problems.append(f"{t.task}: key_id {key_id}: {kind}: annotator {other[0]} "
                                    f"says {other[1]!r}, annotator {annotator} says {raw!r}")
                    continue
                if verdict is None and not allow_unreviewed:
                    problems.append(f"{t.task}: {sheet}: key_id {key_id}: not reviewed (blank "
                                    f"{OPTIMAL_COLUMN}; fill y/n)")
                answers[key_id] = (annotator, raw, verdict)
        absent = [k for k in (r["key_id"] for r in main_rows) if k not in answers]
        if absent:
            problems.append(f"{t.task}: {len(absent)} row(s) of {t.path} in no annotator sheet: "
                            + ", ".join(absent))
        plans.append((t, main_rows, answers))
    if problems:
        raise InputError(f"cannot merge annotations ({len(problems)} problem(s)):\n  "
                         + "\n  ".join(problems))
    counts: dict[str, dict[str, int]] = {}
    for t, main_rows, answers in plans:
        columns = list(main_rows[0].keys()) if main_rows else []
        c = {"accepted": 0, "rejected": 0, "unreviewed": 0}
        out_rows = []
        for row in main_rows:
            _, raw, verdict = answers[row["key_id"]]
            c["unreviewed" if verdict is None else "accepted" if verdict else "rejected"] += 1
            out_rows.append({**row, OPTIMAL_COLUMN: raw})
        if columns:
            write_csv_atomic(t.path, out_rows, columns)
        counts[t.task] = c
    return counts
