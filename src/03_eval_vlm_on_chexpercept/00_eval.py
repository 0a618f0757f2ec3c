"""Stage 03: evaluate a VLM (or a baseline) on the CheXpercept benchmark, one dialogue per case.

Reads ``<benchmark-dir>/chexpercept.json`` and ``<benchmark-dir>/chexpercept/<key_id>/...``;
writes ``<output-path>/<provider>_<model>[_no_thinking]/oracle_<setting>/`` with
``run_manifest.json``, ``records.jsonl`` (one line per answered turn), ``all_results.json``
(release schema, original_release_spec.md section 5.8) and ``logs/``. Re-running the same
command resumes; ``--overwrite`` starts afresh. Baseline providers (dummy, random, oracle) need
no API key file.

Example:
    python src/03_eval_vlm_on_chexpercept/00_eval.py --provider random --oracle_setting none
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from chexpercept import io
from chexpercept.evaluation import (
    ORACLE_SETTINGS,
    EvalSettings,
    load_bundle,
    run_evaluation,
    select_key_ids,
    validate_bundle,
)
from chexpercept.schema import load_chexpercept_config
from utils.cli import add_common_args, add_config_arg, progress, run_main, setup_logging
from utils.llm.registry import (
    BASELINE_MODEL,
    BASELINE_PROVIDERS,
    DEFAULT_MODEL,
    PROVIDERS,
    create_model,
    default_model,
    provider_class,
)

logger = logging.getLogger("03_eval")

DEFAULT_BENCHMARK_DIR = io.repo_root() / "data" / "chexpercept"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


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
    parser.add_argument("--provider", choices=list(PROVIDERS), default="opensource",
                        help="Model provider (default: %(default)s; choices: %(choices)s). "
                             f"Available in this version: {', '.join(BASELINE_PROVIDERS)}.")
    parser.add_argument("--model", default=None,
                        help=f"Model alias or id (default: '{BASELINE_MODEL}' for "
                             f"{'/'.join(BASELINE_PROVIDERS)}, else '{DEFAULT_MODEL}').")
    parser.add_argument("--limit", type=_positive_int, default=None,
                        help="Evaluate only the first N cases in JSON order (default: all).")
    parser.add_argument("--per_path_limit", "--per-path-limit", dest="per_path_limit",
                        type=_positive_int, default=None,
                        help="First N cases of each path (lesion_free, revision_free, "
                             "revision_required); overrides --limit (default: no limit).")
    parser.add_argument("--debug", action="store_true",
                        help="Use the dummy provider (always answers 1) (default: off).")
    parser.add_argument("--oracle_setting", "--oracle-setting", dest="oracle_setting",
                        choices=ORACLE_SETTINGS, default="implicit",
                        help="Oracle setting (default: %(default)s; choices: %(choices)s).")
    parser.add_argument("--no-thinking", "--no_thinking", dest="no_thinking",
                        action="store_true",
                        help="Disable thinking where the provider supports it; the run folder "
                             "gets a _no_thinking suffix (default: off).")
    parser.add_argument("--resume", action="store_true",
                        help="Accepted for compatibility: runs always resume (default: off).")
    parser.add_argument("--save-every", "--save_every", dest="save_every", type=_positive_int,
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
    add_common_args(parser, seed=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run Stage 03; returns the exit code."""
    args = build_parser().parse_args(argv)
    show_progress = not args.no_progress
    setup_logging(args.log_level, None, progress=show_progress)
    config = load_chexpercept_config(args.config) if args.config else None
    if config is not None:
        for var, value in (("HF_HOME", config.huggingface.hf_home),
                           ("HF_HUB_CACHE", config.huggingface.hf_hub_cache)):
            if value:
                os.environ[var] = value
    provider = "dummy" if args.debug else args.provider
    model_name = args.model or default_model(provider)
    seed = args.seed if args.seed is not None else (config.seed if config else 0)
    output_path = args.output_path or (
        config.eval_vlm_on_chexpercept.output_path if config else None) or \
        io.stage_output_dir("03", config.path.work_dir if config else None)
    if not args.validate_only:
        provider_class(provider)  # fail fast on an unavailable provider, before any work

    bundle = load_bundle(args.benchmark_dir)
    key_ids = select_key_ids(bundle, limit=args.limit, per_path_limit=args.per_path_limit)
    cases = validate_bundle(bundle, key_ids)
    if args.validate_only:
        logger.info("benchmark bundle %s is valid: %d case(s) checked", bundle.layout.root,
                    len(cases))
        return 0

    run_dir = io.eval_run_dir(output_path, provider, model_name, args.oracle_setting,
                              no_thinking=args.no_thinking)
    log_path = setup_logging(args.log_level, run_dir / "logs", name="eval",
                             progress=show_progress)
    logger.info("provider %s, model %s, oracle %s, %d case(s); log: %s", provider, model_name,
                args.oracle_setting, len(cases), log_path)
    model = create_model(provider, model_name, seed=seed, no_thinking=args.no_thinking)
    settings = EvalSettings(provider=provider, model=model_name,
                            oracle_setting=args.oracle_setting, no_thinking=args.no_thinking,
                            seed=seed, save_every=args.save_every)
    try:
        summary = run_evaluation(bundle, cases, model, settings, run_dir,
                                 overwrite=args.overwrite, progress=progress)
    finally:
        model.close()
    logger.info("%s", summary.line())
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
