"""A fatal stop drains the requests in flight: what arrived is recorded, nothing new is sent.

Issue 20, item 2 (docs/engines.md, "Faults"): when a fatal error (or the fault breaker) stops a
run, no request is sent after it, the requests in flight are awaited for at most ``drain_s``
seconds, every completion that arrives is recorded as in a run that goes on, and the error says
how many answers were recorded and abandoned. The same rules through the real openai SDK and
a loopback server: tests/llm/test_quota_drain.py.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from stage03_bundle import write_bundle
from stage03_fakes import KnowsAnswers, ScriptedModel, right

from chexpercept.errors import ProviderError
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.layouts import all_results_path, faults_path, records_path
from utils.llm.base import FAULT, ChatModel, Completion, Usage

COUNTS = re.compile(r"(\d+) answer\(s\) were recorded and (\d+) abandoned")


@pytest.fixture()
def bundle(tmp_path):
    return load_bundle(write_bundle(tmp_path / "bench"))


def _records(run_dir):
    path = records_path(run_dir)
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _counts(error: BaseException) -> tuple[int, int]:
    match = COUNTS.search(str(error))
    assert match, str(error)
    return int(match[1]), int(match[2])


class TimedFake(KnowsAnswers, ChatModel):
    """Native-async fake: call ``n`` sleeps ``delays[n]`` s (default ``delay_s``) and answers
    right; the call numbered ``fail_on`` sleeps its delay, then raises ProviderError.

    Attributes:
        started: Request ids in call order.
        answered: Request ids whose answer was returned.
        cancelled: Request ids cancelled while in flight.
        in_flight_at_fail: Other requests in flight when the fatal error was raised.
        started_at_fail: Requests started when the fatal error was raised.
    """

    provider = "scripted"
    supports_async = True

    def __init__(self, *, fail_on, delays=None, delay_s=0.02):
        super().__init__("scripted-model")
        self.fail_on, self.delays, self.delay_s = fail_on, delays or {}, delay_s
        self.started, self.answered, self.cancelled = [], [], []
        self.in_flight = 0
        self.in_flight_at_fail = self.started_at_fail = None

    def generate(self, requests):
        raise AssertionError("the async runner must not call generate")

    async def agenerate(self, request):
        n = len(self.started)
        self.started.append(request.request_id)
        if n == self.fail_on:
            await asyncio.sleep(self.delays.get(n, 0.0))
            self.in_flight_at_fail, self.started_at_fail = self.in_flight, len(self.started)
            raise ProviderError("simulated: the API key's quota is exhausted")
        self.in_flight += 1
        try:
            await asyncio.sleep(self.delays.get(n, self.delay_s))
        except asyncio.CancelledError:
            self.cancelled.append(request.request_id)
            raise
        finally:
            self.in_flight -= 1
        self.answered.append(request.request_id)
        return Completion(text=right(self.with_truth(request)), finish_reason="stop",
                          usage=Usage(input_tokens=10, output_tokens=3))


def _settings(**kw):
    return EvalSettings("scripted", "m", **kw)


def test_async_fatal_stop_records_every_answer_in_flight_and_sends_nothing_after(
        bundle, tmp_path):
    # call 6 fails after the others (concurrency 4) are in flight
    fake = TimedFake(fail_on=6, delays={6: 0.01}, delay_s=0.05)
    with pytest.raises(ProviderError, match="quota is exhausted") as info:
        run_evaluation_async(bundle, validate_bundle(bundle), fake, _settings(),
                             tmp_path / "run", concurrency=4)
    assert len(fake.started) == fake.started_at_fail  # nothing was sent after the error
    records = _records(tmp_path / "run")
    # every answer that came back is recorded, those that came back while stopping included
    assert sorted(r["request_id"] for r in records) == sorted(fake.answered)
    assert len(records) == len(fake.started) - 1 and fake.cancelled == []
    assert fake.in_flight_at_fail >= 1
    assert _counts(info.value) == (fake.in_flight_at_fail, 0)
    assert isinstance(info.value.__cause__, ProviderError)


def test_async_answers_arriving_after_the_drain_bound_are_not_recorded(bundle, tmp_path):
    # concurrency 4: calls 0-3 start together; call 3 fails at 0.1 s while 0 and 1 (0.3 s)
    # and 2 (30 s) are in flight; the drain waits 1 s, so 2 is abandoned
    fake = TimedFake(fail_on=3, delays={0: 0.3, 1: 0.3, 2: 30.0, 3: 0.1})
    with pytest.raises(ProviderError) as info:
        run_evaluation_async(bundle, validate_bundle(bundle), fake, _settings(),
                             tmp_path / "run", concurrency=4, drain_s=1.0)
    assert len(fake.started) == 4
    slow = fake.started[2]
    assert fake.cancelled == [slow] and slow not in fake.answered
    records = _records(tmp_path / "run")
    assert sorted(r["request_id"] for r in records) == sorted(fake.started[:2])
    assert _counts(info.value) == (2, 1)
    # the abandoned turn's case stays unfinished for a re-run
    results = json.loads(all_results_path(tmp_path / "run").read_text())
    assert results[slow.split("/")[0]]["unfinished"]["turns_answered"] == 0


def test_async_nothing_in_flight_keeps_the_error_as_it_is(bundle, tmp_path):
    fake = TimedFake(fail_on=2)
    with pytest.raises(ProviderError) as info:
        run_evaluation_async(bundle, validate_bundle(bundle), fake, _settings(),
                             tmp_path / "run", concurrency=1)
    assert str(info.value) == "simulated: the API key's quota is exhausted"
    assert len(_records(tmp_path / "run")) == 2


def _faulting(keys):
    def answer(request):
        if request.request_id.split("/")[0] in keys:
            return Completion(text="", status=FAULT, error="no answer after 1 attempt(s)")
        return right(request)
    return answer


def test_sync_fault_breaker_records_the_rest_of_its_batch_first(bundle, tmp_path):
    cases = validate_bundle(bundle)
    # the first turn batch holds all 7 cases; cases 1 and 2 fault, so the breaker (limit 2)
    # trips at case 2 while cases 3-6 of the same batch have answered
    keys = {cases[1].key_id, cases[2].key_id}
    model = ScriptedModel(_faulting(keys))
    with pytest.raises(ProviderError, match="2 request.s. in a row got no answer") as info:
        run_evaluation(bundle, cases, model, _settings(max_consecutive_faults=2),
                       tmp_path / "run")
    assert len(model.calls) == 1
    records = _records(tmp_path / "run")
    assert {r["key_id"] for r in records} == {c.key_id for c in cases} - keys
    assert _counts(info.value) == (4, 0)
    faults = faults_path(tmp_path / "run").read_text().splitlines()
    assert len(faults) == 2


def test_async_fault_breaker_drains_too(bundle, tmp_path):
    cases = validate_bundle(bundle)

    class Faulting(TimedFake):
        async def agenerate(self, request):
            if request.request_id.split("/")[0] == cases[0].key_id:
                self.started.append(request.request_id)
                await asyncio.sleep(0.01)  # the others are in flight by now
                return Completion(text="", status=FAULT, error="no answer after 1 attempt(s)")
            return await super().agenerate(request)

    fake = Faulting(fail_on=-1, delay_s=0.05)
    with pytest.raises(ProviderError, match="in a row got no answer") as info:
        run_evaluation_async(bundle, cases, fake, _settings(max_consecutive_faults=1),
                             tmp_path / "run", concurrency=4)
    records = _records(tmp_path / "run")
    assert sorted(r["request_id"] for r in records) == sorted(fake.answered)
    recorded, abandoned = _counts(info.value)
    assert recorded == len(records) >= 1 and abandoned == 0
