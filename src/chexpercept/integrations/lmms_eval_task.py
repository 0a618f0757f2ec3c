"""Stage 03 as an lmms-eval task: a bundle's cases as docs, the dialogue as multi-round prompts.

The task files (``lmms_eval_tasks/chexpercept/*.yaml``, found with lmms-eval's
``--include_path``) name the functions of this module; docs/integrations.md, "lmms-eval", says
how to run it and exactly what differs from a Stage 03 run. The task's ``output_type`` is
lmms-eval's ``generate_until_multi_round``: the model class asks one round, then calls
:func:`doc_to_text` (simple models) or :func:`doc_to_messages` (chat models) with every reply
so far, and this module replays them through the project's own dialogue
(:func:`chexpercept.evaluation.replay.replay_case`: ``dialogue.py``'s oracle rules,
``parsing.py``, ``scoring.py``) to build the next turn, so each turn depends on the earlier
replies exactly as in Stage 03 (``none``: the model's own answers; ``implicit``: wrong ones
replaced by the ground truth; ``explicit``: the "Ground Truth Provided" paragraph).

- chat models (``is_simple = False``) get Stage 03's request as messages: the system prompt,
  every earlier user turn with its images and every earlier reply (as patched by the oracle);
- simple models take one user text and a list of images per round, so the same request is
  flattened into one text (:func:`flatten_request`) with all its images, in order.

Most lmms-eval model classes (its API ones included) have no multi-round generation; the
``chexpercept_flat_*`` tasks reach them through lmms-eval's ``generate_until_agentic``, in which
lmms-eval's evaluator asks each round through the class's ``generate_until`` and calls
:func:`doc_to_text_flat` after each: every class then gets the flattened request.

A round that comes back empty is what lmms-eval's API model classes return when a request
failed, so it is taken as no answer (a fault, docs/engines.md, "Faults"): the case stops there,
is left unscored and is counted under ``unfinished``, never as a wrong answer.

Docs come from the bundle named by ``$CHEXPERCEPT_BENCHMARK_DIR`` (the folder of
``chexpercept.json`` + ``chexpercept/``), read by the project's loader in
:func:`process_docs`. Nothing here imports lmms-eval; ``datasets`` is imported when the docs
are built.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chexpercept.errors import ConfigError, InputError, SchemaError
from chexpercept.evaluation.cases import EvalCase, load_bundle, validate_bundle
from chexpercept.evaluation.dialogue import (
    Dialogue,
    PreparedTurn,
    request_id,
)
from chexpercept.evaluation.replay import RecordedReply, case_result, replay_case, stage_flags
from chexpercept.layouts import ORACLE_SETTINGS
from utils.deps import require
from utils.imaging import load_image

#: Environment variable naming the bundle the task reads (docs/integrations.md, "lmms-eval").
BENCHMARK_DIR_ENV = "CHEXPERCEPT_BENCHMARK_DIR"

#: The key under which :func:`doc_to_text_flat` hands every reply of a case back to lmms-eval
#: (a ``generate_until_agentic`` task keeps only the last "reply" of a doc).
FLAT_REPLIES_KEY = "chexpercept_replies"

#: The per-stage metrics of :func:`process_results`: metric name -> the ``all_results.json``
#: section whose turns it scores (docs/evaluation_protocol.md, "Scoring").
STAGE_METRICS: dict[str, str] = {
    "detection": "detection_qa",
    "contour_evaluation": "contour_evaluation_qa",
    "contour_revision": "contour_revision_qa",
    "attribute_extraction": "attribute_extraction_qa",
}


@functools.lru_cache(maxsize=4)
def _cases(benchmark_dir: str) -> dict[str, EvalCase]:
    """key_id -> planned case of every case of the bundle, validated once per process."""
    return {case.key_id: case for case in validate_bundle(load_bundle(benchmark_dir))}


def benchmark_dir_from_env() -> Path:
    """The bundle folder named by ``$CHEXPERCEPT_BENCHMARK_DIR``, made absolute.

    Raises:
        ConfigError: If the variable is unset or empty.
    """
    value = os.environ.get(BENCHMARK_DIR_ENV, "").strip()
    if not value:
        raise ConfigError(f"the chexpercept lmms-eval task reads its cases from the bundle "
                          f"named by ${BENCHMARK_DIR_ENV}, which is not set: export "
                          f"{BENCHMARK_DIR_ENV}=/path/to/bundle (the folder holding "
                          f"chexpercept.json and chexpercept/)")
    return Path(value).expanduser().resolve()


def case_docs(benchmark_dir: str | Path) -> list[dict[str, Any]]:
    """One doc per case of the bundle, in the JSON's order.

    Args:
        benchmark_dir: The bundle folder (``chexpercept.json`` + ``chexpercept/``).

    Returns:
        Dicts with ``key_id``, ``lesion``, ``qa_path``, ``num_turns`` (turns of its path) and
        ``benchmark_dir`` (absolute, str).

    Raises:
        InputError: If the bundle's JSON or image folder is missing.
        SchemaError: If the bundle is invalid (every problem listed, as Stage 03 does).
    """
    root = str(Path(benchmark_dir).resolve())
    return [{"key_id": c.key_id, "lesion": c.lesion, "qa_path": c.qa_path,
             "num_turns": len(c.turns), "benchmark_dir": root}
            for c in _cases(root).values()]


def process_docs(dataset: Any) -> Any:
    """lmms-eval ``process_docs``: the bundle's cases, replacing the one-row stub file.

    Args:
        dataset: The split loaded from the task folder's ``bundle_stub.jsonl`` (ignored).

    Returns:
        A ``datasets.Dataset`` of :func:`case_docs` rows.

    Raises:
        ConfigError: If ``$CHEXPERCEPT_BENCHMARK_DIR`` is not set.
        InputError: If the bundle's JSON or image folder is missing.
        SchemaError: If the bundle is invalid.
    """
    del dataset
    datasets = require("datasets", "lmms", "the chexpercept lmms-eval task")
    return datasets.Dataset.from_list(case_docs(benchmark_dir_from_env()))


def case_of(doc: Mapping[str, Any]) -> EvalCase:
    """The planned case of a :func:`case_docs` row (its bundle read once per process).

    Raises:
        InputError: If the doc's key_id is not in its bundle.
    """
    cases = _cases(str(doc["benchmark_dir"]))
    if doc["key_id"] not in cases:
        raise InputError(f"{doc['key_id']}: not in {doc['benchmark_dir']}/chexpercept.json")
    return cases[doc["key_id"]]


def oracle_setting(kwargs: Mapping[str, Any] | None) -> str:
    """The task's ``lmms_eval_specific_kwargs.oracle_setting`` (default ``implicit``).

    Raises:
        ConfigError: For a value not in :data:`ORACLE_SETTINGS`.
    """
    setting = (kwargs or {}).get("oracle_setting", "implicit")
    if setting not in ORACLE_SETTINGS:
        raise ConfigError(f"lmms_eval_specific_kwargs.oracle_setting must be one of "
                          f"{ORACLE_SETTINGS}, got {setting!r}")
    return setting


def _reply_text(output: Any) -> str:
    """A round's raw text: lmms-eval hands strings (None or a result object from some models)."""
    if output is None:
        return ""
    text = getattr(output, "text", output)
    return text if isinstance(text, str) else str(text)


