"""Stage 03 providers ``openai`` and ``azure``: Chat Completions through the ``openai`` SDK.

``openai`` talks to api.openai.com or, with ``base_url``, to any OpenAI-compatible server (vLLM
``serve``, SGLang, Ollama). ``azure`` uses ``AzureOpenAI``; its ``deployment`` is separate from
the model name (the model name drives pricing and parameter choice, the deployment the URL
``{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...``).

Requests follow the release (docs/evaluation_protocol.md, "Providers"): system message, then the
whole history with every earlier image as a base64 data URL (docs/evaluation_protocol.md,
"Prompt structure"), ``max_completion_tokens=8192``. For reasoning models (``gpt-5*``,
``o1``/``o3``/``o4*``) we send ``max_completion_tokens`` and ``reasoning_effort`` (default
``medium``, the release's) and never ``temperature`` (they reject non-default values); other
models get ``max_tokens``, ``temperature=0`` and ``seed``.
``no_thinking`` lowers ``reasoning_effort`` to the least the model family accepts
(``none`` for gpt-5.1+, ``minimal`` for gpt-5, ``low`` for o-series) and, for other models on an
OpenAI-compatible server, sends ``chat_template_kwargs.enable_thinking=false`` (vLLM/SGLang).

The SDK's own retries are off (``max_retries=0``); :mod:`utils.llm.retry` does them. An empty
answer, a refusal or a content filter becomes a recorded status, never an exception.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from utils.deps import require
from utils.errors import ConfigError, ProviderError
from utils.llm._api import (
    IMAGES_PER_SLOT,
    ApiChatModel,
    LoopBound,
    MalformedResponse,
    answer_completion,
)
from utils.llm.base import (
    Completion,
    PromptLimits,
    TokenTopLogprobs,
    TurnRequest,
    Usage,
    add_logprob,
)
from utils.llm.keys import ApiKeys, redact, resolve
from utils.llm.retry import RETRYABLE_STATUS, Failure, RetryPolicy, parse_retry_after
from utils.llm.settings import REASONING_EFFORTS as REASONING_EFFORTS
from utils.llm.settings import AzureConfig, OpenAIConfig, hide_credentials
from utils.llm.settings import check_base_url as check_base_url
from utils.llm.settings import check_extra_body as check_extra_body
from utils.llm.tokens import rule_for_model

logger = logging.getLogger(__name__)

#: Default effort of reasoning models (the release sends ``medium``; docs/evaluation_protocol.md,
#: "Providers").
DEFAULT_REASONING_EFFORT = "medium"
#: Azure API version when neither the environment nor api_keys.yaml gives one (supports
#: ``reasoning_effort`` and ``max_completion_tokens``; docs/evaluation_protocol.md, "Providers").
DEFAULT_AZURE_API_VERSION = "2025-04-01-preview"
#: Key used for a keyless OpenAI-compatible server (vLLM/SGLang/Ollama ignore it).
LOCAL_SERVER_KEY = "EMPTY"
#: Requests in flight per async HTTP client (see ``_make_async_clients``).
CONNECTIONS_PER_CLIENT = 4

_REASONING = re.compile(r"^(gpt-5|o\d)")
_GPT5_NONE = re.compile(r"^gpt-5\.\d")
_CONTEXT_CODES = ("context_length_exceeded", "string_above_max_length")
#: How a server words "the request is longer than the context" (OpenAI, vLLM, SGLang, Ollama).
_CONTEXT_TEXT = re.compile(r"context length|context window|maximum model length|"
                           r"max_model_len|too many tokens|prompt is too long|"
                           r"longer than the model", re.IGNORECASE)
#: Seconds between two readiness probes, and between two "still waiting" log lines.
SERVER_POLL_S = 2.0
SERVER_LOG_EVERY_S = 15.0
#: Finish reasons of a request the server gave up on (vLLM, SGLang): a fault, not an answer.
_ABORT_REASONS = ("abort", "error")
#: vLLM's gauge of its cache config at ``GET /metrics`` (labels ``num_gpu_blocks``,
#: ``block_size``, ...; one line per engine of a data-parallel server).
CACHE_CONFIG_METRIC = "vllm:cache_config_info"
#: Most requests in flight the server's KV cache may suggest (vLLM's default ``max_num_seqs``);
#: docs/design.md, "Concurrency".
MAX_SUGGESTED_CONCURRENCY = 256
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
#: 429 codes that mean "no quota left" (billing), not "too fast": retrying cannot help.
_QUOTA_CODES = ("insufficient_quota", "billing_hard_limit_reached", "billing_not_active")
_FILTER_CODES = ("content_filter", "content_policy_violation", "ResponsibleAIPolicyViolation")


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` is an OpenAI reasoning model (``gpt-5*``, ``o1``, ``o3``, ``o4-mini``)."""
    return bool(_REASONING.match(model.strip().lower().rsplit("/", 1)[-1]))


