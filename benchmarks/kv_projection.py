"""Projection: prefill tokens of the full Stage 03 run on one GPU, with and without the KV window.

No engine runs. For each open model of the paper whose architecture is given here (or added with
``--model``), and each GPU memory size:

- **KV capacity** ``C = (memory * utilization - weights - reserve) / bytes_per_token`` tokens,
  where ``bytes_per_token = layers * kv_heads * head_dim * 2 (K and V) * 2 (bf16)`` and the
  weights are ``params * 2`` bytes (bf16). ``reserve`` (default 4 GB) stands for vLLM's
  activation peak, which it profiles at start.
- **Dialogues**: the benchmark's 2,100 dialogues (10,400 turns; docs/paper.md: per lesion 100
  revision-required, 100 revision-free and 100 lesion-free cases, 6 lung lesions and
  cardiomegaly), each path's prompts estimated turn by turn as Stage 03 estimates them
  (``chexpercept.evaluation.budget.estimate_prompt_tokens``: the model's image rule for the
  1024 x 1024 images, text at ``utils.llm.tokens.CHARS_PER_TOKEN``, earlier answers as
  ``Answer: N`` lines, plus ``--reply-tokens`` per reply) on the test bundle's questions
  (``tests/evaluation/stage03_bundle.py``), weighted by the path mix above.
- **Prefill, one call per turn index over every case** (the path before the window): each
  turn index holds every case's prompt at once, far more than ``C``, so by the time a case's
  next turn comes its history has been evicted: every turn's prompt is computed in full except
  the system prompt all cases share.
- **Prefill, KV window**: the dialogues in flight fit ``C``, so each dialogue's history stays
  cached and each case computes its longest prompt once (less the shared system prompt), as the
  benchmark measures (``gpu_stage_batching.py``: ``min_computed_tokens``).

- **Cost model** (:class:`GpuCost`): hours = prefill tokens x 2 x params / sustained FLOP/s
  (compute-bound) + decode steps x (weights + width x context x KV bytes per token) / memory
  bandwidth (memory-bound), with ``turns x --reply-tokens`` tokens decoded at a width of the
  dialogues the cache holds. It shows where the window pays (short replies: prefill dominates)
  and where it would not (long replies: decode dominates and the window's width, set by each
  dialogue's full footprint, is narrower).

A projection, not a measurement: see docs/design.md, "KV cache at scale". Prints a Markdown
table (and writes JSON with ``--out``).

Usage::

    python benchmarks/kv_projection.py [--gpu-gb 80 141] [--reply-tokens 16]
        [--gpu-tflops 400] [--gpu-tbps 3.35] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
from PIL import Image

from chexpercept.evaluation import load_bundle, validate_bundle
from chexpercept.evaluation.budget import estimate_prompt_tokens
from chexpercept.evaluation.dialogue import Dialogue, TurnOutcome, answer_text
from chexpercept.evaluation.parsing import ParsedAnswer
from chexpercept.files import write_json_atomic
from chexpercept.layouts import repo_root
from utils.llm.base import PromptLimits
from utils.llm.tokens import rule_for_model

ROOT = repo_root()
#: Dialogues of each test-bundle case type in the full benchmark (docs/paper.md: 100 cases per
#: lesion and path; 6 lung lesions, cardiomegaly without Stage 4). Sums: 2,100 dialogues,
#: 10,400 turns.
MIX = {
    "effusion_s50000001_positive_0": 300,      # lung, revision-required, 9 turns
    "opacity_s50000007_positive_0": 300,       # lung, revision-required, multi-point, 9 turns
    "effusion_s50000002_positive_0": 600,      # lung, revision-free, 6 turns
    "cardiomegaly_s50000004_positive_0": 100,  # cardiomegaly, revision-required, 5 turns
    "cardiomegaly_s50000005_positive_0": 100,  # cardiomegaly, revision-free, 2 turns
    "effusion_s50000003_negative_0": 600,      # lung, lesion-free, 1 turn
    "cardiomegaly_s50000006_negative_2": 100,  # cardiomegaly, lesion-free, 1 turn
}
IMAGE_SIZE = 1024  # the working frame every benchmark image is rendered in


@dataclass(frozen=True)
class Arch:
    """A model's KV geometry and weights (its ``config.json``, as known to us).

    Attributes:
        alias: Registry alias (``utils.llm.models.MODELS``).
        model_id: HF id (picks the image rule).
        layers: Layers that keep every token's K and V.
        kv_heads: Key/value heads per layer.
        head_dim: Dimension per head.
        params_b: Parameters in billions (vision encoder included), bf16 weights.
        note: Where the numbers come from.
    """

    alias: str
    model_id: str
    layers: int
    kv_heads: int
    head_dim: int
    params_b: float
    note: str

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer, bf16."""
        return self.layers * self.kv_heads * self.head_dim * 2 * 2