def replies_of(case: EvalCase, outputs: Sequence[Any]) -> tuple[list[RecordedReply], bool]:
    """The rounds' replies as recorded replies, up to the first empty one.

    Args:
        case: The case.
        outputs: The model's raw reply of each round so far, in turn order.

    Returns:
        The replies before the first empty round, and whether an empty round (no answer, a
        fault) stopped the case.

    Raises:
        ValueError: If there are more rounds than the case has turns.
    """
    if len(outputs) > len(case.turns):
        raise ValueError(f"{case.key_id}: {len(outputs)} replies for {len(case.turns)} turns")
    replies = []
    for turn, output in zip(case.turns, outputs, strict=False):
        text = _reply_text(output)
        if not text.strip():
            return replies, True
        replies.append(RecordedReply(request_id(case.key_id, turn.spec.name), text))
    return replies, False


def next_turn(doc: Mapping[str, Any], setting: str,
              outputs: Sequence[Any]) -> PreparedTurn | None:
    """The next turn after ``outputs``, as Stage 03 would ask it; None when the case is over.

    The case is over when every turn of its path has a reply or a round came back empty.
    """
    case = case_of(doc)
    replies, stopped = replies_of(case, outputs)
    dialogue = replay_case(case, setting, replies)
    return None if stopped or dialogue.finished else dialogue.prepare()


