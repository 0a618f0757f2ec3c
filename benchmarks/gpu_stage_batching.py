"""Benchmark (GPU): Stage 03 on vLLM, stage-batched versus one conversation at a time.

harness_anchors.md section 3.6, target T5. Builds a tiny random Qwen2-VL (``tests/llm/tiny_vlm.py``,
size ``gpu``; or loads ``--model-path``), writes a generated benchmark of ``--cases`` cases
(``tests/evaluation/stage03_bundle.py`` cycling revision-required / revision-free / lesion-free
over three lesions, each case with its own random 448 x 448 images), loads ONE vLLM engine through
the ``opensource`` provider and runs the Stage 03 runner twice with ``--oracle_setting none``:

1. ``sequential``: every conversation is its own ``LLM.chat`` call (the VLMEvalKit / lmms-eval
   pattern), on the first ``--sequential-cases`` cases;
2. ``batched``: the runner's stage-synchronous path, one ``LLM.chat`` per turn index.

The prefix cache is reset before each run. Prints and writes JSON (``--out``): wall time,
requests/s, ``LLM.chat`` calls, time outside ``generate``, prefix-cache hits when vLLM exposes
them, and how many greedy outputs of the shared cases agree (mismatches listed). No assertion
on timings. Exits 2 at once, with the reason, when vllm or a CUDA GPU is missing.

Usage::

    python benchmarks/gpu_stage_batching.py [--cases 200] [--out DIR/gpu_stage_batching.json]
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

from chexpercept import io
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.rng import rng_for
from utils.llm.base import ChatModel, Completion, TurnRequest
from utils.llm.registry import create_model

logger = logging.getLogger("gpu_stage_batching")

ROOT = io.repo_root()
LESION_PATHS = (("effusion", "revision_required"), ("opacity", "revision_free"),
                ("cardiomegaly", "lesion_free"), ("opacity", "revision_required"),
                ("cardiomegaly", "revision_free"), ("effusion", "lesion_free"))
IMAGE_SIZE = 448


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
        import vllm  # noqa: F401
    except ImportError as exc:
        return (f"vllm is not importable ({exc}); install it on a GPU machine: "
                f"pip install -e '.[gpu]'")
    if not skip_gpu_check:
        import torch

        if not torch.cuda.is_available():
            return "no CUDA GPU is visible to torch (vLLM needs one)"
    return None


def write_benchmark(root: Path, n_cases: int, seed: int) -> Path:
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
            pixels = rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / "chexpercept" / key_id / rel)
    return root


class TimedModel(ChatModel):
    """Wraps a provider: times ``generate``; ``one_at_a_time`` sends each request alone."""

    def __init__(self, inner: ChatModel, *, one_at_a_time: bool) -> None:
        super().__init__(inner.model)
        self.provider = inner.provider
        self.inner = inner
        self.one_at_a_time = one_at_a_time
        self.generate_s = 0.0
        self.requests = 0

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


def _prefix_cache_counters(engine: Any) -> dict[str, float] | None:
    """vLLM's prefix-cache hit/query counters (V1 ``LLM.get_metrics``), or None."""
    get_metrics = getattr(engine, "get_metrics", None)
    if get_metrics is None:
        return None
    try:
        metrics = get_metrics()
    except Exception:  # noqa: BLE001 - optional statistics
        return None
    found = {}
    for metric in metrics:
        name = getattr(metric, "name", "")
        if name in ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"):
            found[name.split(":")[1]] = float(getattr(metric, "value", 0.0))
    return found or None


