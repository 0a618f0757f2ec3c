"""Stage 03 provider ``transformers``: open-weight VLMs through HF transformers (CPU or GPU).

Generic path (transformers 5.x; docs/evaluation_protocol.md, "Providers"):
``AutoModelForImageTextToText`` + ``AutoProcessor``; each chunk of ``batch_size`` conversations is
one ``processor.apply_chat_template(batch, ..., processor_kwargs={"padding": True})`` with left
padding and one greedy ``model.generate`` call. bf16 on GPU, fp32 on CPU. A chunk that runs out
of GPU memory is split in halves.

Hulu-Med path (docs/evaluation_protocol.md, "Providers"; needs the ``hulumed`` environment, not
testable without the weights): remote-code ``AutoModelForCausalLM`` (bf16, ``device_map="auto"``,
flash-attention 2 when installed) and Hulu-Med's processor called with
``conversation=..., add_system_prompt=True, add_generation_prompt=True``, one conversation per
``generate`` call, ``batch_decode(..., use_think=True)``.

Requests are fitted to the chat template before rendering (system role, strict alternation,
probed once per model: docs/chat_templates.md), and a request that the template, the processor
or the context rejects fails alone, with its reason ("One bad request fails alone").

torch and transformers are imported when the model is created, never at module import. The
weights load then too, before the run folder is opened: a model that cannot load (missing
weights, out of memory, a CUDA error, an architecture transformers does not know) is an
:class:`~utils.errors.EngineStartError` naming the flag that fixes it (:data:`START_RULES`;
docs/engines.md, "Faults"), never a request's ``error``.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from utils.deps import require
from utils.errors import ChexperceptError, ConfigError
from utils.llm._engine_start import (
    CUDA_SETUP,
    CUDA_SETUP_FIX,
    MISSING_MODEL,
    MODEL_FIX,
    OUT_OF_MEMORY,
    StartRule,
    start_error,
)
from utils.llm._images import load_rgb
from utils.llm.base import ChatModel, Completion, TurnRequest, Usage
from utils.llm.chat_format import (
    ChatFormat,
    apply_chat_format,
    context_rule,
    is_template_error,
    log_chat_format,
    probe_chat_template,
    template_errors,
)
from utils.llm.models import (
    DEFAULT_MAX_TOKENS,
    ModelSpec,
    local_manifest,
    model_fingerprint,
    resolve_model,
)
from utils.llm.settings import TransformersConfig

logger = logging.getLogger(__name__)

#: Conversations per ``generate`` call when ``--batch-size`` is not given.
DEFAULT_BATCH_SIZE = 8

#: Why a model cannot load, and the flag that fixes it, most specific first (docs/engines.md,
#: "Faults"; transformers 5.x and huggingface_hub messages).
START_RULES = (
    StartRule(OUT_OF_MEMORY, "a GPU with more free memory, --device auto (spreads the model "
                             "over every visible GPU; needs accelerate) or --device cpu"),
    StartRule(CUDA_SETUP, f"{CUDA_SETUP_FIX}; or --device cpu"),
    StartRule(MISSING_MODEL, MODEL_FIX),
    StartRule(re.compile(r"Unrecognized (configuration class|processing class|model|image "
                         r"processor)|does not recognize this architecture"),
              "--model: one this transformers release loads as image-text-to-text (or "
              "--provider opensource, or a newer transformers)"),
    StartRule(re.compile(r"ModuleNotFoundError|ImportError|requires the following packages"),
              "install the package the model's code imports (named in the cause) in this "
              "environment"),
)
#: The fix named when the failure is none of :data:`START_RULES`.
START_FALLBACK_FIX = "--log-level DEBUG shows the traceback"


def _error(message: str) -> Completion:
    return Completion(text="", status="error", error=message)


class _PromptTooLong(ValueError):
    """A prompt longer than the model's context (a rejection, like the processor's)."""


def _rejection(exc: BaseException) -> Completion:
    """The error completion of a request transformers rejected (docs/chat_templates.md)."""
    if is_template_error(exc):
        return _error(f"the chat template rejected the request: {exc}")
    return _error(f"transformers rejected the request: {exc}")


def hf_messages(request: TurnRequest, *, hulu: bool = False) -> list[dict[str, Any]]:
    """The request as transformers chat messages (list content; text first, then images).

    Args:
        request: The turn request.
        hulu: Hulu-Med's image parts (``{"type": "image", "image": {"image_path": ...}}``)
            instead of PIL images.

    Returns:
        Messages with ``{"type": "text"}`` / ``{"type": "image"}`` parts.

    Raises:
        ProviderError: If an image cannot be opened (names the file).
    """
    messages = []
    for message in request.messages:
        parts: list[dict[str, Any]] = [{"type": "text", "text": message.text}]
        for path in message.images:
            image: Any = {"image_path": str(path)} if hulu else load_rgb(path)
            parts.append({"type": "image", "image": image})
        messages.append({"role": message.role, "content": parts})
    return messages


def _count_images(request: TurnRequest) -> int:
    return sum(len(m.images) for m in request.messages)


class TransformersChatModel(ChatModel):
    """Open-weight VLM run in-process with HF transformers.

    Args:
        model: A registered alias, the HF id of one, or any HF id / local folder.
        config: The settings (:class:`~utils.llm.settings.TransformersConfig`; each option is
            documented there and in docs/engines.md, "Provider settings"); None: the defaults.
        **options: Options of :class:`~utils.llm.settings.TransformersConfig`, merged over
            ``config``; any other name is an error.

    Raises:
        MissingDependencyError: If torch or transformers is missing.
        ConfigError: For a model this provider cannot run, a bad ``device``, or an unknown
            option or invalid value (names it).
        EngineStartError: If the processor or the weights cannot be loaded or placed on the
            device (names the cause and the flag that fixes it).
    """

    provider = "transformers"
    description = "any image-text-to-text model, CPU or GPU"

    @classmethod
    def replica_gpus(cls, model: str, options: Mapping[str, Any], cluster_gpus: float
                     ) -> float | None:
        """GPUs of one Ray replica: 1 when the cluster has GPUs and ``--device`` is not cpu."""
        return 1.0 if cluster_gpus > 0 and options.get("device") != "cpu" else 0.0
    config_class = TransformersConfig

    def __init__(self, model: str, config: TransformersConfig | None = None,
                 **options: Any) -> None:
        super().__init__(model)
        config = self.make_config(config, options)
        self.config: TransformersConfig = config
        self.spec: ModelSpec = resolve_model(model, self.provider, model_path=config.model_path)
        feature = "the transformers provider"
        self._torch = require("torch", "hf", feature)
        self._transformers = require("transformers", "hf", feature)
        batch_size = config.batch_size
        self.hulu = self.spec.hf_interface == "hulu-med"
        self.batch_size = 1 if self.hulu else int(batch_size or DEFAULT_BATCH_SIZE)
        if self.hulu and batch_size not in (None, 1):
            logger.warning("--batch-size %s ignored: Hulu-Med runs one conversation at a time",
                           batch_size)
        self.max_new_tokens = int(config.max_new_tokens or DEFAULT_MAX_TOKENS)
        self.seed = int(config.seed)
        self.device, self.device_map = self._resolve_device(config.device)
        on_gpu = self.device.startswith("cuda")
        self.dtype_name = "bfloat16" if on_gpu else "float32"
        self._dtype = getattr(self._torch, self.dtype_name)
        self.template_kwargs: dict[str, Any] = {}
        if config.no_thinking and self.spec.thinking is False:
            logger.warning("--no-thinking: the chat template of %s has no thinking switch; the "
                           "model runs as usual (the run folder still gets _no_thinking)",
                           self.spec.alias)
        elif config.no_thinking:
            self.template_kwargs = {"enable_thinking": False}
        self.transformers_version = str(self._transformers.__version__)
        self._v5 = int(self.transformers_version.split(".")[0]) >= 5
        logger.info("transformers: loading %s on %s (%s, batch size %d)", self.spec.source,
                    self.device_map or self.device, self.dtype_name, self.batch_size)
        try:
            if self.hulu:
                self._load_hulu()
            else:
                self._load_generic()
        except ChexperceptError:
            raise
        except Exception as exc:  # noqa: BLE001 - every load failure stops the run
            raise start_error(f"the transformers model {self.spec.source}", exc, START_RULES,
                              fallback_fix=START_FALLBACK_FIX) from exc
        self._eos_ids = self._find_eos_ids()
        #: Prompt tokens the model takes (``max_position_embeddings``), None when unknown.
        self.context_tokens = self._find_context()
        #: The chat template's rules (docs/chat_templates.md), probed once.
        self.chat_format = self._probe_chat_format()

    # ------------------------------------------------------------------ loading
    def _resolve_device(self, device: str | None) -> tuple[str, str | None]:
        """(device of the inputs, ``device_map`` for ``from_pretrained`` or None)."""
        cuda = bool(self._torch.cuda.is_available())
        accelerate = importlib.util.find_spec("accelerate") is not None
        if device is None:
            device = "auto" if cuda and accelerate else "cuda" if cuda else "cpu"
        if device == "auto":
            if not cuda:
                return "cpu", None
            if not accelerate:
                raise ConfigError("--device auto needs the 'accelerate' package "
                                  "(pip install accelerate), or pass --device cuda")
            return "cuda", "auto"
        if device.startswith("cuda") and not cuda:
            raise ConfigError(f"--device {device}: CUDA is not available on this machine; "
                              f"use --device cpu")
        if device != "cpu" and not device.startswith("cuda"):
            raise ConfigError(f"--device must be cpu, cuda, cuda:N or auto, got {device!r}")
        return device, None

    def _dtype_kwargs(self) -> dict[str, Any]:
        return {"dtype" if self._v5 else "torch_dtype": self._dtype}

    def _place(self, model: Any) -> Any:
        return model if self.device_map else model.to(self.device)

    def _load_generic(self) -> None:
        tf = self._transformers
        remote = self.spec.trust_remote_code
        self._processor = tf.AutoProcessor.from_pretrained(self.spec.source,
                                                           trust_remote_code=remote)
        tokenizer = getattr(self._processor, "tokenizer", None)
        if tokenizer is None:
            raise ConfigError(f"{self.spec.source}: its processor has no tokenizer; the "
                              f"transformers provider needs a multimodal processor")
        tokenizer.padding_side = "left"  # batched generation continues from the right end
        if hasattr(self._processor, "padding_side"):
            self._processor.padding_side = "left"
        kwargs: dict[str, Any] = {"trust_remote_code": remote, **self._dtype_kwargs()}
        if self.device_map:
            kwargs["device_map"] = self.device_map
        model = tf.AutoModelForImageTextToText.from_pretrained(self.spec.source, **kwargs)
        self._model = self._place(model).eval()

    def _load_hulu(self) -> None:
        tf = self._transformers
        self._processor = tf.AutoProcessor.from_pretrained(self.spec.source,
                                                           trust_remote_code=True)
        if self.spec.max_model_len:
            self._processor.tokenizer.model_max_length = self.spec.max_model_len
        kwargs: dict[str, Any] = {"trust_remote_code": True, **self._dtype_kwargs()}
        if self.device_map:
            kwargs["device_map"] = self.device_map
        if self.device.startswith("cuda") and importlib.util.find_spec("flash_attn"):
            kwargs["attn_implementation"] = "flash_attention_2"
        model = tf.AutoModelForCausalLM.from_pretrained(self.spec.source, **kwargs)
        self._model = self._place(model).eval()

    def _find_context(self) -> int | None:
        config = getattr(self._model, "config", None)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        value = getattr(text, "max_position_embeddings", None)
        return value if isinstance(value, int) and value > 0 else None

    def _probe_chat_format(self) -> ChatFormat:
        """Probe the processor's chat template as :meth:`_generate_generic` calls it.

        A batch of one conversation, the run's template keyword arguments, no tokenizing.
        """
        if self.hulu:
            return ChatFormat(note="Hulu-Med's processor builds the prompt itself "
                                   "(add_system_prompt); not probed")

        def render(conversation: list[dict[str, Any]]) -> Any:
            return self._processor.apply_chat_template(
                [conversation], tokenize=False, add_generation_prompt=True,
                **self.template_kwargs)

        found = probe_chat_template(render, list_content=True)
        log_chat_format(found, self.spec.alias)
        return found

    def _find_eos_ids(self) -> set[int]:
        ids: set[int] = set()
        eos = getattr(getattr(self._model, "generation_config", None), "eos_token_id", None)
        for value in (eos, getattr(self._processor.tokenizer, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return ids

    # ----------------------------------------------------------------- manifest
    def describe(self) -> dict[str, Any]:
        """What determines the outputs (compared on resume): model, revision, template, decoding.

        ``chat_format`` is there only when the template's rules reshape the prompt (folded
        system text, merged turns; docs/chat_templates.md), so manifests of earlier runs stay
        equal.
        """
        return local_manifest(
            self.provider, self.model, self.spec, model_fingerprint(self.spec), self.chat_format,
            interface=self.spec.hf_interface, dtype=self.dtype_name,
            trust_remote_code=self.spec.trust_remote_code,
            generation={"do_sample": False, "max_output_length": self.max_new_tokens},
            template_kwargs=self.template_kwargs or None)

    def runtime_info(self) -> dict[str, Any]:
        """How the model ran (recorded, not compared on resume)."""
        return {"backend": "transformers", "transformers_version": self.transformers_version,
                "model_path": self.spec.model_path, "device": self.device,
                "device_map": self.device_map, "batch_size": self.batch_size,
                "context_tokens": self.context_tokens, "chat_format": self.chat_format.record()}

    # --------------------------------------------------------------- generation
    def _finish(self, row: list[int]) -> tuple[int, str]:
        """(number of generated tokens, finish reason) of one generated row."""
        for i, token in enumerate(row):
            if token in self._eos_ids:
                return i + 1, "stop"
        return len(row), "length" if len(row) >= self.max_new_tokens else "stop"

    def _check_context(self, lengths: list[int]) -> None:
        """Reject prompts longer than the model's context (the run stops or the turn fails)."""
        longest = max(lengths, default=0)
        if self.context_tokens is not None and longest > self.context_tokens:
            raise _PromptTooLong(
                f"the prompt is {longest} tokens, longer than the maximum model length of "
                f"{self.context_tokens} tokens (max_position_embeddings of the model's config)")

    def _generate_generic(self, conversations: list[list[dict[str, Any]]]) -> list[Completion]:
        torch = self._torch
        padding = ({"processor_kwargs": {"padding": True}} if self._v5 else {"padding": True})
        started = time.perf_counter()
        inputs = self._processor.apply_chat_template(
            conversations, add_generation_prompt=True, tokenize=True, return_dict=True,
            return_tensors="pt", **padding, **self.template_kwargs)
        self._check_context(inputs["attention_mask"].sum(dim=1).tolist())
        inputs = inputs.to(self._model.device, dtype=self._dtype)
        with torch.inference_mode():
            out = self._model.generate(**inputs, max_new_tokens=self.max_new_tokens,
                                       do_sample=False, num_beams=1)
        elapsed = time.perf_counter() - started
        prompt_len = inputs["input_ids"].shape[1]
        input_tokens = inputs["attention_mask"].sum(dim=1).tolist()
        rows = out[:, prompt_len:].tolist()
        completions = []
        for row, n_in in zip(rows, input_tokens, strict=True):
            n_out, finish = self._finish(row)
            text = self._processor.batch_decode([row[:n_out]], skip_special_tokens=True)[0]
            completions.append(Completion(
                text=text, status="truncated" if finish == "length" else "ok",
                finish_reason=finish, latency_s=elapsed,
                usage=Usage(input_tokens=int(n_in), output_tokens=n_out)))
        return completions

    def _generate_hulu(self, conversation: list[dict[str, Any]], n_images: int) -> Completion:
        torch = self._torch
        started = time.perf_counter()
        inputs = self._processor(conversation=conversation, add_system_prompt=True,
                                 add_generation_prompt=True, return_tensors="pt")
        self._check_context([int(inputs["input_ids"].shape[-1])])
        inputs = {k: (v.to(self.device) if hasattr(v, "to") else v) for k, v in inputs.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self._dtype)
        extra = {"modals": ["image"] * n_images} if n_images else {}
        pad = self._processor.tokenizer.eos_token_id
        with torch.inference_mode():
            out = self._model.generate(**inputs, max_new_tokens=self.max_new_tokens,
                                       do_sample=False, pad_token_id=pad, **extra)
        elapsed = time.perf_counter() - started
        prompt = inputs["input_ids"][0].tolist()
        row = out[0].tolist()
        if row[:len(prompt)] == prompt:  # some remote-code models return the prompt too
            row = row[len(prompt):]
        n_out, finish = self._finish(row)
        text = self._processor.batch_decode([row[:n_out]], skip_special_tokens=True,
                                            use_think=True)[0].strip()
        return Completion(text=text, status="truncated" if finish == "length" else "ok",
                          finish_reason=finish, latency_s=elapsed,
                          usage=Usage(input_tokens=len(prompt), output_tokens=n_out))

    def _run_chunk(self, requests: list[TurnRequest],
                   conversations: list[list[dict[str, Any]]]) -> list[Completion]:
        """Generate for one chunk; halves it on GPU out-of-memory, isolates bad inputs.

        A chunk that the chat template, the processor or the context check rejects is retried
        one conversation at a time, so only the bad ones fail (docs/chat_templates.md).
        """
        oom = getattr(self._torch.cuda, "OutOfMemoryError", MemoryError)
        try:
            if self.hulu:
                return [self._generate_hulu(conversations[0], _count_images(requests[0]))]
            return self._generate_generic(conversations)
        except oom as exc:
            if self.device.startswith("cuda"):
                self._torch.cuda.empty_cache()
            if len(conversations) == 1:
                return [_error(f"out of GPU memory for one conversation: {exc}")]
            half = len(conversations) // 2
            logger.warning("out of GPU memory for %d conversations; retrying in halves",
                           len(conversations))
            return (self._run_chunk(requests[:half], conversations[:half])
                    + self._run_chunk(requests[half:], conversations[half:]))
        except (ValueError, *template_errors()) as exc:  # template, processor, context
            if len(conversations) == 1:
                logger.warning("%s: rejected: %s", requests[0].request_id, exc)
                return [_rejection(exc)]
            return [c for r, conv in zip(requests, conversations, strict=True)
                    for c in self._run_chunk([r], [conv])]

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        """Answer every request, ``batch_size`` conversations per ``generate`` call.

        Each request is first fitted to the chat template (:attr:`chat_format`,
        docs/chat_templates.md). Requests are grouped by size (images, then text length) to
        limit padding; completions come back in request order. A request whose image cannot be
        opened, or that the chat template, the processor or the context rejects, gets a
        ``status="error"`` completion and the others are answered; running out of the
        output-token budget gives ``status="truncated"``.

        Raises:
            ProviderError: For a case's first turn longer than the context (docs/engines.md,
                "Faults": no dialogue can fit, the run stops).
        """
        completions: list[Completion | None] = [None] * len(requests)
        ready: list[tuple[int, list[dict[str, Any]]]] = []
        for i, request in enumerate(requests):
            try:
                fitted = apply_chat_format(request, self.chat_format)
                ready.append((i, hf_messages(fitted, hulu=self.hulu)))
            except ChexperceptError as exc:
                completions[i] = _error(str(exc))
        ready.sort(key=lambda item: (_count_images(requests[item[0]]),
                                     sum(len(m.text) for m in requests[item[0]].messages)))
        for start in range(0, len(ready), self.batch_size):
            chunk = ready[start:start + self.batch_size]
            done = self._run_chunk([requests[i] for i, _ in chunk], [c for _, c in chunk])
            for (i, _), completion in zip(chunk, done, strict=True):
                completions[i] = context_rule(
                    requests[i], completion, provider="transformers",
                    fix="shorten the dialogue or use a model with a longer context")
        return [c if c is not None else _error("no completion") for c in completions]

    def close(self) -> None:
        """Drop the model and free cached GPU memory."""
        self._model = None
        if self.device.startswith("cuda"):
            self._torch.cuda.empty_cache()
