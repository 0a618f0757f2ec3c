r"""Stage 03 in inspect_ai: the CheXpercept dialogue as an inspect task (reads a benchmark bundle).

Run it with inspect's CLI against any inspect model (docs/integrations.md, "inspect_ai")::

    inspect eval src/chexpercept/integrations/inspect_task.py \
        --model openai-api/local/NAME --model-base-url http://127.0.0.1:PORT/v1 \
        -T benchmark_dir=outputs/sample_test/chexpercept -T oracle_setting=implicit

One :class:`~inspect_ai.dataset.Sample` per case (the first turn's images and question as
input; ``key_id``, ``lesion`` and ``qa_path`` as metadata). The solver asks the case's turns
in Stage 03's order with Stage 03's own conversation
(:class:`chexpercept.evaluation.dialogue.Dialogue`: the same system prompt, the same oracle
rules; docs/evaluation_protocol.md, "Turn order", "Prompt structure", "Oracle settings"); every
turn is one call of inspect's ``generate``, and each reply is parsed and scored as in Stage 03
(:func:`chexpercept.evaluation.replay.answer_turn`) before the next turn is prepared. The
scorer replays the recorded replies through the same parser and scoring and reports, per case,
whether every stage of its path is correct, with each stage's flag (``detection_qa``,
``contour_evaluation_qa``, ``contour_revision_qa``, ``attribute_extraction_qa``) and each
turn's parse in the score's metadata. A turn that got no answer (inspect's retries ran out, or
the model returned an error) is an error of the sample, never a scored answer
(docs/engines.md, "Faults"). ``chexpercept.integrations.inspect_log`` writes a Stage 03 run
folder from the eval log, for Stage 04 and the viewer. Stage 03's ``--option-order``,
``--samples`` / ``--temperature``, ``--seed`` and ``--option-probs`` are the task arguments of
the same names (:func:`chexpercept`), planned and checked by Stage 03's own functions; what an
inspect provider cannot honour (per-request seeds, log-probabilities) is refused
(:func:`check_provider`).

This is the only module that imports inspect_ai at its top (the extra ``[inspect]``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chexpercept.errors import ConfigError, InputError, MissingDependencyError
from chexpercept.evaluation.cases import EvalCase, load_bundle, select_key_ids, validate_bundle
from chexpercept.evaluation.dialogue import Dialogue, PreparedTurn
from chexpercept.evaluation.option_order import apply_option_order, check_option_order
from chexpercept.evaluation.option_probs import OPTION_PROBS_TOP_K
from chexpercept.evaluation.replay import (
    RecordedReply,
    answer_turn,
    case_result,
    chat_logprobs,
    replay_case,
    stage_flags,
)
from chexpercept.integrations.inspect_log import REPLIES_KEY, TASK_NAME
from chexpercept.layouts import ORACLE_SETTINGS
from chexpercept.rng import sample_seed

try:
    from inspect_ai import Task, task
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import (
        ChatMessage,
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageUser,
        Content,
        ContentImage,
        ContentText,
        ModelOutput,
    )
    from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
    from inspect_ai.solver import Generate, TaskState, solver
    from inspect_ai.util import materialize_media
except ImportError as exc:  # pragma: no cover - the extra is in dev
    raise MissingDependencyError(
        f"the inspect_ai task needs the Python package 'inspect_ai', which is not installed "
        f"({exc}). Install it with: pip install -e \".[inspect]\"") from exc

#: inspect providers (the model name's first part) that send a seed with each request, so each
#: of ``samples`` K > 1 gets its own seed (inspect's ``GenerateConfig.seed``: OpenAI, Google,
#: Mistral, Groq, HuggingFace, vLLM; ``openai-api`` and ``sglang`` speak OpenAI's protocol).
SEEDED_PROVIDERS: tuple[str, ...] = ("openai", "openai-api", "google", "mistral", "groq", "hf",
                                     "vllm", "sglang")
#: inspect providers that return the top log-probabilities ``option_probs`` needs (inspect's
#: ``GenerateConfig.top_logprobs``: OpenAI, Grok, HuggingFace, vLLM, SGLang).
LOGPROB_PROVIDERS: tuple[str, ...] = ("openai", "openai-api", "grok", "hf", "vllm", "sglang")


def _flag(value: Any, name: str) -> bool:
    """A boolean task argument (``-T option_probs=true`` arrives as a bool or a string)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", "none", ""):
        return False
    raise ConfigError(f"task argument {name} must be true or false, got {value!r}")


