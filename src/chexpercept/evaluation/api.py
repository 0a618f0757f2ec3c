"""Stage 03 as a Python API: select and validate cases, estimate cost, evaluate a provider.

``src/03_eval_vlm_on_chexpercept/00_eval.py`` parses its flags and calls these; a notebook or a
script can call them directly::

    from chexpercept.evaluation.api import evaluate
    summary = evaluate("data/chexpercept", provider="random", oracle_setting="none",
                       output_path="outputs/03")
    print(summary.line())

Everything the run writes is described in docs/evaluation_protocol.md, "Run folder".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from chexpercept.errors import ConfigError, SchemaError
from chexpercept.evaluation.async_runner import (
    DEFAULT_CONCURRENCY,
    OPEN_CASES_PER_REQUEST,
    run_evaluation_async,
)
from chexpercept.evaluation.budget import DialogueBudget, check_budget
from chexpercept.evaluation.cases import (
    Bundle,
    EvalCase,
    load_bundle,
    select_key_ids,
    validate_bundle,
)
from chexpercept.evaluation.cost_estimate import (
    call_shapes,
    estimate,
    estimate_all_priced,
    format_estimates,
)
from chexpercept.evaluation.judge import DEFAULT_AUDIT_RATE, Judge, create_judge
from chexpercept.evaluation.option_order import (
    OPTION_ORDERS,
    apply_option_order,
    check_option_order,
)
from chexpercept.evaluation.option_probs import OPTION_PROBS_TOP_K
from chexpercept.evaluation.replicas import RayReplicas, check_ray_provider, evaluate_on_ray
from chexpercept.evaluation.runner import run_evaluation
from chexpercept.evaluation.session import (
    DEFAULT_MAX_CONSECUTIVE_FAULTS,
    EvalSettings,
    RunSummary,
)
from chexpercept.evaluation.sharding import check_part, select_part
from chexpercept.layouts import eval_part_dir, eval_run_dir
from utils.llm.base import ChatModel
from utils.llm.registry import (
    create_model,
    default_model,
    provider_class,
    provider_label,
    providers_with_logprobs,
)

logger = logging.getLogger(__name__)


def select_cases(benchmark_dir: str | Path, *, limit: int | None = None,
                 per_path_limit: int | None = None, part: int | None = None,
                 total_parts: int = 1) -> list[EvalCase]:
    """Load the bundle and return the selected, validated cases (benchmark order).

    Args:
        benchmark_dir: Folder with ``chexpercept.json`` and ``chexpercept/``.
        limit: Only the first ``limit`` cases in JSON order (``--limit``).
        per_path_limit: At most this many cases per QA path (``--per_path_limit``).
        part: Part index of a sharded run (``--part``), or None.
        total_parts: Number of parts (``--total-parts``).

    Returns:
        The planned cases; every image exists and opens, options and answers agree.

    Raises:
        ConfigError: On a bad ``part`` / ``total_parts``.
        SchemaError: If the benchmark is empty or a case is invalid (names file and key_id).
    """
    return _select(benchmark_dir, limit, per_path_limit, part, total_parts)[1]


def _select(benchmark_dir: str | Path, limit: int | None, per_path_limit: int | None,
            part: int | None, total_parts: int) -> tuple[Bundle, list[EvalCase]]:
    """The loaded bundle and the selected, validated cases (see :func:`select_cases`)."""
    check_part(part, total_parts)
    bundle = load_bundle(benchmark_dir)
    if not bundle.items:
        raise SchemaError(f"{bundle.layout.json_path}: the benchmark holds no case")
    key_ids = select_key_ids(bundle, limit=limit, per_path_limit=per_path_limit)
    key_ids = select_part(key_ids, part, total_parts)  # by key_id hash (sharding.py)
    return bundle, validate_bundle(bundle, key_ids)


def cost_table(cases: Iterable[EvalCase], model: str, *, option_order: str = "release",
               seed: int = 0, samples: int = 1) -> str:
    """The expected API cost of ``cases`` for ``model`` and every priced model, as text.

    See docs/evaluation_protocol.md, "Cost"; ``option_order`` ``circular`` counts every
    rotation's call ("Option order"). With ``samples`` K (``--samples``) every call is made K
    times ("Sampling"), so the calls, tokens and costs are K times those of one sample.
    """
    cases = [apply_option_order(c, option_order, seed) for c in cases]
    shapes = call_shapes(cases) * samples
    chosen = estimate(shapes, model)
    rows = [chosen, *(e for e in estimate_all_priced(shapes) if e.model != chosen.price_key)]
    text = format_estimates(rows, len(cases))
    return text if samples == 1 else text.replace(
        " case(s) ", f" case(s) x {samples} samples ", 1)


def default_concurrency(model: ChatModel, budgets: Sequence[DialogueBudget]) -> int:
    """Requests in flight of the async runner when ``--concurrency`` is not given.

    The provider's suggestion (:meth:`~utils.llm.base.ChatModel.suggested_concurrency`) for the
    heaviest dialogue's footprint, its last request plus the output-token cap (``budgets[0]``,
    from :func:`~chexpercept.evaluation.budget.check_budget`), with
    :data:`~chexpercept.evaluation.async_runner.OPEN_CASES_PER_REQUEST` cases open per request
    in flight; without one, :data:`~chexpercept.evaluation.async_runner.DEFAULT_CONCURRENCY`
    (docs/design.md, "Concurrency").

    Args:
        model: The provider, after :meth:`~utils.llm.base.ChatModel.preflight`.
        budgets: The run's dialogue budgets, heaviest first (may be empty).

    Returns:
        Requests in flight, >= 1.
    """
    footprint = budgets[0].total_tokens if budgets else None
    suggested = model.suggested_concurrency(footprint, OPEN_CASES_PER_REQUEST)
    return DEFAULT_CONCURRENCY if suggested is None else max(1, int(suggested))


def run_folder(output_path: str | Path, provider: str, model: str, oracle_setting: str, *,
               no_thinking: bool = False, part: int | None = None,
               total_parts: int = 1, option_order: str = OPTION_ORDERS[0], samples: int = 1,
               seed: int = 0) -> Path:
    """The run folder of these settings (``<output>/<provider>_<model>[+...]/oracle_<setting>/``).

    A run in another option order, with K > 1 samples, or (for either) another seed than 0
    carries them in its name (:func:`run_name_protocol`), so each mode of one model has its own
    folder under one ``--output-path`` (docs/evaluation_protocol.md, "Run folder"). A part of a
    sharded run lives in ``.../part_<i>_of_<n>/`` (merged by
    :func:`chexpercept.evaluation.sharding.merge_parts`).
    """
    run_dir = eval_run_dir(output_path, provider_label(provider), model, oracle_setting,
                           no_thinking=no_thinking,
                           protocol=run_name_protocol(option_order, samples, seed))
    return eval_part_dir(run_dir, part, total_parts) if part is not None else run_dir


def run_name_protocol(option_order: str, samples: int, seed: int) -> tuple[tuple[str, str], ...]:
    """The ``+key=value`` suffixes of a run folder's name (``layouts.RUN_NAME_PROTOCOL_KEYS``).

    ``order`` for an option order other than ``release``, ``samples`` for K > 1, and ``seed``
    where the seed changes what is asked or drawn (either of those) and is not 0. A default
    run's folder keeps the release's name.

    Returns:
        ``(("order", "shuffled"), ("seed", "3"))``-like pairs; empty for a default run.
    """
    out: list[tuple[str, str]] = []
    if option_order != OPTION_ORDERS[0]:
        out.append(("order", option_order))
    if samples > 1:
        out.append(("samples", str(samples)))
    if out and seed != 0:
        out.append(("seed", str(seed)))
    return tuple(out)


def check_option_probs(cls: type[ChatModel], provider: str) -> None:
    """Refuse ``--option-probs`` for a provider that cannot return token log-probabilities.

    Asks the provider's declaration (``ChatModel.supports_logprobs``), never its name.

    Raises:
        ConfigError: Naming the provider and the registered providers that can.
    """
    if cls.supports_logprobs:
        return
    able = providers_with_logprobs()
    raise ConfigError(f"--option-probs: provider {provider} cannot return token "
                      f"log-probabilities (docs/metrics.md, 'Option probabilities and AUROC'); "
                      f"providers that can: {', '.join(able)}")


def check_samples(samples: int, provider: str, model: str, options: Mapping[str, Any], *,
                  part: int | None = None, ray: RayReplicas | None = None) -> None:
    """Refuse ``--samples K`` where it cannot be honoured: never silently fewer samples.

    See docs/evaluation_protocol.md, "Sampling".

    Args:
        samples: K (>= 1).
        provider: Provider registry name or plugin spec.
        model: Model name.
        options: The provider options (``temperature`` among them).
        part: ``--part`` of a sharded run, or None.
        ray: The ``--ray`` settings, or None.

    Raises:
        ConfigError: For K < 1; for K > 1 with a provider that cannot sample
            (``ChatModel.sampling_refusal``: no temperature, temperature 0, a reasoning model),
            a sharded run (the part merge carries sample 0 only) or Ray replicas (they
            rebuild one dialogue per case).
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ConfigError(f"--samples must be an integer >= 1, got {samples!r}")
    if samples == 1:
        return
    why = provider_class(provider).sampling_refusal(model, options)
    if why is not None:
        raise ConfigError(f"--samples {samples} with --provider {provider} (model {model}): "
                          f"{why}; use --samples 1")
    if part is not None:
        raise ConfigError(f"--samples {samples} cannot be sharded yet (--part/--total-parts: "
                          f"the part merge carries sample 0 only); run it unsharded")
    if ray is not None:
        raise ConfigError(f"--samples {samples} cannot run on Ray replicas yet (--ray: a "
                          f"replica rebuilds one dialogue per case); run it without --ray")


