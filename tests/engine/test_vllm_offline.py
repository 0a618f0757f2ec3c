"""The ``opensource`` provider through the real ``vllm.LLM`` (vLLM's CPU build), one engine.

Run in the engine venv: ``.venv-engine/bin/python -m pytest -m engine --runengine tests/engine``.
"""

from __future__ import annotations

import json
import logging
import runpy
from collections import Counter
from pathlib import Path
from typing import Any

import engine_helpers as eh
import pytest

from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.api import evaluate
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.evaluation.budget import check_budget, estimate_prompt_tokens, last_request
from utils.errors import ConfigError, EngineStartError, ProviderError
from utils.llm import create_model
from utils.llm.base import ChatModel, Completion, Message, TurnRequest

pytestmark = pytest.mark.engine

RR_KEY = "effusion_s50000001_positive_0"  # revision-required: 9 turns, 7 images at the end


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The tiny model and the bundle of the module (no engine)."""
    root = tmp_path_factory.mktemp("vllm_offline")
    return {"root": root, "model_dir": eh.build_model(root / "tiny"),
            "bench": eh.write_bundle(root / "bench")}


@pytest.fixture(scope="module")
def world(files):
    """One tiny model, one bundle and ONE loaded engine for the whole module."""
    root, model_dir, bench = files["root"], files["model_dir"], files["bench"]
    model = create_model("opensource", str(model_dir), seed=0, max_model_len=4096,
                         max_new_tokens=eh.MAX_NEW_TOKENS,
                         gpu_memory_utilization=eh.CPU_MEMORY_FRACTION, enforce_eager=True,
                         engine_kwargs={"dtype": eh.DTYPE})
    assert model.cpu, "the engine venv must hold vLLM's CPU build"
    engine = model.load()
    calls: list[int] = []
    original = engine.chat

    def counting_chat(conversations, *args: Any, **kwargs: Any):
        calls.append(len(conversations))
        return original(conversations, *args, **kwargs)

    engine.chat = counting_chat
    yield {"root": root, "model_dir": model_dir, "bench": bench, "model": model, "calls": calls}
    model.close()


class OneAtATime(ChatModel):
    """Sends every request of a batch alone (the VLMEvalKit / lmms-eval pattern)."""

    def __init__(self, inner: ChatModel) -> None:
        super().__init__(inner.model)
        self.provider = inner.provider
        self.inner = inner

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        return [c for r in requests for c in self.inner.generate([r])]

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def _run(world, model, label: str, setting: str = "none"):
    bundle = load_bundle(world["bench"])
    cases = validate_bundle(bundle)
    settings = EvalSettings(provider="opensource", model="tiny", oracle_setting=setting)
    run_dir = world["root"] / "runs" / label
    summary = run_evaluation(bundle, cases, model, settings, run_dir, overwrite=True)
    return run_dir, summary, cases


@pytest.fixture(scope="module")
def batched(world):
    """The stage-batched run of the bundle (oracle none) and the LLM.chat calls it made."""
    world["calls"].clear()
    run_dir, summary, cases = _run(world, world["model"], "batched")
    return run_dir, summary, cases, list(world["calls"])


def test_stage_batched_run_is_one_chat_per_step_and_equals_one_at_a_time(world, batched):
    run_dir, summary, cases, calls = batched
    turns = {c.key_id: len(c.turns) for c in cases}
    recs = eh.records(run_dir)
    # the cache holds every dialogue: call k holds the k-th turn of every case that has one
    assert world["model"].kv_cache().tokens > 7 * 4096
    assert calls == [sum(n > k for n in turns.values()) for k in range(9)]
    assert summary.generate_calls == 9
    assert Counter(r["key_id"] for r in recs) == Counter(turns)
    assert {r["completion_status"] for r in recs} <= {"ok", "truncated"}
    assert all(r["usage"]["input_tokens"] > 0 for r in recs)
    # the revision-required dialogue's last turn carried all 7 images through the engine
    last = max((r for r in recs if r["key_id"] == RR_KEY), key=lambda r: r["turn_index"])
    assert last["turn_index"] == 8

    world["calls"].clear()
    single_dir, _, _ = _run(world, OneAtATime(world["model"]), "one_at_a_time")
    assert world["calls"] == [1] * len(recs)
    single = {(r["key_id"], r["turn"]): r["raw"] for r in eh.records(single_dir)}
    assert {(r["key_id"], r["turn"]): r["raw"] for r in recs} == single
    # same answers, parses and scores (only the prefix-cache hit counts differ)
    assert eh.answers(eh.results(run_dir)) == eh.answers(eh.results(single_dir))


def _hit_rate(run_dir: Path) -> float:
    """Cached over prompt tokens of a run's records (vLLM's ``num_cached_tokens``)."""
    recs = eh.records(run_dir)
    return (sum(r["usage"]["cached_input_tokens"] for r in recs)
            / sum(r["usage"]["input_tokens"] for r in recs))


class NoWindow(OneAtATime):
    """Hides the engine's KV cache: one call per turn index over every case (no window)."""

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        return self.inner.generate(requests)


