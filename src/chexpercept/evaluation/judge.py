"""Stage 03: the optional judge model that reads the replies the parser cannot (``--judge``).

Touches the run folder's ``judge`` / ``judge_audit`` fields of ``records.jsonl`` and
``all_results.json``, the manifest's ``judge`` identity field, and the model replies kept in
``faults.jsonl`` when the judge gave no answer (docs/parsing.md, "Judge model").

Only a reply whose strict parse (``parsing.parse_answer``) is ``unparseable`` goes to the judge;
``refused``, ``truncated``, ``error`` and ``blocked`` never do. The judge is asked one fixed
prompt (:data:`JUDGE_PROMPT`: the question, its options numbered as the model saw them, and the
model's raw reply) and its own reply is parsed just as strictly, against the same options, with
a final ``Answer: none`` meaning that the reply committed to no option. The judge is any
provider of ``utils.llm`` (``--judge PROVIDER:MODEL``), greedy (temperature 0 where the
provider has the option) and seeded from the run seed. A share of the replies the parser did
read (``--judge-audit-rate``, drawn per key_id and turn from the run seed) goes to the judge as
well, to measure how often the two agree; that never changes the turn's status or score.

A fault of the judge (no answer after its retries) is never an answer and never
``unparseable``: the turn is left unrecorded, as any fault, and the model's reply that did
arrive is kept in the fault entry (``run_store.KEPT_REPLY_FIELD``), so a resume re-judges that
same reply (:class:`KeptReplies`) instead of asking the model again.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chexpercept.errors import ConfigError, ProviderError
from chexpercept.evaluation.cases import PlannedTurn
from chexpercept.evaluation.option_order import to_original
from chexpercept.evaluation.parsing import OK, UNPARSEABLE, ParsedAnswer, parse_answer
from chexpercept.rng import rng_for
from utils.llm.base import (
    FAULT,
    ChatModel,
    Completion,
    KVCache,
    Message,
    PromptLimits,
    TurnRequest,
    Usage,
)
from utils.llm.registry import create_model, provider_class, provider_options, split_model_spec
from utils.llm.retry import BatchStopped
from utils.llm.settings import hide_credentials
from utils.status import COMPLETION_STATUSES, Status

logger = logging.getLogger(__name__)

#: The prompt of every judge request (docs/parsing.md, "Judge model"); ``{question}`` is the
#: question as the model was asked it, ``{options}`` its options numbered as displayed and
#: ``{reply}`` the model's raw reply. Its sha256 is in the run manifest and in every judged
#: record, so a changed prompt is another run.
JUDGE_PROMPT = (
    "You check how a model answered a multiple-choice question about a chest X-ray. You do "
    "not answer the question yourself and you do not judge whether the model was right: you "
    "only report which option number(s) the model's reply commits to as its final answer.\n"
    "\n"
    "The question, as the model was asked it:\n"
    "<question>\n{question}\n</question>\n"
    "\n"
    "Its options, numbered as the model saw them:\n"
    "{options}\n"
    "\n"
    "The model's reply:\n"
    "<reply>\n{reply}\n</reply>\n"
    "\n"
    "Rules: give the option number(s) the reply finally commits to (several, comma-separated, "
    "only when the question allows several and the reply commits to all of them). If the reply "
    "chooses an option such as \"None of the above\", give that option's number. If the reply "
    "commits to no option, hedges between options, or contradicts itself, answer none.\n"
    "End your reply with one final line of exactly this form, and nothing after it:\n"
    "Answer: <option number(s), comma-separated>\n"
    "or\n"
    "Answer: none"
)
#: sha256 of :data:`JUDGE_PROMPT` (manifest and records).
JUDGE_PROMPT_SHA256 = hashlib.sha256(JUDGE_PROMPT.encode("utf-8")).hexdigest()
#: Share of ``ok`` replies also sent to the judge (``--judge-audit-rate``).
DEFAULT_AUDIT_RATE = 0.1
#: Record and all_results.json field of an audited ``ok`` reply.
AUDIT_FIELD = "judge_audit"
#: Record id prefix of a judge request (logs only).
JUDGE_REQUEST_PREFIX = "judge:"

# "Answer: none" as the judge's last non-empty line (markdown emphasis allowed)
_NONE_LINE = re.compile(r"answer\s*:\s*none\s*\.?", re.IGNORECASE)


def judge_seed(seed: int) -> int:
    """The judge's seed: a draw of ``rng_for(seed, "03_eval", "judge")`` in [0, 2**31 - 1)."""
    return int(rng_for(seed, "03_eval", "judge").integers(0, 2**31 - 1))


