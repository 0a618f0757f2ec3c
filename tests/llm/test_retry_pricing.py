"""Retry policy, Retry-After parsing, api_keys.yaml resolution and the YAML price table."""

from __future__ import annotations

import email.utils
import logging

import numpy as np
import pytest

from utils.errors import ConfigError, ProviderError
from utils.llm import pricing
from utils.llm.base import Usage
from utils.llm.keys import ApiKeys, redact, resolve
from utils.llm.retry import (
    RETRY_AFTER_JITTER,
    Failure,
    RequestFailed,
    Retrier,
    RetriesExhausted,
    RetryPolicy,
    backoff_delay,
    parse_retry_after,
)


def test_parse_retry_after_forms():
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=1_000_000) == pytest.approx(30.0)
    assert parse_retry_after({"retry-after": "soon"}) is None
    # NaN is no wait (it would poison comparisons and sleep); garbage ms falls back to seconds
    assert parse_retry_after({"retry-after": "nan"}) is None
    assert parse_retry_after({"retry-after-ms": "NaN", "retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "soon", "retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "-5"}) == 0.0
    assert parse_retry_after({"retry-after": "inf"}) == float("inf")  # capped by the policy
    # an absurd date is no wait (was OverflowError); "-0000" is UTC, not the local zone
    assert parse_retry_after({"retry-after": "Mon, 99999999999999999999 Jan 2020 00:00:00 GMT"}
                             ) is None
    assert parse_retry_after({"retry-after": "Mon, 12 Jan 1970 13:47:10 -0000"},
                             now=1_000_000) == pytest.approx(30.0)
    assert parse_retry_after({}) is None and parse_retry_after(None) is None


def test_full_jitter_bounds_and_retry_after_is_the_wait():
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=8.0, max_retry_after_s=20.0)
    rng = np.random.default_rng(0)
    for k in range(8):
        delays = [backoff_delay(policy, k, None, rng) for _ in range(200)]
        assert 0.0 <= min(delays) and max(delays) <= min(8.0, 2.0 ** k)
    # a server's wait is honoured (never undercut) and replaces the backoff on the first retry:
    # 0.05 s asked -> 0.05-0.055 s, not max(0.05, U(0, 1)) (mean 0.5 s)
    waits = [backoff_delay(policy, 0, 0.05, rng) for _ in range(200)]
    assert min(waits) >= 0.05 and max(waits) <= 0.05 * (1 + RETRY_AFTER_JITTER)
    assert len(set(waits)) > 1  # spread, not lock-step
    assert backoff_delay(policy, 0, 0.0, rng) == 0.0
    # refused again: never less than asked, and backing off as without the header, so a server
    # that keeps answering "Retry-After: 0" is not hammered
    later = [backoff_delay(policy, 3, 0.0, rng) for _ in range(200)]
    assert min(later) >= 0.0 and max(later) <= 8.0 and sum(later) / len(later) > 2.0
    assert all(backoff_delay(policy, 2, 5.0, rng) >= 5.0 for _ in range(50))
    assert backoff_delay(policy, 0, float("inf"), rng) <= 20.0 * (1 + RETRY_AFTER_JITTER)
    capped = [backoff_delay(policy, 0, 500.0, rng) for _ in range(20)]
    assert min(capped) >= 20.0 and max(capped) <= 20.0 * (1 + RETRY_AFTER_JITTER)


def _retrier(kinds, max_retries=3):
    sleeps = []
    calls = {"n": 0}

    def fn():
        i = calls["n"]
        calls["n"] += 1
        if i < len(kinds):
            raise ValueError(kinds[i])
        return "done"

    def classify(exc):
        kind = str(exc)
        return Failure(kind, f"boom {kind}", 500 if kind == "retryable" else 401,
                       retry_after_s=0.5 if kind == "retryable" else None)

    retrier = Retrier(RetryPolicy(max_retries=max_retries, base_delay_s=0.0), classify, "t")
    return retrier, fn, sleeps, calls


def test_retrier_retries_then_succeeds_and_counts():
    retrier, fn, sleeps, calls = _retrier(["retryable", "retryable"])
    assert retrier.call(fn, sleep=sleeps.append) == ("done", 3)
    assert len(sleeps) == 2 and all(0.5 <= s <= 0.5 * (1 + RETRY_AFTER_JITTER) for s in sleeps)
    assert retrier.stats.retries == 2 and retrier.stats.attempts == 3


def test_retrier_exhausted_is_a_fault_not_an_answer():
    retrier, fn, sleeps, calls = _retrier(["retryable"] * 5, max_retries=2)
    with pytest.raises(RetriesExhausted) as info:
        retrier.call(fn, sleep=sleeps.append)
    assert calls["n"] == 3 and len(sleeps) == 2 and info.value.attempts == 3
    assert "after 3 attempt(s)" in str(info.value) and "nothing was recorded" in str(info.value)


def test_retrier_fatal_raises_provider_error_at_once():
    retrier, fn, sleeps, calls = _retrier(["fatal"])
    with pytest.raises(ProviderError, match="boom fatal") as info:
        retrier.call(fn, sleep=sleeps.append)
    assert calls["n"] == 1 and sleeps == []
    assert not isinstance(info.value, RetriesExhausted)


