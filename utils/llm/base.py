"""The provider interface: a batch of chat requests in, one completion per request out.

The interface is batch-first so that an offline engine (vLLM) can take every active case's
turn in one call, while API providers can run requests concurrently behind the same method.
"""

from __future__ import annotations

import abc
import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from utils.errors import ProviderError
from utils.llm.settings import ProviderConfig
from utils.status import Status

Role = Literal["system", "user", "assistant"]

#: Completion statuses of an answer, and the no-answer status of a fault (``utils.status``).
FAULT = Status.FAULT

#: One generated token and the provider's top-k alternatives at its position:
#: ``(token text, {candidate token text: natural-log probability})``.
TokenTopLogprobs = tuple[str, dict[str, float]]


def add_logprob(top: dict[str, float], token: str, logprob: float) -> None:
    """Add a candidate to a top-k map, summing the probability of a text seen before.

    Two token ids can decode to the same text; their masses add (``log(exp(a) + exp(b))``).
    A non-finite log-probability (``-inf``: probability 0) adds nothing.

    Args:
        top: Candidate text -> natural-log probability, updated in place.
        token: The candidate's text.
        logprob: Its natural-log probability (<= 0).
    """
    if not math.isfinite(logprob):
        return
    old = top.get(token)
    if old is None:
        top[token] = logprob
    else:
        high, low = max(old, logprob), min(old, logprob)
        top[token] = high + math.log1p(math.exp(low - high))


@dataclass(frozen=True)
class Message:
    """One chat message.

    Attributes:
        role: ``system``, ``user`` or ``assistant``.
        text: The message text.
        images: Image files attached to a user (or system) message, in order (PNG/JPG paths);
            an assistant message carries none (:class:`TurnRequest` refuses it).
    """

    role: Role
    text: str
    images: tuple[Path, ...] = ()


@dataclass(frozen=True)
class TurnRequest:
    """One request: the full conversation so far, ending with the user turn to answer.

    Attributes:
        messages: System message (optional), then alternating user/assistant, last = user.
        request_id: Stable id of this request (e.g. ``<key_id>/<turn name>``), for logs.
        meta: Facts about the question that are in its text anyway (``num_options``,
            ``multi_select``, ``option_texts``, ``none_index``), for baseline providers; real
            models never see it. The ground truth is never in a request: providers that must
            know it get it through :meth:`ChatModel.set_answer_key`.
        seed: This request's sampling seed (one sample of ``--samples K``; Stage 03 derives it
            from the run seed, ``chexpercept.rng``), used instead of the configured ``seed``
            by a provider that takes a seed per request; None: the configured seed.
    """

    messages: tuple[Message, ...]
    request_id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None

    def __post_init__(self) -> None:
        """Refuse images in an assistant message before any provider sees the request.

        Every provider (API, engine, baseline, plugin) receives a ``TurnRequest``, so this is
        the one check of what may carry images: user (and system) messages only
        (docs/evaluation_protocol.md, "Prompt structure"). The Stage 03 dialogue never attaches
        images to a reply; a plugin that builds requests could, and providers would then send,
        drop or reject them each their own way.

        Raises:
            ProviderError: Naming the request id (``<key_id>/<turn>``), the message's index in
                ``messages`` and its images.
        """
        for index, message in enumerate(self.messages):
            if message.role == "assistant" and message.images:
                raise ProviderError(
                    f"request {self.request_id or '<no request_id>'}: message {index} (assistant) "
                    f"carries {len(message.images)} image(s) "
                    f"({', '.join(str(p) for p in message.images)}); only user and system "
                    f"messages may carry images (docs/evaluation_protocol.md, 'Prompt "
                    f"structure'): attach them to the user message before it")


@dataclass
class Usage:
    """Token counts of one call (0 when the provider does not report them)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    thinking_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input + output tokens (thinking tokens are part of output where billed so)."""
        return self.input_tokens + self.output_tokens


