"""Benchmark: Stage 03 on vLLM (GPU or vLLM's CPU build): batched, one at a time, asynchronous.

Builds a tiny random Qwen2-VL (``tests/llm/tiny_vlm.py``, size ``gpu``; or loads ``--model-path``),
writes a generated benchmark of ``--cases`` cases (``tests/evaluation/stage03_bundle.py`` cycling
revision-required / revision-free / lesion-free over three lesions, each case with its own random
448 x 448 images), loads ONE vLLM engine through the ``opensource`` provider and runs the Stage 03
runner with ``--oracle_setting none``:

1. ``sequential``: every conversation is its own ``LLM.chat`` call (the VLMEvalKit / lmms-eval
   pattern), on the first ``--sequential-cases`` cases;
2. ``batched``: the sync runner as Stage 03 runs it (the default of ``--vllm-engine``): a
   rolling window of the dialogues that fit the KV cache, one ``LLM.chat`` per step holding
   the next turn of every case in the window (docs/design.md, "Batching");
3. ``turn_index``: the sync runner without the window, one ``LLM.chat`` per turn index over
   every case (the path before the window; what any provider without a KV cache gets);
4. ``async``: vLLM's ``AsyncLLM`` under the async runner, each case's next turn submitted as
   soon as its previous one ends, cases started as the KV window has room
   (``--vllm-engine async``); its own engine, loaded after the first is closed;
5. ``async_unbounded``: the same without the window, ``--async-concurrency`` requests in
   flight (the path before the window).

``--kv-blocks N`` sets vLLM's ``num_gpu_blocks_override``: a KV cache of N blocks, to measure a
cache far smaller than the dialogues' working set, as on a GPU with a large model.

The prefix cache is reset before each run (the async modes get a fresh engine per run).
``--repeat N`` runs every mode N times, alternating the modes' order round by round, and reports
each mode's median run with every run's requests/s (``repeats_requests_per_s``); the ratios
are of the medians, since one run on a shared machine proves nothing. Prints and writes JSON
(``--out``): wall time,
requests/s, ``LLM.chat`` calls, time outside ``generate``; ``prefix_cache``: from the records
(vLLM's per-request ``num_cached_tokens``) ``hit_rate`` = cached / prompt tokens,
``computed_tokens`` = prompt tokens not found in the cache, ``min_computed_tokens`` = each case's
longest prompt counted once (what a cache that never evicts a dialogue's history computes, less
what cases share), and vLLM's own counters (``engine_*``, which also count requests prefilled
again after a preemption); how many greedy outputs of the shared cases agree (mismatches
listed); and for the sync runs the **barrier idle share**: of the request-slot time inside the
``LLM.chat`` calls, the share during which a request had finished and waited for the slowest
request of its call (from vLLM's per-request timestamps; the capacity the barrier leaves
unused). No assertion on timings. Exits 2 at once, with the reason, when vllm is missing, or
when a GPU build of vllm sees no CUDA GPU.

Usage::

    python benchmarks/gpu_stage_batching.py [--cases 200] [--modes sequential,batched,async]
        [--kv-blocks N] [--repeat 3] [--out DIR/gpu_stage_batching.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from PIL import Image

from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.files import read_jsonl, to_jsonable, write_json_atomic
from chexpercept.layouts import records_path, repo_root
from chexpercept.rng import rng_for
from utils.llm.base import ChatModel, Completion, TurnRequest
from utils.llm.registry import create_model
from utils.llm.vllm_provider import is_cpu_build

logger = logging.getLogger("gpu_stage_batching")

ROOT = repo_root()
LESION_PATHS = (("effusion", "revision_required"), ("opacity", "revision_free"),
                ("cardiomegaly", "lesion_free"), ("opacity", "revision_required"),
                ("cardiomegaly", "revision_free"), ("effusion", "lesion_free"))
IMAGE_SIZE = 448
#: The runs ``--modes`` may name (the module docstring).
MODES = ("sequential", "turn_index", "batched", "async", "async_unbounded")


def _load(name: str, path: Path) -> ModuleType:
    """Import a helper module of the test suite by file path."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def preflight(skip_gpu_check: bool) -> str | None:
    """Why this benchmark cannot run here (vllm / CUDA missing), or None."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (GPU environment: pip install -e '.[gpu]')"
    try:
        import vllm
    except ImportError as exc:
        return (f"vllm is not importable ({exc}); install it on a GPU machine "
                f"(pip install -e '.[gpu]') or use vLLM's CPU build "
                f"(bash scripts/setup_engine_env.sh)")
    if not skip_gpu_check and not is_cpu_build(vllm):
        import torch

        if not torch.cuda.is_available():
            return "no CUDA GPU is visible to torch (vLLM's GPU build needs one)"
    return None


def write_benchmark(root: Path, n_cases: int, seed: int, image_size: int = IMAGE_SIZE) -> Path:
    """A generated bundle of ``n_cases`` cases with per-case random RGB images."""
    bundle_mod = _load("_bench_stage03_bundle", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
    cases = {}
    for i in range(n_cases):
        lesion, path = LESION_PATHS[i % len(LESION_PATHS)]
        kind = "negative" if path == "lesion_free" else "positive"
        cases[f"{lesion}_s{60000000 + i}_{kind}_0"] = path
    bundle_mod.write_bundle(root, cases=cases)
    items = bundle_mod.load_items(root)
    for key_id, item in items.items():
        rng = rng_for(seed, "gpu_stage_batching", key_id)
        for rel in bundle_mod.image_relpaths(key_id, item):
            pixels = rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / "chexpercept" / key_id / rel)
    return root


class TimedModel(ChatModel):
    """Wraps a provider: times ``generate``; ``one_at_a_time`` sends each request alone.

    ``window=False`` hides the provider's KV cache from the runners (the paths before the
    window: one call per turn index; the async runner without its gate).
    """

    def __init__(self, inner: ChatModel, *, one_at_a_time: bool, window: bool = True) -> None:
        super().__init__(inner.model)
        self.provider = inner.provider
        self.inner = inner
        self.one_at_a_time = one_at_a_time
        self.window = window
        self.supports_async = inner.supports_async
        self.generate_s = 0.0
        self.requests = 0

    def kv_cache(self) -> Any:
        return self.inner.kv_cache() if self.window else None

    def prompt_limits(self) -> Any:
        return self.inner.prompt_limits()

    async def agenerate(self, request: TurnRequest) -> Completion:
        self.requests += 1
        return await self.inner.agenerate(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        started = time.perf_counter()
        if self.one_at_a_time:
            out = [c for r in requests for c in self.inner.generate([r])]
        else:
            out = self.inner.generate(requests)
        self.generate_s += time.perf_counter() - started
        self.requests += len(requests)
        return out

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def runtime_info(self) -> dict[str, Any]:
        return {**self.inner.runtime_info(), "one_at_a_time": self.one_at_a_time}


def _prefix_cache_counters() -> dict[str, float] | None:
    """vLLM's prefix-cache hit/query counters (its in-process Prometheus registry), or None.

    Both engines (``LLM`` and ``AsyncLLM``, with ``disable_log_stats=False``) count there.
    """
    try:
        from vllm.v1.metrics.reader import get_metrics_snapshot

        metrics = get_metrics_snapshot()
    except Exception:  # noqa: BLE001 - optional statistics (and the stub has none)
        return None
    found = {}
    for metric in metrics:
        name = getattr(metric, "name", "")
        if name in ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"):
            found[name.split(":")[1]] = float(getattr(metric, "value", 0.0))
    return found or None


class BarrierIdle:
    """Request-slot time inside ``LLM.chat`` calls spent finished, waiting for the call to end.

    For each call: its span is from the first request scheduled to the last token of any
    request (vLLM's ``RequestOutput.metrics``, engine-core timestamps; needs
    ``disable_log_stats=False``); a request that finished at ``t`` waited ``end - t``. The share
    is the waited time over ``requests x span``, summed over calls; None without timestamps.
    """

    def __init__(self) -> None:
        self.waited = 0.0
        self.slots = 0.0

    def add(self, outputs: Any) -> None:
        """Account one call's outputs."""
        stats = [getattr(o, "metrics", None) for o in outputs]
        stamps = [(m.scheduled_ts, m.last_token_ts) for m in stats
                  if m is not None and getattr(m, "last_token_ts", 0) > 0]
        if not stamps or len(stamps) != len(outputs):
            return
        start = min(a for a, _ in stamps)
        end = max(b for _, b in stamps)
        self.waited += sum(end - b for _, b in stamps)
        self.slots += len(stamps) * (end - start)

    def share(self) -> float | None:
        """The idle share in [0, 1], or None when no call had timestamps."""
        return round(self.waited / self.slots, 4) if self.slots > 0 else None


