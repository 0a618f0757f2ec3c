"""Scripted fake models for the Stage 03 tests (they implement the real ChatModel interface)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from utils.llm.base import ChatModel, Completion, TurnRequest, Usage


class KnowsAnswers:
    """A test double told the answers like the ``oracle`` baseline (``set_answer_key``).

    :meth:`with_truth` puts the answer into the request's ``meta`` for the double's own answer
    functions (:func:`right`, :func:`wrong`); the runner never sends it.
    """

    needs_answer_key = True
    answers: Mapping[str, Any] = {}

    def set_answer_key(self, answers: Mapping[str, Any]) -> None:
        self.answers = dict(answers)

    def with_truth(self, request: TurnRequest) -> TurnRequest:
        assert "ground_truth" not in request.meta  # requests never carry the answer
        gt = self.answers[request.request_id]
        gt = list(gt) if isinstance(gt, tuple) else gt
        return dataclasses.replace(request, meta={**request.meta, "ground_truth": gt})


def right(request: TurnRequest) -> str:
    """The ground truth, as ``Answer: ...``."""
    gt = request.meta["ground_truth"]
    return "Answer: " + (",".join(map(str, gt)) if isinstance(gt, list) else str(gt))


def wrong(request: TurnRequest) -> str:
    """A valid but wrong answer, with some reasoning text in front."""
    meta = request.meta
    gt, n = meta["ground_truth"], meta["num_options"]
    if meta["multi_select"]:
        choice = [1] if gt != [1] else [2]
        return "Looking at the points.\nAnswer: " + ",".join(map(str, choice))
    return f"Looking at the image.\nAnswer: {gt % n + 1}"


class ScriptedModel(KnowsAnswers, ChatModel):
    """Answers with ``answer(request)``; records every ``generate`` call.

    Attributes:
        calls: Request ids of each call, in call order.
        batches: The requests of each call.
        fail_on_call: Raise RuntimeError at this call number (0-based) before answering.
        on_call: Optional hook run at the start of each call with the call number.
    """

    provider = "scripted"

    def __init__(self, answer: Callable[[TurnRequest], str | Completion] = right, *,
                 fail_on_call: int | None = None,
                 on_call: Callable[[int], None] | None = None,
                 settings: dict[str, Any] | None = None) -> None:
        super().__init__("scripted-model")
        self.answer = answer
        self.fail_on_call = fail_on_call
        self.on_call = on_call
        self.settings = settings or {}
        self.calls: list[list[str]] = []
        self.batches: list[list[TurnRequest]] = []

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **self.settings}

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        if self.on_call is not None:
            self.on_call(len(self.calls))
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise RuntimeError("simulated crash")
        self.calls.append([r.request_id for r in requests])
        self.batches.append(list(requests))
        out = []
        for request in requests:
            result = self.answer(self.with_truth(request))
            out.append(result if isinstance(result, Completion) else
                       Completion(text=result, finish_reason="stop",
                                  usage=Usage(input_tokens=10, output_tokens=3)))
        return out