def audited(seed: int, rate: float, key_id: str, turn_name: str, sample: int = 0) -> bool:
    """Whether the ``ok`` reply of this turn is also sent to the judge (the audit sample).

    Drawn from ``rng_for(seed, "03_eval", "judge_audit", key_id, turn_name[, sample])``, so
    it depends on neither case order, concurrency nor sharding, and a seed gives the same sample.

    Args:
        seed: The run seed.
        rate: ``--judge-audit-rate``, in [0, 1].
        key_id: The case.
        turn_name: The turn (a rotation's own name, ``<turn>@r<k>``).
        sample: Sample index of a ``--samples K`` run (0 adds no label).
    """
    if rate <= 0:
        return False
    if rate >= 1:
        return True
    labels = (key_id, turn_name, *((str(sample),) if sample else ()))
    return bool(rng_for(seed, "03_eval", "judge_audit", *labels).random() < rate)


def judge_prompt(turn: PlannedTurn, reply: str) -> str:
    """The judge's prompt for ``reply`` to ``turn`` (:data:`JUDGE_PROMPT`, options as shown)."""
    options = "\n".join(f"{i}: {text}" for i, text in enumerate(turn.option_texts, 1))
    return JUDGE_PROMPT.format(question=turn.question, options=options, reply=reply)


def read_verdict(turn: PlannedTurn, completion: Completion) -> ParsedAnswer:
    """The judge's reply read strictly, in ORIGINAL option numbers.

    ``Answer: none`` as the last non-empty line is no answer (``unparseable``, detail "the
    judge read no answer"); anything else goes through ``parse_answer`` with the turn's options
    as displayed, then back to original numbers (``option_order.to_original``).
    """
    text = completion.text or ""
    lines = [ln.strip().strip("*_` ").strip() for ln in text.splitlines() if ln.strip()]
    if lines and _NONE_LINE.fullmatch(lines[-1]):
        return ParsedAnswer(None, UNPARSEABLE, "the judge read no answer (none)")
    status = completion.status if completion.status in COMPLETION_STATUSES else Status.ERROR
    parsed = parse_answer(text, num_options=turn.num_options, multi_select=turn.multi_select,
                          option_texts=turn.option_texts, none_index=turn.none_index,
                          finish_reason=completion.finish_reason, completion_status=status)
    return to_original(parsed, turn)


@dataclass(frozen=True)
class JudgeTask:
    """A reply the judge is to read.

    Attributes:
        kind: ``judge`` (the reply is ``unparseable``) or ``audit`` (an ``ok`` reply of the
            audit sample).
        parsed: The parser's reading of the reply (original numbers).
        request: The judge's request.
    """

    kind: str
    parsed: ParsedAnswer
    request: TurnRequest


@dataclass(frozen=True)
class Verdict:
    """What the judge returned for one task.

    Attributes:
        completion: The judge's completion (``fault`` when it gave no answer).
        fatal: The error that stops the run when the judge failed fatally (bad key, unknown
            model), else None; the turn is then a fault with its reply kept.
    """

    completion: Completion
    fatal: ProviderError | None = None


def usage_json(usage: Usage) -> dict[str, int]:
    """A record's ``usage`` object."""
    return {"input_tokens": usage.input_tokens, "cached_input_tokens": usage.cached_input_tokens,
            "output_tokens": usage.output_tokens, "thinking_tokens": usage.thinking_tokens}


def completion_json(completion: Completion) -> dict[str, Any]:
    """A completion as the JSON kept in a fault entry (``run_store.KEPT_REPLY_FIELD``)."""
    return {"text": completion.text, "status": completion.status,
            "finish_reason": completion.finish_reason, "usage": usage_json(completion.usage),
            "latency_s": completion.latency_s, "error": completion.error,
            "attempts": completion.attempts, "response_model": completion.response_model,
            "top_logprobs": ([[tok, dict(top)] for tok, top in completion.top_logprobs]
                             if completion.top_logprobs is not None else None)}


def completion_from_json(data: Mapping[str, Any]) -> Completion:
    """The completion kept by :func:`completion_json`.

    Raises:
        ValueError: If ``data`` lacks the text or holds a fault (a fault is never kept).
    """
    if not isinstance(data.get("text"), str) or data.get("status") == FAULT:
        raise ValueError(f"not a kept reply: {dict(data)!r:.200}")
    u = data.get("usage") or {}
    top = data.get("top_logprobs")
    return Completion(text=data["text"], status=str(data.get("status") or OK),
                      finish_reason=data.get("finish_reason"),
                      usage=Usage(int(u.get("input_tokens", 0)),
                                  int(u.get("cached_input_tokens", 0)),
                                  int(u.get("output_tokens", 0)),
                                  int(u.get("thinking_tokens", 0))),
                      latency_s=float(data.get("latency_s") or 0.0), error=data.get("error"),
                      attempts=int(data.get("attempts") or 1),
                      response_model=data.get("response_model"),
                      top_logprobs=[(str(t), {str(k): float(v) for k, v in c.items()})
                                    for t, c in top] if top is not None else None)


