"""Stage 03 on a Ray cluster: N replicas of one provider, each a Ray actor holding one engine.

``00_eval.py --ray [ADDRESS] --replicas N`` (:func:`evaluate_on_ray`, called by
:func:`chexpercept.evaluation.api.evaluate`). The driver alone opens the run folder, through
the same :class:`~chexpercept.evaluation.session.RunSession` as a one-engine run, so the
manifest, resume, ``records.jsonl`` and ``all_results.json`` follow the same rules. Each case is
sticky to one replica for the whole invocation (vLLM's prefix cache keeps its conversation).
A replica's actor (:class:`ReplicaWorker`) holds its engine and its cases' conversations: it
walks the turn indices on them, one ``generate`` call per turn index holding its active cases'
turn t, scores each answer and hands the finished records to the driver, which appends them and
writes the checkpoints; the replicas run in parallel without waiting for each other. A replica
that dies is started again (``--ray-max-restarts`` times at most), rebuilt from the records the
driver holds, and asked its batch again; one that keeps dying stops the run with a message
naming it, once the other replicas have finished. Each record gets a ``replica`` field (the
replica's index), which is neither an identity field nor part of ``all_results.json``. See
docs/design.md, "Ray replicas".
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.errors import ConfigError, ProviderError
from chexpercept.evaluation.budget import check_budget
from chexpercept.evaluation.cases import NUM_TURNS, TURNS, Bundle, EvalCase
from chexpercept.evaluation.dialogue import Dialogue, PreparedTurn, TurnOutcome
from chexpercept.evaluation.reply_cap import cap_reply, reply_cap_chars
from chexpercept.evaluation.session import (
    CaseState,
    Drain,
    EvalSettings,
    RunSession,
    RunSummary,
    finish_turn,
    open_session,
)
from utils.llm.base import FAULT, ChatModel, Completion, PromptLimits, TurnRequest
from utils.llm.registry import create_model, provider_class
from utils.ray_pool import (
    DEFAULT_MAX_RESTARTS,
    ActorLost,
    ActorPool,
    cluster_resources,
    connect,
)

logger = logging.getLogger(__name__)

#: Turn indices a replica holds at once: the running one and the next, queued in the actor, so
#: the engine never idles while the driver receives a batch and sends the next (on 2 cores
#: that round trip took 15-30 ms per step; docs/design.md, "Ray replicas").
QUEUED_STEPS = 2


@dataclass(frozen=True)
class RayReplicas:
    """How Stage 03 runs on Ray (``--ray``, ``--replicas`` and friends).

    Attributes:
        address: Ray cluster address (``None``: Ray's own rule; see
            :func:`utils.ray_pool.connect`).
        replicas: Number of replicas (actors), >= 1.
        max_restarts: Restarts per replica before the run stops (>= 0).
        gpus_per_replica: GPUs each replica reserves; None: what the provider answers
            (``ChatModel.replica_gpus``: the tensor parallel size of a vLLM engine, one GPU for
            a transformers model when the cluster has GPUs, else 0).
        cpus_per_replica: CPUs each replica reserves (fractions allowed).
    """

    address: str | None = None
    replicas: int = 1
    max_restarts: int = DEFAULT_MAX_RESTARTS
    gpus_per_replica: float | None = None
    cpus_per_replica: float = 1.0


def check_ray_provider(provider: str, model: str, options: Mapping[str, Any],
                       cluster_gpus: float = 0.0) -> float:
    """GPUs one replica of ``provider`` needs, as the provider answers; refuses the rest.

    Args:
        provider: ``--provider`` (a registry name or a plugin).
        model: ``--model``.
        options: The provider options of the run.
        cluster_gpus: GPUs of the Ray cluster (0 before connecting).

    Returns:
        The provider's GPUs per replica (``ChatModel.replica_gpus``).

    Raises:
        ConfigError: For a provider replicas do not apply to (an API provider: one process
            already runs its requests concurrently), or options a replica cannot run with.
    """
    gpus = provider_class(provider).replica_gpus(model, options, cluster_gpus)
    if gpus is None:
        raise ConfigError(f"--ray applies to providers that run a model here (local engines, "
                          f"the baselines, plugin engines), not --provider {provider}: an API "
                          f"provider already runs many requests at once from one process "
                          f"(--concurrency); drop --ray")
    return gpus


def replica_gpus(provider: str, model: str, options: Mapping[str, Any],
                 settings: RayReplicas) -> float:
    """GPUs one replica reserves (see :attr:`RayReplicas.gpus_per_replica`)."""
    if settings.gpus_per_replica is not None:
        if settings.gpus_per_replica < 0:
            raise ConfigError(f"--gpus-per-replica must be >= 0, got "
                              f"{settings.gpus_per_replica}")
        return float(settings.gpus_per_replica)
    return check_ray_provider(provider, model, options, cluster_resources().get("GPU", 0.0))


def light_case(case: EvalCase) -> EvalCase:
    """``case`` without its benchmark entry (``item``), as a replica receives it.

    Neither the dialogue, the scoring nor the budget check reads ``item``; without the validated
    entry a case pickles to about half the bytes and unpickles about four times faster (2,000
    cases: 0.3 s instead of 1.2 s, on 2 cores).
    """
    return dataclasses.replace(case, item=None)  # type: ignore[arg-type]


def _freeze_heap() -> None:
    """Collect, then leave every live object out of later garbage collections.

    The cases, the engine and the run's state live for the whole turn loop; without this
    Python's full collections walk all of them again and again: on 2 cores a replica of 2,000
    cases spent a third of its CPU time there, in pauses of up to 0.3 s between two ``generate``
    calls (``gc.unfreeze`` gives them back; docs/design.md, "Ray replicas").
    """
    gc.collect()
    gc.freeze()


@dataclass
class ReplicaBatch:
    """One turn batch of a replica: asked, answered, scored and committed in its actor.

    Attributes:
        turn_index: The batch's turn index (0..8).
        key_ids: Its cases, in the order of the ``generate`` call (selection order).
        records: Per case, the record of its answered turn (the dict a one-engine run appends
            to ``records.jsonl``, without ``replica``), or None when the turn got no answer.
        faults: Position in ``key_ids`` -> (the turn as sent, its ``fault`` completion).
        batch_latency_s: Wall time of the engine's ``generate`` call, in seconds.
        usage: Token totals of the answered turns (:attr:`RunSummary.usage` keys).
        cost_usd: Their estimated cost; None (NA) when the model has no price.
        turns_requested: Answered turns.
    """

    turn_index: int
    key_ids: list[str]
    records: list[dict[str, Any] | None]
    faults: dict[int, tuple[PreparedTurn, Completion]] = field(default_factory=dict)
    batch_latency_s: float = 0.0
    usage: Counter = field(default_factory=Counter)
    cost_usd: float | None = 0.0
    turns_requested: int = 0


class ReplicaWorker:
    """Inside a replica's actor: its engine and the conversations of the cases it runs.

    The actor pool builds it in the actor: ``ReplicaWorker(provider, model, **options)`` holds
    the same ``create_model(provider, model, **options)`` as a one-engine run. The driver hands
    it its cases (:meth:`load`: at the start, and again in a restarted actor, whose memory died
    with the old one) and asks its turn indices in order (:meth:`step`), the next one queued
    behind the running one; the worker prepares the turns, calls the engine, scores each answer
    and commits it to its case's dialogue with the one-engine runner's own functions, and
    returns the records. Once a step raised it asks nothing more: the step queued behind it
    returns None.

    Args:
        provider: Provider registry name (or ``module:Class``).
        model: Model id or alias.
        **options: ``create_model`` options (plain values).
    """

    def __init__(self, provider: str, model: str, **options: Any) -> None:
        self.model = create_model(provider, model, **options)
        self.states: list[CaseState] = []
        self.settings: EvalSettings | None = None
        self.replica = 0
        self.failed = False

    def set_answer_key(self, answers: Mapping[str, int | tuple[int, ...]]) -> None:
        """The engine's ``set_answer_key`` (the ``oracle`` and test doubles)."""
        self.model.set_answer_key(answers)

    def preflight(self) -> None:
        """The engine's ``preflight``."""
        self.model.preflight()

    def start(self) -> None:
        """The engine's ``start``."""
        self.model.start()

    def close(self) -> None:
        """The engine's ``close``."""
        self.model.close()

    def load(self, cases: Sequence[EvalCase], outcomes: Sequence[Sequence[TurnOutcome]],
             settings: EvalSettings, replica: int) -> None:
        """Take these cases (replacing any held), each replayed from its recorded outcomes.

        A conversation is rebuilt the way a resume rebuilds it from ``records.jsonl``: each
        recorded outcome is committed after the oracle of its turn is applied
        (:meth:`~chexpercept.evaluation.dialogue.Dialogue.prepare`), so the next request is the
        one the driver's copy of the case would send.

        Args:
            cases: The cases to run (:func:`light_case`), in selection order.
            outcomes: Per case, its answered turns in turn order.
            settings: The run's settings (oracle setting, system prompt, model id).
            replica: This replica's index (for messages).
        """
        gc.unfreeze()  # the cases held before (a reload's) may go
        states = []
        for case, done in zip(cases, outcomes, strict=True):
            dialogue = Dialogue(case, settings.oracle_setting, settings.system_prompt)
            for outcome in done:
                dialogue.commit(dialogue.prepare(), outcome)
            states.append(CaseState(dialogue))
        self.states = states
        self.settings = settings
        self.replica = replica
        self.failed = False
        _freeze_heap()

    def step(self, turn_index: int) -> ReplicaBatch | None:
        """Ask turn index ``turn_index``: one ``generate`` call, every answer scored.

        The batch holds the turn of each case whose next turn has that index, in selection
        order (the one-engine runner's batch). A ``fault`` completion (no answer) parks its
        case for the invocation, as the driver's session does.

        Args:
            turn_index: The turn index (0..8); the driver asks a replica's indices in order.

        Returns:
            The batch, or None when no case has that turn next (its cases were parked by
            faults) or when an earlier step raised.

        Raises:
            ProviderError: If the engine returns a wrong number of completions; what the
                engine raised.
        """
        settings = self.settings
        batch = [s for s in self.states if s.runnable and s.next_index == turn_index]
        if settings is None or self.failed or not batch:
            return None
        try:
            return self._ask(settings, turn_index, batch)
        except BaseException:
            self.failed = True  # the step queued behind this one asks nothing
            raise

    def _ask(self, settings: EvalSettings, turn_index: int,
             batch: list[CaseState]) -> ReplicaBatch:
        prepared = [s.dialogue.prepare() for s in batch]
        started = time.perf_counter()
        completions = self.model.generate([p.request for p in prepared])
        elapsed = time.perf_counter() - started
        if len(completions) != len(prepared):
            raise ProviderError(f"provider {settings.provider} (replica {self.replica}) "
                                f"returned {len(completions)} completion(s) for "
                                f"{len(prepared)} request(s)")
        counts = RunSummary(Path(), Path())  # this batch's counts; the driver adds them up
        cap = reply_cap_chars(settings.max_reply_chars, self.model.prompt_limits().max_new_tokens)
        records: list[dict[str, Any] | None] = []
        faults: dict[int, tuple[PreparedTurn, Completion]] = {}
        for i, (state, prep, completion) in enumerate(zip(batch, prepared, completions,
                                                           strict=True)):
            if completion.status == FAULT:  # the driver logs it (session.score)
                state.fault = completion.error or "no answer"
                faults[i] = (prep, completion)
                records.append(None)
            else:  # cut to the reply cap as the driver's session does (docs/engines.md)
                records.append(finish_turn(state, prep, cap_reply(completion, cap), counts,
                                           settings.model, elapsed,
                                           option_probs=settings.option_probs))
        return ReplicaBatch(turn_index=turn_index, key_ids=[s.key_id for s in batch],
                            records=records, faults=faults, batch_latency_s=elapsed,
                            usage=counts.usage, cost_usd=counts.cost_usd,
                            turns_requested=counts.turns_requested)


