"""Stage 02: select cases, split revision-free/required, build all cases, assemble outputs.

Reads ``deformation_results.json``, the positive and negative labeling sheets (each once,
docs/differences.md D28) and the deformed/anatomy masks and CXRs; writes
``qa_results/qa_results.json``, ``qa_results/qa_labeling.csv``, ``qa_results/summary.json``,
``qa_results/items/`` and ``chexpercept/<key_id>/`` under the Stage 02 output folder
(docs/qa_generation.md, "Export and sampling"; release defects fixed: docs/differences.md D15,
D21, D22, D26, D28, D30, D45 and D46).
"""

from __future__ import annotations

import logging
import multiprocessing
import shutil
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.bundle import stage_counts
from chexpercept.errors import InputError, SchemaError
from chexpercept.files import read_csv_rows, read_json, write_csv_atomic, write_json_atomic
from chexpercept.layouts import QALayout
from chexpercept.lesions import LESIONS, QA_PATHS, lesion_from_key_id
from chexpercept.qa.build import CaseOutcome, CaseTask, process_case
from chexpercept.qa.contour import has_deformation
from chexpercept.qa.review import review_plot_name, review_types
from chexpercept.rng import rng_for
from chexpercept.schema import (
    QA_LABELING_COLUMNS,
    BenchmarkItem,
    DeformationCase,
    accepted_key_ids,
    parse_benchmark,
    parse_deformation_results,
    qa_path_of,
)

logger = logging.getLogger(__name__)

#: Revision-free fraction when the config names neither the lesion nor ``default``
#: (the release's ``assign_no_deformation_flags``; docs/qa_generation.md, "Export and sampling").
DEFAULT_NO_DEFORMATION_RATIO = 0.5


@dataclass(frozen=True)
class QAInputs:
    """Where Stage 02 reads and writes (every path resolved by the CLI).

    Attributes:
        deformation_results_json: Stage 01 ``deformation_results.json``.
        positive_labeling_sheet: Positive sheet (key_id, dicom_id, optimal?).
        negative_labeling_sheet: Negative sheet (lesion, key_id, dicom_id, optimal?).
        positive_annotation_csv: Replaces the positive sheet for the selection only
            (``optimal`` or ``optimal?`` column); dicom ids still come from the sheet.
        negative_annotation_csv: The same for negatives.
        deformed_mask_dir: Root of ``<key_id>/<stem>.png`` masks.
        chexmask_dir: CheXmask-U root (``<dicom>/{right,left}_lung.png``).
        cxas_dir: CXAS root (``<dicom>/{right,left} lung.png``).
        cxr_dir: Flat folder of ``<dicom_id>.png`` CXRs.
        output_dir: Stage 02 output folder (:class:`chexpercept.layouts.QALayout`).
    """

    deformation_results_json: Path
    positive_labeling_sheet: Path
    negative_labeling_sheet: Path
    positive_annotation_csv: Path | None
    negative_annotation_csv: Path | None
    deformed_mask_dir: Path
    chexmask_dir: Path
    cxas_dir: Path
    cxr_dir: Path
    output_dir: Path


@dataclass
class Selection:
    """Cases Stage 02 builds, in sheet order, and accepted cases it cannot build.

    Attributes:
        positives: Accepted positive key_ids with ``qa_deformation_success``.
        negatives: Accepted negative key_ids.
        dicom_ids: key_id -> dicom_id for every selected case that has one.
        excluded: ``{"key_id", "reason"}`` of accepted positives missing from, or failed in,
            the deformation results.
    """

    positives: list[str] = field(default_factory=list)
    negatives: list[str] = field(default_factory=list)
    dicom_ids: dict[str, str] = field(default_factory=dict)
    excluded: list[dict[str, str]] = field(default_factory=list)


