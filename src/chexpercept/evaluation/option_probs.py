"""Stage 03: a turn's option probabilities from the provider's token log-probabilities.

With ``--option-probs`` every answered turn's record (``records.jsonl``) and its question's
block in ``all_results.json`` carry ``option_probs`` (docs/metrics.md, "Option probabilities
and AUROC"):

- ``{"status": "ok", "probs": {"1": p1, ...}, "residual": r, "token_index": i}`` where the
  parser read an answer and the first generated number token is that answer;
- ``{"status": <why not>}`` otherwise, one of :data:`OPTION_PROBS_STATUSES`: a turn without
  usable log-probabilities gets no probabilities at all (no zeros, no uniform guess), and
  Stage 04 counts such turns apart. (Within an ``ok`` turn, an option absent from the top-k
  gets 0: see :func:`option_probs_from_top_logprobs`.)

The functions here are pure: :func:`answer_position` finds the token where the answer number is
emitted, :func:`option_probs_from_top_logprobs` turns its top-k log-probabilities into option
probabilities, :func:`turn_option_probs` builds the record field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from chexpercept.errors import ChexperceptError

#: Top log-probabilities per generated token asked of the provider with ``--option-probs`` (the
#: most OpenAI's Chat Completions allow, and vLLM's default ``max_logprobs``).
OPTION_PROBS_TOP_K = 20

#: ``option_probs.status`` values: ``ok`` (probabilities recorded); ``missing`` (the provider
#: sent no log-probabilities although they were asked for: a provider problem, recorded, not an
#: answer of zeros); ``no_answer`` (the parser read no answer, so there is no answer token);
#: ``no_number`` (no generated token is a number); ``mismatch`` (the first number token is not
#: the parsed answer, e.g. a number in reasoning text before it); ``no_option`` (no option
#: number among the top-k at that token).
OPTION_PROBS_STATUSES: tuple[str, ...] = ("ok", "missing", "no_answer", "no_number", "mismatch",
                                          "no_option")


def answer_position(
    steps: Sequence[tuple[str, Mapping[str, float]]],
) -> tuple[int, str, Mapping[str, float]] | None:
    """The first generated token whose text, stripped of whitespace, is a digit string.

    Args:
        steps: The generated tokens in order, each ``(token text, {candidate text: logprob})``
            (``utils.llm.base.Completion.top_logprobs``).

    Returns:
        ``(index, token text, its top-k map)``, or None when no generated token is a number.
    """
    for index, (token, top) in enumerate(steps):
        if token.strip().isdigit():
            return index, token, top
    return None


def option_probs_from_top_logprobs(
    top_logprobs: Mapping[str, float], n_options: int
) -> tuple[dict[str, float], float]:
    """Option probabilities from the top-k log-probabilities of the answer number's token.

    Args:
        top_logprobs: token text -> natural-log probability, the provider's top-k at the first
            generated token whose text (stripped of whitespace) is a digit string; tokens that
            differ only in surrounding whitespace (" 1", "1") are summed.
        n_options: number of options; option numbers are "1" .. str(n_options).

    Returns:
        ``(probs, residual)``: ``probs`` maps each option number to its mass renormalised over
        the options found in the top-k; an option absent from the top-k gets 0.0 (a floor: its
        true mass is at most the smallest listed one and is not estimated). ``residual`` is
        ``max(0, 1 - sum(exp(logprob)))`` over the option tokens in the top-k: the mass that
        was renormalised away, recorded so a reader sees it.

    Raises:
        ChexperceptError: ``n_options < 1``, a non-finite or positive log-probability, or no
            option number among the top-k (then there is no probability to report).
    """
    if n_options < 1:
        raise ChexperceptError(f"n_options must be >= 1, got {n_options}")
    raw = {str(i): 0.0 for i in range(1, n_options + 1)}
    for token, logprob in top_logprobs.items():
        if not math.isfinite(logprob) or logprob > 1e-9:
            raise ChexperceptError(f"invalid log-probability {logprob!r} for token {token!r}")
        key = token.strip()
        if key in raw:
            raw[key] += math.exp(logprob)
    total = sum(raw.values())
    if total <= 0.0:
        raise ChexperceptError(
            f"no option number 1..{n_options} among the top log-probabilities "
            f"{sorted(top_logprobs)}"
        )
    return {k: v / total for k, v in raw.items()}, max(0.0, 1.0 - total)


def turn_option_probs(steps: Sequence[tuple[str, Mapping[str, float]]] | None, n_options: int,
                      answer: Sequence[int] | None,
                      original: Callable[[int], int] | None = None) -> dict[str, Any]:
    """The ``option_probs`` field of one answered turn's record.

    Args:
        steps: The completion's ``top_logprobs`` (None when the provider sent none).
        n_options: The question's number of options (>= 1).
        answer: The parsed answer as the model gave it (1-based options as displayed), or
            None when the parser read none.
        original: Maps a displayed option number to the original one where the options were
            shown in another order; the recorded ``probs`` are keyed by original numbers, as
            ``answer`` and ``ground_truth`` in ``all_results.json`` are. None: the release
            order (displayed = original).

    Returns:
        ``{"status": "ok", "probs", "residual", "token_index"}`` or ``{"status": <why not>}``
        (:data:`OPTION_PROBS_STATUSES`; ``no_option`` and ``mismatch`` add a ``detail``).
    """
    if steps is None:
        return {"status": "missing"}
    if not answer:
        return {"status": "no_answer"}
    found = answer_position(steps)
    if found is None:
        return {"status": "no_number"}
    index, token, top = found
    if token.strip() not in {str(a) for a in answer}:
        return {"status": "mismatch",
                "detail": f"first number token {token!r} (token {index}) is not the parsed "
                          f"answer {list(answer)}"}
    try:
        probs, residual = option_probs_from_top_logprobs(top, n_options)
    except ChexperceptError as exc:
        return {"status": "no_option", "detail": str(exc)}
    if original is not None:
        probs = {str(original(int(k))): probs[k] for k in probs}
        probs = {str(i): probs[str(i)] for i in range(1, n_options + 1)}
    return {"status": "ok", "probs": probs, "residual": residual, "token_index": index}
