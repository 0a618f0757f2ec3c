"""Baseline providers that call no model: ``dummy``, ``random`` and ``oracle``.

``dummy`` and ``random`` read only ``TurnRequest.meta``, which the Stage 03 runner fills with
``num_options`` (int), ``multi_select`` (bool), ``option_texts`` (list of str) and
``none_index`` (1-based index of the "None" option of a multi-select question, or None): facts
in the question's text anyway. ``oracle`` is told the answers through its own channel
(:meth:`~utils.llm.base.ChatModel.set_answer_key`); no request carries a ground truth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from utils.errors import ProviderError
from utils.llm._hashing import stable_hash
from utils.llm.base import ChatModel, Completion, TurnRequest
from utils.llm.settings import ProviderConfig, RandomConfig


def _require_meta(request: TurnRequest, key: str) -> Any:
    if key not in request.meta:
        raise KeyError(f"request {request.request_id!r}: meta lacks '{key}' (the Stage 03 runner "
                       f"fills it for baseline providers)")
    return request.meta[key]


def format_answer(indices: int | list[int] | tuple[int, ...]) -> str:
    """``Answer: N`` or ``Answer: 1,3`` (sorted, comma-joined without spaces)."""
    if isinstance(indices, (list, tuple)):
        return "Answer: " + ",".join(str(i) for i in sorted(indices))
    return f"Answer: {int(indices)}"


class DummyModel(ChatModel):
    """Always answers ``1``, like the release's ``DummyLLM``.

    See docs/evaluation_protocol.md, "Providers".
    """

    provider = "dummy"
    kind = "baseline"
    description = "always option 1"
    config_class = ProviderConfig
    sampling = "deterministic"

    def __init__(self, model: str = "baseline", config: ProviderConfig | None = None,
                 **options: Any) -> None:
        super().__init__(model)
        self.config = self.make_config(config, options)  # run options only (ignored)

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        """Answer ``1`` to every request."""
        return [Completion(text="1", finish_reason="stop") for _ in requests]


class RandomModel(ChatModel):
    """Uniform random guesser (chance baseline), reproducible per request.

    Each request draws from ``numpy.random.default_rng([seed, stable_hash(request_id)])``, so the
    answer depends only on the run seed and the request id (not on batch order or resume); a
    request's own seed (``TurnRequest.seed``, one sample of ``--samples K``) replaces the run
    seed.
    Single choice: uniform over the options. Multi-select: uniform over the valid answer sets,
    i.e. every non-empty subset of the non-None options, plus the None option alone.
    """

    provider = "random"
    kind = "baseline"
    description = "seeded uniform answers"
    config_class = RandomConfig
    sampling = "seeded"

    def __init__(self, model: str = "baseline", config: RandomConfig | None = None,
                 **options: Any) -> None:
        super().__init__(model)
        self.config: RandomConfig = self.make_config(config, options)
        self.seed = int(self.config.seed)

    def describe(self) -> dict[str, Any]:
        """Provider, model and seed."""
        return {**super().describe(), "seed": self.seed}

    def _answer(self, request: TurnRequest) -> str:
        seed = self.seed if request.seed is None else int(request.seed)
        rng = np.random.default_rng([seed, stable_hash(request.request_id)])
        num_options = int(_require_meta(request, "num_options"))
        if not _require_meta(request, "multi_select"):
            return format_answer(int(rng.integers(1, num_options + 1)))
        none_index = request.meta.get("none_index")
        choices = [i for i in range(1, num_options + 1) if i != none_index]
        # Sets are numbered by bitmask r over `choices`: r = 0 is the None answer (only when a
        # None option exists), r in [1, 2**k) the non-empty subsets; all equally likely.
        low = 0 if none_index is not None else 1
        r = int(rng.integers(low, 2 ** len(choices)))
        if r == 0:
            return format_answer([none_index])
        return format_answer([c for bit, c in enumerate(choices) if r >> bit & 1])

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        """One random valid answer per request."""
        return [Completion(text=self._answer(r), finish_reason="stop") for r in requests]


class OracleModel(ChatModel):
    """Answers the ground truth (upper bound; tests the runner and scoring).

    The session gives it the answer key before the first request
    (:meth:`~utils.llm.base.ChatModel.set_answer_key`).
    """

    provider = "oracle"
    kind = "baseline"
    description = "the ground truth, checks the chain"
    config_class = ProviderConfig
    sampling = "deterministic"
    needs_answer_key = True

    def __init__(self, model: str = "baseline", config: ProviderConfig | None = None,
                 **options: Any) -> None:
        super().__init__(model)
        self.config = self.make_config(config, options)  # run options only (ignored)
        self._answers: dict[str, int | tuple[int, ...]] = {}

    def set_answer_key(self, answers: Mapping[str, int | tuple[int, ...]]) -> None:
        """Keep request_id -> ground truth."""
        self._answers = dict(answers)

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        """``Answer: <ground truth>`` for every request.

        Raises:
            ProviderError: For a request the answer key does not hold (names it).
        """
        out = []
        for request in requests:
            if request.request_id not in self._answers:
                raise ProviderError(f"oracle: no answer for request {request.request_id!r} "
                                    f"(the session sets the answer key before the run)")
            out.append(Completion(text=format_answer(self._answers[request.request_id]),
                                  finish_reason="stop"))
        return out