def token_stats(run_dir: Path) -> dict[str, Any]:
    """Prompt tokens of a run's records: cached share, computed, and the least computable.

    ``min_computed_tokens`` counts each case's longest prompt once: a cache that keeps every
    dialogue's history computes each case's tokens once (less what the cases share, such as the
    system prompt, which it also reuses).
    """
    prompt = cached = 0
    longest: dict[str, int] = {}
    for record in read_jsonl(records_path(run_dir)):
        usage = record.get("usage") or {}
        tokens = int(usage.get("input_tokens", 0))
        prompt += tokens
        cached += int(usage.get("cached_input_tokens", 0))
        longest[record["key_id"]] = max(longest.get(record["key_id"], 0), tokens)
    return {"hit_rate": round(cached / prompt, 4) if prompt else None, "prompt_tokens": prompt,
            "cached_tokens": cached, "computed_tokens": prompt - cached,
            "min_computed_tokens": sum(longest.values())}


def _engine_counts(before: dict[str, float] | None) -> dict[str, Any]:
    """vLLM's own prefix-cache counters since ``before`` (empty without them)."""
    after = _prefix_cache_counters()
    if before is None or after is None:
        return {}
    hits = after.get("prefix_cache_hits", 0.0) - before.get("prefix_cache_hits", 0.0)
    queries = after.get("prefix_cache_queries", 0.0) - before.get("prefix_cache_queries", 0.0)
    return {"engine_hits": hits, "engine_queries": queries,
            "engine_hit_rate": round(hits / queries, 4) if queries else None}


