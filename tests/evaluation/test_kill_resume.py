"""SIGKILL a Stage 03 run halfway, re-run the same command: nothing served twice, same results.

``00_eval.py`` runs in a subprocess with the plugin provider ``stage03_plugin:SlowEchoModel``
(per-request sleep, answers that depend only on the request). The test kills it with SIGKILL
while a turn batch is in flight after about half the turns are recorded, re-runs the same
command, and checks that (1) no request id is served twice over both runs, (2) the only requests
asked twice are those of the batch that was in flight when the process died, (3) every turn has
exactly one record, and (4) ``all_results.json`` is byte-identical to an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from stage03_bundle import write_bundle
from stage03_plugin import REQUEST_LOG_ENV, SLEEP_ENV

from chexpercept.files import read_jsonl
from chexpercept.layouts import all_results_path, records_path
from utils.cli import run_main

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parents[1] / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"
PLUGIN = "stage03_plugin:SlowEchoModel"
TOTAL_TURNS = 33  # 7 cases of stage03_bundle: 9 + 6 + 1 + 5 + 2 + 1 + 9
SLEEP_S = 0.1
TIMEOUT_S = 30.0

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")


def _argv(bench: Path, out: Path) -> list[str]:
    return ["--benchmark-dir", str(bench), "--output-path", str(out), "--provider", PLUGIN,
            "--model", "echo", "--oracle_setting", "implicit", "--save-every", "1",
            "--no-progress"]


def _events(log: Path) -> list[dict]:
    if not log.is_file():
        return []
    lines = log.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def _count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def _kill_when_half_done(proc: subprocess.Popen, records: Path, log: Path) -> int:
    """SIGKILL ``proc`` once >= half the turns are recorded and the next batch is in flight.

    Returns the number of records at the kill.
    """
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (rc {proc.returncode}) before it was killed")
        events = _events(log)
        served = sum(len(e["ids"]) for e in events if e["event"] == "served")
        n_records = _count_lines(records)
        in_flight = bool(events) and events[-1]["event"] == "start"
        if n_records >= TOTAL_TURNS // 2 and in_flight and n_records == served:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=TIMEOUT_S)
            return n_records
        time.sleep(0.01)
    proc.kill()
    raise AssertionError("the run did not reach half its turns in time")


def test_sigkill_halfway_then_resume_requests_nothing_twice(tmp_path, monkeypatch):
    bench = write_bundle(tmp_path / "bench")
    log = tmp_path / "served.jsonl"
    out = tmp_path / "killed"
    env = {**os.environ, SLEEP_ENV: str(SLEEP_S), REQUEST_LOG_ENV: str(log),
           "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH"))
                                         if p)}
    cmd = [sys.executable, str(SCRIPT), *_argv(bench, out)]
    run_dir = out / "slowecho_echo" / "oracle_implicit"
    records = records_path(run_dir)

    with open(tmp_path / "first.log", "wb") as err:
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        n_at_kill = _kill_when_half_done(first, records, log)
    assert first.returncode == -signal.SIGKILL
    assert TOTAL_TURNS // 2 <= n_at_kill < TOTAL_TURNS
    first_events = _events(log)
    in_flight = first_events[-1]["ids"]
    assert first_events[-1]["event"] == "start" and in_flight

    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert second.returncode == 0, second.stderr
    assert f"(already done: {n_at_kill})" in second.stderr

    events = _events(log)
    served = Counter(i for e in events if e["event"] == "served" for i in e["ids"])
    started = Counter(i for e in events if e["event"] == "start" for i in e["ids"])
    assert max(served.values()) == 1, [i for i, n in served.items() if n > 1]
    assert len(served) == TOTAL_TURNS
    # asked twice: only the batch that was in flight at the kill (the sync runner's bound)
    assert sorted(i for i, n in started.items() if n > 1) == sorted(in_flight)

    recs = read_jsonl(records)
    assert len(recs) == TOTAL_TURNS
    assert len({(r["key_id"], r["turn"]) for r in recs}) == TOTAL_TURNS
    assert {r["request_id"] for r in recs} == set(served)

    # uninterrupted reference run, in-process, no sleep
    monkeypatch.setenv(SLEEP_ENV, "0")
    monkeypatch.delenv(REQUEST_LOG_ENV, raising=False)
    main = runpy.run_path(str(SCRIPT), run_name="stage03_eval")["main"]
    assert run_main(main, _argv(bench, tmp_path / "clean")) == 0
    clean = all_results_path(tmp_path / "clean" / "slowecho_echo" / "oracle_implicit")
    assert all_results_path(run_dir).read_bytes() == clean.read_bytes()
