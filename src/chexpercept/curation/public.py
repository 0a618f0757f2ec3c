"""Stage 00.00 for public sources: seeded sample from box tables, then the working-frame CXRs.

Reads each source's tables through its adapter (:mod:`chexpercept.curation.sources`) and its
images from the user's download folder (``path.nih_cxr14_path``, ...); writes the same
artifacts as the MIMIC path (the three ``*_segmentation_*info.json``, ``sampling_summary.json``,
``<mimic_cxr_path>/<dicom_id>.png`` with its transform) plus ``data_sources.json`` (licences and
each CXR's source). docs/curation.md, "Public sources", "Label mapping", "Licences".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from chexpercept.callbacks import Progress
from chexpercept.curation.candidates import instruction_for, location_text
from chexpercept.curation.images import PrepareSummary
from chexpercept.curation.sampling import Selection, inputs_hash
from chexpercept.curation.sources import (
    MIMIC_ILS,
    MIMIC_LICENCE,
    Box,
    SourceAdapter,
    SourceRecords,
    get_adapter,
)
from chexpercept.curation.sources.base import check_box
from chexpercept.errors import ConfigError, InputError
from chexpercept.files import read_json, write_csv_atomic, write_json_atomic
from chexpercept.frame import (
    frame_transform,
    image_to_frame,
    prepared_png,
    read_frame_transform,
    transform_sidecar,
    transforms_index,
)
from chexpercept.images import read_cxr, write_png_atomic
from chexpercept.layouts import CurationLayout
from chexpercept.lesions import LESIONS, make_key_id
from chexpercept.rng import rng_for

if TYPE_CHECKING:
    from chexpercept.config_schema import ChexperceptConfig

logger = logging.getLogger(__name__)

#: Bump when the public sampling rule changes (outputs are then not reused).
PUBLIC_SAMPLING_VERSION = "1"
#: Sources whose images overlap (RSNA's images are NIH ChestX-ray14 images under new ids).
OVERLAPPING = frozenset({"nih-cxr14", "rsna-pneumonia"})
#: File extensions read with pydicom.
DICOM_SUFFIXES = (".dcm", ".dicom")
_MAX_LISTED = 40


def data_sources_record(licences: Iterable[Any], dicom_sources: Mapping[str, str]
                        ) -> dict[str, Any]:
    """The ``data_sources.json`` content: licence per source and each CXR's source."""
    return {"sources": {lic.source: lic.to_json() for lic in licences},
            "dicom_sources": dict(sorted(dicom_sources.items()))}


def mimic_data_sources(dicom_ids: Iterable[str]) -> dict[str, Any]:
    """``data_sources.json`` of a MIMIC-ILS run (every CXR from ``mimic-ils``)."""
    return data_sources_record([MIMIC_LICENCE], {d: MIMIC_ILS for d in dicom_ids})


def public_adapters(cfg: ChexperceptConfig) -> list[SourceAdapter]:
    """The adapters of ``source_data_curation.source`` (public sources only).

    Raises:
        ConfigError: If ``mimic-ils`` is listed with public sources, a name repeats, or the
            list holds both ``nih-cxr14`` and ``rsna-pneumonia`` (the same images).
    """
    names = list(cfg.source_data_curation.source)
    if MIMIC_ILS in names:
        raise ConfigError(f"source_data_curation.source {names}: mimic-ils cannot be combined "
                          f"with public sources in one Stage 00 run")
    if len(set(names)) != len(names):
        raise ConfigError(f"source_data_curation.source {names}: a source is listed twice")
    if OVERLAPPING <= set(names):
        raise ConfigError(f"source_data_curation.source {names}: rsna-pneumonia's images are "
                          f"NIH ChestX-ray14 images under other ids, so patients cannot be "
                          f"kept apart; use one of them")
    return [get_adapter(n) for n in names]


def _settings(cfg: ChexperceptConfig, adapter: SourceAdapter) -> dict[str, Any]:
    cur = cfg.source_data_curation
    return {"positive_views": list(cur.positive_views), "reader_iou": cur.reader_iou,
            "min_readers": cur.min_readers,
            "images_root": getattr(cfg.path, adapter.images_key)}


def read_sources(cfg: ChexperceptConfig) -> list[tuple[SourceAdapter, SourceRecords]]:
    """Read every configured public source's tables (adapter order)."""
    out = []
    for adapter in public_adapters(cfg):
        rec = adapter.read(cfg.path.source_tables_path, settings=_settings(cfg, adapter))
        logger.info("%s: %s", adapter.name, rec.counts())
        out.append((adapter, rec))
    return out


