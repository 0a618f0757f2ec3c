"""Ray plumbing shared by the stages: lazy import, cluster connection, a pool of actors.

Ray is an optional dependency (``pip install -e ".[ray]"``) and is imported only when a
``--ray`` flag asks for it; without it the flag fails with that install line
(:func:`require_ray`). :class:`ActorPool` keeps N long-lived actors, each holding one object
built by a picklable factory inside the actor (one engine or one model load per worker). A call
goes to chosen actors in parallel; an actor whose process or node died is started again (up to
``max_restarts`` times per actor) and its call is sent again; one that keeps dying is reported
by index, node and process. Errors raised by the hosted object itself are re-raised as they are,
so a run fails as it would on one machine.

Nothing here knows about chest X-rays; the stage modules (Stage 01 deformation, Stage 03
replicas) decide what an actor holds and what a call carries.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from utils.deps import require
from utils.errors import ConfigError, ProviderError

logger = logging.getLogger(__name__)

#: The extra that installs Ray (``pip install -e ".[ray]"``; pyproject pins ``ray==2.60.0``).
RAY_EXTRA = "ray"

#: Environment variables the driver hands to every actor (Ray starts workers with the
#: raylet's environment, not the driver's): the Hugging Face cache and offline switches the
#: stage configs set, ``PYTHONPATH`` for plugin modules, and every ``CHEXPERCEPT_*`` variable.
FORWARDED_ENV = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                 "PYTHONPATH")
FORWARDED_PREFIX = "CHEXPERCEPT_"

#: Default restarts per actor before the run stops (``--ray-max-restarts``).
DEFAULT_MAX_RESTARTS = 3

#: Seconds to wait for an actor to be placed and to build its object before the run stops
#: with the cluster's resources in the message (a model load can take minutes).
DEFAULT_READY_TIMEOUT_S = 1800.0


def require_ray(feature: str) -> ModuleType:
    """Import Ray, or fail with the exact install line.

    Args:
        feature: What asked for Ray, for the message (e.g. ``"--ray"``).

    Returns:
        The ``ray`` module.

    Raises:
        MissingDependencyError: If Ray is not installed; the message holds
            ``pip install -e ".[ray]"``.
    """
    return require("ray", RAY_EXTRA, feature)


def forwarded_env() -> dict[str, str]:
    """The driver's environment variables that every actor gets (:data:`FORWARDED_ENV`)."""
    return {k: v for k, v in os.environ.items()
            if k in FORWARDED_ENV or k.startswith(FORWARDED_PREFIX)}


def connect(address: str | None, *, feature: str = "--ray") -> ModuleType:
    """Connect this process to a Ray cluster (once) and return the ``ray`` module.

    Args:
        address: ``None``: Ray's own rule (``RAY_ADDRESS``, else the cluster ``ray start``
            began on this machine, else a new local one); ``"auto"``: a running cluster only;
            ``"local"``: a new one-machine cluster; ``"host:port"`` or ``ray://host:port``:
            that cluster's head. Ignored when this process is already connected.
        feature: What asked for Ray (for messages).

    Returns:
        The ``ray`` module, initialised.

    Raises:
        MissingDependencyError: If Ray is not installed.
        ConfigError: If the cluster cannot be reached (names the address).
    """
    ray = require_ray(feature)
    if ray.is_initialized():
        if address not in (None, "auto"):
            logger.info("%s: already connected to a Ray cluster; address %s not used",
                        feature, address)
        return ray
    try:
        ray.init(address=address, namespace="chexpercept", log_to_driver=True,
                 logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"{feature} {address or ''}: cannot reach a Ray cluster ({exc}); "
                          f"start one with 'ray start --head' (see the README, \"Running on a "
                          f"Ray cluster\") or give its head's address").strip() from None
    return ray


def cluster_resources() -> dict[str, float]:
    """CPU/GPU/memory totals of the connected cluster (for messages and the manifest)."""
    ray = require_ray("--ray")
    res = ray.cluster_resources()
    return {k: float(v) for k, v in res.items() if k in ("CPU", "GPU", "memory")}


