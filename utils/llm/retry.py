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

When a fatal error stops a run, a :class:`StopSignal` is set: no request starts another attempt
after it (a retry is a new request), a backoff sleep ends at once and its request raises
:class:`RunStopped` (no answer, nothing recorded), while attempts already sent are awaited for at
most :data:`DRAIN_S` seconds so that answers already paid for are recorded
(docs/engines.md, "Faults"). The async runner sets :data:`CURRENT_STOP` for its tasks; the
synchronous ``generate`` of the API providers passes its own signal to :meth:`Retrier.call` and
reports what arrived in :class:`BatchStopped`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import email.utils
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeVar

import numpy as np

from utils.errors import ProviderError

if TYPE_CHECKING:
    from utils.llm.base import Completion

logger = logging.getLogger(__name__)

T = TypeVar("T")

FailureKind = Literal["retryable", "fatal", "request"]

#: HTTP statuses retried (docs/design.md, "Retries"; the openai SDK's own list).
RETRYABLE_STATUS: frozenset[int] = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 529})
#: Largest fraction added to a server's ``Retry-After`` (spreads clients told the same wait).
RETRY_AFTER_JITTER = 0.1
#: Most seconds a retry woken by a recovered server waits before it is sent (spreads them).
RECOVERY_JITTER_S = 0.5
#: Most seconds a stopping run waits for the requests in flight (docs/engines.md, "Faults"):
#: the default per-attempt timeout (``--request-timeout``, 600 s), so an attempt sent before the
#: stop answers or times out within it (a stopped run starts no further attempt).
DRAIN_S = 600.0
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


class RunStopped(ProviderError):
    """The run stopped (a fatal error of another request) before this request's next attempt.

    Neither an answer nor a fault of this turn: nothing is recorded, and a re-run asks the turn
    again (docs/engines.md, "Faults").

    Attributes:
        attempts: Attempts this request had sent before the stop (0: it was never sent).
    """

    def __init__(self, request_id: str, attempts: int) -> None:
        super().__init__(f"request {request_id or '?'} not sent again: the run stopped "
                         f"(after {attempts} attempt(s))")
        self.attempts = attempts


class BatchStopped(ProviderError):
    """A fatal error stopped a batch of the synchronous ``generate``; carries what did arrive.

    The protocol of a stopped batch (docs/engines.md, "Faults"): ``str()`` is the cause's
    message; ``completions`` holds, by request index, every completion that arrived before the
    stop or within :data:`DRAIN_S` seconds after it (answers, request-level ``error`` /
    ``refused`` / ``blocked`` outcomes, and ``fault`` completions whose retries ran out);
    ``abandoned`` counts the requests that had been sent but got no completion (a fatal error of
    their own, stopped in backoff, or still in flight at the bound). Requests never sent are in
    neither. The runner records ``completions`` exactly as those of a batch that finished, then
    raises the cause.

    Attributes:
        cause: The fatal error that stopped the batch.
        completions: Request index (0-based, in the batch's order) -> its completion.
        abandoned: Requests sent that got no completion.
    """

    def __init__(self, cause: ProviderError, completions: Mapping[int, Completion],
                 abandoned: int) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.completions = dict(completions)
        self.abandoned = abandoned


class StopSignal:
    """Set once when a fatal error stops the run; thread-safe.

    After :meth:`set`, :meth:`check` raises :class:`RunStopped` (the retriers call it before
    every attempt) and every backoff sleep waiting on the signal ends at once: no request is
    sent after a fatal stop, retries included.
    """

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._lock = threading.Lock()
        self._event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def set(self) -> None:
        """Stop: no further attempt; wake the sleeping retries."""
        with self._lock:
            self._flag.set()
            event, loop = self._event, self._loop
        if event is None or loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)

    def is_set(self) -> bool:
        """Whether the run stopped."""
        return self._flag.is_set()

    def check(self, request_id: str, attempts: int) -> None:
        """Raise :class:`RunStopped` when the run stopped.

        Args:
            request_id: The request, for the message.
            attempts: Attempts it has sent so far.

        Raises:
            RunStopped: After :meth:`set`.
        """
        if self._flag.is_set():
            raise RunStopped(request_id, attempts)

    def sleep(self, delay_s: float) -> None:
        """Sleep ``delay_s`` seconds in this thread, or less when the signal is set."""
        self._flag.wait(delay_s)

    def event(self) -> asyncio.Event:
        """An ``asyncio.Event`` of the running loop, set when the signal is."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._event is None or self._loop is not loop:
                self._event, self._loop = asyncio.Event(), loop
                if self._flag.is_set():
                    self._event.set()
            return self._event


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
#: The stop signal of the running task's run (set by the async runner; None elsewhere).
CURRENT_STOP: contextvars.ContextVar[StopSignal | None] = contextvars.ContextVar(
    "chexpercept_stop_signal", default=None)


async def _wait(delay_s: float, *events: asyncio.Event | None) -> None:
    """Sleep ``delay_s`` seconds, or less when one of ``events`` is set first."""
    waits = [e for e in events if e is not None]
    if not waits:
        await asyncio.sleep(delay_s)
        return
    if len(waits) == 1:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waits[0].wait(), delay_s)
        return
    waiters = [asyncio.ensure_future(e.wait()) for e in waits]
    try:
        await asyncio.wait(waiters, timeout=delay_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def backoff_sleep(delay_s: float, wake: asyncio.Event | None = None) -> None:
    """Sleep ``delay_s`` seconds (or until ``wake`` is set), the in-flight slot handed back.

    Ends at once when the run stops (:data:`CURRENT_STOP`), and then does not take the slot
    again: the retry that follows would be a new request (:meth:`Retrier.acall` raises
    :class:`RunStopped` instead).
    """
    stop = CURRENT_STOP.get()
    stopped = stop.event() if stop is not None else None
    slot = CURRENT_SLOT.get()
    if slot is None or not slot.held:
        await _wait(delay_s, wake, stopped)
        return
    slot.release()
    await _wait(delay_s, wake, stopped)
    if stop is None or not stop.is_set():
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
             sleep: Callable[[float], None] | None = None,
             stop: StopSignal | None = None) -> tuple[T, int]:
        """Call ``fn()`` until it succeeds.

        Args:
            fn: One attempt.
            request_id: The request, for messages.
            sleep: Backoff sleep (default: ``time.sleep``, or ``stop.sleep`` with ``stop``).
            stop: The batch's stop signal: checked before every attempt, and it ends a backoff
                sleep at once.

        Returns:
            ``(result, attempts)``.

        Raises:
            ProviderError: On a fatal failure.
            RequestFailed: On a ``request`` failure.
            RetriesExhausted: When the retries run out.
            RunStopped: When ``stop`` is set before an attempt.
        """
        if sleep is None:
            sleep = stop.sleep if stop is not None else time.sleep
        attempt = 0
        while True:
            if stop is not None:
                stop.check(request_id, attempt)
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

        Raises:
            ProviderError: On a fatal failure.
            RequestFailed: On a ``request`` failure.
            RetriesExhausted: When the retries run out.
            RunStopped: When the run stopped (:data:`CURRENT_STOP`) before an attempt.
        """
        stop = CURRENT_STOP.get()
        attempt = 0
        while True:
            if stop is not None:
                stop.check(request_id, attempt)
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