def box_sides(f: Any) -> list[str]:
    """``location`` of a finding: the lung of each box's centre, right lung first.

    The patient's right lung is on the image left, so a box centred left of the middle of its
    frame is ``right lung``. Cardiomegaly, and boxes whose frame is unknown until the image is
    read (VinDr-CXR), get no location (docs/curation.md, "Public sources").
    """
    if f.lesion == "cardiomegaly" or f.box_frame is None:
        return []
    half = f.box_frame[0] / 2
    sides = {"right lung" if (b.x0 + b.x1) / 2 < half else "left lung" for b in f.boxes}
    return [s for s in ("right lung", "left lung") if s in sides]


def _positive_entry(adapter: SourceAdapter, f: Any, table: str) -> dict[str, Any]:
    labels = ", ".join(dict.fromkeys(f.labels))
    location = box_sides(f)
    instruction = instruction_for(f.lesion, location_text(f.lesion, location))
    return {"pair_id": f"{f.image_id}_positive", "instruction": instruction,
            "answer": f"[SEG] {adapter.licence.title} box label(s): {labels}",
            "type": "global", "target": f.lesion, "location": location, "seg": True,
            "seg_mask_path": None, "report_path": None, "study_id": f.image_id,
            "dicom_id": f.image_id, "image_path": adapter.image_candidates(f.image_id)[0],
            "source": adapter.name, "source_labels": list(dict.fromkeys(f.labels)),
            "patient_id": f.patient_id, "view_position": f.view,
            "boxes": [b.to_json() for b in f.boxes],
            "box_frame": list(f.box_frame) if f.box_frame else None, "table": table}


def _negative_entry(adapter: SourceAdapter, n: Any, lesion: str, table: str) -> dict[str, Any]:
    return {"pair_id": f"{n.image_id}_negative", "instruction": f"Segment the {lesion}.",
            "answer": f"[SEG] {adapter.licence.title}: no finding", "type": "global",
            "target": lesion, "location": [], "seg": False, "seg_mask_path": None,
            "report_path": None, "study_id": n.image_id, "dicom_id": n.image_id,
            "image_path": adapter.image_candidates(n.image_id)[0], "source": adapter.name,
            "patient_id": n.patient_id, "view_position": n.view, "rows": list(n.rows),
            "table": table}


def _pick(rng: np.random.Generator, n: int, k: int) -> list[int]:
    """``min(k, n)`` distinct indices, ascending (file order kept)."""
    if k >= n:
        return list(range(n))
    return sorted(int(i) for i in rng.choice(n, size=k, replace=False))


def sample_public(sources: Sequence[tuple[SourceAdapter, SourceRecords]], *, seed: int,
                  max_positive: int, negatives_per_lesion: int) -> Selection:
    """Seeded per-lesion sample over the public sources (docs/curation.md, "Public sources").

    Positives: per lesion (``LESIONS`` order), the findings of every source (source order,
    then table order) form one pool; up to ``max_positive`` are drawn with
    ``rng_for(seed, "curation", "public", lesion)``. Negatives: per lesion, the no-finding
    images of the sources that have the lesion, leaving out every patient with a finding in
    its source's tables and every image already drawn for another lesion; up to
    ``negatives_per_lesion`` are drawn with ``rng_for(seed, "curation", "public", lesion,
    "negative")``. A lesion no source has gets neither (listed in ``shortfalls``). Each bucket
    keeps pool order.

    Raises:
        InputError: If two sources use the same image id.
    """
    sel = Selection({les: [] for les in LESIONS}, {les: [] for les in LESIONS},
                    {les: [] for les in LESIONS})
    owner: dict[str, str] = {}
    clashes = []
    for adapter, rec in sources:
        for image in {f.image_id for f in rec.findings} | {n.image_id for n in rec.negatives}:
            if owner.setdefault(image, adapter.name) != adapter.name:
                clashes.append(f"{image} ({owner[image]}, {adapter.name})")
    if clashes:
        raise InputError(f"{len(clashes)} image id(s) appear in two sources: "
                         + ", ".join(sorted(clashes)[:_MAX_LISTED]))
    used: set[str] = set()
    for lesion in LESIONS:
        pool = [(a, f, rec.tables[0].name) for a, rec in sources for f in rec.findings
                if f.lesion == lesion]
        picked = _pick(rng_for(seed, "curation", "public", lesion), len(pool), max_positive)
        sel.global_info[lesion] = [_positive_entry(a, f, t) for a, f, t in
                                   (pool[i] for i in picked)]
        having = [(a, rec) for a, rec in sources if lesion in a.lesions]
        if not having:
            sel.shortfalls[lesion] = "no configured source has boxes for this lesion"
            continue
        negatives = []
        for a, rec in having:
            patients = {f.patient_id for f in rec.findings}
            table = rec.negatives_table().name
            negatives += [(a, n, table) for n in rec.negatives
                          if n.patient_id not in patients and n.image_id not in used]
        picked = _pick(rng_for(seed, "curation", "public", lesion, "negative"),
                       len(negatives), negatives_per_lesion)
        sel.negative_info[lesion] = [_negative_entry(a, n, lesion, t) for a, n, t in
                                     (negatives[i] for i in picked)]
        used.update(e["dicom_id"] for e in sel.negative_info[lesion])
        if len(picked) < negatives_per_lesion:
            sel.shortfalls[lesion] = (f"{len(picked)} of {negatives_per_lesion} negatives "
                                      f"available")
    return sel


