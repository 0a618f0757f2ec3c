"""Stage 00.00 source ``rsna-pneumonia``: RSNA Pneumonia Detection Challenge opacity boxes.

Reads ``stage_2_train_labels.csv`` (shipped zipped with ``torchxrayvision``, or a user's copy)
and, when present, the DICOM header table ``kaggle_stage_2_train_images_dicom_headers.csv``
(view positions, also shipped) and the challenge's ``stage_2_detailed_class_info.csv``
(negatives restricted to ``Normal``); images are the user's Kaggle download
(docs/curation.md, "Public sources" and "Label mapping").
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
    find_optional_table,
    find_table,
    parse_float,
    read_table,
)
from chexpercept.errors import SchemaError

LABEL_TABLE = ("stage_2_train_labels.csv", "kaggle_stage_2_train_labels.csv.zip",
               "stage_2_train_labels.csv.zip")
HEADER_TABLE = ("kaggle_stage_2_train_images_dicom_headers.csv.gz",
                "kaggle_stage_2_train_images_dicom_headers.csv")
CLASS_TABLE = ("stage_2_detailed_class_info.csv",)
LABEL_COLUMNS = ("patientId", "x", "y", "width", "height", "Target")
#: The challenge's DICOMs are 1024 x 1024; the boxes are in their pixels.
BOX_FRAME = (1024, 1024)
#: ``Target`` 1 rows are "Lung Opacity" boxes (the challenge's pneumonia evidence).
OPACITY_LABEL = "Lung Opacity"

LICENCE = SourceLicence(
    source="rsna-pneumonia", title="RSNA Pneumonia Detection Challenge",
    licence="boxes by RSNA and the Society of Thoracic Radiology on NIH ChestX-ray14 images; "
            "Kaggle competition terms: non-commercial research and education use",
    category="research-share",
    citation="Shih G, Wu CC, Halabi SS, et al. Augmenting the National Institutes of Health "
             "chest radiograph dataset with expert annotations of possible pneumonia. "
             "Radiology: Artificial Intelligence 2019;1(1):e180041.",
    url="https://www.kaggle.com/c/rsna-pneumonia-detection-challenge",
    share="a benchmark built from it may be shared for non-commercial research with the "
          "citation; commercial use and passing it on outside research are not covered")


class RsnaPneumonia(SourceAdapter):
    """RSNA Pneumonia: opacity boxes (one image per patient), mapped to ``pneumonia``."""

    name = "rsna-pneumonia"
    licence = LICENCE
    images_key = "rsna_pneumonia_path"
    label_map: Mapping[str, str | None] = {OPACITY_LABEL: "pneumonia"}

    def image_candidates(self, image_id: str) -> tuple[str, ...]:
        """``stage_2_train_images/<id>.dcm`` (Kaggle layout), then ``.png`` conversions."""
        return (f"stage_2_train_images/{image_id}.dcm", f"stage_2_train_images/{image_id}.png",
                f"{image_id}.dcm", f"{image_id}.png")

    def _views(self, tables_dir: str | Path | None) -> tuple[dict[str, str], Path | None]:
        path = find_optional_table(tables_dir, HEADER_TABLE)
        if path is None:
            return {}, None
        return {r["PatientID"]: r["ViewPosition"]
                for _, r in read_table(path, ("PatientID", "ViewPosition"))}, path

    def _normal(self, tables_dir: str | Path | None,
                images_root: str | Path | None) -> tuple[set[str] | None, Path | None]:
        path = find_optional_table(tables_dir, CLASS_TABLE)
        if path is None and images_root:
            path = find_optional_table(images_root, CLASS_TABLE)
        if path is None:
            return None, None
        return {r["patientId"] for _, r in read_table(path, ("patientId", "class"))
                if r["class"] == "Normal"}, path

    def read(self, tables_dir: str | Path | None, *,
             settings: Mapping[str, Any]) -> SourceRecords:
        """Read the label table (see :meth:`SourceAdapter.read`).

        ``Target`` 1 rows are boxes (every box of a patient joins one ``pneumonia`` finding);
        ``Target`` 0 rows, with empty box cells, are negative candidates: all of them, or only
        the ``Normal`` ones when ``stage_2_detailed_class_info.csv`` is found (in
        ``path.source_tables_path`` or the download folder).

        Raises:
            InputError: A missing table, a box outside the 1024 x 1024 image.
            SchemaError: A wrong format, a ``Target`` other than 0/1, a ``Target`` 1 row
                without a box or a ``Target`` 0 row with one.
        """
        path = find_table(tables_dir, LABEL_TABLE, what="RSNA label table")
        views, view_path = self._views(tables_dir)
        normal, class_path = self._normal(tables_dir, settings.get("images_root"))
        allowed = set(settings.get("positive_views") or ())
        rec = SourceRecords(self.name, [p for p in (path, view_path, class_path) if p])
        by_id: dict[str, Finding] = {}
        negatives: dict[str, NegativeImage] = {}
        for row, r in read_table(path, LABEL_COLUMNS):
            pid, target = r["patientId"], r["Target"]
            if target not in ("0", "1"):
                raise SchemaError(f"{path} row {row}: Target is {target!r}, expected 0 or 1")
            has_box = any(r[c] for c in LABEL_COLUMNS[1:5])
            if (target == "1") != has_box:
                raise SchemaError(f"{path} row {row}: Target {target} "
                                  f"{'without' if target == '1' else 'with'} a box")
            view = views.get(pid) if views else None
            if views and allowed and view not in allowed:
                rec.drop(path, row, OPACITY_LABEL if has_box else "Target 0",
                         f"view {view!r} not in positive_views")
                continue
            if target == "0":
                if normal is not None and pid not in normal:
                    rec.drop(path, row, "Target 0", "not 'Normal' in the detailed class table")
                    continue
                negatives.setdefault(pid, NegativeImage(pid, pid, view, (row,)))
                continue
            lesion = self.map_label(path, row, OPACITY_LABEL)
            x, y, w, h = (parse_float(path, row, c, r[c]) for c in LABEL_COLUMNS[1:5])
            box = Box(x, y, x + w, y + h, rows=(row,))
            check_box(path, row, box, BOX_FRAME, pid)
            if pid in by_id:
                by_id[pid].boxes.append(box)
                by_id[pid].labels.append(OPACITY_LABEL)
                continue
            by_id[pid] = Finding(image_id=pid, lesion=str(lesion), labels=[OPACITY_LABEL],
                                 boxes=[box], patient_id=pid, view=view, box_frame=BOX_FRAME)
            rec.findings.append(by_id[pid])
        rec.negatives = [n for pid, n in negatives.items() if pid not in by_id]
        rec.notes.append("no report text: report_path is null (nothing downstream reads "
                         "reports)")
        rec.notes.append("each patient has one image: patient disjointness is image "
                         "disjointness")
        if not views:
            rec.notes.append("no DICOM header table: view positions unknown, no view filter")
        rec.notes.append("negatives: " + ("'Normal' patients of " + class_path.name
                                          if class_path else
                                          "every Target 0 patient (no "
                                          "stage_2_detailed_class_info.csv found; Target 0 "
                                          "includes 'No Lung Opacity / Not Normal')"))
        rec.notes.append("RSNA images are NIH ChestX-ray14 images under new ids; do not mix "
                         "with nih-cxr14 in one benchmark (patient overlap cannot be checked)")
        return rec
