"""Stage 00.00 source ``vindr-cxr``: VinDr-CXR boxes from three readers per image.

Reads the training table (``vinbigdata-train.csv`` shipped with ``torchxrayvision``, PhysioNet's
``annotations/annotations_train.csv`` or Kaggle's ``train.csv``); the readers' boxes of one
finding are merged by the rule of docs/curation.md, "Reader merge rule"; images are the user's
PhysioNet download.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chexpercept.curation.sources.base import (
    Box,
    Finding,
    NegativeImage,
    SourceAdapter,
    SourceLicence,
    SourceRecords,
    check_box,
    find_table,
    parse_float,
    read_table,
)

TABLE = ("vinbigdata-train.csv", "vinbigdata-train.csv.gz", "annotations_train.csv", "train.csv")
COLUMNS = ("image_id", "class_name", "rad_id", "x_min", "y_min", "x_max", "y_max")
NO_FINDING = "No finding"
#: Reader merge defaults (docs/curation.md, "Reader merge rule"; config
#: ``source_data_curation.reader_iou`` / ``min_readers``).
READER_IOU = 0.4
MIN_READERS = 2

LICENCE = SourceLicence(
    source="vindr-cxr", title="VinDr-CXR",
    licence="PhysioNet Credentialed Health Data License 1.5.0 (credentialed access, data use "
            "agreement; no redistribution)",
    category="restricted",
    citation="Nguyen HQ, Lam K, Le LT, et al. VinDr-CXR: An open dataset of chest X-rays with "
             "radiologist's annotations. Scientific Data 2022;9:429.",
    url="https://physionet.org/content/vindr-cxr/",
    share="nothing built from it may be passed on; other credentialed users rebuild it from "
          "their own PhysioNet copy")


def iou(a: Box, b: Box) -> float:
    """Intersection over union of two boxes, in [0, 1]."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a.x1 - a.x0) * (a.y1 - a.y0) + (b.x1 - b.x0) * (b.y1 - b.y0) - inter
    return inter / union


