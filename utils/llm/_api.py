"""Shared plumbing of the API providers (openai, azure, gemini): retries, latency, concurrency.

A subclass supplies one synchronous and one asynchronous SDK call, a response converter and an
error classifier; this base wraps them in :class:`~utils.llm.retry.Retrier`, times them and turns
a request that failed for good into a recorded completion status (never an exception), while
fatal errors (auth, bad request) raise :class:`~utils.errors.ProviderError`. A fatal error in a
batch of the synchronous :meth:`ApiChatModel.generate` stops the batch without throwing away
what the server already answered: see :class:`~utils.llm.retry.BatchStopped`.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
import urllib.parse
from collections import OrderedDict
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from utils.errors import ConfigError, ProviderError
from utils.llm import _images
from utils.llm.base import FAULT, ChatModel, Completion, TurnRequest
from utils.llm.retry import (
    DRAIN_S,
    BatchStopped,
    Failure,
    RequestFailed,
    Retrier,
    RetriesExhausted,
    RetryPolicy,
    RunStopped,
    StopSignal,
)
from utils.llm.settings import ApiConfig, hide_credentials

logger = logging.getLogger(__name__)

#: Encoded images kept in memory, at least; a case resends its earlier images every turn
#: (docs/evaluation_protocol.md, "Prompt structure"), so the cache must hold the images of every
#: open case: the async runner keeps ``2 * concurrency`` cases open (a case in retry backoff
#: hands its permit to another) with up to 7 images each (revision-required path), hence
#: :data:`IMAGES_PER_SLOT` entries per request in flight. An LRU smaller than that working set
#: misses on nearly every access: with 8 entries per slot, 70 % of the image lookups at
#: concurrency 64 re-read and re-encoded the file (benchmarks/bench_api_throughput.py).
_IMAGE_CACHE_SIZE = 256
#: Cache entries per request in flight (2 open cases x 7 images, rounded up; see above).
IMAGES_PER_SLOT = 16
#: Most bytes of encoded images kept (the count bound applies too).
IMAGE_CACHE_BYTES = 1 << 30


def answer_completion(text: str, finish: str | None, *, usage: Any, model: str | None,
                      cut_off: bool) -> Completion:
    """Completion for a response that came back without refusal or block.

    Args:
        text: The answer text ('' when none).
        finish: The provider's finish reason.
        usage: Token counts of the call.
        model: The model version the provider reported.
        cut_off: Whether ``finish`` means the token limit was hit.

    Returns:
        ``truncated`` for an empty answer cut off by the token limit, ``error`` for any other
        empty answer, else ``ok``.
    """
    if text.strip():
        return Completion(text, status="ok", finish_reason=finish, usage=usage,
                          response_model=model)
    if cut_off:
        return Completion("", status="truncated", finish_reason=finish, usage=usage,
                          response_model=model)
    return Completion("", status="error", finish_reason=finish, usage=usage,
                      error=f"empty response (finish_reason={finish})", response_model=model)


class MalformedResponse(Exception):  # noqa: N818 - a classified fault, like the SDK's errors
    """A 2xx response that is no usable completion (no choices, an error object, an abort).

    A fault of the server, not an answer of the model: retried like a 5xx, and when the
    retries run out the run stops with nothing recorded (docs/engines.md, "Faults").
    """


class ImageCache:
    """LRU of encoded image files keyed by path, bounded by entries and by bytes.

    Args:
        size: Most entries.
        max_bytes: Most bytes of cached values (data URLs count one byte per character).
        max_side: ``--max-image-side``: longest side sent, in pixels (None: as stored).
        max_pixels: ``--max-image-pixels``: most pixels sent (None: as stored).

    Attributes:
        hits: Lookups answered from the cache.
        misses: Lookups that read and encoded the file.
    """

    def __init__(self, size: int = _IMAGE_CACHE_SIZE, max_bytes: int = IMAGE_CACHE_BYTES, *,
                 max_side: int | None = None, max_pixels: int | None = None) -> None:
        for name, value in (("--max-image-side", max_side), ("--max-image-pixels", max_pixels)):
            if value is not None and int(value) < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        self.max_side = int(max_side) if max_side else None
        self.max_pixels = int(max_pixels) if max_pixels else None
        self.size = size
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[tuple[str, str], tuple[Any, int]] = OrderedDict()

    def get(self, path: str | Path, kind: str) -> Any:
        """The encoded file, cached.

        ``kind`` ``data_url`` -> str; ``data_url_json`` -> the data URL as a UTF-8 JSON string
        literal (bytes, quotes included); ``bytes`` -> (bytes, mime).

        Raises:
            ProviderError: If the file is missing or not an image (names the path).
        """
        key = (str(path), kind)
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]
        self.misses += 1
        value: Any
        bounds = (self.max_side, self.max_pixels)
        if kind == "data_url":
            value = _images.image_data_url(path, *bounds)
            nbytes = len(value)
        elif kind == "data_url_json":
            value = _images.image_data_url_json(path, *bounds)
            nbytes = len(value)
        else:
            value = _images.read_bounded(path, *bounds)
            nbytes = len(value[0])
        self._items[key] = (value, nbytes)
        self.nbytes += nbytes
        while len(self._items) > 1 and (len(self._items) > self.size
                                        or self.nbytes > self.max_bytes):
            self.nbytes -= self._items.popitem(last=False)[1][1]
        return value

    def describe(self) -> dict[str, Any]:
        """The image bounds, for the run manifest (empty when images are sent as stored)."""
        out: dict[str, Any] = {}
        if self.max_side:
            out["max_image_side"] = self.max_side
        if self.max_pixels:
            out["max_image_pixels"] = self.max_pixels
        return out


class ApiChatModel(ChatModel):
    """Base of the API providers.

    Args:
        model: Model id (pricing, reasoning detection, run folder name).
        config: The provider's settings, already validated (an :class:`~utils.llm.settings.
            ApiConfig` subclass; docs/engines.md, "Provider settings").
        retry_policy: Full retry policy; overrides ``config.max_retries`` when given (tests).
    """

    supports_async = True
    #: Most seconds a stopped batch of :meth:`generate` waits for its requests in flight
    #: (docs/engines.md, "Faults").
    drain_s: float = DRAIN_S
    #: Hosts of the provider's own API (each with its subdomains), reached over https: the
    #: only endpoints ``cfg/pricing.yaml`` prices (docs/engines.md, "Endpoints").
    own_hosts: tuple[str, ...] = ()

    def __init__(self, model: str, config: ApiConfig, *,
                 retry_policy: RetryPolicy | None = None) -> None:
        super().__init__(model)
        self.config = config
        for name in ("httpx2", "httpx"):  # one INFO line per HTTP request otherwise
            sdk_logger = logging.getLogger(name)
            if sdk_logger.level == logging.NOTSET:
                sdk_logger.setLevel(logging.WARNING)
        self.concurrency = config.concurrency
        self.timeout_s = float(config.timeout_s)
        self.retrier = Retrier(retry_policy or RetryPolicy(max_retries=int(config.max_retries)),
                               self._classify_fault, self.provider)
        self.images = ImageCache(max(_IMAGE_CACHE_SIZE, IMAGES_PER_SLOT * self.concurrency),
                                 max_side=config.max_image_side,
                                 max_pixels=config.max_image_pixels)

    # -- where the requests go ------------------------------------------------------------
    def client_base_url(self) -> str | None:
        """The base URL the SDK client resolved, credentials included; None when unknown.

        A subclass reads it back from its constructed client, so an SDK environment variable
        that redirects the client is seen (docs/engines.md, "Endpoints").
        """
        return None

    def endpoint_url(self) -> str | None:
        """:meth:`client_base_url` with its credentials hidden (``hide_credentials``)."""
        url = self.client_base_url()
        return hide_credentials(url) if url else None

    def own_endpoint(self) -> bool | None:
        """Whether the requests go to the provider's own API (:attr:`own_hosts`, https).

        Returns:
            None when the endpoint is unknown (:meth:`client_base_url` None).
        """
        url = self.client_base_url()
        if not url:
            return None
        parts = urllib.parse.urlsplit(url)
        host = (parts.hostname or "").lower().rstrip(".")
        return parts.scheme == "https" and any(host == own or host.endswith("." + own)
                                               for own in self.own_hosts)

    def pricing_refusal(self) -> str | None:
        """Why the calls are not priced: they go elsewhere than the provider's own API.

        Returns:
            None when the endpoint is the provider's own (or unknown), else the reason, naming
            the endpoint (credentials hidden) and the provider's own hosts.
        """
        if self.own_endpoint() is not False:
            return None
        own = ", ".join(f"https://{h}" for h in self.own_hosts) or "none declared"
        return (f"the requests go to {self.endpoint_url()}, not to the {self.provider} provider's "
                f"own API ({own}), so cfg/pricing.yaml does not price them and the cost is NA "
                f"(docs/engines.md, 'Endpoints')")

    def runtime_info(self) -> dict[str, Any]:
        """``endpoint``: where the requests go (:meth:`endpoint_url`; not compared on resume)."""
        return {**super().runtime_info(), "endpoint": self.endpoint_url()}

    # -- subclass hooks -------------------------------------------------------------------
    @abc.abstractmethod
    def _call(self, request: TurnRequest) -> Any:
        """One synchronous SDK call (no retry); returns the SDK response."""

    @abc.abstractmethod
    async def _acall(self, request: TurnRequest) -> Any:
        """One asynchronous SDK call (no retry); returns the SDK response."""

    @abc.abstractmethod
    def _to_completion(self, response: Any) -> Completion:
        """Convert an SDK response (status, text, usage, finish reason)."""

    @abc.abstractmethod
    def _classify(self, exc: BaseException) -> Failure | None:
        """Classify an SDK exception; None for exceptions that are bugs (re-raised)."""

    def _check(self, response: Any) -> None:  # noqa: B027 - optional hook
        """Raise :class:`MalformedResponse` for a response that is no usable completion."""

    def _classify_fault(self, exc: BaseException) -> Failure | None:
        if isinstance(exc, MalformedResponse):
            return Failure("retryable", f"unusable response from the server: {exc}")
        return self._classify(exc)

    def _attempt(self, request: TurnRequest) -> Any:
        response = self._call(request)
        self._check(response)
        return response

    async def _aattempt(self, request: TurnRequest) -> Any:
        response = await self._acall(request)
        self._check(response)
        return response

    # -- shared behaviour -----------------------------------------------------------------
    def _failed(self, exc: RequestFailed, started: float, request: TurnRequest) -> Completion:
        """The recorded completion of a ``request`` failure.

        Raises:
            ProviderError: For a context overflow of a request without history (a case's first
                turn): no dialogue can fit, so the run stops (docs/engines.md, "Faults").
        """
        if exc.failure.context_overflow and \
                not any(m.role == "assistant" for m in request.messages):
            raise ProviderError(f"{self.provider}: request {request.request_id or '?'} failed: "
                                f"{exc.failure.message}. The run stopped; nothing was "
                                f"recorded for this turn.") from None
        error = str(exc)
        if exc.failure.context_overflow:
            error = (f"the dialogue outgrew the model's context (the model's earlier answers "
                     f"are in it; scored as this turn's error): {error}")
        return Completion(text="", status=exc.failure.completion_status,
                          error=error, attempts=exc.attempts,
                          latency_s=time.perf_counter() - started)

    def _fault(self, exc: RetriesExhausted, started: float) -> Completion:
        """The no-answer completion of a request whose retries ran out (never an answer)."""
        return Completion(text="", status=FAULT, attempts=exc.attempts,
                          error=f"no answer after {exc.attempts} attempt(s): "
                                f"{exc.failure.message}",
                          latency_s=time.perf_counter() - started)

    def _finish(self, response: Any, attempts: int, started: float) -> Completion:
        completion = self._to_completion(response)
        completion.attempts = attempts
        completion.latency_s = time.perf_counter() - started
        return completion

    def generate_one(self, request: TurnRequest, *,
                     stop: StopSignal | None = None) -> Completion:
        """Answer one request synchronously, with retries (latency includes backoff).

        Args:
            request: The request.
            stop: The batch's stop signal (no attempt starts after it is set).

        Returns:
            The completion; status ``fault`` when the retries ran out (no answer).

        Raises:
            ProviderError: On a fatal error (auth, quota, unknown model, a first turn over
                the context).
            RunStopped: When ``stop`` was set before one of its attempts.
        """
        started = time.perf_counter()
        try:
            response, attempts = self.retrier.call(lambda: self._attempt(request),
                                                   request_id=request.request_id, stop=stop)
        except RequestFailed as exc:
            return self._failed(exc, started, request)
        except RetriesExhausted as exc:
            return self._fault(exc, started)
        return self._finish(response, attempts, started)

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        """Answer a batch with up to ``concurrency`` threads; one completion per request.

        On a fatal error no request is sent any more (retries included: a request in backoff
        gives up), the requests in flight are awaited for at most :attr:`drain_s` seconds, and
        :class:`~utils.llm.retry.BatchStopped` carries every completion that arrived, so the
        runner records them (docs/engines.md, "Faults"). A request still running at the bound
        is abandoned: its thread ends within the request timeout and its result is dropped.

        Raises:
            BatchStopped: On a fatal error (auth, quota, unknown model, a first turn over the
                context); its message is the cause's.
        """
        if len(requests) <= 1 or self.concurrency == 1:
            done: dict[int, Completion] = {}
            for index, request in enumerate(requests):
                try:
                    done[index] = self.generate_one(request)
                except ProviderError as exc:  # the rest were never sent
                    raise BatchStopped(exc, done, abandoned=0) from exc
            return [done[i] for i in range(len(requests))]
        stop = StopSignal()
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests)),
                                  thread_name_prefix=f"{self.provider}-call")
        try:
            futures = [pool.submit(self.generate_one, r, stop=stop) for r in requests]
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in futures if f.done() and f.exception() is not None]
            if not failed:
                return [f.result() for f in futures]
            stop.set()
            for future in futures:
                future.cancel()  # not started: never sent
            cause = failed[0].exception()
            if not isinstance(cause, ProviderError):
                raise cause  # a bug: raised at once
            raise self._stopped(cause, failed[0], futures) from cause
        finally:
            stop.set()  # also on an interrupt: nothing more is sent (a no-op once all are done)
            pool.shutdown(wait=False, cancel_futures=True)

    def _stopped(self, cause: ProviderError, first: Future,
                 futures: list[Future]) -> BatchStopped:
        """Await the batch's requests in flight (:attr:`drain_s`) and report what arrived."""
        started = [f for f in futures if f is not first and not f.cancelled()]
        if started:
            logger.warning("%s: a fatal error stops the batch: waiting up to %g s for the %d "
                           "request(s) in flight (answers that arrive are returned)",
                           self.provider, self.drain_s, len(started))
        arrived, late = wait(started, timeout=self.drain_s)
        completions: dict[int, Completion] = {}
        abandoned = len(late)
        for index, future in enumerate(futures):
            if future not in arrived:
                continue
            exc = future.exception()
            if exc is None:
                completions[index] = future.result()
            elif isinstance(exc, RunStopped):
                if exc.attempts:  # it had been sent (a retry given up), else never sent
                    abandoned += 1
            elif isinstance(exc, ProviderError):
                abandoned += 1
            else:
                logger.error("%s: a request in flight at the stop failed: %r", self.provider,
                             exc)
                abandoned += 1
        return BatchStopped(cause, completions, abandoned)

    async def agenerate(self, request: TurnRequest) -> Completion:
        """Answer one request on the running event loop, with retries.

        Returns:
            The completion; status ``fault`` when the retries ran out (no answer).

        Raises:
            ProviderError: On a fatal error (auth, quota, unknown model, a first turn over
                the context).
        """
        started = time.perf_counter()
        try:
            response, attempts = await self.retrier.acall(lambda: self._aattempt(request),
                                                          request_id=request.request_id)
        except RequestFailed as exc:
            return self._failed(exc, started, request)
        except RetriesExhausted as exc:
            return self._fault(exc, started)
        return self._finish(response, attempts, started)


class LoopBound:
    """Holds an async SDK client for the event loop it was made in (``asyncio.run`` per run).

    A client made in one loop cannot be used from another, so a new loop gets a new client;
    :meth:`close` closes the current one.
    """

    def __init__(self) -> None:
        self.client: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def get(self, factory: Any) -> Any:
        """The client of the running loop, made with ``factory()`` on first use."""
        loop = asyncio.get_running_loop()
        if self.client is None or self.loop is not loop:
            self.client, self.loop = factory(), loop
        return self.client

    def take(self) -> Any:
        """Forget and return the current client (None when none)."""
        client, self.client, self.loop = self.client, None, None
        return client