# --------------------------------------------------------------------------------------
# Images: resolve in the download folder, check the boxes, convert into the working frame
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceImage:
    """One sampled CXR of a public source.

    Attributes:
        dicom_id: The image id (the prepared PNG's name).
        source: Registry name.
        candidates: Relative paths tried under the download folder, in order.
        boxes: ``(table, box)`` of every sampled finding on it (checked against its size).
        box_frame: Size the boxes refer to, or None (the image's own).
        where: ``<table> row <n>`` naming where the image was sampled from (for messages).
    """

    dicom_id: str
    source: str
    candidates: tuple[str, ...]
    boxes: tuple[tuple[str, Box], ...]
    box_frame: tuple[int, int] | None
    where: str


def source_images(selection: Selection) -> list[SourceImage]:
    """Every sampled CXR once (positives first, bucket and lesion order)."""
    acc: dict[str, dict[str, Any]] = {}
    for bucket in (selection.global_info, selection.basic_info, selection.negative_info):
        for lesion in LESIONS:
            for e in bucket[lesion]:
                a = acc.setdefault(e["dicom_id"], {"e": e, "boxes": []})
                a["boxes"] += [(e["table"], Box.from_json(b)) for b in e.get("boxes", [])]
    out = []
    for dicom_id, a in acc.items():
        e = a["e"]
        rows = [r for _, b in a["boxes"] for r in b.rows] or e.get("rows", [])
        where = f"{e['table']} row {rows[0]}" if rows else e["table"]
        out.append(SourceImage(dicom_id, e["source"],
                               get_adapter(e["source"]).image_candidates(dicom_id),
                               tuple(a["boxes"]),
                               tuple(e["box_frame"]) if e.get("box_frame") else None, where))
    return out


def resolve_images(images: Sequence[SourceImage], roots: Mapping[str, str | None]
                   ) -> dict[str, Path]:
    """``dicom_id -> file`` in the download folders (first existing candidate).

    Raises:
        ConfigError: If a source's ``path.<source>_path`` is unset.
        InputError: Listing every image not found (id, table row, folder, names tried).
    """
    found: dict[str, Path] = {}
    missing = []
    for im in images:
        root = roots.get(im.source)
        if not root:
            key = get_adapter(im.source).images_key
            raise ConfigError(f"source {im.source}: path.{key} (the download folder) is not "
                              f"set; see docs/curation.md, \"Public sources\"")
        hit = next((Path(root) / c for c in im.candidates if (Path(root) / c).is_file()), None)
        if hit is None:
            missing.append(f"{im.dicom_id} ({im.where}): not in {root} (tried "
                           f"{', '.join(im.candidates)})")
        else:
            found[im.dicom_id] = hit
    if missing:
        more = (f"\n  ... and {len(missing) - _MAX_LISTED} more"
                if len(missing) > _MAX_LISTED else "")
        raise InputError(f"{len(missing)} sampled image(s) missing:\n  "
                         + "\n  ".join(missing[:_MAX_LISTED]) + more)
    return found


def read_source_pixels(path: Path) -> np.ndarray:
    """A source CXR as (H, W) uint8: PNG/JPG through the project's loader, DICOM via pydicom.

    DICOM pixels are rescaled by their own min..max to 0..255 (as the loader does for 16-bit
    images, docs/images.md, "Image loading"), inverted when ``MONOCHROME1``.

    Raises:
        InputError: If the file cannot be decoded.
        MissingDependencyError: For a DICOM without pydicom installed.
    """
    if path.suffix.lower() not in DICOM_SUFFIXES:
        return read_cxr(path, size=None)
    from utils.deps import require

    pydicom = require("pydicom", "public", "reading public-source DICOMs")
    try:
        ds = pydicom.dcmread(str(path))
        arr = np.asarray(ds.pixel_array, dtype=np.float64)
    except Exception as exc:  # noqa: BLE001 - pydicom raises many types for a bad file
        raise InputError(f"{path}: cannot be decoded as DICOM ({exc})") from None
    if arr.ndim != 2:
        raise InputError(f"{path}: expected one grayscale frame, found shape {arr.shape}")
    lo, hi = float(arr.min()), float(arr.max())
    out = np.zeros(arr.shape) if hi <= lo else (arr - lo) / (hi - lo) * 255.0
    if str(getattr(ds, "PhotometricInterpretation", "")) == "MONOCHROME1":
        out = 255.0 - out
    return np.round(out).astype(np.uint8)


