"""Request control of Stage 03 (issue 10): flags per provider, server readiness, token budget.

The real-engine versions of these checks live in ``tests/engine/``; these run everywhere, with
the loopback OpenAI-compatible server and fakes.
"""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from pathlib import Path

import pytest
from local_provider_helpers import run_eval_cli, stage03_bundle
from loopback import LoopbackServer
from PIL import Image

from chexpercept.evaluation import load_bundle, validate_bundle
from chexpercept.evaluation.budget import check_budget, last_request
from utils.errors import ConfigError, ProviderError
from utils.llm import _images
from utils.llm._api import ImageCache
from utils.llm.base import ChatModel, Completion, Message, PromptLimits, TurnRequest
from utils.llm.openai_provider import OpenAIChatModel, check_extra_body
from utils.llm.retry import RetryPolicy
from utils.llm.tokens import ImageRule, context_from_config, rule_for_model, text_tokens

FAST = RetryPolicy(max_retries=1, base_delay_s=0.001, max_delay_s=0.01)


@pytest.fixture()
def png_file(tmp_path):
    path = tmp_path / "x.png"
    Image.new("L", (8, 8), 100).save(path)
    return path


def _one(image: Path) -> TurnRequest:
    return TurnRequest((Message("system", "sys"), Message("user", "q?", (image,))),
                       request_id="case/turn")


# -- image-token rules ----------------------------------------------------------------------
@pytest.mark.parametrize(("rule", "size", "tokens"), [
    (ImageRule("qwen", {"patch_size": 14, "merge_size": 2, "max_pixels": 12544}), (1024, 1024),
     16),  # the tests' tiny Qwen2-VL (checked against vLLM in tests/engine)
    (ImageRule("qwen", {"patch_size": 14, "merge_size": 2}), (1024, 1024), 37 * 37),
    (ImageRule("qwen", {"patch_size": 16, "merge_size": 2}), (1024, 1024), 32 * 32),
    (ImageRule("qwen", {"patch_size": 14, "merge_size": 2, "min_pixels": 56 * 56}), (8, 8), 4),
    (ImageRule("fixed", {"tokens": 256}), (1024, 1024), 256),
    (ImageRule("internvl"), (1024, 1024), 256 * 10),  # 3 x 3 tiles + thumbnail
    (ImageRule("internvl"), (448, 448), 256),
    (ImageRule("openai"), (1024, 1024), 85 + 170 * 4),
    (ImageRule("openai"), (4096, 1024), 85 + 170 * 4),  # fits 2048 x 512: 4 x 1 tiles
    (ImageRule("gemini"), (300, 300), 258),
    (ImageRule("gemini"), (1024, 1024), 258 * 4),
    (ImageRule(), (1024, 1024), 37 * 37),
])
def test_image_token_rules(rule, size, tokens):
    assert rule.tokens(*size) == tokens


def test_rules_come_from_the_model_folder_else_the_family(tmp_path):
    (tmp_path / "processor_config.json").write_text(
        '{"image_processor": {"patch_size": 14, "merge_size": 2, '
        '"size": {"shortest_edge": 3136, "longest_edge": 12544}}}', encoding="utf-8")
    (tmp_path / "config.json").write_text('{"text_config": {"max_position_embeddings": 32768}}',
                                          encoding="utf-8")
    rule = rule_for_model("anything", tmp_path)
    assert rule == ImageRule("qwen", {"patch_size": 14, "merge_size": 2, "min_pixels": 3136,
                                      "max_pixels": 12544})
    assert context_from_config(tmp_path) == 32768
    assert rule_for_model("google/medgemma-27b-it").params == {"tokens": 256}
    assert rule_for_model("google/gemma-4-31B-it").params == {"tokens": 280}
    assert rule_for_model("OpenGVLab/InternVL3_5-38B").kind == "internvl"
    assert rule_for_model("gpt-5.4").kind == "openai"
    assert rule_for_model("gemini-3.1-pro").kind == "gemini"
    assert rule_for_model("my-server-model").kind == "generic"
    assert text_tokens("x" * 30) == 10  # 3 characters a token without a tokenizer