def test_a_cache_smaller_than_the_dialogues_gives_the_same_answers_and_hit_rate(world, batched):
    """Issue 21: 20 KV blocks (2,560 tokens) against the 7 dialogues' ~5,500 tokens.

    Without the window, the turn-index calls evict dialogues' histories before their next
    turns (the hit rate drops); with it, the hit rate stays within 0.95x of the ample cache's
    and the greedy answers are the ample-cache run's. A 2,048-token context (the longest prompt
    is ~1,350 tokens) lets vLLM start with so few blocks.
    """
    ample_dir, _, cases, _ = batched
    model = create_model("opensource", str(world["model_dir"]), seed=0, max_model_len=2048,
                         max_new_tokens=eh.MAX_NEW_TOKENS, kv_blocks=20,
                         gpu_memory_utilization=eh.CPU_MEMORY_FRACTION, enforce_eager=True,
                         engine_kwargs={"dtype": eh.DTYPE})
    try:
        model.start()
        cache = model.kv_cache()
        assert (cache.blocks, cache.block_tokens) == (20, 128)  # vLLM's CPU block size
        engine = model.load()
        sizes: list[int] = []
        chat = engine.chat
        engine.chat = lambda conversations, *a, **k: sizes.append(len(conversations)) or \
            chat(conversations, *a, **k)
        small_dir, _, _ = _run(world, model, "small_cache")
        engine.chat = chat
        runtime = json.loads((small_dir / "run_manifest.json").read_text())["provider_runtime"]
        engine.reset_prefix_cache()
        thrash_dir, _, _ = _run(world, NoWindow(model), "small_cache_no_window")
    finally:
        model.close()
    assert runtime["kv_cache"] == {"blocks": 20, "block_tokens": 128, "tokens": 2560,
                                   "window_tokens": 19 * 128}
    assert max(sizes) < 7 and len(sizes) > 9  # the window held fewer than all 7 dialogues
    ample = _hit_rate(ample_dir)
    assert _hit_rate(small_dir) >= 0.95 * ample
    assert _hit_rate(thrash_dir) < 0.95 * ample  # the cache is small enough to matter
    raw = {(r["key_id"], r["turn"]): r["raw"] for r in eh.records(small_dir)}
    assert raw == {(r["key_id"], r["turn"]): r["raw"] for r in eh.records(ample_dir)}
    assert eh.answers(eh.results(small_dir)) == eh.answers(eh.results(ample_dir))
    assert len(raw) == sum(len(c.turns) for c in cases)


def test_implicit_oracle_run_completes_every_case(world):
    run_dir, summary, cases = _run(world, world["model"], "implicit", setting="implicit")
    assert summary.generate_calls == 9
    assert Counter(r["key_id"] for r in eh.records(run_dir)) == \
        Counter({c.key_id: len(c.turns) for c in cases})
    assert set(eh.results(run_dir)) >= {c.key_id for c in cases}


