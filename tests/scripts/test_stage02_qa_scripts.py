"""CLI smoke tests of Stage 02: 00_generate_qa.py and 01_export_benchmark.py (in-process, runpy)."""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path

import pytest
import yaml

from chexpercept.files import read_json
from chexpercept.layouts import BenchmarkLayout, QALayout
from chexpercept.schema import load_benchmark
from utils.cli import run_main

ROOT = Path(__file__).resolve().parents[2]
GENERATE = ROOT / "src" / "02_qa_generation" / "00_generate_qa.py"
EXPORT = ROOT / "src" / "02_qa_generation" / "01_export_benchmark.py"


def _qa_cases():
    spec = importlib.util.spec_from_file_location("stage02_qa_cases",
                                                  ROOT / "tests" / "qa" / "qa_cases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _main(script: Path):
    return runpy.run_path(str(script), run_name="stage02_cli")["main"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    paths = _qa_cases().build_inputs(root)
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump({
        "seed": 0,
        "path": {"mimic_cxr_path": str(paths["cxr_dir"]), "mimic_ils_path": "unused.json",
                 "work_dir": str(root / "work"), "chexmask_path": str(paths["chexmask_dir"]),
                 "cxas_mask_path": str(paths["cxas_dir"])},
        "qa_generation": {"no_deformation_ratio": {"default": 0.5, "cardiomegaly": 0.0},
                          "sampling": {"lesion_free": 1, "revision_free": 1,
                                       "revision_required": 1}},
    }))
    flags = ["--config", str(config),
             "--deformation-results-json", str(paths["deformation_results_json"]),
             "--positive-labeling-sheet", str(paths["positive_labeling_sheet"]),
             "--negative-labeling-sheet", str(paths["negative_labeling_sheet"]),
             "--deformed-mask-dir", str(paths["deformed_mask_dir"]),
             "--num-workers", "1", "--no-progress"]
    assert _main(GENERATE)(flags) == 0
    return root, config, flags


def test_generate_writes_stage_outputs_under_work_dir(setup):
    root, _, _ = setup
    layout = QALayout(root / "work" / "02_qa_generation")
    items = load_benchmark(layout.qa_results_json)
    assert len(items) == 5
    for path in (layout.qa_labeling_csv, layout.summary_json,
                 layout.out / "run_meta.json"):
        assert path.is_file()
    assert any((layout.out / "logs").glob("00_generate_qa_*.log"))
    assert read_json(layout.summary_json)["cases"] == 5


def test_sequential_qa_flag_is_refused(setup, capsys):
    _, _, flags = setup
    assert run_main(_main(GENERATE), [*flags, "--with-sequential-qa"]) == 2
    assert "not supported" in capsys.readouterr().err


def test_bad_config_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("path: {mimic_cxr_path: x, mimic_ils_path: y}\nqa_generation: {bogus: 1}\n")
    assert run_main(_main(GENERATE), ["--config", str(bad)]) == 2
    assert "bogus" in capsys.readouterr().err


def test_missing_input_exits_2(setup, tmp_path, capsys):
    _, config, _ = setup
    code = run_main(_main(GENERATE), ["--config", str(config), "--deformation-results-json",
                                      str(tmp_path / "nope.json"),
                                      "--output-dir", str(tmp_path / "o")])
    assert code == 2
    assert "nope.json" in capsys.readouterr().err


def test_export_defaults_and_link_choice(setup, tmp_path):
    _, config, _ = setup
    bench = tmp_path / "bench"
    assert _main(EXPORT)(["--config", str(config), "--benchmark-dir", str(bench),
                          "--link", "copy", "--no-progress"]) == 0
    layout = BenchmarkLayout(bench)
    items = load_benchmark(layout.json_path)
    assert len(items) == 5  # 1 per lesion/path where available
    assert sorted(p.name for p in layout.images_dir.iterdir()) == sorted(items)
    assert layout.sampling_summary_json.is_file()
    with pytest.raises(SystemExit):
        _main(EXPORT)(["--config", str(config), "--link", "symlink"])
