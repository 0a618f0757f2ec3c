"""Stage 01.01 driver: determinism across worker counts, resume, failures, schema, backends."""

from __future__ import annotations

import json

import pytest
from stage01_inputs import deformation_tasks

from chexpercept.deformation import (
    DeformationSettings,
    build_tasks,
    check_backend,
    run_deformation,
)
from chexpercept.errors import ConfigError, InputError
from chexpercept.layouts import DeformationLayout
from chexpercept.schema import accepted_key_ids, parse_deformation_results

CASES = {"s50000001_positive_0": "consolidation", "s50000002_positive_0": "cardiomegaly",
         "s50000003_positive_0": "effusion"}


def _setup(root, cases=CASES, out_name="out01"):
    return deformation_tasks(root, cases, out_name)


def _snapshot(out):
    layout = DeformationLayout(out)
    masks = {p.relative_to(out).as_posix(): p.read_bytes()
             for p in sorted((out / "deformed_masks").rglob("*.png"))}
    return layout.results_json.read_bytes(), masks


def test_one_and_two_workers_give_identical_bytes(tmp_path):
    tasks, settings = _setup(tmp_path)
    s1 = run_deformation(tasks, settings, num_workers=1)
    assert s1.processed == 3 and not s1.failed
    one = _snapshot(tmp_path / "out01")
    settings2 = DeformationSettings(**{**settings.__dict__, "out_dir": str(tmp_path / "out02")})
    run_deformation(tasks, settings2, num_workers=2)
    two = _snapshot(tmp_path / "out02")
    assert one[0] == two[0]
    assert one[1] == two[1]
    data = json.loads(one[0])
    assert list(data) == [t.key_id for t in tasks]  # sheet order
    cases = parse_deformation_results(data, "deformation_results.json")
    assert all(c.dicom_id for c in cases.values())
    assert data[tasks[0].key_id]["dicom_id"] == tasks[0].dicom_id
    assert "all_dilated_masks_by_depth" not in one[0].decode()
    # masks on disk match the stems the JSON names
    for key_id, case in data.items():
        for op in ("expansion", "contraction"):
            for entries in case["qa_deformation_results"][op].values():
                for e in entries:
                    assert f"deformed_masks/{key_id}/{e['mask_path']}.png" in one[1]
                    for f in e["fake_masks"]:
                        assert f"deformed_masks/{key_id}/{f['fake_mask']}.png" in one[1]


def test_resume_skips_finished_cases_and_rebuilds_interrupted_ones(tmp_path):
    tasks, settings = _setup(tmp_path)
    run_deformation(tasks, settings, num_workers=1)
    before = _snapshot(tmp_path / "out01")
    layout = DeformationLayout(tmp_path / "out01")
    again = run_deformation(tasks, settings, num_workers=1)
    assert (again.processed, again.skipped_done) == (0, 3)
    assert _snapshot(tmp_path / "out01") == before
    # simulate a crash inside case 2: item missing, a stale mask left behind
    key = tasks[1].key_id
    layout.item_json(key).unlink()
    stale = layout.deformed_mask(key, "suboptimal_component_0_exp9")
    stale.write_bytes(b"stale")
    third = run_deformation(tasks, settings, num_workers=1)
    assert (third.processed, third.skipped_done) == (1, 2)
    assert not stale.exists()
    assert _snapshot(tmp_path / "out01") == before


def test_failed_cases_are_recorded_not_dropped(tmp_path):
    cases = {**CASES, "s50000004_positive_0": "edema"}
    tasks, settings = _setup(tmp_path, cases)
    missing = tasks[3]
    (tmp_path / "work" / "00_source_data_curation" / "rosalia_pred" / "edema"
     / "s50000004_positive_0" / "pred_mask.png").unlink()
    summary = run_deformation(tasks, settings, num_workers=1)
    assert summary.failed == {"missing_input": [missing.key_id]}
    layout = DeformationLayout(tmp_path / "out01")
    data = json.loads(layout.results_json.read_text())
    assert missing.key_id not in data and len(data) == 3
    report = json.loads(layout.summary_json.read_text())
    assert report["failed_by_reason"] == {"missing_input": 1}
    assert report["failures"][0]["key_id"] == missing.key_id
    assert "pred_mask.png" in report["failures"][0]["detail"]
    assert report["processed"] == 3
    assert "failed 1 (missing_input=1)" in summary.line()


def test_build_tasks_rejects_bad_rows_and_backends(tmp_path):
    rows = [{"key_id": "edem_s1_positive_0", "dicom_id": "d", "target": "edem",
             "pair_id": "s1_positive_0", "optimal?": "y"},
            {"key_id": "edema_s2_positive_0", "dicom_id": "", "target": "edema",
             "pair_id": "s2_positive_0", "optimal?": "y"}]
    with pytest.raises(InputError) as exc:
        build_tasks(rows, accepted_key_ids(rows, "sheet.csv"), sheet_path="sheet.csv",
                    candidate_root=tmp_path, cxr_dir=tmp_path)
    assert "did you mean 'edema'" in str(exc.value) and "edema_s2_positive_0" in str(exc.value)
    check_backend("morphological")
    for name in ("sam3", "sam2"):
        with pytest.raises(ConfigError, match="needs the mask_deformation config"):
            check_backend(name)
    with pytest.raises(ConfigError, match="unknown value"):
        check_backend("sam1")