def test_retrier_request_failure_is_not_retried():
    retrier, fn, sleeps, calls = _retrier(["request"])
    with pytest.raises(RequestFailed) as info:
        retrier.call(fn, sleep=sleeps.append)
    assert not info.value.exhausted and calls["n"] == 1


def test_unclassified_exceptions_propagate():
    retrier = Retrier(RetryPolicy(), lambda exc: None, "t")
    with pytest.raises(KeyError):
        retrier.call(lambda: {}["x"])


def test_keys_env_first_then_only_the_needed_yaml_block(tmp_path):
    path = tmp_path / "k.yaml"
    path.write_text("azure:\n  api_key: ${NOT_SET_ANYWHERE}\nopenai:\n  api_key: yaml-key\n",
                    encoding="utf-8")
    keys = ApiKeys(path)
    assert resolve({"OPENAI_API_KEY": "env-key"}, ("OPENAI_API_KEY",), keys, "openai",
                   "api_key", what="x") == "env-key"
    # the azure block has an unset variable, but only the openai block is expanded
    assert resolve({}, ("OPENAI_API_KEY",), keys, "openai", "api_key", what="x") == "yaml-key"
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE"):
        resolve({}, ("AZURE_OPENAI_API_KEY",), keys, "azure", "api_key", what="x")


def test_redact_scrubs_key_shapes_and_given_secrets():
    text = redact("bad key sk-abcdef123456 and AIzaSyABCDEFGHIJKLMNOP and my-own-secret",
                  ["my-own-secret"])
    assert "sk-abc" not in text and "AIza" not in text and "my-own-secret" not in text


def test_prices_come_from_the_yaml_file(tmp_path):
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=0, output_tokens=1_000_000)
    table = tmp_path / "pricing.yaml"
    table.write_text("providers:\n  other: {image_tokens: 1, cache_min_tokens: 1}\n"
                     "models:\n  my-model:\n    aliases: [my-alias]\n    input: 1.0\n"
                     "    cached_input: 0.5\n    output: 2.0\n", encoding="utf-8")
    assert pricing.cost_usd("my-alias", usage, table) == pytest.approx(3.0)
    assert pricing.cost_usd("gpt-5.4", usage, table) is None


def test_shipped_table_matches_ids_aliases_snapshots_and_prefixes():
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=0, output_tokens=1_000_000)
    assert pricing.cost_usd("gemini-3.1-pro", usage) == pytest.approx(14.0)  # differences.md D37
    assert pricing.cost_usd("gemini-3.1-pro-preview", usage) == pytest.approx(14.0)
    assert pricing.cost_usd("models/gemini-3.1-flash-lite", usage) == pytest.approx(1.75)
    assert pricing.cost_usd("gpt-5.4-mini-2026-03-17", usage) == pytest.approx(5.25)
    assert pricing.cost_usd("GPT-5.4", usage) == pytest.approx(17.5)
    # exact match only: no substring guessing
    assert pricing.cost_usd("gpt-5.4-pro", usage) is None


def test_unknown_model_is_na_with_one_warning(caplog):
    pricing._warned.discard("mystery-model")
    with caplog.at_level(logging.WARNING, logger="utils.llm.pricing"):
        assert pricing.cost_usd("mystery-model", Usage(10, 0, 10)) is None
        assert pricing.cost_usd("mystery-model", Usage(10, 0, 10)) is None
    assert sum("mystery-model" in r.getMessage() for r in caplog.records) == 1


def test_invalid_table_is_a_config_error(tmp_path):
    table = tmp_path / "pricing.yaml"
    table.write_text("providers:\n  other: {image_tokens: 1, cache_min_tokens: 1}\n"
                     "models:\n  m:\n    provider: nope\n    input: 1\n    cached_input: 1\n"
                     "    output: 1\n    colour: red\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="colour"):
        pricing.load_pricing(table)


class _TopRng:
    """A jitter source that always draws the top of its range (the longest backoff)."""

    def uniform(self, low, high):
        return high


@pytest.mark.parametrize(("status", "woken"), [(None, True), (503, True), (429, False)])
def test_a_retry_waiting_out_an_outage_is_woken_when_another_request_succeeds(status, woken):
    import asyncio

    def classify(exc):
        return Failure("retryable", "down", status)

    backoff = 1.5  # the other request succeeds after 0.2 s
    retrier = Retrier(RetryPolicy(max_retries=2, base_delay_s=backoff, max_delay_s=backoff),
                      classify, "t", rng=_TopRng())
    tries = {"n": 0}

    async def failing_once():
        tries["n"] += 1
        if tries["n"] == 1:
            raise ValueError("down")
        return "back"

    async def succeeds_soon():
        await asyncio.sleep(0.2)
        return "ok"

    async def both():
        first = asyncio.create_task(retrier.acall(failing_once))
        await retrier.acall(succeeds_soon)
        return await first

    assert asyncio.run(both()) == ("back", 2)
    # an outage's retry goes out once the server answers again; a rate limit keeps its backoff
    assert retrier.stats.woken == (1 if woken else 0)