def _integer(value: Any, name: str, minimum: int) -> int:
    """An integer task argument >= ``minimum`` (names the argument)."""
    try:
        number = int(str(value)) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise ConfigError(f"task argument {name} must be an integer >= {minimum}, "
                          f"got {value!r}")
    return number


def check_sampling(samples: int, temperature: float | None) -> None:
    """Refuse ``samples`` K > 1 without ``temperature`` T > 0 (never K equal greedy answers).

    Stage 03's rule for a provider that samples by temperature
    (``utils.llm.base.ChatModel.sampling_refusal``; docs/evaluation_protocol.md, "Sampling").

    Raises:
        ConfigError: Naming the task arguments.
    """
    if samples > 1 and (temperature is None or not temperature > 0):
        raise ConfigError(f"task argument samples={samples} needs temperature T > 0 (at "
                          f"temperature 0 every sample is the same greedy answer): add "
                          f"-T temperature=0.7, or use samples=1")


def check_provider(model: str, samples: int, option_probs: bool) -> None:
    """Refuse what the inspect provider of ``model`` cannot honour (per-request seeds, logprobs).

    Raises:
        ConfigError: For ``samples`` > 1 with a provider outside :data:`SEEDED_PROVIDERS`, or
            ``option_probs`` with one outside :data:`LOGPROB_PROVIDERS` (names both lists).
    """
    provider = str(model).split("/", 1)[0]
    if samples > 1 and provider not in SEEDED_PROVIDERS:
        raise ConfigError(f"samples={samples}: inspect's {provider!r} provider sends no seed "
                          f"per request, so the K samples' seeds Stage 03 records could not be "
                          f"honoured; providers that can: {', '.join(SEEDED_PROVIDERS)}")
    if option_probs and provider not in LOGPROB_PROVIDERS:
        raise ConfigError(f"option_probs: inspect's {provider!r} provider cannot return token "
                          f"log-probabilities (docs/metrics.md, 'Option probabilities and "
                          f"AUROC'); providers that can: {', '.join(LOGPROB_PROVIDERS)}")


def resolve_benchmark_dir(benchmark_dir: str | Path) -> Path:
    """``benchmark_dir`` as given to the task, a relative one resolved where inspect was run.

    inspect runs a task file from the file's own folder (it changes the working directory to
    ``src/chexpercept/integrations/`` before the task function is called), so a relative path
    would be read from there. A relative ``benchmark_dir`` is resolved against the directory
    ``inspect eval`` was started from instead: the shell's ``PWD``, which a change of directory
    inside Python does not alter (docs/integrations.md, "inspect_ai").

    Args:
        benchmark_dir: The ``-T benchmark_dir=...`` value.

    Returns:
        An absolute path (``~`` expanded).

    Raises:
        InputError: If the path is relative and ``PWD`` is not set to an absolute folder, or
            the resolved folder does not exist (says to give an absolute path).
    """
    path = Path(benchmark_dir).expanduser()
    if path.is_absolute():
        return path
    invoked = os.environ.get("PWD", "")
    hint = (f"give an absolute path, e.g. -T benchmark_dir=\"$PWD/{benchmark_dir}\" "
            f"(inspect runs the task from {os.getcwd()})")
    if not invoked or not Path(invoked).is_absolute() or not Path(invoked).is_dir():
        raise InputError(f"benchmark_dir {str(benchmark_dir)!r} is relative and the folder "
                         f"inspect was started from is unknown (PWD is not set); {hint}")
    resolved = Path(invoked) / path
    if not resolved.is_dir():
        raise InputError(f"benchmark_dir {str(benchmark_dir)!r}: no folder {resolved} (a "
                         f"relative benchmark_dir is read from the folder inspect was started "
                         f"from, PWD={invoked}); {hint}")
    return resolved


