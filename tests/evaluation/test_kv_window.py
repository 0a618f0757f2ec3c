"""The KV window of Stage 03: footprints, admission, and both runners keeping within it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from typing import Any

import pytest
from stage03_bundle import CASES, write_bundle
from stage03_fakes import ScriptedModel, right

from chexpercept.errors import ProviderError
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.async_runner import Scheduler, run_evaluation_async
from chexpercept.evaluation.budget import estimate_prompt_tokens, last_request
from chexpercept.evaluation.dialogue import Dialogue
from chexpercept.evaluation.kv_window import DialogueWindow
from chexpercept.evaluation.session import CaseState, RunSummary
from chexpercept.files import read_jsonl
from chexpercept.layouts import all_results_path, records_path
from utils.llm.base import Completion, KVCache, PromptLimits, TurnRequest, Usage

RR = "effusion_s50000001_positive_0"  # revision-required, 9 turns
LF = "effusion_s50000003_negative_0"  # lesion-free, 1 turn
BLOCK = 16
#: Output-token cap of the test doubles (the reply allowance before the first answer).
MAX_NEW = 40
#: Output tokens of every scripted answer (the allowance once answers came).
OUTPUT = 3


@pytest.fixture()
def bundle(tmp_path):
    return load_bundle(write_bundle(tmp_path / "bench"))


def _states(bundle) -> dict[str, CaseState]:
    return {c.key_id: CaseState(Dialogue(c, "implicit")) for c in validate_bundle(bundle)}


def _window(tokens: int, context: int | None = None) -> DialogueWindow:
    cache = KVCache(blocks=tokens // BLOCK + 1, block_tokens=BLOCK, window_tokens=tokens)
    return DialogueWindow(cache, PromptLimits(max_new_tokens=MAX_NEW, context_tokens=context))


def _answer(output_tokens: int, status: str = "ok") -> Completion:
    return Completion(text="Answer: 1", status=status, usage=Usage(output_tokens=output_tokens))


def test_footprint_is_the_last_prompt_plus_a_reply_per_turn_in_whole_blocks(bundle):
    states = _states(bundle)
    rr = states[RR]
    prompt = estimate_prompt_tokens(last_request(rr.dialogue.case), PromptLimits())
    window = _window(10_000)
    assert len(rr.dialogue.case.turns) == 9
    # before any answer: the output cap per turn
    assert window.footprint(rr) == math.ceil((prompt + 9 * MAX_NEW) / BLOCK) * BLOCK
    window.observe(_answer(10))
    window.observe(_answer(20))
    window.observe(Completion(text="", status="fault", error="timeout"))  # no answer: not counted
    assert window.reply_tokens == 15
    assert window.footprint(rr) == math.ceil((prompt + 9 * 15) / BLOCK) * BLOCK
    # never more than the context (prompt and output together never exceed it)
    assert _window(10_000, context=100).footprint(rr) == 112


def test_cases_enter_while_their_footprints_fit_and_the_first_always(bundle):
    states = _states(bundle)
    rr, lf = states[RR], states[LF]
    probe = _window(10_000)
    both = probe.footprint(rr) + probe.footprint(lf)
    window = _window(both)
    assert window.fits(rr)
    window.enter(rr)
    assert window.fits(lf)
    window.enter(lf)
    third = states["opacity_s50000007_positive_0"]
    assert not window.fits(third)
    window.leave(rr)
    assert window.fits(third) and window.most_in_flight == 2
    # a dialogue larger than the whole window still runs, alone
    tiny = _window(BLOCK)
    assert tiny.fits(rr)
    tiny.enter(rr)
    assert not tiny.fits(lf)


class WindowModel(ScriptedModel):
    """The scripted double with an engine's KV cache of ``tokens`` (``ChatModel.kv_cache``).

    Records, at each request, the cases open at that moment: asked at least once and not
    finished (every turn the runner sends is answered).
    """

    def __init__(self, tokens: int, turns: dict[str, int], **kwargs: Any) -> None:
        super().__init__(right, **kwargs)
        self.cache = KVCache(blocks=tokens // BLOCK + 1, block_tokens=BLOCK, window_tokens=tokens)
        self.turns = turns
        self.asked: dict[str, int] = {}
        self.open_at_request: list[set[str]] = []

    def kv_cache(self) -> KVCache:
        return self.cache

    def prompt_limits(self) -> PromptLimits:
        return PromptLimits(max_new_tokens=MAX_NEW)

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        for request in requests:
            key_id = request.request_id.split("/")[0]
            self.asked[key_id] = self.asked.get(key_id, 0) + 1
        self.open_at_request.append({k for k, n in self.asked.items() if n < self.turns[k]}
                                    | {r.request_id.split("/")[0] for r in requests})
        return [dataclasses.replace(c, usage=Usage(input_tokens=10, output_tokens=OUTPUT))
                for c in super().generate(requests)]


def _turns(bundle) -> dict[str, int]:
    return {c.key_id: len(c.turns) for c in validate_bundle(bundle)}


def _footprints(bundle) -> dict[str, int]:
    """Each case's footprint once answers of OUTPUT tokens came (the smallest the run uses)."""
    window = _window(10_000)
    window.observe(_answer(OUTPUT))
    return {k: window.footprint(s) for k, s in _states(bundle).items()}


def _sync(bundle, run_dir, model, **kwargs):
    return run_evaluation(bundle, validate_bundle(bundle), model,
                          EvalSettings("scripted", "m", oracle_setting="implicit"), run_dir,
                          **kwargs)


def _results(run_dir) -> dict:
    return json.loads(all_results_path(run_dir).read_text(encoding="utf-8"))


