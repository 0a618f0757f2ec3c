"""``--provider opensource --samples K --temperature T`` against the stub ``vllm``.

docs/evaluation_protocol.md, "Sampling"; docs/engines.md, "Decoding".
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

import pytest
import vllm_stub
from local_provider_helpers import (
    read_manifest,
    read_records,
    run_eval_cli,
    turns_per_case,
    write_marked_bundle,
)

from chexpercept.evaluation.api import check_samples
from chexpercept.evaluation.replicas import RayReplicas
from chexpercept.layouts import sample_results_path
from chexpercept.rng import sample_seed
from utils.errors import ConfigError
from utils.llm import create_model
from utils.llm.base import Message, TurnRequest
from utils.llm.chat_format import ChatFormat

TEMPLATE = "{% for m in messages %}{{ m['role'] }}{% endfor %}"
GREEDY = {"temperature": 0.0, "top_p": 1.0, "max_output_length": 8192, "seed": 0}


@pytest.fixture()
def stub(monkeypatch):
    module = vllm_stub.make_vllm_module()
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    return module


@pytest.fixture()
def model_dir(tmp_path):
    folder = tmp_path / "local_model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3_vl"}', encoding="utf-8")
    (folder / "chat_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    return folder


def _request(request_id, seed=None):
    return TurnRequest(messages=(Message("system", "sys"), Message("user", "Q")),
                       request_id=request_id, seed=seed)


def test_opensource_samples_need_a_temperature_above_zero_and_no_parts_or_ray():
    check_samples(2, "opensource", "qwen2.5-vl-3b", {"temperature": 1.0})
    for options in ({}, {"temperature": 0.0}):
        with pytest.raises(ConfigError, match="needs --temperature T > 0"):
            check_samples(2, "opensource", "qwen2.5-vl-3b", options)
    with pytest.raises(ConfigError, match="sharded"):
        check_samples(2, "opensource", "qwen2.5-vl-3b", {"temperature": 1.0}, part=0)
    with pytest.raises(ConfigError, match="Ray"):
        check_samples(2, "opensource", "qwen2.5-vl-3b", {"temperature": 1.0},
                      ray=RayReplicas())


def test_each_request_seed_and_the_temperature_reach_its_own_sampling_params(stub, model_dir):
    model = create_model("opensource", "qwen3.6-27b", model_path=str(model_dir),
                         temperature=0.7, seed=3)
    model.generate([_request("a", seed=11), _request("b", seed=12), _request("c")])
    (call,) = stub.LLM.instances[0].calls
    assert isinstance(call.sampling_params, list)  # one per conversation, in request order
    assert [(p.temperature, p.top_p, p.seed) for p in call.sampling_params] == [
        (0.7, 1.0, 11), (0.7, 1.0, 12), (0.7, 1.0, 3)]  # no request seed: the configured one
    assert model.describe()["sampling"] == {**GREEDY, "temperature": 0.7, "seed": 3}


def test_without_request_seeds_one_greedy_sampling_params_as_before(stub, model_dir):
    model = create_model("opensource", "qwen3.6-27b", model_path=str(model_dir))
    model.generate([_request("a"), _request("b")])
    (call,) = stub.LLM.instances[0].calls
    sp = call.sampling_params
    assert not isinstance(sp, list)
    assert (sp.temperature, sp.top_p, sp.max_tokens, sp.seed) == (0.0, 1.0, 8192, 0)
    assert model.describe()["sampling"] == GREEDY  # a default run's manifest is unchanged


def test_a_rejected_conversation_keeps_the_others_seeds_aligned(monkeypatch, model_dir):
    """The halving retry (one bad conversation) splits the seeds with the conversations."""
    module = vllm_stub.make_vllm_module()
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    model = create_model("opensource", "qwen3.6-27b", model_path=str(model_dir),
                         temperature=1.0, max_model_len=64)
    long = TurnRequest(messages=(Message("system", "sys"), Message("user", "Q"),
                                 Message("assistant", "Answer: 1"), Message("user", "Q" * 400)),
                       request_id="long", seed=99)  # a later turn: its error, not a stop
    out = model.generate([_request("a", seed=1), long, _request("b", seed=2),
                          _request("c", seed=3)])
    assert [c.status for c in out] == ["ok", "error", "ok", "ok"]
    answered = [c for c in module.LLM.instances[0].calls
                if all(len(m[-1]["content"]) < 100 for m in c.messages)]
    seeds = sorted(p.seed for call in answered
                   for p in vllm_stub.params_of(call.sampling_params, len(call.messages)))
    assert seeds == [1, 2, 3]


def test_the_async_engine_gets_each_request_seed(stub, model_dir):
    model = create_model("opensource", "qwen3.6-27b", model_path=str(model_dir),
                         temperature=0.5, engine="async")
    sent = []

    class Engine:
        async def generate(self, prompt, sampling, request_id):
            sent.append((sampling.temperature, sampling.seed))
            yield vllm_stub.RequestOutput(request_id, None, [1, 2], [
                vllm_stub.CompletionOutput(0, "Answer: 1", [1], finish_reason="stop")])

    async def render(engine, conversation):
        return "prompt"

    model._chat_format = ChatFormat()
    model._sampling = model._sampling_params()
    model._async_engine = lambda: Engine()
    model._render = render

    async def ask():
        return [await model.agenerate(_request("a", seed=21)),
                await model.agenerate(_request("b"))]

    assert [c.text for c in asyncio.run(ask())] == ["Answer: 1", "Answer: 1"]
    assert sent == [(0.5, 21), (0.5, 0)]


def test_cli_two_samples_with_temperature_in_the_kv_window(stub, model_dir, tmp_path):
    """K=2 T=0.7: both samples of every case finish, each request sent its sample's seed."""
    bench = tmp_path / "bench"
    write_marked_bundle(bench)
    out = tmp_path / "out"
    args = ["--benchmark-dir", str(bench), "--output-path", str(out),
            "--provider", "opensource", "--model", "qwen3.6-27b", "--model-path",
            str(model_dir), "--oracle_setting", "none", "--no-progress", "--seed", "4"]
    with pytest.raises(ConfigError, match="needs --temperature T > 0"):
        run_eval_cli([*args, "--samples", "2"])
    assert run_eval_cli([*args, "--samples", "2", "--temperature", "0.7"]) == 0
    run_dir = out / "opensource_qwen3.6-27b+samples=2+seed=4" / "oracle_none"
    assert sample_results_path(run_dir, 1).is_file()
    records = read_records(run_dir)
    planned = turns_per_case(bench)
    seeds = [sample_seed(4, k) for k in range(2)]
    assert Counter((r["key_id"], r["sample"]) for r in records) == Counter(
        {(key, k): n for key, n in planned.items() for k in range(2)})
    assert {r["sample"]: r["sample_seed"] for r in records} == dict(enumerate(seeds))
    engine = stub.LLM.instances[-1]
    sent = Counter(p.seed for call in engine.calls
                   for p in vllm_stub.params_of(call.sampling_params, len(call.messages)))
    assert sent == Counter(r["sample_seed"] for r in records)
    assert {p.temperature for call in engine.calls
            for p in vllm_stub.params_of(call.sampling_params, len(call.messages))} == {0.7}
    manifest = read_manifest(run_dir)
    assert manifest["sampling"] == {"samples": 2, "seeds": seeds}
    assert manifest["provider_settings"]["sampling"]["temperature"] == 0.7