@dataclass
class Completion:
    """The provider's answer to one :class:`TurnRequest`.

    Attributes:
        text: Raw response text ('' when none came back).
        status: One of :data:`COMPLETION_STATUSES`, or :data:`FAULT` (no answer).
        finish_reason: Provider's finish reason, if any (``stop``, ``length``, ...).
        usage: Token counts.
        latency_s: Wall time of the call in seconds.
        error: Error text for ``status`` ``error`` or ``fault`` (never contains secrets).
        attempts: HTTP attempts made for this completion (API providers; 1 = no retry).
        response_model: Model version the provider reported (OpenAI ``model``, Gemini
            ``model_version``), or None.
        top_logprobs: With ``top_logprobs`` requested (a provider that declares
            :attr:`ChatModel.supports_logprobs`): one :data:`TokenTopLogprobs` per generated
            token, in order; None when none were requested or none came back (Stage 03 then
            records the turn's option probabilities as missing, never as zeros;
            docs/metrics.md, "Option probabilities and AUROC").
        reply_chars: Length in characters of the reply the provider returned, when Stage 03
            kept only its first ``text`` characters (the reply cap, docs/engines.md, "Reply
            cap"); None: ``text`` is the whole reply.
    """

    text: str
    status: str = "ok"
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    latency_s: float = 0.0
    error: str | None = None
    attempts: int = 1
    response_model: str | None = None
    top_logprobs: list[TokenTopLogprobs] | None = None
    reply_chars: int | None = None


@dataclass(frozen=True)
class PromptLimits:
    """What one request may hold, as far as a provider knows before its first request.

    Attributes:
        context_tokens: Context length in tokens (prompt plus new tokens), or None if unknown.
        max_new_tokens: Output tokens each request asks for (they count against the context),
            or None when the provider sends no cap.
        max_images: Images one request may carry, or None when there is no known limit.
        image_rule: How to estimate an image's prompt tokens (``utils.llm.tokens.ImageRule``),
            or None for the generic rule.
        tokenizer_file: A local ``tokenizer.json`` that counts text tokens exactly, or None
            (then text is estimated at ``utils.llm.tokens.CHARS_PER_TOKEN``).
        context_source: Where ``context_tokens`` came from (a flag, the model registry,
            ``config.json``, the server), for messages.
        context_flag: The flag or setting that changes the context (for messages).
        image_bounds: ``(max side, max pixels)`` images are downscaled to before sending
            (``--max-image-side`` / ``--max-image-pixels``); ``(None, None)`` when sent as stored.
    """

    context_tokens: int | None = None
    max_new_tokens: int | None = None
    max_images: int | None = None
    image_rule: Any = None
    tokenizer_file: Path | None = None
    context_source: str = ""
    context_flag: str = ""
    image_bounds: tuple[int | None, int | None] = (None, None)


@dataclass(frozen=True)
class KVCache:
    """The KV cache an offline engine keeps across requests (its prefix cache), once started.

    The Stage 03 sync and async runners keep the dialogues in flight within
    :attr:`window_tokens`, so each dialogue's earlier turns are still cached when its next turn
    comes (docs/design.md, "Batching").

    Attributes:
        blocks: KV-cache blocks the engine allocated (vLLM's ``num_gpu_blocks``).
        block_tokens: Tokens per block (vLLM's ``block_size``).
        window_tokens: Tokens of that cache the dialogues in flight may fill (<= ``tokens``).
    """

    blocks: int
    block_tokens: int
    window_tokens: int

    @property
    def tokens(self) -> int:
        """Capacity in tokens: ``blocks * block_tokens``."""
        return self.blocks * self.block_tokens