class TurnFault(RuntimeError):
    """A turn got no answer (an inspect model error); the sample fails, nothing is scored."""


async def chat_messages(prepared: PreparedTurn,
                        inlined: dict[Path, str]) -> list[ChatMessage]:
    """Stage 03's request of a prepared turn as inspect chat messages.

    The system prompt, then the whole history (earlier images included, implicit-oracle
    patches applied) and the new user turn; a user turn is its text followed by its images,
    each a data URI of the file's own bytes (inspect's ``materialize_media``), as Stage 03's
    openai provider sends them.

    Args:
        prepared: The turn (:meth:`chexpercept.evaluation.dialogue.Dialogue.prepare`).
        inlined: Image path -> data URI, filled as images are first seen (one per case).
    """
    out: list[ChatMessage] = []
    for message in prepared.request.messages:
        if message.role == "system":
            out.append(ChatMessageSystem(content=message.text))
        elif message.role == "assistant":
            out.append(ChatMessageAssistant(content=message.text))
        else:
            content: list[Content] = [ContentText(text=message.text)]
            for path in message.images:
                if path not in inlined:
                    inlined[path] = await materialize_media(str(path))
                content.append(ContentImage(image=inlined[path]))
            out.append(ChatMessageUser(content=content))
    return out


def recorded_reply(output: ModelOutput, prepared: PreparedTurn) -> RecordedReply:
    """One inspect model output as a Stage 03 reply (its status from inspect's stop reason).

    A refusal (``refusal`` content) is ``refused`` and a provider's content filter
    (``content_filter``) ``blocked``; ``max_tokens`` / ``model_length`` are the finish reason
    ``length``, which the parser turns into ``truncated`` when no answer was declared
    (docs/parsing.md, "Parser rules").

    Raises:
        TurnFault: If the output carries an error or no message (no answer).
    """
    rid = prepared.request.request_id
    if output.error or not output.choices:
        raise TurnFault(f"{rid}: no answer from the model ({output.error or 'no choices'})")
    message = output.message
    refused = isinstance(message.content, list) and any(
        isinstance(c, ContentText) and c.refusal for c in message.content)
    stop = output.stop_reason
    status = ("refused" if refused else "blocked" if stop == "content_filter" else "ok")
    finish = "length" if stop in ("max_tokens", "model_length") else stop
    usage = output.usage
    # inspect's input_tokens leave out cache reads and writes; Stage 03 counts every prompt
    # token as input, the cached ones among them (utils.llm.base.Usage)
    counts = {} if usage is None else {
        "input_tokens": usage.input_tokens + (usage.input_tokens_cache_read or 0)
        + (usage.input_tokens_cache_write or 0),
        "cached_input_tokens": usage.input_tokens_cache_read or 0,
        "output_tokens": usage.output_tokens,
        "thinking_tokens": usage.reasoning_tokens or 0}
    logprobs = output.choices[0].logprobs
    steps = None if logprobs is None else chat_logprobs(logprobs.model_dump())
    return RecordedReply(request_id=rid, text=output.completion, status=status,
                         finish_reason=finish, usage=counts, user_text=prepared.text,
                         top_logprobs=steps)


def sample_id(key_id: str, sample: int) -> str:
    """The inspect sample id of a case's sample: its key_id, ``<key_id>/sample<k>`` for k >= 1."""
    return f"{key_id}/sample{sample}" if sample else key_id


def case_sample(case: EvalCase, sample: int = 0) -> Sample:
    """The inspect sample of a case: its first turn as input, its identity as metadata.

    Args:
        case: The planned case (its turns as the option order shows them).
        sample: Sample index of ``samples`` K (0: the one-sample run's).
    """
    first = case.turns[0]
    content: list[Content] = [ContentText(text=first.question)]
    content += [ContentImage(image=str(path)) for path in first.images]
    return Sample(input=[ChatMessageUser(content=content)], id=sample_id(case.key_id, sample),
                  metadata={"key_id": case.key_id, "lesion": case.lesion,
                            "qa_path": case.qa_path, "turns": len(case.turns),
                            "sample": sample})


