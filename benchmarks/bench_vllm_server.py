"""Benchmark: Stage 03 against a real vLLM OpenAI-compatible server, harness vs the bare SDK.

Needs the engine venv (``bash scripts/setup_engine_env.sh``; run with
``.venv-engine/bin/python``). Builds the tiny random Qwen2-VL (``tests/llm/tiny_vlm.py``, size
``gpu``), writes the generated bundle of ``gpu_stage_batching.py`` (``--cases`` cases over every
path, random ``--image-size`` images), starts
``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 (vLLM's dev mode on, so its prefix
cache can be reset between runs), then:

1. **harness**: ``00_eval``'s path in process: the ``openai`` provider through the async runner
   at ``--concurrency``, every request body kept as it was sent;
2. **bare SDK**: the same bodies POSTed with the same openai clients and the same semaphore,
   without dialogues, parsing, records or image encoding, and without the order of a dialogue
   (every body is ready at once): the most the SDK and the server allow.

The prefix cache is reset before each. Prints requests/s of each and their ratio (the harness's
overhead on a real server), as JSON too with ``--out``. Asserts nothing.

Usage::

    .venv-engine/bin/python benchmarks/bench_vllm_server.py [--cases 64] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpu_stage_batching import _load  # a sibling script (benchmarks/ is on sys.path)

from chexpercept.evaluation import EvalSettings, load_bundle, validate_bundle
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.files import write_json_atomic
from chexpercept.layouts import repo_root
from utils.llm.base import TurnRequest
from utils.llm.openai_provider import OpenAIChatModel

ROOT = repo_root()


class RecordingModel(OpenAIChatModel):
    """The openai provider, keeping every request body it POSTs (for the bare-SDK replay)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bodies: list[bytes] = []

    def _post_body(self, request: TurnRequest) -> dict[str, Any]:
        body = super()._post_body(request)
        self.bodies.append(body["content"])
        return body


def _reset_prefix_cache(base_url: str) -> None:
    import httpx2

    root = base_url.rsplit("/v1", 1)[0]
    response = httpx2.post(f"{root}/reset_prefix_cache", timeout=60)
    if response.status_code != 200:
        print(f"note: could not reset the prefix cache (HTTP {response.status_code})")


def _bare(base_url: str, bodies: list[bytes], concurrency: int) -> float:
    """POST every body with the provider's clients under one semaphore; wall seconds."""
    model = OpenAIChatModel("tiny", base_url=base_url, env={}, max_retries=0,
                            concurrency=concurrency)

    async def run() -> None:
        clients = model._make_async_clients()
        semaphore = asyncio.Semaphore(concurrency)
        raw = model._raw_response_type

        async def one(i: int, body: bytes) -> None:
            async with semaphore:
                response = await clients[i % len(clients)].post(
                    "/chat/completions", cast_to=raw, content=body)
                response.json()

        await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))
        for client in clients:
            await client.close()

    started = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success, 2 when vLLM is not installed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=64, help="cases (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="requests in flight (default: %(default)s)")
    parser.add_argument("--image-size", type=int, default=448,
                        help="side of the random images in pixels (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=32,
                        help="output-token cap per turn (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default: %(default)s)")
    parser.add_argument("--out", default=None, help="JSON result file (default: print only)")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("vllm") is None:
        print("bench_vllm_server: vllm is not installed; run it with .venv-engine/bin/python "
              "(bash scripts/setup_engine_env.sh)", file=sys.stderr)
        return 2
    helpers = _load("_bench_engine_helpers", ROOT / "tests" / "engine" / "engine_helpers.py")
    os.environ.setdefault("VLLM_SERVER_DEV_MODE", "1")  # /reset_prefix_cache
    with tempfile.TemporaryDirectory(prefix="bench_vllm_server_") as tmp:
        work = Path(tmp)
        model_dir = helpers.build_model(work / "tiny")
        batching = _load("_bench_gpu_stage_batching", ROOT / "benchmarks" / "gpu_stage_batching.py")
        bench = batching.write_benchmark(work / "bench", args.cases, args.seed, args.image_size)
        server = helpers.VllmServer(model_dir, work / "server.log", max_model_len=8192)
        started = time.perf_counter()
        server.start()
        try:
            server.wait_ready(timeout_s=600)
            ready_s = time.perf_counter() - started
            bundle = load_bundle(bench)
            cases = validate_bundle(bundle)
            model = RecordingModel(helpers.SERVED_NAME, base_url=server.base_url, env={},
                                   max_new_tokens=args.max_new_tokens,
                                   concurrency=args.concurrency)
            settings = EvalSettings("openai", helpers.SERVED_NAME, oracle_setting="none")
            _reset_prefix_cache(server.base_url)
            started = time.perf_counter()
            summary = run_evaluation_async(bundle, cases, model, settings, work / "run",
                                           concurrency=args.concurrency)
            harness_s = time.perf_counter() - started
            model.close()
            _reset_prefix_cache(server.base_url)
            bare_s = _bare(server.base_url, model.bodies, args.concurrency)
        finally:
            server.stop()
    n = len(model.bodies)
    result = {
        "cases": len(cases), "requests": n, "concurrency": args.concurrency,
        "image_size": args.image_size, "max_new_tokens": args.max_new_tokens,
        "server_ready_s": round(ready_s, 1), "statuses": dict(summary.statuses),
        "harness": {"wall_s": round(harness_s, 2), "requests_per_s": round(n / harness_s, 2)},
        "bare_sdk": {"wall_s": round(bare_s, 2), "requests_per_s": round(n / bare_s, 2)},
        "harness_over_bare_sdk": round(bare_s / harness_s, 3),
        "note": "the bare SDK sends every body at once (no dialogue order, no tail of "
                "last turns), so it is an upper bound the harness can approach but not pass",
    }
    print(json.dumps(result, indent=2))
    if args.out:
        write_json_atomic(Path(args.out), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