def test_no_thinking_reaches_the_chat_template(world):
    """``--no-thinking`` renders the template's empty think block: more prompt tokens."""
    plain = world["model"]
    no_think = create_model("opensource", str(world["model_dir"]), seed=0, max_model_len=4096,
                            max_new_tokens=eh.MAX_NEW_TOKENS, no_thinking=True,
                            gpu_memory_utilization=eh.CPU_MEMORY_FRACTION, enforce_eager=True,
                            engine_kwargs={"dtype": eh.DTYPE})
    assert no_think.chat_template_kwargs == {"enable_thinking": False}
    no_think._llm, no_think._sampling = plain.load(), plain._sampling  # share the one engine
    request = TurnRequest((Message("system", "sys"), Message("user", "Is there effusion?")))
    with_thinking = plain.generate([request])[0].usage.input_tokens
    without = no_think.generate([request])[0].usage.input_tokens
    tokenizer = plain.load().get_tokenizer()
    think_block = len(tokenizer.encode("<think>\n\n</think>\n\n", add_special_tokens=False))
    assert without == with_thinking + think_block


def test_token_budget_estimate_brackets_the_engine_count(world):
    bundle = load_bundle(world["bench"])
    case = next(c for c in validate_bundle(bundle) if c.key_id == RR_KEY)
    request = last_request(case)
    assert sum(len(m.images) for m in request.messages) == 7
    limits = world["model"].prompt_limits()
    assert limits.context_tokens == 4096 and limits.max_images == 7
    assert limits.image_rule.kind == "qwen" and limits.tokenizer_file is not None
    estimate = estimate_prompt_tokens(request, limits)
    actual = world["model"].generate([request])[0].usage.input_tokens
    assert actual <= estimate <= actual * 1.2 + 16


def test_a_dialogue_over_the_context_fails_alone_a_first_turn_stops_the_run(world):
    model = world["model"]
    history = (Message("system", "sys"), Message("user", "Is there effusion?"),
               Message("assistant", "Answer: 1"))
    ok = TurnRequest(history + (Message("user", "Does the mask need a revision?"),))
    too_long = TurnRequest(history + (Message("user", "effusion " * 5000),))
    out = model.generate([ok, too_long, ok])
    assert out[1].status == "error" and {out[0].status, out[2].status} <= {"ok", "truncated"}
    assert "maximum context length is 4096" in out[1].error
    assert "outgrew the model's context" in out[1].error
    assert out[0].text == out[2].text
    first = TurnRequest((Message("system", "sys"), Message("user", "effusion " * 5000)))
    with pytest.raises(ProviderError, match="even before any answer"):
        model.generate([first])


def test_image_limit_and_context_are_checked_before_the_engine_loads(world, caplog):
    bundle = load_bundle(world["bench"])
    cases = validate_bundle(bundle)
    few_images = create_model("opensource", str(world["model_dir"]), max_model_len=4096,
                              engine_kwargs={"limit_mm_per_prompt": {"image": 3}})
    with pytest.raises(ConfigError) as info:
        check_budget(cases, few_images)
    assert "carries 7 images" in str(info.value) and "accepts 3" in str(info.value)
    assert "_positive_0" in str(info.value).split(":")[0]  # a revision-required key_id
    assert few_images._llm is None  # nothing loaded

    small = create_model("opensource", str(world["model_dir"]), max_model_len=160,
                         max_new_tokens=16)
    with caplog.at_level(logging.WARNING):
        budgets = check_budget(cases, small)
    assert budgets[0].images == 7 and budgets[0].total_tokens > 160
    assert budgets[0].key_id in caplog.text and "more than the model's context of 160" in \
        caplog.text
    assert small._llm is None


