"""The opensource (vLLM) provider and docs/chat_templates.md, on a stub engine that renders.

The stub ``LLM.chat`` renders every conversation with the model folder's chat template (through
the transformers tokenizer, as vLLM does) before it answers any, and fails the WHOLE call when
one conversation does not render, as vLLM's ``LLM.chat`` does. The template error reaches the
provider raw (``jinja2.TemplateError``), wrapped in ``ValueError`` or wrapped in
``vllm.exceptions.VLLMValidationError`` (vLLM 0.3x), depending on the release imitated.
"""

from __future__ import annotations

import json
import sys
import types

import chat_templates
import pytest
import vllm_stub

from utils.llm import create_model
from utils.llm.base import Message, TurnRequest

transformers = pytest.importorskip("transformers")

WRAPS = ("raw", "value_error", "vllm_validation")


def _exceptions_module() -> types.ModuleType:
    """A stand-in ``vllm.exceptions`` (the client/validation errors are not ValueErrors)."""
    module = types.ModuleType("vllm.exceptions")

    class VLLMError(Exception):
        pass

    class VLLMClientError(VLLMError):
        pass

    class VLLMValidationError(VLLMClientError):
        pass

    module.VLLMClientError = VLLMClientError
    module.VLLMValidationError = VLLMValidationError
    return module


def rendering_vllm(monkeypatch, wrap: str = "raw") -> types.ModuleType:
    """Install a stub ``vllm`` whose ``LLM.chat`` renders each conversation with the template."""
    module = vllm_stub.make_vllm_module(lambda conversation: ("Answer: 1", "stop"))
    exceptions = _exceptions_module()
    stub_llm = module.LLM

    class LLM(stub_llm):
        def __init__(self, model: str, **kwargs) -> None:
            super().__init__(model, **kwargs)
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(model)
            self.prompts: list[str] = []
            self.attempts: list[int] = []  # conversations of every LLM.chat call, failed too

        def chat(self, messages, sampling_params=None, **kwargs):
            conversations = messages if messages and isinstance(messages[0], list) \
                else [messages]
            self.attempts.append(len(conversations))
            rendered = []
            for conversation in conversations:
                try:
                    rendered.append(self.tokenizer.apply_chat_template(
                        conversation, tokenize=False, add_generation_prompt=True,
                        **(kwargs.get("chat_template_kwargs") or {})))
                except Exception as exc:
                    if wrap == "value_error":
                        raise ValueError(str(exc)) from exc
                    if wrap == "vllm_validation":
                        raise exceptions.VLLMValidationError(str(exc)) from exc
                    raise
            self.prompts.extend(rendered)
            return super().chat(messages, sampling_params, **kwargs)

    module.LLM = LLM
    monkeypatch.setitem(sys.modules, "vllm", module)
    if wrap == "vllm_validation":
        module.exceptions = exceptions
        monkeypatch.setitem(sys.modules, "vllm.exceptions", exceptions)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    return module


