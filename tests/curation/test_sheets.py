"""chexpercept.curation.sheets / images: merge, negatives, distribution, merge-back, preparation."""

from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

from chexpercept.curation import images, sheets
from chexpercept.errors import InputError
from chexpercept.files import read_csv_rows, read_json, write_csv_atomic, write_json_atomic
from chexpercept.layouts import CurationLayout
from chexpercept.schema import (
    NEGATIVE_SHEET_COLUMNS,
    POSITIVE_PART_SHEET_COLUMNS,
    POSITIVE_SHEET_COLUMNS,
)


def _part(layout, p, key_ids):
    rows = [{"key_id": k, "dicom_id": f"d{k}", "target": "edema", "pair_id": k.split("_", 1)[1],
             "mapped_location": "heart", "segmentation_source": "global", "optimal?": "",
             "plot_path": f"/x/{k}.png"} for k in key_ids]
    write_csv_atomic(layout.positive_sheet(p), rows, POSITIVE_PART_SHEET_COLUMNS)
    write_json_atomic(layout.candidate_results(p), {r["pair_id"]: [{"dicom_id": r["dicom_id"]}]
                                                    for r in rows})


def test_merge_parts_columns_and_missing_part(tmp_path):
    layout = CurationLayout(tmp_path)
    _part(layout, 0, ["edema_s1_positive_0"])
    with pytest.raises(InputError, match="labeling_sheet_part1.csv"):
        sheets.merge_parts(layout.candidate_root, 2)
    assert not layout.positive_sheet().exists()  # no half merge
    _part(layout, 1, ["edema_s2_positive_0", "edema_s3_positive_0"])
    out = sheets.merge_parts(layout.candidate_root, 2)
    assert out.written and out.rows == 3
    with open(layout.positive_sheet()) as fh:
        assert fh.readline().strip().split(",") == list(POSITIVE_SHEET_COLUMNS)
    assert [r["key_id"] for r in read_csv_rows(layout.positive_sheet())] == [
        "edema_s1_positive_0", "edema_s2_positive_0", "edema_s3_positive_0"]
    assert set(read_json(layout.candidate_results())) == {"s1_positive_0", "s2_positive_0",
                                                          "s3_positive_0"}


def test_merge_never_clobbers_unsharded_run(tmp_path):
    layout = CurationLayout(tmp_path)
    write_csv_atomic(layout.positive_sheet(), [{"key_id": "k"}], POSITIVE_SHEET_COLUMNS)
    write_json_atomic(layout.candidate_results(), {"k": []})
    before = layout.positive_sheet().read_bytes()
    out = sheets.merge_parts(layout.candidate_root, 4)  # no parts at all
    assert not out.written and "untouched" in out.message
    # Stale parts older than the unsharded outputs are not merged over them either.
    _part(layout, 0, ["edema_s9_positive_0"])
    old = layout.positive_sheet().stat().st_mtime_ns - 10**9
    for p in (layout.positive_sheet(0), layout.candidate_results(0)):
        os.utime(p, ns=(old, old))
    out = sheets.merge_parts(layout.candidate_root, 1)
    assert not out.written
    assert layout.positive_sheet().read_bytes() == before
    assert sheets.merge_parts(layout.candidate_root, 1, force=True).written


def test_merge_with_nothing_is_an_error(tmp_path):
    with pytest.raises(InputError, match="no part files"):
        sheets.merge_parts(tmp_path / "rosalia_pred", 2)


def _negative_setup(tmp_path):
    layout = CurationLayout(tmp_path / "out")
    cxr = tmp_path / "cxr"
    cxr.mkdir()
    info = {les: [] for les in ("cardiomegaly", "edema")}
    for n, les in [(1, "cardiomegaly"), (2, "cardiomegaly"), (3, "cardiomegaly"), (2, "edema"),
                   (4, "edema")]:
        info[les].append({"pair_id": f"s{n}_negative_0", "dicom_id": f"d{n}"})
        Image.fromarray(np.zeros((8, 8), np.uint8)).save(cxr / f"d{n}.png")
    write_json_atomic(layout.segmentation_info("negative"), info)
    write_json_atomic(layout.segmentation_info("global"),
                      {"edema": [{"pair_id": "s9_positive_0", "dicom_id": "d1"}]})
    return layout, cxr


