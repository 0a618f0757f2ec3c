"""utils.llm.chat_format: the template probe and the one rule of docs/chat_templates.md."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import chat_templates
import pytest

from utils.errors import ProviderError
from utils.llm.base import ChatModel, Completion, Message, TurnRequest
from utils.llm.chat_format import (
    ChatFormat,
    apply_chat_format,
    context_rule,
    is_template_error,
    probe_chat_template,
)
from utils.llm.registry import create_model

jinja2 = pytest.importorskip("jinja2")
sandbox = pytest.importorskip("jinja2.sandbox")


def _renderer(template: str):
    """Render like transformers: sandboxed jinja2 with ``raise_exception``."""
    env = sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(template)
    return lambda conversation: compiled.render(messages=conversation,
                                                add_generation_prompt=True)


@pytest.mark.parametrize(("family", "system_role", "strict"),
                         [("gemma2", False, True), ("llama2", True, True),
                          ("chatml", True, False)])
@pytest.mark.parametrize("list_content", [False, True])
def test_probe_detects_each_family(family, system_role, strict, list_content):
    found = probe_chat_template(_renderer(chat_templates.FAMILIES[family]),
                                list_content=list_content)
    assert (found.system_role, found.strict_alternation, found.probed) == \
        (system_role, strict, True)
    assert found.changes_prompt == (family != "chatml")


def test_probe_treats_a_silently_dropped_system_text_as_no_system_role():
    drops = "{% for m in messages %}{% if m.role != 'system' %}{{ m.content }}{% endif %}" \
            "{% endfor %}"
    found = probe_chat_template(_renderer(drops), list_content=False)
    assert found.probed and not found.system_role and not found.strict_alternation
    assert "rendered without" in found.note


def test_probe_that_renders_nothing_useful_leaves_requests_as_built():
    found = probe_chat_template(_renderer("{% for m in messages %}{{ m.role }}{% endfor %}"),
                                list_content=False)
    assert not found.probed and not found.changes_prompt
    assert "did not render a one-turn conversation" in found.note


def test_fold_and_merge():
    a, b, c = Path("a.png"), Path("b.png"), Path("c.png")
    request = TurnRequest((Message("system", "Be brief."), Message("user", "Q1", (a,)),
                           Message("assistant", "A1"), Message("assistant", ""),
                           Message("user", "Note", (b,)), Message("user", "Q2", (c,))),
                          request_id="k/t", meta={"x": 1})
    both = apply_chat_format(request, ChatFormat(system_role=False, strict_alternation=True))
    assert both.messages == (Message("user", "Be brief.\n\nQ1", (a,)),
                             Message("assistant", "A1"),
                             Message("user", "Note\n\nQ2", (b, c)))
    assert (both.request_id, both.meta) == ("k/t", {"x": 1})
    fold_only = apply_chat_format(request, ChatFormat(system_role=False))
    assert [m.role for m in fold_only.messages] == ["user", "assistant", "assistant", "user",
                                                    "user"]
    assert apply_chat_format(request, ChatFormat()) is request
    no_user = TurnRequest((Message("system", "S"),))
    assert apply_chat_format(no_user, ChatFormat(system_role=False)).messages == (
        Message("user", "S"),)


def test_template_errors_are_found_through_wrappers():
    try:
        try:
            raise jinja2.exceptions.TemplateError("System role not supported")
        except jinja2.exceptions.TemplateError as exc:
            raise ValueError(str(exc)) from exc
    except ValueError as wrapped:
        assert is_template_error(wrapped)
    assert not is_template_error(ValueError("aspect ratio"))


def test_context_rule_first_turn_stops_later_turn_fails():
    over = "the prompt is 9 tokens, longer than the maximum model length of 8 tokens"
    first = TurnRequest((Message("system", "S"), Message("user", "Q")), request_id="k/t")
    later = TurnRequest(first.messages + (Message("assistant", "A"), Message("user", "Q2")))
    with pytest.raises(ProviderError, match=r"transformers: request k/t .* even before any "
                                            r"answer .*: shorten it\. The run stopped"):
        context_rule(first, Completion("", "error", error=over), provider="transformers",
                     fix="shorten it")
    done = context_rule(later, Completion("", "error", error=over), provider="transformers",
                        fix="shorten it")
    assert done.error.startswith("the dialogue outgrew the model's context")
    other = Completion("", "error", error="aspect ratio")
    assert context_rule(first, other, provider="p", fix="f") is other


class _ReplyImagePlugin(ChatModel):
    """A plugin that rebuilds each request with the question's images on the last reply."""

    provider = "reply-image-plugin"

    def __init__(self, inner: ChatModel) -> None:
        super().__init__(inner.model)
        self.inner = inner

    def generate(self, requests):
        moved = []
        for request in requests:
            messages = list(request.messages)
            last = messages[-1]
            messages[-2] = Message("assistant", messages[-2].text, last.images)
            messages[-1] = Message("user", last.text)
            moved.append(dataclasses.replace(request, messages=tuple(messages)))
        return self.inner.generate(moved)


def _dialogue(image: Path) -> TurnRequest:
    return TurnRequest((Message("system", "be brief"), Message("user", "first?", (image,)),
                        Message("assistant", "Answer: 1"), Message("user", "second?", (image,))),
                       request_id="effusion_s1_positive_0/contour_evaluation_qa",
                       meta={"num_options": 2, "multi_select": False,
                             "option_texts": ["Yes", "No"], "none_index": None})


def test_an_assistant_message_with_images_is_refused_naming_request_and_message(tmp_path):
    image = tmp_path / "xray.png"
    with pytest.raises(ProviderError) as info:
        TurnRequest((Message("user", "q?", (image,)), Message("assistant", "A", (image,)),
                     Message("user", "next?")), request_id="effusion_s1_positive_0/detection_qa")
    text = str(info.value)
    assert "effusion_s1_positive_0/detection_qa" in text and "message 1 (assistant)" in text
    assert str(image) in text and "Prompt structure" in text
    # user and system images stay allowed (the system text and images may be folded)
    TurnRequest((Message("system", "s", (image,)), Message("user", "q?", (image,))))


@pytest.mark.parametrize("provider", ["random", "dummy"])
def test_a_plugin_cannot_hand_a_provider_assistant_images(tmp_path, provider):
    """The check is where every request is made, so no provider's generate ever runs."""
    inner = create_model(provider)
    calls = []
    inner_generate = inner.generate
    inner.generate = lambda requests: calls.append(requests) or inner_generate(requests)
    plugin = _ReplyImagePlugin(inner)
    image = tmp_path / "xray.png"
    assert inner.generate([_dialogue(image)])[0].text  # the dialogue's own request is fine
    with pytest.raises(ProviderError, match=r"contour_evaluation_qa: message 2 \(assistant\)"):
        plugin.generate([_dialogue(image)])
    assert len(calls) == 1  # only the unchanged request reached the provider
