"""Stage 03: the reply cap: how much of one reply a run keeps (``records.jsonl``, the history).

A provider is asked for at most ``--max-new-tokens`` tokens a turn, but what comes back is
whatever the server sends: a broken or hostile server can answer a turn with hundreds of
megabytes. Such a reply would be recorded whole, replayed into every later turn of its case
(each a larger request, paid for with a real API) and written into Stage 04's viewer. The cap
(docs/engines.md, "Reply cap") keeps its first :func:`reply_cap_chars` characters: the turn is
recorded with status ``truncated`` and the reply's length in ``reply_chars``, the parser never
reads it (its last ``Answer:`` line may lie past the cut), and later turns replay the part
kept.
"""

from __future__ import annotations

import dataclasses

from utils.llm.base import Completion
from utils.status import Status

#: Characters kept per output token asked for (``--max-new-tokens``). A token of the models'
#: vocabularies is about 4 characters of English on average; twice that is never reached by a
#: reply the server really cut at ``--max-new-tokens`` (docs/engines.md, "Reply cap").
REPLY_CHARS_PER_TOKEN = 8
#: The cap never falls below this many characters, whatever ``--max-new-tokens`` says.
MIN_REPLY_CHARS = 4096
#: Output tokens assumed for a provider that declares no cap (baselines, plugins): the
#: default ``--max-new-tokens`` of the other providers (docs/engines.md, "Decoding").
DEFAULT_REPLY_TOKENS = 8192
#: Record field of a capped reply: its length in characters as the provider returned it.
REPLY_CHARS_FIELD = "reply_chars"


def reply_cap_chars(max_reply_chars: int | None, max_new_tokens: int | None) -> int:
    """The run's cap in characters (docs/engines.md, "Reply cap").

    Args:
        max_reply_chars: ``--max-reply-chars`` (wins when given), or None.
        max_new_tokens: The provider's output-token cap a turn
            (``ChatModel.prompt_limits().max_new_tokens``), or None when it declares none
            (then :data:`DEFAULT_REPLY_TOKENS`).

    Returns:
        ``max_reply_chars``, else ``max(MIN_REPLY_CHARS, REPLY_CHARS_PER_TOKEN *
        max_new_tokens)``.

    Raises:
        ValueError: If ``max_reply_chars`` is given and below 1.
    """
    if max_reply_chars is not None:
        if max_reply_chars < 1:
            raise ValueError(f"--max-reply-chars must be >= 1, got {max_reply_chars}")
        return max_reply_chars
    return max(MIN_REPLY_CHARS, REPLY_CHARS_PER_TOKEN * (max_new_tokens or DEFAULT_REPLY_TOKENS))


def cap_reply(completion: Completion, cap: int) -> Completion:
    """``completion`` with its text cut to ``cap`` characters when it is longer.

    A cut reply keeps the provider's ``refused``, ``error`` or ``blocked`` status; any other
    becomes ``truncated``, and ``reply_chars`` holds the length it had
    (:func:`chexpercept.evaluation.session.score_completion` then scores it as ``truncated``
    without reading it).

    Args:
        completion: The provider's completion.
        cap: :func:`reply_cap_chars` of the run.

    Returns:
        ``completion`` itself when its text fits, else a copy with the first ``cap``
        characters.
    """
    text = completion.text or ""
    if len(text) <= cap:
        return completion
    status = completion.status if completion.status in (Status.REFUSED, Status.ERROR,
                                                         Status.BLOCKED) else Status.TRUNCATED
    return dataclasses.replace(completion, text=text[:cap], status=status,
                               reply_chars=len(text))
