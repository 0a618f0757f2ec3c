"""Stage 03: which dialogues may be in flight so that their history stays in the KV cache.

An offline engine (vLLM) keeps the KV of earlier requests in its prefix cache, so a dialogue's
next turn computes only its new tokens, as long as its history has not been evicted. The
benchmark's dialogues together need far more KV than one GPU holds (tens of millions of tokens
against under a million), so a runner that sends every case's turn at once has each dialogue's
prefix evicted by the others' before its own next turn comes. Both Stage 03 runners keep the
dialogues in flight within the cache through a :class:`DialogueWindow` (docs/design.md,
"Batching"): the sync runner admits cases into a rolling window between its ``generate`` calls,
the async runner before it starts a case's first turn.

A case's **footprint** (tokens, rounded up to whole blocks, at most the context):

    F = P + T * r

- ``P``: the estimated prompt tokens of the case's last turn with every earlier answer an
  ``Answer: N`` line (:func:`~chexpercept.evaluation.budget.estimate_prompt_tokens` of
  :func:`~chexpercept.evaluation.budget.last_request`: system prompt, each question, every
  image; docs/engines.md, "Token budget"). A turn's prompt holds every earlier one, so the last
  is the dialogue's largest.
- ``T * r``: the case's ``T`` replies, ``r`` tokens each: the mean output tokens of the answers
  this run has received so far; before the first answer, the output cap (``--max-new-tokens``),
  so the first dialogues are sized for the longest replies the run allows.

A case enters when the footprints of the cases in flight (recomputed with the current ``r``)
plus its own fit :attr:`~utils.llm.base.KVCache.window_tokens`; the first case always enters,
so a dialogue larger than the window runs alone rather than never. Footprints are bounds of the
size each dialogue reaches at its last turn, so the window holds while every case in it grows
to its end. Cases leave when they finish or get no answer (a fault parks them).

With ``--samples K`` each sample of a case is its own dialogue (docs/evaluation_protocol.md,
"Sampling"): the window holds them apart, by ``(key_id, sample)``, each with the case's
footprint (the samples' histories share the prefix up to their first differing reply, but the
window does not count on that).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from chexpercept.evaluation.budget import estimate_prompt_tokens, last_request
from chexpercept.evaluation.session import CaseState
from utils.llm.base import FAULT, Completion, KVCache, PromptLimits

logger = logging.getLogger(__name__)


class DialogueWindow:
    """The cases in flight and their footprints against the engine's KV cache.

    Args:
        cache: The engine's KV cache (:meth:`utils.llm.base.ChatModel.kv_cache`).
        limits: The provider's limits: image rule, tokenizer and image bounds for the prompt
            estimate, ``max_new_tokens`` for the first reply allowance, ``context_tokens`` as
            the largest footprint.

    Attributes:
        cache: The cache.
        in_flight: ``(key_id, sample)`` -> state of the dialogues admitted and not yet left.
        most_in_flight: The most cases in flight at once so far.
    """

    def __init__(self, cache: KVCache, limits: PromptLimits) -> None:
        self.cache = cache
        self.limits = limits
        self.in_flight: dict[tuple[str, int], CaseState] = {}
        self.most_in_flight = 0
        self._prompts: dict[str, int] = {}
        self._sizes: dict[Path, tuple[int, int]] = {}
        self._replies = 0
        self._reply_tokens = 0

    @property
    def reply_tokens(self) -> float:
        """``r``: mean output tokens per answer so far; the output cap before the first."""
        if self._replies:
            return self._reply_tokens / self._replies
        return float(self.limits.max_new_tokens or 0)

    def footprint(self, state: CaseState) -> int:
        """``F`` of ``state``'s case in tokens (see the module docstring).

        Raises:
            ConfigError: If an image of the case cannot be read (names the file).
        """
        case = state.dialogue.case
        prompt = self._prompts.get(case.key_id)
        if prompt is None:
            prompt = estimate_prompt_tokens(last_request(case), self.limits, self._sizes)
            self._prompts[case.key_id] = prompt
        tokens = prompt + len(case.turns) * self.reply_tokens
        block = self.cache.block_tokens
        tokens = math.ceil(tokens / block) * block
        context = self.limits.context_tokens
        return min(tokens, math.ceil(context / block) * block) if context else tokens

    def used(self) -> int:
        """Footprints of the cases in flight, in tokens."""
        return sum(self.footprint(s) for s in self.in_flight.values())

    def fits(self, state: CaseState) -> bool:
        """Whether ``state`` may enter now (always when nothing is in flight)."""
        return not self.in_flight or \
            self.used() + self.footprint(state) <= self.cache.window_tokens

    def enter(self, state: CaseState) -> None:
        """Admit ``state`` (whether it fits is the caller's check, :meth:`fits`)."""
        self.in_flight[(state.key_id, state.dialogue.sample)] = state
        self.most_in_flight = max(self.most_in_flight, len(self.in_flight))

    def leave(self, state: CaseState) -> None:
        """``state`` finished or was parked: its footprint is free again."""
        self.in_flight.pop((state.key_id, state.dialogue.sample), None)

    def observe(self, completion: Completion) -> None:
        """Count an answer's output tokens into ``r`` (a fault is no answer: not counted)."""
        if completion.status != FAULT:
            self._replies += 1
            self._reply_tokens += completion.usage.output_tokens

    def describe(self) -> str:
        """One line: cache, window, dialogues in flight, reply allowance (for logs)."""
        return (f"KV cache {self.cache.tokens} tokens ({self.cache.blocks} blocks of "
                f"{self.cache.block_tokens}), window {self.cache.window_tokens} tokens, "
                f"at most {self.most_in_flight} dialogue(s) in flight, reply allowance "
                f"{self.reply_tokens:.0f} tokens/turn")
