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
from utils.llm.base import ChatModel, Completion, PromptLimits, TurnRequest
from utils.llm.openai_provider import OpenAIChatModel, check_extra_body
from utils.llm.retry import RetryPolicy
from utils.llm.tokens import ImageRule, context_from_config, rule_for_model, text_tokens

FAST = RetryPolicy(max_retries=1, base_delay_s=0.001, max_delay_s=0.01)


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
    (["--provider", "dummy", "--max-new-tokens", "64"], "the dummy baseline generates no text"),
    (["--provider", "openai"], "--provider openai needs --model"),
    (["--provider", "gemini", "--model", "gemini-3.1-pro", "--extra-body", "{}"],
     "--extra-body applies to --provider openai / azure, not gemini"),
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