def evaluate(benchmark_dir: str | Path, *, provider: str, output_path: str | Path,
             model: str | None = None, oracle_setting: str = "implicit",
             no_thinking: bool = False, seed: int = 0, limit: int | None = None,
             per_path_limit: int | None = None, part: int | None = None,
             total_parts: int = 1, save_every: int = 10, overwrite: bool = False,
             concurrency: int | None = None, max_new_tokens: int | None = None,
             max_reply_chars: int | None = None,
             max_consecutive_faults: int = DEFAULT_MAX_CONSECUTIVE_FAULTS,
             give_up_unanswered: bool = False, option_probs: bool = False,
             option_order: str = "release",
             provider_options: Mapping[str, Any] | None = None,
             progress: Callable[..., Iterable[int]] | None = None,
             on_run_dir: Callable[[Path], Any] | None = None,
             ray: RayReplicas | None = None, samples: int = 1,
             judge: str | None = None, judge_base_url: str | None = None,
             judge_audit_rate: float = DEFAULT_AUDIT_RATE,
             judge_options: Mapping[str, Any] | None = None) -> RunSummary:
    """Evaluate a provider on the selected cases (or resume its run) and write the run folder.

    API providers (and ``--vllm-engine async``) run cases as concurrent pipelines; offline
    engines and baselines in batched calls (docs/design.md, "Batching"). Faults never become
    answers: a case whose turn got no answer is left unfinished and listed in the summary
    (docs/engines.md, "Faults").

    Args:
        benchmark_dir: Folder with ``chexpercept.json`` and ``chexpercept/``.
        provider: Provider registry name or plugin ``module:Class``.
        output_path: Root of run folders.
        model: Model alias or id (None: the provider's default).
        oracle_setting: ``none``, ``implicit`` or ``explicit``
            (docs/evaluation_protocol.md, "Oracle settings").
        no_thinking: The ``--no-thinking`` variant.
        seed: Run seed.
        limit: See :func:`select_cases`.
        per_path_limit: See :func:`select_cases`.
        part: See :func:`select_cases`.
        total_parts: See :func:`select_cases`.
        save_every: Rewrite ``all_results.json`` after this many newly finished cases.
        overwrite: Start the run folder afresh.
        concurrency: Requests in flight of the async runner (None: :func:`default_concurrency`,
            the provider's suggestion or 16).
        max_new_tokens: Output-token cap per turn (None: the provider's default).
        max_reply_chars: Characters of one reply the run keeps (``--max-reply-chars``; a
            longer reply is recorded as ``truncated`` with its first part; docs/engines.md,
            "Reply cap"); None: 8 per output token of the provider, at least 4096.
        max_consecutive_faults: Stop after this many requests in a row got no answer.
        give_up_unanswered: Do not ask again turns that got no answer earlier.
        option_probs: ``--option-probs``: ask the provider for the top
            :data:`~chexpercept.evaluation.option_probs.OPTION_PROBS_TOP_K` log-probabilities
            of each generated token (its ``top_logprobs`` option) and record each answered
            turn's option probabilities (docs/metrics.md, "Option probabilities and AUROC");
            part of the run's identity.
        option_order: ``release``, ``shuffled`` or ``circular`` (``--option-order``;
            docs/evaluation_protocol.md, "Option order").
        provider_options: Further options of the provider (``create_model``; an option it
            does not take is an error naming it).
        progress: Optional wrapper of the sync runner's turn loop.
        on_run_dir: Called with the run folder once the cases are valid and before the model
            is created (the CLI starts its log file there); nothing is written before.
        ray: Run N replicas of the provider on a Ray cluster (``--ray``/``--replicas``;
            :mod:`chexpercept.evaluation.replicas`); None runs one engine here. The run
            folder is the same either way.
        samples: Ask each case K times as K independent dialogues (``--samples``;
            docs/evaluation_protocol.md, "Sampling"); 1 is the release's protocol.
        judge: ``PROVIDER:MODEL`` of a judge model for the replies the parser cannot read
            (``--judge``; docs/parsing.md, "Judge model"); None (the default): no judge, and
            the run is exactly what it was before judges existed. Part of the run's identity.
        judge_base_url: The judge's OpenAI-compatible server (``--judge-base-url``), or None.
        judge_audit_rate: Share of ``ok`` replies also sent to the judge, drawn from ``seed``
            per key_id and turn (``--judge-audit-rate``, in [0, 1]).
        judge_options: Further options of the judge's provider, given where it takes them
            (``api_keys``).

    Returns:
        The run summary (``unfinished`` lists cases left without an answer).

    Raises:
        ConfigError: On bad settings, an unknown provider option, ``option_probs`` for a
            provider that cannot return log-probabilities (``supports_logprobs``), a run folder
            with another manifest, or ``samples`` > 1 where it cannot be honoured
            (:func:`check_samples`), a judge that cannot be made (a malformed spec, a
            provider that takes no base URL, an audit rate outside [0, 1]), judge settings
            without ``judge``, or a judge with Ray replicas.
        ProviderError: On a fault that stops the run (credentials, quota, unknown model, a
            first turn over the context, a dead server); ``EngineStartError`` for an offline
            engine that cannot start (raised before the run folder is opened).
        SchemaError: On an invalid bundle or corrupt records.
    """
    cls = provider_class(provider)  # fail fast on an unavailable provider, before any work
    if option_probs:
        check_option_probs(cls, provider)
        provider_options = {**dict(provider_options or {}), "top_logprobs": OPTION_PROBS_TOP_K}
    check_option_order(option_order)
    model_name = model or default_model(provider)
    check_samples(samples, provider, model_name, dict(provider_options or {}), part=part,
                  ray=ray)
    if ray is not None:
        check_ray_provider(provider, model_name, provider_options or {})
    check_judge(judge, judge_base_url, judge_audit_rate, ray)
    bundle, cases = _select(benchmark_dir, limit, per_path_limit, part, total_parts)
    for case in cases:  # a question whose options cannot be reordered fails before any start
        apply_option_order(case, option_order, seed)
    run_dir = run_folder(output_path, provider, model_name, oracle_setting,
                         no_thinking=no_thinking, part=part, total_parts=total_parts,
                         option_order=option_order, samples=samples, seed=seed)
    if on_run_dir is not None:
        on_run_dir(run_dir)
    generation = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
    options = {"seed": seed, "no_thinking": no_thinking, **generation,
               **dict(provider_options or {})}
    settings = EvalSettings(provider=provider, model=model_name, oracle_setting=oracle_setting,
                            no_thinking=no_thinking, seed=seed, save_every=save_every,
                            part=part, total_parts=total_parts, limit=limit,
                            per_path_limit=per_path_limit,
                            max_consecutive_faults=max_consecutive_faults,
                            give_up_unanswered=give_up_unanswered, option_probs=option_probs,
                            option_order=option_order, samples=samples,
                            max_reply_chars=max_reply_chars)
    if ray is not None:  # N replicas, each an actor holding one engine; same run folder
        return evaluate_on_ray(bundle, cases, settings, run_dir, ray, options=options,
                               overwrite=overwrite, progress=progress)
    judge_model = None if judge is None else create_judge(
        judge, seed=seed, audit_rate=judge_audit_rate, base_url=judge_base_url,
        options=judge_options)
    try:
        return _run_here(bundle, cases, provider, model_name, options, settings, run_dir,
                         judge_model, concurrency=concurrency, overwrite=overwrite,
                         progress=progress)
    finally:
        if judge_model is not None:
            judge_model.close()


