"""The run records where its requests went, and prices only the provider's own API.

Issue 29, item 7: with ``ANTHROPIC_BASE_URL`` set, requests went to that server while
``run_manifest.json`` recorded ``"base_url": null`` and the log priced the run as real Claude;
``--provider anthropic --base-url ...`` was refused. The same held for every SDK variable that
redirects a client (``OPENAI_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``). docs/engines.md,
"Endpoints".
"""

from __future__ import annotations

import json

import httpx2
import pytest
from local_provider_helpers import run_eval_cli, stage03_bundle
from loopback import LoopbackServer
from test_anthropic_provider import KEY as ANTHROPIC_KEY
from test_anthropic_provider import Server as AnthropicServer
from test_gemini_provider import KEY as GEMINI_KEY
from test_gemini_provider import Fake, _request, png  # noqa: F401 - png is a fixture

from chexpercept.files import read_json, read_jsonl
from chexpercept.layouts import all_results_path, records_path, run_manifest_path
from utils.llm.anthropic_provider import AnthropicChatModel
from utils.llm.gemini_provider import GeminiChatModel
from utils.llm.openai_provider import AzureOpenAIChatModel, OpenAIChatModel

REDIRECTS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL",
             "GOOGLE_VERTEX_BASE_URL", "AZURE_OPENAI_ENDPOINT")


@pytest.fixture(autouse=True)
def _no_redirect(monkeypatch):
    """Each test sets the variables it means (a developer's shell may hold some)."""
    for name in REDIRECTS:
        monkeypatch.delenv(name, raising=False)


def _run(tmp_path, *argv):
    bench, out = stage03_bundle.write_bundle(tmp_path / "bench"), tmp_path / "out"
    code = run_eval_cli(["--benchmark-dir", str(bench), "--output-path", str(out),
                         "--no-progress", "--limit", "1", "--max-retries", "0", *argv])
    (manifest_path,) = out.rglob("run_manifest.json")
    return code, manifest_path.parent


@pytest.mark.parametrize("how", ["env", "flag"])
def test_anthropic_sent_elsewhere_is_recorded_and_not_priced(tmp_path, monkeypatch, capsys,
                                                             how):
    srv = AnthropicServer()
    try:
        monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        if how == "env":
            monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
        flag = ["--base-url", srv.url] if how == "flag" else []
        code, run_dir = _run(tmp_path, "--provider", "anthropic", "--model",
                             "claude-sonnet-4-5", *flag)
    finally:
        srv.close()
    assert code == 0 and len(srv.seen) == len(read_jsonl(records_path(run_dir))) > 0
    manifest = read_json(run_manifest_path(run_dir))
    assert manifest["provider_runtime"]["endpoint"].rstrip("/") == srv.url
    assert manifest["provider_settings"]["base_url"].rstrip("/") == srv.url  # not null
    (result,) = read_json(all_results_path(run_dir)).values()
    assert result["token_usage"]["input_tokens"] > 0  # the server reported usage ...
    assert result["token_usage"]["estimated_cost_usd"] is None  # ... which is not priced
    assert all(c["cost_usd"] is None for c in result["token_usage"]["per_call"])
    err = capsys.readouterr().err
    assert f"cost: NA: the requests go to {srv.url}" in err
    assert "not to the anthropic provider's own API (https://api.anthropic.com)" in err
    assert "estimated NA" in err


def test_openai_base_url_env_is_recorded_and_not_priced(tmp_path, monkeypatch, capsys):
    with LoopbackServer() as server:
        served = server.base_url
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", served)
        # gpt-5.4 has a price in cfg/pricing.yaml: the loopback server must not get it
        code, run_dir = _run(tmp_path, "--provider", "openai", "--model", "gpt-5.4")
        chat = [s for s in server.seen if s.path.endswith("/chat/completions")]
    assert code == 0 and len(chat) == len(read_jsonl(records_path(run_dir))) > 0
    manifest = read_json(run_manifest_path(run_dir))
    runtime = manifest["provider_runtime"]
    assert runtime["base_url"].rstrip("/") == served == runtime["endpoint"].rstrip("/")
    assert manifest["provider_settings"]["server"] == "openai-compatible"
    (result,) = read_json(all_results_path(run_dir)).values()
    assert result["token_usage"]["estimated_cost_usd"] is None
    err = capsys.readouterr().err
    assert "cost: NA: the requests go to" in err and "estimated NA" in err


def test_gemini_base_url_env_redirects_the_client_and_is_recorded(monkeypatch, png):  # noqa: F811
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9/proxy")
    fake = Fake()
    model = GeminiChatModel("gemini-3.1-pro-preview", env={"GEMINI_API_KEY": GEMINI_KEY},
                            http_client=httpx2.Client(transport=httpx2.MockTransport(fake)))
    (completion,) = model.generate([_request(png)])
    assert completion.status == "ok"
    assert fake.seen[0][0].startswith("http://127.0.0.1:9/proxy")  # where the request went
    assert model.endpoint_url() == "http://127.0.0.1:9/proxy"
    assert model.describe()["base_url"] == "http://127.0.0.1:9/proxy"
    assert model.runtime_info()["endpoint"] == "http://127.0.0.1:9/proxy"
    assert "http://127.0.0.1:9/proxy" in model.pricing_refusal()


def test_the_provider_s_own_api_is_priced_and_recorded_as_before():
    for model in (OpenAIChatModel("gpt-5.4", env={"OPENAI_API_KEY": "k"}),
                  AnthropicChatModel("claude-sonnet-4-5", env={"ANTHROPIC_API_KEY": "k"}),
                  GeminiChatModel("gemini-3.1-pro-preview", env={"GEMINI_API_KEY": "k"}),
                  GeminiChatModel("gemini-3.1-pro-preview", vertex=True,
                                  env={"GOOGLE_CLOUD_PROJECT": "p"}),
                  AzureOpenAIChatModel("gpt-5.4", env={
                      "AZURE_OPENAI_API_KEY": "k",
                      "AZURE_OPENAI_ENDPOINT": "https://lab.openai.azure.com"})):
        assert model.own_endpoint() is True, model.endpoint_url()
        assert model.pricing_refusal() is None
        settings = json.dumps(model.describe())
        assert '"base_url": "' not in settings and '"server": "openai-compatible"' not in settings
    assert OpenAIChatModel("gpt-5.4", env={"OPENAI_API_KEY": "k"}).runtime_info()[
        "endpoint"] == "https://api.openai.com/v1/"


@pytest.mark.parametrize("url", ["http://api.openai.com/v1",  # not https
                                 "https://api.openai.com.example.org/v1",
                                 "https://127.0.0.1:8000/v1"])
def test_a_look_alike_endpoint_is_not_the_provider_s_own(url):
    model = OpenAIChatModel("gpt-5.4", base_url=url, env={"OPENAI_API_KEY": "k"})
    assert model.own_endpoint() is False and url in model.pricing_refusal()


def test_an_azure_endpoint_elsewhere_is_not_priced():
    model = AzureOpenAIChatModel("gpt-5.4", base_url="http://127.0.0.1:8000",
                                 env={"AZURE_OPENAI_API_KEY": "k"})
    assert model.own_endpoint() is False
    assert "not to the azure provider's own API" in model.pricing_refusal()
    assert model.describe()["server"] is None  # Azure records its endpoint itself