def _run_async(label: str, provider: ChatModel, bundle_root: Path, key_ids: list[str],
               out_dir: Path, concurrency: int, *, window: bool) -> dict[str, Any]:
    """The async runner over ``provider`` (``engine="async"``); requests/s like :func:`_run`."""
    bundle = load_bundle(bundle_root)
    cases = validate_bundle(bundle, key_ids)
    settings = EvalSettings(provider=provider.provider, model=provider.model,
                            oracle_setting="none")
    model = TimedModel(provider, one_at_a_time=False, window=window)
    before = _prefix_cache_counters()
    started = time.perf_counter()
    summary = run_evaluation_async(bundle, cases, model, settings, out_dir / label,
                                   concurrency=concurrency, overwrite=True)
    wall = time.perf_counter() - started
    requests = sum(len(c.turns) for c in cases)
    result = {"cases": len(cases), "requests": requests, "chat_calls": 0,
              "generate_calls": summary.generate_calls, "wall_s": round(wall, 3),
              "requests_per_s": round(requests / wall, 2) if wall else None,
              "statuses": dict(summary.statuses), "concurrency": concurrency,
              "window": window,
              "prefix_cache": {**token_stats(out_dir / label), **_engine_counts(before)}}
    logger.info("%s: %s", label, json.dumps(result))
    return result


def _run(label: str, provider: ChatModel, engine: Any, bundle_root: Path, key_ids: list[str],
         out_dir: Path, *, one_at_a_time: bool, window: bool = True) -> dict[str, Any]:
    bundle = load_bundle(bundle_root)
    cases = validate_bundle(bundle, key_ids)
    chat_calls = 0
    original_chat = engine.chat

    def counting_chat(*args: Any, **kwargs: Any) -> Any:
        nonlocal chat_calls
        chat_calls += 1
        outputs = original_chat(*args, **kwargs)
        idle.add(outputs)
        return outputs

    engine.chat = counting_chat
    idle = BarrierIdle()
    if hasattr(engine, "reset_prefix_cache"):
        engine.reset_prefix_cache()
    before = _prefix_cache_counters()
    model = TimedModel(provider, one_at_a_time=one_at_a_time, window=window)
    settings = EvalSettings(provider=provider.provider, model=provider.model,
                            oracle_setting="none")
    started = time.perf_counter()
    try:
        summary = run_evaluation(bundle, cases, model, settings, out_dir / label, overwrite=True)
    finally:
        engine.chat = original_chat
    wall = time.perf_counter() - started
    prefix = {**token_stats(out_dir / label), **_engine_counts(before)}
    result = {
        "cases": len(cases), "requests": model.requests, "chat_calls": chat_calls,
        "generate_calls": summary.generate_calls, "wall_s": round(wall, 3),
        "generate_s": round(model.generate_s, 3),
        "outside_generate_frac": round(1 - model.generate_s / wall, 4) if wall else None,
        "requests_per_s": round(model.requests / wall, 2) if wall else None,
        "statuses": dict(summary.statuses), "prefix_cache": prefix,
        "barrier_idle_share": idle.share(), "window": window,
    }
    logger.info("%s: %s", label, json.dumps(result))
    return result


