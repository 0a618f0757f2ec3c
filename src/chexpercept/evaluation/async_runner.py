"""Stage 03: per-case pipelines for API providers (no stage barrier); same run folder as sync.

Writes exactly what :func:`chexpercept.evaluation.runner.run_evaluation` writes
(``run_manifest.json``, ``records.jsonl``, ``faults.jsonl``, ``all_results.json``) with the same
resume and manifest rules: both go through one
:class:`~chexpercept.evaluation.session.RunSession`; dialogue, oracle, parsing, scoring and the
run folder live only there and in :mod:`chexpercept.run_store`.

Scheduling (docs/design.md, "Concurrency"): ``2 * concurrency`` workers
each take the next unfinished case and run its turns in order, one ``model.agenerate`` per
turn; a global ``asyncio.Semaphore(concurrency)`` bounds the requests in flight. Cases are taken
longest remaining path first (9 turns before 1; selection order among equals): a case's turns
are sequential, so a 9-turn case started last would run alone for 9 latencies at the end
(longest-processing-time-first scheduling; the results do not depend on the order). A request
sleeping in retry backoff hands its permit back (:class:`utils.llm.retry.InFlightSlot`), which
is why there are more open cases than permits. A slow request delays only its own case, never a
whole turn index, and cases finish early (depth first), so checkpoints of ``all_results.json``
hold whole cases and prefix caches see one conversation's turns back to back. With a provider
that has a KV cache (``ChatModel.kv_cache``: vLLM's ``AsyncLLM``) a worker starts its next case
only once that case's footprint fits the cache beside the cases in flight
(:mod:`chexpercept.evaluation.kv_window`), so no dialogue's history is evicted by the others'.

Durability is the store's (one fsync policy for both runners). ``all_results.json`` is rebuilt
after ``save_every`` newly finished cases but at most every ``checkpoint_interval_s`` seconds,
and always at the end; each case's result is built and encoded once, as it finishes
(``session.encode_results``), so a checkpoint only joins cached texts (the records are the
source of truth).

Garbage collection: the event loop serves every request in flight, so a collector pause delays
all of them at once. Before the loop starts, what exists (the bundle, the case states) is
collected once and frozen (``gc.freeze``: not scanned again until the run ends), and the
youngest generation's threshold is raised from 700 to :data:`GC_GEN0_THRESHOLD` allocations;
both are restored afterwards. With the defaults, collections took ~1.6 s of a 30 s run at
320 requests/s, full ones 60-130 ms each (benchmarks/bench_api_throughput.py).

A turn that got no answer (a ``fault`` completion: the retries ran out) is logged to
``faults.jsonl`` and its case is parked, unfinished, for the rest of the invocation; the other
cases go on. A provider's ``ProviderError`` (auth, quota, unknown model), or too many faults in a
row (:class:`~chexpercept.evaluation.session.FaultBreaker`), stops the run, draining it
(docs/engines.md, "Faults"): the run's :class:`~utils.llm.retry.StopSignal` is set, so no
request is sent after the error (a case waiting for a permit sends nothing, a retry in backoff
gives up with :class:`~utils.llm.retry.RunStopped`); the requests in flight are awaited for at
most ``drain_s`` seconds (:data:`utils.llm.retry.DRAIN_S`) and every completion that arrives is
recorded as in a run that goes on; those still in flight at the bound are cancelled and their
answers, should they come, are never recorded. Recorded turns stay, the error names how many
answers the drain recorded and abandoned, and a re-run resumes. Any other exception (a bug, an
interrupt) cancels the requests in flight at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chexpercept.errors import ConfigError, ProviderError
from chexpercept.evaluation.cases import Bundle, EvalCase
from chexpercept.evaluation.judge import Judge
from chexpercept.evaluation.kv_window import DialogueWindow
from chexpercept.evaluation.session import (
    CaseState,
    Drain,
    EvalSettings,
    RunSession,
    RunSummary,
    encode_results,
    open_session,
)
from chexpercept.run_store import FSYNC_EVERY, FSYNC_INTERVAL_S
from utils.llm.base import ChatModel
from utils.llm.retry import (
    CURRENT_SLOT,
    CURRENT_STOP,
    DRAIN_S,
    InFlightSlot,
    RunStopped,
    StopSignal,
)

logger = logging.getLogger(__name__)

#: Default requests in flight (``--concurrency``) when the provider suggests none.
DEFAULT_CONCURRENCY = 16
#: Cases open per request in flight: a case in retry backoff hands its permit to another
#: (docs/design.md, "Concurrency").
OPEN_CASES_PER_REQUEST = 2
#: Least seconds between two ``all_results.json`` checkpoints.
CHECKPOINT_INTERVAL_S = 30.0
#: Seconds between heartbeat log lines.
HEARTBEAT_S = 30.0
#: Allocations between two collections of the youngest generation while the loop runs (Python's
#: default is 700; see the module docstring).
GC_GEN0_THRESHOLD = 20_000

@contextlib.contextmanager
def _gc_tuned() -> Iterator[None]:
    """Collect and freeze what exists, raise the gen-0 threshold; restore both on exit.

    Leaves the collector alone when the process manages it itself: collection switched off
    (``gc.disable()`` or a gen-0 threshold of 0) keeps it off, and a process that has frozen
    objects already (``gc.get_freeze_count() > 0``) is not frozen or unfrozen by us (unfreezing
    would undo its own freeze).
    """
    thresholds = gc.get_threshold()
    if not gc.isenabled() or thresholds[0] == 0:
        yield
        return
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.collect()
        gc.freeze()
    gc.set_threshold(max(GC_GEN0_THRESHOLD, thresholds[0]), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if freeze:
            gc.unfreeze()


@dataclass
class SchedulerStats:
    """What the async runner did (heartbeat lines and the closing log line).

    Attributes:
        requests: ``agenerate`` calls made.
        attempts: HTTP attempts over those calls (1 per call without retries).
        in_flight: Requests in flight now.
        max_in_flight: Most requests in flight at once.
        statuses: Completion statuses seen.
        started: ``time.monotonic()`` at the start.
        wall_s: Seconds the loop ran (set at the end).
    """

    requests: int = 0
    attempts: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    statuses: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)
    wall_s: float = 0.0

    def line(self, now: float) -> str:
        """A heartbeat line."""
        rate = self.requests / max(now - self.started, 1e-9)
        return (f"{self.requests} request(s) done ({rate:.1f}/s), {self.in_flight} in flight, "
                f"{self.attempts - self.requests} retried attempt(s), completion statuses "
                f"{dict(self.statuses)}")


class Checkpointer:
    """Rewrites ``all_results.json`` after ``save_every`` finished cases, at most every so often.

    Args:
        session: The run session.
        save_every: Newly finished cases between two rewrites.
        interval_s: Least seconds between two rewrites.
    """

    def __init__(self, session: RunSession, save_every: int, interval_s: float) -> None:
        self.session = session
        self.save_every = save_every
        self.interval_s = interval_s
        self.unsaved = 0
        self.last_save = time.monotonic()

    def case_finished(self) -> None:
        """Count a finished case; rewrite when due."""
        self.unsaved += 1
        if (self.unsaved >= self.save_every
                and time.monotonic() - self.last_save >= self.interval_s):
            self.session.checkpoint()
            self.unsaved, self.last_save = 0, time.monotonic()


class Scheduler:
    """Runs the session's unfinished cases as per-case pipelines (see the module docstring).

    Args:
        session: The run session.
        model: The provider.
        concurrency: Most requests in flight.
        checkpoints: When to rewrite ``all_results.json``.
        drain_s: Most seconds a fatal stop waits for the requests in flight.
        window: The dialogues in flight against the provider's KV cache (None: no bound).

    Attributes:
        stop: Set when a fatal error stops the run (no request is sent after it).
        drain: What became of the requests in flight at the stop.
    """

    def __init__(self, session: RunSession, model: ChatModel, concurrency: int,
                 checkpoints: Checkpointer, drain_s: float = DRAIN_S,
                 window: DialogueWindow | None = None) -> None:
        self.session = session
        self.window = window
        self.model = model
        self.concurrency = concurrency
        self.checkpoints = checkpoints
        self.drain_s = drain_s
        self.stop = StopSignal()
        self.drain = Drain()
        self.stats = SchedulerStats()
        self._last_beat = self.stats.started
        # longest remaining path first (stable: selection order among equals), so the run ends
        # on short cases rather than on a few 9-turn ones running alone (module docstring)
        self.queue = sorted((s for s in session.active_states if s.runnable), reverse=True,
                            key=lambda s: len(s.dialogue.case.turns) - len(s.dialogue.outcomes))
        self._position = 0
        self._taking = asyncio.Lock()
        self._room = asyncio.Event()

    async def _take(self) -> CaseState | None:
        """The next queued case, once the KV window has room for it; None when none is left.

        Workers take cases one at a time, in queue order; without a window at once
        (docs/design.md, "Batching"; :mod:`chexpercept.evaluation.kv_window`).
        """
        async with self._taking:
            while self._position < len(self.queue) and not self.stop.is_set():
                state = self.queue[self._position]
                if self.window is None or self.window.fits(state):
                    self._position += 1
                    if self.window is not None:
                        self.window.enter(state)
                    return state
                self._room.clear()
                await self._room.wait()  # set when a case leaves, an answer comes, or a stop
            return None

    async def _ask(self, state: CaseState, slot: InFlightSlot) -> None:
        """Ask one turn of ``state`` and hand the completion to the session.

        Raises:
            ProviderError: The error that stops the run (the first fatal one, or the fault
                breaker's); :attr:`stop` is set before it propagates. Once stopping, a request's
                own error or cancellation counts as abandoned in :attr:`drain`.
        """
        stats = self.stats
        prep = state.dialogue.prepare()
        await slot.acquire()
        if self.stop.is_set():  # the run stopped while this case waited: nothing is sent
            slot.release()
            return
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            completion = await self.model.agenerate(prep.request)
        except ProviderError as exc:
            if not self.stop.is_set():
                self.stop.set()  # the first fatal error: nothing is sent after it
                raise
            if not isinstance(exc, RunStopped) or exc.attempts:
                self.drain.abandoned += 1
            logger.debug("%s: no answer while stopping: %s", prep.request.request_id, exc)
            return
        except asyncio.CancelledError:
            if self.stop.is_set():  # still in flight at the drain's bound
                self.drain.abandoned += 1
            raise
        finally:
            stats.in_flight -= 1
            slot.release()
        stats.requests += 1
        stats.attempts += completion.attempts
        stats.statuses[completion.status] += 1
        if self.window is not None:
            self.window.observe(completion)
            self._room.set()
        if self.stop.is_set():  # arrived while stopping: recorded all the same
            self.drain.finish(self.session, state, prep, completion, completion.latency_s)
            return
        # --judge: the reply goes to the judge first (another provider; no slot held)
        verdict = await self.session.ajudge(state, prep, completion)
        if self.stop.is_set():  # stopped while the judge read it: kept if it was not read
            self.drain.finish(self.session, state, prep, completion, completion.latency_s,
                              verdict)
            return
        try:
            answered = self.session.finish(state, prep, completion, completion.latency_s,
                                           verdict)
        except ProviderError:  # the fault breaker stops the run
            self.stop.set()
            raise
        if answered and state.dialogue.finished:
            encode_results(self.session.store.results_path, (state,),
                           self.session.settings.model, priced=self.session.priced)
            self.checkpoints.case_finished()
        now = time.monotonic()
        if now - self._last_beat >= HEARTBEAT_S:
            self._last_beat = now
            logger.info("%s", stats.line(now))

    async def _worker(self) -> None:
        slot = InFlightSlot(self._semaphore)
        CURRENT_SLOT.set(slot)  # this task's context only: retries free it while backing off
        CURRENT_STOP.set(self.stop)  # and give up when the run stops
        while (state := await self._take()) is not None:
            # a fault parks the case for the rest of the invocation
            while state.runnable and not self.stop.is_set():
                await self._ask(state, slot)
            if self.window is not None:
                self.window.leave(state)
                self._room.set()

    async def _drain(self, tasks: list[asyncio.Task]) -> None:
        """Await the requests in flight for at most :attr:`drain_s` s; cancel the rest."""
        self._room.set()  # workers waiting for the KV window see the stop
        pending = [t for t in tasks if not t.done()]
        try:
            if pending:
                logger.warning("a fatal error stops the run: waiting up to %g s for the %d "
                               "request(s) in flight (answers that arrive are recorded)",
                               self.drain_s, self.stats.in_flight)
                _, late = await asyncio.wait(pending, timeout=self.drain_s)
                for task in late:
                    task.cancel()
        finally:  # an interrupt while waiting cancels everything
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, ProviderError):
                logger.error("a request in flight at the stop failed: %r", result,
                             exc_info=result)

    async def run(self) -> SchedulerStats:
        """Run every queued case; drains on a fatal error, cancels the rest on any other.

        Raises:
            ProviderError: The error that stopped the run, after the drain (see the module
                docstring); the message counts the answers recorded and abandoned.
        """
        self._semaphore = asyncio.Semaphore(self.concurrency)
        tasks = [asyncio.create_task(self._worker())
                 for _ in range(min(OPEN_CASES_PER_REQUEST * self.concurrency,
                                    len(self.queue)))]
        try:
            await asyncio.gather(*tasks)
        except ProviderError as exc:
            self.stop.set()
            await self._drain(tasks)
            raise self.drain.error(exc)  # noqa: B904 - its __cause__ is exc
        except BaseException:
            self.stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            await self.model.aclose()
        self.stats.wall_s = time.monotonic() - self.stats.started
        return self.stats


def run_evaluation_async(bundle: Bundle, cases: Sequence[EvalCase], model: ChatModel,
                         settings: EvalSettings, run_dir: str | Path, *,
                         concurrency: int = DEFAULT_CONCURRENCY, overwrite: bool = False,
                         checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S,
                         fsync_every: int = FSYNC_EVERY,
                         fsync_interval_s: float = FSYNC_INTERVAL_S,
                         drain_s: float = DRAIN_S,
                         judge: Judge | None = None) -> RunSummary:
    """Run (or resume) the evaluation of ``cases`` as concurrent per-case pipelines.

    Same outputs, resume and manifest semantics as
    :func:`~chexpercept.evaluation.runner.run_evaluation`; works with any
    :class:`~utils.llm.base.ChatModel` (the default ``agenerate`` runs ``generate`` in a thread).

    Args:
        bundle: The loaded benchmark.
        cases: Validated, planned cases to evaluate.
        model: The provider; ``agenerate`` is called once per turn.
        settings: Run identity and checkpointing (``save_every``).
        run_dir: ``layouts.eval_run_dir(...)``.
        concurrency: Most requests in flight (``--concurrency``, >= 1).
        overwrite: Delete an earlier run's manifest, records and results first.
        checkpoint_interval_s: Least seconds between two ``all_results.json`` rewrites.
        fsync_every: Records between two fsyncs of ``records.jsonl``.
        fsync_interval_s: Seconds between two fsyncs of ``records.jsonl``.
        drain_s: Most seconds a fatal stop waits for the requests in flight (default
            :data:`utils.llm.retry.DRAIN_S`; docs/engines.md, "Faults").
        judge: The judge model of the replies the parser cannot read (``--judge``;
            docs/parsing.md, "Judge model"), or None.

    Returns:
        The run summary (``generate_calls`` counts ``agenerate`` calls).

    Raises:
        ConfigError: On ``concurrency < 1`` or a run folder with a different manifest.
        ProviderError: On a fatal provider error or too many faults in a row: the run stops
            after recording what its requests in flight returned (the message counts them);
            recorded turns are kept.
        SchemaError: If ``records.jsonl`` is corrupt.
    """
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {concurrency}")
    session = open_session(bundle, cases, model, settings, run_dir, overwrite=overwrite,
                           fsync_every=fsync_every, fsync_interval_s=fsync_interval_s,
                           judge=judge)
    model = session.wrap(model)  # replies kept by a judge fault are judged, not asked again
    cache = model.kv_cache()
    window = None if cache is None else DialogueWindow(cache, model.prompt_limits())
    scheduler = Scheduler(session, model, concurrency,
                          Checkpointer(session, settings.save_every, checkpoint_interval_s),
                          drain_s, window)
    logger.info("async runner: %d case(s) to run, concurrency %d%s", len(scheduler.queue),
                concurrency, "" if window is None else
                f", dialogues in flight within the KV cache's {cache.window_tokens} tokens")
    try:
        with _gc_tuned():
            stats = asyncio.run(scheduler.run())
    finally:
        summary = session.close()
    summary.generate_calls = stats.requests
    logger.info("async runner: %d request(s) in %.1f s (%.1f/s), at most %d open at once (in "
                "flight or in retry backoff), %d retried attempt(s)", stats.requests, stats.wall_s,
                stats.requests / max(stats.wall_s, 1e-9), stats.max_in_flight,
                stats.attempts - stats.requests)
    if window is not None:
        logger.info("dialogue window: %s", window.describe())
    return summary
