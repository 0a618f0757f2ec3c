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
folder from the eval log, for Stage 04 and the viewer.

This is the only module that imports inspect_ai at its top (the extra ``[inspect]``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chexpercept.errors import InputError, MissingDependencyError
from chexpercept.evaluation.cases import EvalCase, load_bundle, select_key_ids, validate_bundle
from chexpercept.evaluation.dialogue import ORACLE_SETTINGS, Dialogue, PreparedTurn
from chexpercept.evaluation.replay import (
    RecordedReply,
    answer_turn,
    case_result,
    replay_case,
    stage_flags,
)
from chexpercept.integrations.inspect_log import REPLIES_KEY, TASK_NAME

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
    return RecordedReply(request_id=rid, text=output.completion, status=status,
                         finish_reason=finish, usage=counts, user_text=prepared.text)


def case_sample(case: EvalCase) -> Sample:
    """The inspect sample of a case: its first turn as input, its identity as metadata."""
    first = case.turns[0]
    content: list[Content] = [ContentText(text=first.question)]
    content += [ContentImage(image=str(path)) for path in first.images]
    return Sample(input=[ChatMessageUser(content=content)], id=case.key_id,
                  metadata={"key_id": case.key_id, "lesion": case.lesion,
                            "qa_path": case.qa_path, "turns": len(case.turns)})


@solver
def chexpercept_dialogue(cases: Mapping[str, EvalCase], oracle_setting: str):  # noqa: ANN201
    """Ask every turn of the sample's case through ``generate``, as Stage 03 does."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        dialogue = Dialogue(cases[str(state.sample_id)], oracle_setting)
        replies: list[dict[str, Any]] = []
        inlined: dict[Path, str] = {}
        while not dialogue.finished:
            prepared = dialogue.prepare()
            state.messages = await chat_messages(prepared, inlined)
            state = await generate(state)
            reply = recorded_reply(state.output, prepared)
            answer_turn(dialogue, prepared, reply)
            replies.append(reply.to_json())
            state.store.set(REPLIES_KEY, replies)
        return state

    return solve


@scorer(metrics=[accuracy(), stderr()])
def chexpercept_scorer(cases: Mapping[str, EvalCase], oracle_setting: str):  # noqa: ANN201
    """1 when every stage of the case's path is correct; stage and turn flags in metadata."""

    async def score(state: TaskState, target: Target) -> Score:
        case = cases[str(state.sample_id)]
        where = f"sample {state.sample_id}"
        replies = [RecordedReply.from_json(r, where) for r in state.store.get(REPLIES_KEY, [])]
        dialogue = replay_case(case, oracle_setting, replies)
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
                limit: int | None = None) -> Task:
    """The CheXpercept benchmark as an inspect task (see the module docstring).

    Args:
        benchmark_dir: Folder with ``chexpercept.json`` and ``chexpercept/`` (a Stage 02
            export, e.g. ``outputs/sample_test/chexpercept``); a relative path is read from
            the folder ``inspect eval`` was started from (:func:`resolve_benchmark_dir`).
        oracle_setting: ``none``, ``implicit`` or ``explicit`` (docs/evaluation_protocol.md,
            "Oracle settings").
        limit: Only the first ``limit`` cases in JSON order (``00_eval.py --limit``).

    Raises:
        ValueError: On an unknown ``oracle_setting``.
        InputError: If the bundle's JSON or image folder is missing, or a relative
            ``benchmark_dir`` cannot be resolved (:func:`resolve_benchmark_dir`).
        SchemaError: If a case is invalid (every problem listed, as Stage 03 does).
    """
    if oracle_setting not in ORACLE_SETTINGS:
        raise ValueError(f"oracle_setting must be one of {ORACLE_SETTINGS}, "
                         f"got {oracle_setting!r}")
    bundle = load_bundle(resolve_benchmark_dir(benchmark_dir))
    key_ids = select_key_ids(bundle, limit=None if limit is None else int(limit))
    cases = {case.key_id: case for case in validate_bundle(bundle, key_ids)}
    return Task(dataset=MemoryDataset([case_sample(c) for c in cases.values()],
                                      name="chexpercept"),
                solver=chexpercept_dialogue(cases, oracle_setting),
                scorer=chexpercept_scorer(cases, oracle_setting),
                metadata={"benchmark_dir": str(bundle.layout.root),
                          "benchmark_json_sha256": bundle.json_sha256,
                          "oracle_setting": oracle_setting})