@dataclass
class QAReport:
    """Result of :func:`generate_qa`.

    Attributes:
        layout: Output paths.
        counts: Outcome counts (``built``, ``reused``, ``failed``, ``excluded``).
        summary: The content written to ``summary.json``.
        review_figures: Whether the review figures were drawn.
    """

    layout: QALayout
    counts: dict[str, int]
    summary: dict[str, Any]
    review_figures: bool = True

    def failure_counts(self) -> tuple[int, int, str]:
        """``(failed, total, what)`` for the stage's exit code (``failures_exit_code``).

        When every accepted positive lacks a usable Stage 01 result (a wrong or empty input
        file, not a few failed deformations, which Stage 01 reports), those exclusions count
        as the failures; otherwise the cases that could not be built do.
        """
        c = self.counts
        if c["excluded"] and not self.summary.get("selection", {}).get("positives_selected"):
            return (c["excluded"], c["excluded"],
                    "accepted positive(s) (no usable Stage 01 deformation)")
        return c["failed"], c["built"] + c["reused"] + c["failed"], "case(s)"

    def lines(self) -> list[str]:
        """The stage's summary lines: counts, then where the outputs are."""
        c, layout = self.counts, self.layout
        figures = f" (figures in {layout.review_dir})" if self.review_figures else ""
        return [f"done: {c['built']} built, {c['reused']} skipped (already done), {c['failed']} "
                f"failed, {c['excluded']} excluded (accepted but no usable deformation); "
                f"{self.summary['cases']} cases, {self.summary['qa_items']} QA items -> "
                f"{layout.qa_results_json}",
                f"images: {layout.bundle_dir}; labeling sheet: {layout.qa_labeling_csv}"
                f"{figures}; summary: {layout.summary_json}"]


def _dedupe(key_ids: list[str], where: Path) -> list[str]:
    out = list(dict.fromkeys(key_ids))
    if len(out) < len(key_ids):
        logger.warning("%s: %d duplicate key_id row(s); the first of each is used", where,
                       len(key_ids) - len(out))
    return out


def _read_sheets(sheet: Path, annotation: Path | None
                 ) -> tuple[list[dict[str, str]], list[dict[str, str]], Path]:
    """(selection rows, sheet rows for dicom lookup, selection source path)."""
    if annotation is None:
        rows = read_csv_rows(sheet, required=("key_id", "dicom_id"))
        return rows, rows, sheet
    selection = read_csv_rows(annotation, required=("key_id",))
    lookup = read_csv_rows(sheet, required=("key_id", "dicom_id")) if sheet.is_file() else []
    return selection, lookup, annotation


def _check_lesions(key_ids: Sequence[str], where: Path) -> None:
    bad = []
    for key_id in key_ids:
        try:
            lesion_from_key_id(key_id)
        except InputError as exc:
            bad.append(str(exc))
    if bad:
        raise SchemaError(f"{where}: {len(bad)} bad key_id(s): " + "; ".join(bad))


def select_cases(inputs: QAInputs, cases: Mapping[str, DeformationCase]) -> Selection:
    """Read the sheets once each and pick the cases to build (docs/qa_generation.md).

    Positives = accepted key_ids (sheet order) that are in ``cases`` with
    ``qa_deformation_success``; an accepted key_id missing there or failed is listed in
    ``excluded`` with its reason. Negatives = accepted negative key_ids. A positive's
    dicom_id is the deformation entry's ``dicom_id`` if set, else the sheet's.

    Raises:
        InputError: If a sheet is missing.
        SchemaError: On bad columns, ``optimal?`` values or key_ids (all listed at once), or
            a key_id accepted as both positive and negative.
    """
    sel = Selection()
    pos_rows, pos_sheet, pos_src = _read_sheets(inputs.positive_labeling_sheet,
                                                inputs.positive_annotation_csv)
    neg_rows, neg_sheet, neg_src = _read_sheets(inputs.negative_labeling_sheet,
                                                inputs.negative_annotation_csv)

    sheet_dicoms: dict[str, str] = {}
    for rows in (pos_rows, pos_sheet, neg_rows, neg_sheet):
        for row in rows:
            if row.get("dicom_id"):
                sheet_dicoms[row["key_id"]] = row["dicom_id"]

    accepted_pos = _dedupe(accepted_key_ids(pos_rows, pos_src), pos_src)
    accepted_neg = _dedupe(accepted_key_ids(neg_rows, neg_src), neg_src)
    _check_lesions(accepted_pos, pos_src)
    _check_lesions(accepted_neg, neg_src)
    for key_id in accepted_pos:
        case = cases.get(key_id)
        if case is None:
            sel.excluded.append({"key_id": key_id, "reason": "accepted but not in "
                                 f"{inputs.deformation_results_json.name}"})
            continue
        if not case.qa_deformation_success:
            sel.excluded.append({"key_id": key_id, "reason": "qa_deformation_success is false "
                                 "in the deformation results"})
            continue
        sel.positives.append(key_id)
        dicom = case.dicom_id or sheet_dicoms.get(key_id)
        if case.dicom_id and sheet_dicoms.get(key_id, case.dicom_id) != case.dicom_id:
            logger.warning("%s: dicom_id %s in the deformation results differs from %s in the "
                           "sheet; using the deformation results'", key_id, case.dicom_id,
                           sheet_dicoms[key_id])
        if dicom:
            sel.dicom_ids[key_id] = dicom
    both = sorted(set(accepted_pos) & set(accepted_neg))
    if both:
        raise SchemaError(f"{pos_src} and {neg_src}: key_id(s) accepted as both positive and "
                          f"negative: {both}")
    sel.negatives = accepted_neg
    for key_id in sel.negatives:
        if sheet_dicoms.get(key_id):
            sel.dicom_ids[key_id] = sheet_dicoms[key_id]
    return sel


