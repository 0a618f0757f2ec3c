"""Stage 03: the stage-synchronous runner (offline engines, baselines).

For turn index t = 0..8 the runner makes one ``model.generate`` call holding turn t of every
case whose next turn is t, so an offline engine batches across cases (docs/design.md,
"Batching"). Everything about the run folder, resume and scoring is the session's
(:mod:`chexpercept.evaluation.session`): re-running the same command resumes, recorded turns are
never requested again, and a run folder whose manifest differs in an identity field is refused.
A request that can never succeed is that turn's ``error`` (scored wrong); a fault (no answer)
leaves its case unfinished for a re-run (docs/engines.md, "Faults").

A fatal error stops the run without throwing away what already arrived: an API provider's
``generate`` raises :class:`~utils.llm.retry.BatchStopped` with the completions its requests in
flight returned (awaited for at most ``utils.llm.retry.DRAIN_S`` seconds), and the fault breaker
stops only after every completion of the batch is recorded; the error then names the counts
(:class:`~chexpercept.evaluation.session.Drain`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from chexpercept.errors import ProviderError
from chexpercept.evaluation.cases import NUM_TURNS, TURNS, Bundle, EvalCase
from chexpercept.evaluation.dialogue import PreparedTurn
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


def _next_index(state: CaseState) -> int | None:
    """Turn index of the case's next turn (None when finished)."""
    turn = state.dialogue.next_turn
    return None if turn is None else turn.spec.index


def _finish_batch(session: RunSession, batch: list[CaseState], prepared: list[PreparedTurn],
                  completions: list[Completion], elapsed: float) -> int:
    """Record a batch's completions; returns the cases it finished.

    Raises:
        ProviderError: When too many requests in a row got no answer (the fault breaker),
            after every completion of the batch is recorded.
    """
    finished = 0
    for i, (state, prep, completion) in enumerate(zip(batch, prepared, completions,
                                                       strict=True)):
        try:
            if session.finish(state, prep, completion, elapsed) and state.dialogue.finished:
                finished += 1
        except ProviderError as exc:  # the breaker: the rest of the batch arrived already
            drain = Drain()
            for rest in zip(batch[i + 1:], prepared[i + 1:], completions[i + 1:], strict=True):
                drain.finish(session, *rest, elapsed)
            raise drain.error(exc)  # noqa: B904 - its __cause__ is the cause
    return finished


def run_evaluation(bundle: Bundle, cases: Sequence[EvalCase], model: ChatModel,
                   settings: EvalSettings, run_dir: str | Path, *, overwrite: bool = False,
                   progress: Callable[..., Iterable[int]] | None = None) -> RunSummary:
    """Run (or resume) the evaluation of ``cases`` and write the run folder.

    Args:
        bundle: The loaded benchmark (key order and JSON hash).
        cases: Validated, planned cases to evaluate (see ``validate_bundle``).
        model: The provider; ``generate`` is called once per turn index that has work.
        settings: Run identity and checkpointing.
        run_dir: ``io.eval_run_dir(...)``.
        overwrite: Delete an earlier run's manifest, records and results first.
        progress: Optional wrapper of the turn-index loop (``utils.cli.progress``).

    Returns:
        The run summary.

    Raises:
        ConfigError: If the run folder holds a run with a different manifest (names the field).
        ProviderError: If the provider returns a wrong number of completions, on a fatal
            provider error (what arrived is recorded first; the message counts it), or when too
            many requests in a row got no answer.
        SchemaError: If ``records.jsonl`` is corrupt.
    """
    session = open_session(bundle, cases, model, settings, run_dir, overwrite=overwrite)
    turn_indices: Iterable[int] = range(NUM_TURNS)
    if progress is not None:
        turn_indices = progress(turn_indices, total=NUM_TURNS, desc="turns")
    unsaved = 0
    try:
        for t in turn_indices:
            batch = [s for s in session.active_states if s.runnable and _next_index(s) == t]
            if not batch:
                continue
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
                raise ProviderError(f"provider {settings.provider} returned {len(completions)} "
                                    f"completion(s) for {len(prepared)} request(s)")
            unsaved += _finish_batch(session, batch, prepared, completions, elapsed)
            logger.info("turn %d/%d (%s): %d request(s) in %.1f s", t + 1, NUM_TURNS,
                        TURNS[t].name, len(batch), elapsed)
            if unsaved >= settings.save_every:
                n = session.write_results()
                logger.info("checkpoint: %d finished case(s) in %s", n,
                            session.store.results_path)
                unsaved = 0
    finally:
        summary = session.close()
    return summary
