"""Stage 03: replies obtained outside Stage 03's runners, parsed, scored and written as a run.

An evaluation harness that asks the dialogue itself (inspect_ai, ``chexpercept.integrations``)
hands each reply here as a :class:`RecordedReply`. :func:`answer_turn` parses it
(``parsing.py``), scores it (``scoring.py``) and commits it to the case's
:class:`~chexpercept.evaluation.dialogue.Dialogue`, which decides the next turn's oracle
context, exactly as :func:`chexpercept.evaluation.session.finish_turn` does in a Stage 03 run.
:func:`replay_case` rebuilds a finished conversation from the replies, and
:func:`write_recorded_run` turns a table of replies into a Stage 03 run folder
(``run_manifest.json``, ``records.jsonl``, ``faults.jsonl``, ``all_results.json``;
docs/evaluation_protocol.md, "Run folder") by running Stage 03's own runner over a provider
that answers every request from the table (:class:`RecordedModel`), so the folder is what
``00_eval.py`` writes for the same replies and Stage 04 and the viewer read it as any run
(docs/integrations.md, "inspect_ai").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.errors import InputError, SchemaError
from chexpercept.evaluation.api import run_name_protocol
from chexpercept.evaluation.cases import Bundle, EvalCase, load_bundle, validate_bundle
from chexpercept.evaluation.dialogue import Dialogue, PreparedTurn, TurnOutcome, request_id
from chexpercept.evaluation.option_order import apply_option_order
from chexpercept.evaluation.results import build_case_result
from chexpercept.evaluation.runner import run_evaluation
from chexpercept.evaluation.session import EvalSettings, RunSummary, score_completion
from chexpercept.layouts import eval_run_dir
from utils.llm.base import FAULT, ChatModel, Completion, TokenTopLogprobs, TurnRequest, Usage
from utils.llm.openai_provider import chat_top_logprobs
from utils.status import COMPLETION_STATUSES

_USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "thinking_tokens")


@dataclass(frozen=True)
class RecordedReply:
    """One model reply to one turn, as an external harness received it.

    Attributes:
        request_id: ``<key_id>/<turn name>`` (:func:`~chexpercept.evaluation.dialogue.request_id`).
        text: The reply's raw text ('' when none came back).
        status: A completion status (:data:`utils.status.COMPLETION_STATUSES`: ``ok``,
            ``refused``, ``truncated``, ``error``, ``blocked``), or ``fault`` for a turn that got
            no answer (never scored; docs/engines.md, "Faults").
        finish_reason: ``stop``, ``length`` (cut at the token limit; the parser may then say
            ``truncated``, docs/parsing.md) or another reason, or None.
        usage: Token counts ``input_tokens``, ``cached_input_tokens``, ``output_tokens``,
            ``thinking_tokens`` (missing keys count 0).
        error: Why a ``fault`` or ``error`` reply has no answer, or None.
        user_text: The user text the harness sent for this turn (oracle paragraph, preamble
            and question), or None; :class:`RecordedModel` refuses a table whose text differs
            from the request Stage 03 builds.
        top_logprobs: The reply's token log-probabilities (``--option-probs``; one
            :data:`utils.llm.base.TokenTopLogprobs` per generated token), or None when none
            were asked for or none came back (the turn's ``option_probs`` is then ``missing``).
    """

    request_id: str
    text: str
    status: str = "ok"
    finish_reason: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None
    user_text: str | None = None
    top_logprobs: Sequence[tuple[str, Mapping[str, float]]] | None = None


    def __post_init__(self) -> None:
        if self.status != FAULT and self.status not in COMPLETION_STATUSES:
            raise ValueError(f"{self.request_id}: status must be one of "
                             f"{(*COMPLETION_STATUSES, FAULT)}, got {self.status!r}")

    def completion(self) -> Completion:
        """The reply as a provider's :class:`~utils.llm.base.Completion`."""
        usage = Usage(*(int(self.usage.get(k, 0)) for k in _USAGE_KEYS))
        steps = None if self.top_logprobs is None else [
            (str(token), {str(k): float(v) for k, v in top.items()})
            for token, top in self.top_logprobs]
        return Completion(text=self.text, status=self.status, finish_reason=self.finish_reason,
                          usage=usage, error=self.error, top_logprobs=steps)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (:meth:`from_json` reads it back; ``top_logprobs`` only when set)."""
        out = {"request_id": self.request_id, "text": self.text, "status": self.status,
               "finish_reason": self.finish_reason,
               "usage": {k: int(self.usage.get(k, 0)) for k in _USAGE_KEYS},
               "error": self.error, "user_text": self.user_text}
        if self.top_logprobs is not None:
            out["top_logprobs"] = [[token, dict(top)] for token, top in self.top_logprobs]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> RecordedReply:
        """Read a :meth:`to_json` dict.

        Args:
            data: The dict.
            where: What holds it (file and sample), for messages.

        Raises:
            SchemaError: Naming ``where`` and the field, for a missing or invalid field.
        """
        try:
            text = data["text"]  # to_json always writes it; a missing or null one is no reply
            if not isinstance(text, str):
                raise TypeError(f"text {text!r} is not a string")
            steps = data.get("top_logprobs")
            if steps is not None:
                steps = tuple((str(token), {str(k): float(v) for k, v in dict(top).items()})
                              for token, top in steps)
            return cls(request_id=str(data["request_id"]), text=text,
                       status=str(data.get("status", "ok")),
                       finish_reason=data.get("finish_reason"),
                       usage=dict(data.get("usage") or {}), error=data.get("error"),
                       user_text=data.get("user_text"), top_logprobs=steps)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SchemaError(f"{where}: not a recorded reply ({exc!r}): {data!r:.300}") \
                from exc




def chat_logprobs(block: Any) -> list[TokenTopLogprobs] | None:
    """A harness's reply log-probabilities as :attr:`RecordedReply.top_logprobs`.

    ``block`` is ``choices[0].logprobs`` as JSON in OpenAI's Chat Completions shape (which
    inspect_ai's is), read as Stage 03's OpenAI provider reads it; None when missing or
    malformed (the turn's ``option_probs`` is then ``missing``, never zeros). Integrations call
    this rather than importing a provider (docs/architecture.md).
    """
    return chat_top_logprobs(block)

def answer_turn(dialogue: Dialogue, prepared: PreparedTurn,
                reply: RecordedReply) -> TurnOutcome:
    """Parse, score and commit one reply to the prepared turn (the next turn of ``dialogue``).

    The same parse and score as a Stage 03 run
    (:func:`chexpercept.evaluation.session.score_completion`; docs/parsing.md,
    docs/evaluation_protocol.md, "Scoring").

    Raises:
        ValueError: If the reply is a fault (no answer is scored; docs/engines.md, "Faults") or
            belongs to another request.
    """
    if reply.request_id != prepared.request.request_id:
        raise ValueError(f"a reply to {reply.request_id} given for "
                         f"{prepared.request.request_id}")
    if reply.status == FAULT:
        raise ValueError(f"{reply.request_id}: a fault is not an answer ({reply.error})")
    parsed, correct = score_completion(prepared, reply.completion())
    outcome = TurnOutcome(reply.text, parsed, correct)
    dialogue.commit(prepared, outcome)
    return outcome


def replay_case(case: EvalCase, oracle_setting: str,
                replies: Sequence[RecordedReply], sample: int = 0) -> Dialogue:
    """Rebuild a case's conversation from its replies, in turn order.

    Each reply goes through :func:`answer_turn`, so the oracle context of every turn is
    decided again from the parsed answers.

    Args:
        case: The planned case.
        oracle_setting: ``none``, ``implicit`` or ``explicit``.
        replies: Its answered turns in dialogue order (a prefix of the case's turns).
        sample: Sample index of a ``--samples K`` run (its request ids end ``/sample<k>``).

    Raises:
        ValueError: If a reply is a fault, is not the next turn's, or there are more replies
            than turns.
    """
    dialogue = Dialogue(case, oracle_setting, sample=sample)
    for reply in replies:
        if dialogue.finished:
            raise ValueError(f"{case.key_id}: more replies than the case has turns "
                             f"({len(case.turns)})")
        answer_turn(dialogue, dialogue.prepare(), reply)
    return dialogue


def case_result(dialogue: Dialogue, replies: Sequence[RecordedReply],
                model_id: str) -> dict[str, Any]:
    """The ``all_results.json`` entry of a finished replayed case (``results.py``)."""
    return build_case_result(dialogue, [r.to_json()["usage"] for r in replies], model_id)


#: ``all_results.json`` sections of the four stages (docs/metrics.md, "Stage accuracy").
STAGE_SECTIONS = ("detection_qa", "contour_evaluation_qa", "contour_revision_qa",
                  "attribute_extraction_qa")


def stage_flags(result: Mapping[str, Any]) -> dict[str, bool]:
    """``section -> correct`` of the stages a case result (:func:`case_result`) holds.

    The stages of the case's path only, scored by ``results.build_case_result`` as Stage 03
    scores them (rotation turns of ``--option-order circular`` left out).
    """
    return {s: bool(result[s]["correct"]) for s in STAGE_SECTIONS if result.get(s)}


class RecordedModel(ChatModel):
    """A provider that answers every request from a table of recorded replies.

    A request with no reply in the table gets a ``fault`` (its case stays unfinished, as in a
    Stage 03 run whose server did not answer). A reply whose ``user_text`` differs from the
    request's last user text is refused: the replies came from another benchmark or oracle
    setting.

    Args:
        model: The model id recorded in the run (pricing, ``token_usage.model_id``).
        replies: ``request_id`` -> reply.
        source: What the replies are (e.g. the inspect log's path), for the manifest.
        label: The provider name recorded in the manifest (``provider_settings``).
        errors: key_id -> why the harness got no further answer for the case (the fault
            recorded for its next turn); other missing replies get a generic reason.
        settings: Generation settings the harness was given (e.g. ``temperature``), recorded
            in the manifest's ``provider_settings`` as a Stage 03 provider records its own.
    """

    kind = "engine"
    description = "replies recorded by an external harness"

    def __init__(self, model: str, replies: Mapping[str, RecordedReply], *, source: str,
                 label: str, errors: Mapping[str, str] | None = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        super().__init__(model)
        self.provider = label
        self.replies = dict(replies)
        self.source = source
        self.errors = dict(errors or {})
        self.settings = dict(settings or {})

    def describe(self) -> dict[str, Any]:
        """Provider, model, the replies' source and the harness's settings (compared on resume)."""
        return {"provider": self.provider, "model": self.model, "source": self.source,
                **self.settings}

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        """The recorded reply of each request, or a fault when there is none.

        Raises:
            SchemaError: If a reply was given for another user text.
        """
        out = []
        for request in requests:
            reply = self.replies.get(request.request_id)
            if reply is None:
                why = self.errors.get(request.request_id.split("/", 1)[0], "no reply recorded")
                out.append(Completion(text="", status=FAULT, error=f"{self.source}: {why}"))
                continue
            sent = request.messages[-1].text
            if reply.user_text is not None and reply.user_text != sent:
                raise SchemaError(f"{self.source}: {request.request_id} was asked another "
                                  f"question than Stage 03 asks (another benchmark or oracle "
                                  f"setting?): recorded {reply.user_text!r:.200}, "
                                  f"expected {sent!r:.200}")
            out.append(reply.completion())
        return out


def write_recorded_run(benchmark_dir: str | Path, replies: Iterable[RecordedReply], *,
                       key_ids: Sequence[str], output_path: str | Path, provider: str,
                       model: str, oracle_setting: str, source: str,
                       errors: Mapping[str, str] | None = None,
                       overwrite: bool = False, option_order: str = "release", seed: int = 0,
                       samples: int = 1, option_probs: bool = False,
                       provider_settings: Mapping[str, Any] | None = None) -> RunSummary:
    """Write the Stage 03 run folder of recorded replies (see the module docstring).

    The run folder is ``layouts.eval_run_dir(output_path, provider, model, oracle_setting)``,
    with the option order, K and seed in its name as Stage 03 names it
    (:func:`~chexpercept.evaluation.api.run_name_protocol`);
    every file in it is written by Stage 03's session and run store
    (docs/evaluation_protocol.md, "Run folder"). A case whose replies stop before its last
    turn (the harness got no answer) is written as ``unfinished``, which Stage 04 counts as
    missing.

    Args:
        benchmark_dir: The bundle the replies answer (``chexpercept.json`` + images).
        replies: Every recorded reply.
        key_ids: Cases to write, in any order (the file keeps the benchmark's order).
        output_path: Root of run folders (``00_eval.py --output-path``).
        provider: Provider label of the run folder (``<provider>_<model>``).
        model: Model id (``/`` becomes ``--`` in the folder name).
        oracle_setting: The setting the replies were obtained under.
        source: What the replies are (recorded in the manifest).
        errors: key_id -> why the harness got no further answer (:class:`RecordedModel`).
        overwrite: Replace an earlier run folder of the same name.
        option_order: The option order the replies were obtained under (``--option-order``;
            the turns are planned by :func:`~chexpercept.evaluation.option_order.apply_option_order`
            with ``seed``, as in Stage 03).
        seed: The run seed (shuffled orders, sample seeds; recorded in the manifest).
        samples: K of ``--samples K`` (sample k's replies carry ``/sample<k>`` request ids).
        option_probs: The replies carry token log-probabilities (``--option-probs``); every
            turn's ``option_probs`` is computed from them as Stage 03 computes it.
        provider_settings: Generation settings recorded in the manifest (:class:`RecordedModel`).

    Returns:
        The run summary (``all_results_path``, ``unfinished``).

    Raises:
        InputError: If a key_id is not in the benchmark.
        SchemaError: On an invalid bundle, a reply to another question, two replies to one
            request or a reply to a turn the cases do not have (names the request id).
        ConfigError: If the run folder holds another run (a different manifest identity).
    """
    bundle: Bundle = load_bundle(benchmark_dir)
    unknown = [k for k in key_ids if k not in bundle.items]
    if unknown:
        raise InputError(f"{source}: {len(unknown)} case(s) not in "
                         f"{bundle.layout.json_path}, e.g. {unknown[0]}")
    order = {k: i for i, k in enumerate(bundle.items)}
    cases = validate_bundle(bundle, sorted(set(key_ids), key=order.__getitem__))
    table: dict[str, RecordedReply] = {}
    for reply in replies:
        if reply.request_id in table:  # one would silently replace the other
            raise SchemaError(f"{source}: two replies recorded for {reply.request_id}")
        table[reply.request_id] = reply
    planned = [apply_option_order(c, option_order, seed) for c in cases]
    asked = {request_id(c.key_id, t.spec.name, k) for c in planned for t in c.turns
             for k in range(samples)}
    stray = sorted(set(table) - asked)
    if stray:  # a turn Stage 03 never asks: another benchmark, path or harness version
        raise SchemaError(f"{source}: {len(stray)} reply(ies) to turns Stage 03 does not ask "
                          f"of these cases, e.g. {stray[0]}")
    recorded = RecordedModel(model, table, source=source, label=provider, errors=errors,
                             settings=provider_settings)
    settings = EvalSettings(provider=provider, model=model, oracle_setting=oracle_setting,
                            max_consecutive_faults=0, save_every=max(1, len(cases)),
                            option_order=option_order, seed=seed, samples=samples,
                            option_probs=option_probs)
    run_dir = eval_run_dir(output_path, provider, model, oracle_setting,
                           protocol=run_name_protocol(option_order, samples, seed))
    return run_evaluation(bundle, cases, recorded, settings, run_dir, overwrite=overwrite)