def no_deformation_ratio(ratios: Mapping[str, float], lesion: str) -> float:
    """``qa_generation.no_deformation_ratio[lesion]``, else ``[default]``, else 0.5."""
    return float(ratios.get(lesion, ratios.get("default", DEFAULT_NO_DEFORMATION_RATIO)))


def assign_revision_free(key_ids: Sequence[str], seed: int, ratios: Mapping[str, float],
                         eligible: Collection[str] | None = None) -> dict[str, bool]:
    """Seeded revision-free / revision-required split per lesion (docs/differences.md D21).

    Rule, per lesion with ``n`` positives: ``n_rr = n - round(n * ratio)`` (the ratio from
    :func:`no_deformation_ratio`) revision-required cases are drawn at
    random (``rng_for(seed, "qa_split", lesion)``) among the positives with a usable
    deformation (``eligible``; fewer if fewer are eligible); every other positive is
    revision-free. The export then draws ``sampling.revision_required`` cases at random from
    the first group and ``sampling.revision_free`` at random from the second, so in the
    sampled benchmark the revision-required cases are a uniform draw among deformable
    positives and the revision-free ones a uniform draw among the remaining positives. With
    the paper's defaults (ratio 0.5, 100/100) a lesion needs >= 200 positives of which
    >= 100 are deformable.

    Args:
        key_ids: Positive key_ids (any order; the draw depends on their order per lesion).
        seed: Config seed.
        ratios: ``qa_generation.no_deformation_ratio``.
        eligible: key_ids that can be revision-required; None means all.

    Returns:
        key_id -> no_deformation, for every key_id given.
    """
    by_lesion: dict[str, list[str]] = {}
    for key_id in key_ids:
        by_lesion.setdefault(lesion_from_key_id(key_id), []).append(key_id)
    flags: dict[str, bool] = {}
    for lesion, keys in by_lesion.items():
        n_free = round(len(keys) * no_deformation_ratio(ratios, lesion))
        pool = [k for k in keys if eligible is None or k in eligible]
        n_required = min(len(keys) - n_free, len(pool))
        order = rng_for(seed, "qa_split", lesion).permutation(len(pool))
        required = {pool[int(i)] for i in order[:n_required]}
        flags.update({k: k not in required for k in keys})
    return flags


def count_questions(item: Mapping[str, Any]) -> int:
    """QA items of one case as the paper counts them (docs/paper.md, "Benchmark size").

    Detection 1; contour eval 1; revision 3 when asked; attributes 4 when present
    (:func:`chexpercept.bundle.stage_counts`).
    """
    return sum(stage_counts(BenchmarkItem.model_validate(item)))


