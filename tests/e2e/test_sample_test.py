"""End to end: `bash sample_test.sh` on the generated fixtures, twice, in temporary work dirs.

Checks the Done-when of the vertical slice: exit 0, oracle rows 1.0 everywhere, dummy rows equal to
values computed here by hand from the benchmark's answer keys, every stage's artifacts against the
release schemas, and byte-identical chexpercept.json / summary CSVs across two runs.
"""

from __future__ import annotations

import csv
import json
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chexpercept.schema import (
    ATTRIBUTE_DETAIL_COLUMNS,
    NEGATIVE_SHEET_COLUMNS,
    POSITIVE_SHEET_COLUMNS,
    REVISION_DETAIL_COLUMNS,
    SUMMARY_COLUMNS,
    DeformationCase,
    load_benchmark,
    parse_all_results,
    qa_path_of,
)

ROOT = Path(__file__).resolve().parents[2]
PATHS = ("revision_required", "revision_free", "lesion_free")
SETTINGS = ("implicit", "none")


def _run(work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CHEXPERCEPT_LOG_LEVEL": "WARNING"}
    env.pop("CHEXPERCEPT_WORK_DIR", None)
    return subprocess.run(["bash", "sample_test.sh", "--work-dir", str(work)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    first, second = tmp_path_factory.mktemp("run1"), tmp_path_factory.mktemp("run2")
    for work in (first, second):
        res = _run(work)
        assert res.returncode == 0, f"sample_test.sh failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return first, second, res.stdout


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _header(path: Path) -> tuple[str, ...]:
    with open(path, newline="") as fh:
        return tuple(next(csv.reader(fh)))


def _summary(work: Path, setting: str) -> Path:
    return work / "04_analyze_eval_result" / f"all_models_oracle_{setting}" / "all_models_summary.csv"


def test_prints_summary_and_locations(runs):
    _, _, stdout = runs
    assert "oracle_baseline" in stdout and "dummy_baseline" in stdout
    assert "all_models_oracle_implicit" in stdout


def test_byte_identical_across_runs(runs):
    first, second, _ = runs
    assert (first / "chexpercept" / "chexpercept.json").read_bytes() == \
        (second / "chexpercept" / "chexpercept.json").read_bytes()
    for setting in SETTINGS:
        assert _summary(first, setting).read_bytes() == _summary(second, setting).read_bytes()


def test_stage00_and_01_artifacts(runs):
    work = runs[0]
    s00 = work / "00_source_data_curation"
    assert _header(s00 / "rosalia_pred" / "labeling_sheet.csv") == POSITIVE_SHEET_COLUMNS
    assert _header(s00 / "negative" / "labeling_sheet.csv") == NEGATIVE_SHEET_COLUMNS
    for name in ("global_segmentation_info.json", "basic_segmentation_info.json",
                 "global_segmentation_negative_info.json"):
        assert set(json.loads((s00 / name).read_text())) == {
            "cardiomegaly", "consolidation", "edema", "atelectasis", "pneumonia", "opacity", "effusion"}
    deform = json.loads((work / "01_mask_deformation" / "deformation_results" /
                         "deformation_results.json").read_text())
    assert deform
    for key_id, case in deform.items():
        DeformationCase.model_validate(case)
        assert (work / "01_mask_deformation" / "deformed_masks" / key_id).is_dir()


def test_benchmark_covers_every_lesion_and_path(runs):
    work = runs[0]
    bench = load_benchmark(work / "chexpercept" / "chexpercept.json")
    seen = {(k.split("_")[0], qa_path_of(v)) for k, v in bench.items()}
    for lesion in ("cardiomegaly", "consolidation", "edema", "atelectasis", "pneumonia",
                   "opacity", "effusion"):
        assert (lesion, "lesion_free") in seen
        assert (lesion, "revision_required") in seen or (lesion, "revision_free") in seen
    assert any(p == "revision_required" for _, p in seen) and any(p == "revision_free" for _, p in seen)
    for key_id, item in bench.items():
        case = work / "chexpercept" / "chexpercept" / key_id
        assert (case / "detection_qa" / "xray.png").is_file()
        if qa_path_of(item) == "revision_required":
            options = item.contour_qa.contour_revision_qa_revision_result.answer_options
            for opt in options:
                assert "answer" not in opt.relative_path and "fake" not in opt.relative_path
                assert (case / "contour_qa" / "contour_revision_qa" / opt.relative_path).is_file()


def _rows(work: Path, setting: str) -> dict[tuple[str, str, str], dict[str, str]]:
    rows = _csv(_summary(work, setting))
    return {(r["model"], r["path"], r["setting"]): r for r in rows}


def test_summary_columns_and_oracle_is_perfect(runs):
    work = runs[0]
    for setting in SETTINGS:
        assert _header(_summary(work, setting)) == SUMMARY_COLUMNS
        d = _summary(work, setting).parent
        assert _header(d / "all_models_contour_revision_detail.csv") == REVISION_DETAIL_COLUMNS
        assert _header(d / "all_models_attribute_extraction_detail.csv") == ATTRIBUTE_DETAIL_COLUMNS
        for name in ("plot_stage_accuracy.png", "plot_contour_revision_detail.png",
                     "plot_attribute_extraction_detail.png", "plot_depth_heatmap.png"):
            assert (d / name).stat().st_size > 0
        rows = _rows(work, setting)
        max_depth = {"revision_required": 4, "revision_free": 3, "lesion_free": 1}
        for path in PATHS:
            for kind in ("end_to_end", "oracle_passed"):
                row = rows[("oracle_baseline", path, kind)]
                stages = ["acc(stage1)"] + (["acc(stage2)", "acc(stage3)", "acc(stage4)"]
                                            if path == "revision_required" else
                                            ["acc(stage2)", "acc(stage4)"] if path == "revision_free" else [])
                for col in stages:
                    assert float(row[col]) == pytest.approx(1.0), (setting, path, kind, col)
                assert float(row["depth"]) == pytest.approx(max_depth[path])


CHECK = runpy.run_path(str(ROOT / "scripts" / "sample_test" / "check_summary.py"),
                      run_name="check_summary")


def _dummy_expected(bench) -> dict[tuple[str, str], dict[str, float]]:
    """By hand: the dummy provider answers option 1 to every question (the script's rule)."""
    return CHECK["dummy_expected"](bench)


def test_dummy_rows_equal_hand_computation(runs):
    work = runs[0]
    bench = load_benchmark(work / "chexpercept" / "chexpercept.json")
    expected = _dummy_expected(bench)
    for setting in SETTINGS:
        rows = _rows(work, setting)
        for (path, kind), cols in expected.items():
            row = rows[("dummy_baseline", path, kind)]
            for col, value in cols.items():
                assert float(row[col]) == pytest.approx(value, abs=1e-6), (setting, path, kind, col)


def test_all_results_schema_and_layout(runs):
    s03 = runs[0] / "03_eval_vlm_on_chexpercept"
    for provider in ("oracle", "random", "dummy"):
        for setting in SETTINGS:
            path = s03 / f"{provider}_baseline" / f"oracle_{setting}" / "all_results.json"
            results = parse_all_results(json.loads(path.read_text()), path)
            assert results
            first = next(iter(results.values()))
            assert "response" in first.detection_qa and "correct" in first.detection_qa


def test_sample_test_checks_itself_and_fails_with_one_line(runs, tmp_path):
    work, _, stdout = runs
    assert "check: ok" in stdout
    copy = tmp_path / "work"
    for rel in ("chexpercept/chexpercept.json", "04_analyze_eval_result"):
        src = work / rel
        dst = copy / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy(src, dst)
    summary = _summary(copy, "none")
    text = summary.read_text(encoding="utf-8").splitlines()
    text = [line.replace("oracle_baseline,end_to_end,1.000000", "oracle_baseline,end_to_end,"
                         "0.990000", 1) for line in text]
    summary.write_text("\n".join(text) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "sample_test" /
                                               "check_summary.py"), "--work-dir", str(copy)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "oracle_baseline" in lines[0] and "0.99" in lines[0]