# -- token budget ---------------------------------------------------------------------------
class LimitedModel(ChatModel):
    """A provider that only reports limits (and optionally exact counts)."""

    provider = "limited"

    def __init__(self, limits: PromptLimits, exact: int | None = None) -> None:
        super().__init__("limited")
        self.limits, self.exact, self.counted = limits, exact, 0

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        raise AssertionError("the budget check must not generate")

    def prompt_limits(self) -> PromptLimits:
        return self.limits

    def count_prompt_tokens(self, request: TurnRequest) -> int | None:
        self.counted += 1
        return self.exact


@pytest.fixture()
def cases(tmp_path):
    root = tmp_path / "bench"
    stage03_bundle.write_bundle(root)
    return validate_bundle(load_bundle(root))


def test_heaviest_request_is_the_last_turn_with_every_image(cases):
    case = next(c for c in cases if c.key_id == "effusion_s50000001_positive_0")
    request = last_request(case)
    assert sum(len(m.images) for m in request.messages) == 7
    assert len(request.messages) == 1 + 2 * (len(case.turns) - 1) + 1
    assert request.messages[2].text == "Answer: 1"  # earlier answers: the ground truth


def test_more_images_than_the_model_takes_is_an_error_naming_the_case(cases):
    with pytest.raises(ConfigError, match=r"_positive_0: its last turn carries 7 images but "
                                          r"the model accepts 5"):
        check_budget(cases, LimitedModel(PromptLimits(max_images=5)))


def test_an_output_cap_that_fills_the_context_is_an_error(cases):
    limits = PromptLimits(context_tokens=4096, max_new_tokens=8192, context_source="the server",
                          context_flag="the server's --max-model-len")
    with pytest.raises(ConfigError) as info:
        check_budget(cases, LimitedModel(limits))
    assert "8192 new tokens (--max-new-tokens)" in str(info.value)
    assert "4096 tokens (the server)" in str(info.value)


def test_an_exact_count_over_the_context_is_an_error_an_estimate_a_warning(cases, caplog):
    limits = PromptLimits(context_tokens=1000, max_new_tokens=100)
    with pytest.raises(ConfigError, match="counted by the server"):
        check_budget(cases, LimitedModel(limits, exact=950))
    with caplog.at_level(logging.WARNING):
        budgets = check_budget(cases, LimitedModel(PromptLimits(context_tokens=300,
                                                                max_new_tokens=100)))
    assert not budgets[0].exact and budgets[0].total_tokens > 300
    assert budgets[0].key_id in caplog.text and "an estimate" in caplog.text
    ok = check_budget(cases, LimitedModel(PromptLimits(context_tokens=65536), exact=900))
    assert {b.qa_path for b in ok} == {"revision_required", "revision_free", "lesion_free"}
    assert ok[0].total_tokens == 900  # no output cap: nothing reserved


# -- image bounds -----------------------------------------------------------------------------
def _png(path: Path, size: tuple[int, int], mode: str = "L") -> Path:
    Image.new(mode, size, 128).save(path)
    return path


def test_image_bounds(tmp_path):
    assert _images.bounded_size(2000, 1000, 1000, None) == (1000, 500)
    assert _images.bounded_size(2000, 1000, None, 500_000) == (1000, 500)
    assert _images.bounded_size(800, 600, 1024, 10**6) == (800, 600)
    big = _png(tmp_path / "big.png", (2048, 1024))
    data, mime = _images.read_bounded(big, 1024)
    with Image.open(io.BytesIO(data)) as img:
        assert (img.size, img.mode, mime) == ((1024, 512), "L", "image/png")
    small = _png(tmp_path / "small.png", (100, 50))
    assert _images.read_bounded(small, 1024)[0] == small.read_bytes()  # sent as stored
    cache = ImageCache(max_side=1024)
    assert cache.describe() == {"max_image_side": 1024}
    with pytest.raises(ConfigError, match="--max-image-side must be >= 1"):
        ImageCache(max_side=0)


