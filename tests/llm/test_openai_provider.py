"""openai / azure providers through the real openai SDK against the loopback server."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import importlib.util
import json
import os
import runpy
from pathlib import Path

import numpy as np
import pytest
from loopback import LoopbackServer, vllm_metrics
from PIL import Image

from utils.errors import ConfigError, ProviderError
from utils.llm.base import Message, TurnRequest
from utils.llm.openai_provider import (
    AzureOpenAIChatModel,
    OpenAIChatModel,
    is_reasoning_model,
    no_thinking_effort,
    parse_cache_config,
)
from utils.llm.retry import RetriesExhausted, RetryPolicy

FAST = RetryPolicy(max_retries=3, base_delay_s=0.001, max_delay_s=0.01)
KEY = "sk-test-SECRET-0123456789"
REPO = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def server():
    with LoopbackServer() as srv:
        yield srv


@pytest.fixture()
def png(tmp_path):
    path = tmp_path / "x.png"
    Image.fromarray(np.full((4, 4, 3), 7, np.uint8)).save(path)
    return path


def _request(png: Path) -> TurnRequest:
    return TurnRequest((Message("system", "be brief"), Message("user", "first?", (png,)),
                        Message("assistant", "Answer: 2"), Message("user", "second?", (png,))),
                       request_id="case/turn")


def _model(server, model="gpt-5.4", **kw):
    kw.setdefault("retry_policy", FAST)
    return OpenAIChatModel(model, base_url=server.base_url, env={"OPENAI_API_KEY": KEY}, **kw)


def test_reasoning_payload_data_urls_no_temperature(server, png):
    completion = _model(server).generate([_request(png)])[0]
    assert completion.status == "ok" and completion.text == "Answer: 1"
    body = server.chat_requests()[0].body
    assert body["model"] == "gpt-5.4"
    assert body["max_completion_tokens"] == 8192 and body["reasoning_effort"] == "medium"
    assert "temperature" not in body and "max_tokens" not in body
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert body["messages"][2]["content"] == "Answer: 2"
    first = body["messages"][1]["content"]
    assert first[0] == {"type": "text", "text": "first?"}
    url = first[1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == png.read_bytes()
    assert server.chat_requests()[0].auth == f"Bearer {KEY}"


def test_usage_finish_reason_latency_recorded(server, png):
    server.latency_s = 0.1
    completion = _model(server).generate([_request(png)])[0]
    assert completion.finish_reason == "stop" and completion.response_model == "gpt-5.4"
    usage = completion.usage
    assert usage.input_tokens > 0 and usage.cached_input_tokens == usage.input_tokens // 2
    assert (usage.output_tokens, usage.thinking_tokens) == (7, 3)
    assert completion.latency_s >= 0.1 and completion.attempts == 1


def test_non_reasoning_model_gets_temperature_seed_and_no_thinking(server, png):
    _model(server, "qwen3-vl-8b", seed=5, no_thinking=True).generate([_request(png)])
    body = server.chat_requests()[0].body
    assert body["temperature"] == 0.0 and body["seed"] == 5 and body["max_tokens"] == 8192
    assert "reasoning_effort" not in body and "max_completion_tokens" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


def test_reasoning_detection_and_no_thinking_effort():
    assert is_reasoning_model("gpt-5.4-nano") and is_reasoning_model("o3")
    assert not is_reasoning_model("gpt-4o") and not is_reasoning_model("Qwen/Qwen3-VL")
    assert no_thinking_effort("gpt-5.4") == "none"
    assert no_thinking_effort("gpt-5-mini") == "minimal"
    assert no_thinking_effort("o4-mini") == "low"


def test_429_retry_after_is_honoured(server, png):
    server.push({"status": 429, "headers": {"Retry-After": "0.4"}})
    completion = _model(server).generate([_request(png)])[0]
    first, second = server.chat_requests()
    assert completion.status == "ok" and completion.attempts == 2
    assert second.t_arrival - first.t_arrival >= 0.4


def test_retry_after_ms_is_honoured_async(server, png):
    server.push({"status": 429, "headers": {"retry-after-ms": "300"}})
    model = _model(server)

    async def go():
        try:
            return await model.agenerate(_request(png))
        finally:
            await model.aclose()

    completion = asyncio.run(go())
    first, second = server.chat_requests()
    assert completion.status == "ok" and completion.attempts == 2
    assert second.t_arrival - first.t_arrival >= 0.3


def test_500s_are_retried(server, png):
    server.push({"status": 500}, {"status": 503})
    completion = _model(server).generate([_request(png)])[0]
    assert completion.status == "ok" and completion.attempts == 3
    assert [s.status for s in server.chat_requests()] == [500, 503, 200]


def test_exhausted_retries_give_a_fault_completion_not_an_answer(server, png):
    server.push(*[{"status": 500}] * 3)
    policy = RetryPolicy(max_retries=2, base_delay_s=0.001, max_delay_s=0.01)
    completion = _model(server, retry_policy=policy).generate([_request(png)])[0]
    assert completion.status == "fault" and completion.attempts == 3
    assert completion.text == "" and "after 3 attempt(s)" in completion.error
    assert "HTTP 500" in completion.error
    assert len(server.chat_requests()) == 3


def test_sdk_retries_are_off(server, png):
    server.push({"status": 429, "headers": {"Retry-After": "0"}})
    completion = _model(server, retry_policy=RetryPolicy(max_retries=0)).generate(
        [_request(png)])[0]
    assert completion.status == "fault" and "after 1 attempt" in completion.error
    assert len(server.chat_requests()) == 1  # the SDK did not retry on its own


def test_timeout_is_retried(server, png):
    server.push({"delay_s": 1.5})
    completion = _model(server, timeout_s=0.3).generate([_request(png)])[0]
    assert completion.status == "ok" and completion.attempts == 2


@pytest.mark.parametrize(("action", "status"), [
    ({"content": ""}, "error"),
    ({"content": None}, "error"),
    ({"content": "", "finish_reason": "length"}, "truncated"),
    ({"content": None, "finish_reason": "content_filter"}, "blocked"),
    ({"content": None, "refusal": "I can't help with that."}, "refused"),
])
def test_empty_or_blocked_answers_become_statuses(server, png, action, status):
    server.push(action)
    completion = _model(server).generate([_request(png)])[0]
    assert completion.status == status and completion.attempts == 1


def test_auth_error_fails_fast_without_leaking_the_key(server, png):
    server.push({"status": 401})
    with pytest.raises(ProviderError) as info:
        _model(server).generate([_request(png)])
    assert "401" in str(info.value) and KEY not in str(info.value)
    assert len(server.chat_requests()) == 1


@pytest.mark.parametrize("status", [400, 403, 404, 422])
def test_bad_request_fails_fast(server, png, status):
    server.push({"status": status})
    with pytest.raises(ProviderError):
        asyncio.run(_model(server).agenerate(_request(png)))
    assert len(server.chat_requests()) == 1


def test_exhausted_quota_is_not_retried_and_names_billing(server, png):
    server.push({"status": 429, "error_code": "insufficient_quota",
                 "error_message": "You exceeded your current quota"})
    with pytest.raises(ProviderError) as info:
        _model(server).generate([_request(png)])
    assert not isinstance(info.value, RetriesExhausted)
    assert "quota or billing is exhausted" in str(info.value)
    assert len(server.chat_requests()) == 1  # a rate limit would have been retried


@pytest.mark.parametrize("push", [
    {"status": 400, "error_code": "context_length_exceeded"},
    {"status": 400, "error_message": "This model's maximum context length is 4096 tokens. "
                                     "However, you requested 8192 output tokens and your "
                                     "prompt contains at least 61 input tokens"},
])
def test_context_overflow_first_turn_stops_later_turn_is_the_turns_error(server, png, push):
    """No dialogue fits when a first turn does not; a dialogue that outgrew it is an outcome."""
    server.push(push, push)
    first = TurnRequest((Message("system", "s"), Message("user", "first?", (png,))),
                        request_id="case/first")
    with pytest.raises(ProviderError) as info:
        _model(server, max_new_tokens=8192).generate([first])
    text = str(info.value)
    assert "does not fit the model's context" in text and "8192 new tokens" in text
    assert "--max-new-tokens" in text and "--max-model-len" in text
    assert "API key" not in text and "nothing was recorded" in text
    later = _model(server, max_new_tokens=8192).generate([_request(png)])[0]
    assert later.status == "error" and "outgrew the model's context" in later.error
    assert len(server.chat_requests()) == 2


def test_sync_generate_runs_requests_concurrently_within_the_bound(server, png):
    server.latency_s = 0.1
    completions = _model(server, concurrency=3).generate([_request(png)] * 7)
    assert [c.status for c in completions] == ["ok"] * 7
    assert server.stats.max_in_flight == 3


def test_missing_key_names_env_var_and_yaml_key(tmp_path):
    with pytest.raises(ConfigError) as info:
        OpenAIChatModel("gpt-5.4", env={}, api_keys=tmp_path / "none.yaml")
    assert "OPENAI_API_KEY" in str(info.value) and "openai.api_key" in str(info.value)


def test_key_from_yaml_and_yaml_not_read_when_env_has_it(server, png, tmp_path):
    keys = tmp_path / "api_keys.yaml"
    keys.write_text("openai:\n  api_key: sk-from-yaml-123456\n", encoding="utf-8")
    OpenAIChatModel("gpt-5.4", base_url=server.base_url, env={}, api_keys=keys,
                    retry_policy=FAST).generate([_request(png)])
    assert server.chat_requests()[-1].auth == "Bearer sk-from-yaml-123456"
    broken = tmp_path / "broken.yaml"
    broken.write_text("openai: [unclosed\n", encoding="utf-8")
    OpenAIChatModel("gpt-5.4", env={"OPENAI_API_KEY": KEY}, api_keys=broken)  # not read


def test_base_url_needs_no_key(server, png, tmp_path):
    model = OpenAIChatModel("qwen3-vl", base_url=server.base_url, env={},
                            api_keys=tmp_path / "none.yaml")
    assert model.generate([_request(png)])[0].status == "ok"


def test_azure_deployment_url_shape(server, png):
    model = AzureOpenAIChatModel("gpt-5.4", deployment="my-deploy", base_url=server.root_url,
                                 env={"AZURE_OPENAI_API_KEY": KEY,
                                      "OPENAI_API_VERSION": "2025-04-01-preview"},
                                 retry_policy=FAST)
    assert model.generate([_request(png)])[0].status == "ok"
    seen = server.chat_requests()[0]
    assert seen.path == ("/openai/deployments/my-deploy/chat/completions"
                         "?api-version=2025-04-01-preview")
    assert seen.body["model"] == "my-deploy" and "temperature" not in seen.body
    assert seen.auth == KEY  # Azure sends the key as the api-key header
    described = model.describe()
    assert described["deployment"] == "my-deploy" and KEY not in json.dumps(described)


def _azure(server, **kw):
    return AzureOpenAIChatModel("gpt-5.4", base_url=server.root_url,
                                env={"AZURE_OPENAI_API_KEY": KEY,
                                     "OPENAI_API_VERSION": "2025-04-01-preview"},
                                retry_policy=FAST, **kw)


@pytest.mark.parametrize(("deployment", "named"), [
    ("my-deploy", "--deployment ('my-deploy')"),
    (None, "--deployment ('gpt-5.4' (not given: the --model name))"),
])
def test_azure_404_names_the_deployment_flag(server, png, deployment, named):
    server.push({"status": 404, "error_code": "DeploymentNotFound",
                 "error_message": "The API deployment for this resource does not exist."})
    with pytest.raises(ProviderError) as info:
        _azure(server, deployment=deployment).generate([_request(png)])
    text = str(info.value)
    assert "HTTP 404" in text and named in text and "Check --model" not in text
    assert "2025-04-01-preview" in text and KEY not in text


def test_openai_404_still_names_the_model_flag(server, png):
    server.push({"status": 404, "error_code": "model_not_found"})
    with pytest.raises(ProviderError, match=r"Check --model \('gpt-5.4'\)"):
        _model(server).generate([_request(png)])


def test_assistant_images_never_reach_the_server(server, png):
    """A plugin that moves images into a reply is stopped where its request is made."""
    model = _model(server)
    request = _request(png)
    messages = list(request.messages)
    messages[2] = Message("assistant", "Answer: 2", (png,))
    with pytest.raises(ProviderError, match=r"case/turn: message 2 \(assistant\)"):
        model.generate([TurnRequest(tuple(messages), request_id=request.request_id)])
    with pytest.raises(ProviderError, match=r"case/turn: message 2 \(assistant\)"):
        asyncio.run(model.agenerate(dataclasses.replace(request, messages=tuple(messages))))
    assert server.chat_requests() == []


def test_azure_missing_endpoint_names_env_and_yaml(tmp_path):
    with pytest.raises(ConfigError) as info:
        AzureOpenAIChatModel("gpt-5.4", env={"AZURE_OPENAI_API_KEY": KEY},
                             api_keys=tmp_path / "none.yaml")
    assert "AZURE_OPENAI_ENDPOINT" in str(info.value) and "azure.endpoint" in str(info.value)


def test_cli_runs_openai_provider_async_and_keeps_the_key_out(server, tmp_path, monkeypatch):
    bundle = _load("stage03_bundle_for_llm", REPO / "tests" / "evaluation" / "stage03_bundle.py")
    bench = bundle.write_bundle(tmp_path / "bench")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    out = tmp_path / "out"
    argv = ["--provider", "openai", "--model", "gpt-5.4", "--base-url", server.base_url,
            "--benchmark-dir", str(bench), "--output-path", str(out), "--no-progress",
            "--concurrency", "3", "--max-retries", "2"]
    script = runpy.run_path(str(REPO / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"))
    assert script["main"](argv) == 0
    run_dir = out / "openai_gpt-5.4" / "oracle_implicit"
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    assert len(records) == len(server.chat_requests()) == 33
    assert server.stats.max_in_flight <= 3
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(encoding="utf-8"), path
    manifest = json.loads((run_dir / "run_manifest.json").read_text())
    assert manifest["provider_settings"]["params"]["reasoning_effort"] == "medium"
    assert script["main"](argv) == 0  # resume: nothing left to ask
    assert len(server.chat_requests()) == 33


@pytest.mark.parametrize(("provider", "names"), [
    ("openai", ("OPENAI_API_KEY", "openai.api_key")),
    ("azure", ("AZURE_OPENAI_API_KEY", "azure.api_key")),
    ("gemini", ("GEMINI_API_KEY", "gemini.api_key", "gemini.project")),
])
def test_cli_missing_key_is_one_clean_line(tmp_path, monkeypatch, capsys, provider, names):
    from utils.cli import run_main

    for var in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    bundle = _load("stage03_bundle_for_llm", REPO / "tests" / "evaluation" / "stage03_bundle.py")
    bench = bundle.write_bundle(tmp_path / "bench")
    script = runpy.run_path(str(REPO / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"))
    argv = ["--provider", provider, "--model", "gpt-5.4", "--benchmark-dir", str(bench),
            "--output-path", str(tmp_path / "out"), "--api-keys", str(tmp_path / "no.yaml"),
            "--no-progress"]
    assert run_main(script["main"], argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(name in err for name in names)


@pytest.mark.parametrize("model, kw", [
    ("gpt-5.4", {}),
    ("qwen3-vl", {"image_detail": "low", "no_thinking": True, "temperature": 0.7}),
])
def test_sent_body_bytes_equal_the_sdk_json_encoding(server, png, model, kw):
    from openai._utils._json import openapi_dumps

    m = _model(server, model, **kw)
    request = TurnRequest((Message("system", 'sys "quoted" ≥ é\n'),
                           Message("user", "first ✓?", (png, str(png))),
                           Message("assistant", "Answer: 2"),
                           Message("user", "second?", (png,))), request_id="case/turn")
    assert m.generate([request])[0].status == "ok"
    asyncio.run(m.agenerate(request))
    expected = openapi_dumps(m._body(request))
    assert [s.raw for s in server.chat_requests()] == [expected, expected]
    assert server.chat_requests()[0].headers["content-type"] == "application/json"


def test_image_cache_scales_with_concurrency_and_bounds_bytes(tmp_path, png):
    from utils.llm._api import ImageCache

    # the async runner keeps 2 * concurrency cases open, each re-sending up to 7 images per
    # turn: cycling over that working set must read every file once (an LRU of 8 per slot
    # missed on 70 % of the lookups)
    concurrency = 64  # large enough that the 256-entry floor does not hide the sizing
    model = _model_free(concurrency=concurrency)
    open_cases = [[tmp_path / f"case{c}_{i}.png" for i in range(7)]
                  for c in range(2 * concurrency)]
    for images in open_cases:
        for path in images:
            os.link(png, path)
    for turn in range(1, 8):  # turn t re-sends the case's first t images
        for images in open_cases:
            for path in images[:turn]:
                model.images.get(path, "data_url_json")
    assert model.images.misses == 7 * 2 * concurrency
    assert model.images.hits == sum(range(1, 8)) * 2 * concurrency - model.images.misses
    assert _model_free(concurrency=64).images.size == 1024
    cache = ImageCache(size=10, max_bytes=3 * len(ImageCache().get(png, "data_url")))
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"{i}.png")
        paths[-1].write_bytes(png.read_bytes())
        cache.get(paths[-1], "data_url")
    assert len(cache._items) == 3 and cache.nbytes <= cache.max_bytes
    assert [k[0] for k in cache._items] == [str(p) for p in paths[2:]]
    assert cache.get(png, "data_url_json") == json.dumps(cache.get(png, "data_url")).encode()


def _model_free(**kw):
    return OpenAIChatModel("gpt-5.4", base_url="http://127.0.0.1:9/v1", env={}, **kw)


@pytest.mark.parametrize("code", ["content_filter", "ResponsibleAIPolicyViolation"])
def test_a_provider_side_filter_is_blocked_not_the_models_refusal(server, png, code):
    server.push({"status": 400, "error_code": code, "error_message": "filtered"})
    completion = _model(server).generate([_request(png)])[0]
    assert completion.status == "blocked" and "filtered" in completion.error
    assert len(server.chat_requests()) == 1  # not retried: the same prompt is filtered again


# -- concurrency from the server's KV cache (docs/design.md, "Concurrency") -------------------

def test_parse_cache_config_reads_vllms_cache_gauge():
    assert parse_cache_config(vllm_metrics(1000, 16)) == {
        "num_gpu_blocks": 1000, "block_size": 16, "tokens": 16000, "prefix_caching": True}
    # a data-parallel server: one line per engine, each with the summed blocks
    two = parse_cache_config(vllm_metrics(2000, 16, engines=2, prefix_caching=False))
    assert two == {"num_gpu_blocks": 2000, "block_size": 16, "tokens": 32000,
                   "prefix_caching": False}
    assert parse_cache_config(vllm_metrics("None", 16)) is None  # still profiling
    assert parse_cache_config(vllm_metrics(0, 16)) is None
    assert parse_cache_config(vllm_metrics(1000, "x")) is None
    assert parse_cache_config(vllm_metrics(1000).replace("num_gpu_blocks=", "blocks=")) is None
    assert parse_cache_config('{"by_status": {}}') is None
    assert parse_cache_config("") is None


@pytest.mark.parametrize(("blocks", "dialogue", "per_request", "expected"), [
    (1000, 1000, 2, 7),  # 16000 tokens // 1008 (whole blocks) = 15 dialogues, 2 per request
    (1000, 1000, 1, 15),
    (1000, None, 1, 3),  # no footprint: the server's context, 4096 tokens
    (1000, 100_000, 1, 3),  # a footprint beyond the context is the context
    (10, 1000, 2, 1),  # the cache holds no whole dialogue: at least 1
    (10**7, 1000, 2, 256),  # vLLM's default max_num_seqs at most
])
def test_suggested_concurrency_keeps_the_open_dialogues_in_the_servers_kv_cache(
        blocks, dialogue, per_request, expected):
    with LoopbackServer(models=["m"], max_model_len=4096,
                        metrics=vllm_metrics(blocks, 16)) as srv:
        model = OpenAIChatModel("m", base_url=srv.base_url, env={})
        model.preflight()
        assert model.suggested_concurrency(dialogue, per_request) == expected
        assert model.suggested_concurrency(dialogue, per_request) == expected
        assert srv.metrics_requests == 1  # asked once
    # the provider runs at its suggestion: async clients and image cache follow it
    assert model.concurrency == expected
    assert model.images.size == max(256, 16 * expected)
    runtime = model.runtime_info()
    assert runtime["concurrency"] == expected
    rule = runtime["concurrency_rule"]
    footprint = -(-min(dialogue or 4096, 4096) // 16) * 16
    assert rule == {"applied": True, "kv_cache": parse_cache_config(vllm_metrics(blocks, 16)),
                    "dialogue_tokens": footprint, "footprint_source": "the heaviest dialogue"
                    if dialogue else "the server's context",
                    "dialogues_in_cache": blocks * 16 // footprint,
                    "dialogues_per_request": per_request, "concurrency": expected}


def test_no_kv_cache_at_the_server_means_no_suggestion(server):
    model = OpenAIChatModel("m", base_url=server.base_url, env={})  # /metrics: 404
    assert model.suggested_concurrency(1000, 2) is None
    assert model.concurrency == 16
    assert server.metrics_requests == 1
    rule = model.runtime_info()["concurrency_rule"]
    assert rule["applied"] is False and "vllm:cache_config_info" in rule["reason"]
    server.metrics = "# HELP something else\n"  # metrics without vLLM's cache config
    other = OpenAIChatModel("m", base_url=server.base_url, env={})
    assert other.suggested_concurrency(1000, 2) is None
    azure = AzureOpenAIChatModel("gpt-5.4", env={"AZURE_OPENAI_API_KEY": KEY,
                                                 "AZURE_OPENAI_ENDPOINT": server.root_url})
    assert azure.suggested_concurrency(1000, 2) is None
    assert server.metrics_requests == 2  # azure's endpoint is not asked
    assert "concurrency_rule" not in _model_free().runtime_info()


def test_cli_default_concurrency_follows_the_servers_kv_cache(tmp_path, monkeypatch):
    """Without --concurrency a run asks the server's /metrics and runs at the rule's value,
    recorded in provider_runtime (the manifest's first invocation); a resume at another
    --concurrency continues the run, without asking /metrics."""
    from chexpercept.evaluation import load_bundle, validate_bundle
    from chexpercept.evaluation.budget import check_budget

    bundle = _load("stage03_bundle_for_kv", REPO / "tests" / "evaluation" / "stage03_bundle.py")
    bench = bundle.write_bundle(tmp_path / "bench")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = tmp_path / "out"
    argv = ["--provider", "openai", "--model", "srv", "--base-url", "", "--benchmark-dir",
            str(bench), "--output-path", str(out), "--no-progress", "--max-new-tokens", "64",
            "--server-wait", "5"]
    script = runpy.run_path(str(REPO / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"))
    with LoopbackServer(models=["srv"], max_model_len=8192, latency_s=0.05) as srv:
        argv[argv.index("--base-url") + 1] = srv.base_url
        probe = OpenAIChatModel("srv", base_url=srv.base_url, env={}, max_new_tokens=64)
        probe.preflight()
        heaviest = check_budget(validate_bundle(load_bundle(bench)), probe)[0].total_tokens
        footprint = -(-heaviest // 16) * 16
        srv.metrics = vllm_metrics(4 * footprint // 16, 16)  # 4 dialogues: 2 per request
        assert script["main"](argv) == 0
        assert srv.stats.max_in_flight == 2
        run_dir = out / "openai_srv" / "oracle_implicit"
        runtime = json.loads((run_dir / "run_manifest.json").read_text())["provider_runtime"]
        assert runtime["concurrency"] == 2
        assert runtime["concurrency_rule"]["dialogue_tokens"] == footprint
        assert runtime["concurrency_rule"]["dialogues_in_cache"] == 4
        asked = len(srv.chat_requests())
        assert asked == 33 and srv.metrics_requests == 1
        # --concurrency given: /metrics is not asked, and the run resumes (not an identity)
        (run_dir / "all_results.json").unlink()
        records = run_dir / "records.jsonl"
        lines = records.read_text().splitlines(keepends=True)
        records.write_text("".join(lines[:20]))
        assert script["main"]([*argv, "--concurrency", "3"]) == 0
        assert len(srv.chat_requests()) == asked + 13 and srv.metrics_requests == 1
        assert srv.stats.max_in_flight == 3


def test_default_concurrency_is_the_providers_own_suggestion(monkeypatch, tmp_path):
    """The evaluation layer asks the provider (no branch on its name): vLLM's async engine
    suggests 256, a vLLM server its cache's value, everything else nothing (16)."""
    import sys

    import vllm_stub

    from chexpercept.evaluation.api import default_concurrency
    from utils.llm import create_model

    monkeypatch.setitem(sys.modules, "vllm", vllm_stub.make_vllm_module())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    folder = tmp_path / "local_model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3_vl"}', encoding="utf-8")
    (folder / "chat_template.jinja").write_text("{{ messages }}", encoding="utf-8")
    engine = create_model("opensource", "qwen3.5", model_path=str(folder), engine="async")
    assert default_concurrency(engine, []) == 256
    batched = create_model("opensource", "qwen3.5", model_path=str(folder))
    assert default_concurrency(batched, []) == 16
    assert default_concurrency(create_model("random", "random"), []) == 16
    with LoopbackServer(models=["m"], max_model_len=4096,
                        metrics=vllm_metrics(1024, 16)) as srv:  # 16384 tokens
        model = OpenAIChatModel("m", base_url=srv.base_url, env={})
        model.preflight()
        assert default_concurrency(model, []) == 2  # F = the context: 4 dialogues, 2 each