#: The paper's open models whose text-model configuration we know (values of their base
#: models' config.json). Qwen3.5/3.6 and Gemma 4 are not here: add them with ``--model``.
ARCHS = (
    Arch("huatuo", "FreedomIntelligence/HuatuoGPT-Vision-7B-Qwen2.5VL", 28, 4, 128, 8.3,
         "Qwen2.5-VL-7B: 28 layers, 4 KV heads, head_dim 128"),
    Arch("medgemma1.5", "google/medgemma-1.5-4b-it", 34, 4, 256, 4.3,
         "Gemma 3 4B: 34 layers, 4 KV heads, head_dim 256 (all layers counted; 5 in 6 use a "
         "1,024-token sliding window)"),
    Arch("medgemma", "google/medgemma-27b-it", 62, 16, 128, 27.4,
         "Gemma 3 27B: 62 layers, 16 KV heads, head_dim 128 (all layers counted; 5 in 6 use a "
         "1,024-token sliding window)"),
    Arch("lingshu", "lingshu-medical-mllm/Lingshu-32B", 64, 8, 128, 33.5,
         "Qwen2.5-VL-32B: 64 layers, 8 KV heads, head_dim 128"),
    Arch("internvl3.5", "OpenGVLab/InternVL3_5-38B", 64, 8, 128, 38.4,
         "Qwen3-32B text model: 64 layers, 8 KV heads, head_dim 128; InternViT-6B"),
    Arch("glm-4v", "zai-org/GLM-4.6V", 46, 8, 128, 108.0,
         "GLM-4.5-Air-sized MoE (106B-A12B): 46 layers, 8 KV heads, head_dim 128"),
)


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def turn_prompts(root: Path, limits: PromptLimits, reply_tokens: int) -> dict[str, list[int]]:
    """Each test-bundle case's estimated prompt tokens, turn by turn (GT answers as replies)."""
    bundle = load_bundle(root)
    sizes: dict[Path, tuple[int, int]] = {}
    out = {}
    for case in validate_bundle(bundle):
        dialogue = Dialogue(case, "none")
        prompts = []
        while not dialogue.finished:
            prepared = dialogue.prepare()
            prompts.append(estimate_prompt_tokens(prepared.request, limits, sizes)
                           + reply_tokens * len(prompts))
            raw = answer_text(prepared.turn.ground_truth)
            dialogue.commit(prepared, TurnOutcome(raw, ParsedAnswer(None, "ok"), True))
        out[case.key_id] = prompts
    return out


def system_tokens(root: Path, limits: PromptLimits) -> int:
    """Tokens of the system message every request starts with (shared by all cases)."""
    bundle = load_bundle(root)
    case = validate_bundle(bundle)[0]
    request = Dialogue(case, "none").prepare().request
    first = type(request)(messages=request.messages[:1])
    return estimate_prompt_tokens(first, limits)


@dataclass(frozen=True)
class GpuCost:
    """A GPU's cost model: prefill is compute-bound, decode memory-bound (one GPU, bf16).

    Attributes:
        tflops: Sustained bf16 dense TFLOP/s in prefill (default 400: about 40 % of an H100
            SXM's 989 peak, a typical prefill utilisation).
        tbps: Memory bandwidth in TB/s (3.35: H100 SXM; 4.8: H200).
    """

    tflops: float = 400.0
    tbps: float = 3.35

    def prefill_s(self, tokens: float, params_b: float) -> float:
        """Seconds to prefill ``tokens`` (2 x params FLOPs per token)."""
        return tokens * 2 * params_b * 1e9 / (self.tflops * 1e12)

    def decode_s(self, tokens: float, width: int, context: float, weights_bytes: float,
                 kv_bytes_per_token: float) -> float:
        """Seconds to decode ``tokens`` at ``width`` sequences per step, each holding ``context``
        tokens: every step reads the weights once and each sequence's KV cache."""
        if width < 1:
            return math.inf
        step = (weights_bytes + width * context * kv_bytes_per_token) / (self.tbps * 1e12)
        return tokens / width * step


