"""Stage 00.00 source ``nih-cxr14``: NIH ChestX-ray14 boxes (``BBox_List_2017.csv``).

Reads the box table and the image table ``Data_Entry_2017_v2020.csv`` (patient, view position,
labels) shipped with ``torchxrayvision`` (or a user's copy); images come from the user's NIH
download (docs/curation.md, "Public sources" and "Label mapping").
"""

from __future__ import annotations

from collections.abc import Mapping
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
from chexpercept.errors import InputError

BOX_TABLE = ("BBox_List_2017.csv", "BBox_List_2017.csv.gz")
IMAGE_TABLE = ("Data_Entry_2017_v2020.csv", "Data_Entry_2017_v2020.csv.gz",
               "Data_Entry_2017.csv", "Data_Entry_2017.csv.gz")
BOX_COLUMNS = ("Image Index", "Finding Label", "Bbox [x", "y", "w", "h]")
IMAGE_COLUMNS = ("Image Index", "Finding Labels", "Patient ID", "View Position")
#: The released PNGs are 1024 x 1024 and the boxes are given in their pixels (the table's
#: ``OriginalImage[Width,Height]`` is the size of the DICOM before NIH resized it).
BOX_FRAME = (1024, 1024)
NO_FINDING = "No Finding"

LICENCE = SourceLicence(
    source="nih-cxr14", title="NIH ChestX-ray14",
    licence="released by the NIH Clinical Center for unrestricted use; cite the paper and "
            "acknowledge the NIH Clinical Center",
    category="redistributable",
    citation="Wang X, Peng Y, Lu L, Lu Z, Bagheri M, Summers RM. ChestX-ray8: Hospital-scale "
             "chest X-ray database and benchmarks on weakly-supervised classification and "
             "localization of common thorax diseases. CVPR 2017. Data: NIH Clinical Center.",
    url="https://nihcc.app.box.com/v/ChestXray-NIHCC",
    share="the images, boxes and a benchmark built from them may be passed on, with the "
          "citation and the NIH Clinical Center acknowledgement")


class NihCxr14(SourceAdapter):
    """NIH ChestX-ray14: 984 boxes on 880 images, one box per image and label."""

    name = "nih-cxr14"
    licence = LICENCE
    images_key = "nih_cxr14_path"
    label_map: Mapping[str, str | None] = {
        "Atelectasis": "atelectasis", "Cardiomegaly": "cardiomegaly", "Effusion": "effusion",
        "Infiltrate": "opacity", "Infiltration": "opacity", "Pneumonia": "pneumonia",
        "Pneumothorax": None, "Mass": None, "Nodule": None}

    def image_candidates(self, image_id: str) -> tuple[str, ...]:
        """Where an NIH image may be, in order.

        ``images/<name>.png`` (the NIH archives extracted into one folder), ``<name>.png``,
        then the Kaggle mirror's ``images_NNN/images/<name>.png`` (001 to 012).
        """
        return (f"images/{image_id}.png", f"{image_id}.png",
                *(f"images_{k:03d}/images/{image_id}.png" for k in range(1, 13)))

    def _images(self, path: Path) -> dict[str, tuple[int, str, str, str]]:
        """``Image Index -> (row, patient, view, labels)`` of the image table."""
        out = {}
        for row, r in read_table(path, IMAGE_COLUMNS):
            if not r["Image Index"] or not r["Patient ID"]:
                raise InputError(f"{path} row {row}: empty 'Image Index' or 'Patient ID'")
            out[r["Image Index"]] = (row, r["Patient ID"], r["View Position"],
                                     r["Finding Labels"])
        return out

    def read(self, tables_dir: str | Path | None, *,
             settings: Mapping[str, Any]) -> SourceRecords:
        """Read both tables (see :meth:`SourceAdapter.read`).

        Positives: one :class:`Finding` per box row whose label maps to a lesion and whose view
        is in ``positive_views`` (other views are dropped and listed). Negatives: images of the
        image table labelled exactly ``No Finding`` with an allowed view.

        Raises:
            InputError: A missing table, an unknown label, a box image absent from the image
                table, a box outside the 1024 x 1024 PNG.
            SchemaError: A table in the wrong format or a non-numeric box.
        """
        box_path = find_table(tables_dir, BOX_TABLE, what="NIH box table")
        image_path = find_table(tables_dir, IMAGE_TABLE, what="NIH image table")
        images = self._images(image_path)
        views = set(settings.get("positive_views") or ())
        rec = SourceRecords(self.name, [box_path, image_path], negative_table=image_path)
        by_key: dict[tuple[str, str], Finding] = {}
        for row, r in read_table(box_path, BOX_COLUMNS):
            name, label = r["Image Index"], r["Finding Label"]
            lesion = self.map_label(box_path, row, label)
            if name not in images:
                raise InputError(f"{box_path} row {row}: image {name} is not in the image "
                                 f"table {image_path.name}")
            _, patient, view, _ = images[name]
            x, y, w, h = (parse_float(box_path, row, c, r[c]) for c in BOX_COLUMNS[2:])
            box = Box(x, y, x + w, y + h, rows=(row,))
            check_box(box_path, row, box, BOX_FRAME, name)
            if lesion is None:
                rec.drop(box_path, row, label, "label is not one of the seven lesions")
                continue
            if views and view not in views:
                rec.drop(box_path, row, label, f"view {view!r} not in positive_views")
                continue
            stem = Path(name).stem
            key = (stem, lesion)
            if key in by_key:
                by_key[key].boxes.append(box)
                by_key[key].labels.append(label)
                continue
            by_key[key] = Finding(image_id=stem, lesion=lesion, labels=[label], boxes=[box],
                                  patient_id=patient, view=view or None, box_frame=BOX_FRAME)
            rec.findings.append(by_key[key])
        for name, (row, patient, view, labels) in images.items():
            if labels != NO_FINDING:
                continue
            if views and view not in views:
                rec.drop(image_path, row, NO_FINDING, f"view {view!r} not in positive_views")
                continue
            rec.negatives.append(NegativeImage(Path(name).stem, patient, view or None, (row,)))
        rec.notes.append("no report text: report_path is null and the box label stands in for "
                         "the report (nothing downstream reads reports)")
        return rec