class ActorLost(ProviderError):
    """An actor died more often than its restart bound allows (names it and its node)."""


class _Host:
    """Inside an actor: holds the object built by the factory and runs calls on it."""

    def __init__(self, label: str, index: int, factory: Callable[..., Any],
                 args: Sequence[Any], kwargs: Mapping[str, Any], log_level: int) -> None:
        logging.basicConfig(level=log_level,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger().setLevel(log_level)  # the driver's level, also where Ray set one
        self.label = label
        self.index = index
        self.error: BaseException | None = None
        self.obj: Any = None
        try:
            self.obj = factory(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - re-raised by ready(), with its own type
            self.error = exc

    def __repr__(self) -> str:  # Ray prefixes the actor's log lines with it
        return f"{self.label}-{self.index}"

    def ready(self) -> dict[str, Any]:
        import ray

        if self.error is not None:
            raise self.error
        return {"index": self.index, "pid": os.getpid(),
                "node": ray.util.get_node_ip_address(),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.obj, method)(*args, **kwargs)

    def apply(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(self.obj, *args, **kwargs)

    def pid(self) -> int:
        return os.getpid()


@dataclass(frozen=True)
class _Setup:
    method: str
    args: tuple[Any, ...]


def _lost_errors(ray: ModuleType) -> tuple[type[BaseException], ...]:
    """The exceptions that mean the actor's process or node is gone (not an error of ours)."""
    ex = ray.exceptions
    return (ex.RayActorError, ex.WorkerCrashedError, ex.NodeDiedError, ex.OutOfMemoryError,
            ex.ObjectLostError, ex.LocalRayletDiedError)


class ActorPool:
    """N Ray actors, each holding ``factory(*args, **kwargs)`` built inside the actor.

    Args:
        factory: A module-level callable (pickled by reference) that builds the hosted object.
        args: Its positional arguments (plain, picklable values).
        kwargs: Its keyword arguments.
        size: Number of actors (>= 1).
        label: Name in messages and in the actors' log prefix (``<label>-<index>``).
        num_cpus: CPUs each actor reserves (fractions allowed).
        num_gpus: GPUs each actor reserves (Ray sets ``CUDA_VISIBLE_DEVICES`` in the actor).
        max_restarts: Restarts per actor before :class:`ActorLost` (>= 0).
        ready_timeout_s: Seconds an actor may take to be placed and built.

    Raises:
        MissingDependencyError: If Ray is not installed.
        ConfigError: On a bad size or bound, or when an actor cannot be placed in time.
        ActorLost: When an actor keeps dying while it starts.
        Exception: Whatever the factory raised in the first actor that failed.
    """

    def __init__(self, factory: Callable[..., Any], args: Sequence[Any] = (),
                 kwargs: Mapping[str, Any] | None = None, *, size: int, label: str = "actor",
                 num_cpus: float = 1.0, num_gpus: float = 0.0,
                 max_restarts: int = DEFAULT_MAX_RESTARTS,
                 ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S) -> None:
        if size < 1:
            raise ConfigError(f"{label}s: need at least 1, got {size}")
        if max_restarts < 0:
            raise ConfigError(f"--ray-max-restarts must be >= 0, got {max_restarts}")
        self._ray = require_ray("--ray")
        self._lost = _lost_errors(self._ray)
        self._remote = self._ray.remote(_Host)
        self._init = (factory, tuple(args), dict(kwargs or {}))
        self.label = label
        self.size = size
        self.num_cpus = float(num_cpus)
        self.num_gpus = float(num_gpus)
        self.max_restarts = max_restarts
        self.ready_timeout_s = ready_timeout_s
        self.restarts = [0] * size
        self.calls = [0] * size
        self.info: list[dict[str, Any]] = [{} for _ in range(size)]
        self._setups: list[_Setup] = []
        #: During :meth:`stream`: the call that brings a restarted actor to the caller's state.
        self._restore: Callable[[int], tuple[str, tuple[Any, ...]]] | None = None
        self._env = forwarded_env()
        self._check_fits()
        self._actors: list[Any] = [self._spawn(i) for i in range(size)]
        try:
            for i in range(size):
                self._wait_ready(i)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle
    def _check_fits(self) -> None:
        """Fail at once when no node could ever hold one actor (no GPU in the cluster, ...)."""
        nodes = [n.get("Resources", {}) for n in self._ray.nodes() if n.get("Alive")]
        if not nodes:
            return
        for key, need in (("CPU", self.num_cpus), ("GPU", self.num_gpus)):
            most = max(float(n.get(key, 0.0)) for n in nodes)
            if need > most:
                raise ConfigError(
                    f"each {self.label} asks for {need:g} {key}(s), but no node of the Ray "
                    f"cluster has that many (largest: {most:g}; cluster: {cluster_resources()});"
                    f" lower the {key}s per {self.label} or add a node that has them "
                    f"(see 'ray status')")

    def _spawn(self, index: int) -> Any:
        factory, args, kwargs = self._init
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus,
                                   "max_restarts": 0, "max_concurrency": 1}
        if self._env:
            options["runtime_env"] = {"env_vars": self._env}
        return self._remote.options(**options).remote(
            self.label, index, factory, args, kwargs, logging.getLogger().getEffectiveLevel())

    def _name(self, index: int) -> str:
        info = self.info[index]
        where = f" on node {info['node']}, pid {info['pid']}" if info else ""
        return f"{self.label} {index}{where}"

    def _give_up(self, index: int, exc: BaseException) -> ActorLost:
        return ActorLost(
            f"{self._name(index)} died {self.restarts[index] + 1} time(s), more than "
            f"--ray-max-restarts {self.max_restarts} allows (last: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); the run stopped. What was "
            f"finished is kept; re-run the same command to resume (see the node's Ray logs, "
            f"/tmp/ray/session_latest/logs/worker-*.out, for why it died)")

    def _wait_ready(self, index: int) -> None:
        """Wait until actor ``index`` is placed and built; replay the setup calls."""
        ray = self._ray
        while True:
            ref = self._actors[index].ready.remote()
            waited = 0.0
            done: list[Any] = []
            while not done and waited < self.ready_timeout_s:
                step = min(60.0, self.ready_timeout_s - waited)
                done, _ = ray.wait([ref], timeout=step)
                waited += step
                if not done and waited < self.ready_timeout_s:
                    logger.warning("%s %d is not ready after %.0f s (placing it needs %g CPU "
                                   "and %g GPU free on one node; cluster %s; or its model is "
                                   "still loading)", self.label, index, waited, self.num_cpus,
                                   self.num_gpus, cluster_resources())
            if not done:
                raise ConfigError(
                    f"{self.label} {index} was not placed within {self.ready_timeout_s:.0f} s: "
                    f"each asks for {self.num_cpus:g} CPU and {self.num_gpus:g} GPU, the "
                    f"cluster has {cluster_resources()} (see 'ray status'); lower the count or "
                    f"the resources per {self.label}, or add nodes")
            try:
                self.info[index] = ray.get(ref)
                for setup in self._setups:
                    ray.get(self._actors[index].call.remote(setup.method, *setup.args))
                if self._restore is not None:  # a restart within stream()
                    method, args = self._restore(index)
                    ray.get(self._submit(index, method, tuple(args)))
                break
            except self._lost as exc:
                self._restart_or_raise(index, exc)
            except ray.exceptions.RayTaskError as exc:
                raise _cause(exc) from None
        logger.info("%s ready (GPUs %s)", self._name(index),
                    ",".join(self.info[index]["gpu_ids"]) or "none")

    def _restart_or_raise(self, index: int, exc: BaseException) -> None:
        if self.restarts[index] >= self.max_restarts:
            raise self._give_up(index, exc)
        self.restarts[index] += 1
        logger.warning("%s died (%s: %s); restarting it (%d of at most %d)", self._name(index),
                       type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "",
                       self.restarts[index], self.max_restarts)
        self._kill(self._actors[index])
        self._actors[index] = self._spawn(index)

    def _kill(self, actor: Any) -> None:
        try:
            self._ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def close(self, method: str | None = None, timeout_s: float = 10.0) -> None:
        """End every actor, after ``method()`` on each hosted object (if given).

        ``method`` (e.g. ``close``, which stops an engine's own processes) gets ``timeout_s``
        seconds on the live actors, without restarts; then every actor is killed.
        """
        actors = getattr(self, "_actors", [])
        if method is not None and actors:
            refs = [a.call.remote(method) for a in actors]
            done, _ = self._ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
            for ref in done:
                try:
                    self._ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - closing must not hide the run's error
                    logger.warning("%s: %s while closing: %s", self.label,
                                   type(exc).__name__, str(exc).splitlines()[0][:200])
        for actor in actors:
            self._kill(actor)
        self._actors = []

    # ------------------------------------------------------------------ calls
    def pid(self, index: int) -> int:
        """The process id of actor ``index`` (tests kill it)."""
        return int(self._ray.get(self._actors[index].pid.remote()))

    def setup(self, method: str, *args: Any) -> None:
        """Call ``method(*args)`` on every actor now and on every restarted actor later."""
        refs = tuple(self._ray.put(a) for a in args)  # serialised once for every actor
        self._setups.append(_Setup(method, refs))
        results = self.call(method, {i: refs for i in range(self.size)}, count=False)
        for value in results.values():
            if isinstance(value, ActorLost):
                raise value

    def call_one(self, index: int, method: str, *args: Any) -> Any:
        """``method(*args)`` on actor ``index`` (restarted as needed).

        Raises:
            ActorLost: If the actor keeps dying.
        """
        value = self.call(method, {index: args}, count=False)[index]
        if isinstance(value, ActorLost):
            raise value
        return value

    def apply_one(self, index: int, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(hosted object, *args)`` on actor ``index`` (``fn`` is module-level)."""
        return self.call_one(index, "__apply__", fn, *args)

    def _submit(self, index: int, method: str, args: tuple[Any, ...]) -> Any:
        actor = self._actors[index]
        if method == "__apply__":
            return actor.apply.remote(*args)
        return actor.call.remote(method, *args)

    def call(self, method: str, args_by_index: Mapping[int, tuple[Any, ...]], *,
             count: bool = True) -> dict[int, Any]:
        """Call ``method`` on the chosen actors in parallel, each with its own arguments.

        An actor that died (its process, its node) is restarted, its setup calls replayed,
        and its call sent again; one past its restart bound gets an :class:`ActorLost` as its
        value (returned, not raised, so the caller keeps what the others answered).

        Args:
            method: Method of the hosted object.
            args_by_index: Actor index -> positional arguments.
            count: Count the call in :attr:`calls`.

        Returns:
            Actor index -> return value (or :class:`ActorLost`), for every index asked.

        Raises:
            Exception: What the hosted object raised (its own type), for the first such actor.
        """
        ray = self._ray
        pending = {self._submit(i, method, tuple(a)): i for i, a in args_by_index.items()}
        out: dict[int, Any] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(done[0])
            try:
                out[index] = ray.get(done[0])
            except self._lost as exc:
                try:
                    self._restart_or_raise(index, exc)
                    self._wait_ready(index)
                except ActorLost as lost:
                    out[index] = lost
                    continue
                pending[self._submit(index, method, tuple(args_by_index[index]))] = index
                continue
            except ray.exceptions.RayTaskError as exc:
                raise _cause(exc) from None
            if count:
                self.calls[index] += 1
        return out

    def stream(self, method: str, next_args: Callable[[int], tuple[Any, ...] | None],
               on_result: Callable[[int, Any], Callable[[], None] | None], *, depth: int = 1,
               restore: Callable[[int], tuple[str, tuple[Any, ...]]] | None = None,
               ) -> list[ActorLost]:
        """Keep every actor busy with its own sequence of calls, no barrier between actors.

        ``next_args(i)`` gives actor ``i``'s next call (None: it has no more); each actor holds
        up to ``depth`` calls (one running, the others queued in the actor, so with ``depth``
        2 it never waits for this process between two calls; ``next_args`` is then asked
        before the previous value arrived). When a call returns, ``on_result(i, value)`` runs
        here (in the caller's thread, one at a time, in each actor's call order), the actor is
        given its next call, and then the callable ``on_result`` returned (if any) runs: work
        that the next call does not depend on (writing files) is done while the actor
        computes. When an actor's call fails, every value it returned before has been handled.

        An actor that died is restarted, its setup calls replayed, then ``restore(i)`` (if
        given) is called on it: ``(method, args)`` of a call that rebuilds the state the dead
        actor held in memory from what the caller has handled so far. Then its calls in flight
        are sent again, in order. One past its restart bound stops getting calls and the
        others go on to the end.

        A fatal error (what the hosted object raised, or what ``on_result`` or the callable it
        returned raised) stops the stream: no call is sent after it, the calls in flight are
        awaited and their values handled as usual (an error they raise then is logged), and the
        first error is raised. A call already queued behind the failed one still runs, so with
        ``depth`` > 1 the hosted object should refuse work once it raised.

        Returns:
            The :class:`ActorLost` of every actor that was given up (empty when none was).

        Raises:
            ConfigError: If ``depth`` < 1.
            Exception: The first fatal error.
        """
        if depth < 1:
            raise ConfigError(f"stream depth must be >= 1, got {depth}")
        ray = self._ray
        queues: list[deque[tuple[Any, tuple[Any, ...]]]] = [deque() for _ in range(self.size)]
        lost: list[ActorLost] = []
        error: list[BaseException] = []

        def top_up(index: int) -> None:
            queue = queues[index]
            while not error and len(queue) < depth:
                args = next_args(index)
                if args is None:
                    return
                queue.append((self._submit(index, method, tuple(args)), tuple(args)))

        def fail(exc: BaseException) -> None:
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            if not error:
                error.append(exc)
                logger.warning("%ss: stopping (%s: %s); awaiting the %d call(s) in flight",
                               self.label, type(exc).__name__, first, sum(map(len, queues)))
            else:
                logger.warning("%ss: %s while stopping: %s", self.label, type(exc).__name__,
                               first)

        self._restore = restore
        try:
            for index in range(self.size):
                top_up(index)
            while heads := {q[0][0]: i for i, q in enumerate(queues) if q}:
                done, _ = ray.wait(list(heads), num_returns=1)
                index = heads[done[0]]
                queue = queues[index]
                ref, args = queue.popleft()
                try:
                    value = ray.get(ref)
                except self._lost as exc:
                    # the calls queued behind it died with the actor; none of them ran
                    again = [args, *(a for _, a in queue)]
                    queue.clear()
                    if error:  # stopping: nothing is sent again
                        logger.warning("%s died while stopping; %d call(s) abandoned",
                                       self._name(index), len(again))
                        continue
                    try:
                        self._restart_or_raise(index, exc)
                        self._wait_ready(index)
                    except ActorLost as gone:
                        lost.append(gone)
                        continue
                    except Exception as err:  # noqa: BLE001 - what restore() raised
                        fail(err)
                        continue
                    queue.extend((self._submit(index, method, a), a) for a in again)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    fail(_cause(exc))
                    continue
                self.calls[index] += 1
                try:
                    after = on_result(index, value)
                    top_up(index)
                    if after is not None:
                        after()
                except Exception as exc:  # noqa: BLE001 - raised below, after the drain
                    fail(exc)
        finally:
            self._restore = None
        if error:
            raise error[0]
        return lost

    def map_ordered(self, method: str, items: Iterable[Any]) -> Iterator[Any]:
        """``method(item)`` for every item, spread over the actors; yields in item order.

        Each actor has at most two items in flight (one running, one queued), so results
        stream back as they finish while the order of the yielded values is the items' order.

        Raises:
            ActorLost: If an actor keeps dying.
            Exception: What the hosted object raised.
        """
        ray = self._ray
        items = list(items)
        queue = iter(enumerate(items))
        in_flight: dict[Any, tuple[int, int]] = {}  # ref -> (item position, actor)
        ready: dict[int, Any] = {}
        next_out = 0

        def feed(actor: int) -> None:
            nxt = next(queue, None)
            if nxt is not None:
                pos, item = nxt
                in_flight[self._submit(actor, method, (item,))] = (pos, actor)

        for actor in range(self.size):
            feed(actor)
            feed(actor)
        while in_flight:
            done, _ = ray.wait(list(in_flight), num_returns=1)
            pos, actor = in_flight.pop(done[0])
            try:
                ready[pos] = ray.get(done[0])
                self.calls[actor] += 1
            except self._lost as exc:
                # the actor's other queued item died with it: send both again
                lost = {r: p for r, (p, a) in in_flight.items() if a == actor}
                for ref in lost:
                    in_flight.pop(ref)
                self._restart_or_raise(actor, exc)
                self._wait_ready(actor)
                for p in sorted([pos, *lost.values()]):
                    in_flight[self._submit(actor, method, (items[p],))] = (p, actor)
                continue
            except ray.exceptions.RayTaskError as exc:
                raise _cause(exc) from None
            feed(actor)
            while next_out in ready:
                yield ready.pop(next_out)
                next_out += 1


def _cause(exc: Any) -> BaseException:
    """The exception a remote call raised, with its own type (Ray wraps it)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


@dataclass(frozen=True)
class RayWorkers:
    """Per-item work (Stage 00 ROSALIA masks, Stage 01 deformation) on Ray actors.

    Attributes:
        address: Ray cluster address (see :func:`connect`).
        workers: Number of actors (each loads its model once), >= 1.
        gpus_per_worker: GPUs each actor reserves; None: the stage's default (1 for a model
            on CUDA, else 0).
        cpus_per_worker: CPUs each actor reserves.
        max_restarts: Restarts per actor before the run stops (>= 0).
    """

    address: str | None = None
    workers: int = 1
    gpus_per_worker: float | None = None
    cpus_per_worker: float = 1.0
    max_restarts: int = DEFAULT_MAX_RESTARTS


def map_on_ray(factory: Callable[..., Any], args: Sequence[Any], method: str,
               items: Sequence[Any], ray: RayWorkers, *, label: str,
               default_gpus: float | None = 0.0) -> Iterator[Any]:
    """``factory(*args).method(item)`` for every item on ``ray.workers`` actors, in item order.

    Connects to the cluster, starts the actors (each builds one object, e.g. loads a model
    once), streams the results back in item order and ends the actors when the iterator is
    exhausted or closed. GPUs per actor: ``ray.gpus_per_worker``, else ``default_gpus``
    (None: 1 when the cluster has GPUs, else 0).

    Raises:
        MissingDependencyError: If Ray is not installed.
        ConfigError: On bad settings or an actor that cannot be placed.
        ActorLost: If an actor keeps dying.
    """
    if ray.workers < 1:
        raise ConfigError(f"--ray-workers must be >= 1, got {ray.workers}")
    connect(ray.address)
    gpus = default_gpus if ray.gpus_per_worker is None else ray.gpus_per_worker
    if gpus is None:
        gpus = 1.0 if cluster_resources().get("GPU", 0.0) > 0 else 0.0
    pool = ActorPool(factory, args, size=min(ray.workers, max(1, len(items))), label=label,
                     num_cpus=ray.cpus_per_worker, num_gpus=gpus,
                     max_restarts=ray.max_restarts)
    try:
        yield from pool.map_ordered(method, items)
    finally:
        pool.close()