def _run(tasks: Sequence[CaseTask], num_workers: int,
         progress: Callable[[Iterable[CaseOutcome], int], Iterable[CaseOutcome]] | None
         ) -> list[CaseOutcome]:
    wrap = progress or (lambda it, total: it)
    workers = max(1, min(num_workers, len(tasks)))
    if workers == 1:
        return list(wrap((process_case(t) for t in tasks), len(tasks)))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        results: Iterator[CaseOutcome] = pool.map(process_case, tasks, chunksize=1)
        return list(wrap(results, len(tasks)))


def labeling_rows(items: Mapping[str, Mapping[str, Any]]) -> list[dict[str, str]]:
    """``qa_labeling.csv`` rows (columns :data:`chexpercept.schema.QA_LABELING_COLUMNS`).

    One ``attribute_extraction`` row per positive non-cardiomegaly case and one
    ``deformation`` row per revision-required case (the release never wrote the latter).
    ``plot_name`` is ``<key_id>_<qa_type>_qa.png``, a figure in ``qa_results/qa_visualizations/``
    (:mod:`chexpercept.qa.review`; the release named figures it never drew).
    """
    return [{"plot_name": review_plot_name(key_id, qa_type), "qa_type": qa_type,
             "key_id": key_id, "lesion_name": lesion_from_key_id(key_id),
             "pair_id": item["pair_id"], "dicom_id": item["dicom_id"]}
            for key_id, item in items.items() for qa_type in review_types(key_id, item)]


def generate_qa(inputs: QAInputs, *, seed: int, ratios: Mapping[str, float],
                num_workers: int = 1, review_figures: bool = True,
                progress: Callable[[Iterable[CaseOutcome], int], Iterable[CaseOutcome]]
                | None = None) -> QAReport:
    """Run Stage 02 end to end and write its artifacts.

    Args:
        inputs: Resolved input/output paths.
        seed: Config seed (every random choice derives from it).
        ratios: ``qa_generation.no_deformation_ratio``.
        num_workers: Worker processes; output is identical for any count.
        review_figures: Draw the figures ``qa_labeling.csv`` names into
            ``qa_results/qa_visualizations/`` (:mod:`chexpercept.qa.review`).
        progress: Optional wrapper ``(iterable, total) -> iterable`` for a progress bar.

    Returns:
        Counts and the summary; files are under ``QALayout(inputs.output_dir)``.

    Raises:
        InputError: If an input file is missing.
        SchemaError: If an input does not match its schema.
    """
    layout = QALayout(Path(inputs.output_dir))
    cases = parse_deformation_results(read_json(inputs.deformation_results_json),
                                      inputs.deformation_results_json)
    sel = select_cases(inputs, cases)
    deformable = {k for k in sel.positives if has_deformation(cases[k])}
    flags = assign_revision_free(sel.positives, seed, ratios, eligible=deformable)
    forced = [k for k in sel.positives if k not in deformable]
    if forced:
        logger.warning("%d positive(s) have no deformation step and can only be revision-free: "
                       "%s", len(forced), ", ".join(forced[:10]) + (" ..." if len(forced) > 10
                                                                     else ""))

    tasks, failed = [], []
    for key_id in sel.positives + sel.negatives:
        dicom = sel.dicom_ids.get(key_id)
        if not dicom:
            failed.append({"key_id": key_id, "reason": f"{key_id}: no dicom_id in the sheet or "
                           f"the deformation results"})
            continue
        positive = key_id in flags
        tasks.append(CaseTask(
            key_id=key_id, dicom_id=dicom,
            no_deformation=flags[key_id] if positive else None,
            case=cases[key_id] if positive else None, seed=seed,
            cxr_path=Path(inputs.cxr_dir) / f"{dicom}.png",
            deformed_mask_dir=Path(inputs.deformed_mask_dir) / key_id,
            chexmask_dir=Path(inputs.chexmask_dir), cxas_dir=Path(inputs.cxas_dir),
            case_dir=layout.case_dir(key_id), item_path=layout.item_json(key_id),
            review_dir=layout.review_dir if review_figures else None))

    outcomes = _run(tasks, num_workers, progress)
    items: dict[str, dict[str, Any]] = {}
    status = Counter()
    for outcome in outcomes:
        status[outcome.status] += 1
        if outcome.item is not None:
            items[outcome.key_id] = outcome.item
        else:
            logger.error("case failed: %s", outcome.reason)
            failed.append({"key_id": outcome.key_id, "reason": outcome.reason or ""})
    for entry in sel.excluded:
        logger.warning("%s not built: %s", entry["key_id"], entry["reason"])

    parse_benchmark(items, layout.qa_results_json)
    write_json_atomic(layout.qa_results_json, items)
    write_csv_atomic(layout.qa_labeling_csv, labeling_rows(items), QA_LABELING_COLUMNS)
    _remove_stale_case_dirs(layout, items)
    _remove_stale_review_figures(layout, items if review_figures else {})

    summary = _summary(items, sel, flags, forced, failed, ratios)
    write_json_atomic(layout.summary_json, summary)
    counts = {"built": status["built"], "reused": status["reused"], "failed": len(failed),
              "excluded": len(sel.excluded)}
    return QAReport(layout=layout, counts=counts, summary=summary,
                    review_figures=review_figures)


