"""Stage 00.01 with a model segmenter: a fake registered as ``rosalia`` through the real script."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest
import yaml

from chexpercept.curation import segmenters
from chexpercept.curation.segmenters import Segmenter, SegmentResult
from chexpercept.files import read_csv_rows, read_json
from chexpercept.images import read_mask
from chexpercept.layouts import CurationLayout
from chexpercept.synth import make_fixtures
from utils.cli import run_main

S00 = Path(__file__).resolve().parents[2] / "src" / "00_source_data_curation"


def _script(name: str):
    return runpy.run_path(str(S00 / name), run_name="not_main")["main"]


class FakeRosalia(Segmenter):
    """Records every call; the mask is a square whose side depends on the pair."""

    name = "rosalia"
    calls: list[tuple[str, str, tuple[int, ...]]] = []
    created = 0

    def segment(self, image, instruction, *, item):
        FakeRosalia.calls.append((item["pair_id"], instruction, image.shape))
        mask = np.zeros((1024, 1024), bool)
        mask[100:300, 100:300] = True
        return SegmentResult(mask, f"Sure, [SEG] for {item['target']}.")


def _fake_factory(cfg):
    FakeRosalia.created += 1
    return FakeRosalia()


@pytest.fixture
def fake_rosalia(monkeypatch):
    monkeypatch.setitem(segmenters._REGISTRY, "rosalia", _fake_factory)
    FakeRosalia.calls = []
    FakeRosalia.created = 0
    return FakeRosalia


def _config(tmp: Path, fx, **curation) -> Path:
    cfg = {"seed": 0, "path": {
        "mimic_cxr_jpg_path": str(fx.jpg_root), "mimic_cxr_path": str(tmp / "mimic_cxr"),
        "mimic_meta_path": str(fx.metadata_csv), "mimic_report_path": str(fx.report_root),
        "mimic_ils_path": str(fx.mimic_ils_json), "work_dir": str(tmp / "work")},
        "source_data_curation": {"max_samples_per_lesion": 3, "samples_per_lesion_negative": 1,
                                 **curation}}
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def fixture_paths(tmp_path_factory):
    return make_fixtures(tmp_path_factory.getbasetemp() / "synth_fixture_seed0", 0).paths


def test_fake_rosalia_through_the_script_sharded_and_resumed(tmp_path, fixture_paths,
                                                            fake_rosalia):
    cfg = _config(tmp_path, fixture_paths, segmenter="rosalia")
    assert _script("00_sample_mimic_ils_case.py")(["--config", str(cfg), "--no-progress"]) == 0
    gen = _script("01_generate_rosalia_pred.py")
    for part in (0, 1):
        assert gen(["--config", str(cfg), "--part", str(part), "--total-parts", "2",
                    "--no-progress"]) == 0
    assert fake_rosalia.created == 2  # once per shard process, not per pair
    instructions = {pair: text for pair, text, _ in fake_rosalia.calls}
    assert {shape for _, _, shape in fake_rosalia.calls} == {(1024, 1024)}
    assert instructions["sSYN00001_positive_0"] == "Segment the cardiomegaly."
    assert instructions["sSYN00001_positive_1"] == \
        "Segment the effusion in the right lung base and left lung base."
    assert instructions["sSYN00002_positive_1"] == \
        "Segment the edema in the right lung, left upper zone lung, and left mid zone lung."
    assert instructions["sSYN00006_positive_0"] == "Segment the effusion in the left lung base."
    layout = CurationLayout(tmp_path / "work" / "00_source_data_curation")
    n_items = 0
    for part in (0, 1):
        results = read_json(layout.candidate_results(part))
        for pair_id, entries in results.items():
            for e in entries:
                n_items += 1
                assert e["instruction"] == instructions[pair_id]
                assert e["output_text"] == f"Sure, [SEG] for {e['target']}."
                mask = read_mask(e["pred_mask_path"])
                assert mask.sum() == 200 * 200 and mask[150, 150]
                text = read_json(layout.candidate_text(e["target"], pair_id))
                assert text == {"segmenter": "rosalia", "instruction": instructions[pair_id],
                                "output_text": e["output_text"]}
        assert read_json(layout.candidate_summary(part))["segmenter"] == "rosalia"
    assert n_items == len(fake_rosalia.calls)
    # Re-running a finished shard loads no model and calls nothing; results are rebuilt.
    fake_rosalia.calls.clear()
    before = read_json(layout.candidate_results(0))
    assert gen(["--config", str(cfg), "--part", "0", "--total-parts", "2", "--no-progress"]) == 0
    assert fake_rosalia.calls == [] and fake_rosalia.created == 2
    assert read_json(layout.candidate_results(0)) == before
    # A pair whose mask was deleted is redone alone (resume per pair).
    row = read_csv_rows(layout.positive_sheet(0))[0]
    Path(layout.candidate_mask(row["target"], row["pair_id"])).unlink()
    assert gen(["--config", str(cfg), "--part", "0", "--total-parts", "2", "--no-progress"]) == 0
    assert [c[0] for c in fake_rosalia.calls] == [row["pair_id"]]


def test_rosalia_without_weights_names_the_config_key(tmp_path, fixture_paths, capsys):
    cfg = _config(tmp_path, fixture_paths, segmenter="rosalia")
    assert _script("00_sample_mimic_ils_case.py")(["--config", str(cfg), "--no-progress"]) == 0
    capsys.readouterr()
    assert run_main(_script("01_generate_rosalia_pred.py"), ["--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "source_data_curation.rosalia_weights is not set" in err
    assert "source_data_curation.rosalia_vision_tower is not set" in err
