"""Stage 03 provider ``anthropic``: Claude through the official ``anthropic`` SDK (Messages API).

Credentials: ``ANTHROPIC_API_KEY`` or ``anthropic.api_key`` in api_keys.yaml.

Requests (docs/engines.md, "Claude"): ``system`` from the system message, the whole history with
every earlier image as a base64 ``image`` block before the turn's text, ``max_tokens`` 8192 (or
``--max-new-tokens``); no sampling settings (SDK 2.x has none; ``--extra-body`` may add them).
Thinking: no field by default (the model's own default),
``thinking={"type": "enabled", "budget_tokens": N}`` with ``thinking_budget``,
``{"type": "disabled"}`` with ``--no-thinking``. ``--extra-body`` fields go through the SDK's
``extra_body``. The SDK's own retries are off (``max_retries=0``): :mod:`utils.llm.retry`
retries 429, 529 (overloaded), other 5xx, timeouts and connection errors, honouring
``Retry-After``.

Statuses (docs/engines.md, "Faults"): ``stop_reason`` ``refusal`` is ``refused`` (the model's own
refusal, its text kept); ``max_tokens`` and ``model_context_window_exceeded`` without text are
``truncated``; any other empty answer ``error``. 401/403 (auth), 402 and a 400 about the credit
balance (billing) stop the run.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from utils.deps import require
from utils.errors import ConfigError
from utils.llm._api import ApiChatModel, LoopBound, answer_completion
from utils.llm.base import Completion, PromptLimits, TurnRequest, Usage
from utils.llm.keys import ApiKeys, redact, resolve
from utils.llm.retry import RETRYABLE_STATUS, Failure, RetryPolicy, parse_retry_after, status_kind
from utils.llm.settings import AnthropicConfig, check_extra_body, hide_credentials
from utils.llm.tokens import rule_for_model

#: ``stop_reason`` values meaning the output-token or context limit cut the answer.
CUT_OFF = frozenset({"max_tokens", "model_context_window_exceeded"})
#: Request fields this provider sets; ``--extra-body`` may not override them.
RESERVED_FIELDS = ("model", "messages", "system", "max_tokens", "thinking", "stream")


class AnthropicChatModel(ApiChatModel):
    """``anthropic``: messages.create with the full history each turn.

    Args:
        model: Claude model id (e.g. ``claude-sonnet-4-5``).
        config: The settings (:class:`~utils.llm.settings.AnthropicConfig`); None: defaults.
        retry_policy: Full retry policy; overrides ``max_retries`` when given (tests).
        http_client, async_http_client: ``httpx2`` clients for the SDK (tests).
        env: Environment to read keys from (default ``os.environ``).
        **options: Options of :class:`~utils.llm.settings.AnthropicConfig`.

    Raises:
        ConfigError: If no key is configured (names ``ANTHROPIC_API_KEY`` and
            ``anthropic.api_key``), ``thinking_budget`` is given with ``no_thinking`` or is not
            below ``max_tokens``, or ``--extra-body`` names a field this provider sets.
        MissingDependencyError: If ``anthropic`` is not installed.
    """

    provider = "anthropic"
    kind = "api"
    example_model = "claude-sonnet-4-5"
    description = "Claude through the Anthropic Messages API"
    config_class = AnthropicConfig
    own_hosts = ("api.anthropic.com",)

    def __init__(self, model: str, config: AnthropicConfig | None = None, *,
                 retry_policy: RetryPolicy | None = None, http_client: Any = None,
                 async_http_client: Any = None, env: Mapping[str, str] | None = None,
                 **options: Any) -> None:
        config = self.make_config(config, options)
        super().__init__(model, config, retry_policy=retry_policy)
        self.config: AnthropicConfig = config
        self._sdk = require("anthropic", "anthropic", "the anthropic provider")
        self._httpx2 = require("httpx2", "anthropic", "the anthropic provider")
        env = os.environ if env is None else env
        self.max_tokens = int(config.max_new_tokens or config.max_output_tokens)
        if config.no_thinking and config.thinking_budget is not None:
            raise ConfigError("anthropic: --no-thinking and thinking_budget exclude each other")
        if config.thinking_budget is not None and config.thinking_budget >= self.max_tokens:
            raise ConfigError(f"anthropic: thinking_budget ({config.thinking_budget}) must be "
                              f"below max_tokens ({self.max_tokens}; --max-new-tokens)")
        self.extra_body = check_extra_body(config.extra_body)
        taken = sorted(set(self.extra_body) & set(RESERVED_FIELDS))
        if taken:
            raise ConfigError(f"--extra-body may not set {', '.join(taken)}: the anthropic "
                              f"provider sets them (--model, --max-new-tokens, --no-thinking)")
        self.base_url = config.base_url
        self._http_client = http_client
        self._async_http_client = async_http_client
        self._api_key = resolve(env, ("ANTHROPIC_API_KEY",), ApiKeys(config.api_keys),
                                "anthropic", "api_key", what="the anthropic provider")
        self._client: Any = None
        self._aclient = LoopBound()

    # -- configuration --------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """Request fields of every call besides model, system and messages."""
        params: dict[str, Any] = {"max_tokens": self.max_tokens}
        budget = self.config.thinking_budget
        if budget is not None:
            params["thinking"] = {"type": "enabled", "budget_tokens": int(budget)}
        elif self.config.no_thinking:
            params["thinking"] = {"type": "disabled"}
        return params

    def describe(self) -> dict[str, Any]:
        """Manifest settings (base URL, credentials hidden; request fields, extra body; no key).

        ``base_url``: ``--base-url`` as given, else the endpoint ``ANTHROPIC_BASE_URL`` sent
        the client to when it is not Anthropic's own API, else None (docs/engines.md,
        "Endpoints").
        """
        redirected = self.endpoint_url() if self.own_endpoint() is False else None
        return {**super().describe(),
                "base_url": hide_credentials(self.base_url) if self.base_url else redirected,
                "params": self.params(),
                "extra_body": self.extra_body, **self.images.describe()}

    def prompt_limits(self) -> PromptLimits:
        """The output-token cap (Claude's context, 200k tokens, fits any dialogue)."""
        return PromptLimits(max_new_tokens=self.max_tokens, image_rule=rule_for_model(self.model),
                            image_bounds=(self.images.max_side, self.images.max_pixels))

    def _make_client(self, asynchronous: bool = False) -> Any:
        kwargs: dict[str, Any] = {"api_key": self._api_key, "max_retries": 0,
                                  "timeout": self.timeout_s}
        if self.base_url:
            kwargs["base_url"] = self.base_url
        if asynchronous:
            if self._async_http_client is not None:
                kwargs["http_client"] = self._async_http_client
            return self._sdk.AsyncAnthropic(**kwargs)
        if self._http_client is not None:
            kwargs["http_client"] = self._http_client
        return self._sdk.Anthropic(**kwargs)

    def _client_sync(self) -> Any:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def client_base_url(self) -> str:
        """The client's base URL: ``--base-url``, else ``ANTHROPIC_BASE_URL``, else the SDK's."""
        return str(self._client_sync().base_url)

    # -- calls ----------------------------------------------------------------------------
    def build_messages(self, request: TurnRequest) -> tuple[str | None, list[dict[str, Any]]]:
        """``(system, messages)``: user/assistant turns, images as base64 blocks first.

        Raises:
            ProviderError: If an image file is missing or not an image.
        """
        system = None
        messages: list[dict[str, Any]] = []
        for message in request.messages:
            if message.role == "system":
                system = message.text if system is None else f"{system}\n\n{message.text}"
                continue
            blocks: list[dict[str, Any]] = []
            for path in message.images:
                data, mime = self.images.get(Path(path), "bytes")
                blocks.append({"type": "image", "source": {
                    "type": "base64", "media_type": mime,
                    "data": base64.b64encode(data).decode("ascii")}})
            blocks.append({"type": "text", "text": message.text})
            messages.append({"role": "user" if message.role == "user" else "assistant",
                             "content": blocks})
        return system, messages

    def _kwargs(self, request: TurnRequest) -> dict[str, Any]:
        system, messages = self.build_messages(request)
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, **self.params()}
        if system is not None:
            kwargs["system"] = system
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

    def _call(self, request: TurnRequest) -> Any:
        return self._client_sync().messages.create(**self._kwargs(request))

    async def _acall(self, request: TurnRequest) -> Any:
        client = self._aclient.get(lambda: self._make_client(asynchronous=True))
        return await client.messages.create(**self._kwargs(request))

    def _to_completion(self, response: Any) -> Completion:
        usage = _usage(getattr(response, "usage", None))
        version = getattr(response, "model", None)
        stop = getattr(response, "stop_reason", None)
        stop = None if stop is None else str(stop)
        blocks = getattr(response, "content", None) or []
        text = "".join(str(getattr(b, "text", "") or "") for b in blocks
                       if getattr(b, "type", None) == "text")
        if stop == "refusal":
            return Completion(text, status="refused", finish_reason=stop, usage=usage,
                              error="the model refused (stop_reason=refusal)",
                              response_model=version)
        return answer_completion(text, stop, usage=usage, model=version, cut_off=stop in CUT_OFF)

    def _classify(self, exc: BaseException) -> Failure | None:
        sdk = self._sdk
        httpx2 = self._httpx2
        if isinstance(exc, (sdk.APITimeoutError, httpx2.TimeoutException, asyncio.TimeoutError,
                            TimeoutError)):
            return Failure("retryable", f"timeout after {self.timeout_s:g} s")
        if isinstance(exc, (sdk.APIConnectionError, httpx2.TransportError)):
            return Failure("retryable", f"connection error: {type(exc).__name__}")
        if not isinstance(exc, sdk.APIStatusError):
            return None
        code = int(getattr(exc, "status_code", 0) or 0)
        message = redact(f"HTTP {code}: {getattr(exc, 'message', exc)}", (self._api_key,))[:500]
        if code in RETRYABLE_STATUS or code >= 500:  # 429 rate limit, 529 overloaded, 5xx
            response = getattr(exc, "response", None)
            return Failure("retryable", message, code,
                           retry_after_s=parse_retry_after(getattr(response, "headers", None)))
        lowered = message.lower()
        if code == 402 or "credit balance" in lowered or "billing" in lowered:
            return Failure("fatal", f"{message}. Check the Anthropic account's credits/billing",
                           code)
        if code in (400, 413) and ("prompt is too long" in lowered
                                   or "too large" in lowered):
            return Failure("request", f"{message}. The request does not fit the model's "
                                      f"context: lower --max-new-tokens or bound the images "
                                      f"(--max-image-side)", code, context_overflow=True)
        if status_kind(code) == "fatal":
            hint = {401: "Check ANTHROPIC_API_KEY or anthropic.api_key",
                    403: "Check the key's permissions",
                    404: f"Check --model ({self.model!r})"}.get(
                code, "The API rejected the request; check --model and the request settings")
            return Failure("fatal", f"{message}. {hint}", code)
        return Failure("fatal", f"{message}. HTTP {code} is neither a fault that retrying can "
                                f"fix nor an answer of the model", code)

    # -- lifecycle ------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the event loop's async client."""
        client = self._aclient.take()
        if client is not None:
            await client.close()

    def close(self) -> None:
        """Close the synchronous client."""
        if self._client is not None:
            self._client.close()
            self._client = None


def _usage(usage: Any) -> Usage:
    """Anthropic usage -> :class:`Usage`.

    ``input_tokens`` counts only the uncached part, so input = input + cache read + cache
    creation; ``cached_input_tokens`` = cache read (docs/engines.md, "Claude").
    """
    if usage is None:
        return Usage()
    fresh = int(getattr(usage, "input_tokens", 0) or 0)
    read = int(getattr(usage, "cache_read_input_tokens", 0) or 0)
    written = int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
    return Usage(input_tokens=fresh + read + written, cached_input_tokens=read,
                 output_tokens=int(getattr(usage, "output_tokens", 0) or 0))
