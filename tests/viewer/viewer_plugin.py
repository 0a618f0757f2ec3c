"""A deterministic test provider for the viewer runs: ``--provider viewer_plugin:MixedModel``.

A hash of the request id picks the reply: right (about half), wrong, or unparseable prose
without an answer line (about one in eight), each after a short reasoning paragraph that
names the turn, so the replies can be searched.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from utils.llm.base import ChatModel, Completion, TurnRequest, Usage


class MixedModel(ChatModel):
    """Right, wrong or unparseable answers, decided by the request id."""

    provider = "mixed"
    needs_answer_key = True

    def __init__(self, model: str = "mixed", **options: Any) -> None:
        super().__init__(model)
        self.answers: Mapping[str, Any] = {}

    def set_answer_key(self, answers: Mapping[str, Any]) -> None:
        self.answers = dict(answers)

    def _reply(self, request: TurnRequest) -> str:
        h = hashlib.sha256(request.request_id.encode()).digest()[0]
        turn = request.request_id.rsplit("/", 1)[1]
        lead = f"Looking at the image for {turn}, the findings suggest the following."
        if h % 8 == 0:
            return lead + " I cannot decide between the options."
        gt = self.answers[request.request_id]
        gt = list(gt) if isinstance(gt, tuple) else [gt]
        n = request.meta["num_options"]
        choice = gt if h % 2 else [gt[0] % n + 1]
        return f"{lead}\nAnswer: {','.join(map(str, sorted(choice)))}"

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        return [Completion(text=self._reply(r), finish_reason="stop",
                           usage=Usage(input_tokens=20, output_tokens=12)) for r in requests]