def sample_dialogue(cases: Mapping[str, EvalCase], oracle_setting: str, metadata: Mapping[str, Any],
                    seeds: list[int] | None) -> Dialogue:
    """The dialogue of an inspect sample: its case, and for ``samples`` K > 1 its seed."""
    k = int(metadata.get("sample", 0))
    return Dialogue(cases[str(metadata["key_id"])], oracle_setting, sample=k,
                    seed=None if seeds is None else seeds[k])


@solver
def chexpercept_dialogue(cases: Mapping[str, EvalCase], oracle_setting: str,  # noqa: ANN201
                         seeds: list[int] | None = None, temperature: float | None = None,
                         option_probs: bool = False):
    """Ask every turn of the sample's case through ``generate``, as Stage 03 does.

    Args:
        cases: key_id -> planned case (the option order applied).
        oracle_setting: ``none``, ``implicit`` or ``explicit``.
        seeds: The seed of each sample of ``samples`` K > 1 (``chexpercept.rng.sample_seed``),
            sent with each of its requests; None: inspect's ``--seed``.
        temperature: Sent with every request when given (else inspect's ``--temperature``).
        option_probs: Ask for the top :data:`OPTION_PROBS_TOP_K` log-probabilities.
    """
    config: dict[str, Any] = {} if temperature is None else {"temperature": temperature}
    if option_probs:
        config.update(logprobs=True, top_logprobs=OPTION_PROBS_TOP_K)

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        check_provider(str(state.model), 1 if seeds is None else len(seeds), option_probs)
        dialogue = sample_dialogue(cases, oracle_setting, state.metadata, seeds)
        replies: list[dict[str, Any]] = []
        inlined: dict[Path, str] = {}
        while not dialogue.finished:
            prepared = dialogue.prepare()
            state.messages = await chat_messages(prepared, inlined)
            seed = {} if dialogue.seed is None else {"seed": dialogue.seed}
            state = await generate(state, **config, **seed)
            reply = recorded_reply(state.output, prepared)
            answer_turn(dialogue, prepared, reply)
            replies.append(reply.to_json())
            state.store.set(REPLIES_KEY, replies)
        return state

    return solve


@scorer(metrics=[accuracy(), stderr()])
def chexpercept_scorer(cases: Mapping[str, EvalCase], oracle_setting: str,  # noqa: ANN201
                       seeds: list[int] | None = None):
    """1 when every stage of the case's path is correct; stage and turn flags in metadata."""

    async def score(state: TaskState, target: Target) -> Score:
        base = sample_dialogue(cases, oracle_setting, state.metadata, seeds)
        case = base.case
        where = f"sample {state.sample_id}"
        replies = [RecordedReply.from_json(r, where) for r in state.store.get(REPLIES_KEY, [])]
        dialogue = replay_case(case, oracle_setting, replies, sample=base.sample)
        if not dialogue.finished:
            raise TurnFault(f"{case.key_id}: {len(replies)} of {len(case.turns)} turns answered")
        result = case_result(dialogue, replies, str(state.model))
        stages = stage_flags(result)
        turns = {name: {"parsed": o.parsed.text, "status": o.parsed.status,
                        "correct": o.correct} for name, o in dialogue.outcomes.items()}
        return Score(value=CORRECT if all(stages.values()) else INCORRECT,
                     answer="; ".join(f"{n}={t['parsed']}" for n, t in turns.items()),
                     explanation=", ".join(f"{s}: {'correct' if c else 'wrong'}"
                                           for s, c in stages.items()),
                     metadata={"key_id": case.key_id, "qa_path": case.qa_path,
                               "oracle_setting": oracle_setting, "stages": stages,
                               "turns": turns})

    return score


