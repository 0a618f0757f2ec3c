"""Stage 02: build one case (its chexpercept.json value + images) and write it for resume.

A worker turns a :class:`CaseTask` into ``qa_results/items/<key_id>.json`` and the folder
``chexpercept/<key_id>/``. Everything random comes from ``rng_for(seed, "qa", key_id)``, so
the result does not depend on worker count or order.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chexpercept.errors import ChexperceptError
from chexpercept.files import dumps_json, write_json_atomic
from chexpercept.images import read_cxr, write_png_atomic
from chexpercept.lesions import has_attribute_stage, lesion_from_key_id, pair_id_from_key_id
from chexpercept.provenance import SCHEMA_VERSION
from chexpercept.qa import _text
from chexpercept.qa._errors import CaseBuildError
from chexpercept.qa.attributes import build_attribute_qa
from chexpercept.qa.contour import build_contour_qa
from chexpercept.qa.render import MaskSource, case_image_relpaths, render_case
from chexpercept.qa.review import review_figures, review_names
from chexpercept.rng import rng_for
from chexpercept.schema import BenchmarkItem, DeformationCase

logger = logging.getLogger(__name__)

#: Version of the Stage 02 generator; bump when output for the same input changes, so that a
#: re-run rebuilds items written by an older version instead of resuming them.
GENERATOR_VERSION = "2"
#: zlib level of the rendered PNGs: 3 encodes a 1024x1024 RGB CXR about 3.5x faster than
#: PIL's default 6 for ~5 % more bytes (measured on the sample-test fixtures); encoding was
#: ~85 % of Stage 02 time at level 6.
PNG_COMPRESS_LEVEL = 3


@dataclass(frozen=True)
class CaseTask:
    """Everything a worker needs to build one case (picklable).

    Attributes:
        key_id: ``<lesion>_<pair_id>``.
        dicom_id: The CXR's id.
        no_deformation: True revision-free, False revision-required, None lesion-free
            (a negative).
        case: The case's ``deformation_results.json`` entry (positives only).
        seed: Config seed.
        cxr_path: ``<mimic_cxr_path>/<dicom_id>.png``.
        deformed_mask_dir: ``deformed_masks/<key_id>/``.
        chexmask_dir: CheXmask-U root (``<dicom>/{side}_lung.png``).
        cxas_dir: CXAS root (``<dicom>/{side} lung.png``).
        case_dir: Output ``chexpercept/<key_id>/``.
        item_path: Output ``qa_results/items/<key_id>.json``.
        review_dir: Output folder of the case's review figures
            (``qa_results/qa_visualizations/``, :mod:`chexpercept.qa.review`); None: none drawn.
    """

    key_id: str
    dicom_id: str
    no_deformation: bool | None
    case: DeformationCase | None
    seed: int
    cxr_path: Path
    deformed_mask_dir: Path
    chexmask_dir: Path
    cxas_dir: Path
    case_dir: Path
    item_path: Path
    review_dir: Path | None = None

    def fingerprint(self) -> str:
        """Hash of every input that decides the item (resume reuses an item only on a match).

        Image and mask file contents are not hashed; delete ``qa_results/items/`` after
        replacing input images in place.
        """
        payload = {
            "generator": GENERATOR_VERSION, "schema": SCHEMA_VERSION, "seed": self.seed,
            "key_id": self.key_id, "dicom_id": self.dicom_id,
            "no_deformation": self.no_deformation,
            "case": None if self.case is None else self.case.model_dump(mode="json",
                                                                        by_alias=True),
            "paths": [str(p) for p in (self.cxr_path, self.deformed_mask_dir,
                                       self.chexmask_dir, self.cxas_dir)],
        }
        return hashlib.sha256(dumps_json(payload, indent=None).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CaseOutcome:
    """What happened to one case.

    Attributes:
        key_id: The case.
        status: ``built``, ``reused`` (resumed from its item file) or ``failed``.
        item: The chexpercept.json value (plain JSON types), None if failed.
        reason: Why it failed (names the key_id), None otherwise.
    """

    key_id: str
    status: str
    item: dict[str, Any] | None = None
    reason: str | None = None


def detection_qa(lesion: str, present: bool) -> dict[str, Any]:
    """Stage 1 question; answer Yes (1) for positives, No (2) for negatives."""
    answer = "Yes" if present else "No"
    return {"question": _text.with_options(_text.detection_stem(lesion), _text.YES_NO),
            "answer_options": list(_text.YES_NO), "answer": answer,
            "answer_index": _text.YES_NO.index(answer) + 1}


def build_item(task: CaseTask) -> dict[str, Any]:
    """The chexpercept.json value of a case, validated by :class:`BenchmarkItem`.

    Key order: ``detection_qa``, ``contour_qa``, ``attribute_extraction_qa`` (positives),
    ``pair_id``, ``dicom_id`` (docs/benchmark_format.md, "JSON fields"). Cardiomegaly positives get
    ``attribute_extraction_qa: null``.

    Raises:
        CaseBuildError: If the case cannot be built (reason in the message).
    """
    lesion = lesion_from_key_id(task.key_id)
    item: dict[str, Any] = {"detection_qa": detection_qa(lesion, task.no_deformation is not None)}
    if task.no_deformation is not None:
        if task.case is None:
            raise CaseBuildError(f"{task.key_id}: positive case without deformation results")
        rng = rng_for(task.seed, "qa", task.key_id)
        item["contour_qa"] = build_contour_qa(task.key_id, lesion, task.case,
                                              task.no_deformation, rng)
        item["attribute_extraction_qa"] = (
            build_attribute_qa(task.key_id, lesion, task.case.geometrical_mask_infos, rng)
            if has_attribute_stage(lesion) else None)
    item["pair_id"] = pair_id_from_key_id(task.key_id)
    item["dicom_id"] = task.dicom_id
    item = json.loads(dumps_json(item))
    BenchmarkItem.model_validate(item)
    return item


def _load_resumable(task: CaseTask, fingerprint: str) -> dict[str, Any] | None:
    if not task.item_path.is_file():
        return None
    try:
        record = json.loads(task.item_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable: built again
        return None
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint:
        return None
    item = record.get("item")
    if not isinstance(item, dict):
        return None
    if not all((task.case_dir / rel).is_file() for rel in case_image_relpaths(item)):
        return None
    if task.review_dir is not None and not all(
            (task.review_dir / name).is_file() for name in review_names(task.key_id, item)):
        return None  # the names the sheet will list, not what the item file claims
    return item


def process_case(task: CaseTask) -> CaseOutcome:
    """Build, render and write one case, or reuse it from a previous run.

    Reuse needs ``items/<key_id>.json`` with the same fingerprint and every image present
    (review figures included when ``review_dir`` is set).
    Otherwise the case folder is cleared, all images are written (atomic PNGs), then the
    item file; a crash in between leaves no item file, so the next run rebuilds the case.
    A case that cannot be built has its folder and item file removed.

    Returns:
        The outcome; failures carry their reason instead of raising.
    """
    fingerprint = task.fingerprint()
    reused = _load_resumable(task, fingerprint)
    if reused is not None:
        return CaseOutcome(task.key_id, "reused", item=reused)
    try:
        item = build_item(task)
        cxr = read_cxr(task.cxr_path)
        masks = MaskSource(task.deformed_mask_dir, task.dicom_id, task.chexmask_dir,
                           task.cxas_dir, (item.get("contour_qa") or {}).get(
                               "revision_before_masks", []), cxr_path=task.cxr_path)
        images = render_case(task.key_id, item, cxr, masks)
        figures = (review_figures(task.key_id, item, cxr, masks, images)
                   if task.review_dir is not None else {})
    except ChexperceptError as exc:
        message = str(exc)
        reason = message if task.key_id in message else f"{task.key_id}: {message}"
        shutil.rmtree(task.case_dir, ignore_errors=True)
        task.item_path.unlink(missing_ok=True)
        return CaseOutcome(task.key_id, "failed", reason=reason)
    record: dict[str, Any] = {"fingerprint": fingerprint, "images": sorted(images), "item": item}
    try:
        shutil.rmtree(task.case_dir, ignore_errors=True)
        for rel, array in images.items():
            write_png_atomic(task.case_dir / rel, array, compress_level=PNG_COMPRESS_LEVEL)
        if task.review_dir is not None:
            for name, array in figures.items():
                write_png_atomic(task.review_dir / name, array,
                                 compress_level=PNG_COMPRESS_LEVEL)
            record["review_figures"] = sorted(figures)
        write_json_atomic(task.item_path, record)
    except OSError as exc:  # read-only folder, a file where a folder should be, disk full
        task.item_path.unlink(missing_ok=True)
        return CaseOutcome(task.key_id, "failed",
                           reason=f"{task.key_id}: cannot write {exc.filename or ''}: "
                                  f"{exc.strerror or exc}")
    return CaseOutcome(task.key_id, "built", item=item)
