"""anthropic provider through the real ``anthropic`` SDK against a loopback Messages API server.

The server (127.0.0.1, an ephemeral port, no network) answers ``POST /v1/messages`` from a
script of ``(status, body)`` pairs and records every request body.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from PIL import Image

from utils.errors import ConfigError, ProviderError
from utils.llm.base import Message, TurnRequest
from utils.llm.retry import RetryPolicy

pytest.importorskip("anthropic")
from utils.llm.anthropic_provider import AnthropicChatModel  # noqa: E402

KEY = "sk-ant-TEST-secret-0123456789"
FAST = RetryPolicy(max_retries=3, base_delay_s=0.001, max_delay_s=0.01)


def ok(text="Answer: 1", stop="end_turn"):
    content = [{"type": "text", "text": text}] if text else []
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-0001",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 100, "cache_read_input_tokens": 40,
                      "cache_creation_input_tokens": 0, "output_tokens": 5}}


def error(kind, message):
    return {"type": "error", "error": {"type": kind, "message": message}}


class Server:
    """Loopback Anthropic-compatible server with scripted replies."""

    def __init__(self, *script):
        self.script = list(script)
        self.seen = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.seen.append((self.path, headers, body))
                status, reply = outer.script.pop(0) if outer.script else (200, ok())
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status in (429, 529):
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server():
    made = []

    def make(*script):
        made.append(Server(*script))
        return made[-1]

    yield make
    for each in made:
        each.close()


def _model(srv, model="claude-sonnet-4-5", **kw):
    kw.setdefault("retry_policy", FAST)
    kw.setdefault("env", {"ANTHROPIC_API_KEY": KEY})
    return AnthropicChatModel(model, base_url=srv.url, **kw)


@pytest.fixture()
def png(tmp_path):
    path = tmp_path / "x.png"
    Image.fromarray(np.full((4, 4, 3), 9, np.uint8)).save(path)
    return path


def _request(png):
    return TurnRequest((Message("system", "be brief"), Message("user", "first?", (png,)),
                        Message("assistant", "Answer: 2"), Message("user", "second?")),
                       request_id="case/turn")


def test_payload_images_system_multiturn_and_usage(server, png):
    srv = server()
    completion = _model(srv).generate([_request(png)])[0]
    assert completion.status == "ok" and completion.text == "Answer: 1"
    path, headers, body = srv.seen[0]
    assert path == "/v1/messages" and headers.get("authorization") == f"Bearer {KEY}"
    assert body["system"] == "be brief" and body["model"] == "claude-sonnet-4-5"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    image, text = body["messages"][0]["content"]
    assert image["source"]["type"] == "base64" and image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == png.read_bytes()
    assert text == {"type": "text", "text": "first?"}
    assert body["max_tokens"] == 8192 and "thinking" not in body and "temperature" not in body
    usage = completion.usage
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (140, 40, 5)
    assert completion.response_model == "claude-test-0001"


def test_max_new_tokens_extra_body_and_thinking_mapping(server, png):
    srv = server()
    _model(srv, max_new_tokens=64, extra_body={"temperature": 0}, no_thinking=True).generate(
        [_request(png)])
    body = srv.seen[0][2]
    assert body["max_tokens"] == 64 and body["temperature"] == 0
    assert body["thinking"] == {"type": "disabled"}
    _model(srv, thinking_budget=2048).generate([_request(png)])
    body = srv.seen[1][2]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_bad_settings_are_refused(server):
    srv = server()
    with pytest.raises(ConfigError, match="exclude each other"):
        _model(srv, no_thinking=True, thinking_budget=2048)
    with pytest.raises(ConfigError, match="--extra-body may not set system"):
        _model(srv, extra_body={"system": "x"})
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        _model(srv, env={}, api_keys="/nonexistent/api_keys.yaml")


@pytest.mark.parametrize(("status", "kind"), [(529, "overloaded_error"),
                                              (429, "rate_limit_error"),
                                              (500, "api_error")])
def test_overloaded_rate_limit_and_5xx_are_retried(server, png, status, kind):
    srv = server((status, error(kind, "busy")), (status, error(kind, "busy")))
    completion = _model(srv).generate([_request(png)])[0]
    assert completion.status == "ok" and completion.attempts == 3 and len(srv.seen) == 3


def test_sdk_does_not_retry_on_its_own(server, png):
    srv = server((529, error("overloaded_error", "busy")))
    completion = _model(srv, retry_policy=RetryPolicy(max_retries=0)).generate(
        [_request(png)])[0]
    assert completion.status == "fault" and len(srv.seen) == 1


@pytest.mark.parametrize(("status", "kind", "message", "hint"), [
    (401, "authentication_error", f"invalid x-api-key {KEY}", "ANTHROPIC_API_KEY"),
    (403, "permission_error", "no", "permissions"),
    (400, "invalid_request_error", "Your credit balance is too low", "credits/billing"),
    (402, "billing_error", "payment required", "credits/billing"),
])
def test_auth_and_billing_are_fatal(server, png, status, kind, message, hint):
    srv = server((status, error(kind, message)))
    with pytest.raises(ProviderError) as info:
        _model(srv).generate([_request(png)])
    assert len(srv.seen) == 1 and KEY not in str(info.value) and hint in str(info.value)


@pytest.mark.parametrize(("reply", "status"), [
    (ok("I can't help with that.", "refusal"), "refused"),
    (ok("", "max_tokens"), "truncated"),
    (ok("Answer: 3", "max_tokens"), "ok"),
    (ok("", "end_turn"), "error"),
])
def test_stop_reasons_map_to_statuses(server, png, reply, status):
    srv = server((200, reply))
    completion = _model(srv).generate([_request(png)])[0]
    assert completion.status == status
    assert completion.finish_reason == reply["stop_reason"]
    if status == "refused":
        assert completion.text == "I can't help with that."


def test_async_path(server, png):
    srv = server((529, error("overloaded_error", "busy")))
    model = _model(srv)

    async def go():
        try:
            return await model.agenerate(_request(png))
        finally:
            await model.aclose()

    completion = asyncio.run(go())
    assert completion.status == "ok" and completion.attempts == 2


def test_claude_usage_is_priced_from_the_table():
    from utils.llm.base import Usage
    from utils.llm.pricing import cost_usd

    usage = Usage(input_tokens=1_000_000, cached_input_tokens=500_000, output_tokens=100_000)
    # cfg/pricing.yaml: claude-sonnet-4-5 input 3.00, cache read 0.30, output 15.00 per 1M
    expected = (500_000 * 3.00 + 500_000 * 0.30 + 100_000 * 15.00) / 1e6
    assert cost_usd("claude-sonnet-4-5-20250929", usage) == pytest.approx(expected)


def test_stage03_cli_runs_a_whole_multi_turn_bundle(server, tmp_path, monkeypatch):
    import importlib.util
    import runpy
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "stage03_bundle_for_anthropic", repo / "tests" / "evaluation" / "stage03_bundle.py")
    bundle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bundle)
    bench = bundle.write_bundle(tmp_path / "bench")
    srv = server((529, error("overloaded_error", "busy")))
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    out = tmp_path / "out"
    argv = ["--provider", "anthropic", "--model", "claude-sonnet-4-5", "--benchmark-dir",
            str(bench), "--output-path", str(out), "--no-progress", "--max-retries", "2",
            "--no-thinking", "--max-new-tokens", "512"]
    monkeypatch.setattr(AnthropicChatModel, "__init__", _with_base_url(srv.url))
    script = runpy.run_path(str(repo / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"))
    assert script["main"](argv) == 0
    run_dir = out / "anthropic_claude-sonnet-4-5_no_thinking" / "oracle_implicit"
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    assert len(records) == 33 and len(srv.seen) == 34  # one 529 retried
    assert max(len(body["messages"]) for _, _, body in srv.seen) > 1  # multi-turn history
    assert all(body["thinking"] == {"type": "disabled"} and body["max_tokens"] == 512
               for _, _, body in srv.seen)
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(encoding="utf-8"), path


def _with_base_url(url):
    original = AnthropicChatModel.__init__

    def init(self, model, config=None, **kw):
        kw.setdefault("base_url", url)
        kw.setdefault("retry_policy", FAST)
        original(self, model, config, **kw)

    return init
