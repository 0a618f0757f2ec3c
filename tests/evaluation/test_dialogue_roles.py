"""Stage 03 requests and the chat-template rules of docs/chat_templates.md.

The dialogue never sends two user turns in a row, whatever the oracle does: ``explicit`` puts
its paragraph in the next question's own user turn, ``implicit`` overwrites the wrong assistant
turn, and a failed turn still leaves its (empty) assistant turn. Folding the system text for a
template without a system role keeps that alternation.
"""

from __future__ import annotations

import pytest
from stage03_bundle import write_bundle
from stage03_fakes import ScriptedModel, wrong

from chexpercept.evaluation import (
    SYSTEM_PROMPT,
    EvalSettings,
    load_bundle,
    run_evaluation,
    validate_bundle,
)
from utils.llm.base import Completion, TurnRequest
from utils.llm.chat_format import ChatFormat, apply_chat_format

GEMMA2_LIKE = ChatFormat(system_role=False, strict_alternation=True, probed=True)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return load_bundle(write_bundle(tmp_path_factory.mktemp("bench") / "bench"))


def _wrong_or_failed(request: TurnRequest) -> str | Completion:
    """Wrong answers, and every contour evaluation a failed turn (status error, no text)."""
    if request.request_id.endswith("/contour_evaluation_qa"):
        return Completion(text="", status="error", error="the engine rejected the request")
    return wrong(request)


def _requests(bundle, tmp_path, setting):
    model = ScriptedModel(_wrong_or_failed)
    run_evaluation(bundle, validate_bundle(bundle), model,
                   EvalSettings("scripted", "m", oracle_setting=setting), tmp_path / setting)
    return [r for batch in model.batches for r in batch]


@pytest.mark.parametrize("setting", ["none", "implicit", "explicit"])
def test_requests_alternate_and_stay_alternating_once_fitted(bundle, tmp_path, setting):
    requests = _requests(bundle, tmp_path, setting)
    assert any(len(r.messages) >= 9 for r in requests)  # long dialogues were reached
    triggered = 0
    for request in requests:
        roles = [m.role for m in request.messages]
        turns = (len(roles) - 1) // 2
        assert roles == ["system"] + ["user", "assistant"] * turns + ["user"]
        triggered += "Ground Truth Provided" in request.messages[-1].text
        fitted = apply_chat_format(request, GEMMA2_LIKE)
        assert [m.role for m in fitted.messages] == ["user", "assistant"] * turns + ["user"]
        first = fitted.messages[0]
        assert first.text == f"{SYSTEM_PROMPT}\n\n{request.messages[1].text}"
        assert first.images == request.messages[1].images
        assert fitted.messages[1:] == request.messages[2:]
    assert (triggered > 0) == (setting == "explicit")
