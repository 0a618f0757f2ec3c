"""chexpercept.synth: layout, content and determinism of the generated fixture."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chexpercept.errors import MissingDependencyError
from chexpercept.files import read_csv_rows
from chexpercept.lesions import LESIONS
from chexpercept.synth import REAL_DICOM_ID, RECIPE_VERSION, make_fixtures
from chexpercept.synth._real import REAL_HEART, REAL_LEFT_LUNG, REAL_RIGHT_LUNG
from chexpercept.synth.fixtures import METADATA_COLUMNS, SPLIT_COLUMNS

MIMIC_DICOM = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{8}){4}", re.IGNORECASE)
CXAS_REQUIRED = ["lung", "left lung", "right lung", "heart", "left upper zone lung",
                 "right upper zone lung", "left mid zone lung", "right mid zone lung",
                 "left lung base", "right lung base", "mediastinum", "diaphragm"]


def _ils(paths):
    return json.loads(paths.mimic_ils_json.read_text())


def _key(paths):
    return json.loads(paths.answer_key.read_text())


def test_csv_columns_and_rows(synth_paths):
    meta = read_csv_rows(synth_paths.metadata_csv)
    with open(synth_paths.metadata_csv) as fh:
        assert fh.readline().strip().split(",") == list(METADATA_COLUMNS)
    with open(synth_paths.split_csv) as fh:
        assert fh.readline().strip().split(",") == list(SPLIT_COLUMNS)
    train = _ils(synth_paths)["train"]
    assert {r["dicom_id"] for r in meta} == {s["dicom_id"] for s in train.values()}
    assert {r["ViewPosition"] for r in meta} <= {"PA", "AP"}


def test_mimic_ils_shape(synth_paths):
    data = _ils(synth_paths)
    assert list(data) == ["train", "val", "test"] and data["val"] == {} and data["test"] == {}
    assert 21 <= len(data["train"]) <= 28
    for study_id, study in data["train"].items():
        assert set(study) == {"subject_id", "dicom_id", "image_path", "section_name",
                              "section_content", "instruction_answer_pairs"}
        rel = study["image_path"]
        assert rel == (f"files/{study['subject_id'][:3]}/{study['subject_id']}/{study_id}/"
                       f"{study['dicom_id']}.jpg")
        assert (synth_paths.jpg_root / rel).is_file()
        report = (synth_paths.report_root / study["subject_id"][:3] / study["subject_id"]
                  / f"{study_id}.txt")
        assert report.is_file() and "1. " in study["section_content"]
        pairs = study["instruction_answer_pairs"]
        for p in pairs["positive_pairs"]:
            assert {"pair_id", "instruction", "answer", "type", "target", "location", "sent_idx",
                    "seg", "seg_mask_path"} <= set(p)
            assert p["pair_id"].startswith(f"{study_id}_positive_")
            assert p["seg_mask_path"] == f"{study_id}/{study_id}_{p['target']}_0.png"
            assert isinstance(p["location"], list) and p["location"]
            mask = Image.open(synth_paths.lesion_mask_root / p["seg_mask_path"])
            assert mask.mode == "L" and mask.size == (512, 512)
            assert set(np.unique(np.asarray(mask))) == {0, 255}
        for p in pairs["negative_pairs"]:
            assert p["pair_id"].startswith(f"{study_id}_negative_")
            assert p["seg_mask_path"] is None and p["seg"] is False


def test_images_and_anatomy(synth_paths):
    train = _ils(synth_paths)["train"]
    for study in train.values():
        with Image.open(synth_paths.jpg_root / study["image_path"]) as im:
            assert im.format == "JPEG" and im.mode == "L"
            assert im.size[0] != im.size[1] and im.size[1] > im.size[0] >= 1024
        d = study["dicom_id"]
        for name in ("right_lung", "left_lung", "heart"):
            with Image.open(synth_paths.chexmask_dir / d / f"{name}.png") as m:
                assert m.mode == "1" and m.size == (1024, 1024)
        for name in CXAS_REQUIRED:
            with Image.open(synth_paths.cxas_dir / d / f"{name}.png") as m:
                assert m.mode == "1" and m.size == (1024, 1024)
                assert np.asarray(m).any(), (d, name)


def test_every_lesion_has_positives_and_negatives(synth_paths):
    train = _ils(synth_paths)["train"]
    pos, neg_only, types = {}, {}, set()
    basic_only = []
    for study in train.values():
        pairs = study["instruction_answer_pairs"]
        by_target = {}
        for p in pairs["positive_pairs"]:
            pos.setdefault(p["target"], set()).add(study["dicom_id"])
            by_target.setdefault(p["target"], []).append(p["type"])
            types.add(p["type"])
        basic_only += [t for t, ts in by_target.items() if "global" not in ts]
        if not pairs["positive_pairs"]:
            for p in pairs["negative_pairs"]:
                if p["type"] == "global":
                    neg_only.setdefault(p["target"], set()).add(study["dicom_id"])
    for lesion in LESIONS:
        assert len(pos[lesion]) >= 3, lesion
        assert len(neg_only[lesion]) >= 2, lesion
    assert types == {"global", "basic"} and basic_only
    non_global_neg = [p for s in train.values() for p in s["instruction_answer_pairs"]
                      ["negative_pairs"] if p["type"] != "global"]
    assert non_global_neg


def test_lesion_sizes_and_answer_key(synth_paths):
    key = _key(synth_paths)
    assert key["recipe_version"] == RECIPE_VERSION and key["seed"] == 0
    for dicom, info in key["dicoms"].items():
        for lesion, facts in info["lesions"].items():
            assert all(c["area_px"] >= 1000 for c in facts["components"]), (dicom, lesion)
            if lesion != "cardiomegaly":
                assert facts["lung_overlap_px"] >= 3000, (dicom, lesion)
            x0, y0, x1, y1 = facts["bbox_xyxy"]
            assert 0 <= x0 < x1 < 1024 and 0 <= y0 < y1 < 1024
    # Cardiomegaly hearts are larger than normal ones.
    hearts = {d: np.asarray(Image.open(synth_paths.chexmask_dir / d / "heart.png")).sum()
              for d in key["dicoms"] if d.startswith("synth")}
    cardio = [d for d, i in key["dicoms"].items() if "cardiomegaly" in i["lesions"]]
    normal = [d for d in hearts if d not in cardio]
    assert min(hearts[d] for d in cardio) > max(hearts[d] for d in normal)


def test_ids_are_synthetic(synth_paths):
    root = synth_paths.root
    names = [str(p.relative_to(root)) for p in root.rglob("*")]
    assert not any(MIMIC_DICOM.search(n) for n in names)
    for f in (synth_paths.mimic_ils_json, synth_paths.answer_key, synth_paths.metadata_csv):
        assert not MIMIC_DICOM.search(f.read_text())
    for d in _key(synth_paths)["dicoms"]:
        assert d.startswith("synth-dicom-") or d == REAL_DICOM_ID


def _poly_mean(img: np.ndarray, poly) -> float:
    import cv2

    h, w = img.shape
    m = np.zeros((h, w), np.uint8)
    cv2.fillPoly(m, [np.round(np.array(poly) * [w, h]).astype(np.int32)], 1)
    return float(img[m.astype(bool)].mean())


def test_real_case_converted_and_inverted(synth_paths):
    key = _key(synth_paths)["dicoms"][REAL_DICOM_ID]
    assert key["real"]["photometric_interpretation"] == "MONOCHROME1"
    assert set(key["lesions"]) == {"opacity"}
    assert set(key["negatives"]["global"]) == {"cardiomegaly", "effusion"}
    img = np.asarray(Image.open(synth_paths.jpg_root / key["image_path"]))
    assert img.dtype == np.uint8 and img.shape == (1955, 1841)
    lungs = (_poly_mean(img, REAL_RIGHT_LUNG) + _poly_mean(img, REAL_LEFT_LUNG)) / 2
    mediastinum = _poly_mean(img, [(0.44, 0.15), (0.56, 0.15), (0.56, 0.45), (0.44, 0.45)])
    heart = _poly_mean(img, REAL_HEART)
    assert lungs + 20 < mediastinum and lungs < heart


def test_idempotent_and_deterministic(synth_paths, tmp_path):
    before = synth_paths.answer_key.stat().st_mtime_ns
    again = make_fixtures(synth_paths.root, 0)
    assert not again.built and synth_paths.answer_key.stat().st_mtime_ns == before
    # A stale folder (other recipe version) is rebuilt in place by an atomic swap.
    stale = tmp_path / "copy"
    stale.mkdir()
    (stale / "answer_key.json").write_text(json.dumps({"recipe_version": "0", "seed": 0}))
    (stale / "junk.txt").write_text("old")
    other = make_fixtures(stale, 0)
    assert other.built and not (stale / "junk.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["copy"]
    files_a = sorted(p.relative_to(synth_paths.root) for p in synth_paths.root.rglob("*")
                     if p.is_file())
    files_b = sorted(p.relative_to(stale) for p in stale.rglob("*") if p.is_file())
    assert files_a == files_b
    for rel in files_a:
        assert (synth_paths.root / rel).read_bytes() == (stale / rel).read_bytes(), rel


def test_missing_pydicom_data_names_the_extra(monkeypatch, tmp_path):
    import pydicom.data

    monkeypatch.setattr(pydicom.data, "get_testdata_file", lambda name: None)
    with pytest.raises(MissingDependencyError, match=r'pip install -e "\.\[fixtures\]"'):
        make_fixtures(tmp_path / "fx", 0)
    assert not (tmp_path / "fx").exists()


def test_make_fixtures_script(synth_paths, capsys):
    import runpy

    script = Path(__file__).resolve().parents[2] / "scripts" / "sample_test" / "make_fixtures.py"
    main = runpy.run_path(str(script), run_name="not_main")["main"]
    assert main(["--out", str(synth_paths.root), "--seed", "0", "--no-progress"]) == 0