def no_thinking_effort(model: str) -> str:
    """The lowest ``reasoning_effort`` the model family accepts (``--no-thinking``)."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    if _GPT5_NONE.match(name):
        return "none"
    return "minimal" if name.startswith("gpt-5") else "low"


#: The SDK's JSON encoding of request bodies (``openai._utils._json.openapi_dumps``: no ASCII
#: escaping, compact separators, no NaN), so pre-encoded bodies are byte-identical to it.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _dumps(value: Any) -> bytes:
    return _JSON.encode(value).encode("utf-8")


def parse_cache_config(text: str) -> dict[str, Any] | None:
    """The KV cache a vLLM server allocated, from its ``GET /metrics`` text.

    Reads the labels of the :data:`CACHE_CONFIG_METRIC` gauge (vLLM writes its ``CacheConfig``
    there once the engine has profiled its memory). A data-parallel server writes one line per
    engine, each with the summed ``num_gpu_blocks``; the first line is read.

    Args:
        text: A Prometheus text exposition.

    Returns:
        ``{"num_gpu_blocks": B, "block_size": S, "tokens": B * S, "prefix_caching": bool}``,
        or None when the gauge is absent or ``num_gpu_blocks`` / ``block_size`` is not a whole
        number >= 1 (``None`` while the engine is still profiling).
    """
    head = CACHE_CONFIG_METRIC + "{"
    for line in text.splitlines():
        if not line.startswith(head) or "}" not in line:
            continue
        labels = dict(_LABEL.findall(line[len(head):line.rindex("}")]))
        blocks, block = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
        if not (blocks.isdigit() and block.isdigit() and int(blocks) > 0 and int(block) > 0):
            return None
        return {"num_gpu_blocks": int(blocks), "block_size": int(block),
                "tokens": int(blocks) * int(block),
                "prefix_caching": labels.get("enable_prefix_caching") == "True"}
    return None


def build_messages(request: TurnRequest, images: Any, image_detail: str | None = None
                   ) -> list[dict[str, Any]]:
    """OpenAI chat messages: text first, then each image as a base64 data URL part.

    Args:
        request: The turn request (system, history, current user turn).
        images: An :class:`~utils.llm._api.ImageCache`.
        image_detail: ``low``/``high``/``auto`` or None (not sent).

    Returns:
        The ``messages`` list of ``chat.completions.create``.

    Raises:
        ProviderError: If an image file is missing or not an image.
    """
    out: list[dict[str, Any]] = []
    for message in request.messages:
        if message.images:
            parts: list[dict[str, Any]] = [{"type": "text", "text": message.text}]
            for path in message.images:
                image_url: dict[str, Any] = {"url": images.get(path, "data_url")}
                if image_detail:
                    image_url["detail"] = image_detail
                parts.append({"type": "image_url", "image_url": image_url})
            out.append({"role": message.role, "content": parts})
        else:
            out.append({"role": message.role, "content": message.text})
    return out


def encode_body(model: str, request: TurnRequest, images: Any, image_detail: str | None,
                params: Mapping[str, Any]) -> bytes:
    """The request body as UTF-8 JSON bytes.

    Byte-identical to the SDK's encoding (``openapi_dumps``) of
    ``{"model": model, "messages": build_messages(...), **params}``.

    Built from fragments instead of a dict tree: every earlier image of the case is re-sent each
    turn (docs/evaluation_protocol.md, "Prompt structure"), and each image part is encoded
    once per file (:class:`~utils.llm._api.ImageCache` kind ``data_url_json``) rather than
    re-walked and re-escaped by ``json.dumps`` per request; measured with
    benchmarks/bench_api_throughput.py.

    Args:
        model: The ``model`` field.
        request: The turn request.
        images: An :class:`~utils.llm._api.ImageCache`.
        image_detail: ``detail`` of image parts, or None (not sent).
        params: Generation parameters appended after ``messages`` (in order).

    Returns:
        The body bytes (POSTed as ``application/json``).

    Raises:
        ProviderError: If an image file is missing or not an image.
    """
    detail = b',"detail":' + _dumps(image_detail) if image_detail else b""
    out = [b'{"model":', _dumps(model), b',"messages":[']
    for i, message in enumerate(request.messages):
        if i:
            out.append(b",")
        out += [b'{"role":', _dumps(message.role), b',"content":']
        if message.images:
            out += [b'[{"type":"text","text":', _dumps(message.text), b"}"]
            for path in message.images:
                out += [b',{"type":"image_url","image_url":{"url":',
                        images.get(path, "data_url_json"), detail, b"}}"]
            out.append(b"]}")
        else:
            out += [_dumps(message.text), b"}"]
    out.append(b"]," + _dumps(dict(params))[1:] if params else b"]}")
    return b"".join(out)


class OpenAIChatModel(ApiChatModel):
    """``openai``: OpenAI or any OpenAI-compatible server.

    Args:
        model: Model id sent to the API (also used for pricing).
        config: The settings (:class:`~utils.llm.settings.OpenAIConfig`; each option is
            documented there and in docs/engines.md, "Provider settings"); None: the defaults.
        retry_policy: Full retry policy; overrides ``max_retries`` when given (tests).
        http_client, async_http_client: ``httpx2`` clients for the SDK (tests).
        env: Environment to read keys from (default ``os.environ``).
        **options: Options of :class:`~utils.llm.settings.OpenAIConfig`, merged over
            ``config``; any other name is an error.

    Raises:
        ConfigError: If no API key is found (names ``OPENAI_API_KEY`` and ``openai.api_key``),
            or for an unknown option or an invalid value (names it).
        MissingDependencyError: If ``openai`` is not installed.
    """

    provider = "openai"
    kind = "api"
    example_model = "gpt-5.4"
    description = ("OpenAI, or any OpenAI-compatible server such as vLLM or SGLang with "
                   "--base-url")
    config_class = OpenAIConfig
    supports_logprobs = True
    sampling = "temperature"
    _env_keys: tuple[str, ...] = ("OPENAI_API_KEY",)
    _section = "openai"
    own_hosts: tuple[str, ...] = ("api.openai.com",)

    @classmethod
    def sampling_refusal(cls, model: str, options: Mapping[str, Any]) -> str | None:
        """As :meth:`ChatModel.sampling_refusal`; a reasoning model takes no temperature."""
        if is_reasoning_model(model):
            return (f"{model} is a reasoning model, which is never sent a temperature or a "
                    f"seed (docs/evaluation_protocol.md, 'Providers')")
        return super().sampling_refusal(model, options)

    def __init__(self, model: str, config: OpenAIConfig | None = None, *,
                 retry_policy: RetryPolicy | None = None, http_client: Any = None,
                 async_http_client: Any = None, env: Mapping[str, str] | None = None,
                 **options: Any) -> None:
        config = self.make_config(config, options)
        super().__init__(model, config, retry_policy=retry_policy)
        self.config: OpenAIConfig = config
        self._openai = require("openai", "openai", f"the {self.provider} provider")
        self._raw_response_type = require("httpx2", "openai",
                                          f"the {self.provider} provider").Response
        self._env = os.environ if env is None else env
        self._keys = ApiKeys(config.api_keys)
        self.base_url = self._server_url(config)
        #: The base URL as logged and recorded: user name, password and query-string
        #: credentials hidden (:func:`~utils.llm.settings.hide_credentials`).
        self.server_label = hide_credentials(self.base_url) if self.base_url else \
            "api.openai.com"
        self.reasoning = is_reasoning_model(model)
        if self.reasoning and config.top_logprobs is not None:
            raise ConfigError(f"--option-probs: {model} is an OpenAI reasoning model, which "
                              f"returns no token log-probabilities (docs/metrics.md, 'Option "
                              f"probabilities and AUROC'); use a non-reasoning model")
        self.reasoning_effort = config.reasoning_effort or (
            no_thinking_effort(model) if config.no_thinking else DEFAULT_REASONING_EFFORT)
        self.no_thinking = config.no_thinking
        self.max_output_tokens = int(config.max_new_tokens or config.max_output_tokens)
        self.extra_body = dict(config.extra_body or {})
        self.server_wait_s = float(config.server_wait_s)
        self.server_info: dict[str, Any] = {}
        #: How :meth:`suggested_concurrency` chose (or did not choose) the concurrency: its
        #: inputs, recorded in :meth:`runtime_info`; None when it was not asked.
        self.concurrency_rule: dict[str, Any] | None = None
        self._tokenize_supported: bool | None = None
        self.temperature = 0.0 if config.temperature is None else float(config.temperature)
        self.seed = int(config.seed)
        self.image_detail = config.image_detail
        self._http_client = http_client
        self._async_http_client = async_http_client
        self._api_key = self._resolve_key()
        self._client: Any = None
        self._aclient = LoopBound()
        self._next_client = 0

    def _server_url(self, config: OpenAIConfig) -> str | None:
        """The OpenAI-compatible server's URL (normalised), or None for api.openai.com."""
        return config.base_url

    # -- configuration --------------------------------------------------------------------
    def _resolve_key(self) -> str:
        key = resolve(self._env, self._env_keys, self._keys, self._section, "api_key",
                      what=f"the {self.provider} provider", required=self.base_url is None)
        return key or LOCAL_SERVER_KEY

    @property
    def api_model(self) -> str:
        """The ``model`` field sent (the deployment name for Azure)."""
        return self.model

    def _client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"api_key": self._api_key, "max_retries": 0,
                                  "timeout": self.timeout_s}
        if self.base_url:
            kwargs["base_url"] = self.base_url
        return kwargs

    #: SDK client class names (sync, async); Azure overrides them.
    _client_classes = ("OpenAI", "AsyncOpenAI")

    def _make_client(self, asynchronous: bool, http_client: Any = None) -> Any:
        cls = getattr(self._openai, self._client_classes[int(asynchronous)])
        http = http_client if http_client is not None else (
            self._async_http_client if asynchronous else self._http_client)
        kwargs = self._client_kwargs()
        if http is not None:
            kwargs["http_client"] = http
        return cls(**kwargs)

    def request_params(self) -> dict[str, Any]:
        """Generation parameters of every call (recorded in the manifest via :meth:`describe`)."""
        params: dict[str, Any]
        if self.reasoning:
            params = {"max_completion_tokens": self.max_output_tokens,
                      "reasoning_effort": self.reasoning_effort}
        else:
            params = {"max_tokens": self.max_output_tokens, "temperature": self.temperature,
                      "seed": self.seed}
            if self.no_thinking:
                params["chat_template_kwargs"] = {"enable_thinking": False}
            if self.config.top_logprobs is not None:  # --option-probs
                params.update(logprobs=True, top_logprobs=self.config.top_logprobs)
        extra = dict(self.extra_body)
        if isinstance(extra.get("chat_template_kwargs"), Mapping) and \
                "chat_template_kwargs" in params:  # --no-thinking's switch stays in
            extra["chat_template_kwargs"] = {**extra["chat_template_kwargs"],
                                             **params["chat_template_kwargs"]}
        params.update(extra)
        return params

    def client_base_url(self) -> str:
        """The client's ``base_url``: ``--base-url``, else ``OPENAI_BASE_URL``, else the SDK's.

        Azure's: the endpoint with the SDK's ``/openai/`` path.
        """
        if self._client is None:
            self._client = self._make_client(asynchronous=False)
        return str(self._client.base_url)

    def redirected(self) -> bool:
        """Whether the requests go to a server that is not api.openai.com without ``--base-url``.

        ``OPENAI_BASE_URL`` redirects the SDK's client (docs/engines.md, "Endpoints").
        """
        return not self.base_url and self.own_endpoint() is False

    def describe(self) -> dict[str, Any]:
        """Manifest settings (no key; retries, timeout and concurrency do not change answers).

        ``server`` says whether an OpenAI-compatible server (``--base-url``, or
        ``OPENAI_BASE_URL`` naming another host than api.openai.com) answers; its address is
        in :meth:`runtime_info`, not compared on resume, so a run resumes when the same model
        is served at another address (the served model id is checked by :meth:`preflight`).
        """
        return {**super().describe(), "api_model": self.api_model,
                "server": "openai-compatible" if self.base_url or self.redirected() else None,
                "params": self.request_params(), "image_detail": self.image_detail,
                **({"extra_body": dict(self.extra_body)} if self.extra_body else {}),
                **self.images.describe()}

    def runtime_info(self) -> dict[str, Any]:
        """Where the requests go and how many at once (not compared on resume).

        ``base_url``: the server address (credentials hidden; ``--base-url``, or where
        ``OPENAI_BASE_URL`` sent the client), or None for api.openai.com. ``concurrency``: the
        requests in flight the provider was sized for; ``concurrency_rule``: the inputs of
        :meth:`suggested_concurrency` when it was asked (no ``--concurrency``).
        """
        return {**super().runtime_info(),
                "base_url": self.server_label if self.base_url else
                self.endpoint_url() if self.redirected() else None,
                "concurrency": self.concurrency,
                **({"concurrency_rule": dict(self.concurrency_rule)}
                   if self.concurrency_rule is not None else {})}

    # -- calls ----------------------------------------------------------------------------
    def _params(self, request: TurnRequest) -> dict[str, Any]:
        """:meth:`request_params` with the request's own ``seed`` where one is sent.

        A sample of ``--samples K`` carries its seed (``TurnRequest.seed``); reasoning models
        are sent none.
        """
        params = self.request_params()
        if request.seed is not None and "seed" in params:
            params["seed"] = int(request.seed)
        return params

    def _body(self, request: TurnRequest) -> dict[str, Any]:
        """The request body as a dict (reference of :meth:`_encoded_body`; tests)."""
        return {"model": self.api_model,
                "messages": build_messages(request, self.images, self.image_detail),
                **self._params(request)}

    def _encoded_body(self, request: TurnRequest) -> bytes:
        """The body bytes (:func:`encode_body`; the SDK's JSON of :meth:`_body`)."""
        return encode_body(self.api_model, request, self.images, self.image_detail,
                           self._params(request))

    def _post_body(self, request: TurnRequest) -> dict[str, Any]:
        """Body keyword of ``client.post``: the pre-encoded bytes as ``content``."""
        return {"content": self._encoded_body(request)}

    # The body is plain JSON, so it is POSTed with the SDK's documented custom-request method
    # (``client.post(path, cast_to=httpx2.Response, body=...)``) rather than
    # ``chat.completions.create``, whose per-call TypedDict transform walks every message part
    # (about 24 ms of CPU per 9-turn request with images) and whose pydantic response model
    # costs another ~0.5 ms; the body is given already encoded (``content=`` bytes, which the
    # SDK sends as they are, with its ``Content-Type: application/json``; see
    # :func:`encode_body`), except for Azure, whose SDK client reads the deployment for the URL
    # from a dict body (:meth:`AzureOpenAIChatModel._post_body`). Measured
    # with benchmarks/bench_api_throughput.py. Auth, base URL, Azure deployment routing,
    # timeouts and the mapping of HTTP errors to ``openai.APIStatusError`` subclasses are the
    # SDK's, unchanged; the JSON is read here.
    def _call(self, request: TurnRequest) -> Any:
        if self._client is None:
            self._client = self._make_client(asynchronous=False)
        return self._client.post("/chat/completions", cast_to=self._raw_response_type,
                                 **self._post_body(request)).json()

    async def _acall(self, request: TurnRequest) -> Any:
        clients = self._aclient.get(self._make_async_clients)
        self._next_client = (self._next_client + 1) % len(clients)
        response = await clients[self._next_client].post(
            "/chat/completions", cast_to=self._raw_response_type, **self._post_body(request))
        return response.json()

    def _make_async_clients(self) -> list[Any]:
        """One async client per :data:`CONNECTIONS_PER_CLIENT` requests in flight.

        httpcore's connection pool scans every pooled connection (a socket poll each) on every
        request, so one pool of 64 connections cost about 1 ms of CPU per request; several
        small pools used round-robin keep that cost flat (benchmarks/bench_api_throughput.py).
        A client given by the caller (tests) is used alone. The clients share one TLS context
        (the SDK's default transport loads the CA bundle per client: ~50 ms of CPU each).
        """
        if self._async_http_client is not None:
            return [self._make_client(asynchronous=True)]
        count = max(1, -(-self.concurrency // CONNECTIONS_PER_CLIENT))
        if count == 1:
            return [self._make_client(asynchronous=True)]
        tls = require("httpx2", "openai", f"the {self.provider} provider").create_ssl_context()
        return [self._make_client(asynchronous=True,
                                  http_client=self._openai.DefaultAsyncHttpxClient(verify=tls))
                for _ in range(count)]

    def _check(self, response: Any) -> None:
        """A completion needs a choice with a message; an error body or an abort is a fault."""
        if not isinstance(response, dict):
            raise MalformedResponse(f"not a JSON object ({type(response).__name__})")
        error = response.get("error")
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices:
            why = (f"error {str(error.get('message', error))[:200]!r}"
                   if isinstance(error, dict) else "no choices")
            raise MalformedResponse(why)
        choice = choices[0]
        if not isinstance(choice, dict) or not isinstance(choice.get("message") or {}, dict):
            raise MalformedResponse("a choice without a message object")
        content = (choice.get("message") or {}).get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise MalformedResponse(f"content of type {type(content).__name__}")
        if choice.get("finish_reason") in _ABORT_REASONS:
            raise MalformedResponse(f"the server ended the request early (finish_reason="
                                    f"{choice.get('finish_reason')})")

    def _to_completion(self, response: Any) -> Completion:
        usage = _usage(response.get("usage"))
        model = response.get("model")
        choice = response["choices"][0]
        finish = choice.get("finish_reason")
        message = choice.get("message") or {}
        text = message.get("content") or ""
        if not isinstance(text, str):  # content parts (some compatible servers)
            text = "".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
        refusal = message.get("refusal")
        if refusal:
            return Completion(str(refusal), status="refused", finish_reason=finish or "refusal",
                              usage=usage, response_model=model)
        if finish == "content_filter":  # the provider's filter, not the model's refusal
            return Completion(text, status="blocked", finish_reason=finish, usage=usage,
                              response_model=model)
        completion = answer_completion(text, finish, usage=usage, model=model,
                                       cut_off=finish == "length")
        if self.config.top_logprobs is not None:
            completion.top_logprobs = chat_top_logprobs(choice.get("logprobs"))
        return completion

    def _classify(self, exc: BaseException) -> Failure | None:
        openai = self._openai
        secrets = (self._api_key,)
        where = f" at {self.server_label}" if self.base_url else ""
        if isinstance(exc, openai.APITimeoutError):
            return Failure("retryable", f"timeout after {self.timeout_s:g} s{where}")
        if isinstance(exc, openai.APIConnectionError):
            cause = str(exc.__cause__ or exc).rstrip(".") or type(exc).__name__
            return Failure("retryable", redact(f"no answer from the server{where} "
                                               f"(connection failed or closed: {cause})",
                                               secrets))
        if isinstance(exc, json.JSONDecodeError):
            return Failure("retryable", f"response is not JSON ({exc.msg})")
        if not isinstance(exc, openai.APIStatusError):
            return None
        code = exc.status_code
        err_code = str(getattr(exc, "code", None) or "")
        text = str(getattr(exc, "message", exc))
        text = re.sub(rf"^Error code: {code} - ", "", text)  # the SDK's prefix; we say HTTP N
        message = redact(f"HTTP {code}: {text}", secrets)[:500]
        if code in (400, 413, 422) and (err_code in _CONTEXT_CODES or _CONTEXT_TEXT.search(text)):
            return Failure("request", self._context_message(message), code,
                           context_overflow=True)
        if code == 429 and err_code in _QUOTA_CODES:
            return Failure("fatal", f"{message}. The API key's quota or billing is exhausted: "
                                    f"retrying cannot help; add credit or use another key",
                           code)
        if code == 400 and err_code in _FILTER_CODES:  # a provider-side filter: blocked
            return Failure("request", message, code, completion_status="blocked")
        if code in RETRYABLE_STATUS or code >= 500:
            return Failure("retryable", message, code,
                           retry_after_s=parse_retry_after(exc.response.headers))
        # 401/403/404/400/422, and every other status: not retryable, and not an answer of the
        # model either (402 billing, 413 a proxy's size limit, ...): the run stops
        return Failure("fatal", f"{message}. {self._fatal_hint(code)}", code)

    def _context_message(self, message: str) -> str:
        """The context-overflow error: the server's words, our request and the flags."""
        context = self.server_info.get("max_model_len")
        limit = f"The server's context is {context} tokens; each" if context else "Each"
        return (f"the request does not fit the model's context ({message}). {limit} request "
                f"asks for up to {self.max_output_tokens} new tokens (--max-new-tokens) on top "
                f"of the prompt: lower --max-new-tokens, bound the images (--max-image-side), "
                f"or serve the model with a longer context (vLLM --max-model-len); a different "
                f"--max-new-tokens or image bound is a different run: give it another "
                f"--output-path (--overwrite would erase the run already there)")

    def _fatal_hint(self, code: int) -> str:
        if code in (401, 403):
            return "Check the API key (and its permissions)"
        if code == 404:
            return (f"Check --model ({self.api_model!r})"
                    + (f" and --base-url ({self.server_label})" if self.base_url else ""))
        if code == 402:
            return "The account needs payment or credit"
        if code in (400, 422):
            return "The server rejected the request; check --model, --extra-body and the server"
        return (f"HTTP {code} is neither a fault that retrying can fix nor an answer of the "
                f"model; check the server (or a proxy in front of it)")

    # -- before the run -------------------------------------------------------------------
    def _get_json(self, url: str, timeout_s: float) -> tuple[int | None, Any]:
        """GET ``url`` with the client's key; ``(status, JSON or None)``, status None if down.

        Raises:
            ProviderError: When the connection can never work as configured (a TLS handshake
                with a plain-HTTP server, say), so waiting would not help.
        """
        httpx2 = require("httpx2", "openai", f"the {self.provider} provider")
        try:
            response = httpx2.get(url, timeout=timeout_s,
                                  headers={"Authorization": f"Bearer {self._api_key}"})
        except httpx2.HTTPError as exc:
            text = redact(str(exc) or type(exc).__name__, (self._api_key,))
            if "SSL" in text or "certificate" in text.lower():
                raise ProviderError(
                    f"the TLS handshake with {self.server_label} failed ({text}); a local vLLM "
                    f"or SGLang server speaks plain http: use --base-url http://...") from None
            return None, text
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, None

    def preflight(self) -> None:
        """With ``base_url``: wait for the server to answer ``GET /models``, check ``--model``.

        A server that refuses connections or answers 5xx is still starting: probed every
        :data:`SERVER_POLL_S` s for up to ``server_wait_s`` s, with a log line every
        :data:`SERVER_LOG_EVERY_S` s. A server without a usable model list (404, 401/403 behind
        a gateway, something other than JSON) is used as it is, with a warning. Records the
        served model's ``max_model_len`` (vLLM, SGLang report it) for :meth:`prompt_limits`.
        Nothing is done for api.openai.com.

        Raises:
            ProviderError: If the server is not ready in time, cannot be reached as configured,
                or lists models none of which is ``--model`` (the message lists them).
        """
        if not self.base_url:
            return
        url = self.base_url + "/models"
        started = time.monotonic()
        last_log: float | None = None  # the first failed probe is logged at once
        while True:
            left = self.server_wait_s - (time.monotonic() - started)
            status, data = self._get_json(url, max(1.0, min(10.0, self.timeout_s, left)))
            if status is not None and status < 500:
                break
            waited = time.monotonic() - started
            why = f"HTTP {status}" if status is not None else data
            if waited >= self.server_wait_s:
                raise ProviderError(
                    f"the server at {self.server_label} did not become ready in "
                    f"{self.server_wait_s:g} s (last: {why}); start it (docs/engines.md) or "
                    f"wait longer with --server-wait SECONDS; nothing was recorded")
            if last_log is None or time.monotonic() - last_log >= SERVER_LOG_EVERY_S:
                logger.info("waiting for the server at %s to be ready (%s; %.0f s of %g s)",
                            self.server_label, why, waited, self.server_wait_s)
                last_log = time.monotonic()
            time.sleep(SERVER_POLL_S)
        if status == 404 and not self.base_url.endswith("/v1"):
            probe, _ = self._get_json(self.base_url + "/v1/models", 10.0)
            if probe == 200:
                raise ProviderError(
                    f"the server at {self.server_label} has no GET /models, but "
                    f"{self.server_label}/v1/models answers: OpenAI-compatible servers serve "
                    f"the API under /v1; use --base-url {self.server_label}/v1")
        entries = data.get("data") if status == 200 and isinstance(data, dict) else None
        if not isinstance(entries, list):
            logger.warning("the server at %s answered GET /models with %s, not a model list: "
                           "--model %r is not checked against it", self.server_label,
                           f"HTTP {status}" if status != 200 else "something else",
                           self.api_model)
            return
        served = {str(m["id"]): m for m in entries if isinstance(m, dict) and m.get("id")}
        if served and self.api_model not in served:
            names = ", ".join(repr(name) for name in served)
            raise ProviderError(
                f"the server at {self.server_label} serves {names}, not --model "
                f"{self.api_model!r}: pass --model {next(iter(served))} (or start the server "
                f"with --served-model-name {self.api_model})")
        context = served.get(self.api_model, {}).get("max_model_len")
        if isinstance(context, int) and not isinstance(context, bool) and context > 0:
            self.server_info["max_model_len"] = context
        logger.info("server at %s is ready (%s%s) after %.0f s", self.server_label,
                    self.api_model, f", context {self.server_info['max_model_len']} tokens"
                    if "max_model_len" in self.server_info else "",
                    time.monotonic() - started)

    def prompt_limits(self) -> PromptLimits:
        """The server's context (from :meth:`preflight`) and the output-token cap."""
        context = self.server_info.get("max_model_len")
        return PromptLimits(context_tokens=context, max_new_tokens=self.max_output_tokens,
                            image_rule=rule_for_model(self.model),
                            context_source="the server" if context else "",
                            context_flag="the server's --max-model-len",
                            image_bounds=(self.images.max_side, self.images.max_pixels))

    def count_prompt_tokens(self, request: TurnRequest) -> int | None:
        """Prompt tokens of ``request`` from the server's ``POST /tokenize`` (vLLM), or None.

        vLLM's OpenAI-compatible server counts a chat request, images included, with the
        model's own template and processor; other servers answer 404 (then None, and the
        endpoint is not asked again).
        """
        if not self.base_url or self._tokenize_supported is False:
            return None
        httpx2 = require("httpx2", "openai", f"the {self.provider} provider")
        root = re.sub(r"/v1/?$", "", self.base_url.rstrip("/"))
        body: dict[str, Any] = {"model": self.api_model, "add_generation_prompt": True,
                                "messages": build_messages(request, self.images,
                                                           self.image_detail)}
        template_kwargs = self.request_params().get("chat_template_kwargs")
        if template_kwargs:  # --no-thinking changes the rendered prompt
            body["chat_template_kwargs"] = template_kwargs
        try:
            response = httpx2.post(f"{root}/tokenize", json=body, timeout=self.timeout_s,
                                   headers={"Authorization": f"Bearer {self._api_key}"})
            count = response.json().get("count") if response.status_code == 200 else None
        except (httpx2.HTTPError, ValueError, AttributeError):
            count = None
        valid = isinstance(count, int) and not isinstance(count, bool) and count > 0
        self._tokenize_supported = valid
        return int(count) if valid else None

    # -- server capacity ------------------------------------------------------------------
    def server_kv_cache(self) -> dict[str, Any] | None:
        """The KV cache of the server at ``base_url``, from vLLM's ``GET /metrics``.

        Returns:
            :func:`parse_cache_config` of the server's metrics; None without ``base_url``, when
            the server has no ``/metrics`` (SGLang without ``--enable-metrics``, Ollama, a
            gateway) or does not report vLLM's cache config there. Asked once.
        """
        if "kv_cache" in self.server_info:
            return self.server_info["kv_cache"]
        cache = None
        if self.base_url:
            httpx2 = require("httpx2", "openai", f"the {self.provider} provider")
            root = re.sub(r"/v1/?$", "", self.base_url.rstrip("/"))
            try:
                response = httpx2.get(f"{root}/metrics", timeout=min(10.0, self.timeout_s),
                                      headers={"Authorization": f"Bearer {self._api_key}"})
                if response.status_code == 200:
                    cache = parse_cache_config(response.text)
            except httpx2.HTTPError as exc:
                logger.debug("GET %s/metrics failed: %s", self.server_label,
                             redact(str(exc), (self._api_key,)))
        self.server_info["kv_cache"] = cache
        return cache

    def suggested_concurrency(self, dialogue_tokens: int | None,
                              dialogues_per_request: int = 1) -> int | None:
        """Requests in flight such that the dialogues open stay in the server's KV cache.

        The rule (docs/design.md, "Concurrency"): with the server's cache of ``K`` tokens
        (``num_gpu_blocks x block_size``, :meth:`server_kv_cache`) and a dialogue's footprint
        ``F`` (``dialogue_tokens``, at most the server's context, rounded up to whole blocks),
        the cache holds ``K // F`` dialogues; the runner keeps ``dialogues_per_request``
        dialogues open per request in flight, so the suggestion is
        ``K // F // dialogues_per_request``, clamped to [1, :data:`MAX_SUGGESTED_CONCURRENCY`].
        A dialogue whose history stays cached between its turns is computed only for its new
        tokens; more dialogues open than the cache holds evict each other's history.

        The provider then runs at the suggestion: its HTTP clients, synchronous pool and image
        cache are sized for it. Called before the first request, only when ``--concurrency``
        was not given; the inputs go to :attr:`concurrency_rule` (the run manifest's
        ``provider_runtime``, never its identity).

        Args:
            dialogue_tokens: ``F`` in tokens: the heaviest dialogue's last request plus its
                output-token cap (docs/engines.md, "Token budget"); None: the server's context.
            dialogues_per_request: Dialogues the runner keeps open per request in flight.

        Returns:
            The suggested requests in flight, or None when the server reports no KV cache
            (then the runner's default applies) or no footprint is known.
        """
        cache = self.server_kv_cache()
        context = self.server_info.get("max_model_len")
        if cache is None:
            self.concurrency_rule = {"applied": False, "reason": (
                f"the server reports no {CACHE_CONFIG_METRIC} at GET /metrics"
                if self.base_url else "not an OpenAI-compatible server (no --base-url)")}
            return None
        footprint = dialogue_tokens or context
        if not footprint:
            self.concurrency_rule = {"applied": False, "kv_cache": cache,
                                     "reason": "no dialogue footprint and no server context"}
            return None
        if context:
            footprint = min(footprint, context)
        block = cache["block_size"]
        footprint = -(-int(footprint) // block) * block
        dialogues = cache["tokens"] // footprint
        value = min(MAX_SUGGESTED_CONCURRENCY, max(1, dialogues // max(1, dialogues_per_request)))
        self.concurrency_rule = {
            "applied": True, "kv_cache": cache, "dialogue_tokens": footprint,
            "footprint_source": "the heaviest dialogue" if dialogue_tokens else
            "the server's context", "dialogues_in_cache": dialogues,
            "dialogues_per_request": dialogues_per_request, "concurrency": value}
        self.concurrency = value
        self.images.size = max(self.images.size, IMAGES_PER_SLOT * value)
        logger.info("concurrency %d from the server's KV cache: %d tokens (%d blocks of %d) "
                    "hold %d dialogue(s) of %d tokens (%s), %d open per request in flight "
                    "(docs/design.md, 'Concurrency'; --concurrency overrides it)", value,
                    cache["tokens"], cache["num_gpu_blocks"], block, dialogues, footprint,
                    self.concurrency_rule["footprint_source"], dialogues_per_request)
        return value

    # -- lifecycle ------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the event loop's async clients."""
        for client in self._aclient.take() or []:
            await client.close()

    def close(self) -> None:
        """Close the synchronous client."""
        if self._client is not None:
            self._client.close()
            self._client = None


def _count(block: Any, key: str) -> int:
    """A token count of a usage block; 0 when absent or not a whole number >= 0."""
    value = block.get(key) if isinstance(block, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return 0
    return max(int(value), 0)


def chat_top_logprobs(block: Any) -> list[TokenTopLogprobs] | None:
    """A choice's ``logprobs`` JSON -> one ``(token, {candidate: logprob})`` per generated token.

    Reads ``logprobs.content[*]``: each entry's ``token`` and its ``top_logprobs`` list of
    ``{"token", "logprob"}`` (OpenAI's Chat Completions shape, which vLLM's and SGLang's
    OpenAI-compatible servers return too). Candidates whose text repeats (two token ids that
    decode alike) are summed in probability.

    Args:
        block: ``choices[0].logprobs`` as parsed JSON (may be None or malformed).

    Returns:
        The tokens in order, or None when the block is missing, empty or malformed (a
        provider that should have sent it did not: Stage 03 records the turn's option
        probabilities as missing, never as zeros).
    """
    content = block.get("content") if isinstance(block, dict) else None
    if not isinstance(content, list) or not content:
        return None
    steps: list[TokenTopLogprobs] = []
    for entry in content:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str) or \
                not isinstance(entry.get("top_logprobs"), list):
            return None
        top: dict[str, float] = {}
        for cand in entry["top_logprobs"]:
            value = cand.get("logprob") if isinstance(cand, dict) else None
            if not isinstance(cand, dict) or not isinstance(cand.get("token"), str) or \
                    isinstance(value, bool) or not isinstance(value, (int, float)):
                return None
            add_logprob(top, cand["token"], float(value))
        steps.append((entry["token"], top))
    return steps


def _usage(usage: Any) -> Usage:
    """OpenAI usage JSON -> :class:`Usage` (reasoning tokens are part of ``completion_tokens``).

    Counts that are missing or malformed (strings, negatives) are 0: usage never stops a run.
    """
    if not isinstance(usage, dict):
        return Usage()
    return Usage(input_tokens=_count(usage, "prompt_tokens"),
                 cached_input_tokens=_count(usage.get("prompt_tokens_details"), "cached_tokens"),
                 output_tokens=_count(usage, "completion_tokens"),
                 thinking_tokens=_count(usage.get("completion_tokens_details"),
                                        "reasoning_tokens"))


class AzureOpenAIChatModel(OpenAIChatModel):
    """``azure``: Azure OpenAI; ``deployment`` (default: the model name) names the URL.

    Args:
        model: The model name behind the deployment (pricing, reasoning detection).
        config: The settings (:class:`~utils.llm.settings.AzureConfig`: the ``openai`` options
            plus ``deployment``; ``base_url`` overrides the endpoint); None: the defaults.
        **kwargs: As :class:`OpenAIChatModel` (runtime keywords and options). The key, endpoint
            and API version are read from ``api_keys.yaml`` (``azure.api_key``,
            ``azure.endpoint``, ``azure.api_version``) unless ``AZURE_OPENAI_API_KEY``,
            ``AZURE_OPENAI_ENDPOINT`` and ``OPENAI_API_VERSION`` are set.

    Raises:
        ConfigError: If the key or the endpoint is missing (names the variable and YAML key),
            or for an unknown option or an invalid value.
    """

    provider = "azure"
    description = "Azure OpenAI deployments"
    config_class = AzureConfig
    own_hosts = ("openai.azure.com", "cognitiveservices.azure.com", "services.ai.azure.com")
    _env_keys = ("AZURE_OPENAI_API_KEY",)
    _section = "azure"

    def __init__(self, model: str, config: AzureConfig | None = None, **kwargs: Any) -> None:
        super().__init__(model, config, **kwargs)
        self.deployment = self.config.deployment or model
        self.endpoint = self.config.base_url or resolve(
            self._env, ("AZURE_OPENAI_ENDPOINT",), self._keys, "azure", "endpoint",
            what="the azure provider")
        self.api_version = resolve(
            self._env, ("OPENAI_API_VERSION", "AZURE_OPENAI_API_VERSION"), self._keys, "azure",
            "api_version", what="the azure provider", required=False) or \
            DEFAULT_AZURE_API_VERSION

    def _server_url(self, config: OpenAIConfig) -> None:
        """None: Azure's endpoint is not an OpenAI-compatible server (no wait, no /models)."""
        return None

    def redirected(self) -> bool:
        """False: the endpoint in use is always the one recorded (``describe``'s ``endpoint``)."""
        return False

    def _resolve_key(self) -> str:
        key = resolve(self._env, self._env_keys, self._keys, self._section, "api_key",
                      what="the azure provider")
        return str(key)

    @property
    def api_model(self) -> str:
        """The deployment name (Azure routes by deployment)."""
        return self.deployment

    def _post_body(self, request: TurnRequest) -> dict[str, Any]:
        """A dict body: ``AzureOpenAI`` builds ``/deployments/<model>/...`` from its ``model``."""
        return {"body": self._body(request)}

    def _client_kwargs(self) -> dict[str, Any]:
        return {"api_key": self._api_key, "azure_endpoint": self.endpoint,
                "api_version": self.api_version, "max_retries": 0, "timeout": self.timeout_s}

    _client_classes = ("AzureOpenAI", "AsyncAzureOpenAI")

    def _fatal_hint(self, code: int) -> str:
        """A 404 names ``--deployment``: Azure routes by deployment, not by ``--model``."""
        if code != 404:
            return super()._fatal_hint(code)
        given = "" if self.config.deployment else " (not given: the --model name)"
        return (f"Check --deployment ({self.deployment!r}{given}): the Azure endpoint "
                f"{hide_credentials(self.endpoint)} has no deployment of that name, or its "
                f"api-version {self.api_version} (OPENAI_API_VERSION / azure.api_version) is "
                f"not served; --model ({self.model!r}) only sets pricing and the request "
                f"parameters")

    def describe(self) -> dict[str, Any]:
        """Manifest settings: deployment, endpoint (credentials hidden), api-version; no key."""
        return {**super().describe(), "deployment": self.deployment,
                "endpoint": hide_credentials(self.endpoint), "api_version": self.api_version}
