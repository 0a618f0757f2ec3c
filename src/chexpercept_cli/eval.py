"""Stage 03: evaluate a VLM (or a baseline) on the CheXpercept benchmark, one dialogue per case.

Reads ``<benchmark-dir>/chexpercept.json`` and ``<benchmark-dir>/chexpercept/<key_id>/...``;
writes ``<output-path>/<provider>_<model>[_no_thinking]/oracle_<setting>/`` with
``run_manifest.json``, ``records.jsonl`` (one line per answered turn), ``all_results.json``
(release schema, docs/evaluation_protocol.md, "Run folder") and ``logs/``. Re-running the same
command resumes; ``--overwrite`` starts afresh. Baseline providers need no API key file.
``--part i --total-parts n`` runs the cases whose key_id hashes to part ``i`` in
``.../oracle_<setting>/part_<i>_of_<n>/``; ``01_merge_parts.py`` combines the parts.
``--provider package.module:ClassName`` loads a plugin ``ChatModel`` subclass. ``--ray
[ADDRESS] --replicas N`` runs N replicas of a local engine on a Ray cluster into the same run
folder (docs/ray.md). The provider flags are made from the providers' config classes and
mapped by one rule (``utils.llm.registry.flag_options``; docs/architecture.md, "Provider
capabilities").

Example:
    python src/03_eval_vlm_on_chexpercept/00_eval.py --provider random --oracle_setting none
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chexpercept.config_schema import load_chexpercept_config
from chexpercept.errors import ConfigError
from chexpercept.evaluation.api import cost_table, evaluate, select_cases
from chexpercept.evaluation.async_runner import DEFAULT_CONCURRENCY
from chexpercept.evaluation.judge import DEFAULT_AUDIT_RATE
from chexpercept.evaluation.option_order import OPTION_ORDERS
from chexpercept.evaluation.replicas import RayReplicas
from chexpercept.evaluation.reply_cap import MIN_REPLY_CHARS, REPLY_CHARS_PER_TOKEN
from chexpercept.evaluation.session import (
    DEFAULT_MAX_CONSECUTIVE_FAULTS,
    UNFINISHED_EXIT,
    RunSummary,
)
from chexpercept.layouts import ORACLE_SETTINGS, default_benchmark_dir, stage_output_dir
from utils.cli import (
    add_common_args,
    add_config_arg,
    add_ray_replica_args,
    positive_int,
    progress,
    run_main,
    setup_logging,
)
from utils.llm.registry import (
    BASELINE_MODEL,
    DEBUG_PROVIDER,
    DEFAULT_MODEL,
    DEFAULT_PROVIDER,
    PROVIDERS,
    ProviderFlag,
    default_model,
    flag_options,
    is_plugin_spec,
    provider_class,
    provider_flags,
    provider_listing,
    provider_options,
    providers_of_kind,
    providers_with_logprobs,
)
from utils.ray_pool import require_ray

logger = logging.getLogger("03_eval")

#: Environment variable naming a file that Stage 03 writes its effective output path into
#: (``--output-path``, else the config's ``eval_vlm_on_chexpercept.output_path``, else the
#: default), so ``eval_chexpercept.sh`` runs Stage 04 on the folder Stage 03 wrote.
OUTPUT_PATH_FILE_ENV = "CHEXPERCEPT_OUTPUT_PATH_FILE"


def _provider_arg(text: str) -> str:
    if text in PROVIDERS or is_plugin_spec(text):
        return text
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from "
                                     f"{', '.join(PROVIDERS)}, or a plugin "
                                     f"package.module:ClassName)")


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


def check_provider_flags(args: argparse.Namespace, provider: str) -> None:
    """What the provider flags need beyond one provider's options (``--model``, a server).

    Raises:
        ConfigError: For an API provider without ``--model``, or ``--server-wait`` without
            ``--base-url``.
    """
    if args.server_wait is not None and not args.base_url:
        raise ConfigError("--server-wait applies to a server given with --base-url "
                          "(a hosted API is not waited for)")
    if provider_class(provider).kind == "api" and not args.model and not args.validate_only:
        example = provider_class(provider).example_model
        raise ConfigError(f"--provider {provider} needs --model (the model or deployment to "
                          f"call{f', e.g. --model {example}' if example else ''}; for an "
                          f"OpenAI-compatible server, the name it serves)")


def _flag_type(spec: ProviderFlag) -> Any:
    """The argparse type of a provider flag: converted, then checked by its option's check.

    A nonsense value is so refused with one line before anything runs.
    """
    def parse(text: str) -> Any:
        if spec.value_type == "json":
            return _json_object(text)
        value = {"int": int, "float": float, "str": str}[spec.value_type](text)
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        problem = spec.check(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value
    parse.__name__ = spec.value_type  # argparse names the type in its message
    return parse


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def _add_provider_args(parser: argparse.ArgumentParser) -> None:
    """The providers' option flags, made from their config classes (``registry.provider_flags``).

    Each flag's help is its option's documentation and names the providers that take it; a
    flag given to another provider is refused (``registry.flag_options``).
    """
    group = parser.add_argument_group(
        "provider options (each names the providers it applies to; defaults and meanings: "
        "docs/engines.md, 'Provider settings')")
    for spec in provider_flags():
        alias = "--" + _dest(spec.flag)
        group.add_argument(spec.flag, *([alias] if alias != spec.flag else []),
                           dest=_dest(spec.flag), default=None,
                           type=_flag_type(spec),
                           help=f"{spec.help} (--provider {' / '.join(spec.providers)})"
                           .replace("%", "%%"))
    group.add_argument("--concurrency", type=positive_int, default=None,
                       help=f"Requests in flight for a provider that runs them concurrently "
                            f"(default: what the provider suggests, e.g. on a vLLM server as "
                            f"many as keep the open dialogues in its KV cache (docs/design.md, "
                            f"'Concurrency'), else {DEFAULT_CONCURRENCY}).")
    group.add_argument("--estimate-cost", "--estimate_cost", dest="estimate_cost",
                       action="store_true",
                       help="Print the expected API cost of the selected cases for --model and "
                            "every priced model (cfg/pricing.yaml), call no API, and exit "
                            "(default: off).")


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text!r}")
    return value


def _add_judge_args(parser: argparse.ArgumentParser) -> None:
    """``--judge``, ``--judge-base-url``, ``--judge-audit-rate`` (docs/parsing.md)."""
    group = parser.add_argument_group("judge model (optional; docs/parsing.md, 'Judge model')")
    group.add_argument("--judge", default=None, metavar="PROVIDER:MODEL",
                       help="A judge model that reads the replies the parser cannot read "
                            "(status unparseable; e.g. openai:gpt-4o), through any provider "
                            "of --provider's list, greedy and seeded from --seed; a reply it "
                            "reads gets status judged and the record keeps the judge's reply. "
                            "Part of the run's identity (default: none, no judge).")
    group.add_argument("--judge-base-url", "--judge_base_url", dest="judge_base_url",
                       default=None,
                       help="The judge's OpenAI-compatible server, e.g. "
                            "http://127.0.0.1:8000/v1 (default: none, the provider's API).")
    group.add_argument("--judge-audit-rate", "--judge_audit_rate", dest="judge_audit_rate",
                       type=_rate, default=DEFAULT_AUDIT_RATE,
                       help="Share of the replies the parser did read that also go to the "
                            "judge, drawn from --seed per case and turn, to measure how often "
                            "they agree; never changes a status or a score (default: "
                            "%(default)s; in [0, 1]).")


def provider_flag_options(args: argparse.Namespace, provider: str) -> dict[str, object]:
    """The provider flags that were given, as ``create_model`` options (one generic rule).

    ``--concurrency`` is also the provider's option where its config has one (an API
    provider's request pool).

    Raises:
        ConfigError: For a flag ``provider`` does not take (names the providers that do).
    """
    given = {spec.flag: getattr(args, _dest(spec.flag)) for spec in provider_flags()
             if getattr(args, _dest(spec.flag)) is not None}
    options = flag_options(provider, given)
    if args.concurrency is not None and "concurrency" in provider_options(
            provider_class(provider)):
        options["concurrency"] = args.concurrency
    return options


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
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # no prefixes: eval_chexpercept.sh reads --output-path, --oracle_setting and
        # --benchmark-dir from the same argv for Stage 04, and would miss '--output-p X'
        allow_abbrev=False)
    add_config_arg(parser, None)
    parser.add_argument("--benchmark-dir", "--benchmark_dir", dest="benchmark_dir",
                        default=str(default_benchmark_dir()),
                        help="Folder with chexpercept.json and chexpercept/ "
                             "(default: %(default)s).")
    parser.add_argument("--output-path", "--output_path", dest="output_path", default=None,
                        help="Root of run folders (default: the config's "
                             "eval_vlm_on_chexpercept.output_path, else "
                             f"{stage_output_dir('03')}).")
    parser.add_argument("--provider", type=_provider_arg, default=DEFAULT_PROVIDER,
                        help="Model provider (default: %(default)s). Providers: "
                             f"{provider_listing()}; or a plugin package.module:ClassName "
                             "naming an importable utils.llm.base.ChatModel subclass.")
    parser.add_argument("--model", default=None,
                        help=f"Model alias or id; required for "
                             f"{'/'.join(providers_of_kind('api'))} "
                             f"(default: '{BASELINE_MODEL}' for "
                             f"{'/'.join(providers_of_kind('baseline'))}, '{DEFAULT_MODEL}' for "
                             f"{'/'.join(providers_of_kind('engine'))}).")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="Evaluate only the first N cases in JSON order (default: all).")
    parser.add_argument("--per_path_limit", "--per-path-limit", dest="per_path_limit",
                        type=positive_int, default=None,
                        help="First N cases of each path (lesion_free, revision_free, "
                             "revision_required); overrides --limit (default: no limit).")
    parser.add_argument("--debug", action="store_true",
                        help=f"Use the {DEBUG_PROVIDER} provider "
                             f"({provider_class(DEBUG_PROVIDER).description}) (default: off).")
    parser.add_argument("--oracle_setting", "--oracle-setting", dest="oracle_setting",
                        choices=ORACLE_SETTINGS, default="implicit",
                        help="Oracle setting (default: %(default)s; choices: %(choices)s).")
    parser.add_argument("--option-order", "--option_order", dest="option_order",
                        choices=OPTION_ORDERS, default="release",
                        help="Order of each question's options: release (as the benchmark "
                             "lists them, the paper's protocol), shuffled (a permutation per "
                             "case and question seeded by --seed; answers mapped back) or "
                             "circular (every rotation of each single-choice question asked; "
                             "correct only if all are). Part of the run's identity; see "
                             "docs/evaluation_protocol.md, 'Option order' "
                             "(default: %(default)s).")
    parser.add_argument("--no-thinking", "--no_thinking", dest="no_thinking",
                        action="store_true",
                        help="Disable thinking where the provider supports it (vLLM and "
                             "OpenAI-compatible servers: chat-template argument "
                             "enable_thinking=false; OpenAI reasoning models and Gemini: "
                             "their lowest reasoning effort or thinking level); the run folder "
                             "gets a _no_thinking suffix (default: off).")
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
    parser.add_argument("--option-probs", "--option_probs", dest="option_probs",
                        action="store_true",
                        help="Record each answered turn's option probabilities from the "
                             "provider's token log-probabilities (providers that can return "
                             "them: " + ", ".join(providers_with_logprobs()) + "); Stage 04 "
                             "then reports AUROC for detection and contour evaluation "
                             "(docs/metrics.md, 'Option probabilities and AUROC'). Part of the "
                             "run's identity (default: off).")
    parser.add_argument("--samples", type=positive_int, default=1,
                        help="Ask each case K times as K independent dialogues, sample k with "
                             "its own seed derived from --seed (needs a provider that samples, "
                             "e.g. --temperature T > 0; docs/evaluation_protocol.md, "
                             "'Sampling'); part of the run's identity (default: %(default)s, "
                             "the release's protocol).")
    parser.add_argument("--max-reply-chars", "--max_reply_chars", dest="max_reply_chars",
                        type=positive_int, default=None,
                        help="Characters of one reply the run keeps: a longer reply (a broken "
                             "or hostile server) is recorded as truncated with its first N "
                             "characters and its length, and later turns replay only that part "
                             f"(default: {REPLY_CHARS_PER_TOKEN} per --max-new-tokens token, at "
                             f"least {MIN_REPLY_CHARS}; docs/engines.md, 'Reply cap').")
    _add_judge_args(parser)
    _add_provider_args(parser)
    add_ray_replica_args(parser)
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
        stage_output_dir("03", config.path.work_dir if config else None)
    seed = args.seed if args.seed is not None else (config.seed if config else 0)
    return output_path, seed


def record_output_path(output_path: str | Path) -> None:
    """Write ``output_path`` into the file :data:`OUTPUT_PATH_FILE_ENV` names, if it is set.

    ``eval_chexpercept.sh`` sets it, then gives Stage 04 the path Stage 03 resolved (a
    ``--config``'s ``output_path`` included) instead of re-reading the flags itself.
    """
    target = os.environ.get(OUTPUT_PATH_FILE_ENV)
    if target:
        Path(target).write_text(f"{Path(output_path).absolute()}\n", encoding="utf-8")


def _check_only(args: argparse.Namespace, provider: str, selection: dict[str, object],
                seed: int) -> int:
    """``--validate-only`` / ``--estimate-cost``: check the bundle (and price it); no request."""
    cases = select_cases(args.benchmark_dir, **selection)
    if args.estimate_cost:
        print(cost_table(cases, args.model or default_model(provider),
                         option_order=args.option_order, seed=seed,
                         samples=args.samples))
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
    record_output_path(output_path)  # for eval_chexpercept.sh's Stage 04
    provider = DEBUG_PROVIDER if args.debug else args.provider
    options = provider_flag_options(args, provider)  # a flag it does not take: refused now
    check_provider_flags(args, provider)
    ray = ray_settings(args)
    selection = {"limit": args.limit, "per_path_limit": args.per_path_limit,
                 "part": args.part, "total_parts": args.total_parts}
    if args.validate_only or args.estimate_cost:
        return _check_only(args, provider, selection, seed)

    def start_log(run_dir: Path) -> None:
        logger.info("log: %s", setup_logging(args.log_level, run_dir / "logs", name="eval",
                                             progress=show_progress))

    summary = evaluate(
        args.benchmark_dir, provider=provider, output_path=output_path, model=args.model,
        oracle_setting=args.oracle_setting, no_thinking=args.no_thinking, seed=seed,
        **selection, save_every=args.save_every, overwrite=args.overwrite,
        concurrency=args.concurrency, max_reply_chars=args.max_reply_chars,
        max_consecutive_faults=args.max_consecutive_faults,
        give_up_unanswered=args.give_up_unanswered, option_probs=args.option_probs,
        option_order=args.option_order,
        progress=progress, on_run_dir=start_log,
        ray=ray, samples=args.samples,
        provider_options=options, judge=args.judge, judge_base_url=args.judge_base_url,
        judge_audit_rate=args.judge_audit_rate,
        judge_options={"api_keys": args.api_keys} if args.api_keys else None)
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