def _remove_stale_case_dirs(layout: QALayout, items: Mapping[str, Any]) -> None:
    if not layout.bundle_dir.is_dir():
        return
    stale = sorted(d for d in layout.bundle_dir.iterdir() if d.is_dir() and d.name not in items)
    for d in stale:
        shutil.rmtree(d)
    if stale:
        logger.info("removed %d case folder(s) not in this run's results from %s", len(stale),
                    layout.bundle_dir)


def _remove_stale_review_figures(layout: QALayout, items: Mapping[str, Any]) -> None:
    """Delete review figures this run did not draw (all of them with ``review_figures=False``).

    Raises:
        InputError: If a figure cannot be deleted (names the file).
    """
    if not layout.review_dir.is_dir():
        return
    named = {row["plot_name"] for row in labeling_rows(items)}
    stale = sorted(p for p in layout.review_dir.glob("*.png") if p.name not in named)
    for path in stale:
        try:
            path.unlink()
        except OSError as exc:
            raise InputError(f"{path}: cannot delete this review figure, which this run did "
                             f"not draw ({exc.strerror or exc}); delete it or fix the folder's "
                             f"permissions") from None
    if stale:
        logger.info("removed %d review figure(s) of an earlier run from %s", len(stale),
                    layout.review_dir)


def _summary(items: Mapping[str, Mapping[str, Any]], sel: Selection, flags: Mapping[str, bool],
             forced: Sequence[str], failed: Sequence[Mapping[str, str]],
             ratios: Mapping[str, float]) -> dict[str, Any]:
    per_lesion = {lesion: dict.fromkeys(QA_PATHS, 0) for lesion in LESIONS}
    questions = 0
    for key_id, item in items.items():
        per_lesion[lesion_from_key_id(key_id)][qa_path_of(BenchmarkItem.model_validate(item))] += 1
        questions += count_questions(item)
    split: dict[str, dict[str, Any]] = {}
    forced_set = set(forced)
    for key_id, free in flags.items():
        lesion = lesion_from_key_id(key_id)
        entry = split.setdefault(lesion, {"ratio": no_deformation_ratio(ratios, lesion),
                                          "positives": 0, "deformable": 0,
                                          "revision_free": 0})
        entry["positives"] += 1
        entry["deformable"] += int(key_id not in forced_set)
        entry["revision_free"] += int(free)
    return {
        "cases": len(items),
        "qa_items": questions,
        "images": len({item["dicom_id"] for item in items.values()}),
        "per_lesion": per_lesion,
        "selection": {"positives_selected": len(sel.positives),
                      "negatives_selected": len(sel.negatives),
                      "excluded": len(sel.excluded), "failed": len(failed)},
        "revision_free_split": {lesion: split[lesion] for lesion in LESIONS if lesion in split},
        "forced_revision_free": list(forced),
        "excluded": list(sel.excluded),
        "failed": list(failed),
    }
