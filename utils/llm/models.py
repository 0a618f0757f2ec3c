"""Model registry for Stage 03: the paper's models, their release aliases and engine settings.

Settings follow the release's ``model_configs.py`` and the paper (docs/paper.md, "Models";
docs/evaluation_protocol.md, "Providers"), with one deliberate change: every vLLM model gets
``limit_mm_per_prompt {"image": 7}``, ``medgemma`` included (the release left it out:
docs/differences.md; a revision-required dialogue carries up to 1 + 1 + 1 + 4 = 7 images,
docs/evaluation_protocol.md, "Prompt structure").

``resolve_model(name, provider, model_path=...)`` turns a ``--model`` value into a
:class:`ModelSpec`: a registered alias, the HF id of one (mapped back to its alias), or, for the
local providers, any other HF id or local folder with default settings (logged).
``--model-path`` points any alias at a local folder (no hub access) and keeps its settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from utils.errors import ConfigError

logger = logging.getLogger(__name__)

#: Providers that run open weights locally (and so accept HF ids / local folders).
LOCAL_PROVIDERS: tuple[str, ...] = ("opensource", "transformers")

#: Context length of every open-source alias unless noted (docs/engines.md, "Decoding").
DEFAULT_MAX_MODEL_LEN = 65536
#: Images per prompt for vLLM: the most a dialogue carries (docs/differences.md;
#: docs/evaluation_protocol.md, "Prompt structure").
MAX_IMAGES_PER_PROMPT = 7
#: Output-token budget of every local model (vLLM ``max_tokens`` and Hulu-Med ``max_new_tokens``
#: are both 8192 in the release; docs/evaluation_protocol.md, "Providers").
DEFAULT_MAX_TOKENS = 8192


@dataclass(frozen=True)
class ModelSpec:
    """One model and the settings it is run with.

    Attributes:
        alias: The ``--model`` name (the run folder is ``<provider>_<alias>``).
        provider: Provider that serves it (``opensource``, ``transformers``, ``openai``,
            ``azure``, ``gemini``).
        backend: ``vllm``, ``transformers`` or ``api``.
        model_id: HF repo id for open weights, API model / deployment id for API models.
        domain: ``general`` or ``medical`` (the release's meta field; docs/paper.md, "Models").
        description: One line for listings.
        model_path: Local folder to load instead of ``model_id`` (``--model-path``), or None.
        max_model_len: Context length in tokens (vLLM ``max_model_len``; Hulu-Med's tokenizer
            ``model_max_length``); None keeps the engine's default (the model's own).
        limit_mm_per_prompt: vLLM ``limit_mm_per_prompt``; None for non-vLLM models.
        trust_remote_code: Load the model's own code from its repo.
        dtype: Weights dtype for the engine (``bfloat16`` or ``auto``).
        thinking: Whether the chat template honours ``enable_thinking`` (``--no-thinking``
            passes ``enable_thinking=False``); None when unknown (custom models: passed, a
            template that does not know it ignores it).
        gpu_num: Tensor-parallel cap: TP is the largest divisor of it not above the number of
            visible GPUs (the release's ``gpu_num``; docs/evaluation_protocol.md, "Providers");
            None for no cap.
        engine_kwargs: Extra ``vllm.LLM`` keyword arguments.
        hf_interface: How the transformers provider loads it: ``image-text-to-text``
            (``AutoModelForImageTextToText`` + ``AutoProcessor``) or ``hulu-med`` (remote-code
            ``AutoModelForCausalLM`` and Hulu-Med's processor; docs/evaluation_protocol.md,
            "Providers").
        paper: Whether the model is one of the paper's 14 (docs/paper.md, "Models").
    """

    alias: str
    provider: str
    backend: str
    model_id: str
    domain: str = "general"
    description: str = ""
    model_path: str | None = None
    max_model_len: int | None = DEFAULT_MAX_MODEL_LEN
    limit_mm_per_prompt: dict[str, int] | None = field(
        default_factory=lambda: {"image": MAX_IMAGES_PER_PROMPT})
    trust_remote_code: bool = False
    dtype: str = "bfloat16"
    thinking: bool | None = False
    gpu_num: int | None = None
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    hf_interface: str = "image-text-to-text"
    paper: bool = True

    @property
    def source(self) -> str:
        """What to load: the local folder when given, else the HF id / API model id."""
        return self.model_path or self.model_id

    def settings(self) -> dict[str, Any]:
        """The spec as a plain dict (for manifests and listings)."""
        return dataclasses.asdict(self)


def _vllm(alias: str, model_id: str, domain: str, description: str, **kw: Any) -> ModelSpec:
    return ModelSpec(alias=alias, provider="opensource", backend="vllm", model_id=model_id,
                     domain=domain, description=description, **kw)


def _api(alias: str, provider: str, description: str) -> ModelSpec:
    return ModelSpec(alias=alias, provider=provider, backend="api", model_id=alias,
                     domain="general", description=description, max_model_len=None,
                     limit_mm_per_prompt=None, dtype="auto", thinking=None)


#: Every registered model by alias (the release's table, docs/paper.md, "Models"; API ids from
#: the release's README examples).
MODELS: dict[str, ModelSpec] = {m.alias: m for m in (
    _vllm("qwen3.5-moe", "Qwen/Qwen3.5-122B-A10B", "general",
          "Qwen3.5 122B-A10B MoE (hybrid thinking)", thinking=True),
    _vllm("qwen3.6-27b", "Qwen/Qwen3.6-27B", "general", "Qwen3.6 27B (hybrid thinking)",
          thinking=True),
    _vllm("qwen3.6", "Qwen/Qwen3.6-35B-A3B", "general", "Qwen3.6 35B-A3B MoE (hybrid thinking)",
          thinking=True, paper=False),
    _vllm("qwen3.5", "Qwen/Qwen3.5-27B", "general", "Qwen3.5 27B (hybrid thinking)",
          thinking=True, paper=False),
    _vllm("glm-4v", "zai-org/GLM-4.6V", "general", "GLM-4.6V", trust_remote_code=True,
          gpu_num=4),
    _vllm("internvl3.5", "OpenGVLab/InternVL3_5-38B", "general", "InternVL3.5 38B",
          max_model_len=40960, trust_remote_code=True),
    _vllm("gemma3", "google/gemma-3-27b-it", "general", "Gemma 3 27B IT",
          trust_remote_code=True, paper=False),
    _vllm("gemma4", "google/gemma-4-31B-it", "general", "Gemma 4 31B IT",
          trust_remote_code=True),
    _vllm("medgemma", "google/medgemma-27b-it", "medical", "MedGemma 27B IT (multimodal)"),
    _vllm("medgemma1.5", "google/medgemma-1.5-4b-it", "medical", "MedGemma 1.5 4B IT",
          trust_remote_code=True),
    _vllm("huatuo", "FreedomIntelligence/HuatuoGPT-Vision-7B-Qwen2.5VL", "medical",
          "HuatuoGPT-Vision 7B (Qwen2.5-VL)", gpu_num=4),
    _vllm("lingshu", "lingshu-medical-mllm/Lingshu-32B", "medical", "Lingshu 32B",
          trust_remote_code=True),
    ModelSpec(alias="hulu-med", provider="transformers", backend="transformers",
              model_id="ZJU-AI4H/Hulu-Med-32B", domain="medical",
              description="Hulu-Med 32B (remote code; not loadable by vLLM)",
              max_model_len=32768, limit_mm_per_prompt=None, trust_remote_code=True,
              hf_interface="hulu-med"),
    _api("gemini-3.1-pro", "gemini", "Gemini 3.1 Pro"),
    _api("gemini-3.1-flash", "gemini", "Gemini 3.1 Flash"),
    _api("gpt-5.4", "azure", "GPT-5.4 (Azure deployment or OpenAI model id)"),
    _api("gpt-5.4-nano", "azure", "GPT-5.4 nano (Azure deployment or OpenAI model id)"),
)}

#: Providers each backend may be run with (``gpt-*`` run on Azure in the paper, or on OpenAI).
_BACKEND_PROVIDERS = {"vllm": ("opensource", "transformers"), "transformers": ("transformers",)}
_API_PROVIDERS = {"gemini": ("gemini",), "azure": ("azure", "openai")}


def paper_models() -> list[ModelSpec]:
    """The 14 models of the paper, in registry order (docs/paper.md, "Models")."""
    return [m for m in MODELS.values() if m.paper]


def _allowed_providers(spec: ModelSpec) -> tuple[str, ...]:
    if spec.backend == "api":
        return _API_PROVIDERS.get(spec.provider, (spec.provider,))
    return _BACKEND_PROVIDERS[spec.backend]


def _custom(name: str, provider: str, model_path: str | None) -> ModelSpec:
    backend = "vllm" if provider == "opensource" else "transformers"
    return ModelSpec(alias=name, provider=provider, backend=backend, model_id=name,
                     description="custom model (default settings)", model_path=model_path,
                     max_model_len=None,
                     limit_mm_per_prompt=({"image": MAX_IMAGES_PER_PROMPT}
                                          if backend == "vllm" else None),
                     dtype="auto", thinking=None, paper=False)


def resolve_model(name: str, provider: str, *, model_path: str | Path | None = None) -> ModelSpec:
    """The settings to run ``--model name`` with on ``provider``.

    Args:
        name: A registered alias (case-insensitive), the HF id of one, or (local providers
            only) any HF id or local folder.
        provider: The ``--provider`` value.
        model_path: ``--model-path``: a local folder holding the weights; it replaces the HF
            id, the alias's other settings are kept.

    Returns:
        The :class:`ModelSpec` (``alias`` is ``name`` as given for custom models).

    Raises:
        ConfigError: If ``model_path`` is not a folder, or the alias belongs to a provider that
            cannot run it (e.g. ``gpt-5.4`` on ``opensource``, ``hulu-med`` on vLLM); the
            message names the provider to use.
    """
    local = str(model_path) if model_path is not None else None
    if local is not None and not Path(local).is_dir():
        raise ConfigError(f"--model-path {local}: not a folder (expected a local model folder "
                          f"with config.json and the weights)")
    key = name.strip()
    spec = MODELS.get(key) or MODELS.get(key.lower())
    if spec is None:
        by_id = [m for m in MODELS.values() if m.backend != "api"
                 and m.model_id.lower() == key.lower()]
        if by_id and provider in LOCAL_PROVIDERS:
            spec = dataclasses.replace(by_id[0], alias=key)
            logger.info("--model %s is the HF id of alias '%s'; using its settings",
                        key, by_id[0].alias)
    if spec is None:
        if provider not in LOCAL_PROVIDERS:
            if local is not None:
                raise ConfigError(f"--model-path is only for the local providers "
                                  f"({', '.join(LOCAL_PROVIDERS)}), not --provider {provider}")
            return ModelSpec(alias=key, provider=provider, backend="api", model_id=key,
                             description="API model (not in the registry)", max_model_len=None,
                             limit_mm_per_prompt=None, dtype="auto", thinking=None, paper=False)
        if local is None and Path(key).is_dir():
            local = key
        logger.warning("model '%s' is not a registered alias (%s); loading %s with default "
                       "settings", key, ", ".join(m for m in MODELS if MODELS[m].backend != "api"),
                       local or f"HF id {key}")
        return _custom(key, provider, local)
    allowed = _allowed_providers(spec)
    if provider not in allowed:
        raise ConfigError(f"--model {spec.alias} cannot run with --provider {provider}: it is a "
                          f"{spec.backend} model; use --provider {' or '.join(allowed)}")
    if local is not None and spec.backend == "api":
        raise ConfigError(f"--model-path is only for the local providers "
                          f"({', '.join(LOCAL_PROVIDERS)}); {spec.alias} is an API model")
    if local is not None:
        logger.info("model %s: loading from local folder %s instead of %s", spec.alias, local,
                    spec.model_id)
        spec = dataclasses.replace(spec, model_path=local)
    return spec


_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "processor_config.json",
                   "tokenizer_config.json")


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _template_text(path: Path) -> str | None:
    """The chat template held by one of the :data:`_TEMPLATE_FILES`, or None."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jinja":
        return text
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse
        return None
    template = data.get("chat_template") if isinstance(data, dict) else None
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        template = json.dumps(template, sort_keys=True)
    return template if isinstance(template, str) and template else None


def chat_template_sha256(template: str | None) -> str | None:
    """sha256 of a chat template's text (None for None)."""
    return hashlib.sha256(template.encode("utf-8")).hexdigest() if template else None


def _hub_file(model_id: str, filename: str) -> Path | None:
    """A file of a hub model already in the local HF cache (no download), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(model_id, filename)
    except Exception:  # noqa: BLE001 - a malformed id or cache is not fatal for a fingerprint
        return None
    return Path(found) if isinstance(found, str) else None


def model_fingerprint(spec: ModelSpec) -> dict[str, str | None]:
    """What identifies the loaded weights and prompt format, without reading the weights.

    Looks in ``spec.model_path`` (or ``spec.model_id`` when that is a folder), else in the local
    HF cache; never downloads.

    Args:
        spec: The resolved model.

    Returns:
        ``{"revision": hub commit or None, "config_sha256": sha256 of config.json or None,
        "chat_template_sha256": sha256 of the chat template text or None}``.
    """
    folder = Path(spec.source) if Path(spec.source).is_dir() else None

    def find(filename: str) -> Path | None:
        if folder is not None:
            path = folder / filename
            return path if path.is_file() else None
        return _hub_file(spec.model_id, filename)

    config = find("config.json")
    revision = None
    if folder is None and config is not None and config.parent.parent.name == "snapshots":
        revision = config.parent.name
    template = None
    for name in _TEMPLATE_FILES:
        path = find(name)
        if path is not None and (template := _template_text(path)):
            break
    return {"revision": revision,
            "config_sha256": _sha256_file(config) if config is not None else None,
            "chat_template_sha256": chat_template_sha256(template)}


def local_manifest(provider: str, model: str, spec: ModelSpec, fingerprint: Mapping[str, Any],
                   chat_format: Any, **fields: Any) -> dict[str, Any]:
    """The ``describe()`` of a provider that runs a model here (vLLM, transformers).

    ``provider``, ``model``, ``model_id`` and the fingerprint first, then the provider's own
    ``fields`` in their order, then ``chat_format`` only when the template's rules reshape the
    prompt (folded system text, merged turns; docs/chat_templates.md), so manifests of earlier
    runs stay equal.

    Args:
        provider: Registry name.
        model: ``--model`` as given.
        spec: The resolved model.
        fingerprint: Revision, config and chat template hashes (:func:`model_fingerprint`).
        chat_format: The provider's ``ChatFormat`` (``changes_prompt``, ``describe()``).
        **fields: The provider's settings that determine the outputs.
    """
    return {"provider": provider, "model": model, "model_id": spec.model_id, **fingerprint,
            **fields, **({"chat_format": chat_format.describe()}
                         if chat_format.changes_prompt else {})}
