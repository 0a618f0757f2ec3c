"""Stage 01 CLI smoke tests: 00_generate_anatomy_mask / 01_deform_mask main([...]) via runpy."""

from __future__ import annotations

import importlib.util
import json
import runpy

import pytest

from chexpercept.layouts import DeformationLayout, repo_root
from utils.cli import run_main

STAGE = repo_root() / "src" / "01_mask_deformation"
_spec = importlib.util.spec_from_file_location(
    "stage01_inputs", repo_root() / "tests" / "deformation" / "stage01_inputs.py")
stage01_inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage01_inputs)


def _main(name):
    return runpy.run_path(str(STAGE / name))["main"]


def test_anatomy_then_deformation_end_to_end(tmp_path, capsys):
    paths = stage01_inputs.write_inputs(tmp_path, stage01_anatomy=False)
    assert _main("00_generate_anatomy_mask.py")(["--config", str(paths["config"]),
                                                  "--no-progress"]) == 0
    layout = DeformationLayout(paths["out01"])
    assert (layout.chexmask_dir / "dicom0000" / "heart.png").is_file()
    assert (layout.cxas_dir / "dicom0001" / "left lung.png").is_file()
    capsys.readouterr()
    assert _main("01_deform_mask.py")(["--config", str(paths["config"]), "--num_workers",
                                       "1", "--no-progress"]) == 0
    data = json.loads(layout.results_json.read_text())
    assert list(data) == ["consolidation_s50000001_positive_0",
                          "cardiomegaly_s50000002_positive_0"]
    assert (layout.deformed_mask_dir("cardiomegaly_s50000002_positive_0")
            / "optimal_combined_mask.png").is_file()
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "summary: processed 2, skipped (done) 0, failed 0" in last
    assert str(layout.results_json) in last
    assert (layout.results_json.parent / "run_meta.json").is_file()


def test_missing_anatomy_names_dicom_and_path(tmp_path, capsys):
    paths = stage01_inputs.write_inputs(tmp_path, stage01_anatomy=False)
    gone = paths["provided_cxas"] / "dicom0001" / "left lung.png"
    gone.unlink()
    assert run_main(_main("00_generate_anatomy_mask.py"),
                    ["--config", str(paths["config"])]) == 2
    err = capsys.readouterr().err
    assert "dicom dicom0001" in err and str(gone) in err


def test_cxas_mask_path_needed_only_for_cxas_zones(tmp_path, capsys):
    root_a, root_b = tmp_path / "a", tmp_path / "b"
    root_a.mkdir()
    root_b.mkdir()
    ok = stage01_inputs.write_inputs(root_a, {"s1_positive_0": "effusion"},
                                     with_cxas_path=False)
    assert _main("01_deform_mask.py")(["--config", str(ok["config"]), "--num-workers", "1",
                                       "--no-progress"]) == 0
    bad = stage01_inputs.write_inputs(root_b, {"s1_positive_0": "effusion"}, zone_source="cxas",
                                      with_cxas_path=False)
    assert run_main(_main("01_deform_mask.py"), ["--config", str(bad["config"])]) == 2
    assert "path.cxas_mask_path" in capsys.readouterr().err


def test_cxas_zone_source_reads_the_zone_pngs(tmp_path):
    paths = stage01_inputs.write_inputs(tmp_path, {"s1_positive_0": "edema"},
                                        zone_source="cxas", cxas_zones=True)
    assert _main("01_deform_mask.py")(["--config", str(paths["config"]), "--num-workers", "1",
                                       "--no-progress"]) == 0
    data = json.loads(DeformationLayout(paths["out01"]).results_json.read_text())
    zones = data["edema_s1_positive_0"]["geometrical_mask_infos"][0]["overlap"]["zones"]
    # hand-made CXAS bands: upper zone = rows < 400 (vertical thirds would differ)
    assert zones["right upper zone lung"]["overlap_ratio"] > 0


def test_backend_errors_and_help(tmp_path, capsys):
    paths = stage01_inputs.write_inputs(tmp_path, {"s1_positive_0": "effusion"})
    cfg = paths["config"]
    cfg.write_text(cfg.read_text().replace("backend: morphological", "backend: sam3"))
    assert run_main(_main("01_deform_mask.py"), ["--config", str(cfg)]) == 2
    assert "mask_deformation.backend 'sam3'" in capsys.readouterr().err
    cfg.write_text(cfg.read_text() + "anatomy:\n  backend: models\n")
    assert run_main(_main("00_generate_anatomy_mask.py"), ["--config", str(cfg)]) == 2
    assert "anatomy.backend 'models'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _main("01_deform_mask.py")(["--help"])
    out = capsys.readouterr().out
    for flag in ("--positive-sheet", "--candidate-dir", "--chexmask-dir", "--cxas-dir",
                 "--output-dir", "--num-workers", "--num_workers", "--seed"):
        assert flag in out


def test_failed_case_makes_the_stage_exit_2_unless_allowed(tmp_path, capsys):
    paths = stage01_inputs.write_inputs(tmp_path, stage01_anatomy=False)
    assert _main("00_generate_anatomy_mask.py")(["--config", str(paths["config"]),
                                                  "--no-progress"]) == 0
    masks = sorted(tmp_path.rglob("pred_mask.png"))
    masks[0].unlink()  # one candidate mask is gone: that case fails, the other is built
    capsys.readouterr()
    args = ["--config", str(paths["config"]), "--num_workers", "1", "--no-progress"]
    assert run_main(_main("01_deform_mask.py"), args) == 2
    err = capsys.readouterr().err
    assert "error: 1 of 2 case(s) failed; reasons in" in err and "summary.json" in err
    layout = DeformationLayout(paths["out01"])
    assert len(json.loads(layout.results_json.read_text())) == 1  # the built case is kept
    assert run_main(_main("01_deform_mask.py"), args + ["--allow-failures"]) == 0