def _box_problems(im: SourceImage, path: Path, width: int, height: int) -> list[str]:
    if im.box_frame is not None and tuple(im.box_frame) != (width, height):
        return [f"{path}: image is {width} x {height} pixels but the boxes of {im.where} "
                f"refer to {im.box_frame[0]} x {im.box_frame[1]} (the released images)"]
    problems = []
    for table, box in im.boxes:
        row = box.rows[0] if box.rows else 0
        try:
            check_box(Path(table), row, box, (width, height), f"{im.dicom_id} ({path})")
        except InputError as exc:
            problems.append(str(exc))
    return problems


def prepare_source_images(images: Sequence[SourceImage], files: Mapping[str, Path],
                          cxr_dir: str | Path, *, mode: str = "letterbox",
                          progress: Progress | None = None) -> PrepareSummary:
    """Check each image's boxes against its size and write its working-frame PNG + transform.

    A PNG is reused when its transform has the requested mode (its boxes are checked against
    the recorded original size). Every problem is collected; images without one are written
    first, then one :class:`InputError` lists the rest. Finally ``transforms.json`` is
    rewritten (docs/curation.md, "Working frame").

    Args:
        images: From :func:`source_images`.
        files: From :func:`resolve_images`.
        cxr_dir: ``path.mimic_cxr_path``.
        mode: ``source_data_curation.prepare_mode``.
        progress: Wraps the loop.

    Raises:
        InputError: Listing every image whose size does not match its table or that has a box
            outside it (table, row, file), or that cannot be decoded.
    """
    converted = skipped = 0
    problems: list[str] = []
    loop = progress(list(images), len(images)) if progress else images
    for im in loop:
        t = read_frame_transform(cxr_dir, im.dicom_id)
        if prepared_png(cxr_dir, im.dicom_id).is_file() and t is not None and t.mode == mode:
            found = _box_problems(im, files[im.dicom_id], t.orig_width, t.orig_height)
            problems += found
            skipped += not found
            continue
        try:
            arr = read_source_pixels(files[im.dicom_id])
        except InputError as exc:
            problems.append(f"{exc} ({im.where})")
            continue
        found = _box_problems(im, files[im.dicom_id], arr.shape[1], arr.shape[0])
        if found:
            problems += found
            continue
        t = frame_transform(arr.shape[1], arr.shape[0], mode)
        dst = prepared_png(cxr_dir, im.dicom_id)
        write_json_atomic(transform_sidecar(cxr_dir, im.dicom_id), t.to_json())
        write_png_atomic(dst, image_to_frame(arr, t))
        converted += 1
    if problems:
        raise InputError(f"{len(problems)} sampled image(s) do not fit their annotation:\n  "
                         + "\n  ".join(problems[:_MAX_LISTED]))
    index = {}
    for im in sorted(images, key=lambda i: i.dicom_id):
        t = read_frame_transform(cxr_dir, im.dicom_id)
        if t is not None:
            index[im.dicom_id] = t.to_json()
    if images:
        write_json_atomic(transforms_index(cxr_dir), index)
    return PrepareSummary(converted=converted, skipped=skipped)


# --------------------------------------------------------------------------------------
# The 00.00 step for public sources
# --------------------------------------------------------------------------------------


def public_params(cfg: ChexperceptConfig, seed: int) -> dict[str, Any]:
    """The settings hashed into ``sampling_summary.json`` (outputs reused while unchanged)."""
    cur = cfg.source_data_curation
    return {"sampling_version": PUBLIC_SAMPLING_VERSION, "seed": seed,
            "source": list(cur.source), "max_samples_per_lesion": cur.max_samples_per_lesion,
            "samples_per_lesion_negative": cur.samples_per_lesion_negative,
            "positive_views": list(cur.positive_views), "reader_iou": cur.reader_iou,
            "min_readers": cur.min_readers}