def test_negatives_always_exclude_positive_dicoms(tmp_path):
    layout, cxr = _negative_setup(tmp_path)
    exclude = sheets.positive_dicoms(layout, layout.positive_sheet(), explicit=False)
    assert exclude == {"d1"}  # from the segmentation info even without a positive sheet
    out = sheets.prepare_negatives(layout, cxr_dir=cxr, samples_per_lesion=1, exclude=exclude)
    assert [(r["lesion"], r["dicom_id"]) for r in out.rows] == [("cardiomegaly", "d2"),
                                                                ("edema", "d4")]
    assert layout.negative_image("cardiomegaly", "cardiomegaly_s2_negative_0").is_file()
    with pytest.raises(InputError, match="positive sheet not found"):
        sheets.positive_dicoms(layout, tmp_path / "nope.csv", explicit=True)


def test_negative_missing_cxr_is_named(tmp_path):
    layout, cxr = _negative_setup(tmp_path)
    (cxr / "d2.png").unlink()
    with pytest.raises(InputError, match="d2"):
        sheets.prepare_negatives(layout, cxr_dir=cxr, samples_per_lesion=1, exclude={"d1"})


def _sheets_for_distribution(tmp_path):
    layout = CurationLayout(tmp_path)
    pos_rows = []
    for k in range(3):
        key = f"edema_s{k}_positive_0"
        plot = layout.review_plot("edema", key)
        plot.parent.mkdir(parents=True, exist_ok=True)
        plot.write_bytes(b"png")
        pos_rows.append({"key_id": key, "dicom_id": f"d{k}", "target": "edema",
                         "pair_id": f"s{k}_positive_0", "mapped_location": "x",
                         "segmentation_source": "global", "plot_path": str(plot),
                         "optimal?": ""})
    write_csv_atomic(layout.positive_sheet(), pos_rows, POSITIVE_SHEET_COLUMNS)
    neg_rows = []
    for k in range(2):
        key = f"opacity_s{k + 5}_negative_0"
        img = layout.negative_image("opacity", key)
        img.parent.mkdir(parents=True, exist_ok=True)
        img.write_bytes(b"png")
        neg_rows.append({"lesion": "opacity", "key_id": key, "dicom_id": f"d{k + 5}",
                         "optimal?": ""})
    write_csv_atomic(layout.negative_sheet, neg_rows, NEGATIVE_SHEET_COLUMNS)
    tasks = [sheets.SheetTask("positive", layout.positive_sheet(), "target"),
             sheets.SheetTask("negative", layout.negative_sheet, "lesion")]
    return layout, tasks


def _fill(layout, annotator, task, values):
    path = layout.annotator_dir(annotator, task) / "labeling_sheet.csv"
    rows = read_csv_rows(path)
    with open(path) as fh:
        cols = fh.readline().strip().split(",")
    for row in rows:
        row["optimal?"] = values.get(row["key_id"], "y")
    write_csv_atomic(path, rows, cols)
    return path


def test_distribute_round_robin_and_merge_back(tmp_path):
    layout, tasks = _sheets_for_distribution(tmp_path)
    counts = sheets.distribute(layout, tasks, 2)
    assert counts == {"positive": {"A": 2, "B": 1}, "negative": {"A": 1, "B": 1}}
    assert (layout.annotator_dir("A", "positive") / "edema" / "edema_s0_positive_0.png").is_file()
    assert (layout.annotator_dir("B", "negative") / "opacity"
            / "opacity_s6_negative_0.png").is_file()
    _fill(layout, "A", "positive", {"edema_s2_positive_0": "n"})
    _fill(layout, "B", "positive", {})
    _fill(layout, "A", "negative", {})
    _fill(layout, "B", "negative", {"opacity_s6_negative_0": ""})
    with pytest.raises(InputError, match="opacity_s6_negative_0: not reviewed"):
        sheets.merge_annotations(layout, tasks, 2)  # blank = gap by default
    counts = sheets.merge_annotations(layout, tasks, 2, allow_unreviewed=True)
    assert counts["positive"] == {"accepted": 2, "rejected": 1, "unreviewed": 0}
    assert counts["negative"] == {"accepted": 1, "rejected": 0, "unreviewed": 1}
    merged = {r["key_id"]: r["optimal?"] for r in read_csv_rows(layout.positive_sheet())}
    assert merged["edema_s2_positive_0"] == "n" and merged["edema_s0_positive_0"] == "y"


