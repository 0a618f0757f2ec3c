"""Stage 03 local providers: fit each request to the model's chat template, fail bad ones alone.

Shared by the ``transformers`` (:mod:`utils.llm.hf_provider`) and ``opensource``
(:mod:`utils.llm.vllm_provider`) providers; the rules are those of docs/chat_templates.md:

- "System role": a template that rejects a system message (Gemma 2 raises "System role not
  supported") or renders without its text gets the system text folded into the first user
  turn, as "<system text>", a blank line, "<first user text>".
- "Strict alternation": a template that rejects two turns of one role in a row (Llama 2,
  Mistral, Gemma: "Conversation roles must alternate user/assistant/user/assistant/...") never
  sees them: consecutive messages of one role are merged (texts joined by a blank line, images
  concatenated in order).
- "One bad request fails alone": a template error, an image the processor rejects or a prompt
  over the context is that request's ``status="error"`` completion; the rest of the batch is
  answered (:func:`context_rule` keeps docs/engines.md's "Faults" rule for the context).

Both rules are detected from the template itself: :func:`probe_chat_template` renders three tiny
conversations once per model and watches for the template's exception.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from utils.errors import ProviderError
from utils.llm.base import Completion, Message, TurnRequest

logger = logging.getLogger(__name__)

#: Texts of the probe conversations; distinctive, so the rendered prompt can be searched for them.
PROBE_SYSTEM = "chexpercept probe: system text"
PROBE_USER = "chexpercept probe: first user text"
PROBE_USER_2 = "chexpercept probe: second user text"

#: Separator of folded and merged texts (docs/chat_templates.md): one blank line.
JOIN = "\n\n"

#: A renderer of one conversation: messages in, the rendered prompt (text) out; it raises what
#: the template raises.
Render = Callable[[list[dict[str, Any]]], Any]


@dataclass(frozen=True)
class ChatFormat:
    """How requests are reshaped for one model's chat template (docs/chat_templates.md).

    Attributes:
        system_role: The template renders a system message (False: its text is folded into the
            first user turn).
        strict_alternation: The template rejects two turns of one role in a row (True: they are
            merged).
        probed: The two rules above come from probing the template; False when the probe could
            not render even a one-turn conversation (or none was made): requests go as built.
        note: What the probe saw (the template's refusals), for logs and ``runtime_info``.
    """

    system_role: bool = True
    strict_alternation: bool = False
    probed: bool = False
    note: str = ""

    @property
    def changes_prompt(self) -> bool:
        """Whether :func:`apply_chat_format` can change a request under this format."""
        return not self.system_role or self.strict_alternation

    def describe(self) -> dict[str, bool]:
        """The rules that shape the prompt (part of a provider's ``describe``)."""
        return {"system_role": self.system_role, "strict_alternation": self.strict_alternation}

    def record(self) -> dict[str, Any]:
        """Everything known about the format (a provider's ``runtime_info``)."""
        return {**self.describe(), "probed": self.probed, "note": self.note}


def _conversation(turns: Sequence[tuple[str, str]], list_content: bool) -> list[dict[str, Any]]:
    return [{"role": role, "content": [{"type": "text", "text": text}] if list_content else text}
            for role, text in turns]


def _rendered_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, (list, tuple)):
        return "\n".join(_rendered_text(o) for o in output)
    return str(output)


def _try(render: Render, turns: Sequence[tuple[str, str]], list_content: bool) -> str | None:
    """None when the conversation renders with every text of it, else why not."""
    try:
        text = _rendered_text(render(_conversation(turns, list_content)))
    except Exception as exc:  # noqa: BLE001 - whatever a template raises is its answer
        return f"{type(exc).__name__}: {exc}"
    missing = [t for _, t in turns if t not in text]
    return f"rendered without {missing}" if missing else None


def probe_chat_template(render: Render, *, list_content: bool) -> ChatFormat:
    """Detect the template's rules by rendering three tiny conversations (once per model).

    1. ``[user]`` must render with its text, else nothing can be learnt (``probed=False``);
    2. ``[system, user]`` failing, or rendering without the system text: no system role;
    3. ``[user, user]`` failing, or rendering without either text: strict alternation.

    Args:
        render: Renders one conversation the way the provider will (same template, template
            keyword arguments and generation prompt).
        list_content: Give message content as ``[{"type": "text", "text": ...}]`` (the
            transformers processor) instead of a string (vLLM's text messages).

    Returns:
        The detected :class:`ChatFormat`.
    """
    base = _try(render, [("user", PROBE_USER)], list_content)
    if base is not None:
        return ChatFormat(probed=False,
                          note=f"the chat template did not render a one-turn conversation "
                               f"({base}); requests are sent as built")
    system = _try(render, [("system", PROBE_SYSTEM), ("user", PROBE_USER)], list_content)
    twice = _try(render, [("user", PROBE_USER), ("user", PROBE_USER_2)], list_content)
    notes = ([f"system message: {system}"] if system else []) + \
        ([f"two user turns: {twice}"] if twice else [])
    return ChatFormat(system_role=system is None, strict_alternation=twice is not None,
                      probed=True, note="; ".join(notes))


def _join(first: str, second: str) -> str:
    return JOIN.join(t for t in (first, second) if t)


def _fold_system(messages: list[Message]) -> list[Message]:
    system = [m for m in messages if m.role == "system"]
    rest = [m for m in messages if m.role != "system"]
    if not system:
        return messages
    text = JOIN.join(m.text for m in system if m.text)
    images = tuple(p for m in system for p in m.images)
    for i, message in enumerate(rest):
        if message.role == "user":
            rest[i] = Message("user", _join(text, message.text), images + message.images)
            return rest
    return [Message("user", text, images), *rest]


def _merge_runs(messages: list[Message]) -> list[Message]:
    merged: list[Message] = []
    for message in messages:
        if merged and merged[-1].role == message.role:
            prev = merged[-1]
            merged[-1] = Message(prev.role, _join(prev.text, message.text),
                                 prev.images + message.images)
        else:
            merged.append(message)
    return merged


def apply_chat_format(request: TurnRequest, chat_format: ChatFormat) -> TurnRequest:
    """The request reshaped for the template (docs/chat_templates.md, the one shared rule).

    Without a system role, the system text goes in front of the first user turn
    ("<system text>", a blank line, "<first user text>"; its images first). Under strict
    alternation, consecutive messages of one role become one: texts joined by a blank line,
    images concatenated in order. Any other format returns ``request`` itself.

    Args:
        request: The request as Stage 03 built it.
        chat_format: The model's format (:func:`probe_chat_template`).

    Returns:
        The request to render (same ``request_id`` and ``meta``).
    """
    if not chat_format.changes_prompt:
        return request
    messages = list(request.messages)
    if not chat_format.system_role:
        messages = _fold_system(messages)
    if chat_format.strict_alternation:
        messages = _merge_runs(messages)
    if tuple(messages) == request.messages:
        return request
    return dataclasses.replace(request, messages=tuple(messages))


def log_chat_format(chat_format: ChatFormat, model: str) -> None:
    """Say once per model what the probe found (called where the format is cached)."""
    if not chat_format.probed:
        logger.warning("%s: %s (docs/chat_templates.md)", model, chat_format.note)
        return
    if not chat_format.system_role:
        logger.info("%s: the chat template has no system role; the system text is folded into "
                    "the first user turn (docs/chat_templates.md, 'System role')", model)
    if chat_format.strict_alternation:
        logger.info("%s: the chat template requires strict user/assistant alternation; "
                    "consecutive turns of one role are merged (docs/chat_templates.md, 'Strict "
                    "alternation')", model)


def template_errors() -> tuple[type[BaseException], ...]:
    """``jinja2.TemplateError`` (what a template's ``raise_exception`` raises), if installed."""
    try:
        from jinja2.exceptions import TemplateError
    except ImportError:
        return ()
    return (TemplateError,)


def is_template_error(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, is a chat template's error."""
    errors = template_errors()
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if errors and isinstance(current, errors):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


#: How engines word "the prompt is longer than the context".
CONTEXT_REJECTION = re.compile(r"maximum (context|model) length|longer than the maximum",
                               re.IGNORECASE)


def context_rule(request: TurnRequest, completion: Completion, *, provider: str,
                 fix: str) -> Completion:
    """Apply the context-overflow rule of docs/engines.md ("Faults") to a rejected request.

    A case's first turn (no earlier answer in the request) that does not fit means no dialogue
    can: the run stops. Later, a dialogue that outgrew the context (the model's earlier answers
    are in it) is that turn's recorded error.

    Args:
        request: The request.
        completion: Its completion; only an ``error`` matching :data:`CONTEXT_REJECTION` is
            concerned.
        provider: Provider name, for the message.
        fix: What to change, for the message (e.g. ``"lower --max-new-tokens or raise
            --max-model-len"``).

    Returns:
        ``completion`` (the error text of a later turn says that the dialogue outgrew it).

    Raises:
        ProviderError: For a context overflow of a request without history.
    """
    if completion.status != "error" or not CONTEXT_REJECTION.search(completion.error or ""):
        return completion
    if not any(m.role == "assistant" for m in request.messages):
        raise ProviderError(
            f"{provider}: request {request.request_id or '?'} does not fit the model's context "
            f"even before any answer ({completion.error}): {fix}. The run stopped; nothing was "
            f"recorded for this turn.")
    completion.error = (f"the dialogue outgrew the model's context (the model's earlier answers "
                        f"are in it; scored as this turn's error): {completion.error}")
    return completion


__all__ = [
    "CONTEXT_REJECTION",
    "ChatFormat",
    "apply_chat_format",
    "context_rule",
    "is_template_error",
    "log_chat_format",
    "probe_chat_template",
    "template_errors",
]
