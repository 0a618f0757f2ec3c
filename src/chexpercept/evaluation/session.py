"""Stage 03: what both runners share: settings, per-case state, scoring and the run session.

A :class:`RunSession` (:func:`open_session`) opens the run folder through the
:class:`~chexpercept.run_store.RunStore`, rebuilds every case's conversation from its
records (recorded turns are never asked again; oracle patches included) and hands each new
completion to the store: an answer is scored and appended to ``records.jsonl``; a fault (no
answer) goes to ``faults.jsonl`` and its case waits, unfinished (docs/engines.md, "Faults").
The sync runner (``runner.py``) and the async runner (``async_runner.py``) differ only in how
they schedule requests.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept import schema
from chexpercept.errors import ConfigError, ProviderError, SchemaError
from chexpercept.evaluation.cases import (
    Bundle,
    EvalCase,
    PlannedTurn,
    bundle_image_digests,
    plan_cases,
)
from chexpercept.evaluation.dialogue import (
    SYSTEM_PROMPT,
    Dialogue,
    PreparedTurn,
    TurnOutcome,
    answer_key,
    system_prompt_sha256,
)
from chexpercept.evaluation.judge import (
    AUDIT_FIELD,
    Judge,
    JudgeTask,
    KeptReplies,
    Verdict,
    completion_from_json,
    completion_json,
    read_verdict,
)
from chexpercept.evaluation.option_order import apply_option_order, check_option_order, to_original
from chexpercept.evaluation.option_probs import turn_option_probs
from chexpercept.evaluation.parsing import ERROR, OK, TRUNCATED, ParsedAnswer, parse_answer
from chexpercept.evaluation.reply_cap import REPLY_CHARS_FIELD, cap_reply, reply_cap_chars
from chexpercept.evaluation.results import build_case_result
from chexpercept.evaluation.scoring import is_correct
from chexpercept.files import to_jsonable
from chexpercept.image_digests import IMAGES_SHA_FIELD
from chexpercept.layouts import ORACLE_SETTINGS, repo_root
from chexpercept.provenance import SCHEMA_VERSION, provenance, redact_secrets
from chexpercept.rng import sample_seed
from chexpercept.run_store import (
    FSYNC_EVERY,
    FSYNC_INTERVAL_S,
    JUDGE_FIELD,
    KEPT_REPLY_FIELD,
    PROVIDER_DECODING_FIELD,
    SAMPLE_FIELD,
    SAMPLING_FIELD,
    SELECTION_FIELD,
    RunStore,
)
from utils.llm.base import FAULT, ChatModel, Completion
from utils.llm.pricing import cost_usd, lookup
from utils.status import COMPLETION_STATUSES, Status

logger = logging.getLogger(__name__)

#: Version of the dialogue + parsing protocol; bump when either changes what a run produces
#: (2: the parser rules of docs/parsing.md, the ``blocked`` status and ``fault`` turns;
#: 3: the statement grammar of docs/parsing.md, which reads some replies differently, so a
#: run begun under 2 is not resumed under 3).
PROTOCOL_VERSION = 3

#: Requests in a row without an answer after which the run stops (``--max-consecutive-faults``):
#: a dead server would otherwise be asked every case, each with all its retries. At 5 %
#: independent transient faults and 6 retries a turn runs out with probability 0.05**7, so only
#: an outage reaches this (docs/engines.md, "Faults").
DEFAULT_MAX_CONSECUTIVE_FAULTS = 50
#: Exit code of a Stage 03 run that ended with unfinished cases (a turn got no answer).
UNFINISHED_EXIT = 3

_MANIFEST_PACKAGES = ("chexpercept", "numpy", "pillow", "pydantic", "vllm", "transformers",
                      "torch", "openai", "google-genai")


@dataclass(frozen=True)
class EvalSettings:
    """What a run is (all recorded in the manifest).

    Attributes:
        provider: Provider registry name (``dummy``, ``random``, ``oracle``, ...).
        model: Model id or alias.
        oracle_setting: One of ``explicit``, ``implicit``, ``none``
            (docs/evaluation_protocol.md, "Oracle settings").
        no_thinking: The ``--no-thinking`` variant (``_no_thinking`` run folder).
        seed: Run seed (``random`` provider; recorded for every provider).
        save_every: Rewrite ``all_results.json`` after this many newly finished cases (>= 1).
        system_prompt: System message of every request.
        part: Part index of a sharded run (``--part``; ``sharding.py``), None when unsharded.
        total_parts: Number of parts of a sharded run (``--total-parts``).
        limit: ``--limit`` of the command (recorded, not compared on resume: a larger limit
            extends a run), or None.
        per_path_limit: ``--per_path_limit`` of the command, likewise.
        max_consecutive_faults: Stop the run after this many requests in a row got no answer
            (``--max-consecutive-faults``; the server or the network is down); 0 never stops.
        give_up_unanswered: Do not ask again the turns that got no answer in an earlier
            invocation (``--give-up-unanswered``); their cases stay unfinished, which Stage 04
            counts as missing, and the run may end with exit code 0.
        option_probs: ``--option-probs``: the provider returns token log-probabilities and
            every answered turn records its ``option_probs``
            (:mod:`chexpercept.evaluation.option_probs`); an identity field of the run.
        option_order: ``release`` (the paper's), ``shuffled`` or ``circular``
            (``--option-order``; docs/evaluation_protocol.md, "Option order").
        samples: K of ``--samples K``: each case is asked K times, as K independent
            dialogues, sample k with seed ``rng.sample_seed(seed, k)``
            (docs/evaluation_protocol.md, "Sampling"); 1: the release's one dialogue.
        max_reply_chars: ``--max-reply-chars``: the characters of one reply the run keeps
            (:func:`~chexpercept.evaluation.reply_cap.reply_cap_chars`); None: derived from the
            provider's output-token cap (docs/engines.md, "Reply cap"). Recorded in the
            manifest, not compared on resume.
    """

    provider: str
    model: str
    oracle_setting: str = "implicit"
    no_thinking: bool = False
    seed: int = 0
    save_every: int = 10
    system_prompt: str = SYSTEM_PROMPT
    part: int | None = None
    total_parts: int = 1
    limit: int | None = None
    per_path_limit: int | None = None
    max_consecutive_faults: int = DEFAULT_MAX_CONSECUTIVE_FAULTS
    give_up_unanswered: bool = False
    option_probs: bool = False
    option_order: str = "release"
    samples: int = 1
    max_reply_chars: int | None = None

    def sample_seeds(self) -> list[int]:
        """The seed of each sample, sample 0 first (:func:`chexpercept.rng.sample_seed`)."""
        return [sample_seed(self.seed, k) for k in range(self.samples)]


@dataclass
class RunSummary:
    """What a run did.

    Attributes:
        run_dir: The run folder.
        all_results_path: ``all_results.json``.
        cases_selected: Cases asked for in this invocation.
        cases_finished: Selected cases with every turn answered.
        turns_requested: Turns sent to the model in this invocation.
        turns_resumed: Turns of selected cases found in the records (not requested again).
        generate_calls: ``model.generate`` calls in this invocation.
        statuses: Status counts over every answered turn of the selected cases.
        usage: Token totals of this invocation's calls (``input``, ``cached_input``,
            ``output``, ``thinking``).
        cost_usd: Estimated cost of this invocation's calls (docs/evaluation_protocol.md,
            "Cost"); None (NA) when the model has no entry in ``cfg/pricing.yaml``.
        turns_faulted: Requests of this invocation that got no answer (a fault; not scored).
        unfinished: Selected cases left unfinished, key_id -> why (the fault, or that the run
            stopped first); empty when every selected case finished.
        given_up: Of ``unfinished``, the cases ``--give-up-unanswered`` accepted as missing.
        judge_requests: Requests sent to the judge model in this invocation (``--judge``;
            docs/parsing.md, "Judge model").
    """

    run_dir: Path
    all_results_path: Path
    cases_selected: int = 0
    cases_finished: int = 0
    turns_requested: int = 0
    turns_resumed: int = 0
    generate_calls: int = 0
    statuses: Counter = field(default_factory=Counter)
    usage: Counter = field(default_factory=Counter)
    cost_usd: float | None = 0.0
    turns_faulted: int = 0
    unfinished: dict[str, str] = field(default_factory=dict)
    given_up: set[str] = field(default_factory=set)
    judge_requests: int = 0

    def add_cost(self, cost: float | None) -> None:
        """Add one call's cost; any NA call makes the total NA."""
        self.cost_usd = None if cost is None or self.cost_usd is None else self.cost_usd + cost

    def line(self) -> str:
        """One-line summary for the end of the CLI."""
        # ``judged`` only where a judge read something, so a run without one prints as before
        counts = ", ".join(f"{s}={self.statuses.get(s, 0)}" for s in schema.STATUSES
                           if s != Status.JUDGED or self.statuses.get(s))
        judge = f"; judge requests: {self.judge_requests}" if self.judge_requests else ""
        return (f"cases: {self.cases_finished}/{self.cases_selected} finished; turns requested: "
                f"{self.turns_requested} (already done: {self.turns_resumed}) in "
                f"{self.generate_calls} generate call(s); statuses: {counts}; tokens: "
                f"input {self.usage['input']} (cached {self.usage['cached_input']}"
                f"{self._hit_rate()}), output "
                f"{self.usage['output']} (thinking {self.usage['thinking']}), estimated "
                f"{'NA' if self.cost_usd is None else f'${self.cost_usd:.4f}'}; "
                f"no answer (faults): {self.turns_faulted}{judge}; output: "
                f"{self.all_results_path}")

    def _hit_rate(self) -> str:
        """``, hit rate 0.73``: cached over input tokens, or '' when none were cached.

        The prefix cache's share of the prompt tokens (docs/design.md, "Batching").
        """
        cached, total = self.usage["cached_input"], self.usage["input"]
        return f", hit rate {cached / total:.2f}" if cached and total else ""

    def unfinished_message(self) -> str | None:
        """One line on the unfinished cases (None when there are none to report).

        Cases given up with ``--give-up-unanswered`` are reported by the caller as a warning.
        """
        pending = {k: v for k, v in self.unfinished.items() if k not in self.given_up}
        if not pending:
            return None
        reasons = Counter(_reason_kind(v) for v in pending.values())
        why = "; ".join(f"{n} x {r}" for r, n in reasons.most_common(3))
        example = next(iter(pending.items()))
        return (f"{len(pending)} of {self.cases_selected} case(s) unfinished ({why}; e.g. "
                f"{example[0]}: {example[1][:300]}). Nothing was scored for their missing "
                f"turns; all_results.json marks them and Stage 04 counts them as missing. "
                f"Re-run the same command to ask them again (answered turns are kept), or add "
                f"--give-up-unanswered to accept them as missing.")


