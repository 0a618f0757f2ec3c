"""Provider registry: short lowercase names -> ``"module:Class"``, imported only when created.

Importing this module loads no SDK. A provider whose module is not part of this version gives a
``ConfigError`` naming the providers that are available, not a stack trace.

Plugin providers: any ``"package.module:ClassName"`` given where a provider name is expected
(``--provider``) loads that :class:`~utils.llm.base.ChatModel` subclass from an importable
module; it is created as ``ClassName(model, **options)`` like a registered provider.

A registered provider's options are the fields of its config class (``ChatModel.config_class``,
:mod:`utils.llm.settings`; docs/engines.md, "Provider settings") plus the runtime keywords its
constructor names (``env``, ``http_client``, ...).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from typing import Any

from utils.errors import ConfigError
from utils.llm.base import ChatModel
from utils.llm.settings import RUN_OPTIONS, ProviderConfig, unknown_options_message

#: Every registered provider name and its implementation (``module:Class``).
PROVIDERS: dict[str, str] = {
    "dummy": "utils.llm.baselines:DummyModel",
    "random": "utils.llm.baselines:RandomModel",
    "oracle": "utils.llm.baselines:OracleModel",
    "opensource": "utils.llm.vllm_provider:VLLMChatModel",
    "transformers": "utils.llm.hf_provider:TransformersChatModel",
    "openai": "utils.llm.openai_provider:OpenAIChatModel",
    "azure": "utils.llm.openai_provider:AzureOpenAIChatModel",
    "gemini": "utils.llm.gemini_provider:GeminiChatModel",
}

#: Providers that call no model; their default ``--model`` is ``baseline``.
BASELINE_PROVIDERS: tuple[str, ...] = ("dummy", "random", "oracle")

#: Default ``--model`` for providers that serve real models (the release's default alias).
DEFAULT_MODEL = "medgemma1.5"
BASELINE_MODEL = "baseline"


def default_model(provider: str) -> str:
    """The ``--model`` used when none is given.

    ``baseline`` for the baselines, ``custom`` for a plugin (``module:Class``), else the
    release's default alias ``medgemma1.5``.
    """
    if provider in BASELINE_PROVIDERS:
        return BASELINE_MODEL
    if is_plugin_spec(provider):
        return "custom"
    return DEFAULT_MODEL


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


_PLUGIN_SPEC = re.compile(r"^[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
_LABEL = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


def is_plugin_spec(name: str) -> bool:
    """Whether ``name`` is a plugin provider ``"package.module:ClassName"``."""
    return bool(_PLUGIN_SPEC.match(name))


def _plugin_class(spec: str) -> type[ChatModel]:
    module_name, class_name = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"plugin provider '{spec}': cannot import module {module_name} "
                          f"({exc}); it must be importable (installed or on PYTHONPATH)") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError(f"plugin provider '{spec}': module {module_name} has no "
                          f"'{class_name}'")
    if not (isinstance(cls, type) and issubclass(cls, ChatModel)):
        raise ConfigError(f"plugin provider '{spec}': {class_name} is not a subclass of "
                          f"utils.llm.base.ChatModel")
    return cls


def provider_label(name: str) -> str:
    """Short name of a provider for run folder names (``<label>_<model>``).

    A registered name is its own label. A plugin's label is its class attribute ``provider``
    when that is a lowercase name without ``_`` (Stage 04 splits folder names at the first
    ``_``), else its lowercased class name.

    Raises:
        ConfigError: See :func:`provider_class`.
    """
    if not is_plugin_spec(name):
        return name
    cls = provider_class(name)
    label = str(getattr(cls, "provider", ""))
    return label if _LABEL.match(label) and label != ChatModel.provider else \
        cls.__name__.lower().replace("_", "-")


def available_providers() -> list[str]:
    """Registered providers whose implementation module ships with this version."""
    return [name for name, target in PROVIDERS.items() if _module_exists(target.split(":")[0])]


def provider_class(name: str) -> type[ChatModel]:
    """Resolve a provider name to its class (imports the module, not the SDK).

    Args:
        name: A key of :data:`PROVIDERS`, or a plugin ``"package.module:ClassName"``.

    Returns:
        The :class:`~utils.llm.base.ChatModel` subclass.

    Raises:
        ConfigError: For an unknown name, a registered provider whose module is not part of
            this version ("not available in this version"), or a plugin whose module cannot be
            imported or whose class is missing or not a ``ChatModel`` subclass.
    """
    if is_plugin_spec(name):
        return _plugin_class(name)
    available = ", ".join(available_providers())
    if name not in PROVIDERS:
        raise ConfigError(f"unknown provider '{name}'; registered providers: "
                          f"{', '.join(PROVIDERS)} (available in this version: {available}), "
                          f"or a plugin 'package.module:ClassName'")
    module_name, class_name = PROVIDERS[name].split(":")
    if not _module_exists(module_name):
        raise ConfigError(f"provider '{name}' is not available in this version of CheXpercept "
                          f"(its module {module_name} is not part of this version); "
                          f"available providers: {available}")
    module = importlib.import_module(module_name)
    cls = getattr(module, class_name, None)
    if cls is None or not (isinstance(cls, type) and issubclass(cls, ChatModel)):
        raise ConfigError(f"provider '{name}': {PROVIDERS[name]} is not a ChatModel class")
    return cls


def provider_options(cls: type[ChatModel]) -> frozenset[str]:
    """The keyword options a provider class takes.

    The fields of its :attr:`~utils.llm.base.ChatModel.config_class` and the named keywords of
    its ``__init__`` and of the classes it hands ``**kwargs`` to (the runtime keywords
    ``retry_policy``, ``http_client``, ``async_http_client``, ``env`` of the API providers;
    a plugin's own keywords). ``config`` itself is not an option.
    """
    names: set[str] = set(cls.config_class.option_names()) if cls.config_class else set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not issubclass(klass, ChatModel):
            continue
        params = inspect.signature(init).parameters
        names |= {n for n, p in params.items() if n not in ("self", "model", "config")
                  and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return frozenset(names)


def create_model(name: str, model: str | None = None, *, config: ProviderConfig | None = None,
                 **options: Any) -> ChatModel:
    """Create a provider's model.

    Args:
        name: Provider name (a key of :data:`PROVIDERS`) or plugin ``"module:Class"``.
        model: Model id or alias; None uses :func:`default_model`.
        config: The provider's config object (its ``config_class``), or None; ``options``
            override its values.
        **options: The provider's options (the fields of its config class, documented in
            docs/engines.md, "Provider settings", and its runtime keywords), plus
            :data:`~utils.llm.settings.RUN_OPTIONS`. A registered provider refuses any other
            option by name, so a misspelt option is never silently dropped; a plugin gets what
            it declares.

    Returns:
        A ready :class:`~utils.llm.base.ChatModel`.

    Raises:
        ConfigError: See :func:`provider_class`; or an option the provider does not take
            (names it and lists the ones it does), an invalid value (names the option), or a
            ``config`` of another provider's class.
    """
    cls = provider_class(name)
    if not is_plugin_spec(name):
        known = provider_options(cls)
        unknown = set(options) - known - RUN_OPTIONS
        if unknown:
            raise ConfigError(unknown_options_message(name, unknown, known | RUN_OPTIONS))
    if config is not None:
        return cls(model or default_model(name), config, **options)
    return cls(model or default_model(name), **options)
