"""Guards added after a break-it pass: modes, failure exit codes, duplicate rows, empty inputs."""

from __future__ import annotations

import os
import runpy
import stat
from pathlib import Path

import pytest

from chexpercept.curation.sheets import SheetTask, distribute
from chexpercept.deformation.pipeline import build_tasks
from chexpercept.errors import InputError
from chexpercept.files import write_csv_atomic, write_json_atomic
from chexpercept.layouts import CurationLayout
from utils.cli import failures_exit_code, run_main
from utils.llm.base import Usage
from utils.llm.pricing import cost_usd

ROOT = Path(__file__).resolve().parents[2]


def test_atomic_outputs_are_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "a.json", {"a": 1})
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "a.json").stat().st_mode)
    assert mode & stat.S_IRGRP and mode & stat.S_IROTH  # mkstemp alone would give 0600


def test_failures_exit_code(capsys):
    assert failures_exit_code(0, 5, what="case(s)", summary="s.json", allow=False) == 0
    assert failures_exit_code(2, 5, what="case(s)", summary="s.json", allow=False) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 2 of 5 case(s) failed; reasons in s.json")
    assert failures_exit_code(2, 5, what="case(s)", summary="s.json", allow=True) == 0


def test_deformation_tasks_reject_duplicate_and_mismatched_key_ids(tmp_path):
    row = {"key_id": "effusion_sX_positive_0", "dicom_id": "d", "target": "effusion",
           "pair_id": "sX_positive_0", "optimal?": "y"}
    with pytest.raises(InputError, match="row 2: key_id effusion_sX_positive_0 appears more"):
        build_tasks([row, dict(row)], [row["key_id"]], sheet_path="sheet.csv",
                    candidate_root=tmp_path, cxr_dir=tmp_path)
    bad = dict(row, key_id="pneumonia_sX_positive_0")
    with pytest.raises(InputError, match="expected effusion_sX_positive_0"):
        build_tasks([bad], [bad["key_id"]], sheet_path="sheet.csv", candidate_root=tmp_path,
                    cxr_dir=tmp_path)


def test_distribute_refuses_to_erase_review_work(tmp_path):
    layout = CurationLayout(tmp_path)
    done = layout.annotator_dir("A", "negative") / "labeling_sheet.csv"
    write_csv_atomic(done, [{"lesion": "edema", "key_id": "edema_s1_negative_0",
                                "dicom_id": "d", "optimal?": "n"}],
                        ["lesion", "key_id", "dicom_id", "optimal?"])
    tasks = [SheetTask("negative", tmp_path / "main.csv", "lesion")]
    with pytest.raises(InputError, match="already hold review values"):
        distribute(layout, tasks, 2)


def test_baselines_cost_nothing_without_price_warning(caplog):
    assert cost_usd("baseline", Usage()) == 0.0
    assert "no price" not in caplog.text


def test_eval_refuses_an_empty_benchmark(tmp_path, capsys):
    bench = tmp_path / "bench"
    (bench / "chexpercept").mkdir(parents=True)
    (bench / "chexpercept.json").write_text("{}")
    ns = runpy.run_path(str(ROOT / "src/03_eval_vlm_on_chexpercept/00_eval.py"))
    code = run_main(ns["main"], ["--benchmark-dir", str(bench), "--provider", "dummy",
                                 "--output-path", str(tmp_path / "out"), "--no-progress"])
    assert code == 2
    assert "holds no case" in capsys.readouterr().err