def _reason_kind(reason: str) -> str:
    """A short class of an unfinished case's reason, for the summary line."""
    if reason.startswith(NOT_REACHED):
        return "not reached"
    kind = reason.split(": ", 1)[-1].split(". ", 1)[0]
    if len(kind) > 120:  # cut at a word, say so
        kind = kind[:120].rsplit(" ", 1)[0] + " ..."
    return kind or "no answer"


#: Reason of a selected case the run did not get to (it stopped first).
NOT_REACHED = "not reached: the run stopped before this case finished"


def build_manifest(settings: EvalSettings, model: ChatModel, bundle: Bundle,
                   judge: Judge | None = None, *,
                   images_sha256: str | None = None) -> dict[str, Any]:
    """The run manifest: identity fields (compared on resume) plus environment (not compared).

    ``images_sha256`` (``cases.bundle_image_digests``) is the identity field
    ``benchmark_images_sha256`` (docs/evaluation_protocol.md, "Run folder"); left out when None.

    Secrets are never written: provider settings are redacted by key name. A run with a judge
    (``--judge``) has the identity field ``judge`` (:meth:`Judge.identity`); a run without
    one has no such field, so its manifest is what it was before judges existed.

    Raises:
        ConfigError: On an unknown oracle setting.
    """
    if settings.oracle_setting not in ORACLE_SETTINGS:
        raise ConfigError(f"oracle_setting must be one of {ORACLE_SETTINGS}, "
                          f"got {settings.oracle_setting!r}")
    return {
        "schema_version": SCHEMA_VERSION,
        "provider": settings.provider,
        "model": settings.model,
        "provider_settings": redact_secrets(to_jsonable(model.describe())),
        "provider_runtime": redact_secrets(to_jsonable(model.runtime_info())),
        # not an identity field: how the provider decodes by default, for Stage 04's labels
        # (analysis.runs.protocol_fields), which never branch on a provider's name
        PROVIDER_DECODING_FIELD: {"default_temperature": model.default_temperature(settings.model),
                                  "sampling": model.sampling},
        "oracle_setting": settings.oracle_setting,
        "option_order": settings.option_order,
        "no_thinking": settings.no_thinking,
        "seed": settings.seed,
        "system_prompt_sha256": system_prompt_sha256(settings.system_prompt),
        "benchmark_json_sha256": bundle.json_sha256,
        **({IMAGES_SHA_FIELD: images_sha256} if images_sha256 is not None else {}),
        "protocol_version": PROTOCOL_VERSION,
        # Only sharded runs have it (sharding.py); an identity field, so a part folder is never
        # resumed as another part or as an unsharded run.
        **({"sharding": {"part": settings.part, "total_parts": settings.total_parts},
            # which cases the part selected: a merge names parts run with other limits
            SELECTION_FIELD: {"limit": settings.limit,
                              "per_path_limit": settings.per_path_limit}}
           if settings.part is not None else {}),
        # only with --option-probs, so the manifests of earlier runs stay equal (identity field)
        **({"option_probs": True} if settings.option_probs else {}),
        # Only --samples K > 1 runs have it; an identity field, so a run is never resumed with
        # another K (docs/evaluation_protocol.md, "Sampling").
        **({SAMPLING_FIELD: {"samples": settings.samples, "seeds": settings.sample_seeds()}}
           if settings.samples > 1 else {}),
        # only with --judge (docs/parsing.md, "Judge model"); an identity field
        **({JUDGE_FIELD: judge.identity()} if judge is not None else {}),
        "benchmark_dir": str(bundle.source_dir or bundle.layout.root),
        # not an identity field: it changes only what is kept of an over-long reply
        "max_reply_chars": run_reply_cap(settings, model),
        **provenance(repo_root(), _MANIFEST_PACKAGES),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run_reply_cap(settings: EvalSettings, model: ChatModel) -> int:
    """The run's reply cap in characters (docs/engines.md, "Reply cap").

    ``settings.max_reply_chars``, else derived from the provider's output-token cap
    (:func:`~chexpercept.evaluation.reply_cap.reply_cap_chars`).

    Raises:
        ConfigError: If ``settings.max_reply_chars`` is below 1.
    """
    try:
        return reply_cap_chars(settings.max_reply_chars, model.prompt_limits().max_new_tokens)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


@dataclass
class CaseState:
    """One case of a run: its dialogue so far and what the run folder needs of it.

    Attributes:
        dialogue: The conversation (replayed from the records on resume).
        usages: Token counts of each answered turn, in turn order.
        result_json: ``"<key_id>": <result>`` as it appears in ``all_results.json`` (set once
            finished; a finished case never changes, so every checkpoint reuses it).
        fault: Why the case's next turn got no answer (a fault in this invocation or, with
            ``give_up_unanswered``, an earlier one); the case is not asked again in this
            invocation.
    """

    dialogue: Dialogue
    usages: list[dict[str, int]] = field(default_factory=list)
    result_json: str | None = None
    fault: str | None = None

    @property
    def key_id(self) -> str:
        """The case's key_id."""
        return self.dialogue.case.key_id

    @property
    def next_index(self) -> int | None:
        """Turn index (0-8) of the case's next turn; None when it is finished."""
        turn = self.dialogue.next_turn
        return None if turn is None else turn.spec.index

    @property
    def runnable(self) -> bool:
        """Whether the case has a turn to ask in this invocation."""
        return not self.dialogue.finished and self.fault is None


class FaultBreaker:
    """Stops the run when ``limit`` requests in a row got no answer (the server is down).

    Args:
        limit: Requests in a row (``--max-consecutive-faults``); 0 never stops.
    """

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ConfigError(f"--max-consecutive-faults must be >= 0, got {limit}")
        self.limit = limit
        self.in_a_row = 0

    def observe(self, completion: Completion) -> None:
        """Count a completion.

        Raises:
            ProviderError: When ``limit`` completions in a row are faults.
        """
        if completion.status != FAULT:
            self.in_a_row = 0
            return
        self.in_a_row += 1
        if self.limit and self.in_a_row >= self.limit:
            raise ProviderError(
                f"{self.in_a_row} request(s) in a row got no answer (last: {completion.error}). "
                f"The server or the network is down, so the run stopped; nothing was recorded "
                f"for those turns and the answered ones are kept. Re-run the same command once "
                f"the server answers (--max-consecutive-faults sets the limit).")


def record_fault(state: CaseState, prep: PreparedTurn, completion: Completion,
                 store: RunStore, summary: RunSummary, *,
                 kept: Completion | None = None) -> None:
    """Log a turn that got no answer to ``faults.jsonl`` and park its case for this invocation.

    Nothing enters ``records.jsonl`` or the dialogue: a fault is not an answer of the model,
    so a re-run asks the turn again (docs/engines.md, "Faults").

    Args:
        state: The case.
        prep: The turn as sent.
        completion: The fault (its ``error`` is the entry's).
        store: The run folder.
        summary: Counts the fault.
        kept: The model's reply that arrived when the fault is the judge's: kept in the entry
            (``run_store.KEPT_REPLY_FIELD``), so a re-run re-judges it instead of asking the
            model again (docs/parsing.md, "Judge model").
    """
    key_id = state.dialogue.case.key_id
    state.fault = completion.error or "no answer"
    summary.turns_faulted += 1
    logger.warning("%s: no answer, the case stays unfinished: %s", prep.request.request_id,
                   state.fault)
    store.append_fault({"key_id": key_id, "turn": prep.turn.spec.name,
                        **({SAMPLE_FIELD: state.dialogue.sample} if state.dialogue.sample
                           else {}),
                        "request_id": prep.request.request_id, "error": state.fault,
                        "attempts": completion.attempts,
                        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        **({KEPT_REPLY_FIELD: completion_json(kept)} if kept is not None
                           else {})})


@dataclass
class Drain:
    """What became of the requests in flight when a fatal error stopped the run.

    Both runners stop the same way (docs/engines.md, "Faults"): no request is sent after the
    fatal error, the requests in flight are awaited (at most ``utils.llm.retry.DRAIN_S``
    seconds), and every completion that arrives goes through :meth:`RunSession.finish` exactly
    as in a run that goes on.

    Attributes:
        recorded: Answers that arrived and were recorded in ``records.jsonl``.
        abandoned: Requests sent that got no answer (a fault, a fatal error of their own, a
            retry given up, or still in flight at the bound); a re-run asks them again.
    """

    recorded: int = 0
    abandoned: int = 0

    def finish(self, session: RunSession, state: CaseState, prep: PreparedTurn,
               completion: Completion, batch_latency_s: float,
               verdict: Verdict | None = None) -> None:
        """Record a completion that arrived while the run stops, as :meth:`RunSession.finish`.

        A fault is logged to ``faults.jsonl`` as usual; the fault breaker, which would stop the
        run, is ignored, since it is stopping already. A reply the judge was to read and did
        not (``verdict`` None) is kept with its fault, for the re-run to judge.
        """
        try:
            answered = session.finish(state, prep, completion, batch_latency_s, verdict)
        except ProviderError:  # the breaker, after the fault was logged
            answered = False
        if answered:
            self.recorded += 1
        else:
            self.abandoned += 1

    def error(self, cause: ProviderError) -> ProviderError:
        """The error that ends the run: ``cause``, with what the drain did when it did anything.

        Returns:
            ``cause`` itself when no request was in flight; else a ``ProviderError`` whose
            message is the cause's plus the counts (its ``__cause__`` is ``cause``).
        """
        if not (self.recorded or self.abandoned):
            return cause
        error = ProviderError(
            f"{cause} Of the requests in flight at the stop, {self.recorded} answer(s) were "
            f"recorded and {self.abandoned} abandoned (no answer; a re-run asks them again).")
        error.__cause__ = cause
        return error


def _outcome_from_record(rec: dict[str, Any]) -> TurnOutcome:
    answer = rec.get("answer")
    parsed = ParsedAnswer(tuple(answer) if answer else None, rec["status"],
                          rec.get("detail", ""))
    return TurnOutcome(raw=rec.get("raw", ""), parsed=parsed, correct=bool(rec["correct"]),
                       option_probs=rec.get("option_probs"), judge=rec.get(JUDGE_FIELD),
                       judge_audit=rec.get(AUDIT_FIELD))


def _replay(state: CaseState, records: dict[str, dict[str, Any]]) -> int:
    """Rebuild a conversation from its records; returns the number of turns replayed."""
    dialogue = state.dialogue
    replayed = 0
    while (turn := dialogue.next_turn) is not None and turn.spec.name in records:
        rec = records[turn.spec.name]
        dialogue.commit(dialogue.prepare(), _outcome_from_record(rec))
        state.usages.append(dict(rec.get("usage") or {}))
        replayed += 1
    unused = set(records) - set(dialogue.outcomes)
    if unused:
        logger.warning("%s: ignoring record(s) %s that do not follow the recorded turns",
                       dialogue.case.key_id, sorted(unused))
    return replayed


def _record(prepared: PreparedTurn, completion: Completion, parsed: ParsedAnswer,
            correct: bool, key_id: str, batch_latency_s: float) -> dict[str, Any]:
    usage = completion.usage
    return {
        "key_id": key_id,
        "turn": prepared.turn.spec.name,
        "turn_index": prepared.turn.spec.index,
        "request_id": prepared.request.request_id,
        "raw": completion.text or "",
        "parsed": parsed.text,
        "answer": list(parsed.answer) if parsed.answer else None,
        "status": parsed.status,
        "detail": parsed.detail,
        "correct": correct,
        "completion_status": completion.status,
        "finish_reason": completion.finish_reason,
        "error": completion.error,
        "latency_s": completion.latency_s,
        "batch_latency_s": batch_latency_s,
        "attempts": completion.attempts,
        "response_model": completion.response_model,
        "usage": {"input_tokens": usage.input_tokens,
                  "cached_input_tokens": usage.cached_input_tokens,
                  "output_tokens": usage.output_tokens,
                  "thinking_tokens": usage.thinking_tokens},
        "oracle": prepared.oracle,
        # only under --option-order shuffled / circular: a release record is unchanged
        **_order_fields(prepared.turn, parsed),
        # only for a reply over the cap (docs/engines.md, "Reply cap")
        **({REPLY_CHARS_FIELD: completion.reply_chars}
           if completion.reply_chars is not None else {}),
    }


def _order_fields(turn: PlannedTurn, parsed: ParsedAnswer) -> dict[str, Any]:
    """A record's option-order fields (none in the release order).

    ``option_order``: displayed position i shows original option ``option_order[i]``;
    ``displayed_answer``: the parsed answer as the model gave it (``answer`` is in original
    numbers); ``rotation``: k of a circular run's rotation.
    """
    if turn.option_order is None:
        return {}
    out: dict[str, Any] = {"option_order": list(turn.option_order),
                           "displayed_answer": sorted(turn.displayed(i) for i in parsed.answer)
                           if parsed.answer else None}
    if turn.rotation:
        out["rotation"] = turn.rotation
    return out


def score_completion(prepared: PreparedTurn, completion: Completion) -> tuple[ParsedAnswer, bool]:
    """Parse and score one completion of a prepared turn.

    The answer is parsed against the options as displayed and mapped back to original option
    numbers (:func:`~chexpercept.evaluation.option_order.to_original`) before it is compared
    with the ground truth, so every option order is scored by the one rule. A reply cut by
    the reply cap (``reply_chars`` set, status ``truncated``;
    :func:`~chexpercept.evaluation.reply_cap.cap_reply`) is ``truncated`` and wrong without
    being read: its declared answer may lie past the cut (docs/engines.md, "Reply cap").

    Returns:
        The parsed answer in original option numbers, and whether it is correct.
    """
    turn = prepared.turn
    if completion.reply_chars is not None and completion.status == TRUNCATED:
        return ParsedAnswer(None, TRUNCATED,
                            f"reply of {completion.reply_chars} characters, over the reply "
                            f"cap of {len(completion.text or '')} (--max-reply-chars); its "
                            f"first part is kept, not read"), False
    status = completion.status if completion.status in COMPLETION_STATUSES else ERROR
    parsed = parse_answer(completion.text, num_options=turn.num_options,
                          multi_select=turn.multi_select, option_texts=turn.option_texts,
                          none_index=turn.none_index, finish_reason=completion.finish_reason,
                          completion_status=status, question=turn.question)
    parsed = to_original(parsed, turn)
    return parsed, is_correct(parsed, turn.ground_truth, multi_select=turn.multi_select)


def encode_results(path: Path, states: Iterable[CaseState], model_id: str, *,
                   priced: bool = True) -> None:
    """Build, validate and encode the result of each finished state not encoded yet.

    Sets ``state.result_json``; the async runner calls it as each case finishes, so the work
    overlaps the requests in flight instead of stalling the next checkpoint. ``priced``:
    see :func:`~chexpercept.evaluation.results.token_usage`.

    Raises:
        SchemaError: If a result does not validate (names ``path`` and the key_ids).
    """
    new = {s.dialogue.case.key_id: s for s in states
           if s.result_json is None and s.dialogue.finished}
    if not new:
        return
    data = to_jsonable({key_id: build_case_result(s.dialogue, s.usages, model_id,
                                                  priced=priced)
                        for key_id, s in new.items()})
    schema.parse_all_results(data, path)
    for key_id, result in data.items():
        new[key_id].result_json = encode_member(key_id, result)


def encode_member(key_id: str, value: Any) -> str:
    """``"<key_id>": <value>`` as a member of the indent-2 top-level object."""
    # a nested value is its standalone indent-2 text with each line shifted by one level
    # (JSON strings hold no raw newlines)
    return (json.dumps(key_id, ensure_ascii=False) + ": "
            + json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n  "))


def unfinished_result(state: CaseState) -> dict[str, Any]:
    """The ``all_results.json`` entry of a selected case that did not finish.

    Every stage block is empty and ``unfinished`` says why (``next_turn``, ``turns_answered``,
    ``reason``): Stage 04 counts the case as missing, never as wrong answers
    (docs/engines.md, "Faults").
    """
    dialogue = state.dialogue
    case = dialogue.case
    nxt = dialogue.next_turn
    return {"key_id": case.key_id, "qa_path": case.qa_path, "detection_qa": {},
            "contour_evaluation_qa": {}, "contour_revision_qa": {},
            "attribute_extraction_qa": {},
            "unfinished": {"next_turn": nxt.spec.name if nxt is not None else None,
                           "turns_answered": len(dialogue.outcomes),
                           "reason": state.fault or NOT_REACHED}}


def results_members(states: Iterable[CaseState], model_id: str, results_path: Path,
                    selected: Collection[str] = (), *, priced: bool = True) -> list[str]:
    """The encoded ``all_results.json`` members of ``states``, in their order.

    Finished cases are built, validated and encoded once, then cached on their state
    (:func:`encode_results`): rebuilding and re-encoding every case at each checkpoint
    (pure-Python indented JSON) took ~1.8 s at 2,000 cases and stalled the async runner's event
    loop (benchmarks/bench_api_throughput.py). Selected cases (``selected`` key_ids) that have
    not finished become :func:`unfinished_result` entries, so the file lists every case the run
    was asked for; a run whose cases all finished has none, and its file is the release's.
    ``priced``: see :func:`~chexpercept.evaluation.results.token_usage`.

    Raises:
        SchemaError: If a new case result does not validate (names the file and key_ids).
    """
    states = list(states)
    encode_results(results_path, states, model_id, priced=priced)
    members = []
    for state in states:
        if state.result_json is not None:
            members.append(state.result_json)
        elif state.key_id in selected:
            members.append(encode_member(state.key_id, unfinished_result(state)))
    return members


class RunSession:
    """A run folder opened for (re)starting: what both runners share.

    Made by :func:`open_session`; the runners ask turns and hand each completion to
    :meth:`finish`, which records it (or its fault) through the store.

    Attributes:
        store: The run folder.
        settings: The run's settings.
        states: Every case with records or selected, in benchmark order (replayed); sample 0
            of a ``--samples K`` run.
        sample_states: Sample k >= 1 -> its states, as ``states`` (empty for K = 1).
        active_states: The selected cases' states, in selection order (each case's K
            samples in sample order).
        summary: The summary, with ``turns_resumed`` filled in.
        breaker: Stops the run when too many requests in a row get no answer.
        writer: Appends to ``records.jsonl`` (closed by :meth:`close`).
        judge: The judge model (``--judge``; :mod:`chexpercept.evaluation.judge`), or None.
        judge_breaker: Stops the run when too many judge requests in a row get no answer.
        kept: Request id -> a model reply kept by an earlier judge fault, answered again
            from there (:meth:`wrap`) instead of asking the model.
        reply_cap: Characters of one reply kept (:func:`run_reply_cap`); a longer reply is
            cut before it is scored, recorded or replayed (docs/engines.md, "Reply cap").
        priced: Whether the calls are priced from ``cfg/pricing.yaml``: False when the
            provider's requests go elsewhere than its own API (``ChatModel.pricing_refusal``;
            every cost is then NA; docs/engines.md, "Endpoints").
    """

    def __init__(self, store: RunStore, settings: EvalSettings, states: dict[str, CaseState],
                 active_states: list[CaseState], summary: RunSummary, *,
                 fsync_every: int = FSYNC_EVERY,
                 fsync_interval_s: float = FSYNC_INTERVAL_S,
                 sample_states: dict[int, dict[str, CaseState]] | None = None,
                 judge: Judge | None = None,
                 kept: Mapping[str, Completion] | None = None,
                 reply_cap: int | None = None, priced: bool = True) -> None:
        self.priced = priced
        self.reply_cap = reply_cap if reply_cap is not None else \
            reply_cap_chars(settings.max_reply_chars, None)
        self.judge = judge
        self.judge_breaker = FaultBreaker(settings.max_consecutive_faults)
        self.kept = dict(kept or {})
        self.store = store
        self.settings = settings
        self.states = states
        self.sample_states = dict(sample_states or {})
        self.active_states = active_states
        self.summary = summary
        self.breaker = FaultBreaker(settings.max_consecutive_faults)
        self.writer = store.writer(fsync_every, fsync_interval_s)
        self.dirty = False

    def write_results(self) -> int:
        """Rewrite ``all_results.json`` (finished cases, unfinished selected ones marked).

        Returns:
            The number of cases finished in every sample (in sample 0 for K = 1).
        """
        self.writer.sync()  # the records behind the results are on disk first
        selected = {s.key_id for s in self.active_states}
        every = {0: self.states, **self.sample_states}  # --samples: one file each
        for k, states in sorted(every.items()):
            path = self.store.sample_results_path(k)
            self.store.write_sample_results(k, results_members(states.values(),
                                                               self.settings.model, path,
                                                               selected, priced=self.priced))
        self.dirty = False
        return sum(all(states[key_id].dialogue.finished for states in every.values())
                   for key_id in self.states)

    def checkpoint(self) -> int:
        """:meth:`write_results` and one log line saying so (every runner's checkpoint).

        Returns:
            The number of finished cases written.
        """
        n = self.write_results()
        logger.info("checkpoint: %d finished case(s) in %s", n, self.store.results_path)
        return n

    def wrap(self, model: ChatModel) -> ChatModel:
        """The model the runner asks: ``model``, answering first from :attr:`kept`.

        Returns:
            ``model`` itself when no reply is kept (every run without a judge), else a
            :class:`~chexpercept.evaluation.judge.KeptReplies` around it.
        """
        if not self.kept:
            return model
        logger.info("resume: %d reply(ies) the judge did not read are judged again (the model "
                    "is not asked again)", len(self.kept))
        return KeptReplies(model, self.kept)

    def judge_task(self, state: CaseState, prep: PreparedTurn,
                   completion: Completion) -> JudgeTask | None:
        """What the judge is to read of this completion, or None.

        None: no judge, a fault, or a reply that is neither ``unparseable`` nor in the audit
        sample (a reply over the reply cap is ``truncated``: the judge never reads it).
        """
        if self.judge is None or completion.status == FAULT:
            return None
        completion = cap_reply(completion, self.reply_cap)
        parsed, _ = score_completion(prep, completion)
        return self.judge.task(prep.turn, prep.request.request_id, parsed, completion.text or "",
                               state.key_id, state.dialogue.sample)

    def judge_batch(self, batch: Sequence[CaseState], prepared: Sequence[PreparedTurn],
                    completions: Sequence[Completion]) -> list[Verdict | None]:
        """The judge's verdicts on a batch's completions, one ``generate`` call for all.

        Returns:
            Per completion, its :class:`~chexpercept.evaluation.judge.Verdict`, or None where
            the judge has nothing to read.
        """
        tasks = [self.judge_task(s, p, c) for s, p, c in zip(batch, prepared, completions,
                                                             strict=True)]
        asked = [t for t in tasks if t is not None]
        if self.judge is None or not asked:
            return [None] * len(tasks)
        self.summary.judge_requests += len(asked)
        verdicts = iter(self.judge.generate(asked))
        return [None if t is None else next(verdicts) for t in tasks]

    async def ajudge(self, state: CaseState, prep: PreparedTurn,
                     completion: Completion) -> Verdict | None:
        """The judge's verdict on one completion (the async runner), or None as above."""
        task = self.judge_task(state, prep, completion)
        if task is None or self.judge is None:
            return None
        self.summary.judge_requests += 1
        return await self.judge.agenerate(task)

    def finish(self, state: CaseState, prep: PreparedTurn, completion: Completion,
               batch_latency_s: float, verdict: Verdict | None = None) -> bool:
        """Record one completion (its answer, or its fault); returns whether it was an answer.

        With a judge, ``verdict`` is the judge's reading of the completion (:meth:`judge_batch`,
        :meth:`ajudge`); a completion the judge was to read without a verdict, or whose
        verdict is a fault, is a fault with the reply kept (docs/parsing.md, "Judge model").

        Raises:
            ProviderError: When too many requests in a row got no answer (:class:`FaultBreaker`,
                the model's or the judge's), or the judge failed fatally (after the fault is
                logged).
        """
        record = self.score(state, prep, completion, batch_latency_s, verdict=verdict)
        if record is None:
            return False
        self.writer.append(record)
        return True

    def score(self, state: CaseState, prep: PreparedTurn, completion: Completion,
              batch_latency_s: float, *,
              extra: Mapping[str, Any] | None = None,
              verdict: Verdict | None = None) -> dict[str, Any] | None:
        """Score one completion and return its record, not yet appended (:meth:`finish` appends).

        A fault is logged to ``faults.jsonl`` at once and returns None; so is a reply the judge
        was to read and did not (its reply kept in the entry).

        Args:
            state: The case.
            prep: The turn as sent.
            completion: The provider's completion for it.
            batch_latency_s: Wall time of the call that carried the request, in seconds.
            extra: Fields added at the end of the record (the Ray replica that answered;
                docs/design.md, "Ray replicas").
            verdict: The judge's reading of ``completion`` (``--judge``), or None.

        Raises:
            ProviderError: When too many requests in a row got no answer (:class:`FaultBreaker`),
                or the judge failed fatally.
        """
        self.dirty = True
        if completion.status == FAULT:
            record_fault(state, prep, completion, self.store, self.summary)
            self.breaker.observe(completion)
            return None
        self.breaker.observe(completion)
        completion = self.capped(completion)
        task = self.judge_task(state, prep, completion)
        if task is not None and (verdict is None or verdict.completion.status == FAULT):
            why = "not asked (the run stopped first)" if verdict is None else \
                str(verdict.completion.error or "no answer").removeprefix("judge: ")
            fault = Completion(text="", status=FAULT, error=f"judge: {why}",
                               attempts=verdict.completion.attempts if verdict else 0)
            record_fault(state, prep, fault, self.store, self.summary, kept=completion)
            if verdict is not None and verdict.fatal is not None:
                raise ProviderError(f"the judge failed: {verdict.fatal} The reply it was to "
                                    f"read is kept in faults.jsonl; re-run the same command "
                                    f"to judge it.") from verdict.fatal
            if verdict is not None:
                self.judge_breaker.observe(fault)
            return None
        if verdict is not None:
            self.judge_breaker.observe(verdict.completion)
        record = finish_turn(state, prep, completion, self.summary, self.settings.model,
                             batch_latency_s, option_probs=self.settings.option_probs,
                             priced=self.priced,
                             judge=self.judge, task=task,
                             verdict=verdict.completion if verdict is not None else None)
        if self.settings.samples > 1:  # which sample, and its seed (Sampling)
            record.update({SAMPLE_FIELD: state.dialogue.sample,
                           "sample_seed": state.dialogue.seed})
        record.update(extra or {})
        return record

    def capped(self, completion: Completion) -> Completion:
        """``completion`` cut to :attr:`reply_cap` characters (:func:`cap_reply`); logs a cut."""
        capped = cap_reply(completion, self.reply_cap)
        if capped is not completion:
            logger.warning("a reply of %d characters is over the reply cap of %d "
                           "(--max-reply-chars): its first part is kept, status truncated",
                           capped.reply_chars, self.reply_cap)
        return capped

    def take(self, state: CaseState, record: dict[str, Any]) -> None:
        """Append a record answered and scored elsewhere (a Ray replica's actor).

        The case takes the answer the way a resume replays ``records.jsonl`` (:func:`_replay`),
        so this session holds what a re-run would rebuild (docs/design.md, "Ray replicas"); the
        fault breaker counts it as an answer. The caller adds to the summary's counts.

        Raises:
            ValueError: If the record is not the case's next turn (names key_id and turns).
        """
        nxt = state.dialogue.next_turn
        if nxt is None or nxt.spec.name != record["turn"]:
            raise ValueError(f"{state.key_id}: a record of turn {record['turn']!r} arrived, "
                             f"but the case's next turn is "
                             f"{nxt.spec.name if nxt is not None else None!r}")
        self.dirty = True
        self.breaker.observe(Completion(text=record["raw"],
                                        status=record["completion_status"]))
        _replay(state, {record["turn"]: record})
        self.writer.append(record)

    def close(self) -> RunSummary:
        """Close the records, rewrite ``all_results.json`` if it is behind, fill the summary.

        Also after a resume: a kill between the last record and the last rewrite leaves
        ``all_results.json`` behind ``records.jsonl``.
        """
        self.writer.close()
        if self.dirty or self.summary.turns_resumed or not self.store.results_path.exists():
            self.write_results()
        return finalize_summary(self)


def open_session(bundle: Bundle, cases: Sequence[EvalCase], model: ChatModel,
                 settings: EvalSettings, run_dir: str | Path, *, overwrite: bool = False,
                 fsync_every: int = FSYNC_EVERY,
                 fsync_interval_s: float = FSYNC_INTERVAL_S,
                 judge: Judge | None = None) -> RunSession:
    """Open the run folder: check or write the manifest, replay the records, build case states.

    Args:
        bundle: The loaded benchmark (key order and JSON hash).
        cases: Validated, planned cases to evaluate.
        model: The provider (its settings go into the manifest).
        settings: Run identity and checkpointing.
        run_dir: ``layouts.eval_run_dir(...)``.
        overwrite: Delete an earlier run's manifest, records, faults and results first.
        fsync_every: Records between two fsyncs of ``records.jsonl``.
        fsync_interval_s: Seconds between two fsyncs of ``records.jsonl``.
        judge: The judge model (``--judge``), or None; part of the run's identity. Replies an
            earlier judge fault kept are answered again from ``faults.jsonl``
            (:meth:`RunSession.wrap`).

    Raises:
        ConfigError: On a bad ``save_every`` or a manifest that differs in an identity field.
        SchemaError: If ``records.jsonl`` is corrupt.
    """
    if settings.save_every < 1:
        raise ConfigError(f"--save-every must be >= 1, got {settings.save_every}")
    check_option_order(settings.option_order)
    if settings.samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {settings.samples}")
    store = RunStore(run_dir)
    images = bundle_image_digests(bundle)  # part of the identity (docs/evaluation_protocol.md)
    store.open(build_manifest(settings, model, bundle, judge, images_sha256=images.sha256),
               overwrite=overwrite, images=images)
    by_sample = store.load_sample_records()
    records = by_sample.get(0, {})
    stray = sorted(k for k in by_sample if k >= settings.samples)
    if stray:  # the manifest's sampling field makes this a damaged file, not another K
        raise SchemaError(f"{store.records_path}: records of sample(s) {stray} in a run of "
                          f"{settings.samples} sample(s)")

    selected = {c.key_id for c in cases}
    extra_keys = [k for k in records if k not in selected and k in bundle.items]
    foreign = [k for k in records if k not in bundle.items]
    if foreign:
        logger.warning("records.jsonl has %d case(s) not in the benchmark (ignored), e.g. %s",
                       len(foreign), foreign[0])
    # the turns the option order asks (docs/evaluation_protocol.md, "Option order")
    planned = {c.key_id: apply_option_order(c, settings.option_order, settings.seed)
               for c in (*cases, *plan_cases(bundle, extra_keys))}
    if model.needs_answer_key:  # the oracle's own channel; requests never carry the answers
        model.set_answer_key(answer_key(planned.values(), settings.samples))
    seeds = settings.sample_seeds() if settings.samples > 1 else [None]
    every = [{key_id: CaseState(Dialogue(planned[key_id], settings.oracle_setting,
                                         settings.system_prompt, sample=k, seed=seed))
              for key_id in bundle.items if key_id in planned}
             for k, seed in enumerate(seeds)]
    states = every[0]
    refusal = model.pricing_refusal()
    if refusal is not None:
        logger.warning("cost: NA: %s", refusal)
    summary = RunSummary(run_dir=store.run_dir, all_results_path=store.results_path,
                         cases_selected=len(cases),
                         # NA from the start for a model without a price (or whose requests go
                         # elsewhere than its provider's own API), even with no call
                         cost_usd=0.0 if model.kind == "baseline"
                         or (refusal is None and lookup(settings.model) is not None)
                         else None)
    for k, sample in enumerate(every):
        for key_id, state in sample.items():
            replayed = _replay(state, by_sample.get(k, {}).get(key_id, {}))
            if key_id in selected:
                summary.turns_resumed += replayed
    if summary.turns_resumed:
        logger.info("resume: %d turn(s) already recorded; not requested again",
                    summary.turns_resumed)
    earlier = [(k, key_id, reason) for k, sample in enumerate(every)
               for key_id, reason in store.unanswered(by_sample.get(k, {}), k).items()
               if key_id in selected]
    if earlier:
        if settings.give_up_unanswered:
            for k, key_id, reason in earlier:
                every[k][key_id].fault = reason
            logger.warning("--give-up-unanswered: %d dialogue(s) whose turn got no answer "
                           "earlier are not asked again (counted as missing)", len(earlier))
        else:
            logger.info("asking again %d turn(s) that got no answer earlier", len(earlier))
    kept = _kept_replies(store, every, by_sample, selected) if judge is not None else {}
    return RunSession(store, settings, states,
                      [sample[c.key_id] for c in cases for sample in every], summary,
                      fsync_every=fsync_every, fsync_interval_s=fsync_interval_s,
                      sample_states={k: st for k, st in enumerate(every) if k},
                      judge=judge, kept=kept, reply_cap=run_reply_cap(settings, model),
                      priced=refusal is None)


def _kept_replies(store: RunStore, every: Sequence[Mapping[str, CaseState]],
                  by_sample: Mapping[int, Any], selected: Collection[str]) -> dict[str, Completion]:
    """Request id -> the model reply an earlier judge fault kept.

    For each selected dialogue whose next turn is that fault's turn (docs/parsing.md, "Judge
    model").
    """
    kept: dict[str, Completion] = {}
    for k, sample in enumerate(every):
        for key_id, entry in store.kept_replies(by_sample.get(k, {}), k).items():
            state = sample.get(key_id)
            nxt = state.dialogue.next_turn if state is not None else None
            if key_id not in selected or nxt is None or nxt.spec.name != entry.get("turn"):
                continue
            try:
                kept[str(entry["request_id"])] = completion_from_json(entry[KEPT_REPLY_FIELD])
            except (KeyError, TypeError, ValueError) as exc:
                logger.warning("%s: %s/%s: kept reply unusable (%s); the turn is asked again",
                               store.faults_path, key_id, entry.get("turn"), exc)
    return kept


def finish_turn(state: CaseState, prep: PreparedTurn, completion: Completion,
                summary: RunSummary, model_id: str, batch_latency_s: float, *,
                option_probs: bool = False, judge: Judge | None = None,
                task: JudgeTask | None = None,
                verdict: Completion | None = None, priced: bool = True) -> dict[str, Any]:
    """Score a completion, commit it to the dialogue, count it; returns the record to append.

    With ``option_probs`` (``--option-probs``) the record gets the turn's ``option_probs``
    (:func:`~chexpercept.evaluation.option_probs.turn_option_probs`; a provider that sent no
    log-probabilities gives ``{"status": "missing"}``, never zeros), read from the parser's
    answer (a judged turn's are the unparseable reply's).

    With a judge's ``task`` and ``verdict`` (docs/parsing.md, "Judge model"): an unparseable
    reply the judge read becomes ``judged`` with the judge's answer, scored by it (it keeps the
    parser's ``detail``); one the judge could not read stays ``unparseable``; both get the
    ``judge`` object. An audited ``ok`` reply gets ``judge_audit`` and keeps its status and
    score. ``priced`` False (requests sent elsewhere than the provider's own API;
    docs/engines.md, "Endpoints") counts the call's cost as NA.

    Raises:
        ValueError: For a ``fault`` completion (no answer; see :func:`record_fault`), or a task
            without its verdict.
    """
    if completion.status == FAULT:
        raise ValueError(f"{prep.request.request_id}: a fault is not an answer")
    if task is not None and (verdict is None or judge is None):
        raise ValueError(f"{prep.request.request_id}: a judge task needs the judge's verdict")
    strict, correct = score_completion(prep, completion)
    parsed, fields = strict, {}
    if task is not None and judge is not None and verdict is not None:
        reading = read_verdict(prep.turn, verdict)
        if task.kind == "audit":
            fields[AUDIT_FIELD] = judge.audit(task, reading, verdict)
        else:
            fields[JUDGE_FIELD] = judge.record(reading, verdict)
            if reading.status == OK and reading.answer:
                parsed = ParsedAnswer(reading.answer, Status.JUDGED, strict.detail)
                correct = is_correct(reading, prep.turn.ground_truth,
                                     multi_select=prep.turn.multi_select)
    record = _record(prep, completion, parsed, correct, state.dialogue.case.key_id,
                     batch_latency_s)
    probs = None
    if option_probs:  # read as displayed, keyed by original numbers (--option-order)
        turn = prep.turn
        shown = tuple(sorted(turn.displayed(i) for i in strict.answer)) if strict.answer \
            else None
        probs = turn_option_probs(completion.top_logprobs, turn.num_options, shown,
                                  turn.original if turn.option_order is not None else None)
        record["option_probs"] = probs
    record.update(fields)
    state.dialogue.commit(prep, TurnOutcome(completion.text or "", parsed, correct, probs,
                                            judge=fields.get(JUDGE_FIELD),
                                            judge_audit=fields.get(AUDIT_FIELD)))
    usage = completion.usage
    state.usages.append(dict(record["usage"]))
    summary.usage.update(input=usage.input_tokens, cached_input=usage.cached_input_tokens,
                         output=usage.output_tokens, thinking=usage.thinking_tokens)
    summary.add_cost(cost_usd(model_id, usage) if priced else None)
    summary.turns_requested += 1
    return record


def finalize_summary(session: RunSession) -> RunSummary:
    """Count finished cases and statuses of the selected cases into the summary."""
    summary = session.summary
    cases = set()
    for state in session.active_states:  # with --samples K, a case finishes with its K samples
        cases.add(state.key_id)
        summary.statuses.update(o.parsed.status for o in state.dialogue.outcomes.values())
        if not state.dialogue.finished:
            summary.unfinished.setdefault(state.key_id, state.fault or NOT_REACHED)
            if session.settings.give_up_unanswered and state.fault is not None:
                summary.given_up.add(state.key_id)
    summary.cases_finished += len(cases) - len(summary.unfinished.keys() & cases)
    return summary


