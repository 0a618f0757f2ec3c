"""gemini provider through the real google-genai SDK with httpx2 MockTransport clients."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx2
import numpy as np
import pytest
from PIL import Image

from utils.errors import ConfigError, ProviderError
from utils.llm.base import Message, TurnRequest
from utils.llm.gemini_provider import GeminiChatModel
from utils.llm.retry import RetryPolicy

KEY = "AIzaTEST-secret-0123456789"
FAST = RetryPolicy(max_retries=3, base_delay_s=0.001, max_delay_s=0.01)


def ok(text="Answer: 1", finish="STOP", **extra):
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                            "finishReason": finish}],
            "usageMetadata": {"promptTokenCount": 120, "candidatesTokenCount": 5,
                              "thoughtsTokenCount": 30, "cachedContentTokenCount": 40},
            "modelVersion": "gemini-3.1-pro-preview-0001", **extra}


def rate_limited(delay="0.3s"):
    return {"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED",
                      "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                   "retryDelay": delay}]}}


class Fake:
    """Scripted responses; records (url, json body, monotonic arrival) of every request."""

    def __init__(self, *script):
        self.script = list(script)
        self.seen = []

    def __call__(self, request):
        import time

        self.seen.append((str(request.url), json.loads(request.content), time.monotonic()))
        status, body = self.script.pop(0) if self.script else (200, ok())
        return httpx2.Response(status, json=body)

    async def acall(self, request):
        return self(request)


def _model(fake, model="gemini-3.1-pro-preview", **kw):
    kw.setdefault("retry_policy", FAST)
    kw.setdefault("env", {"GEMINI_API_KEY": KEY})
    return GeminiChatModel(
        model, http_client=httpx2.Client(transport=httpx2.MockTransport(fake)),
        async_http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(fake.acall)), **kw)


@pytest.fixture()
def png(tmp_path):
    path = tmp_path / "x.png"
    Image.fromarray(np.full((4, 4, 3), 9, np.uint8)).save(path)
    return path


def _request(png):
    return TurnRequest((Message("system", "be brief"), Message("user", "first?", (png,)),
                        Message("assistant", "Answer: 2"), Message("user", "second?")),
                       request_id="case/turn")


def test_payload_inline_images_roles_system_and_thinking(png):
    fake = Fake()
    completion = _model(fake).generate([_request(png)])[0]
    assert completion.status == "ok" and completion.text == "Answer: 1"
    url, body, _ = fake.seen[0]
    assert url.endswith("/models/gemini-3.1-pro-preview:generateContent")
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    first = body["contents"][0]["parts"]
    inline = first[0]["inlineData"]
    assert inline["mime_type"] == "image/png"
    assert base64.b64decode(inline["data"]) == png.read_bytes()
    assert first[1] == {"text": "first?"}
    assert body["systemInstruction"]["parts"] == [{"text": "be brief"}]
    config = body["generationConfig"]
    assert config["maxOutputTokens"] == 8192 and config["temperature"] == 1.0
    assert config["thinkingConfig"] == {"thinking_level": "MEDIUM"}


def test_usage_counts_thoughts_as_output(png):
    completion = _model(Fake()).generate([_request(png)])[0]
    usage = completion.usage
    assert (usage.input_tokens, usage.cached_input_tokens) == (120, 40)
    assert (usage.output_tokens, usage.thinking_tokens) == (35, 30)
    assert completion.response_model == "gemini-3.1-pro-preview-0001"


@pytest.mark.parametrize(("model", "thinking"), [
    ("gemini-3.1-pro-preview", {"thinking_level": "LOW"}),
    ("gemini-3-flash-preview", {"thinking_level": "MINIMAL"}),
    ("gemini-2.5-flash", {"thinking_budget": 0}),
])
def test_no_thinking_settings(png, model, thinking):
    fake = Fake()
    _model(fake, model, no_thinking=True).generate([_request(png)])
    assert fake.seen[0][1]["generationConfig"]["thinkingConfig"] == thinking


def test_429_retry_delay_honoured_sync(png):
    fake = Fake((429, rate_limited("0.3s")))
    completion = _model(fake).generate([_request(png)])[0]
    assert completion.status == "ok" and completion.attempts == 2
    assert fake.seen[1][2] - fake.seen[0][2] >= 0.3


def test_429_then_500_retried_async(png):
    fake = Fake((429, rate_limited("0.01s")),
                (500, {"error": {"code": 500, "message": "x", "status": "INTERNAL"}}))
    model = _model(fake)

    async def go():
        try:
            return await model.agenerate(_request(png))
        finally:
            await model.aclose()

    completion = asyncio.run(go())
    assert completion.status == "ok" and completion.attempts == 3 and len(fake.seen) == 3


def test_sdk_does_not_retry_on_its_own(png):
    fake = Fake((429, rate_limited("0s")))
    completion = _model(fake, retry_policy=RetryPolicy(max_retries=0)).generate(
        [_request(png)])[0]
    assert completion.status == "fault" and "after 1 attempt" in completion.error
    assert len(fake.seen) == 1


@pytest.mark.parametrize(("body", "status"), [
    # a provider-side block is its own status, never the model's refusal
    (ok("", "SAFETY"), "blocked"),
    (ok("partial", "PROHIBITED_CONTENT"), "blocked"),
    ({"promptFeedback": {"blockReason": "SAFETY"}}, "blocked"),
    ({"promptFeedback": {"blockReason": "OTHER"}}, "blocked"),
    (ok("", "OTHER"), "blocked"),
    ({"candidates": []}, "blocked"),
    (ok("Answer: 2", "OTHER"), "ok"),
    (ok("", "MAX_TOKENS"), "truncated"),
    (ok("", "STOP"), "error"),
])
def test_blocked_and_empty_answers_become_statuses(png, body, status):
    completion = _model(Fake((200, body))).generate([_request(png)])[0]
    assert completion.status == status and completion.attempts == 1


def test_thought_parts_are_not_the_answer(png):
    body = ok()
    body["candidates"][0]["content"]["parts"] = [{"text": "let me think", "thought": True},
                                                 {"text": "Answer: 2"}]
    assert _model(Fake((200, body))).generate([_request(png)])[0].text == "Answer: 2"


@pytest.mark.parametrize("code", [400, 401, 403, 404])
def test_auth_and_bad_request_fail_fast(png, code):
    fake = Fake((code, {"error": {"code": code, "message": f"no {KEY}", "status": "X"}}))
    with pytest.raises(ProviderError) as info:
        _model(fake).generate([_request(png)])
    assert len(fake.seen) == 1 and KEY not in str(info.value)
    hint = {400: "The API rejected the request", 401: "GEMINI_API_KEY", 403: "permissions",
            404: "Check --model"}[code]
    assert hint in str(info.value)


def test_context_overflow_first_turn_stops_later_turn_is_the_turns_error(png):
    too_long = (400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                                "The input token count (1200000) exceeds the maximum number "
                                "of tokens allowed (1048576)."}})
    fake = Fake(too_long, too_long)
    first = TurnRequest((Message("system", "s"), Message("user", "first?", (png,))),
                        request_id="case/first")
    with pytest.raises(ProviderError, match="does not fit the model's context"):
        _model(fake).generate([first])
    later = _model(fake).generate([_request(png)])[0]  # the history made it too long
    assert later.status == "error" and "outgrew the model's context" in later.error
    assert len(fake.seen) == 2


def test_missing_credentials_name_env_and_yaml_keys(tmp_path):
    with pytest.raises(ConfigError) as info:
        GeminiChatModel("gemini-3.1-pro", env={}, api_keys=tmp_path / "none.yaml")
    message = str(info.value)
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "gemini.api_key", "gemini.project"):
        assert name in message


def test_vertex_settings_from_yaml(tmp_path):
    keys = tmp_path / "api_keys.yaml"
    keys.write_text("gemini:\n  project: my-proj\n  location: us-central1\n"
                    "openai:\n  api_key: ${UNSET_VARIABLE}\n", encoding="utf-8")
    model = GeminiChatModel("gemini-3.1-pro", env={}, api_keys=keys)
    described = model.describe()
    assert (described["backend"], described["project"], described["location"]) == (
        "vertex", "my-proj", "us-central1")


def test_api_key_from_yaml_is_sent_and_not_described(png, tmp_path):
    keys = tmp_path / "api_keys.yaml"
    keys.write_text(f"gemini:\n  api_key: {KEY}\n", encoding="utf-8")
    seen_keys = []

    def handler(request):
        seen_keys.append(request.headers.get("x-goog-api-key"))
        return httpx2.Response(200, json=ok())

    model = GeminiChatModel("gemini-3.1-pro", env={}, api_keys=keys,
                            http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    assert model.generate([_request(png)])[0].status == "ok"
    assert seen_keys == [KEY] and KEY not in json.dumps(model.describe())


@pytest.mark.parametrize(("delay", "seconds"), [("30s", 30.0), ("1.5s", 1.5), (".5s", 0.5),
                                                (".s", None), ("1.2.3s", None), ("7", None)])
def test_retry_info_delay_is_parsed_or_ignored_never_raised(delay, seconds):
    from utils.llm.gemini_provider import _retry_delay_from_body

    body = {"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                   "retryDelay": delay}]}}
    assert _retry_delay_from_body(body) == seconds
