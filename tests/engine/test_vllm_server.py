"""The ``openai`` provider against a real vLLM OpenAI-compatible server on 127.0.0.1.

One server (vLLM's CPU build, the tiny random Qwen2-VL, ``--max-model-len 4096``) serves the
whole module; the last test kills it and starts it again. ``00_eval.py`` runs as a subprocess,
as a user runs it. Run in the engine venv:
``.venv-engine/bin/python -m pytest -m engine --runengine tests/engine``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import engine_helpers as eh
import pytest

pytestmark = pytest.mark.engine

CONTEXT = 4096


def _planned(bench: Path) -> Counter:
    from chexpercept.evaluation import load_bundle, validate_bundle

    return Counter({c.key_id: len(c.turns) for c in validate_bundle(load_bundle(bench))})


def _run_dir(out: Path, setting: str) -> Path:
    return out / f"openai_{eh.SERVED_NAME}" / f"oracle_{setting}"


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise TimeoutError(what)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Start the server, start an evaluation before it is ready, build the sample bundle."""
    root = tmp_path_factory.mktemp("vllm_server")
    model_dir = eh.build_model(root / "tiny")
    quick = eh.write_bundle(root / "quick")
    server = eh.VllmServer(model_dir, root / "server.log", max_model_len=CONTEXT)
    server.start()
    early_log = root / "early_eval.log"
    early_cmd = eh.eval_command(quick, root / "early", "--oracle_setting", "none",
                                "--server-wait", "600", "--base-url", server.base_url)
    try:
        with eh.background(early_cmd, early_log) as early:
            # the sample bundle (Stages 00-02 on the fixtures) is built meanwhile
            sample = subprocess.run(["bash", str(eh.ROOT / "sample_test.sh"), "--work-dir",
                                     str(root / "sample")], capture_output=True, text=True,
                                    env={**os.environ, **eh.ENGINE_ENV,
                                         "CHEXPERCEPT_PYTHON": os.sys.executable},
                                    timeout=900, check=False)
            assert sample.returncode == 0, sample.stdout[-3000:] + sample.stderr[-3000:]
            early_rc = early.wait(timeout=600)
        server.wait_ready(timeout_s=60)
        yield {"root": root, "server": server, "quick": quick, "sample": root / "sample" /
               "chexpercept", "early_rc": early_rc, "early_log": early_log,
               "early_dir": _run_dir(root / "early", "none"), "refs": {}}
    finally:
        server.stop()


def _reference(served, setting: str) -> Path:
    """An uninterrupted run of the sample bundle under ``setting`` (made once)."""
    refs = served["refs"]
    if setting not in refs:
        out = served["root"] / f"ref_{setting}"
        done = eh.run_eval(served["sample"], out, "--oracle_setting", setting, "--base-url",
                           served["server"].base_url, "--concurrency", "4")
        assert done.returncode == 0, done.stderr[-3000:]
        refs[setting] = (_run_dir(out, setting), done)
    return refs[setting][0]


def test_a_run_started_before_the_server_is_ready_waits_for_it(served):
    log = served["early_log"].read_text(encoding="utf-8")
    assert served["early_rc"] == 0, log[-3000:]
    assert "waiting for the server at" in log and "is ready" in log
    recs = eh.records(served["early_dir"])
    assert Counter(r["key_id"] for r in recs) == _planned(served["quick"])
    assert "error" not in {r["completion_status"] for r in recs}


