"""Stage 03 API benchmark: throughput vs the Little's-law ceiling, injected faults, kill/resume.

Builds, in a temporary folder, a synthetic benchmark bundle (``chexpercept.json`` + one
1024x1024 PNG hard-linked for every image) of ``--cases`` cases with full dialogue paths
(revision-required 9 turns, revision-free 6, lesion-free 1, cardiomegaly 5/2/1; about 4.7 turns
a case), starts the loopback OpenAI-compatible server of ``tests/llm/loopback.py`` in a child
process (one asyncio event loop, so it neither shares our GIL nor adds thread hand-offs to the
latency) with ``--latency`` seconds per request, and runs the ``openai`` provider (real SDK, real
HTTP) through the async runner at ``--concurrency``:

1. no faults: achieved requests/s over the Little's-law ceiling ``concurrency / latency``
   (64 / 0.2 s = 320/s; docs/design.md, "Concurrency", target >= 0.9), and side by side
   the same number of requests through the bare openai SDK (same clients, one fixed body): the
   floor the SDK sets on this machine, since at 320 requests/s one Python process spends most
   of a core in the SDK and httpx2;
2. ``--fault-rate`` injected 429 (Retry-After 0.05 s) / 500: completed turns/s over the same
   ceiling (docs/design.md, "Retries", target >= 0.8) and lost turns (target 0);
3. kill and resume: ``00_eval.py`` in a child process, SIGKILL once half the turns are
   recorded, then the same command again; requests re-issued = requests served - turns
   (docs/design.md, "Resume", target <= concurrency).

Prints the figures; asserts nothing. Runs in < 3 minutes with the defaults on 2 cores.

Usage::

    python benchmarks/bench_api_throughput.py [--cases 2000] [--concurrency 64] [--latency 0.2]
        [--fault-rate 0.05] [--skip-kill] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from chexpercept.evaluation import EvalSettings, load_bundle, validate_bundle
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.layouts import repo_root
from utils.llm.openai_provider import OpenAIChatModel

LOOPBACK = repo_root() / "tests" / "llm" / "loopback.py"
EVAL = repo_root() / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"
COLOURS = ["red", "orange", "yellow", "green"]
ORDINALS = ["1st", "2nd", "3rd", "4th"]
PATHS = ("revision_required", "revision_free", "lesion_free")
LESIONS = ("effusion", "cardiomegaly", "opacity")


# -- synthetic bundle (same shapes as tests/evaluation/stage03_bundle.py) -------------------
def _q(text: str, options: list[str]) -> str:
    return text + "\n\nOptions:\n" + "\n".join(f"({i}) {o}" for i, o in enumerate(options, 1))


def _mc(text: str, options: list[str], answer_index: int, **extra: Any) -> dict[str, Any]:
    return {"question": _q(text, options), "answer_options": options,
            "answer": options[answer_index - 1], "answer_index": answer_index, **extra}


def _points(kind: str, gt: list[int]) -> dict[str, Any]:
    options = [{"point": [100 * (i + 1), 200], "color": COLOURS[i]} for i in range(3)]
    options.append({"point": None, "color": "None"})
    texts = [f"{o['color']} point" if o["point"] else "None" for o in options]
    return {"question": _q(f"Which point(s) should the mask be {kind} toward?", texts),
            "answer_options": options, "answer": ", ".join(texts[i - 1] for i in gt),
            "answer_index": gt}


def _attributes() -> dict[str, Any]:
    loc = ["the right costophrenic angle", "the left costophrenic angle",
           "the intersection of the right lateral lung and the right mid zone lung",
           "None of the above (options 1-3)"]
    return {
        "distribution": _mc("In how many zones is the lesion present?",
                            ["1 zone", "2 zones", "3 zones", "4 zones or more"], 2,
                            answer_zones=["right mid zone lung", "right lower zone lung"]),
        "location": {"question": _q("Where is the lesion? Select all that apply.", loc),
                     "answer_options": loc, "answer": loc[0], "answer_index": [1],
                     "answer_zones": [loc[0]]},
        "severity/measurement": _mc(
            "What proportion of the right lung does the lesion occupy?",
            ["Less than 1/3 of the right lung area",
             "1/3 or more but less than 2/3 of the right lung area",
             "2/3 or more of the right lung area"], 1, overlap_ratio=0.2,
            selected_lung="right lung"),
        "comparison": _mc("Compare the lesion sizes in both lungs.",
                          ["Both lesions are similar in size.",
                           "The left lung lesion is larger than the right lung lesion.",
                           "The right lung lesion is larger than the left lung lesion.",
                           "The lesion is present in only one lung (left or right)."], 4,
                          left_size=0, right_size=5000, left_has_overlap=False,
                          right_has_overlap=True),
    }


def _item(lesion: str, path: str, pair_id: str) -> dict[str, Any]:
    item: dict[str, Any] = {"detection_qa": _mc(
        f"Is there any finding suggestive of {lesion}?", ["Yes", "No"],
        2 if path == "lesion_free" else 1)}
    if path != "lesion_free":
        contour: dict[str, Any] = {
            "no_deformation": path == "revision_free",
            "initial_context": "Colored points mark possible adjustment locations.",
            "contour_eval_qa": _mc("Does the mask need a major revision?", ["Yes", "No"],
                                   2 if path == "revision_free" else 1,
                                   relative_path="contour_eval_qa/xray_with_mask.png")}
        if path == "revision_required":
            contour["contour_revision_qa_expansion"] = _points("expanded", [2])
            contour["contour_revision_qa_contraction"] = _points("contracted", [1])
            options = [{"type": "true" if i == 2 else "fake", "masks": [f"mask_{i}"],
                        "relative_path": f"option_{i}.png"} for i in range(1, 5)]
            contour["contour_revision_qa_revision_result"] = {
                "question": _q("Which revised mask is correct?", [f"{o} mask" for o in ORDINALS]),
                "answer_options": options, "answer": "2nd mask", "answer_index": 2}
        item["contour_qa"] = contour
        item["attribute_extraction_qa"] = None if lesion == "cardiomegaly" else _attributes()
    item["pair_id"] = pair_id
    item["dicom_id"] = "dicom_" + pair_id.split("_")[0]
    return item


def _image_relpaths(item: dict[str, Any]) -> list[str]:
    out = ["detection_qa/xray.png"]
    contour = item.get("contour_qa")
    if contour:
        out.append("contour_qa/contour_eval_qa/xray_with_mask.png")
        if not contour["no_deformation"]:
            out.append("contour_qa/contour_revision_qa/xray_with_mask_and_points.png")
            out += [f"contour_qa/contour_revision_qa/option_{i}.png" for i in range(1, 5)]
    return out


def write_bundle(root: Path, n_cases: int) -> Path:
    """``root/chexpercept.json`` + hard-linked images for ``n_cases`` cases; returns root."""
    data = {}
    for i in range(n_cases):
        lesion, path = LESIONS[i % 3], PATHS[(i // 3) % 3]
        pair_id = f"s{60000000 + i}_{'negative' if path == 'lesion_free' else 'positive'}_0"
        data[f"{lesion}_{pair_id}"] = _item(lesion, path, pair_id)
    root.mkdir(parents=True, exist_ok=True)
    (root / "chexpercept.json").write_text(json.dumps(data), encoding="utf-8")
    source = root / "_image.png"
    Image.fromarray(np.full((1024, 1024), 128, np.uint8)).save(source)
    for key_id, item in data.items():
        for rel in _image_relpaths(item):
            target = root / "chexpercept" / key_id / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(source, target)
    return root


# -- loopback server in a child process -----------------------------------------------------
class Server:
    """``tests/llm/loopback.py`` in a child process."""

    def __init__(self, latency_s: float, fault_rate: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(LOOPBACK), "--latency", str(latency_s), "--fault-rate",
             str(fault_rate), "--retry-after", "0.05"], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        self.port = int(line.split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _run_in_process(bundle_dir: Path, run_dir: Path, server: Server, concurrency: int,
                    max_retries: int) -> tuple[float, Any]:
    bundle = load_bundle(bundle_dir)
    cases = validate_bundle(bundle)
    model = OpenAIChatModel("gpt-5.4", base_url=server.base_url, env={},
                            max_retries=max_retries, concurrency=concurrency)
    settings = EvalSettings("openai", "gpt-5.4", save_every=50)
    started, cpu = time.perf_counter(), time.process_time()
    summary = run_evaluation_async(bundle, cases, model, settings, run_dir,
                                   concurrency=concurrency)
    wall = time.perf_counter() - started
    summary.client_cpu_s = time.process_time() - cpu  # type: ignore[attr-defined]
    model.close()
    return wall, summary


def _bare_sdk(bundle_dir: Path, server: Server, concurrency: int, n_requests: int
              ) -> tuple[float, float]:
    """The openai SDK alone, side by side: ``n_requests`` POSTs of one turn's body.

    Same clients (:meth:`OpenAIChatModel._make_async_clients`), same SDK call and the same
    semaphore as the harness, but no dialogue, parsing, records or image encoding: the floor
    the SDK + httpx2 set on this machine. Returns ``(requests/s, CPU ms per request)``.
    """
    import asyncio

    from chexpercept.evaluation.dialogue import Dialogue

    bundle = load_bundle(bundle_dir)
    case = next(c for c in validate_bundle(bundle) if len(c.turns) == 9)
    model = OpenAIChatModel("gpt-5.4", base_url=server.base_url, env={}, max_retries=0,
                            concurrency=concurrency)
    body = model._encoded_body(Dialogue(case, "implicit", "system").prepare().request)

    async def run() -> None:
        clients = model._make_async_clients()
        semaphore = asyncio.Semaphore(concurrency)
        raw = model._raw_response_type

        async def one(i: int) -> None:
            async with semaphore:
                response = await clients[i % len(clients)].post(
                    "/chat/completions", cast_to=raw, content=body)
                response.json()

        await asyncio.gather(*(one(i) for i in range(n_requests)))
        for client in clients:
            await client.close()

    started, cpu = time.perf_counter(), time.process_time()
    asyncio.run(run())
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return n_requests / wall, 1000 * cpu / n_requests


def _verdict(ratio: float, target: float) -> str:
    """``target >= 0.9: met`` or ``...: MISSED``."""
    return f"target >= {target}: {'met' if ratio >= target else 'MISSED'}"


def _median(values: list[float]) -> float:
    return float(np.median(values))


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except FileNotFoundError:
        return 0


def _kill_and_resume(bundle_dir: Path, out: Path, latency_s: float, concurrency: int,
                     total_turns: int) -> dict[str, Any]:
    server = Server(latency_s, 0.0)
    argv = [sys.executable, str(EVAL), "--provider", "openai", "--model", "gpt-5.4",
            "--base-url", server.base_url, "--benchmark-dir", str(bundle_dir),
            "--output-path", str(out), "--concurrency", str(concurrency), "--no-progress",
            "--log-level", "WARNING"]
    records = out / "openai_gpt-5.4" / "oracle_implicit" / "records.jsonl"
    try:
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while _count_lines(records) < total_turns // 2 and child.poll() is None:
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()
        at_kill = _count_lines(records)
        served_before = server.stats()["chat_requests"]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stats = server.stats()
    finally:
        server.stop()
    final_records = [json.loads(x) for x in records.read_text().splitlines() if x.strip()]
    unique = {(r["key_id"], r["turn"]) for r in final_records}
    return {"records_at_kill": at_kill, "served_before_resume": served_before,
            "served_total": stats["chat_requests"], "unique_turns": len(unique),
            "reissued": stats["chat_requests"] - total_turns}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000,
                        help="benchmark cases (about 4.45 turns each; default 2000)")
    parser.add_argument("--concurrency", type=int, default=64,
                        help="requests in flight (default 64)")
    parser.add_argument("--latency", type=float, default=0.2,
                        help="server seconds per request (default 0.2)")
    parser.add_argument("--fault-rate", type=float, default=0.05,
                        help="share of requests answered 429/500 in the fault run (default 0.05)")
    parser.add_argument("--max-retries", type=int, default=6,
                        help="retries per request (default 6)")
    parser.add_argument("--skip-kill", action="store_true",
                        help="skip the kill-and-resume measurement")
    parser.add_argument("--repeat", type=int, default=1,
                        help="repeat the throughput runs and print the medians")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    ceiling = args.concurrency / args.latency

    with tempfile.TemporaryDirectory(prefix="bench_api_") as tmp:
        tmp_path = Path(tmp)
        t0 = time.perf_counter()
        bundle_dir = write_bundle(tmp_path / "bench", args.cases)
        cases = validate_bundle(load_bundle(bundle_dir))
        total_turns = sum(len(c.turns) for c in cases)
        print(f"bundle: {args.cases} cases, {total_turns} turns "
              f"({total_turns / args.cases:.2f}/case), built in {time.perf_counter() - t0:.1f} s")
        print(f"ceiling (Little's law): {args.concurrency} / {args.latency} s = "
              f"{ceiling:.0f} requests/s")
        if args.cases < 2000:
            print("note: the targets are for --cases 2000; a shorter run is dominated by its "
                  "start and its tail (the last cases run with fewer requests in flight)")

        clean, bare, goodputs = [], [], []
        for rep in range(args.repeat):
            server = Server(args.latency, 0.0)
            try:
                wall, summary = _run_in_process(bundle_dir, tmp_path / f"run_clean{rep}",
                                                server, args.concurrency, args.max_retries)
                stats = server.stats()
                bare_rps, bare_cpu = _bare_sdk(bundle_dir, server, args.concurrency,
                                               stats["chat_requests"])
            finally:
                server.stop()
            rps = stats["chat_requests"] / wall
            cpu_ms = 1000 * summary.client_cpu_s / stats["chat_requests"]
            clean.append(rps / ceiling)
            bare.append(bare_rps / ceiling)
            print(f"[no faults] {stats['chat_requests']} requests in {wall:.1f} s = {rps:.1f}/s; "
                  f"ratio to ceiling {rps / ceiling:.3f} ({_verdict(rps / ceiling, 0.9)}); server "
                  f"max in flight "
                  f"{stats['max_in_flight']}; turns recorded {summary.turns_requested}/"
                  f"{total_turns}; harness CPU {cpu_ms:.2f} ms/request (one core saturates at "
                  f"{1000 / cpu_ms:.0f}/s); load average {os.getloadavg()[0]:.1f} on "
                  f"{os.cpu_count()} CPUs")
            print(f"  side by side, the openai SDK alone (same clients, one fixed body, no "
                  f"harness): {bare_rps:.1f}/s = {bare_rps / ceiling:.3f} of the ceiling, "
                  f"{bare_cpu:.2f} ms CPU/request; harness / bare SDK = {rps / bare_rps:.3f}")

            server = Server(args.latency, args.fault_rate)
            try:
                wall, summary = _run_in_process(bundle_dir, tmp_path / f"run_faults{rep}",
                                                server, args.concurrency, args.max_retries)
                stats = server.stats()
            finally:
                server.stop()
            statuses = summary.statuses
            ok_turns = statuses.get("ok", 0)
            lost = total_turns - summary.turns_requested
            errors = statuses.get("error", 0)
            faults = sum(v for k, v in stats["by_status"].items() if k != "200")
            goodput = summary.turns_requested / wall
            goodputs.append(goodput / ceiling)
            print(f"[{args.fault_rate:.0%} faults] {summary.turns_requested} turns in {wall:.1f} s"
                  f" = {goodput:.1f}/s; ratio to ceiling {goodput / ceiling:.3f} "
                  f"({_verdict(goodput / ceiling, 0.8)}); lost turns {lost} (target 0)"
                  f"; {stats['chat_requests']} requests, {faults} injected faults "
                  f"{ {k: v for k, v in stats['by_status'].items() if k != '200'} }, retries "
                  f"{stats['chat_requests'] - summary.turns_requested} "
                  f"({(stats['chat_requests'] - summary.turns_requested) / max(faults, 1):.2f} "
                  f"per fault); error turns {errors}, ok turns {ok_turns}")
        if args.repeat > 1:
            print(f"median of {args.repeat}: no faults {_median(clean):.3f} "
                  f"({_verdict(_median(clean), 0.9)}; bare SDK {_median(bare):.3f}); "
                  f"{args.fault_rate:.0%} faults {_median(goodputs):.3f} "
                  f"({_verdict(_median(goodputs), 0.8)})")

        if not args.skip_kill:
            t0 = time.perf_counter()
            kr = _kill_and_resume(bundle_dir, tmp_path / "run_kill", args.latency,
                                  args.concurrency, total_turns)
            print(f"[kill at 50% + resume] records at kill {kr['records_at_kill']}/{total_turns}"
                  f", requests served before resume {kr['served_before_resume']}, total "
                  f"{kr['served_total']}; re-issued {kr['reissued']} (target <= "
                  f"{args.concurrency}: {'met' if kr['reissued'] <= args.concurrency else 'MISSED'}"
                  f"); unique (case, turn) records {kr['unique_turns']}/"
                  f"{total_turns}; {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