def plan_public_sample(cfg: ChexperceptConfig, seed: int | None = None
                       ) -> tuple[list[tuple[SourceAdapter, SourceRecords]], Selection]:
    """Read the tables and draw the sample, writing nothing (also used to make stand-ins)."""
    seed = cfg.seed if seed is None else seed
    sources = read_sources(cfg)
    cur = cfg.source_data_curation
    return sources, sample_public(sources, seed=seed, max_positive=cur.max_samples_per_lesion,
                                  negatives_per_lesion=cur.samples_per_lesion_negative)


def summary_record(sources: Sequence[tuple[SourceAdapter, SourceRecords]], selection: Selection,
                   digest: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``sampling_summary.json`` of a public run (pool, selection, dropped rows, licences)."""
    return {
        "inputs_hash": digest, "params": dict(params),
        "sources": {a.name: {"tables": [p.name for p in rec.tables],
                             "tables_dir": str(rec.tables[0].parent),
                             "pool": rec.counts(), "lesions": list(a.lesions),
                             "lesions_lacking": list(a.lacking), "notes": rec.notes,
                             "licence": a.licence.to_json()}
                    for a, rec in sources},
        "selected": selection.counts(), "shortfalls": selection.shortfalls,
        "dropped": [{"source": a.name, **d} for a, rec in sources for d in rec.dropped]}


def key_ids(selection: Selection) -> list[str]:
    """key_ids of every sampled entry (positives, then negatives)."""
    return [make_key_id(lesion, e["pair_id"])
            for bucket in (selection.global_info, selection.negative_info)
            for lesion in LESIONS for e in bucket[lesion]]


def draw_public(cfg: ChexperceptConfig, layout: CurationLayout, seed: int, *,
                force: bool = False) -> tuple[Selection, bool]:
    """Sample (or reuse current outputs) and write the info JSONs, summary and data sources.

    Returns:
        The selection and whether the outputs were reused.
    """
    sources = read_sources(cfg)
    params = public_params(cfg, seed)
    digest = inputs_hash([p for _, rec in sources for p in rec.tables], params)
    outputs = [layout.segmentation_info(k) for k in ("global", "basic", "negative")]
    previous = (read_json(layout.sampling_summary) if layout.sampling_summary.is_file()
                else {})
    if (not force and all(p.is_file() for p in outputs)
            and previous.get("inputs_hash") == digest):
        logger.info("sampling outputs in %s are current; reusing them", layout.out)
        return Selection(*(read_json(p) for p in outputs)), True
    cur = cfg.source_data_curation
    selection = sample_public(sources, seed=seed, max_positive=cur.max_samples_per_lesion,
                              negatives_per_lesion=cur.samples_per_lesion_negative)
    for kind, bucket in (("global", selection.global_info), ("basic", selection.basic_info),
                         ("negative", selection.negative_info)):
        write_json_atomic(layout.segmentation_info(kind), bucket, indent=4)
    write_json_atomic(layout.sampling_summary,
                         summary_record(sources, selection, digest, params))
    dicoms = {e["dicom_id"]: e["source"]
              for bucket in (selection.global_info, selection.negative_info)
              for entries in bucket.values() for e in entries}
    write_json_atomic(layout.data_sources,
                         data_sources_record([a.licence for a, _ in sources], dicoms))
    write_csv_atomic(layout.sampled_dicoms,
                        [{"dicom_id": d, "source": s} for d, s in sorted(dicoms.items())],
                        ("dicom_id", "source"))
    for a, rec in sources:
        for note in rec.notes:
            logger.info("%s: %s", a.name, note)
        if a.lacking:
            logger.info("%s has no boxes for: %s", a.name, ", ".join(a.lacking))
    return selection, False


def prepare_public(cfg: ChexperceptConfig, selection: Selection, *,
                   progress: Progress | None = None) -> PrepareSummary:
    """Resolve, check and convert every sampled CXR into ``path.mimic_cxr_path``."""
    images = source_images(selection)
    roots = {a.name: getattr(cfg.path, a.images_key) for a in public_adapters(cfg)}
    files = resolve_images(images, roots)
    return prepare_source_images(images, files, cfg.path.mimic_cxr_path,
                                 mode=cfg.source_data_curation.prepare_mode, progress=progress)


__all__ = [
    "PUBLIC_SAMPLING_VERSION",
    "SourceImage",
    "box_sides",
    "data_sources_record",
    "draw_public",
    "key_ids",
    "mimic_data_sources",
    "plan_public_sample",
    "prepare_public",
    "prepare_source_images",
    "public_adapters",
    "read_source_pixels",
    "read_sources",
    "resolve_images",
    "sample_public",
    "source_images",
    "summary_record",
]
