"""Async per-case runner: concurrency bound, turn order, parity with the sync runner, resume."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

import pytest
from stage03_bundle import write_bundle
from stage03_fakes import KnowsAnswers, ScriptedModel, right, wrong

from chexpercept.errors import ConfigError, ProviderError
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.evaluation.cases import TURN_BY_NAME
from chexpercept.files import dumps_json
from chexpercept.layouts import all_results_path, records_path
from chexpercept.run_store import RecordWriter
from utils.llm.base import ChatModel, Completion, TurnRequest, Usage

TOTAL_TURNS = 33  # turns of the seven bundle cases (9+6+1+5+2+1+9)


def _mixed(request):
    return right(request) if sum(map(ord, request.request_id)) % 3 else wrong(request)


class AsyncFake(KnowsAnswers, ChatModel):
    """A native-async fake with the same identity as ScriptedModel (same manifest)."""

    provider = "scripted"
    supports_async = True

    def __init__(self, answer=_mixed, *, delay_s=0.002, fail_on=None, exc=RuntimeError):
        super().__init__("scripted-model")
        self.answer, self.delay_s, self.fail_on, self.exc = answer, delay_s, fail_on, exc
        self.calls = 0
        self.in_flight = self.max_in_flight = 0
        self.requests: list[TurnRequest] = []
        self.closed = 0

    def generate(self, requests):
        raise AssertionError("the async runner must not call generate")

    async def agenerate(self, request):
        n = self.calls
        self.calls += 1
        if self.fail_on is not None and n == self.fail_on:
            raise self.exc("simulated failure")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        self.requests.append(request)
        return Completion(text=self.answer(self.with_truth(request)), finish_reason="stop",
                          usage=Usage(input_tokens=10, output_tokens=3))

    async def aclose(self):
        self.closed += 1


@pytest.fixture()
def bundle(tmp_path):
    return load_bundle(write_bundle(tmp_path / "bench"))


def _settings(**kw):
    return EvalSettings("scripted", "m", oracle_setting=kw.pop("oracle_setting", "implicit"), **kw)


def _records(run_dir):
    return [json.loads(x) for x in records_path(run_dir).read_text().splitlines()]


def _all_results_text(run_dir):
    return all_results_path(run_dir).read_text(encoding="utf-8")


@pytest.mark.parametrize("setting", ["implicit", "explicit", "none"])
def test_results_identical_to_the_sync_runner(bundle, tmp_path, setting):
    cases = validate_bundle(bundle)
    run_evaluation(bundle, cases, ScriptedModel(_mixed), _settings(oracle_setting=setting),
                   tmp_path / "sync")
    fake = AsyncFake()
    summary = run_evaluation_async(bundle, cases, fake, _settings(oracle_setting=setting),
                                   tmp_path / "async", concurrency=4)
    assert _all_results_text(tmp_path / "sync") == _all_results_text(tmp_path / "async")
    drop = ("latency_s", "batch_latency_s")
    norm = lambda recs: sorted(  # noqa: E731
        json.dumps({k: v for k, v in r.items() if k not in drop}, sort_keys=True) for r in recs)
    assert norm(_records(tmp_path / "sync")) == norm(_records(tmp_path / "async"))
    assert summary.turns_requested == summary.generate_calls == TOTAL_TURNS
    assert summary.cases_finished == 7 and fake.closed == 1


def test_default_agenerate_runs_a_sync_provider(bundle, tmp_path):
    cases = validate_bundle(bundle)
    run_evaluation(bundle, cases, ScriptedModel(_mixed), _settings(), tmp_path / "sync")
    model = ScriptedModel(_mixed)
    run_evaluation_async(bundle, cases, model, _settings(), tmp_path / "async", concurrency=3)
    assert _all_results_text(tmp_path / "sync") == _all_results_text(tmp_path / "async")
    assert all(len(call) == 1 for call in model.calls)  # one request per generate call


@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrency_bound_is_respected(bundle, tmp_path, concurrency):
    fake = AsyncFake(delay_s=0.01)
    run_evaluation_async(bundle, validate_bundle(bundle), fake, _settings(), tmp_path / "run",
                         concurrency=concurrency)
    assert fake.max_in_flight == concurrency


def test_each_case_runs_its_turns_in_order_with_full_history(bundle, tmp_path):
    fake = AsyncFake(delay_s=0.003)
    run_evaluation_async(bundle, validate_bundle(bundle), fake, _settings(), tmp_path / "run",
                         concurrency=5)
    by_case = defaultdict(list)
    for request in fake.requests:
        key_id, turn = request.request_id.split("/", 1)
        by_case[key_id].append((turn, len(request.messages)))
    assert len(by_case) == 7
    for turns in by_case.values():
        indices = [TURN_BY_NAME[t].index for t, _ in turns]
        assert indices == sorted(indices)
        assert [n for _, n in turns] == [2 + 2 * k for k in range(len(turns))]


def test_resume_after_an_exception_requests_only_missing_turns(bundle, tmp_path):
    cases = validate_bundle(bundle)
    run_evaluation_async(bundle, cases, AsyncFake(), _settings(), tmp_path / "clean",
                         concurrency=3)
    crashing = AsyncFake(fail_on=14)
    with pytest.raises(RuntimeError, match="simulated failure"):
        run_evaluation_async(bundle, cases, crashing, _settings(), tmp_path / "run",
                             concurrency=3)
    done = len(_records(tmp_path / "run"))
    assert 0 < done <= 14
    partial = json.loads(_all_results_text(tmp_path / "run"))
    finished = {r["key_id"] for r in _records(tmp_path / "run")}
    assert set(partial) <= finished  # finished cases were checkpointed at the crash
    again = AsyncFake()
    summary = run_evaluation_async(bundle, cases, again, _settings(), tmp_path / "run",
                                   concurrency=3)
    assert again.calls == TOTAL_TURNS - done and summary.turns_resumed == done
    assert _all_results_text(tmp_path / "run") == _all_results_text(tmp_path / "clean")


def test_provider_error_stops_the_run_and_keeps_records(bundle, tmp_path):
    fake = AsyncFake(fail_on=5, exc=ProviderError)
    with pytest.raises(ProviderError):
        run_evaluation_async(bundle, validate_bundle(bundle), fake, _settings(),
                             tmp_path / "run", concurrency=1)
    assert len(_records(tmp_path / "run")) == 5 and fake.closed == 1


def test_manifest_mismatch_is_refused_like_the_sync_runner(bundle, tmp_path):
    cases = validate_bundle(bundle)
    run_evaluation_async(bundle, cases, AsyncFake(), _settings(), tmp_path / "run")
    with pytest.raises(ConfigError, match="oracle_setting"):
        run_evaluation_async(bundle, cases, AsyncFake(), _settings(oracle_setting="none"),
                             tmp_path / "run")
    with pytest.raises(ConfigError, match="concurrency"):
        run_evaluation_async(bundle, cases, AsyncFake(), _settings(), tmp_path / "run",
                             concurrency=0)


def test_record_writer_flushes_each_record_before_fsync(tmp_path):
    path = tmp_path / "records.jsonl"
    writer = RecordWriter(path, fsync_every=1000, fsync_interval_s=3600)
    writer.append({"key_id": "a", "turn": "detection_qa"})
    assert json.loads(path.read_text().splitlines()[0])["key_id"] == "a"  # visible to readers
    writer.close()


def test_longest_remaining_cases_start_first(bundle, tmp_path):
    cases = validate_bundle(bundle)
    fake = AsyncFake()
    run_evaluation_async(bundle, cases, fake, _settings(), tmp_path / "run", concurrency=1)
    longest = {c.key_id for c in cases if len(c.turns) == 9}
    assert len(longest) == 2  # two workers at concurrency 1: both take a 9-turn case first
    assert {r.request_id.split("/")[0] for r in fake.requests[:2]} == longest
    last_case = fake.requests[-1].request_id.split("/")[0]
    assert min(len(c.turns) for c in cases if c.key_id == last_case) <= 2


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_all_results_is_the_indent_2_json_of_its_content_at_every_checkpoint(
        bundle, tmp_path, runner):
    """Cached per-case texts (session.encode_results) join to files.dumps_json's exact bytes."""
    from chexpercept.run_store import RunStore

    cases = validate_bundle(bundle)
    texts = []
    write = RunStore.write_results

    def spy(self, members):
        write(self, members)
        texts.append(self.results_path.read_text(encoding="utf-8"))

    settings = _settings(save_every=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RunStore, "write_results", spy)
        if runner == "sync":
            run_evaluation(bundle, cases, ScriptedModel(_mixed), settings, tmp_path / "run")
        else:
            run_evaluation_async(bundle, cases, AsyncFake(), settings, tmp_path / "run",
                                 concurrency=2, checkpoint_interval_s=0.0)
    finished = [sum("unfinished" not in r for r in json.loads(t).values()) for t in texts]
    assert len(texts) >= 3 and len(set(finished)) >= 3
    # a checkpoint lists every selected case: the unfinished ones marked, nothing else
    assert all(len(json.loads(t)) == len(cases) for t in texts)
    assert "unfinished" not in texts[-1]
    for text in texts:
        assert text == dumps_json(json.loads(text))
    assert texts[-1] == _all_results_text(tmp_path / "run")
    RunStore(tmp_path / "empty").write_results([])
    assert all_results_path(tmp_path / "empty").read_text() == dumps_json({})