def _raw(run_dir) -> dict[tuple[str, str], str]:
    return {(r["key_id"], r["turn"]): r["raw"] for r in read_jsonl(records_path(run_dir))}


def test_sync_runner_keeps_the_dialogues_in_flight_within_the_window(bundle, tmp_path):
    turns, footprints = _turns(bundle), _footprints(bundle)
    tokens = 2 * footprints[RR]  # two revision-required dialogues at most
    model = WindowModel(tokens, turns)
    summary = _sync(bundle, tmp_path / "window", model)
    plain = ScriptedModel(right)
    _sync(bundle, tmp_path / "plain", plain)

    assert summary.cases_finished == len(CASES)
    for call in model.calls:  # one turn per case per call, the cases in flight within the cache
        cases = [r.split("/")[0] for r in call]
        assert len(set(cases)) == len(cases)
        assert len(cases) == 1 or sum(footprints[k] for k in cases) <= tokens
    assert len(model.calls) > len(plain.calls) == 9  # the window holds fewer than all cases
    # longest remaining path first: the 9-turn dialogues open the run
    assert {r.split("/")[0] for r in model.calls[0]} <= {k for k, n in turns.items() if n == 9}
    # same answers, records and results as one call per turn index over every case
    assert _raw(tmp_path / "window") == _raw(tmp_path / "plain")
    assert _results(tmp_path / "window") == _results(tmp_path / "plain")


def test_window_run_resumes_after_a_crash(bundle, tmp_path):
    turns, footprints = _turns(bundle), _footprints(bundle)
    tokens = 2 * footprints[RR]
    with pytest.raises(RuntimeError, match="simulated crash"):
        _sync(bundle, tmp_path / "run", WindowModel(tokens, turns, fail_on_call=4))
    done = _raw(tmp_path / "run")
    assert 0 < len(done) < sum(turns.values())
    again = WindowModel(tokens, turns)
    summary = _sync(bundle, tmp_path / "run", again)
    assert summary.turns_resumed == len(done)
    assert summary.turns_requested == sum(turns.values()) - len(done)
    asked = [r for call in again.calls for r in call]
    assert not {tuple(r.split("/")) for r in asked} & set(done)  # nothing asked twice
    _sync(bundle, tmp_path / "plain", ScriptedModel(right))
    assert _results(tmp_path / "run") == _results(tmp_path / "plain")


def test_a_fault_parks_its_case_and_frees_its_room(bundle, tmp_path):
    turns, footprints = _turns(bundle), _footprints(bundle)
    model = WindowModel(footprints[RR], turns)  # one revision-required dialogue at a time
    answer = model.answer

    def fault_rr(request: TurnRequest) -> str | Completion:
        if request.request_id == f"{RR}/contour_evaluation_qa":
            return Completion(text="", status="fault", error="timeout")
        return answer(request)

    model.answer = fault_rr
    summary = _sync(bundle, tmp_path / "run", model)
    assert set(summary.unfinished) == {RR}
    assert summary.cases_finished == len(CASES) - 1


def test_async_runner_starts_a_case_only_when_the_window_has_room(bundle, tmp_path):
    turns, footprints = _turns(bundle), _footprints(bundle)
    tokens = 2 * footprints[RR]
    model = WindowModel(tokens, turns)
    summary = run_evaluation_async(bundle, validate_bundle(bundle), model,
                                   EvalSettings("scripted", "m", oracle_setting="implicit"),
                                   tmp_path / "async", concurrency=8)
    assert summary.cases_finished == len(CASES)
    assert max(len(o) for o in model.open_at_request) > 1
    for open_cases in model.open_at_request:
        assert len(open_cases) == 1 or sum(footprints[k] for k in open_cases) <= tokens
    _sync(bundle, tmp_path / "plain", ScriptedModel(right))
    assert _raw(tmp_path / "async") == _raw(tmp_path / "plain")
    assert _results(tmp_path / "async") == _results(tmp_path / "plain")


def test_async_stop_wakes_the_cases_waiting_for_room(bundle, tmp_path, monkeypatch):
    """A fatal error while cases wait for the window: they give up at once, none is cancelled.

    (Were they not woken, the drain would wait ``drain_s`` for them and then cancel them.)
    """
    turns, footprints = _turns(bundle), _footprints(bundle)
    model = WindowModel(footprints[RR], turns)  # one revision-required dialogue at a time
    answer = model.answer
    outcomes: list[str] = []
    take = Scheduler._take

    async def spied_take(self):
        try:
            state = await take(self)
        except asyncio.CancelledError:
            outcomes.append("cancelled")
            raise
        outcomes.append("none" if state is None else "case")
        return state

    def quota(request: TurnRequest) -> str:
        if len(model.calls) >= 3:
            raise ProviderError("quota exhausted")
        return answer(request)

    model.answer = quota
    monkeypatch.setattr(Scheduler, "_take", spied_take)
    with pytest.raises(ProviderError, match="quota exhausted"):
        run_evaluation_async(bundle, validate_bundle(bundle), model,
                             EvalSettings("scripted", "m", oracle_setting="implicit"),
                             tmp_path / "async", concurrency=8, drain_s=600)
    assert len(_raw(tmp_path / "async")) == 2
    assert outcomes.count("case") == 1  # the window held the first dialogue alone
    assert "cancelled" not in outcomes and outcomes.count("none") == len(outcomes) - 1


def test_summary_line_gives_the_prefix_cache_hit_rate(tmp_path):
    summary = RunSummary(run_dir=tmp_path, all_results_path=tmp_path / "all_results.json")
    summary.usage.update(input=1000, cached_input=730, output=10)
    assert "input 1000 (cached 730, hit rate 0.73)" in summary.line()
    summary.usage.update(cached_input=-730)
    assert "input 1000 (cached 0), output" in summary.line()
