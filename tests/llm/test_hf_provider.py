"""The transformers provider on a tiny random Qwen2-VL built inside the test (CPU; GPU opt-in)."""

from __future__ import annotations

import hashlib
import runpy
import shutil
import sys
import types
from collections import Counter

import chat_templates
import pytest
from local_provider_helpers import (
    EVAL_SCRIPT,
    read_manifest,
    read_records,
    run_eval_cli,
    turns_per_case,
    write_marked_bundle,
)
from PIL import Image

from utils.errors import ConfigError, EngineStartError, ProviderError
from utils.llm import create_model
from utils.llm.base import Message, TurnRequest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import tiny_vlm  # noqa: E402 - needs transformers


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return tiny_vlm.build_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny") / "tiny_qwen2_vl")


@pytest.fixture()
def images(tmp_path):
    paths = []
    for i in range(3):
        path = tmp_path / f"img{i}.png"
        Image.new("RGB", (8, 8), (30 * i, 60, 90)).save(path)
        paths.append(path)
    return paths


def _request(*turns, request_id="r"):
    """turns: (text, images) user turns separated by a fixed assistant answer."""
    messages = [Message("system", "You are an expert radiologist.")]
    for i, (text, imgs) in enumerate(turns):
        if i:
            messages.append(Message("assistant", "Answer: 1"))
        messages.append(Message("user", text, tuple(imgs)))
    return TurnRequest(messages=tuple(messages), request_id=request_id)


class _Spy:
    """Wraps Qwen2VLProcessor.apply_chat_template: images sent vs image blocks tokenized."""

    def __init__(self, monkeypatch, vision_start_id):
        self.calls = []
        original = transformers.Qwen2VLProcessor.apply_chat_template
        spy = self

        def wrapper(processor, conversation, *args, **kwargs):
            out = original(processor, conversation, *args, **kwargs)
            if not kwargs.get("tokenize"):  # the chat template probe (docs/chat_templates.md)
                return out
            sent = [sum(p["type"] == "image" for m in conv for p in m["content"])
                    for conv in conversation]
            blocks = (out["input_ids"] == vision_start_id).sum(dim=1).tolist()
            spy.calls.append({"sent": sent, "blocks": blocks,
                              "lengths": out["attention_mask"].sum(dim=1).tolist(),
                              "kwargs": kwargs})
            return out

        monkeypatch.setattr(transformers.Qwen2VLProcessor, "apply_chat_template", wrapper)


def test_cli_end_to_end_on_a_tiny_random_vlm(tiny_model, tmp_path, monkeypatch):
    bench = tmp_path / "bench"
    write_marked_bundle(bench)
    vision_start = transformers.AutoTokenizer.from_pretrained(tiny_model).convert_tokens_to_ids(
        "<|vision_start|>")
    spy = _Spy(monkeypatch, vision_start)
    out = tmp_path / "out"
    rc = run_eval_cli(["--benchmark-dir", str(bench), "--output-path", str(out),
                       "--provider", "transformers", "--model", "tiny-qwen2-vl",
                       "--model-path", str(tiny_model), "--device", "cpu", "--batch-size", "3",
                       "--max-new-tokens", "4", "--oracle_setting", "none", "--no-progress"])
    assert rc == 0
    run_dir = out / "transformers_tiny-qwen2-vl" / "oracle_none"
    records = read_records(run_dir)
    planned = turns_per_case(bench)
    assert Counter(r["key_id"] for r in records) == Counter(planned)  # one completion each
    for rec in records:
        assert rec["completion_status"] in ("ok", "truncated")
        assert rec["finish_reason"] in ("stop", "length")
        assert rec["usage"]["input_tokens"] > 0
        assert 1 <= rec["usage"]["output_tokens"] <= 4
        assert rec["status"]  # parsed status recorded (gibberish: mostly unparseable)
    # batches of up to 3 conversations of different lengths, every image tokenized
    assert max(len(c["sent"]) for c in spy.calls) == 3
    assert any(len(set(c["lengths"])) > 1 for c in spy.calls)
    for call in spy.calls:
        assert call["sent"] == call["blocks"]
        assert call["kwargs"]["processor_kwargs"]["padding"] is True
    assert max(n for c in spy.calls for n in c["sent"]) == 7  # revision-required dialogue
    manifest = read_manifest(run_dir)
    assert manifest["provider_settings"]["config_sha256"] == hashlib.sha256(
        (tiny_model / "config.json").read_bytes()).hexdigest()
    assert manifest["provider_settings"]["chat_template_sha256"] == hashlib.sha256(
        tiny_vlm.CHAT_TEMPLATE.encode()).hexdigest()
    assert manifest["provider_runtime"] == {
        "backend": "transformers", "transformers_version": transformers.__version__,
        "model_path": str(tiny_model), "device": "cpu", "device_map": None, "batch_size": 3,
        "context_tokens": 2048,
        "chat_format": {"system_role": True, "strict_alternation": False, "probed": True,
                        "note": ""}}
    assert "chat_format" not in manifest["provider_settings"]  # ChatML: the prompt as built
    assert (run_dir / "all_results.json").is_file()