def merge_reader_boxes(boxes: Sequence[Box], *, min_iou: float = READER_IOU,
                       min_readers: int = MIN_READERS) -> tuple[list[Box], list[Box]]:
    """Merge several readers' boxes of one lesion on one image.

    The rule (docs/curation.md, "Reader merge rule"):

    1. Two boxes are linked when their IoU is at least ``min_iou``; linked boxes form a group
       (connected components, so a chain of overlaps is one group).
    2. A group is kept when at least ``min_readers`` distinct readers drew a box in it.
    3. A kept group becomes one box: each reader's boxes in the group are enclosed in one box,
       then the coordinates are averaged over the readers (each reader counts once).

    Groups are ordered by their first box; the result does not depend on anything else.

    Args:
        boxes: Boxes with one reader each (``readers[0]``) and their table rows.
        min_iou: Link threshold in [0, 1].
        min_readers: Readers needed to keep a group (>= 1).

    Returns:
        ``(kept, rejected)``: the merged boxes (readers and rows of their group), and the
        rejected groups as enclosing boxes (for the dropped-rows list).
    """
    n = len(boxes)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if iou(boxes[i], boxes[j]) >= min_iou:
                parent[root(j)] = root(i)
    groups: dict[int, list[Box]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(boxes[i])
    kept, rejected = [], []
    for members in groups.values():
        per_reader: dict[str, list[Box]] = {}
        for b in members:
            per_reader.setdefault(b.readers[0] if b.readers else "", []).append(b)
        rows = tuple(sorted(r for b in members for r in b.rows))
        readers = tuple(sorted(per_reader))
        hulls = [(min(b.x0 for b in bs), min(b.y0 for b in bs), max(b.x1 for b in bs),
                  max(b.y1 for b in bs)) for bs in per_reader.values()]
        if len(per_reader) >= min_readers:
            k = len(hulls)
            kept.append(Box(*(sum(h[c] for h in hulls) / k for c in range(4)), rows=rows,
                            readers=readers))
        else:
            rejected.append(Box(*(f(h[c] for h in hulls) for c, f in
                                  enumerate((min, min, max, max))), rows=rows, readers=readers))
    return kept, rejected


class VindrCxr(SourceAdapter):
    """VinDr-CXR: 15,000 training images, each read by three of 17 radiologists."""

    name = "vindr-cxr"
    licence = LICENCE
    images_key = "vindr_cxr_path"
    label_map: Mapping[str, str | None] = {
        "Cardiomegaly": "cardiomegaly", "Pleural effusion": "effusion",
        "Lung Opacity": "opacity", "Infiltration": "opacity", "Consolidation": "consolidation",
        "Atelectasis": "atelectasis",
        "Aortic enlargement": None, "Calcification": None, "ILD": None, "Nodule/Mass": None,
        "Other lesion": None, "Pleural thickening": None, "Pneumothorax": None,
        "Pulmonary fibrosis": None, NO_FINDING: None}

    def image_candidates(self, image_id: str) -> tuple[str, ...]:
        """``train/<id>.dicom`` (PhysioNet and Kaggle layout), then ``.dcm`` / ``.png``."""
        return (f"train/{image_id}.dicom", f"train/{image_id}.dcm", f"train/{image_id}.png",
                f"{image_id}.dicom", f"{image_id}.png")

    def read(self, tables_dir: str | Path | None, *,
             settings: Mapping[str, Any]) -> SourceRecords:
        """Read the table and merge the readers (see :meth:`SourceAdapter.read`).

        Positives: per image and lesion, the kept groups of :func:`merge_reader_boxes`
        (``Lung Opacity`` and ``Infiltration`` both count as opacity). Negatives: images
        whose every row is ``No finding``. Image sizes are not in the table, so boxes are
        checked against the image when it is prepared.

        Raises:
            InputError: A missing table or an unknown label.
            SchemaError: A wrong format, a box row with empty or non-numeric coordinates.
        """
        path = find_table(tables_dir, TABLE, what="VinDr-CXR table")
        min_iou = float(settings.get("reader_iou", READER_IOU))
        min_readers = int(settings.get("min_readers", MIN_READERS))
        rec = SourceRecords(self.name, [path])
        boxes: dict[tuple[str, str], list[tuple[Box, str]]] = {}
        rows_of: dict[str, list[int]] = {}
        finding_images: set[str] = set()
        for row, r in read_table(path, COLUMNS):
            image, label = r["image_id"], r["class_name"]
            lesion = self.map_label(path, row, label)
            rows_of.setdefault(image, []).append(row)
            if label == NO_FINDING:
                continue
            finding_images.add(image)
            if lesion is None:
                rec.drop(path, row, label, "label is not one of the seven lesions")
                continue
            x0, y0, x1, y1 = (parse_float(path, row, c, r[c]) for c in COLUMNS[3:])
            box = Box(x0, y0, x1, y1, rows=(row,), readers=(r["rad_id"],))
            check_box(path, row, box, None, image)
            boxes.setdefault((image, lesion), []).append((box, label))
        for (image, lesion), entries in boxes.items():
            kept, rejected = merge_reader_boxes([b for b, _ in entries], min_iou=min_iou,
                                                min_readers=min_readers)
            labels = list(dict.fromkeys(label for _, label in entries))
            for g in rejected:
                for row in g.rows:
                    rec.drop(path, row, "/".join(sorted(labels)),
                             f"fewer than {min_readers} readers agree (IoU >= {min_iou})")
            if kept:
                rec.findings.append(Finding(image_id=image, lesion=lesion, labels=labels,
                                            boxes=kept, patient_id=image, view=None,
                                            box_frame=None))
        rec.negatives = [NegativeImage(image, image, None, tuple(rows))
                         for image, rows in rows_of.items() if image not in finding_images]
        rec.notes.append("no report text: report_path is null (nothing downstream reads "
                         "reports)")
        rec.notes.append("no view position in the table: no view filter (VinDr-CXR images "
                         "are frontal radiographs)")
        rec.notes.append("no patient ids (removed by de-identification): each image counts "
                         "as its own patient")
        return rec