def test_cli_refuses_an_output_cap_that_fills_the_context_before_loading(world, tmp_path,
                                                                         capsys):
    module = runpy.run_path(str(eh.EVAL_SCRIPT), run_name="eval_under_test")
    argv = ["--benchmark-dir", str(world["bench"]), "--output-path", str(tmp_path),
            "--provider", "opensource", "--model", str(world["model_dir"]),
            "--max-model-len", "256", "--max-new-tokens", "512", "--no-progress"]
    assert module["run_main"](module["main"], argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1
    assert "512 new tokens" in err[0] and "256 tokens" in err[0] and "--max-new-tokens" in err[0]
    assert not list(Path(tmp_path).rglob("records.jsonl"))


def test_async_engine_without_turn_barrier_gives_the_batched_answers(world, batched):
    """``--vllm-engine async``: AsyncLLM under the async runner, same greedy answers."""
    run_dir, _, cases, _ = batched
    model = create_model("opensource", str(world["model_dir"]), seed=0, max_model_len=4096,
                         max_new_tokens=eh.MAX_NEW_TOKENS, engine="async",
                         gpu_memory_utilization=eh.CPU_MEMORY_FRACTION, enforce_eager=True,
                         engine_kwargs={"dtype": eh.DTYPE})
    assert model.supports_async and model._llm is None
    builds: list[Any] = []
    build = model._build_async_engine
    model._build_async_engine = lambda: builds.append(1) or build()
    model.start()  # as evaluate() does: outside any event loop, before the run folder
    assert model._async_llm is not None and builds == [1]
    bundle = load_bundle(world["bench"])
    settings = EvalSettings(provider="opensource", model="tiny", oracle_setting="none")
    async_dir = world["root"] / "runs" / "async"
    try:
        summary = run_evaluation_async(bundle, cases, model, settings, async_dir,
                                       concurrency=64, overwrite=True)
    finally:
        model.close()
    assert model._llm is None  # the offline LLM was never started
    assert builds == [1]  # the runner's event loop adopted the engine start() built
    assert summary.generate_calls == sum(len(c.turns) for c in cases)
    raw = {(r["key_id"], r["turn"]): r["raw"] for r in eh.records(async_dir)}
    assert raw == {(r["key_id"], r["turn"]): r["raw"] for r in eh.records(run_dir)}
    assert eh.answers(eh.results(async_dir)) == eh.answers(eh.results(run_dir))


def test_a_conversation_the_chat_template_rejects_fails_alone(tmp_path):
    """Gemma-2 roles on the real engine: system text folded, one rejected conversation alone.

    docs/chat_templates.md; its own engine (the template differs from the module's model).
    """
    templates = eh.load_by_path("_engine_chat_templates", eh.TESTS / "llm" / "chat_templates.py")
    model_dir = eh.tiny_vlm.build_tiny_qwen2_vl(tmp_path / "gemma2_roles", size="gpu", seed=0,
                                                chat_template=templates.GEMMA2)
    model = create_model("opensource", str(model_dir), seed=0, max_model_len=4096,
                         max_new_tokens=eh.MAX_NEW_TOKENS,
                         gpu_memory_utilization=eh.CPU_MEMORY_FRACTION, enforce_eager=True,
                         engine_kwargs={"dtype": eh.DTYPE})
    assert model.describe()["chat_format"] == {"system_role": False, "strict_alternation": True}
    image = eh.write_bundle(tmp_path / "bench") / "chexpercept"
    first_image = sorted(image.rglob("*.png"))[0]

    def request(text: str) -> TurnRequest:
        return TurnRequest((Message("system", "You are an expert radiologist."),
                            Message("user", "Is there effusion?", (first_image,)),
                            Message("assistant", "Answer: 1"), Message("user", text)))

    try:
        out = model.generate([request("Which point?"), request(f"No {templates.MARKER}"),
                              request("Which point?")])
    finally:
        model.close()
    assert [c.status in ("ok", "truncated") for c in out] == [True, False, True]
    assert out[1].status == "error" and templates.MARKER_ERROR in out[1].error
    assert out[0].text == out[2].text and out[0].usage.input_tokens > 0


def test_an_engine_that_cannot_start_stops_before_the_run_folder_and_the_fix_runs(
        files, tmp_path, capsys, monkeypatch):
    """Issue 20, item 1: ``--max-model-len`` over the model's 32,768 positions.

    vLLM's config check refuses to start: exit 2, one line naming ``--max-model-len``, no
    manifest and no record (before: every turn an ``error`` record, exit 0). The corrected
    value then runs in the same output folder (a manifest written by the failed start would
    refuse it: ``max_model_len`` is an identity field). One engine start (the corrected run).
    """
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    module = runpy.run_path(str(eh.EVAL_SCRIPT), run_name="eval_under_test")
    argv = ["--benchmark-dir", str(files["bench"]), "--output-path", str(tmp_path),
            "--provider", "opensource", "--model", str(files["model_dir"]),
            "--max-model-len", "65536", "--max-new-tokens", str(eh.MAX_NEW_TOKENS),
            "--gpu-memory-utilization", str(eh.CPU_MEMORY_FRACTION), "--limit", "2",
            "--oracle_setting", "none", "--no-progress"]
    assert module["run_main"](module["main"], argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1
    assert "could not start" in err[0] and "User-specified max_model_len (65536)" in err[0]
    assert "Fix: lower --max-model-len" in err[0]
    assert not list(tmp_path.rglob("run_manifest.json"))
    assert not list(tmp_path.rglob("records.jsonl"))

    # --vllm-engine async: AsyncLLM's start fails alike, and is not tried a second time
    model = create_model("opensource", str(files["model_dir"]), engine="async",
                         max_model_len=65536, gpu_memory_utilization=eh.CPU_MEMORY_FRACTION)
    with pytest.raises(EngineStartError, match="--max-model-len") as first:
        model.start()
    with pytest.raises(EngineStartError) as again:
        model.start()
    assert again.value is first.value

    summary = evaluate(files["bench"], provider="opensource", output_path=tmp_path,
                       model=str(files["model_dir"]), oracle_setting="none", limit=2,
                       max_new_tokens=eh.MAX_NEW_TOKENS,
                       provider_options={"max_model_len": 4096,
                                         "gpu_memory_utilization": eh.CPU_MEMORY_FRACTION,
                                         "enforce_eager": True,
                                         "engine_kwargs": {"dtype": eh.DTYPE}})
    recs = eh.records(summary.run_dir)
    assert summary.unfinished_message() is None and recs
    assert {r["completion_status"] for r in recs} <= {"ok", "truncated"}


def test_option_probs_read_the_engines_logprobs(world):
    """``--option-probs`` on the real engine: ``SamplingParams(logprobs=k)`` and vLLM's
    ``CompletionOutput.logprobs`` read into each turn's top-k (docs/metrics.md, "Option
    probabilities and AUROC"). The module's engine is reused with the option switched on."""
    import dataclasses

    from chexpercept.evaluation.option_probs import OPTION_PROBS_STATUSES

    model = world["model"]
    saved = model.config, model._sampling
    try:
        model.config = dataclasses.replace(model.config, top_logprobs=5)
        model._sampling = model._sampling_params()
        assert model._sampling.logprobs == 5
        request = TurnRequest((Message("system", "Answer with a number."),
                               Message("user", "Is 1 + 1 = 2? (1) Yes (2) No")), request_id="q")
        (completion,) = model.generate([request])
        steps = completion.top_logprobs
        assert steps is not None and len(steps) == completion.usage.output_tokens
        for token, top in steps:
            assert token in top and 1 <= len(top) <= 6  # the top 5 and the sampled token
            assert all(v <= 1e-6 for v in top.values())
        bundle = load_bundle(world["bench"])
        cases = validate_bundle(bundle)
        settings = EvalSettings(provider="opensource", model="tiny", oracle_setting="implicit",
                                option_probs=True)
        run_dir = world["root"] / "runs" / "option_probs"
        run_evaluation(bundle, cases, model, settings, run_dir, overwrite=True)
        recs = eh.records(run_dir)
        statuses = Counter(r["option_probs"]["status"] for r in recs)
        assert set(statuses) <= set(OPTION_PROBS_STATUSES) and not statuses["missing"]
    finally:
        model.config, model._sampling = saved


def test_two_samples_at_temperature_one_are_seeded_per_request(world):
    """``--samples 2 --temperature 1.0`` (docs/evaluation_protocol.md, "Sampling").

    Each request carries its sample's seed as ``SamplingParams(seed=...)``: the two samples'
    records carry distinct seeds, and a rerun gives identical replies (seeded, not greedy).
    """
    sampled = create_model("opensource", str(world["model_dir"]), seed=0, max_model_len=4096,
                           max_new_tokens=eh.MAX_NEW_TOKENS, temperature=1.0,
                           gpu_memory_utilization=eh.CPU_MEMORY_FRACTION, enforce_eager=True,
                           engine_kwargs={"dtype": eh.DTYPE})
    sampled._llm = world["model"].load()  # share the one engine
    sampled._sampling = sampled._sampling_params()
    assert sampled._sampling.temperature == 1.0
    bundle = load_bundle(world["bench"])
    cases = validate_bundle(bundle)
    settings = EvalSettings(provider="opensource", model="tiny", oracle_setting="none",
                            samples=2)
    raws = []
    for label in ("sampled_a", "sampled_b"):
        run_dir = world["root"] / "runs" / label
        summary = run_evaluation(bundle, cases, sampled, settings, run_dir, overwrite=True)
        assert summary.cases_finished == len(cases)
        recs = eh.records(run_dir)
        seeds = {r["sample"]: r["sample_seed"] for r in recs}
        assert sorted(seeds) == [0, 1] and seeds[0] != seeds[1]
        assert Counter(r["sample"] for r in recs) == {0: sum(len(c.turns) for c in cases),
                                                      1: sum(len(c.turns) for c in cases)}
        raws.append({(r["key_id"], r["turn"], r["sample"]): r["raw"] for r in recs})
    assert raws[0] == raws[1]  # the same seeds: the same replies
    # temperature 1 on a random tiny model: the two samples do not give the same replies
    assert any(raw != raws[0][(key, turn, 0)]
               for (key, turn, k), raw in raws[0].items() if k == 1)


def test_two_samples_on_the_async_engine_finish_with_their_own_seeds(files):
    """``--vllm-engine async --samples 2 --temperature 1.0``: AsyncLLM gets each request's seed.

    The async runner's KV window holds both samples of a case (keyed by key_id and sample).
    """
    model = create_model("opensource", str(files["model_dir"]), seed=0, max_model_len=4096,
                         max_new_tokens=eh.MAX_NEW_TOKENS, engine="async", temperature=1.0,
                         gpu_memory_utilization=eh.CPU_MEMORY_FRACTION, enforce_eager=True,
                         engine_kwargs={"dtype": eh.DTYPE})
    bundle = load_bundle(files["bench"])
    cases = validate_bundle(bundle)
    settings = EvalSettings(provider="opensource", model="tiny", oracle_setting="none",
                            samples=2)
    run_dir = files["root"] / "runs" / "async_sampled"
    model.start()
    try:
        summary = run_evaluation_async(bundle, cases, model, settings, run_dir,
                                       concurrency=64, overwrite=True)
    finally:
        model.close()
    assert summary.cases_finished == len(cases)
    recs = eh.records(run_dir)
    seeds = {r["sample"]: r["sample_seed"] for r in recs}
    assert sorted(seeds) == [0, 1] and seeds[0] != seeds[1]
    raw = {(r["key_id"], r["turn"], r["sample"]): r["raw"] for r in recs}
    assert len(raw) == 2 * sum(len(c.turns) for c in cases)
    assert any(text != raw[(key, turn, 0)] for (key, turn, k), text in raw.items() if k == 1)