# -- OpenAI-compatible servers ----------------------------------------------------------------
def test_extra_body_is_checked_and_sent_last(tmp_path):
    with pytest.raises(ConfigError, match="may not set messages, model"):
        check_extra_body({"model": "x", "messages": []})
    with pytest.raises(ConfigError, match="not valid JSON data"):
        check_extra_body({"x": float("nan")})
    model = OpenAIChatModel("srv", base_url="http://127.0.0.1:9/v1", env={},
                            extra_body={"top_k": 1, "temperature": 0.5}, max_new_tokens=64)
    params = model.request_params()
    assert params["top_k"] == 1 and params["temperature"] == 0.5 and params["max_tokens"] == 64
    assert model.describe()["extra_body"] == {"top_k": 1, "temperature": 0.5}
    plain = OpenAIChatModel("srv", base_url="http://127.0.0.1:9/v1", env={})
    assert "extra_body" not in plain.describe()  # manifests of earlier runs stay equal


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_preflight_waits_for_a_starting_server_then_checks_the_model(caplog, monkeypatch):
    import utils.llm.openai_provider as op

    monkeypatch.setattr(op, "SERVER_POLL_S", 0.1)
    port = _free_port()
    server = LoopbackServer(models=["served"], max_model_len=4096, port=port)
    timer = threading.Timer(0.8, server.start)
    timer.start()
    try:
        model = OpenAIChatModel("served", base_url=f"http://127.0.0.1:{port}/v1", env={},
                                server_wait_s=30, retry_policy=FAST)
        started = time.monotonic()
        with caplog.at_level(logging.INFO):
            model.preflight()
        assert time.monotonic() - started >= 0.5
        assert "waiting for the server" in caplog.text and "is ready" in caplog.text
        assert model.prompt_limits().context_tokens == 4096
        assert server.chat_requests() == []  # nothing was asked while waiting
        wrong = OpenAIChatModel("other", base_url=server.base_url, env={})
        with pytest.raises(ProviderError, match=r"serves 'served', not --model 'other': pass "
                                                r"--model served"):
            wrong.preflight()
    finally:
        timer.cancel()
        server.stop()


def test_preflight_gives_up_after_server_wait(monkeypatch):
    import utils.llm.openai_provider as op

    monkeypatch.setattr(op, "SERVER_POLL_S", 0.05)
    model = OpenAIChatModel("x", base_url=f"http://127.0.0.1:{_free_port()}/v1", env={},
                            server_wait_s=0.3)
    with pytest.raises(ProviderError, match=r"did not become ready in 0.3 s .*--server-wait"):
        model.preflight()


def test_connection_refused_after_retries_records_nothing_and_stops(tmp_path, capsys):
    bench = tmp_path / "bench"
    stage03_bundle.write_bundle(bench)
    argv = ["--benchmark-dir", str(bench), "--output-path", str(tmp_path / "out"),
            "--provider", "openai", "--model", "srv", "--max-retries", "0",
            "--base-url", f"http://127.0.0.1:{_free_port()}/v1", "--server-wait", "0",
            "--no-progress"]
    with pytest.raises(ProviderError, match="did not become ready"):
        run_eval_cli(argv)
    assert not list((tmp_path / "out").rglob("records.jsonl"))


