"""Stage 03 provider settings: one frozen, documented config class per provider.

Every option a provider takes is a field of its config class (docs/engines.md, "Provider
settings", lists them, generated from these classes by :func:`settings_markdown`). A provider is
built as ``Provider(model, config, **options)``: ``options`` are merged into ``config`` through
:meth:`ProviderConfig.from_options`, which refuses an option the class does not have by name and
checks every value, so a misspelt keyword is an error, never dropped.

Configs hold plain values only (numbers, strings, paths, JSON-like dicts), so they pickle (a
provider built inside a worker process gets its config or its options) and compare equal when
their values do. Objects that exist only while a process runs (HTTP clients, the environment to
read keys from, a :class:`~utils.llm.retry.RetryPolicy` for tests) stay keywords of the
provider's constructor; they never reach the manifest.

Configs store what was given (validated; a base URL normalised), not what the provider derives
from it: ``temperature=None`` stays None and the provider picks its default, so the settings a
provider records (``describe()``) are the same whichever way it was built.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import json
import numbers
import os
import re
import textwrap
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from utils.errors import ConfigError

#: Options every provider accepts, whether it uses them or not: Stage 03 passes them to any
#: provider (a baseline ignores ``no_thinking``; only ``random`` draws with ``seed``). A config
#: without such a field drops them.
RUN_OPTIONS = frozenset({"seed", "no_thinking"})

#: Default requests in flight (``--concurrency``; docs/design.md, "Concurrency").
DEFAULT_CONCURRENCY = 16
#: Default per-attempt HTTP timeout in seconds (``--request-timeout``).
DEFAULT_TIMEOUT_S = 600.0
#: Default retries per request (``--max-retries``; docs/design.md, "Retries").
DEFAULT_MAX_RETRIES = 6
#: Output-token budget per call (``max_completion_tokens`` / ``max_output_tokens`` 8192 in the
#: release; docs/evaluation_protocol.md, "Providers").
DEFAULT_MAX_OUTPUT_TOKENS = 8192
#: Default ``--server-wait``: seconds to wait for an OpenAI-compatible server that is starting
#: (loading a large model in vLLM takes minutes; docs/engines.md, "OpenAI-compatible servers").
DEFAULT_SERVER_WAIT_S = 900.0
#: ``reasoning_effort`` values the SDK accepts (docs/evaluation_protocol.md, "Providers").
REASONING_EFFORTS: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh")
#: Thinking levels of Gemini 3 (``--reasoning-effort`` for this provider).
THINKING_LEVELS: tuple[str, ...] = ("minimal", "low", "medium", "high")
#: How the opensource provider drives vLLM (``--vllm-engine``; docs/engines.md, "Offline
#: engine").
ENGINE_MODES: tuple[str, ...] = ("batched", "async")
#: Request fields ``--extra-body`` may not set: the harness owns them, or a flag sets them (the
#: message names it).
RESERVED_BODY_FIELDS = {
    "model": "--model", "messages": "the benchmark", "stream": "the harness", "n": "the harness",
    "max_tokens": "--max-new-tokens", "max_completion_tokens": "--max-new-tokens",
    "reasoning_effort": "--reasoning-effort",
}
#: Most top log-probabilities per token a provider may be asked for (``top_logprobs``): OpenAI's
#: Chat Completions limit (0-20), also vLLM's default ``max_logprobs``.
MAX_TOP_LOGPROBS = 20
#: Deepest nesting of an ``--extra-body`` object.
MAX_BODY_DEPTH = 16

C = TypeVar("C", bound="ProviderConfig")
Check = Callable[[Any], "str | None"]


# -- value checks (each returns None or what was expected) ------------------------------------
def _got(value: Any) -> str:
    return f"got {value!r}"


def integer(low: int | None = None, *, optional: bool = False) -> Check:
    """A check: a whole number (not a bool), at least ``low``; None allowed when ``optional``."""
    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or \
                (low is not None and value < low):
            return f"must be an integer{f' >= {low}' if low is not None else ''}, {_got(value)}"
        return None
    return check


def top_k() -> Check:
    """A check: None, or a whole number in [1, :data:`MAX_TOP_LOGPROBS`] (``top_logprobs``)."""
    def check(value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or \
                not 1 <= value <= MAX_TOP_LOGPROBS:
            return f"must be an integer from 1 to {MAX_TOP_LOGPROBS}, {_got(value)}"
        return None
    return check


def number(*, above: float | None = None, at_least: float | None = None,
           at_most: float | None = None, optional: bool = False) -> Check:
    """A check: a real number (not a bool) in the given bounds; None allowed when ``optional``."""
    bounds = [f"> {above:g}" if above is not None else "",
              f">= {at_least:g}" if at_least is not None else "",
              f"<= {at_most:g}" if at_most is not None else ""]
    what = "a number" + (" " + " and ".join(b for b in bounds if b) if any(bounds) else "")

    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value \
                or (above is not None and not value > above) \
                or (at_least is not None and not value >= at_least) \
                or (at_most is not None and not value <= at_most):
            return f"must be {what}, {_got(value)}"
        return None
    return check


def one_of(choices: Iterable[str], *, optional: bool = False) -> Check:
    """A check: one of ``choices``; None allowed when ``optional``."""
    choices = tuple(choices)

    def check(value: Any) -> str | None:
        if (value is None and optional) or (isinstance(value, str) and value in choices):
            return None
        return f"must be one of {', '.join(choices)}, {_got(value)}"
    return check


def boolean(*, optional: bool = False) -> Check:
    """A check: True or False; None allowed when ``optional``."""
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or (value is None and optional):
            return None
        return f"must be true or false, {_got(value)}"
    return check


def text(*, optional: bool = True) -> Check:
    """A check: a non-empty string; None allowed when ``optional``."""
    def check(value: Any) -> str | None:
        if (value is None and optional) or (isinstance(value, str) and value.strip()):
            return None
        return f"must be a non-empty string, {_got(value)}"
    return check


def path(*, optional: bool = True) -> Check:
    """A check: a file or folder path (str or ``os.PathLike``); None allowed when ``optional``."""
    def check(value: Any) -> str | None:
        if (value is None and optional) or (isinstance(value, (str, os.PathLike))
                                            and str(value).strip()):
            return None
        return f"must be a path, {_got(value)}"
    return check


def mapping(*, optional: bool = True) -> Check:
    """A check: a mapping with string keys; None allowed when ``optional``."""
    def check(value: Any) -> str | None:
        if (value is None and optional) or (isinstance(value, Mapping)
                                            and all(isinstance(k, str) for k in value)):
            return None
        return f"must be a mapping with string keys, {_got(value)}"
    return check


def option(default: Any, check: Check | None = None, flag: str | None = None) -> Any:
    """A config field: its default, its value check and the Stage 03 flag that sets it."""
    return dataclasses.field(default=default, metadata={"check": check, "flag": flag})


# -- checks shared with the providers ------------------------------------------------------
#: Query (and fragment) parameters whose value is a credential, by whole name (lower case) ...
SECRET_URL_PARAMS = frozenset({"auth", "authorization", "code", "password", "passwd", "pwd"})
#: ... or by a part of it: ``api_key``, ``x-api-key``, ``access_token``, ``sig`` (Azure SAS),
#: ``X-Amz-Signature``, ``X-Amz-Credential``, ``client_secret``.
SECRET_URL_PARAM_PARTS = ("key", "token", "secret", "sig", "password", "credential")
#: ``scheme://user:password@``: everything before the authority's last ``@``.
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def is_secret_url_param(name: str) -> bool:
    """Whether a URL query parameter called ``name`` carries a credential (any case)."""
    name = urllib.parse.unquote_plus(name).strip().lower()
    return name in SECRET_URL_PARAMS or any(part in name for part in SECRET_URL_PARAM_PARTS)


def _hide_params(params: str) -> str:
    """``a=1&api_key=s`` -> ``a=1&api_key=***``: secret-named non-empty values hidden."""
    out = []
    for item in params.split("&"):
        name, eq, value = item.partition("=")
        out.append(f"{name}=***" if eq and value and is_secret_url_param(name) else item)
    return "&".join(out)


def hide_credentials(url: str) -> str:
    """``url`` as logged and recorded: credentials replaced by ``***``, the rest kept as given.

    Hidden: ``user:password@`` (-> ``***@``) and the value of every query or fragment
    parameter whose name is a credential's (:func:`is_secret_url_param`: ``api_key``,
    ``token``, ``sig``, ``password``, ...; ``?api_key=s&v=2`` -> ``?api_key=***&v=2``). The
    one function every base URL or endpoint goes through before a log line, an error message
    or a manifest; it parses nothing else, so it never fails and changes nothing else.
    """
    head, hash_, fragment = url.partition("#")
    base, query_mark, query = head.partition("?")
    base = _USERINFO.sub(r"\1***@", base)
    return base + query_mark + _hide_params(query) + hash_ + _hide_params(fragment)


def check_base_url(base_url: str | None) -> str | None:
    """``--base-url`` checked and normalised (no trailing slash); None stays None.

    Raises:
        ConfigError: For an empty value, a scheme other than http/https, no host, or a port
            out of range (the message shows the form expected).
    """
    if base_url is None:
        return None
    if not isinstance(base_url, str):
        raise ConfigError(f"--base-url must be a string, got {base_url!r}")
    stripped = base_url.strip()
    example = "e.g. http://127.0.0.1:8000/v1"
    if not stripped:
        raise ConfigError(f"--base-url is empty; give the server's URL ({example}) or leave "
                          f"the flag out for api.openai.com")
    try:  # urlsplit refuses an unclosed IPv6 bracket, .port a port that is not a number
        parts = urllib.parse.urlsplit(stripped)
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        parts, port_ok = None, False
    if not port_ok or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--base-url {hide_credentials(stripped)!r}: not an http(s) URL with "
                          f"a host and a valid port ({example})")
    return stripped.rstrip("/")


def _depth(value: Any, limit: int = MAX_BODY_DEPTH + 1) -> int:
    """Nesting depth of JSON data, counted up to ``limit`` (no deep recursion)."""
    depth, level = 0, [value]
    while level and depth < limit:
        depth += 1
        level = [v for item in level for v in
                 (item.values() if isinstance(item, Mapping) else
                  item if isinstance(item, list) else ()) if isinstance(v, (Mapping, list))]
    return depth


def check_extra_body(extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
    """``--extra-body`` as a plain dict, checked.

    Args:
        extra_body: The fields, or None.

    Returns:
        A copy (empty when None).

    Raises:
        ConfigError: If it is not a mapping, is not JSON-serialisable, or sets one of
            :data:`RESERVED_BODY_FIELDS`.
    """
    if extra_body is None:
        return {}
    if not isinstance(extra_body, Mapping):
        raise ConfigError(f"--extra-body must be a JSON object, got {type(extra_body).__name__}")
    reserved = sorted(set(extra_body) & set(RESERVED_BODY_FIELDS))
    if reserved:
        owners = ", ".join(f"{k} ({RESERVED_BODY_FIELDS[k]})" for k in reserved)
        raise ConfigError(f"--extra-body may not set {', '.join(reserved)}: set by {owners}; "
                          f"remove them from the object")
    if _depth(extra_body) > MAX_BODY_DEPTH:
        raise ConfigError(f"--extra-body is nested deeper than {MAX_BODY_DEPTH} levels")
    try:
        json.dumps(dict(extra_body), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"--extra-body is not valid JSON data ({exc})") from None
    return dict(extra_body)


def unknown_options_message(provider: str, unknown: Iterable[str], valid: Iterable[str]) -> str:
    """The error of options a provider does not take: names them, lists the valid ones.

    A close match is suggested for each (``max_retires`` -> ``max_retries``).
    """
    unknown, valid = sorted(unknown), sorted(valid)
    hints = [f"{name}: did you mean {match[0]}?" for name in unknown
             if (match := difflib.get_close_matches(name, valid, n=1, cutoff=0.75))]
    return (f"provider '{provider}' has no option(s) {', '.join(unknown)}; it takes: "
            f"{', '.join(valid)}"
            + (f" ({'; '.join(hints)})" if hints else ""))


# -- the config classes ---------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ProviderConfig:
    """Settings of a provider without options (``dummy``, ``oracle``; plugins may subclass it).

    Subclasses declare each option as a field made by :func:`option` (default, value check,
    flag) followed by an attribute docstring, which docs/engines.md, "Provider settings"
    shows.

    Raises:
        ConfigError: On construction, naming every option whose value is invalid (all at once).
    """

    #: Provider name used in messages.
    provider: ClassVar[str] = "provider"

    def __post_init__(self) -> None:
        problems = []
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            found = check(getattr(self, f.name)) if check else None
            if found:
                flag = f.metadata.get("flag")
                problems.append(f"{f.name} {found}" + (f" ({flag})" if flag else ""))
        if not problems:
            try:
                self._normalise()
            except ConfigError as exc:
                problems.append(str(exc))
        if problems:
            raise ConfigError(f"{self.provider}: " + "; ".join(problems))

    def _normalise(self) -> None:
        """Check and normalise values beyond the per-field checks (subclass hook).

        Raises:
            ConfigError: For an invalid value (the message names the option).
        """

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # frozen: only from _normalise

    @classmethod
    def option_names(cls) -> frozenset[str]:
        """Every option (field) of this config."""
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_options(cls: type[C], options: Mapping[str, Any] | None = None, *,
                     base: C | None = None, provider: str | None = None) -> C:
        """A config from keyword options, over ``base`` (or the defaults).

        Args:
            options: Option name -> value (``create_model`` keywords, Stage 03 flags). The
                :data:`RUN_OPTIONS` are accepted by every config and dropped where it has no
                such field.
            base: A config of exactly this class whose values the options override.
            provider: Provider name for messages (default: the class's).

        Returns:
            A new, validated config.

        Raises:
            ConfigError: Naming every option the class does not have (with the valid ones and
                close matches), every invalid value, or a ``base`` of another class.
        """
        who = provider or cls.provider
        if base is not None and type(base) is not cls:
            raise ConfigError(f"provider '{who}' takes a {cls.__name__} as config, got "
                              f"{type(base).__name__}")
        options = dict(options or {})
        names = cls.option_names()
        unknown = set(options) - names - RUN_OPTIONS
        if unknown:
            raise ConfigError(unknown_options_message(who, unknown, names | RUN_OPTIONS))
        given = {k: v for k, v in options.items() if k in names}
        if base is None:
            return cls(**given)
        return dataclasses.replace(base, **given) if given else base

    def to_options(self) -> dict[str, Any]:
        """Every option and its value; ``from_options(to_options())`` gives an equal config."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True, kw_only=True)
class RandomConfig(ProviderConfig):
    """Settings of the ``random`` baseline (docs/evaluation_protocol.md, "Providers")."""

    provider: ClassVar[str] = "random"

    seed: int = option(0, integer(), "--seed")
    """Run seed; each request draws from ``(seed, hash of its request id)``."""


@dataclass(frozen=True, kw_only=True)
class ApiConfig(ProviderConfig):
    """Transport settings shared by the API providers (openai, azure, gemini, anthropic).

    Only the image bounds change what the model sees: they are recorded in the run manifest
    (and compared on resume); the others are not.
    """

    provider: ClassVar[str] = "api"

    api_keys: str | Path | None = option(None, path(), "--api-keys")
    """``api_keys.yaml``, read only when the environment lacks the provider's key (None:
    ``api_info/api_keys.yaml`` of the repository; docs/evaluation_protocol.md, "Providers")."""
    max_retries: int = option(DEFAULT_MAX_RETRIES, integer(0), "--max-retries")
    """Retries per request after the first attempt on 408/409/429/5xx, timeouts and connection
    failures (default 6; docs/design.md, "Retries"); 0 disables retrying."""
    concurrency: int = option(DEFAULT_CONCURRENCY, integer(1), "--concurrency")
    """Threads of the synchronous ``generate``, and the size of the encoded-image cache (the
    async runner bounds requests in flight itself; default 16, docs/design.md,
    "Concurrency")."""
    timeout_s: float = option(DEFAULT_TIMEOUT_S, number(above=0), "--request-timeout")
    """Per-attempt HTTP timeout in seconds (default 600)."""
    max_image_side: int | None = option(None, integer(1, optional=True), "--max-image-side")
    """Downscale images whose longest side exceeds this many pixels before sending (None: the
    bundle's files as they are; docs/engines.md, "OpenAI-compatible servers")."""
    max_image_pixels: int | None = option(None, integer(1, optional=True), "--max-image-pixels")
    """Downscale images with more pixels (width x height) than this before sending (None: no
    bound)."""


@dataclass(frozen=True, kw_only=True)
class OpenAIConfig(ApiConfig):
    """Settings of ``openai``: api.openai.com or an OpenAI-compatible server.

    Defaults follow docs/evaluation_protocol.md, "Providers"; the server options
    docs/engines.md, "OpenAI-compatible servers".
    """

    provider: ClassVar[str] = "openai"

    base_url: str | None = option(None, text(), "--base-url")
    """OpenAI-compatible server, e.g. ``http://127.0.0.1:8000/v1`` (an http(s) URL with a host;
    stored without a trailing slash); None: api.openai.com. With a base URL the key is
    optional."""
    reasoning_effort: str | None = option(None, one_of(REASONING_EFFORTS, optional=True),
                                          "--reasoning-effort")
    """``reasoning_effort`` of reasoning models (``gpt-5*``, ``o1``/``o3``/``o4*``); None:
    ``medium`` (the release's), or with ``no_thinking`` the lowest the family accepts."""
    max_output_tokens: int = option(DEFAULT_MAX_OUTPUT_TOKENS, integer(1))
    """``max_completion_tokens`` (reasoning models) or ``max_tokens`` per call (default 8192,
    the release's)."""
    max_new_tokens: int | None = option(None, integer(1, optional=True), "--max-new-tokens")
    """Replaces ``max_output_tokens`` when given (Stage 03's flag for every provider)."""
    extra_body: dict[str, Any] | None = option(None, mapping(), "--extra-body")
    """Further JSON request fields sent after ours (they win; ``chat_template_kwargs`` are
    merged), recorded in the manifest; ``model``, ``messages``, ``stream``, ``n``,
    ``max_tokens``, ``max_completion_tokens`` and ``reasoning_effort`` are refused."""
    server_wait_s: float = option(DEFAULT_SERVER_WAIT_S, number(at_least=0), "--server-wait")
    """With ``base_url``: seconds to wait for a server that is still starting (default 900;
    0 checks once)."""
    temperature: float | None = option(None, number(at_least=0, optional=True),
                                       "--temperature")
    """Sampling temperature, non-reasoning models only (None: 0.0); never sent to reasoning
    models. ``--samples K`` > 1 needs it > 0 (docs/evaluation_protocol.md, "Sampling")."""
    seed: int = option(0, integer(), "--seed")
    """Sent to non-reasoning models."""
    no_thinking: bool = option(False, boolean(), "--no-thinking")
    """Lowest ``reasoning_effort`` for reasoning models; for other models
    ``chat_template_kwargs.enable_thinking=false`` (vLLM, SGLang)."""
    image_detail: str | None = option(None, text())
    """``detail`` of image parts (``low``, ``high``, ``auto``); None: not sent."""
    top_logprobs: int | None = option(None, top_k())
    """Ask for the top-k log-probabilities of each generated token (``logprobs=true``,
    ``top_logprobs=k``; set by Stage 03's ``--option-probs``); None: not asked. Reasoning
    models return none and refuse it."""

    def _normalise(self) -> None:
        self._set("base_url", check_base_url(self.base_url))
        if self.extra_body is not None:
            self._set("extra_body", check_extra_body(self.extra_body))


@dataclass(frozen=True, kw_only=True)
class AzureConfig(OpenAIConfig):
    """Settings of ``azure``: Azure OpenAI (the ``openai`` options, plus ``deployment``).

    The key, endpoint and API version come from the environment or ``api_keys.yaml``
    (docs/evaluation_protocol.md, "Providers"); ``server_wait_s`` is not used.
    """

    provider: ClassVar[str] = "azure"

    deployment: str | None = option(None, text(), "--deployment")
    """Deployment name in the URL; None: the model name (which drives pricing and the
    reasoning-model choice)."""
    base_url: str | None = option(None, text(), "--base-url")
    """Endpoint that replaces ``AZURE_OPENAI_ENDPOINT`` / ``azure.endpoint`` (e.g. a loopback
    server in tests); kept as given."""
    server_wait_s: float = option(DEFAULT_SERVER_WAIT_S, number(at_least=0))
    """Not used: an Azure deployment is not waited for (no ``--server-wait``)."""

    def _normalise(self) -> None:
        check_base_url(self.base_url)  # the endpoint is recorded as given
        if self.extra_body is not None:
            self._set("extra_body", check_extra_body(self.extra_body))


@dataclass(frozen=True, kw_only=True)
class GeminiConfig(ApiConfig):
    """Settings of ``gemini``: Developer API or Vertex AI.

    Defaults follow docs/evaluation_protocol.md, "Providers".
    """

    provider: ClassVar[str] = "gemini"

    vertex: bool | None = option(None, boolean(optional=True))
    """Force Vertex AI (True) or the Developer API (False); None: the Developer API when an API
    key is found, else Vertex AI."""
    reasoning_effort: str | None = option(None, one_of(THINKING_LEVELS, optional=True),
                                          "--reasoning-effort")
    """Gemini 3 ``thinking_level``; None: ``medium`` (the release's), or with ``no_thinking``
    ``minimal`` (Flash) / ``low`` (Pro)."""
    max_output_tokens: int = option(DEFAULT_MAX_OUTPUT_TOKENS, integer(1))
    """``max_output_tokens`` per call (default 8192, the release's)."""
    max_new_tokens: int | None = option(None, integer(1, optional=True), "--max-new-tokens")
    """Replaces ``max_output_tokens`` when given."""
    temperature: float | None = option(None, number(at_least=0, optional=True),
                                       "--temperature")
    """Sampling temperature; None: 1.0 for Gemini 3 (the release's and Google's advice), else
    0.0. ``--samples K`` > 1 needs it given and > 0."""
    seed: int = option(0, integer(), "--seed")
    """Sent with every call."""
    no_thinking: bool = option(False, boolean(), "--no-thinking")
    """Lowest thinking level for Gemini 3; ``thinking_budget`` 0 (Flash) / 128 (Pro) for
    Gemini 2.5."""
    base_url: str | None = option(None, text(), "--base-url")
    """API endpoint (a proxy, a gateway, a test server; an http(s) URL with a host, kept as
    given) instead of Google's, which ``GOOGLE_GEMINI_BASE_URL`` / ``GOOGLE_VERTEX_BASE_URL``
    may also replace; recorded in the manifest. Calls to any endpoint but Google's own are not
    priced (docs/engines.md, "Endpoints")."""

    def _normalise(self) -> None:
        check_base_url(self.base_url)  # recorded as given, as before the flag existed


@dataclass(frozen=True, kw_only=True)
class AnthropicConfig(ApiConfig):
    """Settings of ``anthropic``: Claude through the Messages API.

    Defaults and the thinking mapping follow docs/engines.md, "Claude".
    """

    provider: ClassVar[str] = "anthropic"

    max_output_tokens: int = option(DEFAULT_MAX_OUTPUT_TOKENS, integer(1))
    """``max_tokens`` per call (default 8192, as the other API providers)."""
    max_new_tokens: int | None = option(None, integer(1, optional=True), "--max-new-tokens")
    """Replaces ``max_output_tokens`` when given."""
    thinking_budget: int | None = option(None, integer(1024, optional=True))
    """Extended thinking: ``thinking={"type": "enabled", "budget_tokens": N}`` (Claude's
    minimum is 1024; it must stay below ``max_tokens``); None: no thinking field is sent."""
    no_thinking: bool = option(False, boolean(), "--no-thinking")
    """Sends ``thinking={"type": "disabled"}``; refused together with ``thinking_budget``."""
    extra_body: dict[str, Any] | None = option(None, mapping(), "--extra-body")
    """Further JSON request fields (e.g. ``{"temperature": 0}`` where the model still takes
    sampling settings; SDK 2.x has no sampling arguments), recorded in the manifest; the fields
    this provider sets (``model``, ``messages``, ``system``, ``max_tokens``, ``thinking``,
    ``stream``) are refused."""
    base_url: str | None = option(None, text(), "--base-url")
    """Messages API endpoint (a proxy, a gateway, a test server; an http(s) URL with a host,
    kept as given) instead of api.anthropic.com, which ``ANTHROPIC_BASE_URL`` may also
    replace; recorded in the manifest. Calls to any endpoint but Anthropic's own are not
    priced (docs/engines.md, "Endpoints")."""

    def _normalise(self) -> None:
        check_base_url(self.base_url)  # recorded as given, as before the flag existed


@dataclass(frozen=True, kw_only=True)
class VLLMConfig(ProviderConfig):
    """Settings of ``opensource``: an in-process vLLM engine.

    Defaults follow docs/engines.md, "Decoding" and "Offline engine".
    """

    provider: ClassVar[str] = "opensource"

    model_path: str | Path | None = option(None, path(), "--model-path")
    """Load this local folder instead of the model's HF id."""
    tensor_parallel_size: int | None = option(None, integer(1, optional=True),
                                              "--tensor-parallel-size")
    """None: every visible GPU, capped by the model's ``gpu_num`` (1 on vLLM's CPU build); at
    most the visible GPU count."""
    max_model_len: int | None = option(None, integer(1, optional=True), "--max-model-len")
    """Context in tokens; None: the model registry's, else the model's ``config.json``."""
    gpu_memory_utilization: float | None = option(
        None, number(above=0, at_most=1, optional=True), "--gpu-memory-utilization")
    """Fraction in (0, 1] of GPU memory (of CPU memory on vLLM's CPU build) vLLM reserves;
    None: the model's, else 0.85 on a GPU and 0.5 on a CPU."""
    max_new_tokens: int | None = option(None, integer(1, optional=True), "--max-new-tokens")
    """Output-token cap per turn; None: 8192."""
    no_thinking: bool = option(False, boolean(), "--no-thinking")
    """Pass ``enable_thinking=False`` to the chat template (where it has the switch)."""
    seed: int = option(0, integer(), "--seed")
    """Engine and sampling seed."""
    temperature: float | None = option(None, number(at_least=0, optional=True),
                                       "--temperature")
    """Sampling temperature; None: 0.0, greedy (docs/engines.md, "Decoding"). ``--samples K`` >
    1 needs it > 0; each request then gets its sample's seed (``SamplingParams(seed=...)``)."""
    max_num_seqs: int | None = option(None, integer(1, optional=True))
    """vLLM ``max_num_seqs``; None: vLLM's default."""
    enforce_eager: bool | None = option(None, boolean(optional=True))
    """vLLM ``enforce_eager``; None: vLLM's default."""
    kv_blocks: int | None = option(None, integer(2, optional=True))
    """vLLM ``num_gpu_blocks_override``: KV-cache blocks to allocate instead of what the memory
    left allows (benchmarks of a small cache); None: vLLM's own count."""
    engine_kwargs: dict[str, Any] | None = option(None, mapping())
    """Further ``vllm.LLM`` keyword arguments, applied last (e.g. ``{"dtype": "float32"}``)."""
    top_logprobs: int | None = option(None, top_k())
    """``SamplingParams(logprobs=k)``: the top-k log-probabilities of each generated token (set
    by Stage 03's ``--option-probs``); None: not asked."""
    engine: str = option("batched", one_of(ENGINE_MODES), "--vllm-engine")
    """``batched``: one ``LLM.chat`` per step of the sync runner's window of dialogues;
    ``async``: ``AsyncLLM`` under the async runner, no turn barrier. Both keep the dialogues in
    flight within the KV cache."""


@dataclass(frozen=True, kw_only=True)
class TransformersConfig(ProviderConfig):
    """Settings of ``transformers``: a VLM run in-process with HF transformers.

    Defaults follow docs/evaluation_protocol.md, "Providers".
    """

    provider: ClassVar[str] = "transformers"

    model_path: str | Path | None = option(None, path(), "--model-path")
    """Load this local folder instead of the model's HF id."""
    device: str | None = option(None, text(), "--device")
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (``device_map="auto"``, needs accelerate);
    None: ``auto`` with CUDA and accelerate, else ``cuda`` when available, else ``cpu``."""
    batch_size: int | None = option(None, integer(1, optional=True), "--batch-size")
    """Conversations per ``generate`` call; None: 8 (Hulu-Med: always 1)."""
    max_new_tokens: int | None = option(None, integer(1, optional=True), "--max-new-tokens")
    """Output-token cap per turn; None: 8192."""
    no_thinking: bool = option(False, boolean(), "--no-thinking")
    """Pass ``enable_thinking=False`` to the chat template (where it has the switch)."""
    seed: int = option(0, integer(), "--seed")
    """Recorded only (decoding is greedy)."""


#: The config classes in the order docs/engines.md, "Provider settings" shows them.
CONFIG_CLASSES: tuple[type[ProviderConfig], ...] = (
    ApiConfig, OpenAIConfig, AzureConfig, GeminiConfig, AnthropicConfig, VLLMConfig,
    TransformersConfig, RandomConfig)


# -- documentation ----------------------------------------------------------------------------
@functools.cache
def field_docs(cls: type[ProviderConfig]) -> dict[str, str]:
    """Each field's attribute docstring (a subclass's redefinition wins), whitespace folded."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, ProviderConfig)):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for item, after in zip(body, body[1:], strict=False):
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and \
                    isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and \
                    isinstance(after.value.value, str):
                docs[item.target.id] = " ".join(after.value.value.split())
    return docs