def _median_run(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median ``requests_per_s`` (the lower middle of an even count), plus
    ``repeats_requests_per_s``: every run's rate, in run order (``--repeat``)."""
    rates = [r.get("requests_per_s") or 0.0 for r in results]
    middle = sorted(range(len(results)), key=lambda i: rates[i])[(len(results) - 1) // 2]
    return {**results[middle], "repeats_requests_per_s": rates}


def _raw_by_turn(run_dir: Path) -> dict[tuple[str, str], str]:
    return {(r["key_id"], r["turn"]): r["raw"] for r in read_jsonl(records_path(run_dir))}


def build_parser() -> argparse.ArgumentParser:
    """Benchmark flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200,
                        help="Cases in the batched run (default: %(default)s).")
    parser.add_argument("--sequential-cases", type=int, default=None,
                        help="Cases in the one-at-a-time run, the first N (default: --cases).")
    parser.add_argument("--model-path", default=None,
                        help="A local VLM folder to benchmark instead of the tiny random "
                             "Qwen2-VL (default: build the tiny model).")
    parser.add_argument("--model", default="tiny-qwen2-vl",
                        help="Alias whose registry settings apply with --model-path "
                             "(default: %(default)s, a custom model with default settings).")
    parser.add_argument("--max-new-tokens", type=int, default=32,
                        help="Output-token cap per turn (default: %(default)s).")
    parser.add_argument("--max-model-len", type=int, default=16384,
                        help="vLLM context length (default: %(default)s).")
    parser.add_argument("--gpu-memory-utilization", type=float, default=None,
                        help="vLLM memory fraction: of the GPU, or of the machine's memory on "
                             "vLLM's CPU build (default: 0.5 on GPU, 0.15 on CPU).")
    parser.add_argument("--enforce-eager", action="store_true",
                        help="Skip CUDA graph capture / torch.compile (faster start, maybe "
                             "slower decode) (default: off).")
    parser.add_argument("--dtype", default=None,
                        help="vLLM dtype (default: float32 on vLLM's CPU build, where bf16 "
                             "rounding differs between batch shapes and flips greedy tokens "
                             "of the random model; the model's own dtype on GPU).")
    parser.add_argument("--modes", default="sequential,batched,async",
                        help=f"Comma-separated runs; choices: {', '.join(MODES)} "
                             f"(default: %(default)s).")
    parser.add_argument("--kv-blocks", type=int, default=None,
                        help="KV-cache blocks of every engine (vLLM's num_gpu_blocks_override; "
                             "block size 16 on GPU, 128 on vLLM's CPU build) (default: what "
                             "the memory allows).")
    parser.add_argument("--async-concurrency", type=int, default=256,
                        help="Requests in flight of the async runs (default: %(default)s, "
                             "ASYNC_ENGINE_CONCURRENCY).")
    parser.add_argument("--repeat", type=int, default=1,
                        help="Runs of each mode, alternated (the order reversed on every other "
                             "round) on one engine; each mode reports its median run "
                             "(default: %(default)s).")
    parser.add_argument("--seed", type=int, default=0, help="Seed (default: %(default)s).")
    parser.add_argument("--out", default=None,
                        help="JSON result file (default: print only).")
    parser.add_argument("--work-dir", default=None,
                        help="Folder for the model, bundle and runs (default: a temporary "
                             "folder, deleted afterwards).")
    parser.add_argument("--skip-gpu-check", action="store_true",
                        help="Do not require CUDA (only for testing with a stub vllm).")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success, 2 when vllm / CUDA is missing."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    reason = preflight(args.skip_gpu_check)
    if reason is not None:
        print(f"gpu_stage_batching: cannot run: {reason}", file=sys.stderr)
        return 2
    n_seq = min(args.sequential_cases or args.cases, args.cases)
    with tempfile.TemporaryDirectory(prefix="gpu_stage_batching_") as tmp:
        work = Path(args.work_dir) if args.work_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        model_path = args.model_path
        if model_path is None:
            tiny = _load("_bench_tiny_vlm", ROOT / "tests" / "llm" / "tiny_vlm.py")
            model_path = str(tiny.build_tiny_qwen2_vl(work / "tiny_qwen2_vl", size="gpu",
                                                      seed=args.seed))
        bundle_root = write_benchmark(work / "bench", args.cases, args.seed)
        setup_s = time.perf_counter() - started
        import vllm

        cpu = is_cpu_build(vllm)
        utilization = args.gpu_memory_utilization or (0.15 if cpu else 0.5)
        dtype = args.dtype or ("float32" if cpu else None)
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        unknown = sorted(set(modes) - set(MODES))
        if unknown:
            print(f"gpu_stage_batching: unknown --modes {unknown}", file=sys.stderr)
            return 2
        options = {"model_path": model_path, "seed": args.seed,
                   "max_new_tokens": args.max_new_tokens, "max_model_len": args.max_model_len,
                   "gpu_memory_utilization": utilization,
                   "enforce_eager": args.enforce_eager or None, "kv_blocks": args.kv_blocks,
                   "engine_kwargs": {"disable_log_stats": False,
                                     **({"dtype": dtype} if dtype else {})}}
        key_ids = list(load_bundle(bundle_root).items)
        runs: dict[str, dict[str, Any]] = {}
        repeats: dict[str, list[dict[str, Any]]] = {}
        runtime: dict[str, Any] = {}
        load_s = None
        if {"sequential", "turn_index", "batched"} & set(modes):
            started = time.perf_counter()
            provider = create_model("opensource", args.model, **options)
            engine = provider.load()  # the benchmark counts the engine's own chat calls
            load_s = round(time.perf_counter() - started, 2)
            runtime = provider.runtime_info()
            try:
                engine_modes = [m for m in ("sequential", "turn_index", "batched") if m in modes]
                for r in range(args.repeat):  # alternate, so drift on a shared machine is split
                    for mode in engine_modes if r % 2 == 0 else engine_modes[::-1]:
                        cases = key_ids[:n_seq] if mode == "sequential" else key_ids
                        repeats.setdefault(mode, []).append(_run(
                            mode if r == 0 else f"{mode}_r{r}", provider, engine, bundle_root,
                            cases, work / "runs", one_at_a_time=mode == "sequential",
                            window=mode == "batched"))
            finally:
                provider.close()
        async_load_s = None
        async_modes = [m for m in ("async", "async_unbounded") if m in modes]
        for r in range(args.repeat):  # a fresh engine per run: its prefix cache starts empty
            for label in async_modes if r % 2 == 0 else async_modes[::-1]:
                provider = create_model("opensource", args.model, engine="async", **options)
                try:
                    provider.start()  # as Stage 03 does: the engine (and cache) before the run
                    async_load_s = provider.async_load_s
                    runtime = runtime or provider.runtime_info()
                    repeats.setdefault(label, []).append(_run_async(
                        label if r == 0 else f"{label}_r{r}", provider, bundle_root, key_ids,
                        work / "runs", args.async_concurrency, window=label == "async"))
                finally:
                    provider.close()
        for label, results in repeats.items():  # each mode's median run, with every run's rate
            runs[label] = _median_run(results)
        raws = {label: _raw_by_turn(work / "runs" / label) for label in runs}
        agreement = {}
        reference = next((m for m in ("turn_index", "batched") if m in raws), None) or \
            next(iter(raws), None)
        for label, raw in raws.items():
            if label == reference:
                continue
            shared = sorted(set(raw) & set(raws[reference]))
            mismatches = [{"key_id": k, "turn": t, label: raw[(k, t)],
                           reference: raws[reference][(k, t)]}
                          for k, t in shared if raw[(k, t)] != raws[reference][(k, t)]]
            for m in mismatches[:10]:
                logger.warning("output mismatch %s vs %s at %s/%s", label, reference,
                               m["key_id"], m["turn"])
            agreement[f"{label}_vs_{reference}"] = {
                "compared": len(shared), "agree": len(shared) - len(mismatches),
                "rate": round(1 - len(mismatches) / len(shared), 4) if shared else None,
                "mismatches": mismatches[:50]}

        def ratio(a: str, b: str) -> float | None:
            ra = runs.get(a, {}).get("requests_per_s")
            rb = runs.get(b, {}).get("requests_per_s")
            return round(ra / rb, 2) if ra and rb else None

        result = {
            "model": args.model, "model_path": args.model_path or "tiny random Qwen2-VL",
            "device": "cpu" if cpu else "cuda", "runtime": runtime,
            "setup_s": round(setup_s, 2), "engine_load_s": load_s,
            "async_engine_load_s": async_load_s, "max_new_tokens": args.max_new_tokens,
            "enforce_eager": bool(args.enforce_eager), "dtype": dtype or "model default",
            **runs,
            "kv_blocks": args.kv_blocks,
            "throughput_ratio_batched_over_sequential": ratio("batched", "sequential"),
            "throughput_ratio_batched_over_turn_index": ratio("batched", "turn_index"),
            "throughput_ratio_async_over_batched": ratio("async", "batched"),
            "agreement": agreement,
        }
    text = json.dumps(to_jsonable(result), indent=2)
    print(text)
    if args.out:
        write_json_atomic(Path(args.out), to_jsonable(result))
        logger.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
