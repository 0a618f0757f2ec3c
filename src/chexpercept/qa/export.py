"""Stage 02 export: sample the benchmark from qa_results.json and write the released layout.

Reads ``qa_results/qa_results.json`` and the bundle ``chexpercept/<key_id>/``; writes
``<benchmark>/chexpercept.json``, ``<benchmark>/chexpercept/<key_id>/`` (hard links or copies),
``<benchmark>/sampling_summary.json`` and ``<benchmark>/stats.csv``
(:class:`chexpercept.layouts.BenchmarkLayout`). The
release had no sampling code (docs/differences.md D31); the per-lesion, per-path counts are
the paper's 100/100/100 (docs/paper.md, "Benchmark size") by default (docs/qa_generation.md,
"Export and sampling").
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.bundle import BUNDLE_FORMAT, STATS_COLUMNS, check_bundle, stats_rows
from chexpercept.errors import InputError, SchemaError
from chexpercept.files import write_csv_atomic, write_json_atomic
from chexpercept.layouts import BenchmarkLayout
from chexpercept.lesions import LESIONS, QA_PATHS, lesion_from_key_id
from chexpercept.qa.render import case_image_relpaths
from chexpercept.rng import rng_for
from chexpercept.schema import BenchmarkItem, parse_benchmark, qa_path_of

logger = logging.getLogger(__name__)

LINK_MODES = ("hardlink", "copy")


@dataclass
class ExportReport:
    """Result of :func:`export_benchmark`.

    Attributes:
        layout: The benchmark's paths.
        selected: Exported key_ids in file order.
        summary: Content of ``sampling_summary.json``.
        copied_files: Files copied because hard-linking failed or ``copy`` was asked.
        linked_files: Files hard-linked.
        stats: Rows of ``stats.csv`` (:func:`chexpercept.bundle.stats_rows`).
    """

    layout: BenchmarkLayout
    selected: list[str]
    summary: dict[str, Any]
    copied_files: int = 0
    linked_files: int = 0
    stats: list[dict[str, Any]] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The stage's summary lines: what was exported, then where the files are."""
        s, layout = self.summary, self.layout
        return [f"exported {s['cases']} cases ({s['qa_items']} QA items, {s['images']} images; "
                f"{self.linked_files} file(s) linked, {self.copied_files} copied; "
                f"{len(s['shortfalls'])} lesion/path shortfall(s)) -> {layout.json_path}",
                f"images: {layout.images_dir}; sampling summary: "
                f"{layout.sampling_summary_json}; stats: {layout.stats_csv}"]


#: Order in which (path, lesion) pools are filled when CXRs must be distinct: the scarcest
#: cases (revision-required, which need a deformation) first, negatives last.
FILL_ORDER = ("revision_required", "revision_free", "lesion_free")


