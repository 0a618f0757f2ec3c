"""Stage 03: evaluate a VLM (or a baseline) on the CheXpercept benchmark, one dialogue per case.

Reads ``<benchmark-dir>/chexpercept.json`` and ``<benchmark-dir>/chexpercept/<key_id>/...``;
writes ``<output-path>/<provider>_<model>[_no_thinking]/oracle_<setting>/`` with
``run_manifest.json``, ``records.jsonl`` (one line per answered turn), ``all_results.json``
(release schema, docs/evaluation_protocol.md, "Run folder") and ``logs/``. Re-running the same
command resumes; ``--overwrite`` starts afresh. Baseline providers (dummy, random, oracle) need
no API key file. ``--part i --total-parts n`` runs the cases whose key_id hashes to part ``i``
in ``.../oracle_<setting>/part_<i>_of_<n>/``; ``01_merge_parts.py`` combines the parts.
``--provider package.module:ClassName`` loads a plugin ``ChatModel`` subclass. ``--ray
[ADDRESS] --replicas N`` runs N replicas of a local engine on a Ray cluster into the same run
folder (README, "Running on a Ray cluster").

Example:
    python src/03_eval_vlm_on_chexpercept/00_eval.py --provider random --oracle_setting none
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from chexpercept import io
from chexpercept.config_schema import load_chexpercept_config
from chexpercept.errors import ConfigError
from chexpercept.evaluation import ORACLE_SETTINGS
from chexpercept.evaluation.api import cost_table, evaluate, select_cases
from chexpercept.evaluation.async_runner import DEFAULT_CONCURRENCY
from chexpercept.evaluation.replicas import RayReplicas
from chexpercept.evaluation.session import (
    DEFAULT_MAX_CONSECUTIVE_FAULTS,
    UNFINISHED_EXIT,
    RunSummary,
)
from utils.cli import (
    add_common_args,
    add_config_arg,
    non_negative_int,
    non_negative_seconds,
    positive_int,
    positive_seconds,
    progress,
    run_main,
    setup_logging,
)
from utils.llm.registry import (
    BASELINE_MODEL,
    BASELINE_PROVIDERS,
    DEFAULT_MODEL,
    PROVIDERS,
    default_model,
    is_plugin_spec,
    provider_class,
    provider_options,
)
from utils.llm.vllm_provider import ASYNC_ENGINE_CONCURRENCY
from utils.ray_pool import DEFAULT_MAX_RESTARTS, require_ray

logger = logging.getLogger("03_eval")

DEFAULT_BENCHMARK_DIR = io.repo_root() / "data" / "chexpercept"


def _provider_arg(text: str) -> str:
    if text in PROVIDERS or is_plugin_spec(text):
        return text
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from "
                                     f"{', '.join(PROVIDERS)}, or a plugin "
                                     f"package.module:ClassName)")


#: One line per provider for ``--help``.
_PROVIDER_HELP = {
    "dummy": "always option 1", "random": "seeded uniform answers",
    "oracle": "the ground truth, checks the chain",
    "opensource": "vLLM offline engine, GPU or vLLM's CPU build",
    "transformers": "any image-text-to-text model, CPU or GPU",
    "openai": "OpenAI, or any OpenAI-compatible server such as vLLM or SGLang with --base-url",
    "azure": "Azure OpenAI deployments", "gemini": "Gemini Developer API or Vertex AI",
}


def _provider_listing() -> str:
    return "; ".join(f"{name} ({_PROVIDER_HELP.get(name, 'provider')})" for name in PROVIDERS)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


def _json_object(text: str) -> dict[str, object]:
    shown = text if len(text) <= 80 else text[:77] + "..."
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at character {exc.pos}): "
                                         f"{shown!r}") from None
    except (ValueError, RecursionError) as exc:  # huge integers, absurd nesting
        raise argparse.ArgumentTypeError(f"not usable JSON ({type(exc).__name__}: "
                                         f"{str(exc)[:120]})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object ({{...}}), got {shown!r}")
    return value


#: Providers that call a hosted API: ``--model`` must be given (no silent default).
API_PROVIDERS = ("openai", "azure", "gemini")
#: Provider flags and the providers that take them (others refuse them with a message).
_FLAG_PROVIDERS = {
    "extra_body": ("--extra-body", ("openai", "azure")),
    "max_image_side": ("--max-image-side", API_PROVIDERS),
    "max_image_pixels": ("--max-image-pixels", API_PROVIDERS),
    "server_wait": ("--server-wait", ("openai",)),
    "engine": ("--vllm-engine", ("opensource",)),
}


def check_provider_flags(args: argparse.Namespace, provider: str) -> None:
    """Refuse flags the chosen provider would ignore; require ``--model`` for API providers.

    Raises:
        ConfigError: Naming the flag and the providers that take it.
    """
    if is_plugin_spec(provider):
        return
    if provider in BASELINE_PROVIDERS and args.max_new_tokens is not None:
        raise ConfigError(f"--max-new-tokens: the {provider} baseline generates no text; drop "
                          f"the flag (it applies to opensource, transformers and the API "
                          f"providers)")
    for dest, (flag, takers) in _FLAG_PROVIDERS.items():
        if getattr(args, dest) is not None and provider not in takers:
            raise ConfigError(f"{flag} applies to --provider {' / '.join(takers)}, not "
                              f"{provider}")
    if args.server_wait is not None and provider == "openai" and not args.base_url:
        raise ConfigError("--server-wait applies to a server given with --base-url "
                          "(api.openai.com is not waited for)")
    if provider in API_PROVIDERS and not args.model and not args.validate_only:
        example = {"gemini": "gemini-3.1-pro-preview"}.get(provider, "gpt-5.4")
        raise ConfigError(f"--provider {provider} needs --model (the model or deployment to "
                          f"call, e.g. --model {example}"
                          + ("; for an OpenAI-compatible server, the name it serves)"
                             if provider == "openai" else ")"))


def _add_local_model_args(parser: argparse.ArgumentParser) -> None:
    """Flags of the local providers (opensource = vLLM, transformers); others ignore them."""
    group = parser.add_argument_group("local models (--provider opensource / transformers)")
    group.add_argument("--model-path", "--model_path", dest="model_path", default=None,
                       help="Local model folder to load instead of the alias's HF id; the "
                            "alias keeps its settings (default: none, the HF id).")
    group.add_argument("--tensor-parallel-size", "--tensor_parallel_size",
                       dest="tensor_parallel_size", type=positive_int, default=None,
                       help="vLLM tensor parallel size (default: every visible GPU, capped "
                            "by the model's gpu_num).")
    group.add_argument("--max-model-len", "--max_model_len", dest="max_model_len",
                       type=positive_int, default=None,
                       help="vLLM context length in tokens (default: the model registry's, "
                            "65536 for most aliases).")
    group.add_argument("--gpu-memory-utilization", "--gpu_memory_utilization",
                       dest="gpu_memory_utilization", type=_fraction, default=None,
                       help="Fraction of GPU memory vLLM may use, in (0, 1]; with vLLM's CPU "
                            "build, the fraction of the machine's memory (default: 0.85 on "
                            "GPU, 0.5 on CPU).")
    group.add_argument("--vllm-engine", "--vllm_engine", dest="engine",
                       choices=("batched", "async"), default=None,
                       help="opensource: 'batched' sends the next turn of every case in a "
                            "window of dialogues that fit the KV cache in one LLM.chat call; "
                            "'async' drives vLLM's asynchronous engine, each case's next "
                            "turn submitted as soon as its previous one is answered (no turn "
                            "barrier; --concurrency requests in flight, default 256). Both give "
                            "the same greedy answers (default: batched).")
    group.add_argument("--batch-size", "--batch_size", dest="batch_size", type=positive_int,
                       default=None,
                       help="transformers: conversations per generate call (default: 8; "
                            "Hulu-Med: 1).")
    group.add_argument("--device", default=None,
                       help="transformers device; choices: cpu, cuda, cuda:N, auto (default: "
                            "auto when CUDA and accelerate are available, else cuda if "
                            "available, else cpu).")


def _local_model_options(args: argparse.Namespace) -> dict[str, object]:
    """The local-provider flags that were given, as ``create_model`` options."""
    names = ("model_path", "tensor_parallel_size", "max_model_len", "gpu_memory_utilization",
             "batch_size", "device", "engine")
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def _add_api_args(parser: argparse.ArgumentParser) -> None:
    """Flags of the API providers (openai, azure, gemini); others ignore them."""
    group = parser.add_argument_group("API models (--provider openai / azure / gemini)")
    group.add_argument("--base-url", "--base_url", dest="base_url", default=None,
                       help="OpenAI-compatible server for --provider openai (vLLM serve, SGLang, "
                            "Ollama), e.g. http://localhost:8000/v1; a key is then optional "
                            "(default: api.openai.com).")
    group.add_argument("--deployment", default=None,
                       help="Azure deployment name (default: the --model value).")
    group.add_argument("--api-keys", "--api_keys", dest="api_keys", default=None,
                       help="api_keys.yaml, read only when the provider's key is not in the "
                            "environment (default: api_info/api_keys.yaml in the repository).")
    group.add_argument("--concurrency", type=positive_int, default=None,
                       help=f"Requests in flight for API providers and for --vllm-engine "
                            f"async (default: --base-url on a vLLM server: as many as keep the "
                            f"open dialogues in the server's KV cache, read from its /metrics "
                            f"(docs/design.md, 'Concurrency'); --vllm-engine async: "
                            f"{ASYNC_ENGINE_CONCURRENCY}; otherwise {DEFAULT_CONCURRENCY}).")
    group.add_argument("--max-retries", "--max_retries", dest="max_retries", type=int,
                       default=None,
                       help="Retries per request on 408/409/429/5xx, timeouts and connection "
                            "failures, >= 0; when they run out the turn gets no answer and its "
                            "case stays unfinished for a re-run (default: 6).")
    group.add_argument("--request-timeout", "--request_timeout", dest="request_timeout",
                       type=positive_seconds, default=None,
                       help="Per-attempt HTTP timeout in seconds (default: 600).")
    group.add_argument("--reasoning-effort", "--reasoning_effort", dest="reasoning_effort",
                       default=None,
                       help="openai/azure reasoning models: reasoning_effort (choices: none, "
                            "minimal, low, medium, high, xhigh); gemini 3: thinking_level "
                            "(choices: minimal, low, medium, high) (default: medium).")
    group.add_argument("--extra-body", "--extra_body", dest="extra_body", type=_json_object,
                       default=None,
                       help="openai/azure: a JSON object of further request fields sent with "
                            "every request, e.g. '{\"top_k\": 1}' for vLLM or SGLang; they "
                            "win over ours (temperature, seed), chat_template_kwargs are "
                            "merged; model, messages, stream, n, max_tokens, "
                            "max_completion_tokens and reasoning_effort are refused (flags set "
                            "them); recorded in the run manifest and part of its identity "
                            "(default: none).")
    group.add_argument("--max-image-side", "--max_image_side", dest="max_image_side",
                       type=positive_int, default=None,
                       help="Downscale images whose longest side exceeds N pixels before "
                            "sending them (Lanczos, PNG); recorded in the manifest (default: "
                            "the bundle's images as they are).")
    group.add_argument("--max-image-pixels", "--max_image_pixels", dest="max_image_pixels",
                       type=positive_int, default=None,
                       help="Downscale images with more than N pixels (width x height) before "
                            "sending them; recorded in the manifest (default: no bound).")
    group.add_argument("--server-wait", "--server_wait", dest="server_wait",
                       type=non_negative_seconds, default=None,
                       help="openai with --base-url: seconds to wait for a server that is "
                            "still starting before the first request; 0 checks once "
                            "(default: 900).")
    group.add_argument("--estimate-cost", "--estimate_cost", dest="estimate_cost",
                       action="store_true",
                       help="Print the expected API cost of the selected cases for --model and "
                            "every priced model (cfg/pricing.yaml), call no API, and exit "
                            "(default: off).")


def _api_options(args: argparse.Namespace, provider: str) -> dict[str, object]:
    """The API-provider flags that were given, as ``create_model`` options.

    ``--concurrency`` is a provider option only for the providers that take it (the API
    providers' request pool); for the others it sets the async runner's requests in flight
    (``evaluate(concurrency=...)``) and is not passed to the provider.
    """
    names = {"base_url": "base_url", "deployment": "deployment", "api_keys": "api_keys",
             "max_retries": "max_retries",
             "request_timeout": "timeout_s", "reasoning_effort": "reasoning_effort",
             "extra_body": "extra_body", "max_image_side": "max_image_side",
             "max_image_pixels": "max_image_pixels", "server_wait": "server_wait_s"}
    if "concurrency" in provider_options(provider_class(provider)):
        names["concurrency"] = "concurrency"
    return {option: getattr(args, flag) for flag, option in names.items()
            if getattr(args, flag) is not None}


def _add_ray_args(parser: argparse.ArgumentParser) -> None:
    """Flags of a run on a Ray cluster (README, "Running on a Ray cluster")."""
    group = parser.add_argument_group(
        "Ray cluster (pip install -e \".[ray]\"; --provider opensource / transformers, "
        "the baselines and plugins; not the API providers openai / azure / gemini, which "
        "already run --concurrency requests from one process)")
    group.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="Run --replicas replicas of the provider as Ray actors, each "
                            "holding one engine; the run folder is a one-engine run's. "
                            "ADDRESS: a head's host:port or ray://host:port, 'auto' (a running "
                            "cluster), 'local' (a new one-machine cluster); without it Ray's "
                            "rule: RAY_ADDRESS, else the cluster 'ray start' began here, else a "
                            "new local one (default: off).")
    group.add_argument("--replicas", type=positive_int, default=None,
                       help="Number of replicas with --ray (default: 1).")
    group.add_argument("--ray-max-restarts", dest="ray_max_restarts", type=non_negative_int,
                       default=DEFAULT_MAX_RESTARTS,
                       help="Restarts of a replica whose process or node died before the run "
                            "stops naming it; its turn batch is sent again (default: "
                            "%(default)s).")
    group.add_argument("--gpus-per-replica", dest="gpus_per_replica", type=float,
                       default=None,
                       help="GPUs each replica reserves (default: opensource: "
                            "--tensor-parallel-size, else the model's gpu_num, else 1; "
                            "transformers: 1 when the cluster has GPUs, else 0; others: 0).")
    group.add_argument("--cpus-per-replica", dest="cpus_per_replica", type=float,
                       default=1.0, help="CPUs each replica reserves (default: %(default)s).")


def ray_settings(args: argparse.Namespace) -> RayReplicas | None:
    """The ``--ray`` settings, or None without ``--ray``.

    Raises:
        ConfigError: For ``--replicas`` (or another replica flag) without ``--ray``.
        MissingDependencyError: With ``--ray`` when Ray is not installed (the install line).
    """
    if args.ray is None:
        if args.replicas is not None or args.gpus_per_replica is not None:
            raise ConfigError("--replicas / --gpus-per-replica need --ray (a Ray cluster); "
                              "without Ray, split the run with --part i --total-parts n")
        return None
    require_ray("--ray")
    return RayReplicas(address=args.ray or None, replicas=args.replicas or 1,
                       max_restarts=args.ray_max_restarts,
                       gpus_per_replica=args.gpus_per_replica,
                       cpus_per_replica=args.cpus_per_replica)


def build_parser() -> argparse.ArgumentParser:
    """The Stage 03 argument parser (release flag spellings, kebab aliases)."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="--seed defaults to the config's seed when --config is given, else 0.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, None)
    parser.add_argument("--benchmark-dir", "--benchmark_dir", dest="benchmark_dir",
                        default=str(DEFAULT_BENCHMARK_DIR),
                        help="Folder with chexpercept.json and chexpercept/ "
                             "(default: %(default)s).")
    parser.add_argument("--output-path", "--output_path", dest="output_path", default=None,
                        help="Root of run folders (default: the config's "
                             "eval_vlm_on_chexpercept.output_path, else "
                             f"{io.stage_output_dir('03')}).")
    parser.add_argument("--provider", type=_provider_arg, default="opensource",
                        help="Model provider (default: %(default)s). Providers: "
                             f"{_provider_listing()}; or a plugin package.module:ClassName "
                             "naming an importable utils.llm.base.ChatModel subclass.")
    parser.add_argument("--model", default=None,
                        help=f"Model alias or id; required for {'/'.join(API_PROVIDERS)} "
                             f"(default: '{BASELINE_MODEL}' for "
                             f"{'/'.join(BASELINE_PROVIDERS)}, '{DEFAULT_MODEL}' for "
                             f"opensource/transformers).")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="Evaluate only the first N cases in JSON order (default: all).")
    parser.add_argument("--per_path_limit", "--per-path-limit", dest="per_path_limit",
                        type=positive_int, default=None,
                        help="First N cases of each path (lesion_free, revision_free, "
                             "revision_required); overrides --limit (default: no limit).")
    parser.add_argument("--debug", action="store_true",
                        help="Use the dummy provider (always answers 1) (default: off).")
    parser.add_argument("--oracle_setting", "--oracle-setting", dest="oracle_setting",
                        choices=ORACLE_SETTINGS, default="implicit",
                        help="Oracle setting (default: %(default)s; choices: %(choices)s).")
    parser.add_argument("--no-thinking", "--no_thinking", dest="no_thinking",
                        action="store_true",
                        help="Disable thinking where the provider supports it (vLLM and "
                             "OpenAI-compatible servers: chat-template argument "
                             "enable_thinking=false; OpenAI reasoning models and Gemini: "
                             "their lowest reasoning effort or thinking level); the run folder "
                             "gets a _no_thinking suffix (default: off).")
    parser.add_argument("--max-new-tokens", "--max_new_tokens", dest="max_new_tokens",
                        type=positive_int, default=None,
                        help="Output-token cap per turn for every provider that generates "
                             "(vLLM max_tokens, transformers max_new_tokens, OpenAI "
                             "max_tokens / max_completion_tokens, Gemini max_output_tokens); "
                             "refused for the baselines (default: 8192).")
    parser.add_argument("--resume", action="store_true",
                        help="Accepted for compatibility: runs always resume (default: off).")
    parser.add_argument("--save-every", "--save_every", dest="save_every", type=positive_int,
                        default=10,
                        help="Rewrite all_results.json after N newly finished cases "
                             "(default: %(default)s).")
    parser.add_argument("--validate-only", "--validate_only", dest="validate_only",
                        action="store_true",
                        help="Only check the benchmark bundle (the selected cases: every "
                             "image exists and opens, options and answers consistent), then "
                             "exit (default: off).")
    parser.add_argument("--overwrite", action="store_true",
                        help="Delete this run folder's manifest, records and results and start "
                             "afresh (default: off, resume).")
    parser.add_argument("--give-up-unanswered", "--give_up_unanswered",
                        dest="give_up_unanswered", action="store_true",
                        help="Do not ask again the turns that got no answer (a fault: network, "
                             "server) in an earlier invocation, and exit 0 although their cases "
                             "are unfinished; Stage 04 counts them as missing, never as wrong "
                             "(default: off: a re-run asks them again and a run that ends with "
                             "unfinished cases exits 3).")
    parser.add_argument("--max-consecutive-faults", "--max_consecutive_faults",
                        dest="max_consecutive_faults", type=int,
                        default=DEFAULT_MAX_CONSECUTIVE_FAULTS,
                        help="Stop the run after N requests in a row got no answer (the server "
                             "or the network is down); 0 never stops (default: %(default)s).")
    _add_local_model_args(parser)
    _add_api_args(parser)
    _add_ray_args(parser)
    add_common_args(parser, seed=True, parts=True)
    return parser


