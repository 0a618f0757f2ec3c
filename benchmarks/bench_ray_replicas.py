"""Stage 03 on Ray: throughput over 1, 2 and 4 replicas of a latency-bound stand-in engine.

The stand-in (:class:`LatencyModel`, a plugin ``ChatModel``) costs what a GPU engine's batched
call costs: a fixed time per ``generate`` call plus a time per request, spent sleeping (so four
replicas fit on two cores, as four GPUs would). On a local Ray cluster (started here) it runs
``--cases`` cases (the synthetic bundle of ``bench_api_throughput.py``, about 4.7 turns a case)
through ``evaluate(..., ray=RayReplicas(replicas=N))`` for each N in ``--replicas`` and prints:

1. turns/s of the turn loop (the run without the replicas' start-up, which includes handing
   each replica its cases) per replica count, the loop's engine-bound floor (the slowest
   replica's summed engine time, from the records), and the scaling efficiency
   ``throughput(N) / (N x throughput(1))`` (docs/design.md, "Ray replicas", target >= 0.92 at
   4 replicas);
2. the overhead of the Ray path at one replica over the direct provider in this process
   (turn-loop time, target <= 5 %), and the replicas' start-up time;
3. the Ray path's own cost per request: one turn batch of 2,000 first turns (prepared, asked of
   a zero-latency engine, scored) in a replica's actor, records returned, vs the same batch in
   this process (minimum of 10).

Every replicated run's ``all_results.json`` is also compared with the direct run's (they must
be identical). Prints the figures; asserts nothing. About 2 minutes with the defaults.

Usage::

    python benchmarks/bench_ray_replicas.py [--cases 2000] [--replicas 1,2,4]
        [--fixed-ms 50] [--per-request-ms 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from chexpercept.evaluation.api import evaluate
from chexpercept.evaluation.replicas import RayReplicas
from chexpercept.files import read_jsonl
from chexpercept.layouts import records_path
from utils.llm.base import ChatModel, Completion, TurnRequest

HERE = Path(__file__).resolve().parent
PLUGIN = "bench_ray_replicas:LatencyModel"


class LatencyModel(ChatModel):
    """A batched engine stand-in: each call sleeps ``fixed_ms + per_request_ms x n`` ms.

    Answers ``Answer: 1`` to every request (the answers do not matter here, only that they are
    the same on every replica count).
    """

    provider = "latency"

    def __init__(self, model: str, *, fixed_ms: float = 50.0, per_request_ms: float = 2.0,
                 **options: Any) -> None:
        super().__init__(model)
        self.fixed_s = fixed_ms / 1000.0
        self.per_request_s = per_request_ms / 1000.0

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "fixed_s": self.fixed_s,
                "per_request_s": self.per_request_s}

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        time.sleep(self.fixed_s + self.per_request_s * len(requests))
        return [Completion(text="Answer: 1", finish_reason="stop") for _ in requests]


class LoopTimer:
    """A ``progress`` wrapper that times the turn loop (first turn index to the last)."""

    def __init__(self) -> None:
        self.start = self.end = 0.0

    def __call__(self, items: Iterable[int], **_: Any) -> Iterator[int]:
        self.start = time.perf_counter()
        yield from items
        self.end = time.perf_counter()

    @property
    def seconds(self) -> float:
        return self.end - self.start


def _load_bundle_writer():
    path = HERE / "bench_api_throughput.py"
    spec = importlib.util.spec_from_file_location("bench_api_throughput", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_bundle


def engine_bound_s(summary, options: dict[str, Any]) -> float:
    """The turn loop's floor: the slowest replica's summed engine time (from the records)."""
    counts: Counter = Counter()
    for rec in read_jsonl(records_path(summary.run_dir)):
        counts[(rec.get("replica", 0), rec["turn_index"])] += 1
    per_replica: Counter = Counter()
    for (replica, _), n in counts.items():
        per_replica[replica] += (options["fixed_ms"] + options["per_request_ms"] * n) / 1000
    return max(per_replica.values())


def _run(bench: Path, out: Path, replicas: int | None, options: dict[str, Any]):
    timer = LoopTimer()
    ray = None if replicas is None else RayReplicas(replicas=replicas, cpus_per_replica=0.25)
    started = time.perf_counter()
    summary = evaluate(bench, provider=PLUGIN, model="standin", output_path=out,
                       oracle_setting="implicit", save_every=10 ** 6, progress=timer, ray=ray,
                       provider_options=options)
    total = time.perf_counter() - started
    return summary, timer.seconds, total


def round_trip_us(bench: Path, n: int = 2000, repeats: int = 10) -> tuple[float, float]:
    """Microseconds per turn of one replica batch vs the same batch here (zero-latency engine).

    The first turn of ``n`` cases (:meth:`ReplicaWorker.step`: prepared, asked, scored),
    ``repeats`` times each way, the cases loaded afresh before each; the minimum of each.
    """
    from chexpercept.evaluation import EvalSettings, load_bundle, select_key_ids, validate_bundle
    from chexpercept.evaluation.replicas import ReplicaWorker, light_case
    from utils.ray_pool import ActorPool

    bundle = load_bundle(bench)
    cases = [light_case(c) for c in validate_bundle(bundle, select_key_ids(bundle, limit=n))]
    load = (cases, [[] for _ in cases], EvalSettings(provider=PLUGIN, model="standin"), 0)
    options = {"fixed_ms": 0.0, "per_request_ms": 0.0}
    local = ReplicaWorker(PLUGIN, "standin", **options)
    pool = ActorPool(ReplicaWorker, (PLUGIN, "standin"), options, size=1, num_cpus=0.25)
    here, there = [], []
    try:
        for _ in range(repeats):
            local.load(*load)
            started = time.perf_counter()
            local.step(0)
            here.append(time.perf_counter() - started)
            pool.call("load", {0: load}, count=False)
            started = time.perf_counter()
            pool.call("step", {0: (0,)})
            there.append(time.perf_counter() - started)
    finally:
        pool.close()
    return 1e6 * min(here) / len(cases), 1e6 * min(there) / len(cases)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument("--fixed-ms", type=float, default=50.0)
    parser.add_argument("--per-request-ms", type=float, default=2.0)
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.replicas.split(",")]
    logging.basicConfig(level=logging.WARNING)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)  # replicas import the plugin
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import ray

    options = {"fixed_ms": args.fixed_ms, "per_request_ms": args.per_request_ms}
    with tempfile.TemporaryDirectory(prefix="bench_ray_") as tmp:
        root = Path(tmp)
        bench = _load_bundle_writer()(root / "bench", args.cases)
        ray.init(num_cpus=max(4, max(counts)), object_store_memory=200 * 1024 ** 2,
                 include_dashboard=False, log_to_driver=False, _temp_dir=str(root / "ray"))
        try:
            direct, direct_loop, direct_total = _run(bench, root / "direct", None, options)
            turns = direct.turns_requested
            print(f"{args.cases} cases, {turns} turns; stand-in engine: "
                  f"{args.fixed_ms:g} ms per call + {args.per_request_ms:g} ms per request")
            print(f"direct provider (no Ray): turn loop {direct_loop:.2f} s "
                  f"({turns / direct_loop:.0f} turns/s), whole run {direct_total:.2f} s")
            floor = engine_bound_s(direct, options)
            print(f"  (engine-bound floor of the turn loop: {floor:.2f} s)")
            reference = direct.all_results_path.read_bytes()
            rows = []
            for n in counts:
                summary, loop_s, total_s = _run(bench, root / f"ray{n}", n, options)
                same = summary.all_results_path.read_bytes() == reference
                rows.append((n, loop_s, total_s, summary.turns_requested / loop_s, same,
                             engine_bound_s(summary, options)))
            base = next((r[3] for r in rows if r[0] == 1), None)
            print(f"{'replicas':>8} {'loop s':>8} {'floor s':>8} {'run s':>8} {'start s':>8} "
                  f"{'turns/s':>9} {'efficiency':>10}  results")
            for n, loop_s, total_s, tput, same, floor_s in rows:
                eff = f"{tput / (n * base):.3f}" if base else "n/a"
                print(f"{n:>8} {loop_s:>8.2f} {floor_s:>8.2f} {total_s:>8.2f} "
                      f"{total_s - loop_s:>8.2f} {tput:>9.0f} {eff:>10}  "
                      f"{'identical' if same else 'DIFFERENT'}")
            if base:
                one = next(r for r in rows if r[0] == 1)
                print(f"Ray overhead at 1 replica over the direct provider: turn loop "
                      f"{100 * (one[1] / direct_loop - 1):+.1f} % (target <= 5 %); "
                      f"start-up {one[2] - one[1]:.2f} s vs {direct_total - direct_loop:.2f} s")
            if 4 in counts and base:
                four = next(r for r in rows if r[0] == 4)
                print(f"scaling efficiency at 4 replicas: {four[3] / (4 * base):.3f} "
                      f"(target >= 0.92)")
            local_us, ray_us = round_trip_us(bench, min(args.cases, 2000))
            print(f"one batch of {min(args.cases, 2000)} first turns: {local_us:.1f} us per "
                  f"turn in this process, {ray_us:.1f} us in a replica, records returned (min "
                  f"of 10): the Ray path's own cost is {ray_us - local_us:.0f} us per turn")
        finally:
            ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
