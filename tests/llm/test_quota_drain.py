"""An exhausted quota mid-run: the answers in flight are recorded, a re-run asks nothing twice.

Issue 20, item 2 (docs/engines.md, "Faults"). The loopback server (tests/llm/loopback.py)
answers N requests and then replies 429 ``insufficient_quota`` to every later one, with some
latency so that several requests are in flight when the quota runs out; Stage 03 runs through
``00_eval.py`` in-process with the real openai SDK, then the server answers again and the same
command is re-run. The server's own request log must show no (key_id, turn) answered (200)
twice across the stop and the re-run. Both runners: the async per-case pipelines (what the CLI
uses for API providers) and the stage-synchronous runner, whose ``generate`` spreads a batch
over a thread pool (the CLI is routed to it by ``supports_async = False``).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from local_provider_helpers import (
    EVAL_SCRIPT,
    read_records,
    turns_per_case,
    write_marked_bundle,
)
from loopback import QUOTA_EXHAUSTED, LoopbackServer

from chexpercept.errors import ProviderError
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.layouts import all_results_path
from utils.cli import run_main
from utils.llm import _images
from utils.llm.openai_provider import OpenAIChatModel
from utils.llm.retry import (
    CURRENT_STOP,
    Failure,
    Retrier,
    RetryPolicy,
    RunStopped,
    StopSignal,
)

COUNTS = re.compile(r"(\d+) answer\(s\) were recorded and (\d+) abandoned")
#: Requests answered before the quota runs out.
QUOTA = 10
CONCURRENCY = 8


def _main():
    import runpy

    return runpy.run_path(str(EVAL_SCRIPT), run_name="eval_under_test")["main"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bench")
    write_marked_bundle(root)
    return root


def _argv(bench: Path, out: Path, base_url: str) -> list[str]:
    return ["--benchmark-dir", str(bench), "--output-path", str(out), "--provider", "openai",
            "--model", "srv", "--base-url", base_url, "--no-progress", "--max-retries", "1",
            "--concurrency", str(CONCURRENCY), "--server-wait", "5"]


def _run_dir(out: Path) -> Path:
    dirs = [p.parent for p in out.rglob("run_manifest.json")]
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.fixture(scope="module")
def reference(bench, tmp_path_factory) -> bytes:
    """``all_results.json`` of a run without faults."""
    out = tmp_path_factory.mktemp("reference")
    with LoopbackServer(models=["srv"]) as server:
        assert run_main(_main(), _argv(bench, out, server.base_url)) == 0
    return all_results_path(_run_dir(out)).read_bytes()


def _turn_keys(bench: Path):
    """A request body -> (key_id, turn index) function (each case's images have their own
    grey level; a case's turn t has t + 1 user messages)."""
    by_url = {_images.image_data_url(bench / "chexpercept" / key_id / "detection_qa" /
                                     "xray.png"): key_id for key_id in turns_per_case(bench)}

    def key(body: dict[str, Any]) -> tuple[str, int]:
        messages = body["messages"]
        user = [m for m in messages if m["role"] == "user"]
        first = next(p for p in user[0]["content"] if p.get("type") == "image_url")
        return by_url[first["image_url"]["url"]], len(user)
    return key


@pytest.mark.parametrize("runner", ["async", "sync"])
def test_quota_runs_out_mid_run_then_a_rerun_asks_nothing_twice(
        bench, reference, tmp_path, capsys, monkeypatch, runner):
    if runner == "sync":  # the stage-synchronous runner: generate() over a thread pool
        monkeypatch.setattr(OpenAIChatModel, "supports_async", False)
    out = tmp_path / "out"
    turn_key = _turn_keys(bench)
    with LoopbackServer(models=["srv"], latency_s=0.2, jitter_s=0.1,
                        quota_after=QUOTA) as server:
        code = run_main(_main(), _argv(bench, out, server.base_url))
        err = capsys.readouterr().err
        first = server.chat_requests()
        assert code == 2 and err.count("error:") == 1
        assert "quota or billing is exhausted" in err
        match = COUNTS.search(err)
        assert match, err
        drained, abandoned = int(match[1]), int(match[2])
        assert drained >= 1  # answers that arrived after the stop are recorded too
        records = read_records(_run_dir(out))
        answered = [s for s in first if s.status == 200]
        # every answer the server gave is recorded; nothing else is
        assert len(answered) == QUOTA == len(records)
        assert sorted(turn_key(s.body) for s in answered) == \
            sorted((r["key_id"], r["turn_index"] + 1) for r in records)
        # only the requests in flight at the stop were sent after the quota ran out
        # the 429s: the cause, and the requests in flight at the stop (each abandoned)
        refused = [s for s in first if s.status == 429]
        assert len(refused) == abandoned + 1 <= CONCURRENCY

        server.quota_after = None  # the cause fixed: the same command resumes
        assert run_main(_main(), _argv(bench, out, server.base_url)) == 0
        every = server.chat_requests()
    assert "(already done: 10)" in capsys.readouterr().err
    twice = Counter(turn_key(s.body) for s in every if s.status == 200)
    assert max(twice.values()) == 1, [k for k, n in twice.items() if n > 1]
    assert sum(twice.values()) == sum(turns_per_case(bench).values())
    assert all_results_path(_run_dir(out)).read_bytes() == reference


def test_sync_batch_answers_after_the_drain_bound_are_not_recorded(bench, tmp_path):
    """One case's request exhausts the quota while four answer in 0.1 s and two in 3 s; the
    drain waits 0.8 s: four are recorded, two abandoned (the server did answer them)."""
    bundle = load_bundle(bench)
    cases = validate_bundle(bundle)
    turn_key = _turn_keys(bench)
    fatal, slow = cases[0].key_id, {cases[1].key_id, cases[2].key_id}

    def respond(body):
        key_id, _ = turn_key(body)
        if key_id == fatal:
            return {**QUOTA_EXHAUSTED, "delay_s": 0.05}
        return {"delay_s": 3.0 if key_id in slow else 0.1}

    with LoopbackServer(models=["srv"], respond=respond) as server:
        model = OpenAIChatModel("srv", base_url=server.base_url, concurrency=CONCURRENCY,
                                max_retries=0)
        model.drain_s = 0.8
        run_dir = tmp_path / "run"
        try:
            with pytest.raises(ProviderError, match="quota or billing") as info:
                run_evaluation(bundle, cases, model, EvalSettings("openai", "srv"), run_dir)
        finally:
            model.close()
        records = read_records(run_dir)
        assert {r["key_id"] for r in records} == {c.key_id for c in cases} - slow - {fatal}
        assert COUNTS.search(str(info.value)).groups() == ("4", "2")
        for _ in range(200):  # the server answers the slow ones too (hang guard: 10 s)
            if server.stats.in_flight == 0:
                break
            threading.Event().wait(0.05)
        answered = [turn_key(s.body)[0] for s in server.chat_requests() if s.status == 200]
    assert set(answered) >= slow and len(answered) == 6
    assert len(read_records(run_dir)) == 4  # an answer past the bound is never recorded


def _retryable(exc: BaseException) -> Failure:
    return Failure("retryable", str(exc), 429, retry_after_s=30.0)


def test_a_retry_in_backoff_gives_up_when_the_batch_stops():
    retrier = Retrier(RetryPolicy(max_retries=3), _retryable, "test")
    stop, calls, outcome = StopSignal(), [], {}

    def fn():
        calls.append(1)
        raise RuntimeError("429 rate limited")

    def worker():
        try:
            retrier.call(fn, request_id="case/turn", stop=stop)
        except RunStopped as exc:
            outcome["exc"] = exc

    thread = threading.Thread(target=worker)
    thread.start()
    while not calls:  # the first attempt failed; now it sleeps ~30 s
        threading.Event().wait(0.01)
    stop.set()
    thread.join(10)
    assert not thread.is_alive() and outcome["exc"].attempts == 1 and len(calls) == 1
    with pytest.raises(RunStopped) as info:  # a request not sent yet is never sent
        retrier.call(fn, request_id="case/other", stop=stop)
    assert info.value.attempts == 0 and len(calls) == 1


def test_an_async_retry_in_backoff_gives_up_when_the_run_stops():
    retrier = Retrier(RetryPolicy(max_retries=3), _retryable, "test")
    calls = []

    async def fn():
        calls.append(1)
        raise RuntimeError("429 rate limited")

    async def main():
        stop = StopSignal()
        CURRENT_STOP.set(stop)
        task = asyncio.create_task(retrier.acall(fn, request_id="case/turn"))
        while not calls:
            await asyncio.sleep(0.01)
        stop.set()
        with pytest.raises(RunStopped) as info:
            await asyncio.wait_for(task, 10)
        return info.value

    exc = asyncio.run(main())
    assert exc.attempts == 1 and len(calls) == 1