class Judge:
    """The judge model of a run (made by :func:`create_judge`).

    Args:
        model: The judge's provider object.
        label: ``PROVIDER:MODEL`` as given to ``--judge``.
        seed: The run seed (the audit sample; the judge's own seed is :func:`judge_seed`).
        audit_rate: ``--judge-audit-rate`` in [0, 1].
        base_url: ``--judge-base-url`` (recorded with its credentials hidden), or None.

    Raises:
        ConfigError: For an audit rate outside [0, 1].
    """

    def __init__(self, model: ChatModel, label: str, *, seed: int = 0,
                 audit_rate: float = DEFAULT_AUDIT_RATE, base_url: str | None = None) -> None:
        if not 0.0 <= audit_rate <= 1.0:
            raise ConfigError(f"--judge-audit-rate must be in [0, 1], got {audit_rate}")
        self.model = model
        self.label = label
        self.seed = seed
        self.audit_rate = audit_rate
        self.base_url = base_url

    def identity(self) -> dict[str, Any]:
        """The manifest's ``judge`` field (compared on resume; no secret)."""
        return {"model": self.label,
                "base_url": hide_credentials(self.base_url) if self.base_url else None,
                "prompt_sha256": JUDGE_PROMPT_SHA256, "audit_rate": self.audit_rate}

    def task(self, turn: PlannedTurn, request_id: str, parsed: ParsedAnswer, reply: str,
             key_id: str, sample: int = 0) -> JudgeTask | None:
        """The judge's task for one parsed reply, or None when the judge has nothing to read.

        Args:
            turn: The planned turn (options as displayed).
            request_id: The model request's id (the judge request's id is derived from it).
            parsed: The parser's reading (original numbers).
            reply: The model's raw reply.
            key_id: The case (audit draw).
            sample: Sample index (audit draw).
        """
        if parsed.status == UNPARSEABLE:
            kind = "judge"
        elif parsed.status == OK and audited(self.seed, self.audit_rate, key_id,
                                             turn.spec.name, sample):
            kind = "audit"
        else:
            return None
        request = TurnRequest(messages=(Message("user", judge_prompt(turn, reply)),),
                              request_id=JUDGE_REQUEST_PREFIX + request_id,
                              meta={"num_options": turn.num_options,
                                    "multi_select": turn.multi_select,
                                    "option_texts": list(turn.option_texts),
                                    "none_index": turn.none_index},
                              seed=judge_seed(self.seed))
        return JudgeTask(kind, parsed, request)

    def record(self, verdict: ParsedAnswer, completion: Completion) -> dict[str, Any]:
        """The ``judge`` object of a judged (or judge-read) turn."""
        return {"model": self.label, "prompt_sha256": JUDGE_PROMPT_SHA256,
                "raw": completion.text or "",
                "answer": list(verdict.answer) if verdict.answer else None,
                "status": verdict.status, "detail": verdict.detail,
                "usage": usage_json(completion.usage)}

    @staticmethod
    def audit(task: JudgeTask, verdict: ParsedAnswer, completion: Completion) -> dict[str, Any]:
        """The ``judge_audit`` object of an audited ``ok`` turn: does the judge agree?"""
        answer = list(verdict.answer) if verdict.status == OK and verdict.answer else None
        return {"answer": answer, "raw": completion.text or "",
                "agrees": answer is not None and tuple(answer) == task.parsed.answer}

    def generate(self, tasks: Sequence[JudgeTask]) -> list[Verdict]:
        """Ask the judge every task in one ``generate`` call (the sync runner).

        A fatal error of the judge gives each task without a completion a :class:`Verdict`
        whose ``fatal`` is that error (the runner records the turns as faults, replies kept,
        then stops).
        """
        if not tasks:
            return []
        try:
            completions = self.model.generate([t.request for t in tasks])
        except BatchStopped as stopped:
            return [Verdict(stopped.completions[i]) if i in stopped.completions
                    else Verdict(_fault(stopped.cause), stopped.cause)
                    for i in range(len(tasks))]
        except ProviderError as exc:
            return [Verdict(_fault(exc), exc) for _ in tasks]
        if len(completions) != len(tasks):
            error = ProviderError(f"judge {self.label} returned {len(completions)} "
                                  f"completion(s) for {len(tasks)} request(s)")
            return [Verdict(_fault(error), error) for _ in tasks]
        return [Verdict(c) for c in completions]

    async def agenerate(self, task: JudgeTask) -> Verdict:
        """Ask the judge one task (the async runner); errors as :meth:`generate`."""
        try:
            return Verdict(await self.model.agenerate(task.request))
        except ProviderError as exc:
            return Verdict(_fault(exc), exc)

    def close(self) -> None:
        """Release the judge's provider."""
        self.model.close()