@pytest.fixture()
def folders(tmp_path):
    """A model folder per template family (config.json and chat_template.jinja)."""
    out = {}
    for name, template in chat_templates.FAMILIES.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_vl"}),
                                            encoding="utf-8")
        (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
        out[name] = folder
    return out


def _request(*user_texts, request_id="r"):
    messages = [Message("system", "You are an expert radiologist.")]
    for i, text in enumerate(user_texts):
        if i:
            messages.append(Message("assistant", "Answer: 1"))
        messages.append(Message("user", text))
    return TurnRequest(tuple(messages), request_id=request_id)


@pytest.mark.parametrize("wrap", WRAPS)
def test_one_conversation_the_template_rejects_fails_alone_in_halves(monkeypatch, folders,
                                                                     wrap):
    stub = rendering_vllm(monkeypatch, wrap)
    model = create_model("opensource", str(folders["chatml"]))
    requests = [_request("Is there effusion?", f"Which point? {i}", request_id=str(i))
                for i in range(8)]
    requests[5] = _request("Is there effusion?", f"Please {chat_templates.MARKER}",
                           request_id="bad")
    out = model.generate(requests)
    assert [c.status for c in out] == ["ok"] * 5 + ["error"] + ["ok"] * 2
    assert out[5].error == ("the chat template rejected the request: "
                            + chat_templates.MARKER_ERROR)
    (engine,) = stub.LLM.instances
    answered = [len(call.messages) for call in engine.calls]
    assert sum(answered) == 7  # every good conversation answered exactly once
    assert answered == [4, 1, 2]  # in halves, not one call per conversation
    assert engine.attempts == [8, 4, 4, 2, 1, 1, 2]


def test_no_bad_conversation_is_one_engine_call(monkeypatch, folders):
    stub = rendering_vllm(monkeypatch)
    model = create_model("opensource", str(folders["gemma2"]))
    out = model.generate([_request("Is there effusion?", request_id=str(i)) for i in range(6)])
    assert [c.status for c in out] == ["ok"] * 6
    assert stub.LLM.instances[0].attempts == [6]


def test_gemma2_template_gets_the_system_text_folded(monkeypatch, folders):
    stub = rendering_vllm(monkeypatch)
    model = create_model("opensource", str(folders["gemma2"]))
    assert model.describe()["chat_format"] == {"system_role": False, "strict_alternation": True}
    assert model.runtime_info()["chat_format"]["probed"] is True
    (done,) = model.generate([_request("Is there effusion?", "Which point?")])
    assert done.status == "ok"
    (prompt,) = stub.LLM.instances[0].prompts
    assert prompt.startswith("<start_of_turn>user\nYou are an expert radiologist.\n\n"
                             "Is there effusion?<end_of_turn>\n<start_of_turn>model\nAnswer: 1")
    (conversation,) = stub.LLM.instances[0].calls[0].messages
    assert [m["role"] for m in conversation] == ["user", "assistant", "user"]


def test_strict_template_gets_consecutive_user_turns_merged(monkeypatch, folders):
    stub = rendering_vllm(monkeypatch)
    model = create_model("opensource", str(folders["llama2"]))
    assert model.describe()["chat_format"] == {"system_role": True, "strict_alternation": True}
    request = _request("Is there effusion?", "Ground Truth Provided: effusion is present.")
    request = TurnRequest(request.messages + (Message("user", "Which point?"),))
    (done,) = model.generate([request])
    assert done.status == "ok"
    (conversation,) = stub.LLM.instances[0].calls[0].messages
    assert [m["role"] for m in conversation] == ["system", "user", "assistant", "user"]
    assert conversation[-1]["content"] == ("Ground Truth Provided: effusion is present.\n\n"
                                           "Which point?")
    assert "[INST] Ground Truth Provided: effusion is present.\n\nWhich point? [/INST]" in \
        stub.LLM.instances[0].prompts[0]


def test_chatml_template_is_left_as_is(monkeypatch, folders):
    stub = rendering_vllm(monkeypatch)
    model = create_model("opensource", str(folders["chatml"]))
    assert "chat_format" not in model.describe()  # manifests of earlier runs stay equal
    assert model.runtime_info()["chat_format"] == {
        "system_role": True, "strict_alternation": False, "probed": True, "note": ""}
    request = TurnRequest(_request("Is there effusion?").messages + (Message("user", "Now?"),))
    model.generate([request])
    (conversation,) = stub.LLM.instances[0].calls[0].messages
    assert [m["role"] for m in conversation] == ["system", "user", "user"]


def test_a_template_the_probe_cannot_read_leaves_requests_as_built(monkeypatch, tmp_path,
                                                                   caplog):
    rendering_vllm(monkeypatch)
    folder = tmp_path / "roles_only"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2_vl"}', encoding="utf-8")
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['role'] }}"
                                                "{% endfor %}", encoding="utf-8")
    model = create_model("opensource", str(folder))
    with caplog.at_level("WARNING"):
        fmt = model.chat_format
    assert not fmt.probed and not fmt.changes_prompt
    assert "did not render a one-turn conversation" in caplog.text
    assert "chat_format" not in model.describe()
