"""A run with unfinished cases, end to end through ``eval_chexpercept.sh`` (issue 23, item 6).

The real Stage 03 (openai provider, real SDK) asks the loopback server (tests/llm/loopback.py),
which answers one case's second turn with HTTP 500 every time: Stage 03 exits 3 with that case
unfinished. The driver must still run Stage 04, whose report.md opens with the incomplete run
and the number of cases missing, and then exit 3 (docs/engines.md, "Faults").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from local_provider_helpers import write_marked_bundle
from loopback import LoopbackServer
from test_fault_taxonomy import TARGET, _turn_of

from chexpercept.layouts import all_results_path

ROOT = Path(__file__).resolve().parents[2]


def test_driver_analyses_an_incomplete_run_and_exits_3(tmp_path):
    bench = tmp_path / "bench"
    write_marked_bundle(bench)
    out = tmp_path / "out"
    is_target = _turn_of(bench, TARGET, 1)  # its contour-evaluation turn
    env = {**os.environ, "CHEXPERCEPT_PYTHON": sys.executable, "OPENAI_API_KEY": "sk-loopback",
           "MPLBACKEND": "Agg"}
    env.pop("ENV", None)
    with LoopbackServer(models=["srv"],
                        respond=lambda b: {"status": 500} if is_target(b) else None) as server:
        res = subprocess.run(
            ["bash", str(ROOT / "eval_chexpercept.sh"), "--benchmark-dir", str(bench),
             "--output-path", str(out), "--oracle_setting", "none", "--provider", "openai",
             "--model", "srv", "--base-url", server.base_url, "--no-progress",
             "--max-retries", "0", "--concurrency", "2", "--server-wait", "5"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
            stdin=subprocess.DEVNULL)
    assert res.returncode == 3, res.stderr[-3000:]
    assert "running Stage 04 anyway" in res.stderr
    (run_dir,) = [p.parent for p in out.rglob("run_manifest.json")]
    results = json.loads(all_results_path(run_dir).read_text(encoding="utf-8"))
    assert list(k for k, r in results.items() if "unfinished" in r) == [TARGET]
    report = (out / "all_models_oracle_none" / "report.md").read_text(encoding="utf-8")
    head = report.split("## ", 1)[0]  # before the first section: the top of the report
    assert "incomplete run(s), 1 case(s) missing" in head
    assert f"1 of {len(results)} case(s) missing" in head and TARGET in head
    assert (out / "all_models_oracle_none" / "viewer" / "index.html").exists()
