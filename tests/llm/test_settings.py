"""Provider settings: one config class per provider (docs/engines.md, "Provider settings")."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import sys
from pathlib import Path

import pytest
import vllm_stub
from local_provider_helpers import ROOT

from utils.errors import ConfigError
from utils.llm import create_model
from utils.llm.baselines import DummyModel, OracleModel, RandomModel
from utils.llm.gemini_provider import GeminiChatModel
from utils.llm.hf_provider import TransformersChatModel
from utils.llm.openai_provider import AzureOpenAIChatModel, OpenAIChatModel
from utils.llm.registry import PROVIDERS, RUN_OPTIONS, provider_class, provider_options
from utils.llm.settings import (
    CONFIG_CLASSES,
    ApiConfig,
    AzureConfig,
    GeminiConfig,
    OpenAIConfig,
    ProviderConfig,
    RandomConfig,
    TransformersConfig,
    VLLMConfig,
    field_docs,
    settings_markdown,
)
from utils.llm.vllm_provider import VLLMChatModel

TEMPLATE = "{% for m in messages %}{{ m['role'] }}{% endfor %}"
SERVER = "http://127.0.0.1:9/v1"
AZURE_ENV = {"AZURE_OPENAI_API_KEY": "k"}
GEMINI_ENV = {"GEMINI_API_KEY": "k"}


@pytest.fixture()
def model_dir(tmp_path, monkeypatch):
    """A local model folder, and a stub vllm with one visible GPU."""
    monkeypatch.setitem(sys.modules, "vllm",
                        vllm_stub.make_vllm_module(lambda c: ("Answer: 1", "stop")))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    folder = tmp_path / "local_model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3_vl"}', encoding="utf-8")
    (folder / "chat_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    return folder


def _base(name, model_dir):
    """(model, runtime keywords, valid options) that build provider ``name`` on this machine."""
    return {
        "openai": ("srv", {"env": {}}, {"base_url": SERVER}),
        "azure": ("gpt-5.4", {"env": AZURE_ENV}, {"base_url": "http://127.0.0.1:9/"}),
        "gemini": ("gemini-3.1-pro-preview", {"env": GEMINI_ENV}, {}),
        "anthropic": ("claude-sonnet-4-5", {"env": {"ANTHROPIC_API_KEY": "k"}}, {}),
        "opensource": ("qwen3.5-moe", {}, {"model_path": str(model_dir)}),
        "transformers": ("tiny", {}, {"model_path": str(model_dir)}),
        "dummy": ("baseline", {}, {}),
        "random": ("baseline", {}, {}),
        "oracle": ("baseline", {}, {}),
    }[name]


# -- unknown options ----------------------------------------------------------------------
@pytest.mark.parametrize("name", list(PROVIDERS))
def test_an_unknown_option_is_named_through_the_factory_and_the_constructor(name, model_dir):
    model, runtime, valid = _base(name, model_dir)
    cls = provider_class(name)
    pattern = rf"provider '{name}' has no option\(s\) max_retires, temprature; it takes: "
    with pytest.raises(ConfigError, match=pattern):
        create_model(name, model, **runtime, **valid, max_retires=1, temprature=0.0)
    with pytest.raises(ConfigError, match=pattern):
        cls(model, **runtime, **valid, max_retires=1, temprature=0.0)
    with pytest.raises(ConfigError, match=pattern):
        cls.config_class.from_options({**valid, "max_retires": 1, "temprature": 0.0},
                                      provider=name)


def test_the_error_lists_the_valid_options_and_suggests_a_close_match():
    with pytest.raises(ConfigError) as info:
        OpenAIChatModel("srv", base_url=SERVER, env={}, max_retires=3)
    message = str(info.value)
    taken = message.split("it takes: ")[1].split(" (")[0].split(", ")
    assert set(taken) == OpenAIConfig.option_names()
    assert "max_retires: did you mean max_retries?" in message
    # through the factory the runtime keywords are listed as well
    with pytest.raises(ConfigError, match=r"it takes: .*async_http_client.*env.*http_client"):
        create_model("openai", "srv", max_retires=3)


def test_run_options_are_taken_by_every_provider_and_dropped_where_unused():
    for cls in (DummyModel, OracleModel):
        model = cls(seed=3, no_thinking=True)
        assert model.config == ProviderConfig()
    assert RandomModel(seed=3, no_thinking=True).config == RandomConfig(seed=3)
    assert RUN_OPTIONS == {"seed", "no_thinking"}
    with pytest.raises(ConfigError, match=r"provider 'dummy' has no option\(s\) temperature"):
        DummyModel(temperature=0.0)


def test_provider_options_are_the_config_fields_and_the_runtime_keywords():
    runtime = {"retry_policy", "http_client", "async_http_client", "env"}
    for name in PROVIDERS:
        cls = provider_class(name)
        extra = runtime if issubclass(cls.config_class, ApiConfig) else set()
        assert provider_options(cls) == cls.config_class.option_names() | extra, name
    assert provider_options(AzureOpenAIChatModel) >= {"deployment", "reasoning_effort",
                                                      "max_retries"}


# -- values ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("cls", "option", "value", "expected"), [
    (ApiConfig, "max_retries", -1, "max_retries must be an integer >= 0, got -1 (--max-retries)"),
    (ApiConfig, "max_retries", True, "max_retries must be an integer >= 0, got True"),
    (ApiConfig, "concurrency", 0, "concurrency must be an integer >= 1, got 0 (--concurrency)"),
    (ApiConfig, "timeout_s", 0, "timeout_s must be a number > 0, got 0 (--request-timeout)"),
    (ApiConfig, "timeout_s", "60", "timeout_s must be a number > 0, got '60'"),
    (ApiConfig, "max_image_side", 0, "max_image_side must be an integer >= 1, got 0"),
    (OpenAIConfig, "reasoning_effort", "max", "reasoning_effort must be one of none, minimal"),
    (OpenAIConfig, "base_url", "ftp://h/v1", "--base-url 'ftp://h/v1': not an http(s) URL"),
    (OpenAIConfig, "extra_body", {"model": "x"}, "--extra-body may not set model"),
    (OpenAIConfig, "extra_body", [1], "extra_body must be a mapping with string keys"),
    (OpenAIConfig, "server_wait_s", -1, "server_wait_s must be a number >= 0"),
    (OpenAIConfig, "max_new_tokens", 0, "max_new_tokens must be an integer >= 1, got 0"),
    (OpenAIConfig, "no_thinking", "yes", "no_thinking must be true or false, got 'yes'"),
    (OpenAIConfig, "seed", 1.5, "seed must be an integer, got 1.5 (--seed)"),
    (AzureConfig, "base_url", "not a url", "--base-url 'not a url'"),
    (AzureConfig, "deployment", "", "deployment must be a non-empty string"),
    (GeminiConfig, "reasoning_effort", "none", "reasoning_effort must be one of minimal, low"),
    (GeminiConfig, "temperature", float("nan"), "temperature must be a number >= 0"),
    (GeminiConfig, "vertex", "no", "vertex must be true or false"),
    (VLLMConfig, "engine", "sync", "engine must be one of batched, async, got 'sync' "
                                   "(--vllm-engine)"),
    (VLLMConfig, "gpu_memory_utilization", 1.5, "gpu_memory_utilization must be a number > 0 "
                                                "and <= 1, got 1.5"),
    (VLLMConfig, "tensor_parallel_size", 0, "tensor_parallel_size must be an integer >= 1"),
    (VLLMConfig, "engine_kwargs", {1: 2}, "engine_kwargs must be a mapping with string keys"),
    (TransformersConfig, "batch_size", 0, "batch_size must be an integer >= 1, got 0 "
                                          "(--batch-size)"),
    (TransformersConfig, "device", "", "device must be a non-empty string"),
    (RandomConfig, "seed", "3", "seed must be an integer, got '3'"),
])
def test_values_are_checked_and_the_option_is_named(cls, option, value, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        cls.from_options({option: value})
    with pytest.raises(ConfigError, match=re.escape(expected)):
        cls(**{option: value})


def test_every_bad_value_is_named_at_once_and_provider_checks_still_run(model_dir):
    with pytest.raises(ConfigError) as info:
        create_model("openai", "srv", env={}, base_url=SERVER, max_retries=-1, concurrency=0,
                     timeout_s=0)
    assert str(info.value).startswith("openai: max_retries must be")
    assert "concurrency must be" in str(info.value) and "timeout_s must be" in str(info.value)
    with pytest.raises(ConfigError, match="tensor-parallel-size 2: must be in"):  # 1 visible GPU
        create_model("opensource", "qwen3.5-moe", model_path=str(model_dir),
                     tensor_parallel_size=2)


def test_a_config_of_another_provider_is_refused():
    with pytest.raises(ConfigError, match="provider 'gemini' takes a GeminiConfig as config, "
                                          "got OpenAIConfig"):
        GeminiChatModel("gemini-3-pro", OpenAIConfig(), env=GEMINI_ENV)
    with pytest.raises(ConfigError, match="takes a OpenAIConfig as config, got AzureConfig"):
        create_model("openai", "srv", config=AzureConfig(base_url=SERVER), env={})


# -- configs as values -------------------------------------------------------------------------
SAMPLES = [
    RandomConfig(seed=4),
    ApiConfig(max_retries=0, concurrency=3, timeout_s=5, max_image_side=512),
    OpenAIConfig(base_url="http://u:p@127.0.0.1:8000/v1/", extra_body={"top_k": 1},
                 reasoning_effort="low", max_new_tokens=64, no_thinking=True,
                 api_keys=Path("keys.yaml")),
    AzureConfig(deployment="dep", base_url="https://x.openai.azure.com/", temperature=0.2),
    GeminiConfig(vertex=True, reasoning_effort="high", temperature=1, seed=7),
    VLLMConfig(model_path="/models/x", tensor_parallel_size=2, engine="async",
               engine_kwargs={"dtype": "float32"}, enforce_eager=True),
    TransformersConfig(device="cpu", batch_size=2, max_new_tokens=4),
]


@pytest.mark.parametrize("config", SAMPLES, ids=lambda c: type(c).__name__)
def test_configs_round_trip_through_options_and_pickle(config):
    cls = type(config)
    assert cls.from_options(config.to_options()) == config
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1  # type: ignore[misc]
    merged = cls.from_options({"seed": 11}, base=config)
    assert merged.seed == 11 if "seed" in cls.option_names() else merged == config


def test_a_config_stores_what_was_given_not_what_the_provider_derives():
    config = OpenAIConfig(base_url="http://127.0.0.1:8000/v1/", extra_body={"top_k": 1})
    assert config.base_url == "http://127.0.0.1:8000/v1"  # normalised once
    assert config.temperature is None and config.reasoning_effort is None
    body = {"top_k": 1}
    config = OpenAIConfig(extra_body=body)
    body["top_k"] = 2
    assert config.extra_body == {"top_k": 1}  # a copy: the caller's dict may change
    assert AzureConfig(base_url="https://x.openai.azure.com/").base_url == \
        "https://x.openai.azure.com/"  # the Azure endpoint is recorded as given


# -- describe() is the same whichever way the provider is built -----------------------------------
def _built_three_ways(cls, model, options, runtime):
    """The provider built from options, from a config, and from a config plus options."""
    config_class = cls.config_class
    names = sorted(options)
    half = {k: options[k] for k in names[: len(names) // 2]}
    rest = {k: options[k] for k in names[len(names) // 2:]}
    return [create_model(_name(cls), model, **runtime, **options),
            cls(model, config_class(**options), **runtime),
            cls(model, config_class(**half), **runtime, **rest),
            create_model(_name(cls), model, config=config_class(**half), **runtime, **rest),
            create_model(_name(cls), model, **runtime,
                         **pickle.loads(pickle.dumps(config_class(**options))).to_options())]


def _name(cls):
    return next(n for n in PROVIDERS if provider_class(n) is cls)


#: describe() of providers built by the code before the config classes (the manifest's
#: ``provider_settings``): a run recorded then must still resume.
GOLDEN = {
    "openai": {"api_model": "qwen", "extra_body": {"chat_template_kwargs": {"a": 1},
                                                   "top_k": 1},
               "image_detail": "low", "max_image_pixels": 100000, "max_image_side": 512,
               "model": "qwen", "params": {"chat_template_kwargs": {"a": 1,
                                                                    "enable_thinking": False},
                                           "max_tokens": 64, "seed": 0, "temperature": 0.0,
                                           "top_k": 1},
               "provider": "openai", "server": "openai-compatible"},
    "azure": {"api_model": "gpt-4.1", "api_version": "2025-04-01-preview",
              "deployment": "gpt-4.1", "endpoint": "http://127.0.0.1:9/", "image_detail": None,
              "model": "gpt-4.1", "params": {"max_tokens": 8192, "seed": 5, "temperature": 0.2},
              "provider": "azure", "server": None},
    "gemini": {"backend": "developer", "base_url": "http://127.0.0.1:9/", "location": None,
               "max_image_side": 300, "model": "gemini-2.5-pro",
               "params": {"max_output_tokens": 99, "seed": 4, "temperature": 0.0,
                          "thinking_config": {"thinking_budget": 128}},
               "project": None, "provider": "gemini"},
    "opensource": {"chat_template_kwargs": {"enable_thinking": False},
                   "chat_template_sha256": "d20967d97da3cb85e9cde8cbe0ccbfe3029a99e82e7e98523a67"
                                           "675f1542d7cc",
                   "config_sha256": "e253f8212d73c7fc7869b8f49478a7884ec715d1d3ad8284401a7b"
                                    "aaa46f66e2",
                   "dtype": "bfloat16", "image_format": "data_url",
                   "limit_mm_per_prompt": {"image": 7}, "max_model_len": 8192,
                   "model": "qwen3.5-moe", "model_id": "Qwen/Qwen3.5-122B-A10B",
                   "provider": "opensource", "revision": None,
                   "sampling": {"max_output_length": 32, "seed": 9, "temperature": 0.0,
                                "top_p": 1.0},
                   "trust_remote_code": False},
    "random": {"model": "baseline", "provider": "random", "seed": 3},
}


def _cases(model_dir):
    return {
        "openai": (OpenAIChatModel, "qwen", {"env": {}}, dict(
            base_url="http://u:p@127.0.0.1:8000/v1/", no_thinking=True, max_new_tokens=64,
            extra_body={"top_k": 1, "chat_template_kwargs": {"a": 1}}, server_wait_s=5,
            image_detail="low", max_image_side=512, max_image_pixels=100000, max_retries=2,
            concurrency=64, timeout_s=30)),
        "azure": (AzureOpenAIChatModel, "gpt-4.1", {"env": AZURE_ENV}, dict(
            base_url="http://127.0.0.1:9/", seed=5, temperature=0.2)),
        "gemini": (GeminiChatModel, "gemini-2.5-pro", {"env": GEMINI_ENV}, dict(
            no_thinking=True, max_new_tokens=99, base_url="http://127.0.0.1:9/",
            max_image_side=300, seed=4)),
        "opensource": (VLLMChatModel, "qwen3.5-moe", {}, dict(
            model_path=str(model_dir), tensor_parallel_size=1, max_model_len=8192,
            gpu_memory_utilization=0.6, max_new_tokens=32, no_thinking=True, seed=9,
            max_num_seqs=4, enforce_eager=True, engine_kwargs={"disable_log_stats": False},
            engine="async")),
        "random": (RandomModel, "baseline", {}, dict(seed=3)),
    }


@pytest.mark.parametrize("name", list(GOLDEN))
def test_describe_is_byte_identical_to_before_whichever_way_the_provider_is_built(
        name, model_dir):
    cls, model, runtime, options = _cases(model_dir)[name]
    built = _built_three_ways(cls, model, options, runtime)
    recorded = [json.dumps(m.describe(), sort_keys=True) for m in built]
    assert recorded == [json.dumps(GOLDEN[name], sort_keys=True)] * len(built)
    assert len({json.dumps(m.runtime_info(), sort_keys=True, default=str)
                for m in built}) == 1
    for m in built:
        m.close()


def test_transformers_options_reach_the_provider_the_same_way():
    """No weights needed: the options are checked before the model loads."""
    config = TransformersChatModel.make_config(TransformersConfig(device="cpu"),
                                               {"batch_size": 3, "seed": 4})
    assert config == TransformersConfig(device="cpu", batch_size=3, seed=4)
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1"):
        TransformersChatModel("tiny", TransformersConfig(), batch_size=0)


# -- documentation --------------------------------------------------------------------------
def test_the_docs_tables_match_the_config_classes():
    text = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")
    start = text.index("<!-- provider-settings: generated, do not edit -->\n")
    end = text.index("<!-- /provider-settings -->")
    documented = text[start:end].split("\n", 1)[1]
    assert documented == settings_markdown(), (
        "docs/engines.md, 'Provider settings' is out of date: paste the output of "
        "python -c 'from utils.llm.settings import settings_markdown as m; print(m(), end=\"\")'")


def test_every_option_is_documented_and_every_provider_has_a_config_class():
    for cls in CONFIG_CLASSES:
        docs = field_docs(cls)
        assert all(docs.get(f.name) for f in dataclasses.fields(cls)), cls.__name__
    for name in PROVIDERS:
        config_class = provider_class(name).config_class
        assert config_class in (*CONFIG_CLASSES, ProviderConfig), name