def _facts(worker: ReplicaWorker) -> dict[str, Any]:
    """In a replica: what the driver's proxy needs of the engine (no weights are loaded)."""
    model = worker.model
    return {"model": model.model, "provider": model.provider, "describe": model.describe(),
            "runtime": model.runtime_info(), "limits": model.prompt_limits(),
            "needs_answer_key": model.needs_answer_key, "kind": model.kind}


def _check_budget(worker: ReplicaWorker, cases: Sequence[EvalCase]) -> None:
    """In replica 0: the one-engine budget check, with the engine's own token counts."""
    check_budget(cases, worker.model)


class ReplicatedModel(ChatModel):
    """The driver's view of N replicas: what the session needs of a ``ChatModel``.

    ``describe()`` is replica 0's, so the manifest's identity is a one-engine run's (a run
    resumes with or without Ray); ``runtime_info()`` adds where each replica ran. The answer key
    of the ``oracle`` (and of test doubles) goes to every replica, and again to a restarted one.

    Args:
        pool: The replicas (each a :class:`ReplicaWorker`).
    """

    def __init__(self, pool: ActorPool) -> None:
        facts = pool.apply_one(0, _facts)
        super().__init__(facts["model"])
        self.pool = pool
        self.provider = facts["provider"]
        self.kind = facts["kind"]  # what the replicas' provider is (baseline: no cost)
        self.needs_answer_key = bool(facts["needs_answer_key"])
        self._describe = dict(facts["describe"])
        self._runtime = dict(facts["runtime"])
        self._limits: PromptLimits = facts["limits"]
        #: key_id -> replica index, fixed for the invocation (:meth:`assign`).
        self.assignment: dict[str, int] = {}

    def describe(self) -> dict[str, Any]:
        """Replica 0's settings (the same as a one-engine run's)."""
        return dict(self._describe)

    def runtime_info(self) -> dict[str, Any]:
        """Replica 0's runtime plus the replicas' placement (not compared on resume)."""
        return {**self._runtime,
                "ray": {"replicas": self.pool.size, "gpus_per_replica": self.pool.num_gpus,
                        "cpus_per_replica": self.pool.num_cpus,
                        "placement": [dict(i) for i in self.pool.info]}}

    def prompt_limits(self) -> PromptLimits:
        """Replica 0's limits."""
        return self._limits

    def set_answer_key(self, answers: Mapping[str, int | tuple[int, ...]]) -> None:
        """Hand the answers to every replica (and to any restarted later)."""
        self.pool.setup("set_answer_key", dict(answers))

    def preflight(self) -> None:
        """Every replica's preflight."""
        self.pool.call("preflight", {i: () for i in range(self.pool.size)}, count=False)

    def start(self) -> None:
        """Start every replica's engine now, and a restarted replica's before its next batch.

        Raises:
            EngineStartError: What the first replica whose engine cannot start raised (the
                run stops before its folder is opened; docs/engines.md, "Faults").
        """
        self.pool.setup("start")

    def assign(self, key_ids: Iterable[str]) -> None:
        """Give each new key_id a replica: round robin in the order given (selection order).

        A case keeps its replica for the whole invocation; a key_id already assigned keeps
        its replica.
        """
        for key_id in key_ids:
            if key_id not in self.assignment:
                self.assignment[key_id] = len(self.assignment) % self.pool.size

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        """Not used by the runner (it needs each replica's answers apart); refuses."""
        raise ProviderError("ReplicatedModel: use run_replicated, which records each "
                            "replica's answers")

    def close(self) -> None:
        """Release every replica's engine, then end the actors."""
        self.pool.close("close")


