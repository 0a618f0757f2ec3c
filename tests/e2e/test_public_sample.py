"""End to end on a public source: the NIH path of scripts/public_sample_test.sh, in-process.

Real NIH annotation rows (torchxrayvision's tables), SYNTHETIC stand-in images; Stages 00 to 04
with box-anatomy candidates, the oracle and dummy providers; the oracle must score 100 % and the
exported bundle must carry the NIH licence. The whole shell script (same steps, one process per
step, about 75 s on 2 cores) runs with --runslow.
"""

from __future__ import annotations

import os
import runpy
import subprocess
from pathlib import Path

import pytest

from chexpercept.curation.sources import installed_tables_dir
from chexpercept.errors import InputError
from chexpercept.files import read_json, write_json_atomic

ROOT = Path(__file__).resolve().parents[2]
CFG = str(ROOT / "cfg" / "config_public_sample.yaml")
pytestmark = pytest.mark.skipif(installed_tables_dir() is None,
                                reason="torchxrayvision (with its data tables) not installed")


def _main(script: str, *args: str) -> int:
    ns = runpy.run_path(str(ROOT / script))
    return ns["main"](list(args))


def test_public_nih_path_in_process(tmp_path, monkeypatch):
    # The smoke config with one positive and one negative per lesion (about half the time).
    text = Path(CFG).read_text(encoding="utf-8")
    small = tmp_path / "config_public_small.yaml"
    small.write_text(text.replace("max_samples_per_lesion: 3", "max_samples_per_lesion: 1")
                     .replace("samples_per_lesion_negative: 2", "samples_per_lesion_negative: 1"),
                     encoding="utf-8")
    cfg = str(small)
    work = tmp_path / "work"
    monkeypatch.setenv("CHEXPERCEPT_WORK_DIR", str(work))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    s00, bench, s03 = work / "00_source_data_curation", work / "chexpercept", work / "03"
    steps = [
        ("scripts/public_sample/make_stand_ins.py", "--config", cfg, "--no-progress"),
        ("src/00_source_data_curation/00_sample_mimic_ils_case.py", "--config", cfg,
         "--no-progress"),
        ("src/00_source_data_curation/01_generate_rosalia_pred.py", "--config", cfg,
         "--no-progress"),
        ("scripts/sample_test/autofill_optimal.py", str(s00 / "rosalia_pred" /
                                                        "labeling_sheet.csv")),
        ("src/00_source_data_curation/03_prepare_negative_annotation.py", "--config", cfg),
        ("scripts/sample_test/autofill_optimal.py", str(s00 / "negative" / "labeling_sheet.csv")),
        ("src/01_mask_deformation/00_generate_anatomy_mask.py", "--config", cfg, "--meta-csv",
         str(s00 / "rosalia_pred" / "labeling_sheet.csv"), "--no-progress"),
        ("src/01_mask_deformation/01_deform_mask.py", "--config", cfg, "--num-workers", "1",
         "--no-progress"),
        ("src/02_qa_generation/00_generate_qa.py", "--config", cfg, "--num-workers", "1",
         "--no-progress", "--no-review-figures"),
        ("src/02_qa_generation/01_export_benchmark.py", "--config", cfg, "--benchmark-dir",
         str(bench)),
    ]
    for script, *args in steps:
        assert _main(script, *args) == 0, script
    manifest = read_json(work / "stand_ins" / "SYNTHETIC_STAND_INS.json")
    assert manifest["synthetic"] is True and manifest["source"] == "nih-cxr14"
    items = read_json(bench / "chexpercept.json")
    assert {i["data_source"] for i in items.values()} == {"nih-cxr14"}
    lesions = {k.split("_", 1)[0] for k in items}
    assert lesions == {"atelectasis", "cardiomegaly", "effusion", "opacity", "pneumonia"}
    assert read_json(bench / "data_sources.json")["category"] == "redistributable"
    for setting in ("implicit", "none"):
        assert _main("src/03_eval_vlm_on_chexpercept/00_eval.py", "--benchmark-dir", str(bench),
                     "--output-path", str(s03), "--provider", "oracle", "--oracle_setting",
                     setting, "--no-progress") == 0
        results = read_json(s03 / "oracle_baseline" / f"oracle_{setting}" / "all_results.json")
        assert set(results) == set(items)
    assert _main("src/04_analyze_eval_result/01_analyze_model_performance.py", "--results-dir",
                 str(s03), "--oracle_setting", "none", "--output-dir", str(work / "04"),
                 "--benchmark-dir", str(bench)) == 0
    # A restricted source in the same Stage 00 record: the export refuses, naming both.
    sources = read_json(s00 / "data_sources.json")
    some = items[sorted(items)[0]]["dicom_id"]
    sources["sources"]["vindr-cxr"] = {**sources["sources"]["nih-cxr14"], "source": "vindr-cxr",
                                       "category": "restricted"}
    sources["dicom_sources"][some] = "vindr-cxr"
    write_json_atomic(s00 / "data_sources.json", sources)
    export = ("src/02_qa_generation/01_export_benchmark.py", "--config", cfg, "--benchmark-dir",
              str(tmp_path / "mixed"))
    with pytest.raises(InputError, match="nih-cxr14: redistributable; vindr-cxr: restricted"):
        _main(*export)
    assert _main(*export, "--allow-mixed-licences") == 0


@pytest.mark.slow
def test_public_sample_test_script(tmp_path):
    env = {**os.environ, "CHEXPERCEPT_LOG_LEVEL": "WARNING"}
    env.pop("CHEXPERCEPT_WORK_DIR", None)
    res = subprocess.run(["bash", "scripts/public_sample_test.sh", "--work-dir", str(tmp_path)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert "check: ok" in res.stdout and "AUTO-APPROVING" in res.stdout
    assert "SYNTHETIC" in res.stdout