def _cell(value: str) -> str:
    return value.replace("|", "\\|")


def settings_table(cls: type[ProviderConfig], names: Iterable[str] | None = None) -> str:
    """The Markdown table of ``cls``'s options (or of ``names`` only).

    Columns: option, Stage 03 flag, type, default, meaning (the attribute docstring).
    """
    docs = field_docs(cls)
    keep = None if names is None else set(names)
    rows = ["| Option | Flag | Type | Default | Meaning |", "|---|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        if keep is not None and f.name not in keep:
            continue
        flag = f.metadata.get("flag")
        rows.append(f"| `{f.name}` | {f'`{flag}`' if flag else '-'} | `{_cell(str(f.type))}` | "
                    f"`{f.default!r}` | {_cell(docs.get(f.name, ''))} |")
    return "\n".join(rows)


def settings_markdown() -> str:
    """The option tables of every config class (docs/engines.md, "Provider settings").

    A subclass's table lists the options it adds or redefines; it names the class it takes
    the rest from.
    """
    parts = []
    for cls in CONFIG_CLASSES:
        base = cls.__mro__[1]
        names = None
        summary = " ".join(" ".join(part.split()) for part in (cls.__doc__ or "").split("\n\n")
                           if not part.strip().startswith(("Raises:", "Args:")))
        if base is not ProviderConfig:
            inherited = {f.name: f for f in dataclasses.fields(base)}
            names = [f.name for f in dataclasses.fields(cls)
                     if f.name not in inherited or f.default != inherited[f.name].default
                     or field_docs(cls).get(f.name) != field_docs(base).get(f.name)]
            summary += f" Also takes every option of `{base.__name__}`."
        parts.append(f"### `{cls.__name__}`\n\n{summary}\n\n{settings_table(cls, names)}")
    return "\n\n".join(parts) + "\n"
