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

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from utils.errors import ConfigError
from utils.llm.base import ChatModel
from utils.llm.settings import (
    CONFIG_CLASSES,
    RUN_OPTIONS,
    ProviderConfig,
    field_docs,
    unknown_options_message,
)

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
    "anthropic": "utils.llm.anthropic_provider:AnthropicChatModel",
}

#: Providers that call no model; their default ``--model`` is ``baseline``.
BASELINE_PROVIDERS: tuple[str, ...] = ("dummy", "random", "oracle")

#: ``--provider`` when none is given, and the provider of ``--debug`` (the release's defaults).
DEFAULT_PROVIDER = "opensource"
DEBUG_PROVIDER = "dummy"
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


def split_model_spec(spec: str) -> tuple[str, str]:
    """``PROVIDER:MODEL`` (e.g. Stage 03's ``--judge openai:gpt-4o``) as (provider, model).

    The provider is a registered name (``openai:judge-model``; the model may hold further
    colons, ``vllm-served:tag``) or a plugin spec ``package.module:Class`` followed by
    ``:MODEL``.

    Args:
        spec: The text given.

    Returns:
        The provider (a key of :data:`PROVIDERS` or a plugin spec) and the model id.

    Raises:
        ConfigError: When no provider is named before a colon, or the model is empty (the
            message lists the registered providers and the form expected).
    """
    head, sep, rest = spec.partition(":")
    if sep and head in PROVIDERS and rest.strip():
        return head, rest.strip()
    plugin, sep2, model = rest.partition(":")
    if sep and sep2 and model.strip() and is_plugin_spec(f"{head}:{plugin}"):
        return f"{head}:{plugin}", model.strip()
    raise ConfigError(f"{spec!r} is not PROVIDER:MODEL (e.g. openai:gpt-4o); PROVIDER is one of "
                      f"{', '.join(PROVIDERS)} or a plugin package.module:ClassName")


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


# -- Stage 03 flags of the providers' options (one generic rule) --------------------------------
#: Flags that set the run, not one provider's option: ``evaluate`` takes them itself (a
#: provider whose config has such a field gets it from there; docs/architecture.md, "Provider
#: capabilities").
RUN_FLAGS = frozenset({"--seed", "--no-thinking", "--concurrency"})


@dataclass(frozen=True)
class ProviderFlag:
    """One Stage 03 flag that sets a provider option.

    Attributes:
        flag: ``--kebab-case`` flag, as recorded by the option's config field.
        option: The option (config field) it sets; the same name in every config.
        value_type: ``"int"``, ``"float"``, ``"json"`` (a JSON object) or ``"str"`` (from the
            field's annotation).
        help: The field's attribute docstring (the first config that has it).
        providers: The registered providers whose config has the field, registry order.
        checks: The field's value checks, one per config that has it (a value one of them
            accepts may be given; the chosen provider's config checks it again).
    """

    flag: str
    option: str
    value_type: str
    help: str
    providers: tuple[str, ...]
    checks: tuple[Any, ...] = ()

    def check(self, value: Any) -> str | None:
        """None when some provider's check accepts ``value``, else what was expected."""
        found = [c(value) for c in self.checks if c is not None]
        return None if not found or None in found else found[0]


def _value_type(annotation: Any) -> str:
    text = str(annotation)
    return ("json" if "dict" in text or "Mapping" in text else "int" if "int" in text
            else "float" if "float" in text else "str")


def _config_class_of(name: str) -> type[ProviderConfig] | None:
    """The config class of a registered provider (read from the settings module alone)."""
    return next((c for c in CONFIG_CLASSES if c.provider == name), None)


@functools.cache
def provider_flags() -> tuple[ProviderFlag, ...]:
    """Every provider-option flag of the registered providers, in registry then field order.

    Built from the config classes' recorded flags (:func:`utils.llm.settings.option`), so a
    new option or provider brings its flag with it; :data:`RUN_FLAGS` are left out.

    Raises:
        RuntimeError: If two configs bind one flag to different options (a programming error).
    """
    found: dict[str, ProviderFlag] = {}
    for name in PROVIDERS:
        cls = _config_class_of(name)
        if cls is None:
            continue
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            flag = f.metadata.get("flag")
            if not flag or flag in RUN_FLAGS:
                continue
            seen = found.get(flag)
            if seen is not None and seen.option != f.name:
                raise RuntimeError(f"{flag} sets {seen.option} and {f.name}")
            found[flag] = ProviderFlag(flag, f.name, _value_type(f.type),
                                       seen.help if seen else docs.get(f.name, ""),
                                       (*(seen.providers if seen else ()), name),
                                       (*(seen.checks if seen else ()), f.metadata.get("check")))
    return tuple(found.values())


def flag_options(provider: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The provider flags given on the command line as options of ``provider``.

    The one rule: a flag sets the option its config field records; a flag the provider's
    config lacks is refused, naming the providers that take it. A plugin without a config
    class gets every given flag as its option.

    Args:
        provider: A registered name or a plugin spec.
        given: Flag (``--kebab-case``) -> value, for the flags that were given.

    Returns:
        Option name -> value.

    Raises:
        ConfigError: For a flag ``provider`` does not take, or a flag no provider has.
    """
    table = {f.flag: f for f in provider_flags()}
    config = provider_class(provider).config_class if is_plugin_spec(provider) else \
        _config_class_of(provider)
    takes = None if config is None and is_plugin_spec(provider) else \
        {f.metadata.get("flag") for f in dataclasses.fields(config)} if config else set()
    options = {}
    for flag, value in given.items():
        spec = table.get(flag)
        if spec is None:
            raise ConfigError(f"{flag} is not an option of any provider")
        if takes is not None and flag not in takes:
            raise ConfigError(f"{flag} applies to --provider {' / '.join(spec.providers)}, not "
                              f"{provider}")
        options[spec.option] = value
    return options


def providers_with_logprobs() -> list[str]:
    """The registered providers that return token log-probabilities (``supports_logprobs``)."""
    return [name for name in available_providers()
            if provider_class(name).supports_logprobs]


def providers_of_kind(kind: str) -> list[str]:
    """The registered providers of one kind (``ChatModel.kind``: api, engine, baseline)."""
    return [name for name in available_providers() if provider_class(name).kind == kind]


def provider_listing() -> str:
    """``name (description)`` of every available provider, for ``--provider``'s help."""
    return "; ".join(f"{name} ({provider_class(name).description or 'provider'})"
                     for name in available_providers())
