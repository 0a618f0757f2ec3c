"""Bounded retries for API providers: exponential backoff with full jitter, ``Retry-After`` first.

The SDKs' own retries are switched off (``max_retries=0`` for openai; no ``retry_options`` for
google-genai), so every attempt goes through here and is counted (docs/design.md, "Retries").
A provider maps each exception to a :class:`Failure`:

- ``retryable`` (429, 408, 409, 5xx, timeouts, connection errors): wait, then try again, at most
  ``max_retries`` times. When the server says how long to wait (``Retry-After`` /
  ``retry-after-ms``), the first retry waits that, plus up to :data:`RETRY_AFTER_JITTER` of it
  so that clients told the same wait do not return in lock-step; it is never shorter. Without a
  header the wait is ``U(0, min(max_delay, base * 2**k))`` ("full jitter"), and a request
  refused again waits the larger of the two, so a server that keeps sending ``Retry-After: 0``
  is not hammered. (The openai SDK's own retry, which we
  switch off, likewise uses a server's wait instead of its computed backoff.) Adding the
  backoff on top of a short server wait held each faulted case ~0.5 s longer than asked;
  with 5 % faults that cost ~3 % of the throughput (benchmarks/bench_api_throughput.py);
- ``fatal`` (401/403 auth, 400/404/422 bad request, an exhausted quota, any status that is
  neither retryable nor an answer): raise :class:`~utils.errors.ProviderError` at once; every
  other request of the run would fail the same way, so the run stops;
- ``request`` (this request alone can never succeed: a content filter, a dialogue that has
  outgrown the model's context): no retry, the turn is recorded with a status (``error`` /
  ``refused``). A context overflow on a case's first turn, which has no history yet, means the
  settings cannot work: the provider stops the run instead (docs/engines.md, "Faults").

A request sleeping in backoff is not in flight: when the async runner has bound the task to an
:class:`InFlightSlot` (:data:`CURRENT_SLOT`), the slot is handed back for the sleep and taken
again before the next attempt, so other cases use the connection meanwhile.

When the retries run out, :class:`RetriesExhausted` is raised; the API providers turn it into a
completion with status ``fault`` (:data:`utils.llm.base.FAULT`): no answer, never recorded as
one. The runner keeps that case unfinished and a re-run asks the turn again (docs/engines.md,
"Faults").
:class:`RequestFailed` carries a ``request`` failure (and the attempt count); providers turn it
into a recorded completion status.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import email.utils
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np

from utils.errors import ProviderError

logger = logging.getLogger(__name__)

T = TypeVar("T")

FailureKind = Literal["retryable", "fatal", "request"]

#: HTTP statuses retried (docs/design.md, "Retries"; the openai SDK's own list).
RETRYABLE_STATUS: frozenset[int] = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 529})
#: Largest fraction added to a server's ``Retry-After`` (spreads clients told the same wait).
RETRY_AFTER_JITTER = 0.1
#: Most seconds a retry woken by a recovered server waits before it is sent (spreads them).
RECOVERY_JITTER_S = 0.5
#: HTTP statuses that stop the run: credentials or a request every case would repeat.
FATAL_STATUS: frozenset[int] = frozenset({400, 401, 403, 404, 422})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry.

    Attributes:
        max_retries: Retries after the first attempt (``--max-retries``, default 6, as the
            release's Gemini back-off; docs/design.md, "Retries"); 0 disables retrying.
        base_delay_s: Backoff base in seconds (docs/design.md, "Retries": 1 s).
        max_delay_s: Cap of the jittered backoff in seconds (docs/design.md, "Retries": 60 s).
        max_retry_after_s: Longest server ``Retry-After`` honoured in seconds; a longer one is
            cut to this (logged), so one bad header cannot stall a run for hours.
    """

    max_retries: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    max_retry_after_s: float = 300.0