def check_judge(judge: str | None, base_url: str | None, audit_rate: float,
                ray: RayReplicas | None) -> None:
    """Refuse judge settings that cannot be honoured, before any work.

    Raises:
        ConfigError: For ``--judge-base-url`` or a non-default ``--judge-audit-rate`` without
            ``--judge``, an audit rate outside [0, 1], or a judge with Ray replicas (a replica
            scores its own turns; not yet).
    """
    if judge is None:
        if base_url is not None or audit_rate != DEFAULT_AUDIT_RATE:
            raise ConfigError("--judge-base-url / --judge-audit-rate need --judge "
                              "PROVIDER:MODEL (docs/parsing.md, 'Judge model')")
        return
    if not 0.0 <= audit_rate <= 1.0:
        raise ConfigError(f"--judge-audit-rate must be in [0, 1], got {audit_rate}")
    if ray is not None:
        raise ConfigError("--judge cannot run on Ray replicas yet (--ray: a replica scores its "
                          "own turns); run it without --ray, or split it with --part i "
                          "--total-parts n")


def _run_here(bundle: Bundle, cases: Sequence[EvalCase], provider: str, model_name: str,
              options: Mapping[str, Any], settings: EvalSettings, run_dir: Path,
              judge: Judge | None, *, concurrency: int | None, overwrite: bool,
              progress: Callable[..., Iterable[int]] | None) -> RunSummary:
    """Create the provider (and start the judge), run the evaluation here, close the provider.

    Raises:
        ProviderError: As :func:`evaluate`.
    """
    chat_model = create_model(provider, model_name, **options)
    try:
        if judge is not None:  # a judge that cannot be reached fails before any request
            judge.model.preflight()
            judge.model.start()
        chat_model.preflight()  # API: wait for a starting server, check it serves the model
        budgets = check_budget(cases, chat_model)  # before the offline engine loads
        chat_model.start()  # an engine that cannot start leaves no manifest, no record
        logger.info("provider %s, model %s, oracle %s, %d case(s) -> %s", provider,
                    model_name, settings.oracle_setting, len(cases), run_dir)
        if chat_model.supports_async:  # API providers: per-case pipelines, no stage barrier
            if concurrency is None:  # the provider's suggestion, else the default
                concurrency = default_concurrency(chat_model, budgets)
            return run_evaluation_async(bundle, cases, chat_model, settings, run_dir,
                                        concurrency=concurrency, overwrite=overwrite,
                                        judge=judge)
        return run_evaluation(bundle, cases, chat_model, settings, run_dir,
                              overwrite=overwrite, progress=progress, judge=judge)
    finally:
        chat_model.close()
