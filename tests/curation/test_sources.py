"""Public sources on the REAL annotation tables shipped with torchxrayvision 1.5.7.

Counts per label are recomputed here straight from the tables (csv/gzip/zip, no adapter code)
and compared with what the adapters read; sampling is seeded and byte-identical; candidate
masks are made on synthetic stand-ins at the real box geometry (docs/curation.md, "Public
sources", "Label mapping", "Reader merge rule").
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zipfile
from collections import Counter

import numpy as np
import pytest

from chexpercept.curation.box_segmenters import BoxAnatomySegmenter, box_mask
from chexpercept.curation.public import (
    prepare_source_images,
    resolve_images,
    sample_public,
    source_images,
    summary_record,
)
from chexpercept.curation.segmenters import EmptyPredictionError
from chexpercept.curation.sources import (
    Box,
    get_adapter,
    installed_tables_dir,
    merge_reader_boxes,
)
from chexpercept.errors import ConfigError, InputError, SchemaError
from chexpercept.images import write_png_atomic
from chexpercept.lesions import LESIONS

TABLES = installed_tables_dir()
pytestmark = pytest.mark.skipif(TABLES is None or not (TABLES / "BBox_List_2017.csv.gz").is_file(),
                                reason="torchxrayvision (with its data tables) not installed")
SETTINGS = {"positive_views": ["PA", "AP"], "reader_iou": 0.4, "min_readers": 2}


def _raw_rows(name: str) -> list[dict[str, str]]:
    path = TABLES / name
    if name.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            text = z.read(z.namelist()[0]).decode()
    else:
        text = gzip.decompress(path.read_bytes()).decode()
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture(scope="module")
def nih():
    return get_adapter("nih-cxr14").read(None, settings=SETTINGS)


@pytest.fixture(scope="module")
def rsna():
    return get_adapter("rsna-pneumonia").read(None, settings=SETTINGS)


@pytest.fixture(scope="module")
def vindr():
    return get_adapter("vindr-cxr").read(None, settings=SETTINGS)


# ----------------------------------------------------------------- counts match the tables
def test_nih_counts_per_label_match_the_table(nih):
    rows = _raw_rows("BBox_List_2017.csv.gz")
    raw = Counter(r["Finding Label"] for r in rows)
    assert len(rows) == 984 and raw == {"Atelectasis": 180, "Effusion": 153, "Cardiomegaly": 146,
                                        "Infiltrate": 123, "Pneumonia": 120, "Pneumothorax": 98,
                                        "Mass": 85, "Nodule": 79}
    adapter = get_adapter("nih-cxr14")
    got = Counter()
    for f in nih.findings:
        got.update(f.labels)
    for d in nih.dropped:
        got[d["label"]] += len(d["rows"])
    assert got == raw  # nothing silently dropped: every row is a finding or listed
    per_lesion = nih.counts()["positives"]
    assert {les: c["boxes"] for les, c in per_lesion.items()} == {
        "atelectasis": 180, "cardiomegaly": 146, "effusion": 153, "opacity": 123,
        "pneumonia": 120}
    assert adapter.lacking == ("consolidation", "edema")
    assert {d["label"] for d in nih.dropped} == {"Pneumothorax", "Mass", "Nodule"}
    assert all(d["reason"] == "label is not one of the seven lesions" for d in nih.dropped)


def test_nih_negatives_are_the_no_finding_images(nih):
    rows = _raw_rows("Data_Entry_2017_v2020.csv.gz")
    assert len(rows) == 112120
    assert len(nih.negatives) == sum(r["Finding Labels"] == "No Finding" for r in rows) == 60361


def test_rsna_counts_match_the_table(rsna):
    rows = _raw_rows("kaggle_stage_2_train_labels.csv.zip")
    boxes = [r for r in rows if r["Target"] == "1"]
    assert len(rows) == 30227 and len(boxes) == 9555
    assert len({r["patientId"] for r in boxes}) == 6012
    assert rsna.counts()["positives"] == {"pneumonia": {"findings": 6012, "boxes": 9555}}
    negatives = {r["patientId"] for r in rows if r["Target"] == "0"}
    assert len(rsna.negatives) == len(negatives) == 20672
    assert get_adapter("rsna-pneumonia").lesions == ("pneumonia",)


def test_vindr_counts_and_reader_merge_account_for_every_row(vindr):
    rows = _raw_rows("vinbigdata-train.csv.gz")
    raw = Counter(r["class_name"] for r in rows)
    assert len(rows) == 67914 and len({r["image_id"] for r in rows}) == 15000
    assert raw["Cardiomegaly"] == 5427 and raw["Pleural effusion"] == 2476
    used = sum(len(b.rows) for f in vindr.findings for b in f.boxes)
    dropped = sum(len(d["rows"]) for d in vindr.dropped)
    assert used + dropped + raw["No finding"] == len(rows)
    per = {les: c["findings"] for les, c in vindr.counts()["positives"].items()}
    assert per == {"cardiomegaly": 1811, "opacity": 617, "effusion": 532, "consolidation": 101,
                   "atelectasis": 42}
    with_finding = {r["image_id"] for r in rows if r["class_name"] != "No finding"}
    assert len(vindr.negatives) == 15000 - len(with_finding) == 10606
    for f in vindr.findings:
        for b in f.boxes:
            assert len(b.readers) >= 2


# ----------------------------------------------------------------------- reader merge rule
def _b(x0, y0, x1, y1, reader, row):
    return Box(x0, y0, x1, y1, rows=(row,), readers=(reader,))


def test_merge_keeps_agreed_groups_and_averages_reader_hulls():
    boxes = [_b(0, 0, 100, 100, "R1", 1), _b(10, 10, 110, 110, "R2", 2),
             _b(500, 500, 600, 600, "R3", 3),       # alone: rejected
             _b(0, 0, 90, 100, "R1", 4)]            # R1 twice: enclosed, counts once
    kept, rejected = merge_reader_boxes(boxes, min_iou=0.4, min_readers=2)
    assert len(kept) == 1 and len(rejected) == 1
    k = kept[0]
    assert (k.x0, k.y0, k.x1, k.y1) == (5.0, 5.0, 105.0, 105.0)  # mean of R1 hull, R2 box
    assert k.readers == ("R1", "R2") and k.rows == (1, 2, 4)
    assert rejected[0].rows == (3,) and rejected[0].readers == ("R3",)
    kept3, _ = merge_reader_boxes(boxes, min_iou=0.4, min_readers=3)
    assert kept3 == []
    chain = [_b(0, 0, 100, 100, "A", 1), _b(30, 0, 130, 100, "B", 2), _b(60, 0, 160, 100, "C", 3)]
    kept, _ = merge_reader_boxes(chain, min_iou=0.5, min_readers=3)
    assert len(kept) == 1 and kept[0].readers == ("A", "B", "C")  # a chain is one group


# --------------------------------------------------------------------------------- sampling
def _dump(sel):
    return json.dumps([sel.global_info, sel.basic_info, sel.negative_info, sel.shortfalls],
                      sort_keys=True)


def test_sampling_is_seeded_and_negatives_are_disjoint_by_patient(nih):
    adapter = get_adapter("nih-cxr14")
    sources = [(adapter, nih)]
    a = sample_public(sources, seed=3, max_positive=5, negatives_per_lesion=4)
    b = sample_public(sources, seed=3, max_positive=5, negatives_per_lesion=4)
    c = sample_public(sources, seed=4, max_positive=5, negatives_per_lesion=4)
    assert _dump(a) == _dump(b) and _dump(a) != _dump(c)
    for lesion in adapter.lesions:
        assert len(a.global_info[lesion]) == 5 and len(a.negative_info[lesion]) == 4
    for lesion in adapter.lacking:
        assert a.global_info[lesion] == [] and "no configured source" in a.shortfalls[lesion]
    positive_patients = {f.patient_id for f in nih.findings}
    negatives = [e for les in LESIONS for e in a.negative_info[les]]
    assert not {e["patient_id"] for e in negatives} & positive_patients
    assert len({e["dicom_id"] for e in negatives}) == len(negatives)  # one lesion per CXR


def test_summary_lists_dropped_rows_with_reasons_and_licence(nih):
    adapter = get_adapter("nih-cxr14")
    sel = sample_public([(adapter, nih)], seed=0, max_positive=2, negatives_per_lesion=1)
    rec = summary_record([(adapter, nih)], sel, "h", {"seed": 0})
    dropped = rec["dropped"]
    assert sum(len(d["rows"]) for d in dropped) == 262
    assert {d["reason"] for d in dropped} == {"label is not one of the seven lesions"}
    src = rec["sources"]["nih-cxr14"]
    assert src["licence"]["category"] == "redistributable"
    assert src["lesions_lacking"] == ["consolidation", "edema"]
    assert any("no report text" in n for n in src["notes"])


# -------------------------------------------------------------- candidates on stand-ins
def _stand_in_case(tmp_path, finding, seed=0):
    """A prepared 1024 stand-in with its CheXmask-U masks for one real NIH finding."""
    from chexpercept.synth.stand_ins import render_stand_in

    boxes = [(finding.lesion, (b.x0, b.y0, b.x1, b.y1)) for b in finding.boxes]
    s = render_stand_in(finding.image_id, 1024, 1024, boxes, seed=seed)
    cxr, anat = tmp_path / "cxr", tmp_path / "anatomy"
    write_png_atomic(cxr / f"{finding.image_id}.png", s.image)
    for name, m in s.chexmask.items():
        write_png_atomic(anat / finding.image_id / f"{name}.png", m.astype(np.uint8) * 255)
    return s, cxr, anat


def test_box_anatomy_candidates_lie_in_box_and_lung_or_heart(tmp_path, nih):
    adapter = get_adapter("nih-cxr14")
    sel = sample_public([(adapter, nih)], seed=0, max_positive=3, negatives_per_lesion=0)
    seen = Counter()
    for lesion in adapter.lesions:
        for item in sel.global_info[lesion]:
            f = next(x for x in nih.findings if x.image_id == item["dicom_id"]
                     and x.lesion == lesion)
            s, cxr, anat = _stand_in_case(tmp_path / f"{lesion}_{f.image_id}", f)
            seg = BoxAnatomySegmenter(anat, cxr, smoothing_px=7)
            res = seg.segment(s.image, "", item=item)
            mask = res.mask
            assert mask.shape == (1024, 1024) and mask.any()
            if lesion == "cardiomegaly":
                assert not (mask & ~s.chexmask["heart"]).any()
            else:
                lungs = s.chexmask["right_lung"] | s.chexmask["left_lung"]
                assert not (mask & ~box_mask(item, None)).any()
                assert not (mask & ~lungs).any()
            seen[lesion] += 1
    assert set(seen) == set(adapter.lesions) and all(v == 3 for v in seen.values())


def test_box_anatomy_without_lung_overlap_fails_the_item(tmp_path, nih):
    f = next(x for x in nih.findings if x.lesion == "effusion")
    s, cxr, anat = _stand_in_case(tmp_path, f)
    for name in ("right_lung", "left_lung"):
        write_png_atomic(anat / f.image_id / f"{name}.png", np.zeros((1024, 1024), np.uint8))
    item = {"dicom_id": f.image_id, "target": "effusion", "pair_id": "p",
            "boxes": [b.to_json() for b in f.boxes], "box_frame": [1024, 1024]}
    with pytest.raises(EmptyPredictionError, match="do not overlap the lungs"):
        BoxAnatomySegmenter(anat, cxr).segment(s.image, "", item=item)
    (anat / f.image_id / "left_lung.png").unlink()
    with pytest.raises(InputError, match="left_lung.png"):
        BoxAnatomySegmenter(anat, cxr).segment(s.image, "", item=item)
    with pytest.raises(ConfigError, match="box_anatomy_path"):
        BoxAnatomySegmenter(None, cxr)


# ------------------------------------------------------------------------------ bad input
def _copy_tables(tmp_path, edit=None, header=None):
    """Plain-CSV copies of the NIH tables; ``edit(rows)`` changes the box rows."""
    out = tmp_path / "tables"
    out.mkdir(parents=True)
    rows = list(csv.reader(io.StringIO(gzip.decompress(
        (TABLES / "BBox_List_2017.csv.gz").read_bytes()).decode())))
    if header:
        rows[0] = header
    if edit:
        edit(rows)
    with open(out / "BBox_List_2017.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    (out / "Data_Entry_2017_v2020.csv.gz").symlink_to(TABLES / "Data_Entry_2017_v2020.csv.gz")
    return out


def test_unknown_label_names_file_and_row(tmp_path):
    def edit(rows):
        rows[5][1] = "Pneumonitis"
    tables = _copy_tables(tmp_path, edit)
    with pytest.raises(InputError, match=r"BBox_List_2017.csv row 5: unknown NIH ChestX-ray14 "
                                         r"label 'Pneumonitis'"):
        get_adapter("nih-cxr14").read(tables, settings=SETTINGS)


def test_box_outside_its_image_names_file_and_row(tmp_path):
    def edit(rows):
        rows[7][2], rows[7][4] = "1000", "100"
    tables = _copy_tables(tmp_path, edit)
    with pytest.raises(InputError, match=r"BBox_List_2017.csv row 7: box .* lies outside its "
                                         r"image .*1024 x 1024"):
        get_adapter("nih-cxr14").read(tables, settings=SETTINGS)


def test_wrong_table_format_is_a_schema_error_naming_the_file(tmp_path):
    tables = _copy_tables(tmp_path, header=["image", "label", "x", "y", "w", "h"])
    with pytest.raises(SchemaError, match=r"BBox_List_2017.csv: not the expected table format: "
                                          r"missing column"):
        get_adapter("nih-cxr14").read(tables, settings=SETTINGS)

    def bad_number(rows):
        rows[3][3] = "twelve"
    tables2 = _copy_tables(tmp_path / "b", bad_number)
    with pytest.raises(SchemaError, match=r"row 3: column 'y' is 'twelve'"):
        get_adapter("nih-cxr14").read(tables2, settings=SETTINGS)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "vinbigdata-train.csv.gz").write_bytes(b"not gzip at all")
    with pytest.raises(SchemaError, match="vinbigdata-train.csv.gz"):
        get_adapter("vindr-cxr").read(junk, settings=SETTINGS)


def test_missing_table_names_the_folder(tmp_path):
    with pytest.raises(InputError, match=r"RSNA label table not found in .*tried"):
        get_adapter("rsna-pneumonia").read(tmp_path, settings=SETTINGS)


def test_missing_image_names_id_table_and_row(tmp_path, nih):
    adapter = get_adapter("nih-cxr14")
    sel = sample_public([(adapter, nih)], seed=0, max_positive=1, negatives_per_lesion=1)
    images = source_images(sel)
    with pytest.raises(InputError) as exc:
        resolve_images(images, {"nih-cxr14": str(tmp_path)})
    msg = str(exc.value)
    assert f"{len(images)} sampled image(s) missing" in msg
    first = images[0]
    assert first.dicom_id in msg and first.where in msg and "images/" in msg
    with pytest.raises(ConfigError, match="path.nih_cxr14_path"):
        resolve_images(images, {"nih-cxr14": None})


def test_image_of_the_wrong_size_or_box_outside_it_is_refused(tmp_path, nih):
    adapter = get_adapter("nih-cxr14")
    sel = sample_public([(adapter, nih)], seed=0, max_positive=1, negatives_per_lesion=0)
    im = source_images(sel)[0]
    src = tmp_path / "src" / "images" / f"{im.dicom_id}.png"
    write_png_atomic(src, np.zeros((512, 512), np.uint8))
    with pytest.raises(InputError, match=r"image is 512 x 512 pixels but the boxes of "
                                         r"BBox_List_2017.csv.gz row \d+ refer to 1024 x 1024"):
        prepare_source_images([im], {im.dicom_id: src}, tmp_path / "cxr")
    assert not (tmp_path / "cxr" / f"{im.dicom_id}.png").exists()
    # a VinDr-style image without a declared frame: boxes are checked against its own size
    from dataclasses import replace
    small = replace(im, box_frame=None)
    with pytest.raises(InputError, match=r"row \d+: box .* lies outside its image"):
        prepare_source_images([small], {im.dicom_id: src}, tmp_path / "cxr")
    write_png_atomic(src, np.full((1024, 1024), 80, np.uint8))
    out = prepare_source_images([im], {im.dicom_id: src}, tmp_path / "cxr")
    assert out.converted == 1 and (tmp_path / "cxr" / f"{im.dicom_id}.transform.json").is_file()
    again = prepare_source_images([im], {im.dicom_id: src}, tmp_path / "cxr")
    assert again.converted == 0 and again.skipped == 1


def test_dicom_pixels_are_read_and_rescaled(tmp_path):
    pydicom = pytest.importorskip("pydicom")
    from pydicom.dataset import FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    from chexpercept.curation.public import read_source_pixels

    ds = pydicom.Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.file_meta.MediaStorageSOPClassUID = generate_uid()
    ds.file_meta.MediaStorageSOPInstanceUID = generate_uid()
    arr = np.arange(64 * 32, dtype=np.uint16).reshape(32, 64) * 2
    ds.Rows, ds.Columns = arr.shape
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME1"
    ds.PixelData = arr.tobytes()
    path = tmp_path / "x.dcm"
    ds.save_as(path, enforce_file_format=True)
    out = read_source_pixels(path)
    assert out.shape == (32, 64) and out.dtype == np.uint8
    assert out[0, 0] == 255 and out[-1, -1] == 0  # MONOCHROME1 inverted, min..max rescaled
    (tmp_path / "bad.dcm").write_bytes(b"nope")
    with pytest.raises(InputError, match="bad.dcm: cannot be decoded as DICOM"):
        read_source_pixels(tmp_path / "bad.dcm")


def _rsna_tables(tmp_path, rows, classes=None):
    out = tmp_path / "rsna_tables"
    out.mkdir(parents=True)
    with open(out / "stage_2_train_labels.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["patientId", "x", "y", "width", "height", "Target"])
        w.writerows(rows)
    if classes is not None:
        with open(out / "stage_2_detailed_class_info.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["patientId", "class"])
            w.writerows(classes)
    return out


def test_rsna_negatives_follow_the_detailed_class_table(tmp_path):
    rows = [["a", "10", "10", "100", "100", "1"], ["a", "500", "10", "100", "100", "1"],
            ["b", "", "", "", "", "0"], ["c", "", "", "", "", "0"]]
    adapter = get_adapter("rsna-pneumonia")
    rec = adapter.read(_rsna_tables(tmp_path, rows), settings={})
    assert [f.image_id for f in rec.findings] == ["a"] and len(rec.findings[0].boxes) == 2
    assert {n.image_id for n in rec.negatives} == {"b", "c"}
    assert any("no DICOM header table" in n for n in rec.notes)
    classes = [["a", "Lung Opacity"], ["b", "Normal"], ["c", "No Lung Opacity / Not Normal"]]
    rec = adapter.read(_rsna_tables(tmp_path / "k", rows, classes), settings={})
    assert {n.image_id for n in rec.negatives} == {"b"}
    assert rec.dropped == [{"table": "stage_2_train_labels.csv", "label": "Target 0",
                            "reason": "not 'Normal' in the detailed class table", "rows": [4]}]


def test_rsna_target_and_box_must_agree(tmp_path):
    for row, match in ((["a", "", "", "", "", "1"], "row 1: Target 1 without a box"),
                       (["a", "1", "1", "5", "5", "0"], "row 1: Target 0 with a box"),
                       (["a", "", "", "", "", "2"], "row 1: Target is '2'")):
        with pytest.raises(SchemaError, match=match):
            get_adapter("rsna-pneumonia").read(_rsna_tables(tmp_path / row[-1] / row[1], [row]),
                                               settings={})


def test_location_is_the_lung_of_each_box_centre():
    from chexpercept.curation.public import box_sides
    from chexpercept.curation.sources import Finding

    def f(lesion, xs, frame=(1024, 1024)):
        return Finding("i", lesion, ["x"], [Box(x0, 10, x1, 20) for x0, x1 in xs], "p", None,
                       frame)
    assert box_sides(f("effusion", [(689, 809)])) == ["left lung"]  # image right = left lung
    assert box_sides(f("opacity", [(600, 700), (100, 200)])) == ["right lung", "left lung"]
    assert box_sides(f("cardiomegaly", [(300, 700)])) == []
    assert box_sides(f("opacity", [(100, 200)], None)) == []  # VinDr: frame unknown