def _first_turn(doc: Mapping[str, Any], setting: str) -> PreparedTurn:
    return Dialogue(case_of(doc), setting).prepare()


def request_images(prepared: PreparedTurn) -> list[Any]:
    """Every image of the turn's request, in order, decoded by :func:`utils.imaging.load_image`.

    Returns:
        PIL images (mode ``L`` or ``RGB``): earlier turns' images first, as Stage 03 resends
        them (docs/evaluation_protocol.md, "Prompt structure").
    """
    return [load_image(path) for message in prepared.request.messages
            for path in message.images]


def flatten_request(prepared: PreparedTurn) -> str:
    """Stage 03's request as one user text, for lmms-eval's simple model classes.

    The system prompt, then each earlier turn as ``[Question k]`` and ``[Your answer k]`` (the
    reply as the oracle left it), then ``[Question n]`` and this turn's text. The request's
    images go along separately, in order.
    """
    messages = prepared.request.messages
    parts = [m.text for m in messages if m.role == "system"]
    turns = [m for m in messages if m.role != "system"]
    number = 0
    for message in turns:
        if message.role == "user":
            number += 1
            parts.append(f"[Question {number}]\n{message.text}")
        else:
            parts.append(f"[Your answer {number}]\n{message.text}")
    return "\n\n".join(parts)


def _chat_message(message: Any) -> dict[str, Any]:
    """One request message (role, text, image paths) in lmms-eval's chat format."""
    content: list[dict[str, Any]] = [{"type": "image", "url": load_image(path)}
                                     for path in message.images]
    content.append({"type": "text", "text": message.text})
    return {"role": message.role, "content": content}


def request_messages(prepared: PreparedTurn) -> list[dict[str, Any]]:
    """Stage 03's request in lmms-eval's chat format (``lmms_eval.protocol.ChatMessages``).

    Returns:
        ``[{"role", "content": [{"type": "image", "url": PIL image}, ..., {"type": "text",
        "text"}]}, ...]``: system, then alternating user and assistant turns, images before
        the text of the user turn that carries them.
    """
    return [_chat_message(m) for m in prepared.request.messages]


def doc_to_visual(doc: Mapping[str, Any]) -> list[Any]:
    """lmms-eval ``doc_to_visual``: the first turn's images (detection: the CXR)."""
    return request_images(_first_turn(doc, "none"))


