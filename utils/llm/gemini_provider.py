"""Stage 03 provider ``gemini``: Gemini through ``google-genai`` (Developer API or Vertex AI).

Credentials: ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY`` or ``gemini.api_key`` in api_keys.yaml for
the Developer API; otherwise Vertex AI with ``gemini.project`` (or ``GOOGLE_CLOUD_PROJECT``),
``gemini.location`` (default ``global``, the release's) and optionally
``gemini.credentials_path`` (a service-account JSON, loaded directly; the process environment
is not modified, unlike the release; docs/evaluation_protocol.md, "Providers").

Requests follow the release (docs/evaluation_protocol.md, "Providers"): ``system_instruction``,
the whole history with every earlier image as inline bytes (docs/evaluation_protocol.md,
"Prompt structure"; image parts before the text, as Google's prompting guide recommends),
``max_output_tokens=8192``. Gemini 3 models get ``ThinkingConfig(thinking_level=...)``
(default ``medium``, the release's) and temperature 1.0 (the release's, and Google's
recommendation for Gemini 3); ``no_thinking`` uses the lowest level (``minimal`` for Flash
models, ``low`` for Pro). Gemini 2.5 models get ``thinking_budget=0``
(Flash) or 128 (Pro) under ``no_thinking``; other models temperature 0. The SDK retries nothing
by default, and no ``retry_options`` are passed: :mod:`utils.llm.retry` does the retries,
honouring ``Retry-After`` and the ``RetryInfo.retryDelay`` of a 429 body.

An HTTP 200 without candidates (the prompt was blocked, whatever the ``block_reason``,
``OTHER`` included), with a ``finish_reason`` of Google's filters (SAFETY, PROHIBITED_CONTENT,
BLOCKLIST, SPII, RECITATION, IMAGE_SAFETY, ...), or with no text and ``finish_reason`` OTHER
becomes status ``blocked``: the provider withheld the answer, which is not the model's own
refusal (docs/engines.md, "Faults"). MAX_TOKENS without text is ``truncated``; any other empty
answer ``error``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from utils.deps import require
from utils.errors import ConfigError
from utils.llm._api import ApiChatModel, LoopBound, answer_completion
from utils.llm.base import Completion, PromptLimits, TurnRequest, Usage
from utils.llm.keys import ApiKeys, redact, resolve
from utils.llm.retry import RETRYABLE_STATUS, Failure, RetryPolicy, parse_retry_after, status_kind
from utils.llm.settings import THINKING_LEVELS as THINKING_LEVELS
from utils.llm.settings import GeminiConfig, hide_credentials
from utils.llm.tokens import rule_for_model

logger = logging.getLogger(__name__)

#: Default Gemini 3 thinking level (docs/evaluation_protocol.md, "Providers").
DEFAULT_THINKING_LEVEL = "medium"
#: Default Vertex AI location (docs/evaluation_protocol.md, "Providers").
DEFAULT_LOCATION = "global"

_BLOCKED = {"SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "RECITATION", "IMAGE_SAFETY",
            "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "MODEL_ARMOR"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)s\s*$")


def _name(model: str) -> str:
    return model.strip().lower().rsplit("/", 1)[-1]


def is_gemini3(model: str) -> bool:
    """Whether ``model`` is a Gemini 3.x model (thinking levels)."""
    return _name(model).startswith("gemini-3")


def _retry_delay_from_body(details: Any) -> float | None:
    """``RetryInfo.retryDelay`` ("30s") from a google.rpc error body, in seconds."""
    error = details.get("error", details) if isinstance(details, dict) else None
    for item in (error or {}).get("details", []) if isinstance(error, dict) else []:
        if isinstance(item, dict) and str(item.get("@type", "")).endswith("RetryInfo"):
            match = _DURATION.match(str(item.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


class GeminiChatModel(ApiChatModel):
    """``gemini``: generate_content with the full history each turn.

    Args:
        model: Gemini model id (e.g. ``gemini-3.1-pro-preview``).
        config: The settings (:class:`~utils.llm.settings.GeminiConfig`; each option is
            documented there and in docs/engines.md, "Provider settings"); None: the defaults.
        retry_policy: Full retry policy; overrides ``max_retries`` when given (tests).
        http_client, async_http_client: ``httpx2`` clients for the SDK (tests).
        env: Environment to read keys from (default ``os.environ``).
        **options: Options of :class:`~utils.llm.settings.GeminiConfig`, merged over
            ``config``; any other name is an error.

    Raises:
        ConfigError: If neither an API key nor a Vertex project is configured (names
            ``GEMINI_API_KEY``/``GOOGLE_API_KEY``, ``gemini.api_key`` and ``gemini.project``),
            or for an unknown option or an invalid value (names it).
        MissingDependencyError: If ``google-genai`` is not installed.
    """

    provider = "gemini"
    kind = "api"
    example_model = "gemini-3.1-pro-preview"
    description = "Gemini Developer API or Vertex AI"
    config_class = GeminiConfig
    sampling = "temperature"
    own_hosts = ("googleapis.com",)

    @classmethod
    def default_temperature(cls, model: str) -> float:
        """1.0 for Gemini 3 (the release's, and Google's advice for it), else 0.0."""
        return 1.0 if is_gemini3(model) else 0.0

    def __init__(self, model: str, config: GeminiConfig | None = None, *,
                 retry_policy: RetryPolicy | None = None, http_client: Any = None,
                 async_http_client: Any = None, env: Mapping[str, str] | None = None,
                 **options: Any) -> None:
        config = self.make_config(config, options)
        super().__init__(model, config, retry_policy=retry_policy)
        self.config: GeminiConfig = config
        self._genai = require("google.genai", "gemini", "the gemini provider")
        self._types = require("google.genai.types", "gemini", "the gemini provider")
        self._errors = require("google.genai.errors", "gemini", "the gemini provider")
        self._httpx2 = require("httpx2", "gemini", "the gemini provider")
        env = os.environ if env is None else env
        keys = ApiKeys(config.api_keys)
        vertex = config.vertex
        self.thinking_level = config.reasoning_effort
        self.no_thinking = config.no_thinking
        self.max_output_tokens = int(config.max_new_tokens or config.max_output_tokens)
        self.temperature = (config.temperature if config.temperature is not None
                            else self.default_temperature(model))
        self.seed = int(config.seed)
        self.base_url = config.base_url
        self._http_client = http_client
        self._async_http_client = async_http_client
        self._api_key = None if vertex else resolve(
            env, ("GEMINI_API_KEY", "GOOGLE_API_KEY"), keys, "gemini", "api_key",
            what="the gemini provider", required=False)
        self.vertex = bool(vertex) if vertex is not None else self._api_key is None
        self.project = self.location = self._credentials_path = None
        if self.vertex:
            self.project = resolve(env, ("GOOGLE_CLOUD_PROJECT",), keys, "gemini", "project",
                                   what="the gemini provider", required=False)
            if self.project is None:
                raise ConfigError(
                    "the gemini provider needs an API key (set GEMINI_API_KEY or GOOGLE_API_KEY, "
                    f"or 'gemini.api_key' in {keys.path}) or a Vertex AI project (set "
                    f"GOOGLE_CLOUD_PROJECT, or 'gemini.project' in {keys.path}; --api-keys)")
            self.location = resolve(env, ("GOOGLE_CLOUD_LOCATION",), keys, "gemini", "location",
                                    what="the gemini provider", required=False) \
                or DEFAULT_LOCATION
            self._credentials_path = resolve(env, (), keys, "gemini", "credentials_path",
                                             what="the gemini provider", required=False)
        self._client: Any = None
        self._aclient = LoopBound()

    # -- configuration --------------------------------------------------------------------
    def _thinking_config(self) -> dict[str, Any] | None:
        name = _name(self.model)
        if is_gemini3(name):
            level = self.thinking_level or (
                ("minimal" if "flash" in name else "low") if self.no_thinking
                else DEFAULT_THINKING_LEVEL)
            return {"thinking_level": level}
        if name.startswith("gemini-2.5") and self.no_thinking:
            return {"thinking_budget": 0 if "flash" in name else 128}
        return None

    def config_params(self) -> dict[str, Any]:
        """``GenerateContentConfig`` fields of every call (system instruction aside)."""
        params: dict[str, Any] = {"max_output_tokens": self.max_output_tokens,
                                  "temperature": self.temperature, "seed": self.seed}
        thinking = self._thinking_config()
        if thinking is not None:
            params["thinking_config"] = thinking
        return params

    def describe(self) -> dict[str, Any]:
        """Manifest settings (backend, project/location, base URL, generation config; no key).

        The base URL is recorded with its credentials hidden (``hide_credentials``):
        ``--base-url`` as given, else the endpoint an SDK environment variable
        (``GOOGLE_GEMINI_BASE_URL``, ``GOOGLE_VERTEX_BASE_URL``) sent the client to when it is
        not Google's own API, else None (docs/engines.md, "Endpoints").
        """
        redirected = self.endpoint_url() if self.own_endpoint() is False else None
        return {**super().describe(), "backend": "vertex" if self.vertex else "developer",
                "project": self.project, "location": self.location,
                "base_url": hide_credentials(self.base_url) if self.base_url else redirected,
                "params": self.config_params(), **self.images.describe()}

    def prompt_limits(self) -> PromptLimits:
        """The output-token cap (Gemini's context, 1M tokens, fits any dialogue)."""
        return PromptLimits(max_new_tokens=self.max_output_tokens,
                            image_rule=rule_for_model(self.model),
                            image_bounds=(self.images.max_side, self.images.max_pixels))

    def _make_client(self) -> Any:
        types = self._types
        http: dict[str, Any] = {"timeout": int(self.timeout_s * 1000)}
        if self.base_url:
            http["base_url"] = self.base_url
        if self._http_client is not None:
            http["httpx_client"] = self._http_client
        if self._async_http_client is not None:
            http["httpx_async_client"] = self._async_http_client
        options = types.HttpOptions(**http)
        if not self.vertex:
            return self._genai.Client(api_key=self._api_key, http_options=options)
        credentials = None
        if self._credentials_path:
            service_account = require("google.oauth2.service_account", "gemini",
                                      "Vertex AI service-account credentials")
            try:
                credentials = service_account.Credentials.from_service_account_file(
                    self._credentials_path,
                    scopes=["https://www.googleapis.com/auth/cloud-platform"])
            except (OSError, ValueError) as exc:
                raise ConfigError(f"gemini.credentials_path {self._credentials_path}: cannot "
                                  f"load the service-account JSON ({exc})") from None
        return self._genai.Client(vertexai=True, project=self.project, location=self.location,
                                  credentials=credentials, http_options=options)

    def _client_sync(self) -> Any:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def client_base_url(self) -> str | None:
        """The client's base URL: ``--base-url``, else an SDK environment variable, else the SDK's.

        Read back from the constructed ``google.genai`` client (its resolved HTTP options);
        None if that SDK version keeps it elsewhere.
        """
        api_client = getattr(self._client_sync(), "_api_client", None)
        url = getattr(getattr(api_client, "_http_options", None), "base_url", None)
        return str(url) if url else None

    # -- calls ----------------------------------------------------------------------------
    def build_contents(self, request: TurnRequest) -> tuple[str | None, list[Any]]:
        """``(system_instruction, contents)``: user/model turns, images as inline bytes.

        Raises:
            ProviderError: If an image file is missing or not an image.
        """
        types = self._types
        system = None
        contents = []
        for message in request.messages:
            if message.role == "system":
                system = message.text if system is None else f"{system}\n\n{message.text}"
                continue
            parts = []
            for path in message.images:
                data, mime = self.images.get(Path(path), "bytes")
                parts.append(types.Part.from_bytes(data=data, mime_type=mime))
            parts.append(types.Part.from_text(text=message.text))
            contents.append(types.Content(role="user" if message.role == "user" else "model",
                                          parts=parts))
        return system, contents

    def _kwargs(self, request: TurnRequest) -> dict[str, Any]:
        system, contents = self.build_contents(request)
        params = self.config_params()
        if request.seed is not None:  # one sample of --samples K: its own seed
            params["seed"] = int(request.seed)
        config = self._types.GenerateContentConfig(system_instruction=system, **params)
        return {"model": self.model, "contents": contents, "config": config}

    def _call(self, request: TurnRequest) -> Any:
        return self._client_sync().models.generate_content(**self._kwargs(request))

    async def _acall(self, request: TurnRequest) -> Any:
        client = self._aclient.get(self._make_client)
        return await client.aio.models.generate_content(**self._kwargs(request))

    def _to_completion(self, response: Any) -> Completion:
        usage = _usage(getattr(response, "usage_metadata", None))
        version = getattr(response, "model_version", None)
        candidates = getattr(response, "candidates", None) or []
        feedback = getattr(response, "prompt_feedback", None)
        block = getattr(feedback, "block_reason", None) if feedback is not None else None
        if not candidates:  # the prompt was blocked (any reason, OTHER included)
            reason = _enum_name(block) or "no candidates"
            return Completion("", status="blocked", finish_reason=reason, usage=usage,
                              error=f"the provider returned no candidate ({reason})",
                              response_model=version)
        candidate = candidates[0]
        finish = _enum_name(getattr(candidate, "finish_reason", None))
        content = getattr(candidate, "content", None)
        parts = (getattr(content, "parts", None) or []) if content is not None else []
        text = "".join(p.text for p in parts if getattr(p, "text", None)
                       and not getattr(p, "thought", False))
        if finish in _BLOCKED or (finish == "OTHER" and not text.strip()):
            return Completion(text, status="blocked", finish_reason=finish, usage=usage,
                              error=f"the provider withheld the answer ({finish})",
                              response_model=version)
        return answer_completion(text, finish, usage=usage, model=version,
                                 cut_off=finish == "MAX_TOKENS")

    def _classify(self, exc: BaseException) -> Failure | None:
        httpx2 = self._httpx2
        if isinstance(exc, (httpx2.TimeoutException, asyncio.TimeoutError, TimeoutError)):
            return Failure("retryable", f"timeout after {self.timeout_s:g} s")
        if isinstance(exc, httpx2.TransportError):
            return Failure("retryable", f"connection error: {type(exc).__name__}")
        if not isinstance(exc, self._errors.APIError):
            return None
        code = int(getattr(exc, "code", 0) or 0)
        message = redact(f"HTTP {code} {getattr(exc, 'status', '')}: "
                         f"{getattr(exc, 'message', '')}", (self._api_key,))[:500]
        if code in RETRYABLE_STATUS or code >= 500:
            response = getattr(exc, "response", None)
            retry_after = parse_retry_after(getattr(response, "headers", None))
            if retry_after is None:
                retry_after = _retry_delay_from_body(getattr(exc, "details", None))
            return Failure("retryable", message, code, retry_after_s=retry_after)
        if code == 400 and "token" in message.lower() and "exceed" in message.lower():
            return Failure("request", f"{message}. The request does not fit the model's "
                                      f"context: lower --max-new-tokens or bound the images "
                                      f"(--max-image-side)", code, context_overflow=True)
        if status_kind(code) == "fatal":
            hint = {401: "Check GEMINI_API_KEY / GOOGLE_API_KEY or the Vertex credentials",
                    403: "Check the key's or the Vertex project's permissions",
                    404: f"Check --model ({self.model!r})"}.get(
                code, "The API rejected the request; check --model and the request settings")
            return Failure("fatal", f"{message}. {hint}", code)
        # any other status is neither retryable nor an answer of the model: the run stops
        return Failure("fatal", f"{message}. HTTP {code} is neither a fault that retrying can "
                                f"fix nor an answer of the model", code)

    # -- lifecycle ------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the event loop's async client."""
        client = self._aclient.take()
        if client is not None:
            aclose = getattr(client.aio, "aclose", None)
            if aclose is not None:
                await aclose()

    def close(self) -> None:
        """Close the synchronous client."""
        if self._client is not None:
            close = getattr(self._client, "close", None)
            if close is not None:
                close()
            self._client = None


def _enum_name(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "name", value))


def _usage(meta: Any) -> Usage:
    """Gemini usage -> :class:`Usage`: output = candidates + thoughts.

    See docs/evaluation_protocol.md, "Providers" (token counts).
    """
    if meta is None:
        return Usage()
    thoughts = int(getattr(meta, "thoughts_token_count", 0) or 0)
    return Usage(input_tokens=int(getattr(meta, "prompt_token_count", 0) or 0),
                 cached_input_tokens=int(getattr(meta, "cached_content_token_count", 0) or 0),
                 output_tokens=int(getattr(meta, "candidates_token_count", 0) or 0) + thoughts,
                 thinking_tokens=thoughts)
