"""Stage 00 CLIs end to end on the synthetic fixture (in-process through runpy)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from chexpercept.files import read_csv_rows, read_json
from chexpercept.layouts import CurationLayout
from chexpercept.lesions import LESIONS
from chexpercept.schema import NEGATIVE_SHEET_COLUMNS, POSITIVE_SHEET_COLUMNS, accepted_key_ids
from chexpercept.synth import REAL_DICOM_ID, make_fixtures
from chexpercept.synth._real import REAL_LEFT_LUNG, REAL_RIGHT_LUNG
from utils.cli import run_main

REPO = Path(__file__).resolve().parents[2]
S00 = REPO / "src" / "00_source_data_curation"


def _main(path: Path):
    return runpy.run_path(str(path), run_name="not_main")["main"]


def _script(name: str):
    return _main(S00 / name)


@pytest.fixture(scope="module")
def fixture_paths(tmp_path_factory):
    return make_fixtures(tmp_path_factory.getbasetemp() / "synth_fixture_seed0", 0).paths


def _config(tmp: Path, fx, **curation) -> Path:
    cfg = {"seed": 0, "path": {
        "mimic_cxr_jpg_path": str(fx.jpg_root), "mimic_cxr_path": str(tmp / "mimic_cxr"),
        "mimic_meta_path": str(fx.metadata_csv), "mimic_report_path": str(fx.report_root),
        "mimic_ils_path": str(fx.mimic_ils_json),
        "mimic_ils_seg_mask_path": str(fx.lesion_mask_root), "work_dir": str(tmp / "work")},
        "source_data_curation": {"max_samples_per_lesion": 3, "samples_per_lesion_negative": 2,
                                 **curation}}
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def stage00(tmp_path_factory, fixture_paths):
    """Run 00.00 and an unsharded 00.01 once for the module."""
    tmp = tmp_path_factory.mktemp("stage00")
    cfg = _config(tmp, fixture_paths)
    assert _script("00_sample_mimic_ils_case.py")(["--config", str(cfg), "--no-progress"]) == 0
    assert _script("01_generate_rosalia_pred.py")(["--config", str(cfg), "--no-progress"]) == 0
    layout = CurationLayout(tmp / "work" / "00_source_data_curation")
    return tmp, cfg, layout


def test_sampling_outputs(stage00, fixture_paths):
    tmp, _, layout = stage00
    info = {k: read_json(layout.segmentation_info(k)) for k in ("global", "basic", "negative")}
    for bucket in info.values():
        assert list(bucket) == list(LESIONS)
    for lesion in LESIONS:
        assert 1 <= len(info["global"][lesion]) + len(info["basic"][lesion]) <= 3
        assert len(info["negative"][lesion]) == 2
    entry = info["basic"]["atelectasis"][0]  # the basic-only finding (study 7)
    assert entry["type"] == "basic" and entry["location"] == ["right lung base"]
    assert {"report_path", "study_id", "dicom_id", "image_path"} <= set(entry)
    assert Path(entry["report_path"]).is_file()
    pos = {e["dicom_id"] for k in ("global", "basic") for es in info[k].values() for e in es}
    neg = [e["dicom_id"] for es in info["negative"].values() for e in es]
    assert len(set(neg)) == len(neg) and not set(neg) & pos
    assert REAL_DICOM_ID in pos and REAL_DICOM_ID not in neg  # opacity positive wins
    assert all(e["type"] == "global" for es in info["negative"].values() for e in es)
    # Every sampled dicom was prepared as an 8-bit gray 1024 x 1024 PNG.
    for d in pos | set(neg):
        with Image.open(tmp / "mimic_cxr" / f"{d}.png") as im:
            assert im.mode == "L" and im.size == (1024, 1024)


def test_real_case_prepared_and_inverted(stage00):
    import cv2

    tmp, _, _ = stage00
    img = np.asarray(Image.open(tmp / "mimic_cxr" / f"{REAL_DICOM_ID}.png"))
    lung = np.zeros_like(img)
    for poly in (REAL_RIGHT_LUNG, REAL_LEFT_LUNG):
        cv2.fillPoly(lung, [np.round(np.array(poly) * 1024).astype(np.int32)], 1)
    mediastinum = img[160:460, 460:560]
    assert img[lung.astype(bool)].mean() + 20 < mediastinum.mean()


def test_candidates_sheet_and_artifacts(stage00, fixture_paths):
    _, _, layout = stage00
    with open(layout.positive_sheet()) as fh:
        assert fh.readline().strip().split(",") == list(POSITIVE_SHEET_COLUMNS)
    rows = read_csv_rows(layout.positive_sheet())
    assert len(rows) == 21 and all(r["optimal?"] == "" for r in rows)
    assert accepted_key_ids(rows, layout.positive_sheet()) == []
    results = read_json(layout.candidate_results())
    key = read_json(fixture_paths.answer_key)["dicoms"]
    for r in rows:
        assert r["key_id"] == f"{r['target']}_{r['pair_id']}"
        assert Path(r["plot_path"]).is_file()
        mask = np.asarray(Image.open(layout.candidate_mask(r["target"], r["pair_id"])))
        assert set(np.unique(mask)) <= {0, 255} and mask.shape == (1024, 1024)
        entry = results[r["pair_id"]][0]
        assert entry["mapped_location"] == r["mapped_location"]
        assert Path(entry["pred_mask_path"]).is_absolute()
        if r["target"] != "cardiomegaly":  # location read from `location` (docs/differences.md D1)
            assert r["mapped_location"] != "right lung and left lung" or \
                key[r["dicom_id"]]["lesions"][r["target"]]["location"] == []
    real = [r for r in rows if r["dicom_id"] == REAL_DICOM_ID][0]
    assert real["mapped_location"] == "right mid zone lung, right lung base, and left lung"
    assert results[real["pair_id"]][0]["instruction"] == (
        "Segment the opacity in the right mid zone lung, right lung base, and left lung.")
    summary = read_json(layout.candidate_summary())
    assert summary["processed"] == 21 and summary["failed"] == []


def test_rerun_reuses_and_resumes(stage00):
    _, cfg, layout = stage00
    sheet = layout.segmentation_info("global")
    before = sheet.stat().st_mtime_ns
    assert _script("00_sample_mimic_ils_case.py")(["--config", str(cfg), "--no-progress"]) == 0
    assert sheet.stat().st_mtime_ns == before  # same inputs + seed: not resampled
    assert _script("01_generate_rosalia_pred.py")(["--config", str(cfg), "--no-progress"]) == 0
    assert read_json(layout.candidate_summary())["skipped"] == 21


def test_seed_changes_sampling(tmp_path, fixture_paths):
    cfg = _config(tmp_path, fixture_paths, max_samples_per_lesion=1)
    main = _script("00_sample_mimic_ils_case.py")
    picks = []
    for seed in ("0", "1", "2", "0"):
        assert main(["--config", str(cfg), "--seed", seed, "--skip-prepare",
                     "--no-progress"]) == 0
        out = CurationLayout(tmp_path / "work" / "00_source_data_curation")
        data = read_json(out.segmentation_info("global"))
        picks.append(json.dumps({k: [e["pair_id"] for e in v] for k, v in data.items()}))
    assert picks[0] == picks[3] and len(set(picks)) > 1


def test_sharded_run_merge_negatives_distribution(tmp_path, fixture_paths, stage00):
    base_tmp, _, _ = stage00
    cfg = _config(tmp_path, fixture_paths)
    # Reuse the prepared PNGs of the module run.
    raw = yaml.safe_load(cfg.read_text())
    raw["path"]["mimic_cxr_path"] = str(base_tmp / "mimic_cxr")
    cfg.write_text(yaml.safe_dump(raw))
    layout = CurationLayout(tmp_path / "work" / "00_source_data_curation")
    assert _script("00_sample_mimic_ils_case.py")(["--config", str(cfg), "--no-progress"]) == 0
    gen = _script("01_generate_rosalia_pred.py")
    for p in (0, 1, 2):
        assert gen(["--config", str(cfg), "--part", str(p), "--total-parts", "3",
                    "--no-progress"]) == 0
    merge = _script("02_prepare_positive_annotation.py")
    with open(layout.positive_sheet(0)) as fh:
        assert fh.readline().startswith("key_id,dicom_id,target,pair_id,mapped_location,"
                                        "segmentation_source,optimal?,plot_path")
    layout.positive_sheet(2).rename(tmp_path / "held.csv")
    assert run_main(merge, ["--config", str(cfg), "--total-parts", "3", "--no-progress"]) == 2
    assert not layout.positive_sheet().exists()
    (tmp_path / "held.csv").rename(layout.positive_sheet(2))
    assert merge(["--config", str(cfg), "--total-parts", "3", "--no-progress"]) == 0
    rows = read_csv_rows(layout.positive_sheet())
    assert len(rows) == 21

    neg = _script("03_prepare_negative_annotation.py")
    assert neg(["--config", str(cfg), "--samples-per-lesion", "2", "--no-progress"]) == 0
    with open(layout.negative_sheet) as fh:
        assert fh.readline().strip().split(",") == list(NEGATIVE_SHEET_COLUMNS)
    neg_rows = read_csv_rows(layout.negative_sheet)
    assert len(neg_rows) == 14
    assert not {r["dicom_id"] for r in neg_rows} & {r["dicom_id"] for r in rows}
    for r in neg_rows:
        assert layout.negative_image(r["lesion"], r["key_id"]).is_file()

    dist = _script("04_distribute_labeling.py")
    assert dist(["--config", str(cfg), "--num-annotators", "3", "--no-progress"]) == 0
    autofill = _main(REPO / "scripts" / "sample_test" / "autofill_optimal.py")
    for a in "ABC":
        for task in ("positive", "negative"):
            sheet = layout.annotator_dir(a, task) / "labeling_sheet.csv"
            assert autofill([str(sheet), "--no-progress"]) == 0
    assert dist(["--config", str(cfg), "--num-annotators", "3", "--merge",
                 "--no-progress"]) == 0
    merged = read_csv_rows(layout.positive_sheet())
    assert len(accepted_key_ids(merged, layout.positive_sheet())) == 21
    with open(layout.positive_sheet()) as fh:
        assert fh.readline().strip().split(",") == list(POSITIVE_SHEET_COLUMNS)
    assert run_main(autofill, [str(layout.negative_sheet), "--value", "maybe"]) == 2


def test_missing_jpg_and_rosalia_are_clear_errors(tmp_path, fixture_paths, capsys):
    cfg = _config(tmp_path, fixture_paths, segmenter="rosalia")
    raw = yaml.safe_load(cfg.read_text())
    raw["path"]["mimic_cxr_jpg_path"] = str(tmp_path / "empty-jpg")
    cfg.write_text(yaml.safe_dump(raw))
    assert run_main(_script("00_sample_mimic_ils_case.py"), ["--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "synth-dicom-00001" in err and "empty-jpg" in err
    assert run_main(_script("01_generate_rosalia_pred.py"), ["--config", str(cfg)]) == 2
    assert "rosalia" in capsys.readouterr().err


def test_letterbox_keeps_masks_aligned_and_counts_summarised(stage00, fixture_paths):
    """Prepared CXRs are letterboxed with a recorded transform; candidate masks follow it."""
    from chexpercept.frame import read_frame_transform, transforms_index

    tmp, _, layout = stage00
    key = read_json(fixture_paths.answer_key)["dicoms"]
    index = read_json(transforms_index(tmp / "mimic_cxr"))
    rows = read_csv_rows(layout.positive_sheet())
    for r in rows:
        t = read_frame_transform(tmp / "mimic_cxr", r["dicom_id"])
        assert t is not None and t.mode == "letterbox" and index[r["dicom_id"]] == t.to_json()
        # Fixture boxes are in the square (stretched) frame: square -> original -> letterbox.
        x0, y0, x1, y1 = key[r["dicom_id"]]["lesions"][r["target"]]["bbox_xyxy"]
        ex0, ex1 = (x / 1024 * t.resized_width + t.pad_x for x in (x0, x1))
        ey0, ey1 = (y / 1024 * t.resized_height + t.pad_y for y in (y0, y1))
        mask = np.asarray(Image.open(layout.candidate_mask(r["target"], r["pair_id"]))) > 0
        ys, xs = np.nonzero(mask)
        assert abs(xs.min() - ex0) <= 3 and abs(xs.max() - ex1) <= 3, r["key_id"]
        assert abs(ys.min() - ey0) <= 3 and abs(ys.max() - ey1) <= 3, r["key_id"]
    summary = read_json(layout.sampling_summary)
    assert summary["params"]["ils_splits"] == ["train"]
    for kind in ("global", "basic", "negative"):  # per-lesion counts next to the outputs
        assert set(summary["selected"][kind]) == set(LESIONS)
    assert sum(summary["selected"]["negative"].values()) == 14