def sample_cases(items: Mapping[str, BenchmarkItem], *, seed: int, per_path: Mapping[str, int],
                 distinct_cxrs: bool = False) -> tuple[list[str], dict[str, Any]]:
    """Seeded sampling of ``per_path[path]`` cases per lesion and path.

    Candidates of a (lesion, path) are sorted by key_id and put in a random order with
    ``rng_for(seed, "sampling", lesion, path)``; the first ``per_path[path]`` are taken, so
    the draw depends only on the set of candidates (revision-free cases are thus a uniform
    draw among the revision-free pool, see
    :func:`chexpercept.qa.generate.assign_revision_free`). With ``distinct_cxrs`` a candidate
    whose dicom_id is already selected is passed over; pools are then filled path by path in
    :data:`FILL_ORDER`, lesions in :data:`chexpercept.lesions.LESIONS` order. When fewer are
    available all are taken and the shortfall is logged.

    Args:
        items: Validated cases keyed by key_id.
        seed: Config seed.
        per_path: Cases wanted per lesion for each of ``lesion_free``, ``revision_free``,
            ``revision_required`` (config ``qa_generation.sampling``; paper: 100 each,
            docs/paper.md, "Benchmark size").
        distinct_cxrs: Never select two cases on the same CXR (config
            ``qa_generation.sampling.distinct_cxrs``).

    Returns:
        ``(key_ids, per_lesion)``: key_ids ordered by lesion order, then path order
        (:data:`chexpercept.lesions.QA_PATHS`), then key_id; per_lesion gives
        ``{lesion: {path: {available, requested, selected, shortfall, shared_cxr}}}``
        (``shared_cxr``: candidates passed over because their CXR was already selected).

    Raises:
        SchemaError: If a key_id's lesion prefix is unknown.
    """
    groups: dict[tuple[str, str], list[str]] = {}
    bad = []
    for key_id, item in items.items():
        try:
            lesion = lesion_from_key_id(key_id)
        except InputError as exc:
            bad.append(str(exc))
            continue
        groups.setdefault((lesion, qa_path_of(item)), []).append(key_id)
    if bad:
        raise SchemaError("qa results: " + "; ".join(bad))
    used: set[str] = set()
    chosen: dict[tuple[str, str], list[str]] = {}
    shared: dict[tuple[str, str], int] = {}
    for path in FILL_ORDER:
        for lesion in LESIONS:
            pool = sorted(groups.get((lesion, path), []))
            want = int(per_path.get(path, 0))
            order = rng_for(seed, "sampling", lesion, path).permutation(len(pool))
            picked, passed = [], 0
            for i in order:
                if len(picked) >= want:
                    break
                key_id = pool[int(i)]
                dicom = items[key_id].dicom_id
                if distinct_cxrs and dicom in used:
                    passed += 1
                    continue
                picked.append(key_id)
                used.add(dicom)
            chosen[(lesion, path)] = sorted(picked)
            shared[(lesion, path)] = passed
    selected: list[str] = []
    per_lesion: dict[str, dict[str, dict[str, int]]] = {}
    shortfalls: list[str] = []
    for lesion in LESIONS:
        per_lesion[lesion] = {}
        for path in QA_PATHS:
            picked = chosen[(lesion, path)]
            want = int(per_path.get(path, 0))
            available = len(groups.get((lesion, path), []))
            selected += picked
            if len(picked) < want:
                shortfalls.append(f"{lesion}/{path} {len(picked)}/{want}")
            per_lesion[lesion][path] = {"available": available, "requested": want,
                                        "selected": len(picked),
                                        "shortfall": max(0, want - len(picked)),
                                        "shared_cxr": shared[(lesion, path)]}
    if shortfalls:
        logger.warning("fewer cases than requested, taking all available (selected/requested): "
                       "%s", ", ".join(shortfalls))
    if not selected:
        raise SchemaError("nothing to export: the QA results hold no case for any lesion/path "
                          "(check the Stage 02 summary.json for cases that failed)")
    return selected, per_lesion


