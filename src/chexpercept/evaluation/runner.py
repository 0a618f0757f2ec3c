"""Stage 03: the stage-synchronous runner (offline engines, baselines).

Each ``model.generate`` call holds one turn of many cases, so an offline engine batches across
cases (docs/design.md, "Batching"). A provider with a KV cache (``ChatModel.kv_cache``: vLLM's
offline engine) gets a rolling window of the dialogues whose footprints fit that cache
(:mod:`chexpercept.evaluation.kv_window`): each call holds the next turn of every case in the
window, and a case that finishes makes room for the next, so each dialogue's history is still
cached when its next turn comes. Any other provider gets, for turn index t = 0..8, one call
holding turn t of every case whose next turn is t. Everything about the run folder, resume and
scoring is the session's (:mod:`chexpercept.evaluation.session`): re-running the same command
resumes, recorded turns are never requested again, and a run folder whose manifest differs in
an identity field is refused.
A request that can never succeed is that turn's ``error`` (scored wrong); a fault (no answer)
leaves its case unfinished for a re-run (docs/engines.md, "Faults").

A fatal error stops the run without throwing away what already arrived: an API provider's
``generate`` raises :class:`~utils.llm.retry.BatchStopped` with the completions its requests in
flight returned (awaited for at most ``utils.llm.retry.DRAIN_S`` seconds), and the fault breaker
stops only after every completion of the batch is recorded; the error then names the counts
(:class:`~chexpercept.evaluation.session.Drain`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from chexpercept.errors import ProviderError
from chexpercept.evaluation.cases import NUM_TURNS, TURNS, Bundle, EvalCase
from chexpercept.evaluation.dialogue import PreparedTurn
from chexpercept.evaluation.judge import Judge
from chexpercept.evaluation.kv_window import DialogueWindow
from chexpercept.evaluation.session import (
    CaseState,
    Drain,
    EvalSettings,
    RunSession,
    RunSummary,
    open_session,
)
from utils.llm.base import ChatModel, Completion
from utils.llm.retry import BatchStopped

logger = logging.getLogger(__name__)


def _finish_batch(session: RunSession, batch: list[CaseState], prepared: list[PreparedTurn],
                  completions: list[Completion], elapsed: float) -> int:
    """Record a batch's completions; returns the cases it finished.

    With a judge (``--judge``) the replies it is to read go to it first, in one call
    (:meth:`~chexpercept.evaluation.session.RunSession.judge_batch`).

    Raises:
        ProviderError: When too many requests in a row got no answer (the fault breaker), or
            the judge failed fatally, after every completion of the batch is recorded.
    """
    finished = 0
    verdicts = session.judge_batch(batch, prepared, completions)
    for i, (state, prep, completion, verdict) in enumerate(zip(batch, prepared, completions,
                                                                verdicts, strict=True)):
        try:
            if session.finish(state, prep, completion, elapsed, verdict) \
                    and state.dialogue.finished:
                finished += 1
        except ProviderError as exc:  # the breaker: the rest of the batch arrived already
            drain = Drain()
            for st, pr, co, ve in zip(batch[i + 1:], prepared[i + 1:], completions[i + 1:],
                                      verdicts[i + 1:], strict=True):
                drain.finish(session, st, pr, co, elapsed, ve)
            raise drain.error(exc)  # noqa: B904 - its __cause__ is the cause
    return finished


def _ask(session: RunSession, model: ChatModel, batch: list[CaseState],
         window: DialogueWindow | None) -> tuple[int, float]:
    """One ``model.generate`` call with the next turn of every case of ``batch``, recorded.

    Returns:
        The cases it finished, and its wall time in seconds.

    Raises:
        ProviderError: As :func:`run_evaluation` (what arrived is recorded first).
    """
    prepared = [s.dialogue.prepare() for s in batch]
    started = time.perf_counter()
    try:
        completions = model.generate([p.request for p in prepared])
    except BatchStopped as stopped:  # record what arrived, then stop
        session.summary.generate_calls += 1
        drain = Drain(abandoned=stopped.abandoned)
        for i, completion in sorted(stopped.completions.items()):
            drain.finish(session, batch[i], prepared[i], completion,
                         time.perf_counter() - started)
        raise drain.error(stopped.cause)  # noqa: B904 - its __cause__ is the cause
    elapsed = time.perf_counter() - started
    session.summary.generate_calls += 1
    if len(completions) != len(prepared):
        raise ProviderError(f"provider {session.settings.provider} returned "
                            f"{len(completions)} completion(s) for {len(prepared)} request(s)")
    if window is not None:
        for completion in completions:
            window.observe(completion)
    return _finish_batch(session, batch, prepared, completions, elapsed), elapsed


def _by_turn_index(session: RunSession, model: ChatModel,
                   progress: Callable[..., Iterable[int]] | None) -> Iterator[int]:
    """Turn t = 0..8 of every case whose next turn is t, one call each; yields finished counts.

    Raises:
        ProviderError: As :func:`run_evaluation`.
    """
    turn_indices: Iterable[int] = range(NUM_TURNS)
    if progress is not None:
        turn_indices = progress(turn_indices, total=NUM_TURNS, desc="turns")
    for t in turn_indices:
        # more than one call per index only under --option-order circular, whose rotations
        # follow their question with its index (docs/evaluation_protocol.md, "Option order")
        while batch := [s for s in session.active_states if s.runnable and s.next_index == t]:
            finished, elapsed = _ask(session, model, batch, None)
            logger.info("turn %d/%d (%s): %d request(s) in %.1f s", t + 1, NUM_TURNS,
                        TURNS[t].name, len(batch), elapsed)
            yield finished


def _in_window(session: RunSession, model: ChatModel, window: DialogueWindow,
               progress: Callable[..., Iterable[int]] | None) -> Iterator[int]:
    """Rolling window: each call holds the next turn of every case in flight; yields finished.

    Before each call, cases that finished or got no answer leave the window and waiting cases
    enter while their footprints fit (:class:`~chexpercept.evaluation.kv_window.DialogueWindow`),
    longest remaining path first, as the async runner takes them (its module docstring), so the
    run does not end on a few 9-turn dialogues running alone.

    Raises:
        ProviderError: As :func:`run_evaluation`.
    """
    queue = deque(sorted((s for s in session.active_states if s.runnable), reverse=True,
                         key=lambda s: len(s.dialogue.case.turns) - len(s.dialogue.outcomes)))
    steps: Iterable[int] = itertools.count()
    if progress is not None:
        steps = progress(steps, total=None, desc="calls")
    for step in steps:
        for state in [s for s in window.in_flight.values() if not s.runnable]:
            window.leave(state)
        while queue and window.fits(queue[0]):
            window.enter(queue.popleft())
        batch = list(window.in_flight.values())
        if not batch:
            return
        finished, elapsed = _ask(session, model, batch, window)
        logger.info("call %d: %d request(s) in %.1f s, %d case(s) waiting; %s", step + 1,
                    len(batch), elapsed, len(queue), window.describe())
        yield finished


def run_evaluation(bundle: Bundle, cases: Sequence[EvalCase], model: ChatModel,
                   settings: EvalSettings, run_dir: str | Path, *, overwrite: bool = False,
                   progress: Callable[..., Iterable[int]] | None = None,
                   judge: Judge | None = None) -> RunSummary:
    """Run (or resume) the evaluation of ``cases`` and write the run folder.

    A model with a KV cache (:meth:`~utils.llm.base.ChatModel.kv_cache`, the offline vLLM
    engine) gets a rolling window of the dialogues that fit it, each call holding the next turn
    of every case in the window; any other gets one call per turn index over every case
    (docs/design.md, "Batching").

    Args:
        bundle: The loaded benchmark (key order and JSON hash).
        cases: Validated, planned cases to evaluate (see ``validate_bundle``).
        model: The provider; ``generate`` is called once per turn index that has work, or once
            per step of the window.
        settings: Run identity and checkpointing.
        run_dir: ``layouts.eval_run_dir(...)``.
        overwrite: Delete an earlier run's manifest, records and results first.
        progress: Optional wrapper of the loop over calls (``utils.cli.progress``).
        judge: The judge model of the replies the parser cannot read (``--judge``;
            docs/parsing.md, "Judge model"), or None.

    Returns:
        The run summary.

    Raises:
        ConfigError: If the run folder holds a run with a different manifest (names the field),
            or (with a KV cache) an image of a case cannot be read for its footprint.
        ProviderError: If the provider returns a wrong number of completions, on a fatal
            provider error (what arrived is recorded first; the message counts it), or when too
            many requests in a row got no answer.
        SchemaError: If ``records.jsonl`` is corrupt.
    """
    session = open_session(bundle, cases, model, settings, run_dir, overwrite=overwrite,
                           judge=judge)
    model = session.wrap(model)  # replies kept by a judge fault are judged, not asked again
    unsaved = 0
    try:
        cache = model.kv_cache()
        window = None if cache is None else DialogueWindow(cache, model.prompt_limits())
        calls = _by_turn_index(session, model, progress) if window is None else \
            _in_window(session, model, window, progress)
        for finished in calls:
            unsaved += finished
            if unsaved >= settings.save_every:
                session.checkpoint()
                unsaved = 0
        if window is not None:
            logger.info("dialogue window: %s", window.describe())
    finally:
        summary = session.close()
    return summary