@task(name=TASK_NAME)
def chexpercept(benchmark_dir: str, oracle_setting: str = "implicit",
                limit: int | None = None, option_order: str = "release", samples: int = 1,
                temperature: float | None = None, seed: int = 0,
                option_probs: bool = False) -> Task:
    """The CheXpercept benchmark as an inspect task (see the module docstring).

    The arguments after ``limit`` mean what ``00_eval.py``'s flags of the same names mean
    (docs/integrations.md, "inspect_ai"), checked by Stage 03's own checks.

    Args:
        benchmark_dir: Folder with ``chexpercept.json`` and ``chexpercept/`` (a Stage 02
            export, e.g. ``outputs/sample_test/chexpercept``); a relative path is read from
            the folder ``inspect eval`` was started from (:func:`resolve_benchmark_dir`).
        oracle_setting: ``none``, ``implicit`` or ``explicit`` (docs/evaluation_protocol.md,
            "Oracle settings").
        limit: Only the first ``limit`` cases in JSON order (``00_eval.py --limit``).
        option_order: ``release`` (default), ``shuffled`` or ``circular``
            (``--option-order``; docs/evaluation_protocol.md, "Option order"), planned by
            :func:`~chexpercept.evaluation.option_order.apply_option_order` with ``seed``.
        samples: K (``--samples``): each case asked K times as K independent dialogues, one
            inspect sample each (id ``<key_id>/sample<k>`` for k >= 1), sample k sent with
            seed :func:`chexpercept.rng.sample_seed` ``(seed, k)``; K > 1 needs
            ``temperature`` > 0 and a provider in :data:`SEEDED_PROVIDERS`.
        temperature: Sent with every request (``--temperature``); None: inspect's own
            ``--temperature`` (or the server's default).
        seed: The run seed (``--seed``, default 0): the shuffled orders and the sample seeds;
            with K = 1 the generation seed stays inspect's ``--seed``.
        option_probs: Ask for the top ``OPTION_PROBS_TOP_K`` (20) token
            log-probabilities (``--option-probs``; a provider in :data:`LOGPROB_PROVIDERS`);
            the converter computes each turn's ``option_probs`` from them as Stage 03 does.

    Raises:
        ValueError: On an unknown ``oracle_setting``.
        ConfigError: On an unknown ``option_order``, ``samples`` < 1, ``samples`` > 1 without
            ``temperature`` > 0, or a malformed ``seed`` / ``option_probs``; when a sample
            starts, on a provider that cannot honour ``samples`` or ``option_probs``
            (:func:`check_provider`).
        InputError: If the bundle's JSON or image folder is missing, or a relative
            ``benchmark_dir`` cannot be resolved (:func:`resolve_benchmark_dir`).
        SchemaError: If a case is invalid (every problem listed, as Stage 03 does).
    """
    if oracle_setting not in ORACLE_SETTINGS:
        raise ValueError(f"oracle_setting must be one of {ORACLE_SETTINGS}, "
                         f"got {oracle_setting!r}")
    check_option_order(option_order)
    samples = _integer(samples, "samples", 1)
    seed = _integer(seed, "seed", 0)
    option_probs = _flag(option_probs, "option_probs")
    temperature = None if temperature is None else float(temperature)
    check_sampling(samples, temperature)
    bundle = load_bundle(resolve_benchmark_dir(benchmark_dir))
    key_ids = select_key_ids(bundle, limit=None if limit is None else int(limit))
    cases = {case.key_id: apply_option_order(case, option_order, seed)
             for case in validate_bundle(bundle, key_ids)}
    seeds = [sample_seed(seed, k) for k in range(samples)] if samples > 1 else None
    return Task(dataset=MemoryDataset([case_sample(c, k) for c in cases.values()
                                       for k in range(samples)], name="chexpercept"),
                solver=chexpercept_dialogue(cases, oracle_setting, seeds, temperature,
                                            option_probs),
                scorer=chexpercept_scorer(cases, oracle_setting, seeds),
                metadata={"benchmark_dir": str(bundle.layout.root),
                          "benchmark_json_sha256": bundle.json_sha256,
                          "oracle_setting": oracle_setting, "option_order": option_order,
                          "samples": samples, "seed": seed, "option_probs": option_probs})