# -- flags the chosen provider would ignore ---------------------------------------------------
@pytest.mark.parametrize(("argv", "message"), [
    (["--provider", "dummy", "--max-new-tokens", "64"],
     "--max-new-tokens applies to --provider .*, not dummy"),
    (["--provider", "openai"], "--provider openai needs --model"),
    (["--provider", "gemini", "--model", "gemini-3.1-pro", "--extra-body", "{}"],
     "--extra-body applies to --provider openai / azure / anthropic, not gemini"),
    (["--provider", "random", "--max-image-side", "512"], "--max-image-side applies to"),
    (["--provider", "azure", "--model", "gpt-5.4", "--server-wait", "5"],
     "--server-wait applies to --provider openai"),
    (["--provider", "openai", "--model", "m", "--vllm-engine", "async"],
     "--vllm-engine applies to --provider opensource"),
])
def test_flags_a_provider_would_ignore_are_refused(tmp_path, argv, message):
    bench = tmp_path / "bench"
    stage03_bundle.write_bundle(bench)
    with pytest.raises(ConfigError, match=message):
        run_eval_cli(["--benchmark-dir", str(bench), "--output-path", str(tmp_path), *argv])


def test_help_lists_every_provider(capsys):
    with pytest.raises(SystemExit):
        run_eval_cli(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in ("dummy", "random", "oracle", "opensource", "transformers", "openai", "azure",
                 "gemini"):
        assert f"{name} (" in text
    assert "Available in this version" not in text


def test_servers_without_tokenize_fall_back_to_the_estimate(tmp_path):
    with LoopbackServer(models=["srv"]) as server:
        model = OpenAIChatModel("srv", base_url=server.base_url, env={})
        request = TurnRequest(())
        assert model.count_prompt_tokens(request) is None
        assert model.count_prompt_tokens(request) is None
        assert server.tokenize_requests == 1  # a server without /tokenize is not asked again
        assert server.chat_requests() == []


def test_a_provider_without_limits_is_not_checked(cases):
    model = LimitedModel(PromptLimits())
    assert check_budget(cases, model) == [] and model.counted == 0


# -- break-it findings: faults are never answers, bad input gets one clear message ------------
@pytest.mark.parametrize("status", [402, 405, 410, 413, 418, 451])
def test_unlisted_http_statuses_stop_the_run_instead_of_being_recorded(png_file, status):
    with LoopbackServer() as server:
        server.push({"status": status})
        model = OpenAIChatModel("srv", base_url=server.base_url, env={}, retry_policy=FAST)
        with pytest.raises(ProviderError, match=f"HTTP {status}"):
            model.generate([_one(png_file)])
        assert len(server.chat_requests()) == 1


@pytest.mark.parametrize("body", [
    {"error": {"message": "upstream overloaded"}},
    {"choices": []},
    [1, 2],
    {"choices": ["x"]},
    {"choices": [{"message": "text", "finish_reason": "stop"}]},
    {"choices": [{"message": {"content": 7}, "finish_reason": "stop"}]},
    {"choices": [{"message": {"content": "Ans"}, "finish_reason": "abort"}]},
    {"choices": [{"message": {"content": ""}, "finish_reason": "error"}]},
])
def test_a_200_that_is_no_completion_is_a_retried_fault_never_an_answer(png_file, body):
    with LoopbackServer() as server:
        server.push({"body": body}, {"body": body})
        model = OpenAIChatModel("srv", base_url=server.base_url, env={}, retry_policy=FAST)
        fault = model.generate([_one(png_file)])[0]
        assert fault.status == "fault" and "unusable response" in fault.error
        server.push({"body": body})
        completion = model.generate([_one(png_file)])[0]  # retried: the next answer counts
        assert completion.status == "ok" and completion.attempts == 2


def test_malformed_usage_counts_are_zero_not_a_crash(png_file):
    body = {"choices": [{"message": {"content": "Answer: 1"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": "abc", "completion_tokens": -4,
                      "prompt_tokens_details": "x"}}
    with LoopbackServer() as server:
        server.push({"body": body})
        completion = OpenAIChatModel("srv", base_url=server.base_url, env={}).generate(
            [_one(png_file)])[0]
    assert completion.text == "Answer: 1"
    assert (completion.usage.input_tokens, completion.usage.output_tokens,
            completion.usage.cached_input_tokens) == (0, 0, 0)


def test_extra_body_cannot_override_the_output_cap_and_keeps_no_thinking():
    for key, flag in (("max_tokens", "--max-new-tokens"),
                      ("max_completion_tokens", "--max-new-tokens"),
                      ("reasoning_effort", "--reasoning-effort")):
        with pytest.raises(ConfigError, match=f"may not set {key}: set by {key} \\({flag}\\)"):
            check_extra_body({key: 1})
    with pytest.raises(ConfigError, match="nested deeper than"):
        deep: list = []
        for _ in range(20):
            deep = [deep]
        check_extra_body({"a": deep})
    model = OpenAIChatModel("srv", base_url="http://127.0.0.1:9/v1", env={}, no_thinking=True,
                            extra_body={"chat_template_kwargs": {"foo": 1}})
    assert model.request_params()["chat_template_kwargs"] == {"foo": 1,
                                                              "enable_thinking": False}


@pytest.mark.parametrize("url", ["", "  ", "ftp://127.0.0.1:8000/v1", "127.0.0.1:8000/v1",
                                 "not a url", "http://127.0.0.1:99999/v1", "http:///v1",
                                 "http://[::1/v1", "http://h:port/v1"])
def test_base_urls_that_cannot_work_are_refused_at_once(url):
    with pytest.raises(ConfigError, match="--base-url"):
        OpenAIChatModel("srv", base_url=url, env={})


def test_base_url_credentials_are_hidden_and_the_address_is_not_part_of_the_run():
    model = OpenAIChatModel("srv", base_url="http://user:s3cret@127.0.0.1:8000/v1/", env={})
    assert model.base_url == "http://user:s3cret@127.0.0.1:8000/v1"
    assert model.runtime_info()["base_url"] == "http://***@127.0.0.1:8000/v1"
    assert "s3cret" not in model.server_label and "s3cret" not in str(model.describe())
    moved = OpenAIChatModel("srv", base_url="http://127.0.0.1:9000/v1", env={})
    assert moved.runtime_info()["base_url"] == "http://127.0.0.1:9000/v1"
    # the same model served at another address (or with a trailing slash) is the same run
    assert moved.describe() == model.describe() and model.describe()["server"]
    assert OpenAIChatModel("gpt-5.4", env={"OPENAI_API_KEY": "k"}).describe()["server"] is None


def test_a_tls_mismatch_stops_the_wait_at_once():
    with LoopbackServer(models=["srv"]) as server:
        model = OpenAIChatModel("srv", base_url=server.base_url.replace("http:", "https:"),
                                env={}, server_wait_s=600)
        started = time.monotonic()
        with pytest.raises(ProviderError, match="TLS handshake .* use --base-url http://"):
            model.preflight()
        assert time.monotonic() - started < 30


@pytest.mark.parametrize(("models", "context"), [
    ([{"id": 1}, {"id": "srv", "max_model_len": -5}], None),
    ([{"object": "model"}, {"id": "srv", "max_model_len": True}], None),
    ([{"id": "srv", "max_model_len": 8192}], 8192),
])
def test_hostile_model_lists_are_read_carefully(monkeypatch, models, context):
    model = OpenAIChatModel("srv", base_url="http://127.0.0.1:9/v1", env={})
    monkeypatch.setattr(model, "_get_json", lambda url, timeout_s: (200, {"data": models}))
    model.preflight()
    assert model.prompt_limits().context_tokens == context


@pytest.mark.parametrize("answer", [(404, {"detail": "Not Found"}), (401, {"error": "no"}),
                                    (200, None), (200, ["srv"])])
def test_a_server_without_a_usable_model_list_is_used_with_a_warning(monkeypatch, caplog,
                                                                      answer):
    model = OpenAIChatModel("srv", base_url="http://127.0.0.1:9/v1", env={})
    monkeypatch.setattr(model, "_get_json", lambda url, timeout_s: answer)
    with caplog.at_level(logging.WARNING):
        model.preflight()
    assert "is not checked against it" in caplog.text


@pytest.mark.parametrize("flags", [["--server-wait", "nan"], ["--server-wait", "-1"],
                                   ["--request-timeout", "0"], ["--request-timeout", "inf"],
                                   ["--extra-body", "{" * 1200], ["--extra-body", "1" * 5000]])
def test_nonsense_numbers_and_json_are_refused_by_the_parser(tmp_path, capsys, flags):
    with pytest.raises(SystemExit) as info:
        run_eval_cli(["--provider", "openai", "--model", "m", *flags])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in err and len(err) < 400


def test_server_wait_needs_a_base_url_and_validate_only_needs_no_model(tmp_path):
    bench = tmp_path / "bench"
    stage03_bundle.write_bundle(bench)
    with pytest.raises(ConfigError, match="--server-wait applies to a server given with"):
        run_eval_cli(["--benchmark-dir", str(bench), "--provider", "openai", "--model", "m",
                      "--server-wait", "5"])
    assert run_eval_cli(["--benchmark-dir", str(bench), "--provider", "openai",
                         "--validate-only", "--no-progress"]) == 0
    with pytest.raises(ConfigError, match="e.g. --model gemini-"):
        run_eval_cli(["--benchmark-dir", str(bench), "--provider", "gemini"])


def test_images_of_any_mode_downscale_and_unsendable_formats_fail_validation(tmp_path):
    cmyk = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (400, 200), (0, 50, 100, 0)).save(cmyk)
    data, mime = _images.read_bounded(cmyk, 100)
    with Image.open(io.BytesIO(data)) as img:
        assert (img.size, img.mode, mime) == ((100, 50), "RGB", "image/png")
    from chexpercept.bundle import _image_info

    tiff = tmp_path / "x.tiff"
    Image.new("L", (8, 8)).save(tiff)
    problem, _ = _image_info(tiff)
    assert "is a TIFF image" in problem and "PNG" in problem


def test_the_estimate_uses_the_size_images_are_sent_at(cases):
    for case in cases:
        for turn in case.turns:
            for path in turn.images:
                Image.new("L", (1024, 1024), 90).save(path)
    plain = check_budget(cases, LimitedModel(PromptLimits(context_tokens=10**6)))
    bounded = check_budget(cases, LimitedModel(PromptLimits(context_tokens=10**6,
                                                            image_bounds=(64, None))))
    assert bounded[0].prompt_tokens < plain[0].prompt_tokens


def test_tokenize_counts_that_are_not_positive_integers_are_not_trusted(monkeypatch):
    import httpx2

    model = OpenAIChatModel("srv", base_url="http://127.0.0.1:9/v1", env={})

    class Answer:
        status_code = 200

        def __init__(self, count):
            self.count = count

        def json(self):
            return {"count": self.count}

    for bad in (-1, True, 0, "12"):
        model._tokenize_supported = None
        monkeypatch.setattr(httpx2, "post", lambda *a, bad=bad, **k: Answer(bad))
        assert model.count_prompt_tokens(TurnRequest(())) is None


def test_a_base_url_without_v1_is_named_with_the_fix(monkeypatch):
    model = OpenAIChatModel("srv", base_url="http://127.0.0.1:9", env={})
    answers = {"http://127.0.0.1:9/models": (404, None),
               "http://127.0.0.1:9/v1/models": (200, {"data": [{"id": "srv"}]})}
    monkeypatch.setattr(model, "_get_json", lambda url, timeout_s: answers[url])
    with pytest.raises(ProviderError, match=r"use --base-url http://127.0.0.1:9/v1"):
        model.preflight()