def _run(label: str, provider: ChatModel, engine: Any, bundle_root: Path, key_ids: list[str],
         out_dir: Path, *, one_at_a_time: bool) -> dict[str, Any]:
    bundle = load_bundle(bundle_root)
    cases = validate_bundle(bundle, key_ids)
    chat_calls = 0
    original_chat = engine.chat

    def counting_chat(*args: Any, **kwargs: Any) -> Any:
        nonlocal chat_calls
        chat_calls += 1
        return original_chat(*args, **kwargs)

    engine.chat = counting_chat
    if hasattr(engine, "reset_prefix_cache"):
        engine.reset_prefix_cache()
    before = _prefix_cache_counters(engine)
    model = TimedModel(provider, one_at_a_time=one_at_a_time)
    settings = EvalSettings(provider=provider.provider, model=provider.model,
                            oracle_setting="none")
    started = time.perf_counter()
    try:
        summary = run_evaluation(bundle, cases, model, settings, out_dir / label, overwrite=True)
    finally:
        engine.chat = original_chat
    wall = time.perf_counter() - started
    after = _prefix_cache_counters(engine)
    prefix = None
    if before is not None and after is not None:
        hits = after.get("prefix_cache_hits", 0.0) - before.get("prefix_cache_hits", 0.0)
        queries = after.get("prefix_cache_queries", 0.0) - before.get("prefix_cache_queries", 0.0)
        prefix = {"hits": hits, "queries": queries,
                  "hit_rate": hits / queries if queries else None}
    result = {
        "cases": len(cases), "requests": model.requests, "chat_calls": chat_calls,
        "generate_calls": summary.generate_calls, "wall_s": round(wall, 3),
        "generate_s": round(model.generate_s, 3),
        "outside_generate_frac": round(1 - model.generate_s / wall, 4) if wall else None,
        "requests_per_s": round(model.requests / wall, 2) if wall else None,
        "statuses": dict(summary.statuses), "prefix_cache": prefix,
    }
    logger.info("%s: %s", label, json.dumps(result))
    return result


def _raw_by_turn(run_dir: Path) -> dict[tuple[str, str], str]:
    return {(r["key_id"], r["turn"]): r["raw"] for r in io.read_jsonl(io.records_path(run_dir))}


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
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5,
                        help="vLLM GPU memory fraction (default: %(default)s).")
    parser.add_argument("--enforce-eager", action="store_true",
                        help="Skip CUDA graph capture (faster start, slower decode) "
                             "(default: off).")
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
        started = time.perf_counter()
        provider = create_model(
            "opensource", args.model, model_path=model_path, seed=args.seed,
            max_new_tokens=args.max_new_tokens, max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization,
            enforce_eager=args.enforce_eager or None,
            engine_kwargs={"disable_log_stats": False})
        load_s = time.perf_counter() - started
        engine = provider.load()  # the benchmark counts the engine's own chat calls
        key_ids = list(load_bundle(bundle_root).items)
        try:
            sequential = _run("sequential", provider, engine, bundle_root, key_ids[:n_seq],
                              work / "runs", one_at_a_time=True)
            batched = _run("batched", provider, engine, bundle_root, key_ids, work / "runs",
                           one_at_a_time=False)
        finally:
            provider.close()
        seq_raw = _raw_by_turn(work / "runs" / "sequential")
        bat_raw = _raw_by_turn(work / "runs" / "batched")
        shared = sorted(set(seq_raw) & set(bat_raw))
        mismatches = [{"key_id": k, "turn": t, "sequential": seq_raw[(k, t)],
                       "batched": bat_raw[(k, t)]}
                      for k, t in shared if seq_raw[(k, t)] != bat_raw[(k, t)]]
        for m in mismatches[:10]:
            logger.warning("output mismatch %s/%s: %r vs %r", m["key_id"], m["turn"],
                           m["sequential"][:80], m["batched"][:80])
        speedup = None
        if sequential["requests_per_s"] and batched["requests_per_s"]:
            speedup = round(batched["requests_per_s"] / sequential["requests_per_s"], 2)
        result = {
            "model": args.model, "model_path": args.model_path or "tiny random Qwen2-VL",
            "runtime": provider.runtime_info(), "setup_s": round(setup_s, 2),
            "engine_load_s": round(load_s, 2), "max_new_tokens": args.max_new_tokens,
            "sequential": sequential, "batched": batched,
            "throughput_ratio_batched_over_sequential": speedup,
            "agreement": {"compared": len(shared), "agree": len(shared) - len(mismatches),
                          "rate": round(1 - len(mismatches) / len(shared), 4) if shared
                          else None,
                          "mismatches": mismatches[:50]},
        }
    text = json.dumps(io.to_jsonable(result), indent=2)
    print(text)
    if args.out:
        io.write_json_atomic(Path(args.out), io.to_jsonable(result))
        logger.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