@dataclass(frozen=True)
class Failure:
    """One failed attempt, classified by the provider.

    Attributes:
        kind: ``retryable``, ``fatal`` or ``request`` (see the module docstring).
        message: Short text for the record and the log (secrets already removed).
        status_code: HTTP status, or None for connection errors and timeouts.
        retry_after_s: The server's ``Retry-After`` in seconds, or None.
        completion_status: Status recorded for a ``request`` failure (``error`` or
            ``refused``).
        context_overflow: A ``request`` failure because the prompt does not fit the model's
            context; the provider decides whether it stops the run (a case's first turn: the
            settings cannot work) or is the turn's outcome (a dialogue that outgrew the context).
    """

    kind: FailureKind
    message: str
    status_code: int | None = None
    retry_after_s: float | None = None
    completion_status: str = "error"
    context_overflow: bool = False


class RetriesExhausted(ProviderError):
    """A retryable fault (connection, timeout, 429, 5xx) outlasted ``max_retries``.

    The turn gets no answer: a fault of the network or the server is not an answer of the
    model (docs/engines.md, "Faults").

    Attributes:
        failure: The last failure.
        attempts: Attempts made (1 + retries).
    """

    def __init__(self, message: str, failure: Failure, attempts: int) -> None:
        super().__init__(message)
        self.failure = failure
        self.attempts = attempts


class RequestFailed(Exception):  # noqa: N818 - it is a control-flow result, not a bug
    """The request failed for good; the turn gets ``failure.completion_status``.

    Attributes:
        failure: The last failure.
        attempts: Attempts made (1 + retries).
        exhausted: True when retries ran out (versus a ``request`` failure).
    """

    def __init__(self, failure: Failure, attempts: int, exhausted: bool) -> None:
        why = f"after {attempts} attempt(s)" if exhausted else "not retryable"
        super().__init__(f"{failure.message} ({why})")
        self.failure = failure
        self.attempts = attempts
        self.exhausted = exhausted


@dataclass
class RetryStats:
    """Counters kept by a provider (read by the runner's heartbeat and the benchmark).

    Attributes:
        attempts: Every attempt made.
        retries: Attempts after a retryable failure.
        by_status: Retryable failures by HTTP status (``None`` key for timeouts/connection).
        waited_s: Total backoff sleep in seconds (as planned; a woken retry sleeps less).
        woken: Retries woken early because another request succeeded during an outage.
    """

    attempts: int = 0
    retries: int = 0
    by_status: dict[int | None, int] = field(default_factory=dict)
    waited_s: float = 0.0
    woken: int = 0


class InFlightSlot:
    """One task's claim on the shared semaphore that bounds requests in flight.

    Args:
        semaphore: The run's ``asyncio.Semaphore(concurrency)``.

    Attributes:
        held: Whether this task holds a permit now.
    """

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore = semaphore
        self.held = False

    async def acquire(self) -> None:
        """Wait for a permit."""
        await self._semaphore.acquire()
        self.held = True

    def release(self) -> None:
        """Give the permit back (no-op when not held, e.g. after a cancelled re-acquire)."""
        if self.held:
            self.held = False
            self._semaphore.release()


#: The in-flight slot of the running task (set by the async runner; None elsewhere).
CURRENT_SLOT: contextvars.ContextVar[InFlightSlot | None] = contextvars.ContextVar(
    "chexpercept_in_flight_slot", default=None)


async def _wait(delay_s: float, wake: asyncio.Event | None) -> None:
    """Sleep ``delay_s`` seconds, or less when ``wake`` is set first."""
    if wake is None:
        await asyncio.sleep(delay_s)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wake.wait(), delay_s)


async def backoff_sleep(delay_s: float, wake: asyncio.Event | None = None) -> None:
    """Sleep ``delay_s`` seconds (or until ``wake`` is set), the in-flight slot handed back."""
    slot = CURRENT_SLOT.get()
    if slot is None or not slot.held:
        await _wait(delay_s, wake)
        return
    slot.release()
    await _wait(delay_s, wake)
    await slot.acquire()


