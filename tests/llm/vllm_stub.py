"""A stand-in ``vllm`` module with the real call signatures (CPU tests of the opensource provider).

``LLM`` takes the engine keyword arguments the provider uses (an unknown one is a TypeError, as
with vLLM's ``EngineArgs``) and checks what vLLM checks before scheduling: the image count
against ``limit_mm_per_prompt`` and the prompt length against ``max_model_len`` (ValueError for
the whole call). ``LLM.chat`` keeps every call and answers each conversation with
``responder(conversation) -> (text, finish_reason)``; with ``SamplingParams(logprobs=k)`` each
output carries vLLM's per-token ``logprobs`` (:func:`sample_logprobs`). ``sampling_params`` is
one ``SamplingParams`` for the call or a list, one per conversation (vLLM's length check);
:func:`params_of` gives each conversation's.

After it starts, ``LLM.llm_engine.vllm_config.cache_config`` holds the KV cache as vLLM's
does: ``num_gpu_blocks`` (``num_gpu_blocks_override``, else :data:`DEFAULT_BLOCKS`, where vLLM
counts what the memory allows), ``block_size`` (16, vLLM's GPU default) and
``enable_prefix_caching``.

Starting the engine fails as vLLM's does: ``max_model_len`` above the context that a local model
folder's ``config.json`` declares is vLLM 0.32's ValueError (same text), and an exception set on
``module.LLM.start_failure`` is raised by every construction (an engine process that dies, out
of memory). ``module.LLM.attempts`` counts the constructions tried, failed ones included.

Install with ``monkeypatch.setitem(sys.modules, "vllm", make_vllm_module(responder))``.
"""

from __future__ import annotations

import base64
import io
import json
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

#: Fake tokens per image (the stub's "tokenizer" counts 4 characters per token).
IMAGE_TOKENS = 16
#: KV-cache blocks of an engine started without ``num_gpu_blocks_override`` (16 tokens each).
DEFAULT_BLOCKS = 8192


@dataclass(kw_only=True)
class SamplingParams:
    """Subset of ``vllm.SamplingParams`` (keyword-only, like the msgspec struct)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] | None = None
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None


@dataclass
class Logprob:
    """``vllm.logprobs.Logprob``: one candidate token's log-probability."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


def sample_logprobs(text: str, k: int) -> tuple[list[int], list[dict[int, Logprob]]]:
    """``(token_ids, logprobs)`` as vLLM gives them with ``SamplingParams(logprobs=k)``.

    ``text`` is cut into words, spaces and single digits (a space joins the token after it);
    each token's id is its UTF-8 bytes read as an integer. A digit token has probability 0.7,
    the other digits 1..4 share 0.25 and a non-number token ``"The"`` 0.05; any other token
    0.99. Each step holds the top ``k`` candidates plus the sampled token, as vLLM's does.
    """
    import math
    import re

    ids, steps = [], []
    for token in re.findall(r"\s*(?:\d|[^\d\s]+)|\s+", text):
        if token.strip().isdigit():
            others = [d for d in "1234" if d != token.strip()]
            cands = [(token, 0.7), *((d, 0.25 / len(others)) for d in others), ("The", 0.05)]
        else:
            cands = [(token, 0.99)]
        step = {}
        for rank, (t, p) in enumerate(cands[:k], 1):
            step[int.from_bytes(t.encode("utf-8"), "big")] = Logprob(math.log(p), rank, t)
        chosen = int.from_bytes(token.encode("utf-8"), "big")
        step.setdefault(chosen, Logprob(math.log(cands[0][1]), 1, token))
        ids.append(chosen)
        steps.append(step)
    return ids, steps


@dataclass
class CompletionOutput:
    """``vllm.outputs.CompletionOutput``."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: Any = None


@dataclass
class RequestOutput:
    """``vllm.outputs.RequestOutput`` (the fields the provider reads)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    num_cached_tokens: int = 0


def decode_data_url(url: str) -> Image.Image:
    """The PIL image inside a ``data:image/...;base64,`` URL (fails on anything else)."""
    head, _, payload = url.partition(",")
    if not (head.startswith("data:image/") and head.endswith(";base64")):
        raise AssertionError(f"not a base64 image data URL: {head!r}")
    return Image.open(io.BytesIO(base64.b64decode(payload))).convert("RGB")


def image_parts(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every image part of a conversation, in order."""
    return [p for m in conversation if isinstance(m["content"], list)
            for p in m["content"] if p["type"] != "text"]


def prompt_length(conversation: list[dict[str, Any]]) -> int:
    """Fake prompt length: 1 token per 4 text characters plus :data:`IMAGE_TOKENS` per image."""
    chars = 0
    for message in conversation:
        content = message["content"]
        if isinstance(content, str):
            chars += len(content)
        else:
            chars += sum(len(p["text"]) for p in content if p["type"] == "text")
    return chars // 4 + IMAGE_TOKENS * len(image_parts(conversation))


def params_of(sampling_params: Any, count: int) -> list[Any]:
    """Each of ``count`` conversations' ``SamplingParams``, as ``LLM.chat`` pairs them."""
    if isinstance(sampling_params, list | tuple):
        if len(sampling_params) != count:
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        return list(sampling_params)
    return [sampling_params] * count


@dataclass
class ChatCall:
    """One ``LLM.chat`` call as received."""

    messages: list[list[dict[str, Any]]]
    sampling_params: Any
    kwargs: dict[str, Any] = field(default_factory=dict)


class _Tokenizer:
    chat_template = "{{ messages }} stub template"


def derived_max_model_len(model: str) -> int | None:
    """``max_position_embeddings`` of a local folder's ``config.json`` (its text config's)."""
    path = Path(model) / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text(encoding="utf-8"))
    value = (config.get("text_config") or {}).get("max_position_embeddings",
                                                   config.get("max_position_embeddings"))
    return int(value) if value else None