def doc_to_text(doc: Mapping[str, Any], lmms_eval_specific_kwargs: Mapping[str, Any] | None = None,
                round_idx: int | None = None, previous_output: Sequence[Any] | None = None,
                previous_round_info: Any = None) -> Any:
    """lmms-eval ``doc_to_text`` for simple models (the multi-round protocol).

    Args:
        doc: A :func:`case_docs` row.
        lmms_eval_specific_kwargs: The task's kwargs (``oracle_setting``).
        round_idx: None for the first round; then the number of rounds asked.
        previous_output: The replies of the rounds so far.
        previous_round_info: Passed back unchanged.

    Returns:
        The first round's text; afterwards ``(images, text, terminal, previous_output,
        previous_round_info)`` with ``terminal`` True once the case is over.
    """
    setting = oracle_setting(lmms_eval_specific_kwargs)
    if round_idx is None:
        return flatten_request(_first_turn(doc, setting))
    outputs = list(previous_output or [])
    prepared = next_turn(doc, setting, outputs)
    if prepared is None:
        return None, None, True, outputs, previous_round_info
    return request_images(prepared), flatten_request(prepared), False, outputs, \
        previous_round_info


def doc_to_messages(doc: Mapping[str, Any],
                    lmms_eval_specific_kwargs: Mapping[str, Any] | None = None,
                    round_idx: int | None = None, previous_output: Sequence[Any] | None = None,
                    previous_round_info: Any = None) -> Any:
    """lmms-eval ``doc_to_messages`` for chat models (the multi-round protocol).

    Returns:
        The first round's messages (:func:`request_messages`); afterwards ``(messages,
        terminal, previous_output, previous_round_info)``, ``messages`` None once the case is
        over.
    """
    setting = oracle_setting(lmms_eval_specific_kwargs)
    if round_idx is None:
        return request_messages(_first_turn(doc, setting))
    outputs = list(previous_output or [])
    prepared = next_turn(doc, setting, outputs)
    if prepared is None:
        return None, True, outputs, previous_round_info
    return request_messages(prepared), False, outputs, previous_round_info


def doc_to_text_flat(doc: Mapping[str, Any],
                     lmms_eval_specific_kwargs: Mapping[str, Any] | None = None,
                     round_idx: int | None = None, previous_output: Sequence[Any] | None = None,
                     previous_round_info: Any = None) -> Any:
    """lmms-eval ``doc_to_text`` of the ``chexpercept_flat_*`` tasks (``generate_until_agentic``).

    As :func:`doc_to_text`, except that the last call hands back every reply as one JSON
    string ``{"chexpercept_replies": [...]}`` in place of the replies (lmms-eval keeps only the
    last one of such a task for ``process_results``).
    """
    if round_idx is None:
        return doc_to_text(doc, lmms_eval_specific_kwargs)
    images, text, terminal, outputs, info = doc_to_text(
        doc, lmms_eval_specific_kwargs, round_idx, previous_output, previous_round_info)
    if terminal:
        texts = [_reply_text(o) for o in outputs]
        return images, text, True, [json.dumps({FLAT_REPLIES_KEY: texts})], info
    return images, text, False, outputs, info


def _rounds(doc: Mapping[str, Any], results: Sequence[Any]) -> list[Any]:
    """The round replies of one doc from what lmms-eval hands ``process_results``.

    A multi-round task hands one list of replies; a ``chexpercept_flat_*`` task one string,
    :func:`doc_to_text_flat`'s JSON.

    Raises:
        SchemaError: If a flat task's result is not that JSON (lmms-eval stopped the rounds,
            e.g. at its ``max_agentic_steps``); names the key_id.
    """
    if len(results) == 1 and isinstance(results[0], (list, tuple)):
        return list(results[0])
    if len(results) == 1 and isinstance(results[0], str):
        try:
            data = json.loads(results[0])
            return list(data[FLAT_REPLIES_KEY])
        except (ValueError, RecursionError, KeyError, TypeError) as exc:
            raise SchemaError(f"{doc['key_id']}: lmms-eval handed back {results[0]!r:.200} "
                              f"instead of the case's replies (did it stop the rounds early?)"
                              ) from exc
    return list(results)