def project(arch: Arch, root: Path, gpu_gb: float, utilization: float, reserve_gb: float,
            reply_tokens: int, cost: GpuCost | None = None) -> dict[str, object]:
    """One row: capacity, dialogues in the window, prefill tokens under each scheduler, and the
    cost model's hours for each (:class:`GpuCost`; decode width: the dialogues the cache holds,
    at their mean footprint for the window, at the mean prompt for one call per turn index)."""
    cost = cost or GpuCost()
    limits = PromptLimits(image_rule=rule_for_model(arch.model_id))
    prompts = turn_prompts(root, limits, reply_tokens)
    shared = system_tokens(root, limits)
    free = gpu_gb * 1e9 * utilization - arch.params_b * 2e9 - reserve_gb * 1e9
    capacity = max(0, int(free // arch.kv_bytes_per_token))
    dialogues = sum(MIX.values())
    turns = sum(MIX[k] * len(p) for k, p in prompts.items())
    by_turn = sum(MIX[k] * sum(t - shared for t in p) for k, p in prompts.items()) + shared
    window = sum(MIX[k] * (p[-1] - shared) for k, p in prompts.items()) + shared
    footprint = sum(MIX[k] * (p[-1] + reply_tokens) for k, p in prompts.items()) / dialogues
    largest = max(p[-1] + reply_tokens for p in prompts.values())
    first_turn = sum(MIX[k] * p[0] for k, p in prompts.items())
    mean_prompt = sum(MIX[k] * sum(p) for k, p in prompts.items()) / turns
    in_window = math.floor(capacity / footprint) if capacity else 0
    width_by_turn = min(dialogues, math.floor(capacity / mean_prompt)) if capacity else 0
    weights, kv = arch.params_b * 2e9, arch.kv_bytes_per_token
    decode = turns * reply_tokens
    hours_by_turn = (cost.prefill_s(by_turn, arch.params_b)
                     + cost.decode_s(decode, width_by_turn, mean_prompt, weights, kv)) / 3600
    hours_window = (cost.prefill_s(window, arch.params_b)
                    + cost.decode_s(decode, min(in_window, dialogues), footprint, weights,
                                    kv)) / 3600
    return {
        "model": arch.alias, "gpu_gb": gpu_gb, "kv_kib_per_token": arch.kv_bytes_per_token / 1024,
        "weights_gb": round(arch.params_b * 2, 1), "kv_capacity_tokens": capacity,
        "fits": capacity >= largest, "dialogues": dialogues, "turns": turns,
        "mean_footprint_tokens": round(footprint), "largest_footprint_tokens": largest,
        "first_turn_index_tokens": first_turn,
        "dialogues_in_window": in_window,
        "prefill_by_turn_index": by_turn, "prefill_window": window,
        "ratio": round(by_turn / window, 2), "note": arch.note,
        "reply_tokens": reply_tokens, "cost_model": {"tflops": cost.tflops, "tbps": cost.tbps},
        "hours_by_turn_index": round(hours_by_turn, 3) if capacity else None,
        "hours_window": round(hours_window, 3) if capacity else None,
    }


def markdown(rows: list[dict[str, object]]) -> str:
    """The table docs/design.md shows."""
    lines = ["| model | KV KiB/token | weights GB | GPU GB | KV capacity (tokens) | "
             "dialogues in the window | prefill, per turn index (M tokens) | prefill, window "
             "(M tokens) | ratio | hours, per turn index | hours, window |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["fits"]:
            lines.append(f"| {r['model']} | {r['kv_kib_per_token']:.0f} | {r['weights_gb']} | "
                         f"{r['gpu_gb']:.0f} | {r['kv_capacity_tokens']:,} | does not fit one "
                         f"GPU (tensor parallel) | - | - | - | - | - |")
            continue
        lines.append(f"| {r['model']} | {r['kv_kib_per_token']:.0f} | {r['weights_gb']} | "
                     f"{r['gpu_gb']:.0f} | {r['kv_capacity_tokens']:,} | "
                     f"{r['dialogues_in_window']:,} | {r['prefill_by_turn_index'] / 1e6:.1f} | "
                     f"{r['prefill_window'] / 1e6:.1f} | {r['ratio']} | "
                     f"{r['hours_by_turn_index']:.2f} | {r['hours_window']:.2f} |")
    return "\n".join(lines)


def _arch(text: str) -> Arch:
    """``ALIAS:MODEL_ID:LAYERS:KV_HEADS:HEAD_DIM:PARAMS_B`` (``--model``)."""
    parts = text.split(":")
    try:
        if len(parts) != 6:
            raise ValueError
        alias, model_id, layers, heads, dim, params = parts
        return Arch(alias, model_id, int(layers), int(heads), int(dim), float(params),
                    "given with --model")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--model {text!r}: expected ALIAS:MODEL_ID:LAYERS:KV_HEADS:HEAD_DIM:PARAMS_B, e.g. "
            f"qwen3.6-27b:Qwen/Qwen3.6-27B:16:4:256:27 (LAYERS: those that keep every token)"
            ) from None


def build_parser() -> argparse.ArgumentParser:
    """Projection flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu-gb", type=float, nargs="+", default=[80.0, 141.0],
                        help="GPU memory sizes in GB (default: 80 141).")
    parser.add_argument("--utilization", type=float, default=0.85,
                        help="vLLM gpu_memory_utilization (default: %(default)s, Stage 03's).")
    parser.add_argument("--reserve-gb", type=float, default=4.0,
                        help="Activation peak vLLM sets aside, GB (default: %(default)s).")
    parser.add_argument("--reply-tokens", type=int, default=16,
                        help="Tokens of each reply carried into later turns (default: "
                             "%(default)s, an 'Answer: N' line with a little text).")
    parser.add_argument("--model", type=_arch, action="append", default=[],
                        help="Add a model: ALIAS:MODEL_ID:LAYERS:KV_HEADS:HEAD_DIM:PARAMS_B "
                             "(default: none beyond the built-in rows).")
    parser.add_argument("--gpu-tflops", type=float, default=GpuCost.tflops,
                        help="Sustained bf16 TFLOP/s in prefill (default: %(default)s, ~40 %% "
                             "of an H100's peak).")
    parser.add_argument("--gpu-tbps", type=float, default=GpuCost.tbps,
                        help="GPU memory bandwidth, TB/s (default: %(default)s, H100 SXM).")
    parser.add_argument("--out", default=None, help="JSON file (default: print only).")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Print the projection table; 0."""
    args = build_parser().parse_args(argv)
    bundle_mod = _load("_proj_stage03_bundle", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
    with tempfile.TemporaryDirectory(prefix="kv_projection_") as tmp:
        root = Path(tmp) / "bench"
        bundle_mod.write_bundle(root)
        for i, (key_id, item) in enumerate(bundle_mod.load_items(root).items()):
            # only the size counts (the image rule); a flat image encodes and verifies in a
            # fraction of the time random pixels take (the whole projection: 1.4 s, not 5 s)
            for rel in bundle_mod.image_relpaths(key_id, item):
                pixels = np.full((IMAGE_SIZE, IMAGE_SIZE, 3), i % 256, dtype=np.uint8)
                Image.fromarray(pixels).save(root / "chexpercept" / key_id / rel)
        cost = GpuCost(args.gpu_tflops, args.gpu_tbps)
        rows = [project(arch, root, gpu, args.utilization, args.reserve_gb, args.reply_tokens,
                        cost) for arch in (*ARCHS, *args.model) for gpu in args.gpu_gb]
    print(markdown(rows))
    if args.out:
        write_json_atomic(Path(args.out), {"utilization": args.utilization,
                                              "reserve_gb": args.reserve_gb,
                                              "reply_tokens": args.reply_tokens, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
