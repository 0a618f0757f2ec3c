"""A plugin provider for the Stage 03 tests: ``--provider stage03_plugin:SlowEchoModel``.

It is loaded by module path (``PYTHONPATH`` holds ``tests/evaluation``) like any third-party
``ChatModel``. Answers depend only on the request (a hash of its id and texts picks right or
wrong), so two runs give the same results. Each ``generate`` call appends a ``start`` line with
its request ids to ``$CHEXPERCEPT_TEST_REQUEST_LOG`` before it sleeps
``$CHEXPERCEPT_TEST_SLEEP_S`` seconds per request, and a ``served`` line when it returns the
completions.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from stage03_fakes import KnowsAnswers

from utils.llm.base import ChatModel, Completion, TurnRequest, Usage

REQUEST_LOG_ENV = "CHEXPERCEPT_TEST_REQUEST_LOG"
SLEEP_ENV = "CHEXPERCEPT_TEST_SLEEP_S"


def answer(request: TurnRequest) -> str:
    """Right or wrong (about one in three), decided by a hash of the request content."""
    digest = hashlib.sha256(request.request_id.encode())
    for message in request.messages:
        digest.update(message.role.encode() + b"\0" + message.text.encode() + b"\0")
    meta = request.meta
    gt, n = meta["ground_truth"], meta["num_options"]
    if digest.digest()[0] % 3:
        choice = gt if isinstance(gt, list) else [gt]
    elif meta["multi_select"]:
        choice = [1] if gt != [1] else [2]
    else:
        choice = [gt % n + 1]
    return f"Reasoning about the image.\nAnswer: {', '.join(map(str, choice))}"


class SlowEchoModel(KnowsAnswers, ChatModel):
    """Deterministic, slow (per-request sleep) provider that logs what it serves."""

    provider = "slowecho"

    def __init__(self, model: str, **options: Any) -> None:
        super().__init__(model)
        self.sleep_s = float(os.environ.get(SLEEP_ENV, "0"))
        self.log_path = os.environ.get(REQUEST_LOG_ENV)

    def _log(self, event: str, requests: list[TurnRequest]) -> None:
        if self.log_path:
            line = json.dumps({"event": event, "pid": os.getpid(),
                               "ids": [r.request_id for r in requests]})
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        self._log("start", requests)
        out = []
        for request in requests:
            time.sleep(self.sleep_s)
            out.append(Completion(text=answer(self.with_truth(request)), finish_reason="stop",
                                  usage=Usage(input_tokens=20, output_tokens=5)))
        self._log("served", requests)
        return out