def test_collector_is_tuned_during_the_run_and_restored_after(bundle, tmp_path):
    import gc

    from chexpercept.evaluation import async_runner

    seen = {}

    class Probe(AsyncFake):
        async def agenerate(self, request):
            seen.setdefault("threshold", gc.get_threshold())
            seen.setdefault("frozen", gc.get_freeze_count())
            return await super().agenerate(request)

    before = gc.get_threshold()
    run_evaluation_async(bundle, validate_bundle(bundle), Probe(), _settings(),
                         tmp_path / "run", concurrency=2)
    # during the run: gen-0 threshold raised and what existed (bundle, states) frozen, so a
    # collector pause does not stall every request in flight
    assert seen["threshold"][0] == max(async_runner.GC_GEN0_THRESHOLD, before[0])
    assert seen["threshold"][1:] == before[1:]
    assert seen["frozen"] > 0
    # after: the process is as it was
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_collector_settings_of_the_caller_are_kept(bundle, tmp_path):
    import gc

    # a caller's own freeze survives the run (an unconditional unfreeze undid it) ...
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        run_evaluation_async(bundle, validate_bundle(bundle), AsyncFake(), _settings(),
                             tmp_path / "a", concurrency=2)
        # (frozen objects freed by reference counting leave the count; an unfreeze empties it)
        assert gc.get_freeze_count() > frozen // 2
    finally:
        gc.unfreeze()
    # ... and a switched-off collector stays off during and after the run
    seen = []

    class Probe(AsyncFake):
        async def agenerate(self, request):
            seen.append((gc.isenabled(), gc.get_threshold()))
            return await super().agenerate(request)

    before = gc.get_threshold()
    gc.disable()
    try:
        run_evaluation_async(bundle, validate_bundle(bundle), Probe(), _settings(),
                             tmp_path / "b", concurrency=2)
        assert not gc.isenabled() and gc.get_threshold() == before
        assert all(not enabled and threshold == before for enabled, threshold in seen)
    finally:
        gc.enable()