def test_merge_back_errors_are_collected(tmp_path):
    layout, tasks = _sheets_for_distribution(tmp_path)
    sheets.distribute(layout, tasks, 2)
    _fill(layout, "A", "positive", {"edema_s0_positive_0": "maybe"})
    # Annotator B also answers s0 (a conflict would need two valid answers: make one).
    path_b = layout.annotator_dir("B", "positive") / "labeling_sheet.csv"
    rows = read_csv_rows(path_b)
    rows.append({**rows[0], "key_id": "edema_s2_positive_0", "optimal?": "n"})
    write_csv_atomic(path_b, rows, POSITIVE_SHEET_COLUMNS)
    (layout.annotator_dir("B", "negative") / "labeling_sheet.csv").unlink()
    before = layout.positive_sheet().read_bytes()
    with pytest.raises(InputError) as exc:
        sheets.merge_annotations(layout, tasks, 2)
    msg = str(exc.value)
    assert "'maybe'" in msg and "edema_s0_positive_0" in msg  # strict optimal?
    assert "edema_s2_positive_0" in msg and "annotator A" in msg  # conflict y vs n
    assert "annotator B sheet missing" in msg
    assert "opacity_s6_negative_0" in msg  # row in no annotator sheet
    assert layout.positive_sheet().read_bytes() == before  # nothing written


def test_prepare_images_missing_jpg_names_dicom(tmp_path):
    jpg = tmp_path / "jpg"
    (jpg / "files").mkdir(parents=True)
    Image.fromarray(np.full((30, 20), 200, np.uint8)).save(jpg / "files" / "a.jpg")
    with pytest.raises(InputError) as exc:
        images.prepare_images({"dA": "files/a.jpg", "dB": "files/b.jpg", "dC": "files/c.jpg"},
                              jpg, tmp_path / "png")
    assert "dB" in str(exc.value) and "files/b.jpg" in str(exc.value) and "dC" in str(exc.value)
    assert not (tmp_path / "png" / "dA.png").exists()  # checked before converting anything
    out = images.prepare_images({"dA": "files/a.jpg"}, jpg, tmp_path / "png")
    assert out.converted == 1
    with Image.open(tmp_path / "png" / "dA.png") as im:
        assert im.mode == "L" and im.size == (1024, 1024)
    assert images.prepare_images({"dA": "files/a.jpg"}, jpg, tmp_path / "png").skipped == 1


def test_merge_back_reviewed_exactly_once(tmp_path):
    """A row answered twice (even with the same value), in one sheet or two, is reported."""
    layout, tasks = _sheets_for_distribution(tmp_path)
    sheets.distribute(layout, tasks, 2)
    for who in ("A", "B"):
        for task in ("positive", "negative"):
            _fill(layout, who, task, {})
    path_b = layout.annotator_dir("B", "positive") / "labeling_sheet.csv"
    rows_a = read_csv_rows(layout.annotator_dir("A", "positive") / "labeling_sheet.csv")
    rows_b = read_csv_rows(path_b)
    dup_key = rows_a[0]["key_id"]
    write_csv_atomic(path_b, rows_b + [{**rows_a[0], "optimal?": "y"}], POSITIVE_SHEET_COLUMNS)
    # And a gap: drop annotator A's negative row entirely.
    neg_a = layout.annotator_dir("A", "negative") / "labeling_sheet.csv"
    gone = read_csv_rows(neg_a)[0]["key_id"]
    write_csv_atomic(neg_a, read_csv_rows(neg_a)[1:], NEGATIVE_SHEET_COLUMNS)
    with pytest.raises(InputError) as exc:
        sheets.merge_annotations(layout, tasks, 2)
    msg = str(exc.value)
    assert f"key_id {dup_key}: reviewed twice" in msg
    assert gone in msg and "in no annotator sheet" in msg
