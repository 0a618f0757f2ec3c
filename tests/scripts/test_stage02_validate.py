"""CLI tests: 01_export_benchmark.py prints and writes the stats table; 02_validate_bundle.py."""

from __future__ import annotations

import csv
import importlib.util
import json
import runpy
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from chexpercept.bundle import STATS_COLUMNS
from chexpercept.layouts import BenchmarkLayout
from utils.cli import run_main

ROOT = Path(__file__).resolve().parents[2]
STAGE02 = ROOT / "src" / "02_qa_generation"
RR = "effusion_s50000001_positive_0"


def _main(name: str):
    return runpy.run_path(str(STAGE02 / name), run_name="stage02_cli")["main"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("stage02_qa_cases_v",
                                                  ROOT / "tests" / "qa" / "qa_cases.py")
    qa_cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(qa_cases)
    root = tmp_path_factory.mktemp("validate_cli")
    paths = qa_cases.build_inputs(root)
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump({
        "seed": 0,
        "path": {"mimic_cxr_path": str(paths["cxr_dir"]), "mimic_ils_path": "unused.json",
                 "work_dir": str(root / "work"), "chexmask_path": str(paths["chexmask_dir"]),
                 "cxas_mask_path": str(paths["cxas_dir"])},
        "qa_generation": {"no_deformation_ratio": {"default": 0.0}},
    }))
    assert _main("00_generate_qa.py")([
        "--config", str(config),
        "--deformation-results-json", str(paths["deformation_results_json"]),
        "--positive-labeling-sheet", str(paths["positive_labeling_sheet"]),
        "--negative-labeling-sheet", str(paths["negative_labeling_sheet"]),
        "--deformed-mask-dir", str(paths["deformed_mask_dir"]), "--num-workers", "1",
        "--no-progress"]) == 0
    out = root / "bench"
    assert _main("01_export_benchmark.py")(["--config", str(config), "--benchmark-dir",
                                            str(out), "--link", "copy"]) == 0
    return out


def test_export_writes_stats_csv(bench):
    with open(BenchmarkLayout(bench).stats_csv, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == STATS_COLUMNS
    total = rows[-1]
    assert (total["lesion"], total["path"], total["cases"], total["cxrs"]) == (
        "all", "all", "5", "5")
    assert total["qa_items"] == str(9 + 9 + 5 + 1 + 1)  # 2 effusion RR, cardiomegaly RR, 2 LF


def test_validate_ok_prints_stats(bench, capsys):
    assert _main("02_validate_bundle.py")(["--benchmark-dir", str(bench), "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == list(STATS_COLUMNS)
    assert out[-1].split()[:4] == ["all", "all", "5", "5"]


def test_validate_broken_bundle_exits_2(bench, tmp_path, capsys):
    broken = tmp_path / "bench"
    shutil.copytree(bench, broken)
    (broken / "chexpercept" / RR / "contour_qa" / "contour_revision_qa" / "option_2.png").unlink()
    code = run_main(_main("02_validate_bundle.py"), ["--benchmark-dir", str(broken)])
    assert code == 2
    assert f"{RR}: contour_revision_qa_revision_result image missing" in capsys.readouterr().err


def test_names_rule_flag(bench, tmp_path):
    released = tmp_path / "bench"
    shutil.copytree(bench, released)
    data = json.loads((released / "chexpercept.json").read_text(encoding="utf-8"))
    folder = released / "chexpercept" / RR / "contour_qa" / "contour_revision_qa"
    for i, option in enumerate(
            data[RR]["contour_qa"]["contour_revision_qa_revision_result"]["answer_options"], 1):
        name = f"option_{i}_mask_{'answer' if option['type'] == 'true' else 'fake'}.png"
        (folder / option["relative_path"]).rename(folder / name)
        option["relative_path"] = name
    (released / "chexpercept.json").write_text(json.dumps(data), encoding="utf-8")
    validate = _main("02_validate_bundle.py")
    assert run_main(validate, ["--benchmark-dir", str(released)]) == 2  # ours: strict
    assert run_main(validate, ["--benchmark-dir", str(released), "--names", "release"]) == 0
    with pytest.raises(SystemExit):
        validate(["--names", "lenient"])


def test_a_bundle_nested_200000_deep_is_one_error_line_naming_the_file(tmp_path, capsys):
    """Was: an uncaught RecursionError traceback, exit 1 (issue 29, item 3)."""
    bundle = tmp_path / "bundle"
    (bundle / "chexpercept").mkdir(parents=True)
    (bundle / "chexpercept.json").write_text("[" * 200_000, encoding="utf-8")
    code = run_main(_main("02_validate_bundle.py"), ["--benchmark-dir", str(bundle),
                                                     "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert err.splitlines() == [f"error: {bundle / 'chexpercept.json'}: not usable JSON: arrays "
                                f"or objects nested inside one another deeper than the parser "
                                f"can follow ({sys.getrecursionlimit()} levels)"]