def _turn_indices(states: Iterable[CaseState]) -> list[int]:
    """The turn indices a replica asks, in order: those of its runnable cases' turns left.

    A case's turns are planned from its ground truth (``EvalCase.turns``), not from its
    answers, so the replica's steps are known before the first one is asked. An index comes
    once per turn a case has left with it: once, except under ``--option-order circular``,
    whose rotations follow their question with its index (docs/evaluation_protocol.md,
    "Option order"), so each rotation is a step of its own.
    """
    steps: Counter = Counter()
    for s in states:
        if s.runnable:
            left = Counter(t.spec.index for t in s.dialogue.case.turns[len(s.dialogue.outcomes):])
            steps |= left  # the most any one case has left at each index
    return [index for index in sorted(steps) for _ in range(steps[index])]


def _replica_load(session: RunSession, own: Sequence[CaseState],
                  r: int) -> tuple[list[EvalCase], list[list[TurnOutcome]], EvalSettings, int]:
    """:meth:`ReplicaWorker.load` arguments of replica ``r``: its runnable cases as recorded.

    The driver's copy of each case holds every answer it appended (or replayed on resume),
    so a restarted replica is rebuilt from exactly what ``records.jsonl`` holds.
    """
    states = [s for s in own if s.runnable]
    return ([light_case(s.dialogue.case) for s in states],
            [list(s.dialogue.outcomes.values()) for s in states], session.settings, r)