def _seconds(text: str | None, per_second: float) -> float | None:
    """``text`` as a number of seconds >= 0 (``per_second`` units a second), None if not one.

    NaN is not a wait (it would poison every comparison and ``asyncio.sleep``); a negative
    value means "now"; infinity stays, and :func:`backoff_delay` caps it.
    """
    if not text:
        return None
    try:
        value = float(text) / per_second
    except ValueError:
        return None
    return None if math.isnan(value) else max(value, 0.0)


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None
                      ) -> float | None:
    """The server's requested wait in seconds, from ``retry-after-ms`` or ``Retry-After``.

    Args:
        headers: Response headers (case-insensitive mapping such as ``httpx2.Headers``, or a
            plain dict with lowercase keys).
        now: Current epoch seconds for an HTTP-date ``Retry-After`` (default: ``time.time()``).

    Returns:
        Seconds >= 0, or None when neither header is present and valid.
    """
    if not headers:
        return None
    getter = headers.get
    ms = _seconds(getter("retry-after-ms") or getter("Retry-After-Ms"), 1000.0)
    if ms is not None:
        return ms
    value = getter("retry-after") or getter("Retry-After")
    if not value:
        return None
    seconds = _seconds(value, 1.0)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" (RFC 5322: UTC, source zone unknown); not local time
        when = when.replace(tzinfo=datetime.UTC)
    try:
        return max(when.timestamp() - (time.time() if now is None else now), 0.0)
    except (OverflowError, OSError, ValueError):
        return None


def status_kind(status_code: int) -> FailureKind:
    """Kind of an HTTP error status: fatal for 400/401/403/404/422, else retryable."""
    return "fatal" if status_code in FATAL_STATUS else "retryable"


def backoff_delay(policy: RetryPolicy, retry_index: int, retry_after_s: float | None,
                  rng: np.random.Generator) -> float:
    """Seconds to wait before retry number ``retry_index`` (0-based).

    Full jitter ``U(0, min(max_delay_s, base_delay_s * 2**retry_index))`` without a server
    wait. With one, the server's ``Retry-After`` (capped at ``max_retry_after_s``) times
    ``1 + U(0, RETRY_AFTER_JITTER)`` on the first retry, and the larger of that and the full
    jitter on later ones (see the module docstring).

    Args:
        policy: The retry policy.
        retry_index: 0 for the first retry.
        retry_after_s: The server's requested wait, or None.
        rng: Jitter source (timing only; never affects any output).

    Returns:
        The delay in seconds (>= 0).
    """
    ceiling = min(policy.max_delay_s, policy.base_delay_s * (2.0 ** retry_index))
    backoff = float(rng.uniform(0.0, ceiling)) if ceiling > 0 else 0.0
    if retry_after_s is None:
        return backoff
    if retry_after_s > policy.max_retry_after_s:
        logger.warning("server asked to wait %.3g s; waiting %.0f s (max_retry_after_s)",
                       retry_after_s, policy.max_retry_after_s)
    wait = min(retry_after_s, policy.max_retry_after_s)
    wait *= 1.0 + float(rng.uniform(0.0, RETRY_AFTER_JITTER))
    # first retry: the server's wait; a request refused again backs off at least as much as
    # without the header, so a server that keeps answering "Retry-After: 0" is not hammered
    return wait if retry_index == 0 else max(wait, backoff)


