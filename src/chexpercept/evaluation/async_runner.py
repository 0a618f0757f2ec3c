"""Stage 03: per-case pipelines for API providers (no stage barrier); same run folder as sync.

Writes exactly what :func:`chexpercept.evaluation.runner.run_evaluation` writes
(``run_manifest.json``, ``records.jsonl``, ``all_results.json``) with the same resume and
manifest rules, reusing its building blocks (:func:`~chexpercept.evaluation.runner.open_run`,
:func:`~chexpercept.evaluation.runner.finish_turn`); dialogue, oracle, parsing and scoring logic
live only there.

Scheduling (harness_anchors.md sections 3.5 item 1 and 3.6 T1/T2): ``2 * concurrency`` workers
each take the next unfinished case and run its turns in order, one ``model.agenerate`` per
turn; a global ``asyncio.Semaphore(concurrency)`` bounds the requests in flight. Cases are taken
longest remaining path first (9 turns before 1; selection order among equals): a case's turns
are sequential, so a 9-turn case started last would run alone for 9 latencies at the end
(longest-processing-time-first scheduling; the results do not depend on the order). A request
sleeping in retry backoff hands its permit back (:class:`utils.llm.retry.InFlightSlot`), which
is why there are more open cases than permits. A slow request delays only its own case, never a
whole turn index, and cases finish early (depth first), so checkpoints of ``all_results.json``
hold whole cases and prefix caches see one conversation's turns back to back.

Durability: each record is appended and flushed to the OS as its turn completes, so a killed
process (SIGKILL) loses at most the requests in flight; ``fsync`` runs every
``fsync_every`` records or ``fsync_interval_s`` seconds and at the end (an fsync per record
would stall the event loop; only a machine crash can lose the un-fsynced tail). A partial last
line is repaired on resume. ``all_results.json`` is rebuilt after ``save_every`` newly finished
cases but at most every ``checkpoint_interval_s`` seconds, and always at the end; each case's
result is built and encoded once, as it finishes (``runner.encode_results``), so a checkpoint
only joins cached texts (the records are the source of truth).

Garbage collection: the event loop serves every request in flight, so a collector pause delays
all of them at once. Before the loop starts, what exists (the bundle, the case states) is
collected once and frozen (``gc.freeze``: not scanned again until the run ends), and the
youngest generation's threshold is raised from 700 to :data:`GC_GEN0_THRESHOLD` allocations;
both are restored afterwards. With the defaults, collections took ~1.6 s of a 30 s run at
320 requests/s, full ones 60-130 ms each (benchmarks/bench_api_throughput.py).

A turn that got no answer (a ``fault`` completion: the retries ran out) is logged to
``faults.jsonl`` and its case is parked, unfinished, for the rest of the invocation; the other
cases go on. A provider's ``ProviderError`` (auth, quota, unknown model), or too many faults in a
row (:class:`~chexpercept.evaluation.runner.FaultBreaker`), stops the run: in-flight requests
are cancelled, recorded turns stay, and a re-run resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from chexpercept import io
from chexpercept.errors import ConfigError
from chexpercept.evaluation.cases import Bundle, EvalCase
from chexpercept.evaluation.runner import (
    EvalSettings,
    OpenedRun,
    RunSummary,
    encode_results,
    finalize_summary,
    open_run,
)
from utils.llm.base import ChatModel
from utils.llm.retry import CURRENT_SLOT, InFlightSlot

logger = logging.getLogger(__name__)

#: Default requests in flight (``--concurrency``).
DEFAULT_CONCURRENCY = 16
#: fsync ``records.jsonl`` after this many appended records ...
FSYNC_EVERY = 256
#: ... or after this many seconds, whichever comes first.
FSYNC_INTERVAL_S = 1.0
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


class RecordWriter:
    """Append-only JSONL writer: flush per record, fsync in batches (see the module docstring).

    Args:
        path: ``records.jsonl``.
        fsync_every: Records between two fsyncs.
        fsync_interval_s: Seconds between two fsyncs.
    """

    def __init__(self, path: Path, fsync_every: int = FSYNC_EVERY,
                 fsync_interval_s: float = FSYNC_INTERVAL_S) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.fsync_every = fsync_every
        self.fsync_interval_s = fsync_interval_s
        self._pending = 0
        self._last_sync = time.monotonic()
        self.written = 0

    def append(self, record: dict[str, Any]) -> None:
        """Write one record line and flush it to the OS."""
        # json handles the record's dicts/lists/tuples natively; to_jsonable only for the rest
        # (Paths, numpy scalars): walking every record with it cost ~0.4 ms per turn.
        self._fh.write(json.dumps(record, ensure_ascii=False, default=io.to_jsonable) + "\n")
        self._fh.flush()
        self.written += 1
        self._pending += 1
        if (self._pending >= self.fsync_every
                or time.monotonic() - self._last_sync >= self.fsync_interval_s):
            self.sync()

    def sync(self) -> None:
        """Fsync what was written."""
        if self._pending:
            os.fsync(self._fh.fileno())
            self._pending = 0
        self._last_sync = time.monotonic()

    def close(self) -> None:
        """Fsync, then close."""
        if not self._fh.closed:
            self.sync()
            self._fh.close()


async def _run(opened: OpenedRun, model: ChatModel, settings: EvalSettings,
               writer: RecordWriter, concurrency: int, checkpoint: Any) -> dict[str, Any]:
    """Run every unfinished case; returns scheduling statistics."""
    semaphore = asyncio.Semaphore(concurrency)
    results_file = opened.results_file
    # longest remaining path first (stable: selection order among equals), so the run ends on
    # short cases rather than on a few 9-turn ones running alone (see the module docstring)
    queue = sorted((s for s in opened.active_states if s.runnable), reverse=True,
                   key=lambda s: len(s.dialogue.case.turns) - len(s.dialogue.history))
    position = 0
    stats: dict[str, Any] = {"in_flight": 0, "max_in_flight": 0, "requests": 0,
                             "attempts": 0, "statuses": Counter()}
    started = time.monotonic()
    last_beat = started

    async def run_case(state: Any, slot: InFlightSlot) -> None:
        nonlocal last_beat
        while state.runnable:
            prep = state.dialogue.prepare()
            await slot.acquire()
            stats["in_flight"] += 1
            stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
            try:
                completion = await model.agenerate(prep.request)
            finally:
                stats["in_flight"] -= 1
                slot.release()
            stats["requests"] += 1
            stats["attempts"] += completion.attempts
            stats["statuses"][completion.status] += 1
            record = opened.finish(state, prep, completion, settings.model, completion.latency_s)
            if record is None:  # a fault: no answer, the case stays unfinished
                checkpoint(False, finished=False)
                continue
            writer.append(record)
            if state.dialogue.finished:
                encode_results(results_file, (state,), settings.model)
                checkpoint(False)
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_S:
                last_beat = now
                rate = stats["requests"] / max(now - started, 1e-9)
                logger.info("%d request(s) done (%.1f/s), %d in flight, %d retried attempt(s), "
                            "completion statuses %s", stats["requests"], rate,
                            stats["in_flight"], stats["attempts"] - stats["requests"],
                            dict(stats["statuses"]))

    async def worker() -> None:
        nonlocal position
        slot = InFlightSlot(semaphore)
        CURRENT_SLOT.set(slot)  # this task's context only: retries free it while backing off
        while position < len(queue):
            state = queue[position]
            position += 1
            await run_case(state, slot)

    workers = min(2 * concurrency, len(queue))
    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        await model.aclose()
    stats["wall_s"] = time.monotonic() - started
    return stats


def run_evaluation_async(bundle: Bundle, cases: Sequence[EvalCase], model: ChatModel,
                         settings: EvalSettings, run_dir: str | Path, *,
                         concurrency: int = DEFAULT_CONCURRENCY, overwrite: bool = False,
                         checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S,
                         fsync_every: int = FSYNC_EVERY,
                         fsync_interval_s: float = FSYNC_INTERVAL_S) -> RunSummary:
    """Run (or resume) the evaluation of ``cases`` as concurrent per-case pipelines.

    Same outputs, resume and manifest semantics as
    :func:`~chexpercept.evaluation.runner.run_evaluation`; works with any
    :class:`~utils.llm.base.ChatModel` (the default ``agenerate`` runs ``generate`` in a thread).

    Args:
        bundle: The loaded benchmark.
        cases: Validated, planned cases to evaluate.
        model: The provider; ``agenerate`` is called once per turn.
        settings: Run identity and checkpointing (``save_every``).
        run_dir: ``io.eval_run_dir(...)``.
        concurrency: Most requests in flight (``--concurrency``, >= 1).
        overwrite: Delete an earlier run's manifest, records and results first.
        checkpoint_interval_s: Least seconds between two ``all_results.json`` rewrites.
        fsync_every: Records between two fsyncs of ``records.jsonl``.
        fsync_interval_s: Seconds between two fsyncs of ``records.jsonl``.

    Returns:
        The run summary (``generate_calls`` counts ``agenerate`` calls).

    Raises:
        ConfigError: On ``concurrency < 1`` or a run folder with a different manifest.
        ProviderError: On a fatal provider error (the run stops; recorded turns are kept).
        SchemaError: If ``records.jsonl`` is corrupt.
    """
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {concurrency}")
    run_dir = Path(run_dir)
    opened = open_run(bundle, cases, model, settings, run_dir, overwrite=overwrite)
    summary = opened.summary
    writer = RecordWriter(opened.records_file, fsync_every, fsync_interval_s)
    unsaved = 0
    last_save = time.monotonic()
    dirty = False

    def checkpoint(final: bool, finished: bool = True) -> None:
        nonlocal unsaved, last_save, dirty
        if not final:
            unsaved += finished
            dirty = True
            if (unsaved < settings.save_every
                    or time.monotonic() - last_save < checkpoint_interval_s):
                return
        writer.sync()
        n = opened.write_results(settings.model)
        logger.info("checkpoint: %d finished case(s) in %s", n, opened.results_file)
        unsaved, last_save, dirty = 0, time.monotonic(), False

    todo = sum(s.runnable for s in opened.active_states)
    logger.info("async runner: %d case(s) to run, concurrency %d", todo, concurrency)
    stats: dict[str, Any] = {}
    try:
        with _gc_tuned():
            stats = asyncio.run(_run(opened, model, settings, writer, concurrency, checkpoint))
    finally:
        writer.close()
        if dirty or writer.written or summary.turns_resumed or not opened.results_file.exists():
            opened.write_results(settings.model)
    summary.generate_calls = stats.get("requests", 0)
    if stats:
        logger.info("async runner: %d request(s) in %.1f s (%.1f/s), max %d in flight, "
                    "%d retried attempt(s)", stats["requests"], stats["wall_s"],
                    stats["requests"] / max(stats["wall_s"], 1e-9), stats["max_in_flight"],
                    stats["attempts"] - stats["requests"])
    return finalize_summary(opened)