class ChatModel(abc.ABC):
    """A model that answers batches of chat requests.

    Subclasses implement :meth:`generate`. They must return exactly one completion per request,
    in request order, and must turn per-request failures into completions rather than raising:
    ``status="error"`` for a request that can never succeed, ``status="fault"`` (:data:`FAULT`)
    for one that got no answer because of a fault (retries exhausted). Errors that every
    request would repeat (bad credentials, exhausted quota, unknown model) raise
    ``ProviderError`` and stop the run.
    """

    #: Provider registry name (``dummy``, ``random``, ``oracle``, ``opensource``, ...).
    provider: str = "base"

    #: True when :meth:`agenerate` is native (API providers): the Stage 03 runner then runs
    #: cases as concurrent per-case pipelines instead of one batched call per turn index.
    supports_async: bool = False

    #: True for providers that are told the answers (the ``oracle`` baseline, test doubles): the
    #: session hands them the answer key once, through :meth:`set_answer_key`, before the first
    #: request; no request carries a ground truth (docs/evaluation_protocol.md, "Providers").
    needs_answer_key: bool = False

    #: The class of the provider's settings (docs/engines.md, "Provider settings"): its fields
    #: are the options ``create_model`` takes. None for a plugin that declares none (it gets
    #: whatever keywords its ``__init__`` names).
    config_class: ClassVar[type[ProviderConfig] | None] = None

    #: What the provider is (docs/architecture.md, "Provider capabilities"): ``"api"`` calls a
    #: hosted or served model (``--model`` is required; one process runs ``--concurrency``
    #: requests at once, so Ray replicas add nothing); ``"engine"`` runs a model here (an
    #: offline engine; plugins by default); ``"baseline"`` answers without a model (no tokens,
    #: no cost, no ``--max-new-tokens``).
    kind: ClassVar[str] = "engine"

    #: True when the provider can return the top-k log-probabilities of each generated token
    #: (:attr:`Completion.top_logprobs`): its config then has a ``top_logprobs`` option (k), which
    #: Stage 03's ``--option-probs`` sets. A provider without it is refused ``--option-probs``
    #: (docs/metrics.md, "Option probabilities and AUROC").
    supports_logprobs: ClassVar[bool] = False

    #: One line for ``--provider``'s help (``registry.provider_listing``).
    description: ClassVar[str] = ""

    #: A ``--model`` value the messages may give as an example ("" for none).
    example_model: ClassVar[str] = ""

    #: How the provider answers ``--samples K`` > 1 (docs/evaluation_protocol.md, "Sampling"):
    #: ``"temperature"`` samples at its ``temperature`` option (which must be > 0) with each
    #: request's :attr:`TurnRequest.seed`; ``"seeded"`` draws from each request's seed (the
    #: ``random`` baseline); ``"deterministic"`` gives the same answer to every sample by design
    #: (``dummy``, ``oracle``: their spread is 0, not unknown); None cannot sample (greedy
    #: decoding only, or no temperature option): K > 1 is refused.
    sampling: ClassVar[str | None] = None

    @classmethod
    def default_temperature(cls, model: str) -> float:
        """The temperature this provider decodes ``model`` at when none is given.

        0.0 (greedy; docs/evaluation_protocol.md, "Providers"); a provider whose default
        differs (Gemini 3: 1.0) overrides it. Stage 03 records it in the run manifest
        (``provider_decoding``), so Stage 04 names a run's temperature only where it differs,
        without knowing any provider.
        """
        return 0.0

    @classmethod
    def sampling_refusal(cls, model: str, options: Mapping[str, Any]) -> str | None:
        """Why this provider cannot give independent samples (``--samples K`` > 1), or None.

        Args:
            model: ``--model``.
            options: The provider options of the run (``temperature`` among them).

        Returns:
            None when K > 1 is honoured; else the reason, for the refusal's message.
        """
        if cls.sampling is None:
            return "it cannot sample (greedy decoding, or no temperature option)"
        if cls.sampling == "temperature":
            temperature = options.get("temperature")
            if temperature is None or not temperature > 0:
                return ("it needs --temperature T > 0 (at temperature 0 every sample is the "
                        "same greedy answer)")
        return None

    @classmethod
    def replica_gpus(cls, model: str, options: Mapping[str, Any], cluster_gpus: float
                     ) -> float | None:
        """GPUs one Ray replica of this provider reserves with ``options`` (``--ray``).

        Default: None (no Ray) for an API provider and for one that only runs per-case
        pipelines (``supports_async`` on the class); 0 otherwise. An engine provider overrides
        it (its tensor parallel size, or one GPU when the cluster has any).

        Args:
            model: ``--model``.
            options: The provider options of the run.
            cluster_gpus: GPUs the Ray cluster has in all.

        Returns:
            GPUs per replica, or None when replicas do not apply to this provider.

        Raises:
            ConfigError: For options a replica cannot run with (the message names the flag).
        """
        return None if cls.kind == "api" or cls.supports_async else 0.0

    @classmethod
    def replica_options(cls, options: Mapping[str, Any], gpus: float) -> dict[str, Any]:
        """The options each replica is built with, given its ``gpus`` (default: ``options``)."""
        return dict(options)

    def __init__(self, model: str) -> None:
        self.model = model

    @classmethod
    def make_config(cls, config: ProviderConfig | None,
                    options: Mapping[str, Any]) -> ProviderConfig:
        """``config`` (or the defaults) with ``options`` merged in, validated.

        Args:
            config: A :attr:`config_class` instance, or None.
            options: Option keywords given to the constructor.

        Returns:
            The provider's config.

        Raises:
            ConfigError: Naming every option :attr:`config_class` does not have, every invalid
                value, or a ``config`` of another class.
        """
        if cls.config_class is None:
            raise TypeError(f"{cls.__name__} declares no config_class")
        return cls.config_class.from_options(options, base=config, provider=cls.provider)

    def set_answer_key(self, answers: Mapping[str, int | tuple[int, ...]]) -> None:
        """Receive the answers of every request the run may send.

        Args:
            answers: request_id (``<key_id>/<turn name>``) -> ground truth: a 1-based option,
                or the sorted tuple of options of a multi-select question.

        Raises:
            NotImplementedError: For providers that do not set :attr:`needs_answer_key`.
        """
        raise NotImplementedError(f"provider {self.provider} is not told the answers")

    @abc.abstractmethod
    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        """Answer every request; one completion per request, same order."""

    async def agenerate(self, request: TurnRequest) -> Completion:
        """Answer one request without blocking the event loop.

        The default runs ``generate([request])`` in a worker thread; API providers override it
        with a native coroutine (and set :attr:`supports_async`).

        Raises:
            ProviderError: As :meth:`generate` (fatal configuration errors).
        """
        completions = await asyncio.to_thread(self.generate, [request])
        if len(completions) != 1:
            raise ProviderError(f"provider {self.provider} returned {len(completions)} "
                                f"completion(s) for 1 request")
        return completions[0]

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources bound to the running event loop (async HTTP clients)."""

    def preflight(self) -> None:  # noqa: B027 - optional hook
        """Check, before the first request, that the model can be reached and is the one meant.

        The API providers wait here for a server that is still starting (bounded) and check
        that it serves ``--model``; the default does nothing.

        Raises:
            ProviderError: If the server never became ready or serves another model.
        """

    def start(self) -> None:  # noqa: B027 - optional hook
        """Build or load the engine before the first request (offline engines; once).

        Called after :meth:`preflight` and the budget check, and before the run folder is
        opened, so an engine that cannot start leaves no manifest and no record
        (docs/engines.md, "Faults"). A provider whose engine failed to start raises the same
        error again on every later call and never tries again per request. The default does
        nothing (API providers, baselines).

        Raises:
            EngineStartError: If the engine cannot be built or loaded (names the cause and the
                flag that fixes it).
        """

    def prompt_limits(self) -> PromptLimits:
        """The context, output-token and image limits of one request (unknowns are None).

        Called after :meth:`preflight` and before the first request; must not load weights.
        """
        return PromptLimits()

    def kv_cache(self) -> KVCache | None:
        """The engine's KV cache, for keeping the dialogues in flight within it.

        Called after :meth:`start`. None (the default: API providers, baselines) means no
        bound: the sync runner then sends every case's turn N in one call.
        """
        return None

    def count_prompt_tokens(self, request: TurnRequest) -> int | None:
        """Exact prompt tokens of ``request`` where the provider can count them cheaply.

        Returns:
            The count, or None (the default) when only an estimate is possible.
        """
        del request
        return None

    def suggested_concurrency(self, dialogue_tokens: int | None,
                              dialogues_per_request: int = 1) -> int | None:
        """Requests in flight this provider suggests when ``--concurrency`` is not given.

        Asked once, after :meth:`preflight` and the token budget, before the first request;
        a provider that answers runs at its answer (it may size its own pools by it).

        Args:
            dialogue_tokens: A dialogue's footprint in tokens (its heaviest request plus the
                output-token cap), or None when unknown.
            dialogues_per_request: Dialogues the runner keeps open per request in flight.

        Returns:
            The suggestion (>= 1), or None (the default): the runner's default applies.
        """
        del dialogue_tokens, dialogues_per_request
        return None

    def describe(self) -> dict[str, Any]:
        """Settings recorded in the run manifest (no secrets)."""
        return {"provider": self.provider, "model": self.model}

    def endpoint_url(self) -> str | None:
        """The URL the requests go to, credentials hidden; None (the default): none is known.

        An API provider answers with what its SDK client resolved, a flag, an SDK environment
        variable (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``, ...)
        or the SDK's default (docs/engines.md, "Endpoints").
        """
        return None

    def pricing_refusal(self) -> str | None:
        """Why this provider's calls get no cost from ``cfg/pricing.yaml``; None: they do.

        The table prices a provider's own API only: an API provider whose requests go to
        another endpoint (a proxy, a local server, a test server) answers why (the run's cost
        is then NA; docs/engines.md, "Endpoints"). The default, None, prices the calls by the
        model id as the table has it.
        """
        return None

    def runtime_info(self) -> dict[str, Any]:
        """How the model runs (devices, tensor parallel size, batch size, local path).

        Recorded in the run manifest as ``provider_runtime`` but, unlike :meth:`describe`,
        never compared on resume: a run may continue on another number of GPUs.
        """
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (engines, HTTP clients)."""