class Retrier:
    """Runs calls under a :class:`RetryPolicy` with a provider's error classifier.

    Args:
        policy: Limits.
        classify: Maps an exception raised by the call to a :class:`Failure`; exceptions it
            returns None for are re-raised unchanged (bugs stay visible).
        provider: Name used in messages (``openai``, ``gemini``, ...).
        rng: Jitter source; default: a fresh, OS-seeded numpy Generator (timing only, so
            parallel processes do not retry in lock-step).
    """

    def __init__(self, policy: RetryPolicy, classify: Callable[[BaseException], Failure | None],
                 provider: str, rng: np.random.Generator | None = None) -> None:
        self.policy = policy
        self.classify = classify
        self.provider = provider
        self.rng = rng if rng is not None else np.random.default_rng()
        self.stats = RetryStats()
        self._outage: asyncio.Event | None = None
        self._outage_loop: asyncio.AbstractEventLoop | None = None

    def _outage_event(self) -> asyncio.Event:
        """The event set when a request succeeds during an outage (one per event loop)."""
        loop = asyncio.get_running_loop()
        if self._outage is None or self._outage_loop is not loop:
            self._outage, self._outage_loop = asyncio.Event(), loop
        return self._outage

    def _recovered(self) -> None:
        """A request succeeded: wake the retries waiting out an outage."""
        if self._outage is not None and self._outage_loop is asyncio.get_running_loop():
            self._outage.set()
            self._outage = None

    def _on_failure(self, exc: BaseException, attempt: int, request_id: str
                    ) -> tuple[float, bool]:
        """Classify; raise for fatal/request/exhausted, else ``(delay, outage)``.

        ``outage`` tells whether the failure looks like the server being down (connection,
        timeout, 5xx, malformed response) rather than a rate limit.
        """
        failure = self.classify(exc)
        if failure is None:
            raise exc
        if failure.kind == "fatal":
            raise ProviderError(
                f"{self.provider}: request {request_id or '?'} failed: {failure.message}. "
                f"This is not retried: the run stopped and nothing was recorded for this "
                f"turn (recorded turns are kept; once the cause is fixed, re-running the "
                f"command resumes).") from None
        if failure.kind == "request":
            raise RequestFailed(failure, attempt, exhausted=False) from None
        self.stats.by_status[failure.status_code] = \
            self.stats.by_status.get(failure.status_code, 0) + 1
        if attempt > self.policy.max_retries:
            # a fault of the network or the server, not an answer of the model: never
            # recorded (it would be scored as wrong); the run stops and a re-run asks again
            raise RetriesExhausted(
                f"{self.provider}: request {request_id or '?'} got no answer after {attempt} "
                f"attempt(s): {failure.message}. A fault is not an answer: nothing was "
                f"recorded for this turn (--max-retries sets the attempts).",
                failure, attempt) from None
        down = failure.status_code is None or failure.status_code >= 500
        delay = backoff_delay(self.policy, attempt - 1, failure.retry_after_s, self.rng)
        logger.debug("%s: %s attempt %d failed (%s); retrying in %.2f s", self.provider,
                     request_id, attempt, failure.message, delay)
        self.stats.retries += 1
        self.stats.waited_s += delay
        return delay, down

    def call(self, fn: Callable[[], T], *, request_id: str = "",
             sleep: Callable[[float], None] = time.sleep) -> tuple[T, int]:
        """Call ``fn()`` until it succeeds.

        Returns:
            ``(result, attempts)``.

        Raises:
            ProviderError: On a fatal failure.
            RequestFailed: On a ``request`` failure.
            RetriesExhausted: When the retries run out.
        """
        attempt = 0
        while True:
            attempt += 1
            self.stats.attempts += 1
            try:
                return fn(), attempt
            except Exception as exc:  # noqa: BLE001 - classified, unknown ones re-raised
                delay, _ = self._on_failure(exc, attempt, request_id)
            sleep(delay)

    async def acall(self, fn: Callable[[], Awaitable[T]], *, request_id: str = "",
                    sleep: Callable[[float], Awaitable[None]] = backoff_sleep
                    ) -> tuple[T, int]:
        """Async :meth:`call`: awaits ``fn()``; backoff sleeps free the in-flight slot.

        A retry waiting out what looks like an outage (a connection failure, a timeout, a 5xx
        or a malformed response; not a rate limit) is woken as soon as another request of
        this provider succeeds, plus up to :data:`RECOVERY_JITTER_S` so the woken retries do
        not arrive at once: the backoff of a long outage would otherwise keep cases waiting
        for tens of seconds after the server is back (benchmarks/bench_faults.py).
        """
        attempt = 0
        while True:
            attempt += 1
            self.stats.attempts += 1
            try:
                result = await fn()
            except Exception as exc:  # noqa: BLE001 - classified, unknown ones re-raised
                delay, down = self._on_failure(exc, attempt, request_id)
            else:
                self._recovered()
                return result, attempt
            if sleep is backoff_sleep and down:
                event = self._outage_event()
                await backoff_sleep(delay, wake=event)
                if event.is_set():  # woken early: spread the retries a little
                    self.stats.woken += 1
                    await backoff_sleep(float(self.rng.uniform(0.0, RECOVERY_JITTER_S)))
            else:
                await sleep(delay)