def _place_file(src: Path, dst: Path, link: str) -> bool:
    """Hard-link (falling back to a copy) or copy ``src`` to ``dst``; True if linked."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if link == "hardlink":
        try:
            os.link(src, dst)
            return True
        except OSError:
            pass
    shutil.copyfile(src, dst)
    return False


#: Licence categories the export refuses to mix (docs/curation.md, "Licences").
REDISTRIBUTABLE, RESTRICTED = "redistributable", "restricted"
#: Categories from the most to the least open; a mixed benchmark takes the last one present.
CATEGORY_ORDER = ("redistributable", "research-share", "restricted")


def case_sources(selected: list[str], items: Mapping[str, BenchmarkItem],
                 data_sources: Mapping[str, Any], *, allow_mixed: bool = False
                 ) -> tuple[dict[str, str], dict[str, Any]]:
    """Each selected case's source, and the ``data_sources.json`` record of the benchmark.

    Args:
        selected: Exported key_ids.
        items: The validated cases.
        data_sources: Stage 00 ``data_sources.json`` (``sources``: name -> licence record,
            ``dicom_sources``: dicom_id -> name).
        allow_mixed: Export even when a ``redistributable`` and a ``restricted`` source meet
            (the benchmark then counts as ``restricted`` as a whole).

    Returns:
        ``(key_id -> source, record)``; the record lists the sources used with their licence,
        citation and case count, and the benchmark's overall category.

    Raises:
        InputError: When a case's CXR has no recorded source, or redistributable and
            restricted sources would be mixed without ``allow_mixed`` (each source and its
            category named).
    """
    licences = data_sources.get("sources", {})
    by_dicom = data_sources.get("dicom_sources", {})
    unknown = [k for k in selected if items[k].dicom_id not in by_dicom
               or by_dicom[items[k].dicom_id] not in licences]
    if unknown:
        raise InputError(f"{len(unknown)} exported case(s) have no recorded source in Stage 00 "
                         f"data_sources.json (re-run 00_sample_mimic_ils_case.py for the "
                         f"Stage 00 outputs these cases come from): " + ", ".join(unknown[:20]))
    source_of = {k: by_dicom[items[k].dicom_id] for k in selected}
    counts: dict[str, int] = {}
    for name in source_of.values():
        counts[name] = counts.get(name, 0) + 1
    category = {name: licences[name].get("category", RESTRICTED) for name in counts}
    mixed = REDISTRIBUTABLE in category.values() and RESTRICTED in category.values()
    if mixed and not allow_mixed:
        which = "; ".join(f"{n}: {c}" for n, c in sorted(category.items()))
        raise InputError(f"the benchmark would mix a redistributable source with a restricted "
                         f"one ({which}); a bundle with restricted cases may not be passed on. "
                         f"Export the sources separately, or pass --allow-mixed-licences to "
                         f"export one restricted bundle")
    overall = max(category.values(), key=CATEGORY_ORDER.index) if category else RESTRICTED
    record = {"category": overall, "mixed": mixed,
              "sources": {n: {**licences[n], "cases": counts[n]} for n in sorted(counts)}}
    return source_of, record


def export_benchmark(raw: Mapping[str, Any], *, bundle_dir: Path, benchmark_dir: Path, seed: int,
                     per_path: Mapping[str, int], link: str = "hardlink",
                     distinct_cxrs: bool = False, validate: bool = True,
                     data_sources: Mapping[str, Any] | None = None,
                     allow_mixed_licences: bool = False) -> ExportReport:
    """Sample cases and write the benchmark folder (re-running gives identical bytes).

    Every selected case's images are checked first; then ``chexpercept.json`` is written
    atomically (the chosen values, unchanged, in :func:`sample_cases` order), each case folder
    is rebuilt in a temporary folder and renamed into place (files are hard-linked, not
    rewritten), folders of cases not selected are removed, ``sampling_summary.json`` (with
    the :data:`chexpercept.bundle.BUNDLE_FORMAT` marker) and ``stats.csv``
    (:func:`chexpercept.bundle.stats_rows`) are written, and the written bundle is checked
    with :func:`chexpercept.bundle.check_bundle` (strict names).

    Args:
        raw: Loaded ``qa_results.json`` (plain JSON).
        bundle_dir: Stage 02 ``chexpercept/`` with ``<key_id>/`` folders.
        benchmark_dir: Output root (``chexpercept.json`` + ``chexpercept/``).
        seed: Config seed.
        per_path: Cases per lesion and path (see :func:`sample_cases`).
        link: ``hardlink`` (copy where linking fails, e.g. across file systems) or ``copy``.
        distinct_cxrs: One case per CXR at most (see :func:`sample_cases`).
        validate: Check the written bundle (default True).
        data_sources: Stage 00 ``data_sources.json``; given, every case gets a
            ``data_source`` field in ``chexpercept.json`` and ``data_sources.json`` is written
            (licences and citations; see :func:`case_sources`). None writes neither.
        allow_mixed_licences: See :func:`case_sources`.

    Returns:
        The report (``stats`` holds the stats rows).

    Raises:
        SchemaError: If ``raw`` does not validate, or the written bundle fails the check.
        InputError: Listing every selected case whose folder or images are missing, or from
            :func:`case_sources`.
    """
    if link not in LINK_MODES:
        raise InputError(f"link mode '{link}': expected one of {LINK_MODES}")
    items = parse_benchmark(raw, "qa results")
    selected, per_lesion = sample_cases(items, seed=seed, per_path=per_path,
                                        distinct_cxrs=distinct_cxrs)
    bundle_dir = Path(bundle_dir)
    missing = [f"{key_id}/{rel}" for key_id in selected for rel in case_image_relpaths(raw[key_id])
               if not (bundle_dir / key_id / rel).is_file()]
    if missing:
        raise InputError(f"{bundle_dir}: {len(missing)} image(s) of selected cases are missing "
                         f"(re-run 00_generate_qa.py): " + ", ".join(missing[:20])
                         + (" ..." if len(missing) > 20 else ""))

    source_of, sources_record = ({}, None)
    if data_sources is not None:
        source_of, sources_record = case_sources(selected, items, data_sources,
                                                 allow_mixed=allow_mixed_licences)
    layout = BenchmarkLayout(Path(benchmark_dir))
    write_json_atomic(layout.json_path,
                      {key_id: ({**raw[key_id], "data_source": source_of[key_id]}
                                if key_id in source_of else raw[key_id])
                       for key_id in selected})
    if sources_record is not None:
        write_json_atomic(layout.data_sources_json, sources_record)
        if sources_record["mixed"]:
            logger.warning("mixed licences exported (--allow-mixed-licences): the bundle is "
                           "restricted as a whole: %s", ", ".join(
                               f"{n} ({r['category']})"
                               for n, r in sources_record["sources"].items()))
    layout.images_dir.mkdir(parents=True, exist_ok=True)
    report = ExportReport(layout=layout, selected=selected, summary={})
    for key_id in selected:
        src = bundle_dir / key_id
        tmp = layout.images_dir / f".{key_id}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            if _place_file(path, tmp / path.relative_to(src), link):
                report.linked_files += 1
            else:
                report.copied_files += 1
        dst = layout.case_dir(key_id)
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(tmp, dst)
    keep = set(selected)
    stale = sorted(d for d in layout.images_dir.iterdir() if d.is_dir() and d.name not in keep)
    for d in stale:
        shutil.rmtree(d)
    if stale:
        logger.info("removed %d stale case folder(s) from %s", len(stale), layout.images_dir)
    if link == "hardlink" and report.copied_files:
        logger.warning("hard links failed for %d file(s); they were copied", report.copied_files)

    shortfalls = [{"lesion": lesion, "path": path, "available": v["available"],
                   "requested": v["requested"]}
                  for lesion, paths in per_lesion.items() for path, v in paths.items()
                  if v["shortfall"]]
    chosen = {k: items[k] for k in selected}
    report.stats = stats_rows(chosen)
    total = report.stats[-1]
    report.summary = {
        "bundle_format": BUNDLE_FORMAT,
        "seed": seed,
        "requested_per_lesion": {path: int(per_path.get(path, 0)) for path in QA_PATHS},
        "distinct_cxrs": distinct_cxrs,
        "cases": len(selected),
        "qa_items": total["qa_items"],
        "images": total["cxrs"],
        "per_lesion": per_lesion,
        "shortfalls": shortfalls,
    }
    if sources_record is not None:
        report.summary["data_sources"] = {
            "category": sources_record["category"], "mixed": sources_record["mixed"],
            "cases": {n: r["cases"] for n, r in sources_record["sources"].items()}}
    write_json_atomic(layout.sampling_summary_json, report.summary)
    write_csv_atomic(layout.stats_csv, report.stats, STATS_COLUMNS)
    if validate:
        check = check_bundle(layout, chosen, strict_names=True)
        check.log_warnings()
        check.raise_for_problems(" (written by the export)")
        logger.info("exported bundle validated: %d case(s), %d image(s)", len(check.cases),
                    check.images)
    return report