def test_batched_generation_matches_one_at_a_time(tiny_model, images):
    """Left padding: a conversation's greedy output does not depend on its batch mates."""
    model = create_model("transformers", "tiny", model_path=str(tiny_model), device="cpu",
                         batch_size=4, max_new_tokens=5)
    requests = [
        _request(("Is there any finding suggestive of effusion?", images[:1]), request_id="a"),
        _request(("Short?", images[1:2]), ("Which point should the mask be expanded toward? "
                                           "red point, orange point", images[2:3]),
                 request_id="b"),
        _request(("A much longer question about the cardiac silhouette and the costophrenic "
                  "angles on both sides of the chest?", images[:2]), request_id="c"),
    ]
    batched = model.generate(requests)
    model.batch_size = 1
    single = model.generate(requests)
    assert [c.text for c in batched] == [c.text for c in single]
    assert [c.usage.input_tokens for c in batched] == [c.usage.input_tokens for c in single]
    assert len({c.usage.input_tokens for c in batched}) == 3
    assert [c.usage.output_tokens for c in batched] == [c.usage.output_tokens for c in single]


def test_finish_reason_and_errors(tiny_model, images, tmp_path):
    model = create_model("transformers", "tiny", model_path=str(tiny_model), device="cpu",
                         max_new_tokens=3)
    eos = next(iter(model._eos_ids))
    assert model._finish([5, eos, 0]) == (2, "stop")
    assert model._finish([5, 6, 7]) == (3, "length")
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    out = model.generate([_request(("q", [bad])), _request(("q", images[:1]))])
    assert out[0].status == "error" and "bad.png" in out[0].error
    assert out[1].status in ("ok", "truncated")
    assert out[1].status == ("truncated" if out[1].finish_reason == "length" else "ok")


def test_bad_settings_are_config_errors(tiny_model, tmp_path):
    with pytest.raises(ConfigError, match="not a folder"):
        create_model("transformers", "tiny", model_path=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="--device"):
        create_model("transformers", "tiny", model_path=str(tiny_model), device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            create_model("transformers", "tiny", model_path=str(tiny_model), device="cuda")


def test_hulu_med_path_calls(monkeypatch, tmp_path, images):
    """Hulu-Med (remote code) is called as the release does, with fakes.

    See docs/evaluation_protocol.md, "Providers".
    """
    calls = {}

    class FakeTokenizer:
        eos_token_id = 9
        model_max_length = 0

    class FakeProcessor:
        tokenizer = FakeTokenizer()

        def __call__(self, **kwargs):
            calls["processor"] = kwargs
            return {"input_ids": torch.tensor([[1, 2, 3]]),
                    "pixel_values": torch.zeros(2, 4)}

        def batch_decode(self, rows, **kwargs):
            calls["decode"] = (rows, kwargs)
            return [" Answer: 2 "]

    class FakeModel:
        generation_config = types.SimpleNamespace(eos_token_id=9)

        def to(self, device):
            return self

        def eval(self):
            return self

        def generate(self, **kwargs):
            calls["generate"] = kwargs
            return torch.tensor([[1, 2, 3, 7, 8, 9, 0]])  # prompt echoed, then answer + eos

    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained",
                        lambda *a, **k: calls.setdefault("proc_load", (a, k)) and FakeProcessor())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: calls.setdefault("model_load", (a, k)) and FakeModel())
    folder = tmp_path / "hulu"
    folder.mkdir()
    model = create_model("transformers", "hulu-med", model_path=str(folder), device="cpu",
                         batch_size=4)
    assert model.batch_size == 1
    (completion,) = model.generate([_request(("q1", images[:1]), ("q2", images[1:3]))])
    assert completion.text == "Answer: 2"
    assert completion.usage.input_tokens == 3 and completion.usage.output_tokens == 3
    assert calls["model_load"][1]["trust_remote_code"] is True
    assert calls["processor"]["add_system_prompt"] is True
    assert calls["processor"]["add_generation_prompt"] is True
    conversation = calls["processor"]["conversation"]
    assert conversation[1]["content"][1] == {"type": "image",
                                             "image": {"image_path": str(images[0])}}
    assert calls["generate"]["modals"] == ["image"] * 3
    assert calls["generate"]["do_sample"] is False
    assert calls["decode"][0] == [[7, 8, 9]]
    assert calls["decode"][1]["use_think"] is True
    assert FakeProcessor.tokenizer.model_max_length == 32768


