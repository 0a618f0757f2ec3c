"""``eval_chexpercept.sh --config`` runs Stage 04 on the folder Stage 03 wrote (issue 29, D2).

The driver read ``--output-path`` from its own argv only, so a config's
``eval_vlm_on_chexpercept.output_path`` sent Stage 03's run there while Stage 04 read the
default folder (and found nothing, or an older run). Stage 03 now writes its effective output
path into the file ``CHEXPERCEPT_OUTPUT_PATH_FILE`` names, and the driver reads it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from chexpercept_cli.eval import OUTPUT_PATH_FILE_ENV, record_output_path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "stage03_bundle_driver_config", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
stage03_bundle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage03_bundle)


def test_the_driver_analyses_the_output_path_of_the_config(tmp_path):
    bench = stage03_bundle.write_bundle(tmp_path / "bench")
    out = tmp_path / "from_config"
    config = tmp_path / "config.yaml"
    config.write_text(f"path:\n  mimic_cxr_path: {tmp_path / 'cxr'}\n"
                      f"  mimic_ils_path: {tmp_path / 'ils'}\n"
                      f"eval_vlm_on_chexpercept:\n  output_path: {out}\n", encoding="utf-8")
    env = {**os.environ, "CHEXPERCEPT_PYTHON": sys.executable, "MPLBACKEND": "Agg"}
    env.pop("ENV", None)
    res = subprocess.run(
        ["bash", str(ROOT / "eval_chexpercept.sh"), "--config", str(config), "--benchmark-dir",
         str(bench), "--provider", "oracle", "--oracle_setting", "none", "--no-progress",
         "--limit", "2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-3000:]
    assert list(out.rglob("run_manifest.json"))  # Stage 03 wrote where the config says ...
    report = out / "all_models_oracle_none" / "report.md"
    assert report.is_file(), res.stderr[-3000:]  # ... and Stage 04 analysed that folder
    assert "oracle" in report.read_text(encoding="utf-8")


def test_stage03_records_its_output_path_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(OUTPUT_PATH_FILE_ENV, raising=False)
    record_output_path(tmp_path / "x")  # no variable: nothing written anywhere
    target = tmp_path / "effective.txt"
    monkeypatch.setenv(OUTPUT_PATH_FILE_ENV, str(target))
    monkeypatch.chdir(tmp_path)
    record_output_path("relative/out")
    assert target.read_text(encoding="utf-8") == f"{tmp_path / 'relative' / 'out'}\n"
