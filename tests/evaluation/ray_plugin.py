"""Plugin providers for the Stage 03 Ray tests (``--provider ray_plugin:DyingEchoModel``).

``DyingEchoModel`` is ``stage03_plugin.SlowEchoModel`` (same answers, same request log) whose
process SIGKILLs itself when a batch holds the request ``$CHEXPERCEPT_TEST_DIE_AT``
(``<key_id>/<turn name>``, so only the replica that holds that case dies) and the file
``$CHEXPERCEPT_TEST_DIE_MARKER`` does not exist yet (it creates the file first, so a restarted
replica answers); with ``$CHEXPERCEPT_TEST_DIE_ALWAYS=1`` it dies every time.
It logs the batch (``start``) before dying, as a replica that dies mid-batch.
``FaultEchoModel`` gives no answer (a ``fault`` completion, as an engine that lost the request)
to every request of the turn named ``$CHEXPERCEPT_TEST_FAULT_AT``.
``StartFailsEchoModel`` is one whose engine cannot start: ``start()`` logs an ``engine`` line and
raises ``EngineStartError`` (as the vLLM provider does for ``--max-model-len`` over the model's
context).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from stage03_plugin import SlowEchoModel

from utils.errors import EngineStartError
from utils.llm.base import FAULT, Completion, TurnRequest

DIE_AT_ENV = "CHEXPERCEPT_TEST_DIE_AT"
DIE_MARKER_ENV = "CHEXPERCEPT_TEST_DIE_MARKER"
DIE_ALWAYS_ENV = "CHEXPERCEPT_TEST_DIE_ALWAYS"
FAULT_AT_ENV = "CHEXPERCEPT_TEST_FAULT_AT"


class DyingEchoModel(SlowEchoModel):
    """SlowEchoModel whose replica dies once (or always) at one turn."""

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        die_at = os.environ.get(DIE_AT_ENV)
        if die_at and any(r.request_id == die_at for r in requests):
            marker = Path(os.environ[DIE_MARKER_ENV])
            if os.environ.get(DIE_ALWAYS_ENV) == "1" or not marker.exists():
                marker.touch()
                self._log("start", requests)
                os.kill(os.getpid(), signal.SIGKILL)
        return super().generate(requests)


class FaultEchoModel(SlowEchoModel):
    """SlowEchoModel whose requests of one turn get no answer (``status="fault"``)."""

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        turn = os.environ.get(FAULT_AT_ENV)
        out = super().generate(requests)
        return [Completion(text="", status=FAULT, error="the test engine lost the request")
                if turn and r.request_id.endswith("/" + turn) else c
                for r, c in zip(requests, out, strict=True)]


class StartFailsEchoModel(SlowEchoModel):
    """SlowEchoModel whose engine cannot start (each replica's ``start()`` raises)."""

    def start(self) -> None:
        self._log("engine", [])
        raise EngineStartError("the test engine could not start (ValueError: max_model_len "
                               "over the model's context); nothing was asked or recorded. "
                               "Fix: lower --max-model-len", fix="lower --max-model-len")