def score_case(case: EvalCase, setting: str, outputs: Sequence[Any]) -> dict[str, Any]:
    """Score a case's replies as Stage 03 does.

    Args:
        case: The case.
        setting: The oracle setting the replies were asked under.
        outputs: The raw reply of each round, in turn order.

    Returns:
        ``key_id``, ``qa_path``, ``finished`` (every turn answered), ``stages`` (the
        :data:`STAGE_METRICS` section -> all-or-nothing correctness, for the stages its path
        asks; empty for an unfinished case) and ``turns`` (turn name -> ``raw``, ``parsed``,
        ``status``, ``correct`` and ``user_text``, the turn's text as Stage 03 sends it, for
        each answered turn, in turn order).
    """
    replies, stopped = replies_of(case, outputs)
    dialogue = replay_case(case, setting, replies)
    finished = dialogue.finished and not stopped
    turns = {}
    for turn in case.turns:
        outcome = dialogue.outcomes.get(turn.spec.name)
        if outcome is None:
            continue
        user_text = dialogue.history[dialogue.history_idx[turn.spec.name]][0]
        turns[turn.spec.name] = {"raw": outcome.raw, "parsed": outcome.parsed.text,
                                 "status": outcome.parsed.status, "correct": outcome.correct,
                                 "user_text": user_text}
    stages = stage_flags(case_result(dialogue, replies, "")) if finished else {}
    return {"key_id": case.key_id, "qa_path": case.qa_path, "oracle_setting": setting,
            "finished": finished, "stages": stages, "turns": turns}


def process_results(doc: Mapping[str, Any], results: Sequence[Any], *,
                    setting: str = "implicit") -> dict[str, Any]:
    """lmms-eval ``process_results``: per-stage correctness of one case.

    The task files name :func:`process_results_none`, :func:`process_results_implicit` or
    :func:`process_results_explicit` (lmms-eval hands ``process_results`` no task kwargs).

    Args:
        doc: A :func:`case_docs` row.
        results: The doc's round replies (one list, as the multi-round models return them).
        setting: The oracle setting the replies were asked under.

    Returns:
        Each :data:`STAGE_METRICS` name -> 1.0 / 0.0, or None where the case's path does not
        ask the stage or the case is unfinished; ``unfinished`` -> 1 or 0; ``chexpercept_case``
        -> :func:`score_case`'s dict plus ``benchmark_dir`` (logged with the samples, read by
        :mod:`chexpercept.integrations.lmms_eval_samples`).
    """
    scored = {**score_case(case_of(doc), setting, _rounds(doc, results)),
              "benchmark_dir": str(doc["benchmark_dir"])}
    out: dict[str, Any] = {}
    for metric, section in STAGE_METRICS.items():
        value = scored["stages"].get(section)
        out[metric] = None if value is None else float(value)
    out["unfinished"] = 0 if scored["finished"] else 1
    out["chexpercept_case"] = scored
    return out


def process_results_none(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """:func:`process_results` of the ``chexpercept_none`` task."""
    return process_results(doc, results, setting="none")


def process_results_implicit(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """:func:`process_results` of the ``chexpercept_implicit`` task."""
    return process_results(doc, results, setting="implicit")


def process_results_explicit(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """:func:`process_results` of the ``chexpercept_explicit`` task."""
    return process_results(doc, results, setting="explicit")


def stage_accuracy(values: Sequence[float | None]) -> float | None:
    """lmms-eval aggregation: the mean over the cases that were asked the stage.

    Unfinished cases and cases whose path skips the stage (None) are left out, as Stage 04
    leaves out missing cases (docs/metrics.md).

    Returns:
        The fraction correct in [0, 1], or None when no case was asked the stage.
    """
    asked = [v for v in values if v is not None]
    return sum(asked) / len(asked) if asked else None


def count(values: Sequence[int]) -> int:
    """lmms-eval aggregation: how many cases (the ``unfinished`` metric)."""
    return int(sum(values))


def case_count(values: Sequence[Any]) -> int:
    """lmms-eval aggregation of ``chexpercept_case``: the number of cases scored."""
    return len(values)