def _append_batch(session: RunSession, r: int, batch: ReplicaBatch, stop: list[ProviderError],
                  drain: Drain) -> tuple[int, ProviderError | None]:
    """Append replica ``r``'s batch through the session, in the order of its ``generate`` call.

    An answer's record (with ``replica``) goes to ``records.jsonl`` and into the driver's copy
    of its case (:meth:`RunSession.take`); a fault goes to ``faults.jsonl`` and parks the case
    (:meth:`RunSession.score`). When a fault trips the breaker the rest of the batch, which
    arrived already, is still appended, and so is every batch that arrives after it (``drain``
    counts them; docs/engines.md, "Faults").

    Args:
        session: The run.
        r: The replica's index.
        batch: Its answered batch.
        stop: Empty until the breaker stopped the run; then its error.
        drain: Counts what was appended after the stop.

    Returns:
        The cases the batch finished, and the breaker's error when this batch tripped it.
    """
    finished = 0
    tripped = None
    for pos, key_id in enumerate(batch.key_ids):
        state = session.states[key_id]
        record = batch.records[pos]
        if record is not None:
            record["replica"] = r
            session.take(state, record)
            finished += state.dialogue.finished
            drain.recorded += bool(stop)
            continue
        prep, completion = batch.faults[pos]
        if stop:
            drain.finish(session, state, prep, completion, batch.batch_latency_s)
            continue
        try:
            session.score(state, prep, completion, batch.batch_latency_s)
        except ProviderError as exc:  # the fault breaker; the rest of the batch is appended
            stop.append(exc)
            tripped = exc
    summary = session.summary
    summary.usage.update(batch.usage)
    summary.add_cost(batch.cost_usd)
    summary.turns_requested += batch.turns_requested
    logger.info("replica %d, turn %d/%d (%s): %d request(s) in %.1f s", r,
                batch.turn_index + 1, NUM_TURNS, TURNS[batch.turn_index].name,
                len(batch.key_ids), batch.batch_latency_s)
    return finished, tripped


