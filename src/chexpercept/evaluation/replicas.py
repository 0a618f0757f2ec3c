"""Stage 03 on a Ray cluster: N replicas of one provider, each a Ray actor holding one engine.

``00_eval.py --ray [ADDRESS] --replicas N`` (:func:`evaluate_on_ray`, called by
:func:`chexpercept.evaluation.api.evaluate`). The driver alone opens the run folder, through
the same :class:`~chexpercept.evaluation.session.RunSession` as a one-engine run, so the
manifest, resume, ``records.jsonl`` and ``all_results.json`` follow the same rules. Each case is
sticky to one replica for the whole invocation (vLLM's prefix cache keeps its conversation);
each replica gets one ``generate`` call per turn index holding its active cases' turn t, and the
replicas run in parallel without waiting for each other. A replica that dies is started again
(``--ray-max-restarts`` times at most) and its batch is sent again; one that keeps dying stops
the run with a message naming it, once the other replicas have finished. Each record gets a
``replica`` field (the replica's index), which is neither an identity field nor part of
``all_results.json``. See docs/design.md, "Ray replicas".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chexpercept.errors import ConfigError, ProviderError
from chexpercept.evaluation.budget import check_budget
from chexpercept.evaluation.cases import NUM_TURNS, TURNS, Bundle, EvalCase
from chexpercept.evaluation.dialogue import PreparedTurn
from chexpercept.evaluation.session import (
    CaseState,
    EvalSettings,
    RunSummary,
    open_session,
)
from utils.llm.base import ChatModel, Completion, PromptLimits, TurnRequest
from utils.llm.registry import create_model, provider_class
from utils.ray_pool import DEFAULT_MAX_RESTARTS, ActorPool, cluster_resources, connect

logger = logging.getLogger(__name__)

#: Providers that send requests to a hosted API from one process: replicas add nothing.
API_PROVIDERS = ("openai", "azure", "gemini")


@dataclass(frozen=True)
class RayReplicas:
    """How Stage 03 runs on Ray (``--ray``, ``--replicas`` and friends).

    Attributes:
        address: Ray cluster address (``None``: Ray's own rule; see
            :func:`utils.ray_pool.connect`).
        replicas: Number of replicas (actors), >= 1.
        max_restarts: Restarts per replica before the run stops (>= 0).
        gpus_per_replica: GPUs each replica reserves; None: the tensor parallel size for
            ``opensource`` (``--tensor-parallel-size``, else the model's ``gpu_num``, else 1),
            1 for ``transformers`` when the cluster has GPUs and ``--device`` is not ``cpu``,
            else 0.
        cpus_per_replica: CPUs each replica reserves (fractions allowed).
    """

    address: str | None = None
    replicas: int = 1
    max_restarts: int = DEFAULT_MAX_RESTARTS
    gpus_per_replica: float | None = None
    cpus_per_replica: float = 1.0


def check_ray_provider(provider: str, options: Mapping[str, Any]) -> None:
    """Refuse the providers replicas do not apply to.

    Raises:
        ConfigError: For an API provider (one process already runs its requests
            concurrently) and for ``--vllm-engine async`` (each replica takes its turn batch in
            one call).
    """
    if provider in API_PROVIDERS or (provider not in ("opensource",)
                                     and getattr(provider_class(provider), "supports_async",
                                                 False)):
        raise ConfigError(f"--ray applies to the local engines (opensource, transformers), the "
                          f"baselines and plugin engines, not --provider {provider}: an API "
                          f"provider already runs many requests at once from one process "
                          f"(--concurrency); drop --ray")
    if options.get("engine") == "async":
        raise ConfigError("--ray: each replica takes its turn batch in one call; use the "
                          "default --vllm-engine batched with --ray")


def replica_gpus(provider: str, model: str, options: Mapping[str, Any],
                 settings: RayReplicas) -> float:
    """GPUs one replica reserves (see :attr:`RayReplicas.gpus_per_replica`)."""
    if settings.gpus_per_replica is not None:
        if settings.gpus_per_replica < 0:
            raise ConfigError(f"--gpus-per-replica must be >= 0, got "
                              f"{settings.gpus_per_replica}")
        return float(settings.gpus_per_replica)
    if provider == "opensource":
        if options.get("tensor_parallel_size"):
            return float(options["tensor_parallel_size"])
        try:
            from utils.llm.models import resolve_model

            spec = resolve_model(model, provider, model_path=options.get("model_path"))
        except ConfigError:
            return 1.0
        return float(spec.gpu_num or 1)
    if provider == "transformers":
        has_gpu = cluster_resources().get("GPU", 0.0) > 0
        return 1.0 if has_gpu and options.get("device") != "cpu" else 0.0
    return 0.0


def _facts(model: ChatModel) -> dict[str, Any]:
    """In a replica: what the driver's proxy needs of the engine (no weights are loaded)."""
    return {"model": model.model, "provider": model.provider, "describe": model.describe(),
            "runtime": model.runtime_info(), "limits": model.prompt_limits(),
            "needs_answer_key": model.needs_answer_key}


def _check_budget(model: ChatModel, cases: Sequence[EvalCase]) -> None:
    """In replica 0: the one-engine budget check, with the engine's own token counts."""
    check_budget(cases, model)


class ReplicatedModel(ChatModel):
    """The driver's view of N replicas: what the session needs of a ``ChatModel``.

    ``describe()`` is replica 0's, so the manifest's identity is a one-engine run's (a run
    resumes with or without Ray); ``runtime_info()`` adds where each replica ran. The answer key
    of the ``oracle`` (and of test doubles) goes to every replica, and again to a restarted one.

    Args:
        pool: The replicas (each holds ``create_model(provider, model, **options)``).
    """

    def __init__(self, pool: ActorPool) -> None:
        facts = pool.apply_one(0, _facts)
        super().__init__(facts["model"])
        self.pool = pool
        self.provider = facts["provider"]
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


def _next_index(state: CaseState) -> int | None:
    turn = state.dialogue.next_turn
    return None if turn is None else turn.spec.index


def run_replicated(bundle: Bundle, cases: Sequence[EvalCase], model: ReplicatedModel,
                   settings: EvalSettings, run_dir: str | Path, *, overwrite: bool = False,
                   progress: Callable[..., Iterable[int]] | None = None) -> RunSummary:
    """Run (or resume) ``cases`` on the replicas and write the run folder.

    Each replica walks the turn indices t = 0..8 on its own cases: one ``generate`` call
    holding turn t of every one of its cases whose next turn is t (in selection order), then
    the next index once the driver has recorded the answers. Replicas do not wait for each
    other (a case's next turn depends only on its own answers), so the driver's scoring and
    writing of one replica's answers overlaps the others' engine time. Same arguments, returns
    and errors as :func:`chexpercept.evaluation.runner.run_evaluation` (``progress`` advances
    when every replica has passed a turn index), plus:

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
    turn_of = [0] * n  # the next turn index each replica looks at
    in_flight: dict[int, tuple[int, list[CaseState], list[PreparedTurn], float]] = {}
    ticks = iter(progress(range(NUM_TURNS), total=NUM_TURNS, desc="turns")
                 if progress is not None else range(NUM_TURNS))
    passed = [next(ticks, None)]  # the turn index the progress shows (all replicas reached)
    unsaved = [0]

    def next_args(r: int) -> tuple[Any, ...] | None:
        while turn_of[r] < NUM_TURNS:
            t = turn_of[r]
            batch = [s for s in own[r] if s.runnable and _next_index(s) == t]
            if batch:
                prepared = [s.dialogue.prepare() for s in batch]
                in_flight[r] = (t, batch, prepared, time.perf_counter())
                return ([p.request for p in prepared],)
            turn_of[r] += 1
        return None

    def on_result(r: int, completions: list[Completion]) -> Callable[[], None]:
        t, batch, prepared, started = in_flight.pop(r)
        elapsed = time.perf_counter() - started
        session.summary.generate_calls += 1
        if len(completions) != len(prepared):
            raise ProviderError(f"provider {settings.provider} (replica {r}) returned "
                                f"{len(completions)} completion(s) for {len(prepared)} "
                                f"request(s)")
        records = []
        for state, prep, completion in zip(batch, prepared, completions, strict=True):
            # appended once the replica's next batch is on its way (write below)
            record = session.score(state, prep, completion, elapsed, extra={"replica": r})
            if record is not None:
                records.append(record)
                unsaved[0] += state.dialogue.finished
        turn_of[r] = t + 1

        def write() -> None:  # runs once the replica's next batch is on its way
            for record in records:
                session.writer.append(record)
            logger.info("replica %d, turn %d/%d (%s): %d request(s) in %.1f s", r, t + 1,
                        NUM_TURNS, TURNS[t].name, len(batch), elapsed)
            if unsaved[0] >= settings.save_every:
                done = session.write_results()
                logger.info("checkpoint: %d finished case(s) in %s", done,
                            session.store.results_path)
                unsaved[0] = 0
            low = min(turn_of)
            while passed[0] is not None and passed[0] < low:
                passed[0] = next(ticks, None)

        return write

    try:
        lost = model.pool.stream("generate", next_args, on_result)
        for _ in ticks:  # the progress (and a timer wrapped around it) ends with the loop
            pass
        if lost:
            raise lost[0]
    finally:
        summary = session.close()
    return summary


def start_replicas(provider: str, model: str, options: Mapping[str, Any],
                   settings: RayReplicas) -> ReplicatedModel:
    """Connect to the cluster and start ``settings.replicas`` replicas of the provider.

    Each replica builds ``create_model(provider, model, **options)`` inside its actor (the
    options are plain values); for ``opensource`` the tensor parallel size is set to the GPUs
    the replica holds.

    Raises:
        MissingDependencyError: If Ray is not installed (the message gives the install line).
        ConfigError: See :func:`check_ray_provider`; a bad count; a replica that cannot be
            placed; what the provider's constructor raises (in replica 0).
        ActorLost: When a replica keeps dying while it starts.
    """
    check_ray_provider(provider, options)
    if settings.replicas < 1:
        raise ConfigError(f"--replicas must be >= 1, got {settings.replicas}")
    connect(settings.address)
    gpus = replica_gpus(provider, model, options, settings)
    options = dict(options)
    if provider == "opensource" and gpus >= 1 and "tensor_parallel_size" not in options:
        options["tensor_parallel_size"] = int(gpus)
    logger.info("Ray: %d replica(s) of %s/%s, %g GPU and %g CPU each; cluster %s",
                settings.replicas, provider, model, gpus, settings.cpus_per_replica,
                cluster_resources())
    pool = ActorPool(create_model, (provider, model), options, size=settings.replicas,
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
        model.pool.apply_one(0, _check_budget, list(cases))
        model.start()  # every engine up before the run folder is opened
        logger.info("provider %s, model %s, oracle %s, %d case(s) on %d replica(s) -> %s",
                    settings.provider, settings.model, settings.oracle_setting, len(cases),
                    ray.replicas, run_dir)
        return run_replicated(bundle, cases, model, settings, run_dir, overwrite=overwrite,
                              progress=progress)
    finally:
        model.close()
