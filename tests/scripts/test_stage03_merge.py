"""CLI tests of sharded Stage 03 runs: 00_eval.py --part/--total-parts, then 01_merge_parts.py."""

from __future__ import annotations

import importlib.util
import json
import runpy
from pathlib import Path

import pytest

from chexpercept.layouts import all_results_path, run_manifest_path
from utils.cli import run_main

ROOT = Path(__file__).resolve().parents[2]
STAGE = ROOT / "src" / "03_eval_vlm_on_chexpercept"
_spec = importlib.util.spec_from_file_location(
    "stage03_bundle", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
stage03_bundle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage03_bundle)


@pytest.fixture(scope="module")
def eval_main():
    return runpy.run_path(str(STAGE / "00_eval.py"), run_name="stage03_eval")["main"]


@pytest.fixture(scope="module")
def merge_main():
    return runpy.run_path(str(STAGE / "01_merge_parts.py"), run_name="stage03_merge")["main"]


@pytest.fixture()
def bench(tmp_path):
    return stage03_bundle.write_bundle(tmp_path / "bench")


def _eval(bench, out, *extra):
    return ["--benchmark-dir", str(bench), "--output-path", str(out), "--no-progress",
            "--provider", "random", "--seed", "5", "--oracle_setting", "none", *extra]


def test_sharded_run_merges_into_the_unsharded_result(eval_main, merge_main, bench, tmp_path,
                                                      capsys):
    assert run_main(eval_main, _eval(bench, tmp_path / "whole")) == 0
    whole = all_results_path(tmp_path / "whole" / "random_baseline" / "oracle_none")
    out = tmp_path / "sharded"
    run_dir = out / "random_baseline" / "oracle_none"
    for part in range(3):
        assert run_main(eval_main, _eval(bench, out, "--part", str(part),
                                         "--total_parts", "3")) == 0
        part_dir = run_dir / f"part_{part}_of_3"
        assert all_results_path(part_dir).is_file()
        assert any(part_dir.joinpath("logs").iterdir())
    capsys.readouterr()
    argv = ["--run-dir", str(run_dir), "--total-parts", "3", "--benchmark-dir", str(bench),
            "--no-progress"]
    assert run_main(merge_main, argv) == 0
    err = capsys.readouterr().err
    assert f"merged 3 part(s): 7 case(s) (per part: 4, 2, 1); output: " \
           f"{all_results_path(run_dir)}" in err
    assert all_results_path(run_dir).read_bytes() == whole.read_bytes()
    manifest = json.loads(run_manifest_path(run_dir).read_text(encoding="utf-8"))
    assert manifest["sharding"] == {"total_parts": 3, "merged": True}


def test_merge_names_the_missing_part_in_one_line(eval_main, merge_main, bench, tmp_path,
                                                  capsys):
    out = tmp_path / "out"
    assert run_main(eval_main, _eval(bench, out, "--part", "0", "--total-parts", "2")) == 0
    run_dir = out / "random_baseline" / "oracle_none"
    capsys.readouterr()
    argv = ["--run_dir", str(run_dir), "--total_parts", "2", "--benchmark_dir", str(bench)]
    assert run_main(merge_main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert "part 1 of 2 is missing" in err and "--part 1 --total-parts 2" in err
    assert not all_results_path(run_dir).exists()


def test_merge_with_the_parts_limit(eval_main, merge_main, bench, tmp_path, capsys):
    out = tmp_path / "out"
    for part in range(2):
        assert run_main(eval_main, _eval(bench, out, "--limit", "3", "--part", str(part),
                                         "--total-parts", "2")) == 0
    run_dir = out / "random_baseline" / "oracle_none"
    argv = ["--run-dir", str(run_dir), "--total-parts", "2", "--benchmark-dir", str(bench)]
    capsys.readouterr()
    assert run_main(merge_main, argv) == 2  # the other 4 cases were never run
    assert ("the parts ran with --limit 3 but the merge was given no --limit/--per_path_limit"
            in capsys.readouterr().err)
    assert run_main(merge_main, [*argv, "--limit", "3"]) == 0
    results = json.loads(all_results_path(run_dir).read_text(encoding="utf-8"))
    assert list(results) == list(stage03_bundle.CASES)[:3]


def test_part_flags_are_checked_before_any_work(eval_main, bench, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_main(eval_main, _eval(bench, out, "--total-parts", "2")) == 2
    assert "needs --part" in capsys.readouterr().err
    assert run_main(eval_main, _eval(bench, out, "--part", "2", "--total-parts", "2")) == 2
    assert "--part must be in 0..1" in capsys.readouterr().err
    assert not out.exists()


def test_plugin_provider_errors_are_one_line(eval_main, bench, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--benchmark-dir", str(bench), "--output-path", str(out), "--no-progress"]
    assert run_main(eval_main, [*argv, "--provider", "no_such_module_xyz:Model"]) == 2
    assert "cannot import module no_such_module_xyz" in capsys.readouterr().err
    assert run_main(eval_main, [*argv, "--provider", "utils.llm.base:Usage"]) == 2
    assert "Usage is not a subclass of utils.llm.base.ChatModel" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        eval_main([*argv, "--provider", "not a provider"])
    assert exc.value.code == 2
    assert "package.module:ClassName" in capsys.readouterr().err
    assert not out.exists()


def test_plugin_provider_runs_in_a_folder_named_by_its_label(eval_main, bench, tmp_path):
    out = tmp_path / "out"
    argv = ["--benchmark-dir", str(bench), "--output-path", str(out), "--no-progress",
            "--provider", "utils.llm.baselines:OracleModel", "--model", "gt"]
    assert run_main(eval_main, argv) == 0
    run_dir = out / "oracle_gt" / "oracle_implicit"
    results = json.loads(all_results_path(run_dir).read_text(encoding="utf-8"))
    assert all(r["detection_qa"]["correct"] for r in results.values())
    manifest = json.loads(run_manifest_path(run_dir).read_text(encoding="utf-8"))
    assert manifest["provider"] == "utils.llm.baselines:OracleModel"


def test_merge_names_parts_run_with_different_limits(eval_main, merge_main, bench, tmp_path,
                                                     capsys):
    out = tmp_path / "out"
    assert run_main(eval_main, _eval(bench, out, "--limit", "3", "--part", "0",
                                     "--total-parts", "2")) == 0
    assert run_main(eval_main, _eval(bench, out, "--per_path_limit", "1", "--part", "1",
                                     "--total-parts", "2")) == 0
    run_dir = out / "random_baseline" / "oracle_none"
    capsys.readouterr()
    assert run_main(merge_main, ["--run-dir", str(run_dir), "--total-parts", "2",
                                 "--benchmark-dir", str(bench), "--limit", "3"]) == 2
    err = capsys.readouterr().err
    assert "part 0 ran with --limit 3; part 1 ran with --per_path_limit 1" in err
    manifest = json.loads((run_dir / "part_0_of_2" / "run_manifest.json").read_text("utf-8"))
    assert manifest["selection"] == {"limit": 3, "per_path_limit": None}