def run_replicated(bundle: Bundle, cases: Sequence[EvalCase], model: ReplicatedModel,
                   settings: EvalSettings, run_dir: str | Path, *, overwrite: bool = False,
                   progress: Callable[..., Iterable[int]] | None = None) -> RunSummary:
    """Run (or resume) ``cases`` on the replicas and write the run folder.

    Each replica's actor gets its cases as recorded (:meth:`ReplicaWorker.load`), then walks
    the turn indices t = 0..8 that its cases have left: one ``generate`` call holding turn t of
    every one of its cases whose next turn is t (in selection order), each answer scored and
    committed in the actor (:meth:`ReplicaWorker.step`). A replica holds its next turn index
    queued behind the running one (:data:`QUEUED_STEPS`), so it never waits for the driver;
    the driver appends each batch's records as it arrives (committing each to its own copy of
    the case, as a resume replays them) and writes the checkpoints. Replicas do not wait for
    each other. A replica that died is rebuilt from the driver's copies, which hold every batch
    it returned before the lost one, and asked its lost turn indices again. Same arguments,
    returns and errors as :func:`chexpercept.evaluation.runner.run_evaluation` (``progress``
    advances when every replica has passed a turn index), plus:

    Raises:
        ActorLost: When a replica died more often than its restart bound; the other replicas
            finish their cases first, so a re-run resumes with the lost replica's cases only.
    """
    session = open_session(bundle, cases, model, settings, run_dir, overwrite=overwrite)
    model.assign(s.key_id for s in session.active_states if s.runnable)
    n = model.pool.size
    own: list[list[CaseState]] = [[] for _ in range(n)]
    for state in session.active_states:
        if state.key_id in model.assignment:
            own[model.assignment[state.key_id]].append(state)
    plan = [_turn_indices(own[r]) for r in range(n)]  # each replica's steps, in order
    sent = [0] * n  # steps handed to the pool, per replica
    handled = [0] * n  # steps whose batch the driver handled, per replica
    unsaved = [0]
    stop: list[ProviderError] = []  # the fault breaker's error, once it stopped the run
    drain = Drain()
    frozen = False
    try:
        # every replica's cases cross once, before the turn loop (as its engine's start)
        loaded = model.pool.call("load", {r: _replica_load(session, own[r], r)
                                          for r in range(n) if plan[r]}, count=False)
        lost = [v for v in loaded.values() if isinstance(v, ActorLost)]
        for r, value in loaded.items():
            if isinstance(value, ActorLost):
                plan[r] = []
        _freeze_heap()  # the bundle and the sessions' cases, for the loop (unfrozen below)
        frozen = True
        ticks = iter(progress(range(NUM_TURNS), total=NUM_TURNS, desc="turns")
                     if progress is not None else range(NUM_TURNS))
        passed = [next(ticks, None)]  # the turn index the progress shows (all replicas reached)

        def next_args(r: int) -> tuple[int] | None:
            if sent[r] == len(plan[r]):
                return None
            sent[r] += 1
            return (plan[r][sent[r] - 1],)

        def on_result(r: int, batch: ReplicaBatch | None) -> Callable[[], None] | None:
            handled[r] += 1
            if batch is not None:  # None: its cases were parked by faults, nothing was asked
                session.summary.generate_calls += 1

            def write() -> None:  # runs once the replica's next batch is on its way
                tripped = None
                if batch is not None:
                    finished, tripped = _append_batch(session, r, batch, stop, drain)
                    unsaved[0] += finished
                if unsaved[0] >= settings.save_every:
                    session.checkpoint()
                    unsaved[0] = 0
                low = min(plan[i][handled[i]] if handled[i] < len(plan[i]) else NUM_TURNS
                          for i in range(n))
                while passed[0] is not None and passed[0] < low:
                    passed[0] = next(ticks, None)
                if tripped is not None:  # nothing is asked after it; what is in flight lands
                    raise tripped

            if batch is not None and batch.faults:
                write()  # before the next step is asked: a breaker it trips stops the run
                return None
            return write

        def restore(r: int) -> tuple[str, tuple[Any, ...]]:
            return "load", _replica_load(session, own[r], r)

        try:
            lost += model.pool.stream("step", next_args, on_result, depth=QUEUED_STEPS,
                                      restore=restore)
        except ProviderError as exc:
            if stop and exc is stop[0]:
                raise drain.error(exc) from None
            raise
        for _ in ticks:  # the progress (and a timer wrapped around it) ends with the loop
            pass
        if lost:
            raise lost[0]
    finally:
        if frozen:
            gc.unfreeze()
        summary = session.close()
    return summary


