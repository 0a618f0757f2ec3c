"""Stage 03 fault benchmark: transient faults plus a server outage; nothing lost, nothing scored.

Builds the synthetic bundle of ``bench_api_throughput.py`` (``--cases`` cases, about 4.7 turns
a case), starts the loopback OpenAI-compatible server (``tests/llm/loopback.py``) in a child
process and runs the ``openai`` provider (real SDK, real HTTP) through the async runner at
``--concurrency``:

1. fault-free: the reference turns/s;
2. ``--fault-rate`` injected 429 / 500 on every request, and once ``--outage-at`` of the turns
   are recorded the server process is killed (connections refused) and started again on the
   same port ``--outage`` seconds later;
3. the same command again (a re-run), which asks the turns that got no answer.

Figures (docs/engines.md, "Faults"): turns lost (planned turns with neither a record nor a
fault entry; target 0), turns that got no answer in run 2 (a fault, logged to ``faults.jsonl``,
its case left unfinished), unfinished cases after the re-run (target 0), records whose status
is not ``ok`` (every loopback answer is a valid ``Answer: 1``, so any other status would be a
fault scored as an answer; target 0), and the throughput of run 2 (+ the re-run) relative to
run 1. Prints the figures; asserts nothing. About 2 minutes with the defaults on 2 cores.

Usage::

    python benchmarks/bench_faults.py [--cases 2000] [--concurrency 64] [--latency 0.2]
        [--fault-rate 0.05] [--outage 20] [--outage-at 0.5] [--max-retries 6]
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_api_throughput import LOOPBACK, _count_lines, write_bundle

from chexpercept.errors import ProviderError
from chexpercept.evaluation import EvalSettings, load_bundle, validate_bundle
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.layouts import all_results_path, faults_path, records_path
from utils.llm.openai_provider import OpenAIChatModel


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server(port: int, latency_s: float, fault_rate: float, seed: int
                  ) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, str(LOOPBACK), "--latency", str(latency_s), "--fault-rate",
         str(fault_rate), "--retry-after", "0.05", "--port", str(port), "--seed", str(seed)],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # "PORT <n>": listening
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=10)


def _run(bundle_dir: Path, run_dir: Path, base_url: str, concurrency: int,
         max_retries: int) -> tuple[float, Any, str | None]:
    """One invocation; ``(wall s, summary or None, the error that stopped it or None)``."""
    bundle = load_bundle(bundle_dir)
    cases = validate_bundle(bundle)
    model = OpenAIChatModel("gpt-5.4", base_url=base_url, env={}, max_retries=max_retries,
                            concurrency=concurrency)
    settings = EvalSettings("openai", "gpt-5.4", save_every=50)
    started = time.perf_counter()
    try:
        summary = run_evaluation_async(bundle, cases, model, settings, run_dir,
                                       concurrency=concurrency)
        error = None
    except ProviderError as exc:  # e.g. too many faults in a row during the outage
        summary, error = None, str(exc)
    finally:
        model.close()
    return time.perf_counter() - started, summary, error


def _outage(records: Path, at_turns: int, port: int, proc: list[subprocess.Popen],
            outage_s: float, latency_s: float, fault_rate: float, done: threading.Event,
            log: dict[str, float]) -> None:
    """Kill the server once ``at_turns`` records exist; start it again ``outage_s`` later."""
    while _count_lines(records) < at_turns and not done.is_set():
        time.sleep(0.05)
    if done.is_set():
        return
    log["killed_at_records"] = _count_lines(records)
    _stop(proc[0])
    time.sleep(outage_s)
    proc[0] = _start_server(port, latency_s, fault_rate, seed=1)
    log["restarted"] = 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per request")
    parser.add_argument("--fault-rate", type=float, default=0.05)
    parser.add_argument("--outage", type=float, default=20.0, help="outage length in s")
    parser.add_argument("--outage-at", type=float, default=0.5,
                        help="share of the turns recorded when the outage starts")
    parser.add_argument("--max-retries", type=int, default=6)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)

    with tempfile.TemporaryDirectory(prefix="chexpercept-faults-") as tmp:
        root = Path(tmp)
        bundle_dir = write_bundle(root / "bench", args.cases)
        total = sum(len(c.turns) for c in validate_bundle(load_bundle(bundle_dir)))

        port = _free_port()
        proc = [_start_server(port, args.latency, 0.0, seed=0)]
        base_url = f"http://127.0.0.1:{port}/v1"
        try:
            wall_ref, ref, _ = _run(bundle_dir, root / "ref", base_url, args.concurrency,
                                    args.max_retries)
        finally:
            _stop(proc[0])
        reference = all_results_path(root / "ref").read_bytes()

        proc = [_start_server(port, args.latency, args.fault_rate, seed=0)]
        run_dir = root / "run"
        done, log = threading.Event(), {}
        killer = threading.Thread(target=_outage, args=(
            records_path(run_dir), int(total * args.outage_at), port, proc, args.outage,
            args.latency, args.fault_rate, done, log), daemon=True)
        killer.start()
        try:
            wall_1, first, stopped = _run(bundle_dir, run_dir, base_url, args.concurrency,
                                          args.max_retries)
            done.set()
            killer.join()
            faults_1 = _count_lines(faults_path(run_dir))
            records_1 = _count_lines(records_path(run_dir))
            wall_2, second, stopped_2 = _run(bundle_dir, run_dir, base_url, args.concurrency,
                                             args.max_retries)
        finally:
            done.set()
            _stop(proc[0])

        records = [json.loads(x) for x in records_path(run_dir).read_text().splitlines()]
        recorded = {(r["key_id"], r["turn"]) for r in records}
        faulted = [json.loads(x) for x in faults_path(run_dir).read_text().splitlines()] \
            if faults_path(run_dir).exists() else []
        fault_keys = {(f["key_id"], f["turn"]) for f in faulted}
        identical = all_results_path(run_dir).read_bytes() == reference

    rate_ref = total / wall_ref
    print(f"cases {args.cases}, planned turns {total}, concurrency {args.concurrency}, latency "
          f"{args.latency} s, fault rate {args.fault_rate:.0%}, outage {args.outage:g} s at "
          f"{log.get('killed_at_records', 0):.0f} records, max retries {args.max_retries}")
    print(f"fault-free: {wall_ref:.1f} s, {rate_ref:.1f} turns/s "
          f"(unfinished {len(ref.unfinished) if ref else 'n/a'})")
    print(f"with faults, run 1: {wall_1:.1f} s, {records_1} turns recorded, {faults_1} turn(s) "
          f"got no answer (faults.jsonl; their cases left unfinished)"
          + (f"; stopped: {stopped[:160]}" if stopped else ""))
    print(f"re-run: {wall_2:.1f} s, unfinished cases after it: "
          f"{len(second.unfinished) if second else 'n/a'}"
          + (f"; stopped: {stopped_2[:160]}" if stopped_2 else ""))
    lost = total - len(recorded)
    not_ok = sum(r["status"] != "ok" for r in records)
    print(f"turns lost (no record after the re-run): {lost} (target 0)")
    print(f"faults recorded as answers (records with a status other than ok): {not_ok} "
          f"(target 0); faulted turns answered by the re-run: {len(fault_keys & recorded)}"
          f"/{len(fault_keys)}")
    print(f"all_results.json identical to the fault-free run: {identical}")
    print(f"throughput with faults: run 1 {records_1 / wall_1:.1f} turns/s = "
          f"{records_1 / wall_1 / rate_ref:.2f} x fault-free; run 1 + re-run "
          f"{total / (wall_1 + wall_2):.1f} turns/s = "
          f"{total / (wall_1 + wall_2) / rate_ref:.2f} x (the outage alone is "
          f"{args.outage / (wall_ref + args.outage):.0%} of a fault-free run plus the outage)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