def _from_config(args: argparse.Namespace) -> tuple[str | Path, int]:
    """The output path and the seed: the flags, else ``--config``'s, else the defaults.

    Also exports the config's ``huggingface.hf_home`` / ``hf_hub_cache`` as ``HF_HOME`` /
    ``HF_HUB_CACHE`` for the model loaders.
    """
    config = load_chexpercept_config(args.config) if args.config else None
    if config is not None:
        for var, value in (("HF_HOME", config.huggingface.hf_home),
                           ("HF_HUB_CACHE", config.huggingface.hf_hub_cache)):
            if value:
                os.environ[var] = value
    output_path = args.output_path or (
        config.eval_vlm_on_chexpercept.output_path if config else None) or \
        io.stage_output_dir("03", config.path.work_dir if config else None)
    seed = args.seed if args.seed is not None else (config.seed if config else 0)
    return output_path, seed


def _check_only(args: argparse.Namespace, provider: str, selection: dict[str, object]) -> int:
    """``--validate-only`` / ``--estimate-cost``: check the bundle (and price it); no request."""
    cases = select_cases(args.benchmark_dir, **selection)
    if args.estimate_cost:
        print(cost_table(cases, args.model or default_model(provider)))
    else:
        logger.info("benchmark bundle %s is valid: %d case(s) checked", args.benchmark_dir,
                    len(cases))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run Stage 03; returns the exit code."""
    args = build_parser().parse_args(argv)
    show_progress = not args.no_progress
    setup_logging(args.log_level, None, progress=show_progress)
    output_path, seed = _from_config(args)
    provider = "dummy" if args.debug else args.provider
    check_provider_flags(args, provider)
    ray = ray_settings(args)
    if args.max_retries is not None and args.max_retries < 0:
        raise ConfigError(f"--max-retries must be >= 0, got {args.max_retries}")
    selection = {"limit": args.limit, "per_path_limit": args.per_path_limit,
                 "part": args.part, "total_parts": args.total_parts}
    if args.validate_only or args.estimate_cost:
        return _check_only(args, provider, selection)

    def start_log(run_dir: Path) -> None:
        logger.info("log: %s", setup_logging(args.log_level, run_dir / "logs", name="eval",
                                             progress=show_progress))

    summary = evaluate(
        args.benchmark_dir, provider=provider, output_path=output_path, model=args.model,
        oracle_setting=args.oracle_setting, no_thinking=args.no_thinking, seed=seed,
        **selection, save_every=args.save_every, overwrite=args.overwrite,
        concurrency=args.concurrency, max_new_tokens=args.max_new_tokens,
        max_consecutive_faults=args.max_consecutive_faults,
        give_up_unanswered=args.give_up_unanswered, progress=progress, on_run_dir=start_log,
        ray=ray,
        provider_options={**_local_model_options(args), **_api_options(args, provider)})
    logger.info("%s", summary.line())
    return unfinished_exit_code(summary)


def unfinished_exit_code(summary: RunSummary) -> int:
    """0 when every selected case finished (or the rest were given up), else 3 with one line."""
    if summary.given_up:
        logger.warning("--give-up-unanswered: %d case(s) left unfinished (a turn got no "
                       "answer); all_results.json marks them and Stage 04 counts them as "
                       "missing", len(summary.given_up))
    message = summary.unfinished_message()
    if message is None:
        return 0
    print(f"error: {message}", file=sys.stderr)
    return UNFINISHED_EXIT


def run() -> int:
    """Run the console command ``chexpercept-eval`` (:func:`main` under ``run_main``)."""
    return run_main(main)