def _fault(exc: ProviderError) -> Completion:
    return Completion(text="", status=FAULT, error=f"judge: {exc}")


def create_judge(spec: str, *, seed: int = 0, audit_rate: float = DEFAULT_AUDIT_RATE,
                 base_url: str | None = None,
                 options: Mapping[str, Any] | None = None) -> Judge:
    """Make the judge of ``--judge PROVIDER:MODEL`` through the provider registry.

    The judge is created as the evaluated model is (``utils.llm.registry.create_model``; its
    key from the environment or ``api_keys.yaml``), greedy: temperature 0 where its config
    has a ``temperature`` option, and :func:`judge_seed` where it takes a seed.

    Args:
        spec: ``PROVIDER:MODEL`` (``openai:gpt-4o``; ``utils.llm.registry.split_model_spec``).
        seed: The run seed.
        audit_rate: ``--judge-audit-rate``.
        base_url: ``--judge-base-url`` (an OpenAI-compatible server), or None.
        options: Further options given when the provider takes them (``api_keys``).

    Returns:
        The judge (its provider not yet preflighted).

    Raises:
        ConfigError: For a malformed spec, an unknown provider, a base URL the provider does
            not take, or an audit rate outside [0, 1].
    """
    provider, model = split_model_spec(spec)
    takes = provider_options(provider_class(provider))
    chosen: dict[str, Any] = {k: v for k, v in dict(options or {}).items() if k in takes}
    if "seed" in takes:
        chosen["seed"] = judge_seed(seed)
    if "temperature" in takes:
        chosen["temperature"] = 0.0
    if base_url is not None:
        if "base_url" not in takes:
            raise ConfigError(f"--judge-base-url: the judge's provider {provider} takes no base "
                              f"URL (use --judge openai:MODEL for an OpenAI-compatible server)")
        chosen["base_url"] = base_url
    judge = Judge(create_model(provider, model, **chosen), f"{provider}:{model}", seed=seed,
                  audit_rate=audit_rate, base_url=base_url)
    logger.info("judge %s%s, audit rate %g", judge.label,
                f" at {hide_credentials(base_url)}" if base_url else "", audit_rate)
    return judge


class KeptReplies(ChatModel):
    """The evaluated model, answering from the replies a judge fault left unjudged first.

    A resume wraps the model with the replies kept in ``faults.jsonl``
    (``run_store.KEPT_REPLY_FIELD``): a request whose id has a kept reply gets that reply back
    (once) instead of a new call, so the judge reads the reply the model gave; every other
    request goes to the model.

    Args:
        inner: The evaluated model.
        kept: Request id -> the kept completion.
    """

    def __init__(self, inner: ChatModel, kept: Mapping[str, Completion]) -> None:
        super().__init__(inner.model)
        self.inner = inner
        self.kept = dict(kept)
        self.provider = inner.provider
        self.supports_async = inner.supports_async

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        """The kept replies, and the model's completions of the other requests, in order.

        Raises:
            BatchStopped: As the model's (request indices of this batch; kept replies are
                among the completions that arrived).
        """
        out: dict[int, Completion] = {i: self.kept.pop(r.request_id)
                                      for i, r in enumerate(requests) if r.request_id in self.kept}
        send = [i for i in range(len(requests)) if i not in out]
        if send:
            try:
                got = self.inner.generate([requests[i] for i in send])
            except BatchStopped as stopped:
                arrived = {**out, **{send[j]: c for j, c in stopped.completions.items()}}
                raise BatchStopped(stopped.cause, arrived, stopped.abandoned) from stopped
            if len(got) != len(send):
                raise ProviderError(f"provider {self.provider} returned {len(got)} "
                                    f"completion(s) for {len(send)} request(s)")
            out.update(zip(send, got, strict=True))
        return [out[i] for i in range(len(requests))]

    async def agenerate(self, request: TurnRequest) -> Completion:
        """The kept reply of ``request``, else the model's ``agenerate``."""
        if request.request_id in self.kept:
            return self.kept.pop(request.request_id)
        return await self.inner.agenerate(request)

    async def aclose(self) -> None:
        """The model's ``aclose``."""
        await self.inner.aclose()

    def prompt_limits(self) -> PromptLimits:
        """The model's limits."""
        return self.inner.prompt_limits()

    def kv_cache(self) -> KVCache | None:
        """The model's KV cache."""
        return self.inner.kv_cache()

    def describe(self) -> dict[str, Any]:
        """The model's description."""
        return self.inner.describe()

    def close(self) -> None:
        """Nothing: the model's owner closes it."""
