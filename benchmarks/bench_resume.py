"""Benchmark of Stage 03 kill-and-resume: requests re-issued after a SIGKILL at 50%.

Builds a synthetic benchmark bundle in a temporary folder (``--cases`` cases over the three
paths and three lesions, as in ``tests/evaluation/stage03_bundle.py``), then for each runner:

- ``sync``: the stage-synchronous runner (``runner.run_evaluation``, one ``generate`` call per
  turn index; vLLM / transformers) with a fake batch model (``--batch-latency-ms`` per call);
- ``async``: the per-case pipeline runner (``async_runner.run_evaluation_async``; API
  providers) with a fake async model (``--latency-ms`` per request, +-50% jitter) at
  ``--concurrency``;

runs the evaluation in a child process, SIGKILLs it as soon as ``records.jsonl`` holds half the
turns (sync: once the next batch is in flight, i.e. inside ``generate``, where a batched run
spends its time), re-runs it to the end, and counts the requests issued in both runs. The fake
models log every request when it is *issued*, so the count includes requests that were in
flight at the kill. Targets (docs/design.md, "Resume"): async <= concurrency
re-issued; sync <= one turn batch. It also checks that every turn has exactly one record. No
assertion on timings.

Usage::

    python benchmarks/bench_resume.py [--cases 300] [--concurrency 16] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import logging
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.files import read_jsonl
from chexpercept.layouts import records_path, repo_root
from utils.llm.base import ChatModel, Completion, TurnRequest, Usage

ROOT = repo_root()
LESION_CYCLE = ("effusion", "opacity", "cardiomegaly")
PATHS = ("revision_required", "revision_free", "lesion_free")


def _bundle_module():
    spec = importlib.util.spec_from_file_location(
        "stage03_bundle", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases(n: int) -> dict[str, str]:
    out = {}
    for i in range(n):
        lesion, path = LESION_CYCLE[(i // 3) % 3], PATHS[i % 3]
        kind = "negative" if path == "lesion_free" else "positive"
        out[f"{lesion}_s{50_000_000 + i}_{kind}_0"] = path
    return out


def _answer(request: TurnRequest, gt: Any) -> str:
    meta = request.meta
    n = meta["num_options"]
    if hashlib.sha256(request.request_id.encode()).digest()[0] % 3:
        choice = gt if isinstance(gt, list) else [gt]
    elif meta["multi_select"]:
        choice = [1] if gt != [1] else [2]
    else:
        choice = [gt % n + 1]
    return "Answer: " + ", ".join(map(str, choice))


class _FakeModel(ChatModel):
    """Fake provider that logs each request id when it is issued."""

    provider = "benchfake"

    needs_answer_key = True  # told the answers like the oracle baseline

    def __init__(self, log: Path, batch_latency_s: float, latency_s: float) -> None:
        super().__init__("fake")
        self.answers: dict[str, Any] = {}
        self._log = open(log, "a", encoding="utf-8")  # noqa: SIM115 - process lifetime
        self.batch_latency_s = batch_latency_s
        self.latency_s = latency_s

    def _issue(self, requests: list[TurnRequest]) -> None:
        self._log.write(json.dumps([r.request_id for r in requests]) + "\n")
        self._log.flush()  # in the OS page cache: survives SIGKILL

    def set_answer_key(self, answers: Any) -> None:
        self.answers = dict(answers)

    def _completion(self, request: TurnRequest) -> Completion:
        gt = self.answers[request.request_id]
        return Completion(text=_answer(request, list(gt) if isinstance(gt, tuple) else gt),
                          finish_reason="stop",
                          usage=Usage(input_tokens=100, output_tokens=5))

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        self._issue(requests)
        time.sleep(self.batch_latency_s)
        return [self._completion(r) for r in requests]


class _AsyncFakeModel(_FakeModel):
    supports_async = True

    async def agenerate(self, request: TurnRequest) -> Completion:
        self._issue([request])
        jitter = hashlib.sha256(request.request_id.encode()).digest()[1] / 255  # [0, 1]
        await asyncio.sleep(self.latency_s * (0.5 + jitter))
        return self._completion(request)


def child(args: argparse.Namespace) -> int:
    """Run (or resume) one evaluation with a fake model (killed by the parent)."""
    bundle = load_bundle(args.bench)
    cases = validate_bundle(bundle)
    settings = EvalSettings("benchfake", "fake", oracle_setting="implicit", save_every=50)
    if args.child == "sync":
        model = _FakeModel(Path(args.issued_log), args.batch_latency_ms / 1000, 0.0)
        run_evaluation(bundle, cases, model, settings, args.run_dir)
    else:
        model = _AsyncFakeModel(Path(args.issued_log), 0.0, args.latency_ms / 1000)
        run_evaluation_async(bundle, cases, model, settings, args.run_dir,
                             concurrency=args.concurrency)
    return 0


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def _measure(mode: str, bench: Path, work: Path, total: int, args: argparse.Namespace) -> dict:
    run_dir, log = work / f"run_{mode}", work / f"issued_{mode}.jsonl"
    cmd = [sys.executable, __file__, "--child", mode, "--bench", str(bench), "--run-dir",
           str(run_dir), "--issued-log", str(log), "--concurrency", str(args.concurrency),
           "--latency-ms", str(args.latency_ms), "--batch-latency-ms",
           str(args.batch_latency_ms)]
    records = records_path(run_dir)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while proc.poll() is None and _lines(records) < total // 2:
        time.sleep(0.005)
    if mode == "sync":  # kill inside generate (where a batched run spends its time)
        issued = _lines(log)
        while proc.poll() is None and _lines(log) == issued:
            time.sleep(0.005)
    if proc.poll() is not None:
        raise RuntimeError(f"{mode}: the run ended before the kill: "
                           f"{proc.stderr.read().decode()[-2000:]}")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    at_kill = _lines(records)
    batches_first = [json.loads(line) for line in log.read_text().splitlines()]
    first_ids = [i for batch in batches_first for i in batch]
    second = subprocess.run(cmd, capture_output=True, text=True)
    if second.returncode != 0:
        raise RuntimeError(f"{mode}: resume failed: {second.stderr[-2000:]}")
    wall = time.perf_counter() - started
    all_ids = [i for line in log.read_text().splitlines() for i in json.loads(line)]
    issued = Counter(all_ids)
    recs = read_jsonl(records)
    unique_records = len({(r["key_id"], r["turn"]) for r in recs})
    return {"mode": mode, "turns": total, "recorded_at_kill": at_kill,
            "issued_before_kill": len(first_ids), "issued_total": len(all_ids),
            "reissued": sum(n - 1 for n in issued.values()),
            "last_batch_at_kill": len(batches_first[-1]) if mode == "sync" else None,
            "records": len(recs), "unique_records": unique_records,
            "all_turns_once": len(recs) == unique_records == total == len(issued),
            "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--child``, one evaluation); returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300,
                        help="Synthetic cases (default: %(default)s).")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="Async runner concurrency (default: %(default)s).")
    parser.add_argument("--latency-ms", type=float, default=20.0,
                        help="Async fake model latency per request (default: %(default)s).")
    parser.add_argument("--batch-latency-ms", type=float, default=200.0,
                        help="Sync fake model latency per generate call "
                             "(default: %(default)s).")
    parser.add_argument("--modes", default="sync,async",
                        help="Runners to measure, comma-separated (default: %(default)s).")
    parser.add_argument("--keep", default=None,
                        help="Work folder to keep (default: a temporary folder).")
    parser.add_argument("--child", choices=("sync", "async"), default=None,
                        help=argparse.SUPPRESS)
    parser.add_argument("--bench", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--issued-log", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    logging.disable(logging.WARNING)  # the 8x8 synthetic images are not 1024x1024

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        bench = _bundle_module().write_bundle(work / "bench", cases=_cases(args.cases))
        bundle = load_bundle(bench)
        total = sum(len(c.turns) for c in validate_bundle(bundle))
        largest_batch = len(bundle.items)  # turn 1 (detection) of every case
        print(f"resume: {args.cases} cases, {total} turns; kill (SIGKILL) at "
              f"{total // 2} recorded turns")
        for mode in args.modes.split(","):
            r = _measure(mode, bench, work, total, args)
            if mode == "sync":
                bound, what = r["last_batch_at_kill"], "the turn batch in flight"
            else:
                bound, what = args.concurrency, "concurrency"
            print(f"{mode}: recorded at kill {r['recorded_at_kill']}/{total}; issued before "
                  f"kill {r['issued_before_kill']}; re-issued {r['reissued']} "
                  f"(bound: {what} = {bound}; ratio {r['reissued'] / max(bound, 1):.2f}"
                  + (f"; largest turn batch {largest_batch}" if mode == "sync" else "")
                  + f"); every turn recorded once: {r['all_turns_once']}; "
                    f"wall {r['wall_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
