"""Stage 01.00 CLI with model backends: a fake ``cxas`` + provided CheXmask-U, then 01.01."""

from __future__ import annotations

import importlib.util
import json
import runpy

import numpy as np
import pytest

from chexpercept.anatomy import backends
from chexpercept.anatomy.backends import AnatomySegmenter
from chexpercept.anatomy.names import LUNG_NAMES
from chexpercept.layouts import DeformationLayout, repo_root
from utils.cli import run_main

STAGE = repo_root() / "src" / "01_mask_deformation"
_spec = importlib.util.spec_from_file_location(
    "stage01_inputs", repo_root() / "tests" / "deformation" / "stage01_inputs.py")
stage01_inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage01_inputs)


def _main(name):
    return runpy.run_path(str(STAGE / name))["main"]


class FakeCXAS(AnatomySegmenter):
    """Lungs from the provided fixture's CheXmask-style halves; counts images seen."""

    name = "cxas"
    layout = "cxas"
    output_names = (LUNG_NAMES["right"], LUNG_NAMES["left"], "heart")
    seen = 0

    def segment_batch(self, images):
        FakeCXAS.seen += len(images)
        out = []
        for _ in images:
            right = stage01_inputs.ellipse(330, 500, 150, 320)
            left = stage01_inputs.ellipse(700, 500, 150, 320)
            out.append({"right lung": right, "left lung": left,
                        "heart": np.zeros_like(right)})
        return out


@pytest.fixture
def fake_cxas(monkeypatch):
    monkeypatch.setitem(backends._REGISTRY, "cxas", (lambda cfg: FakeCXAS(), "cxas"))
    FakeCXAS.seen = 0
    return FakeCXAS


def test_model_backend_writes_its_layout_and_provided_fills_the_other(tmp_path, fake_cxas,
                                                                      capsys):
    paths = stage01_inputs.write_inputs(tmp_path, stage01_anatomy=False)
    cfg = paths["config"]
    cfg.write_text(cfg.read_text() + "anatomy:\n  backend: cxas\n  batch_size: 2\n")
    gen = _main("00_generate_anatomy_mask.py")
    assert gen(["--config", str(cfg), "--no-progress"]) == 0
    layout = DeformationLayout(paths["out01"])
    assert fake_cxas.seen == 2
    for dicom in ("dicom0000", "dicom0001"):
        assert sorted(p.name for p in (layout.cxas_dir / dicom).iterdir()) == \
            ["heart.png", "left lung.png", "right lung.png"]
        assert (layout.chexmask_dir / dicom / "right_lung.png").is_file()  # provided copy
    summary = json.loads(layout.anatomy_summary_json.read_text())
    assert summary["backends"] == ["cxas"] and summary["provided_layouts"] == ["chexmask"]
    assert summary["models"][0]["processed"] == 2 and summary["failed"] == []
    assert gen(["--config", str(cfg), "--no-progress"]) == 0  # resume: nothing redone
    assert fake_cxas.seen == 2
    assert json.loads(layout.anatomy_summary_json.read_text())["models"][0]["skipped_done"] == 2
    capsys.readouterr()
    assert _main("01_deform_mask.py")(["--config", str(cfg), "--num-workers", "1",
                                       "--no-progress"]) == 0
    data = json.loads(layout.results_json.read_text())
    assert len(data) == 2


def test_models_alias_without_weights_is_one_clear_error(tmp_path, capsys):
    paths = stage01_inputs.write_inputs(tmp_path, stage01_anatomy=False)
    cfg = paths["config"]
    cfg.write_text(cfg.read_text() + "anatomy:\n  backend: [models]\n  device: cpu\n")
    assert run_main(_main("00_generate_anatomy_mask.py"), ["--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "anatomy.backend 'models' (deprecated" in err and "anatomy.cxas_weights" in err
    assert not (paths["out01"] / "cxas_pred").exists()  # failed before any work


class _WritesAFile:
    """Unpickling this writes ``marker``: the payload of a hostile checkpoint (issue 29)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"import pathlib; pathlib.Path({str(self.marker)!r}).write_text('ran')",))


def test_a_hostile_cxas_checkpoint_is_refused_and_its_code_never_runs(tmp_path, capsys):
    """Was: the weights-only load failed, the loader retried with pickle and the payload ran."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchxrayvision")
    marker = tmp_path / "pwned"
    weights = tmp_path / "cxas.pth"
    torch.save({"model": {"conv.weight": torch.zeros(1)}, "x": _WritesAFile(marker)}, weights)
    paths = stage01_inputs.write_inputs(tmp_path, stage01_anatomy=False)
    cfg = paths["config"]
    cfg.write_text(cfg.read_text() + f"anatomy:\n  backend: cxas\n  device: cpu\n"
                                      f"  cxas_weights: {weights}\n")
    assert run_main(_main("00_generate_anatomy_mask.py"), ["--config", str(cfg),
                                                           "--no-progress"]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert f"anatomy.cxas_weights {weights}:" in line
    assert "docs/building.md, 'Model weights'" in line
    assert "Traceback" not in err