def test_missing_transformers_gives_the_install_line(monkeypatch, tiny_model):
    from utils.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingDependencyError, match=r"\.\[hf\]"):
        create_model("transformers", "tiny", model_path=str(tiny_model))


@pytest.mark.gpu
def test_tiny_vlm_on_cuda_bf16(tiny_model, images):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    model = create_model("transformers", "tiny", model_path=str(tiny_model), device="cuda",
                         batch_size=2, max_new_tokens=4)
    assert model.dtype_name == "bfloat16"
    out = model.generate([_request(("q", images[:1])), _request(("longer question", images))])
    assert [c.status in ("ok", "truncated") for c in out] == [True, True]
    assert all(c.usage.input_tokens > 0 for c in out)


# ------------------------------------------------ chat templates (docs/chat_templates.md)
@pytest.fixture(scope="module")
def family_models(tiny_model, tmp_path_factory):
    """The tiny VLM once per template family (the weights copied, chat_template.jinja replaced)."""
    root = tmp_path_factory.mktemp("families")
    folders = {}
    for name, template in chat_templates.FAMILIES.items():
        folder = shutil.copytree(tiny_model, root / name)
        (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
        folders[name] = folder
    return folders


def _family_model(family_models, name, **kwargs):
    return create_model("transformers", "tiny", model_path=str(family_models[name]),
                        device="cpu", max_new_tokens=2, **kwargs)


class _Conversations:
    """Records the conversations given to Qwen2VLProcessor.apply_chat_template, and renders them."""

    def __init__(self, monkeypatch):
        self.seen = []
        original = transformers.Qwen2VLProcessor.apply_chat_template
        spy = self

        def wrapper(processor, conversation, *args, **kwargs):
            batch = conversation if conversation and isinstance(conversation[0], list) \
                else [conversation]
            spy.seen.extend((processor, conv) for conv in batch)
            return original(processor, conversation, *args, **kwargs)

        self.original = original
        monkeypatch.setattr(transformers.Qwen2VLProcessor, "apply_chat_template", wrapper)

    def roles(self):
        return [[m["role"] for m in conv] for _, conv in self.seen]

    def prompts(self):
        return [self.original(processor, conv, tokenize=False, add_generation_prompt=True)
                for processor, conv in self.seen]


def _history(*texts, images=()):
    """System, then user/assistant pairs for all but the last text, then the last user turn."""
    messages = [Message("system", "You are an expert radiologist.")]
    for i, text in enumerate(texts):
        if i:
            messages.append(Message("assistant", "Answer: 1"))
        messages.append(Message("user", text, tuple(images[i:i + 1])))
    return messages


@pytest.mark.parametrize("family", ["gemma2", "llama2", "chatml"])
def test_one_request_the_template_rejects_fails_alone(family_models, images, tmp_path, family):
    model = _family_model(family_models, family, batch_size=4)
    stretched = tmp_path / "stretched.png"  # aspect ratio 300: Qwen2-VL's processor refuses it
    Image.new("RGB", (600, 2), (9, 9, 9)).save(stretched)
    requests = [
        TurnRequest(tuple(_history("Is there effusion?", images=images)), request_id="a"),
        TurnRequest(tuple(_history("Is there effusion?", f"Please {chat_templates.MARKER}",
                                   images=images)), request_id="bad-template"),
        TurnRequest(tuple(_history("Which point?", "Which mask?", images=images)),
                    request_id="c"),
        TurnRequest(tuple(_history("Look.", images=[stretched])), request_id="bad-image"),
    ]
    out = model.generate(requests)
    assert [c.status for c in out] != ["error"] * 4
    assert out[0].status in ("ok", "truncated") and out[2].status in ("ok", "truncated")
    assert out[1].status == "error"
    assert out[1].error == f"the chat template rejected the request: {chat_templates.MARKER_ERROR}"
    assert out[3].status == "error" and "aspect ratio" in out[3].error
    assert out[0].usage.output_tokens >= 1 and out[2].usage.input_tokens > 0


def test_gemma2_template_gets_the_system_text_in_the_first_user_turn(family_models, images,
                                                                     monkeypatch):
    model = _family_model(family_models, "gemma2")
    assert model.chat_format.describe() == {"system_role": False, "strict_alternation": True}
    assert "System role not supported" in model.chat_format.note
    assert model.describe()["chat_format"] == {"system_role": False, "strict_alternation": True}
    spy = _Conversations(monkeypatch)
    (done,) = model.generate([TurnRequest(tuple(_history("Is there effusion?", "Which point?",
                                                         images=images)))])
    assert done.status in ("ok", "truncated")
    assert spy.roles() == [["user", "assistant", "user"]]
    first = spy.seen[0][1][0]["content"]
    assert first[0] == {"type": "text",
                        "text": "You are an expert radiologist.\n\nIs there effusion?"}
    assert [p["type"] for p in first] == ["text", "image"]
    assert spy.prompts()[0].startswith(
        "<start_of_turn>user\nYou are an expert radiologist.\n\nIs there effusion?"
        "<|vision_start|>")


def test_strict_template_never_sees_two_user_turns_in_a_row(family_models, images,
                                                            monkeypatch):
    model = _family_model(family_models, "llama2")
    assert model.chat_format.describe() == {"system_role": True, "strict_alternation": True}
    spy = _Conversations(monkeypatch)
    messages = (*_history("Is there effusion?", images=images[:1]),
                Message("assistant", "Answer: 1"),
                Message("user", "Ground Truth Provided: effusion is present.", images[1:2]),
                Message("user", "Which point?", images[2:3]))
    (done,) = model.generate([TurnRequest(messages)])
    assert done.status in ("ok", "truncated")
    assert spy.roles() == [["system", "user", "assistant", "user"]]
    last = spy.seen[0][1][-1]["content"]
    assert last[0]["text"] == "Ground Truth Provided: effusion is present.\n\nWhich point?"
    assert [p["type"] for p in last] == ["text", "image", "image"]  # both images, in order
    assert "<<SYS>>\nYou are an expert radiologist.\n<</SYS>>" in spy.prompts()[0]


def test_chatml_template_is_left_as_is(family_models, images, monkeypatch):
    model = _family_model(family_models, "chatml")
    assert model.chat_format.describe() == {"system_role": True, "strict_alternation": False}
    assert model.chat_format.probed and "chat_format" not in model.describe()
    spy = _Conversations(monkeypatch)
    messages = (*_history("Is there effusion?", images=images[:1]),
                Message("user", "And now?", images[1:2]))
    (done,) = model.generate([TurnRequest(messages)])
    assert done.status in ("ok", "truncated")
    assert spy.roles() == [["system", "user", "user"]]
    assert spy.prompts()[0].startswith("<|im_start|>system\nYou are an expert radiologist.")


def test_a_prompt_over_the_context_fails_alone_a_first_turn_stops_the_run(family_models,
                                                                          images):
    model = _family_model(family_models, "chatml", batch_size=3)
    assert model.context_tokens == 2048  # the tiny model's max_position_embeddings
    long_text = "effusion cardiomegaly opacity " * 800
    requests = [TurnRequest(tuple(_history("Is there effusion?", "Which point?",
                                           images=images)), request_id="a"),
                TurnRequest(tuple(_history("Is there effusion?", long_text, images=images)),
                            request_id="long"),
                TurnRequest(tuple(_history("Is there effusion?", "Which mask?",
                                           images=images)), request_id="c")]
    out = model.generate(requests)
    assert [c.status in ("ok", "truncated") for c in out] == [True, False, True]
    assert "longer than the maximum model length of 2048" in out[1].error
    assert "outgrew the model's context" in out[1].error
    with pytest.raises(ProviderError, match="even before any answer"):
        model.generate([TurnRequest(tuple(_history(long_text, images=images)))])


def test_a_model_without_weights_stops_the_cli_before_the_run_folder(tiny_model, tmp_path,
                                                                     capsys):
    """Missing weights: exit 2 naming --model-path, no manifest, no record (issue 20, item 1);
    with the weights back, the same command runs in the same output folder."""
    broken = tmp_path / "no_weights"
    shutil.copytree(tiny_model, broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(EngineStartError) as info:
        create_model("transformers", "tiny", model_path=str(broken), device="cpu")
    assert "--model-path" in info.value.fix and "\n" not in str(info.value)
    assert str(broken) in str(info.value) and "OSError" in str(info.value)

    bench = tmp_path / "bench"
    write_marked_bundle(bench)
    out = tmp_path / "out"
    argv = ["--benchmark-dir", str(bench), "--output-path", str(out), "--provider",
            "transformers", "--model", "tiny-qwen2-vl", "--model-path", str(broken),
            "--device", "cpu", "--max-new-tokens", "2", "--limit", "1",
            "--oracle_setting", "none", "--no-progress"]
    module = runpy.run_path(str(EVAL_SCRIPT), run_name="eval_under_test")
    assert module["run_main"](module["main"], argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "could not start" in err[0] and "--model-path" in err[0]
    run_dir = out / "transformers_tiny-qwen2-vl" / "oracle_none"
    assert not (run_dir / "run_manifest.json").exists()
    assert not (run_dir / "records.jsonl").exists()

    shutil.copy(tiny_model / "model.safetensors", broken / "model.safetensors")
    assert module["run_main"](module["main"], argv) == 0
    assert read_records(run_dir)