def start_replicas(provider: str, model: str, options: Mapping[str, Any],
                   settings: RayReplicas) -> ReplicatedModel:
    """Connect to the cluster and start ``settings.replicas`` replicas of the provider.

    Each replica builds ``create_model(provider, model, **options)`` inside its actor (the
    options are plain values); the provider adapts them to the replica's GPUs
    (``ChatModel.replica_options``: a vLLM engine's tensor parallel size is set to the GPUs
    the replica holds).

    Raises:
        MissingDependencyError: If Ray is not installed (the message gives the install line).
        ConfigError: See :func:`check_ray_provider`; a bad count; a replica that cannot be
            placed; what the provider's constructor raises (in replica 0).
        ActorLost: When a replica keeps dying while it starts.
    """
    check_ray_provider(provider, model, options)
    if settings.replicas < 1:
        raise ConfigError(f"--replicas must be >= 1, got {settings.replicas}")
    connect(settings.address)
    gpus = replica_gpus(provider, model, options, settings)
    options = provider_class(provider).replica_options(options, gpus)
    logger.info("Ray: %d replica(s) of %s/%s, %g GPU and %g CPU each; cluster %s",
                settings.replicas, provider, model, gpus, settings.cpus_per_replica,
                cluster_resources())
    pool = ActorPool(ReplicaWorker, (provider, model), options, size=settings.replicas,
                     label="replica", num_cpus=settings.cpus_per_replica, num_gpus=gpus,
                     max_restarts=settings.max_restarts)
    try:
        return ReplicatedModel(pool)
    except BaseException:
        pool.close()
        raise


def evaluate_on_ray(bundle: Bundle, cases: Sequence[EvalCase], settings: EvalSettings,
                    run_dir: Path, ray: RayReplicas, *, options: Mapping[str, Any],
                    overwrite: bool = False,
                    progress: Callable[..., Iterable[int]] | None = None) -> RunSummary:
    """Start the replicas, check the budget in replica 0, start the engines, run, end them.

    Args:
        bundle: The loaded benchmark.
        cases: The selected, validated cases.
        settings: The run's settings (as a one-engine run's).
        run_dir: The run folder.
        ray: Cluster and replica settings.
        options: ``create_model`` options of the provider (seed, no_thinking, ...).
        overwrite: Start the run folder afresh.
        progress: Optional wrapper of the turn loop.

    Returns:
        The run summary.
    """
    model = start_replicas(settings.provider, settings.model, options, ray)
    try:
        model.preflight()
        model.pool.apply_one(0, _check_budget, [light_case(c) for c in cases])
        model.start()  # every engine up before the run folder is opened
        logger.info("provider %s, model %s, oracle %s, %d case(s) on %d replica(s) -> %s",
                    settings.provider, settings.model, settings.oracle_setting, len(cases),
                    ray.replicas, run_dir)
        return run_replicated(bundle, cases, model, settings, run_dir, overwrite=overwrite,
                              progress=progress)
    finally:
        model.close()