def check_max_model_len(model: str, max_model_len: int | None) -> None:
    """vLLM 0.32's config check (``vllm/config/model.py``), with its message.

    vLLM raises it inside pydantic's validation of ``ModelConfig``, so what ``LLM(...)``
    raises is a ``pydantic_core.ValidationError`` (a ValueError) with this text.
    """
    derived = derived_max_model_len(model)
    if max_model_len is not None and derived is not None and max_model_len > derived:
        msg = (f"User-specified max_model_len ({max_model_len}) is greater than the derived "
               f"max_model_len (max_position_embeddings={float(derived)} or "
               f"model_max_length=None in model's config.json).")
        raise ValueError(f"1 validation error for ModelConfig\n  Value error, {msg} To allow "
                         f"overriding this maximum, set the env var "
                         f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must "
                         f"be used with extreme caution. [type=value_error, "
                         f"input_value=ArgsKwargs((), {{'model': ...}}), "
                         f"input_type=ArgsKwargs]\n    For further information visit "
                         f"https://errors.pydantic.dev/2.14/v/value_error")


def make_vllm_module(responder: Callable[[list[dict[str, Any]]], tuple[str, str]] | None = None,
                     ) -> types.ModuleType:
    """A fresh ``vllm`` stand-in; ``module.LLM.instances`` lists the engines created."""
    respond = responder or (lambda conversation: ("Answer: 1", "stop"))

    class LLM:
        instances: list[LLM] = []
        attempts: list[str] = []
        start_failure: BaseException | None = None

        def __init__(self, model: str, *, tokenizer: str | None = None,
                     tensor_parallel_size: int = 1, dtype: str = "auto",
                     trust_remote_code: bool = False, gpu_memory_utilization: float = 0.9,
                     max_model_len: int | None = None,
                     limit_mm_per_prompt: dict[str, int] | None = None,
                     enable_prefix_caching: bool | None = None, seed: int | None = None,
                     max_num_seqs: int | None = None, enforce_eager: bool = False,
                     mm_processor_kwargs: dict[str, Any] | None = None,
                     revision: str | None = None, disable_log_stats: bool = True,
                     num_gpu_blocks_override: int | None = None,
                     block_size: int | None = None) -> None:
            LLM.attempts.append(model)
            if LLM.start_failure is not None:
                raise LLM.start_failure
            check_max_model_len(model, max_model_len)
            self.engine_kwargs = {
                "model": model, "tokenizer": tokenizer,
                "tensor_parallel_size": tensor_parallel_size, "dtype": dtype,
                "trust_remote_code": trust_remote_code,
                "gpu_memory_utilization": gpu_memory_utilization,
                "max_model_len": max_model_len, "limit_mm_per_prompt": limit_mm_per_prompt,
                "enable_prefix_caching": enable_prefix_caching, "seed": seed,
                "max_num_seqs": max_num_seqs, "enforce_eager": enforce_eager}
            self.calls: list[ChatCall] = []
            cache = types.SimpleNamespace(
                num_gpu_blocks=num_gpu_blocks_override or DEFAULT_BLOCKS,
                block_size=block_size or 16,
                enable_prefix_caching=enable_prefix_caching is not False)
            self.llm_engine = types.SimpleNamespace(
                vllm_config=types.SimpleNamespace(cache_config=cache))
            LLM.instances.append(self)

        def get_tokenizer(self) -> _Tokenizer:
            return _Tokenizer()

        def chat(self, messages, sampling_params=None, use_tqdm=True, lora_request=None,
                 chat_template=None, chat_template_content_format="auto",
                 add_generation_prompt=True, continue_final_message=False, tools=None,
                 chat_template_kwargs=None, mm_processor_kwargs=None):
            conversations = messages if messages and isinstance(messages[0], list) \
                else [messages]
            limit = (self.engine_kwargs["limit_mm_per_prompt"] or {"image": 1})["image"]
            for conversation in conversations:
                n_images = len(image_parts(conversation))
                if n_images > limit:
                    raise ValueError(f"At most {limit} image(s) may be provided in one "
                                     f"prompt, got {n_images}")
                max_len = self.engine_kwargs["max_model_len"]
                if max_len is not None and prompt_length(conversation) > max_len:
                    raise ValueError(f"The decoder prompt (length "
                                     f"{prompt_length(conversation)}) is longer than the "
                                     f"maximum model length of {max_len}.")
            self.calls.append(ChatCall(conversations, sampling_params,
                                       {"use_tqdm": use_tqdm,
                                        "chat_template_kwargs": chat_template_kwargs}))
            outputs = []
            params = params_of(sampling_params, len(conversations))
            for i, conversation in enumerate(conversations):
                text, finish = respond(conversation)
                n_prompt = prompt_length(conversation)
                token_ids, logprobs = list(range(max(1, len(text) // 4))), None
                if params[i] is not None and params[i].logprobs is not None:
                    token_ids, logprobs = sample_logprobs(text, params[i].logprobs)
                outputs.append(RequestOutput(
                    request_id=str(i), prompt=None, prompt_token_ids=list(range(n_prompt)),
                    outputs=[CompletionOutput(index=0, text=text, token_ids=token_ids,
                                              logprobs=logprobs, finish_reason=finish)],
                    num_cached_tokens=n_prompt // 2))
            return outputs

        def reset_prefix_cache(self) -> bool:
            return True

    module = types.ModuleType("vllm")
    module.__version__ = "0.0.0-stub"
    module.LLM = LLM
    module.SamplingParams = SamplingParams
    return module