def test_the_default_concurrency_follows_the_servers_kv_cache(served):
    """The early run gave no --concurrency: it read vLLM's /metrics (docs/design.md,
    "Concurrency") and recorded the rule's inputs and value in provider_runtime."""
    import httpx2

    from utils.llm.openai_provider import parse_cache_config

    cache = parse_cache_config(httpx2.get(f"{served['server'].root_url}/metrics",
                                          timeout=30).text)
    assert cache is not None and cache["prefix_caching"]
    assert cache["tokens"] == cache["num_gpu_blocks"] * cache["block_size"] > CONTEXT
    manifest = json.loads((served["early_dir"] / "run_manifest.json").read_text("utf-8"))
    runtime = manifest["provider_runtime"]
    rule = runtime["concurrency_rule"]
    assert rule["applied"] and rule["kv_cache"] == cache
    footprint = rule["dialogue_tokens"]
    assert footprint % cache["block_size"] == 0 and footprint <= CONTEXT
    assert runtime["concurrency"] == rule["concurrency"] == \
        min(256, max(1, cache["tokens"] // footprint // 2))
    assert f"concurrency {runtime['concurrency']} from the server's KV cache" in \
        served["early_log"].read_text(encoding="utf-8")


@pytest.mark.parametrize("setting", ["none", "implicit"])
def test_full_run_of_the_sample_bundle(served, setting):
    run_dir = _reference(served, setting)
    planned = _planned(served["sample"])
    recs = eh.records(run_dir)
    assert Counter(r["key_id"] for r in recs) == planned
    assert len({(r["key_id"], r["turn"]) for r in recs}) == len(recs)
    assert {r["completion_status"] for r in recs} <= {"ok", "truncated"}
    assert set(eh.results(run_dir)) == set(planned)
    manifest = json.loads((run_dir / "run_manifest.json").read_text(encoding="utf-8"))
    params = manifest["provider_settings"]["params"]
    assert params["max_tokens"] == eh.MAX_NEW_TOKENS
    stderr = served["refs"][setting][1].stderr
    assert "token budget: heaviest dialogue" in stderr and "(counted by the server)" in stderr
    assert f"context {CONTEXT}" in stderr


def test_sigkill_halfway_then_resume_asks_no_turn_twice(served):
    reference = _reference(served, "implicit")
    server = served["server"]
    out = served["root"] / "killed"
    run_dir = _run_dir(out, "implicit")
    total = sum(_planned(served["sample"]).values())
    before = server.chat_requests()
    cmd = eh.eval_command(served["sample"], out, "--oracle_setting", "implicit",
                          "--base-url", server.base_url, "--concurrency", "2")
    with eh.background(cmd, served["root"] / "killed.log") as proc:
        _wait_for(lambda: len(eh.records(run_dir)) >= total // 2, 600, "half of the turns")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    kept = len(eh.records(run_dir))
    assert total // 2 <= kept < total
    done = eh.run_eval(served["sample"], out, "--oracle_setting", "implicit", "--base-url",
                       server.base_url, "--concurrency", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    recs = eh.records(run_dir)
    assert len(recs) == len({(r["key_id"], r["turn"]) for r in recs}) == total
    asked = server.chat_requests() - before
    assert total <= asked <= total + 2  # at most the 2 requests in flight at the kill
    assert eh.answers(eh.results(run_dir)) == eh.answers(eh.results(reference))


def test_a_server_serving_another_model_is_named(served, tmp_path):
    done = subprocess.run(
        [*eh.eval_command(served["quick"], tmp_path, "--base-url", served["server"].base_url),
         "--model", "gpt-5.4-nano"], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **eh.ENGINE_ENV})
    (line,) = _error_lines(done.stderr)
    assert done.returncode == 2
    assert f"serves '{eh.SERVED_NAME}'" in line and f"--model {eh.SERVED_NAME}" in line
    assert not list(tmp_path.rglob("records.jsonl"))


@pytest.mark.parametrize(("new_tokens", "words"), [
    ("8192", ("8192 new tokens", "4096 tokens", "--max-new-tokens")),
    ("4000", ("counted by the server", "context of 4096", "--max-new-tokens")),
])
def test_a_dialogue_over_the_servers_context_is_refused_before_any_request(
        served, tmp_path, new_tokens, words):
    server = served["server"]
    before = server.chat_requests()
    cmd = eh.eval_command(served["sample"], tmp_path, "--base-url", server.base_url)
    cmd[cmd.index("--max-new-tokens") + 1] = new_tokens
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, **eh.ENGINE_ENV})
    (line,) = _error_lines(done.stderr)
    assert done.returncode == 2
    for word in words:
        assert word in line
    assert server.chat_requests() == before
    assert not list(tmp_path.rglob("records.jsonl"))


def test_extra_body_is_sent_recorded_and_part_of_the_resume_identity(served, tmp_path):
    server = served["server"]
    base = ["--base-url", server.base_url, "--limit", "1", "--oracle_setting", "none"]
    done = eh.run_eval(served["quick"], tmp_path, *base, "--extra-body", '{"top_k": 1}')
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((_run_dir(tmp_path, "none") / "run_manifest.json")
                          .read_text(encoding="utf-8"))
    assert manifest["provider_settings"]["extra_body"] == {"top_k": 1}
    assert manifest["provider_settings"]["params"]["top_k"] == 1
    other = eh.run_eval(served["quick"], tmp_path, *base, "--extra-body", '{"top_k": 2}')
    assert other.returncode == 2 and "provider_settings" in "".join(_error_lines(other.stderr))
    bad = eh.run_eval(served["quick"], tmp_path, *base, "--extra-body", "{top_k: 1}")
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr
    reserved = eh.run_eval(served["quick"], tmp_path, *base, "--extra-body",
                           '{"messages": []}')
    assert reserved.returncode == 2 and "may not set messages" in reserved.stderr


def test_server_killed_mid_run_leaves_cases_unfinished_and_a_rerun_completes(served):
    """Last: kills the module's server and starts it again.

    The turns in flight get no answer: logged to faults.jsonl, never recorded; the run ends
    with exit 3 and one line naming the unfinished cases (docs/engines.md, "Faults").
    """
    reference = _reference(served, "none")
    server = served["server"]
    out = served["root"] / "outage"
    run_dir = _run_dir(out, "none")
    args = ("--oracle_setting", "none", "--base-url", server.base_url, "--concurrency", "2",
            "--max-retries", "1")
    log = served["root"] / "outage.log"
    with eh.background(eh.eval_command(served["sample"], out, *args), log) as proc:
        _wait_for(lambda: len(eh.records(run_dir)) >= 10, 600, "10 recorded turns")
        server.stop(signal.SIGKILL)
        rc = proc.wait(timeout=300)
    text = log.read_text(encoding="utf-8")
    (line,) = _error_lines(text)
    assert rc == 3
    assert "case(s) unfinished" in line and "no answer from the server" in line
    recs = eh.records(run_dir)
    assert recs and "error" not in {r["completion_status"] for r in recs}
    faults = (run_dir / "faults.jsonl").read_text(encoding="utf-8").splitlines()
    recorded = {(r["key_id"], r["turn"]) for r in recs}
    assert faults and all((f["key_id"], f["turn"]) not in recorded
                          for f in map(json.loads, faults))
    server.start()
    server.wait_ready(timeout_s=300)
    done = eh.run_eval(served["sample"], out, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert eh.answers(eh.results(run_dir)) == eh.answers(eh.results(reference))
