"""Plugin providers: ``"package.module:ClassName"`` resolves to any ChatModel subclass."""

from __future__ import annotations

import sys
import types

import pytest

from utils.errors import ConfigError
from utils.llm.base import ChatModel, Completion
from utils.llm.registry import create_model, is_plugin_spec, provider_class, provider_label


class _Echo(ChatModel):
    def __init__(self, model, **options):
        super().__init__(model)
        self.options = options

    def generate(self, requests):
        return [Completion(text="Answer: 1") for _ in requests]


class Named(_Echo):
    provider = "my-echo"


class Bad_Label(_Echo):  # noqa: N801 - the label falls back to the class name
    provider = "has_underscore"


@pytest.fixture()
def plugin_module(monkeypatch):
    module = types.ModuleType("fake_plugin_pkg.models")
    module.Named, module.Bad_Label, module.NotAModel = Named, Bad_Label, dict
    monkeypatch.setitem(sys.modules, "fake_plugin_pkg", types.ModuleType("fake_plugin_pkg"))
    monkeypatch.setitem(sys.modules, "fake_plugin_pkg.models", module)
    return module


def test_spec_syntax():
    assert is_plugin_spec("pkg.mod:Class") and is_plugin_spec("mod:Class_2")
    for name in ("openai", "pkg.mod", "pkg.mod:", ":Class", "pkg mod:Class", "a:b:c",
                 "pkg/mod:Class"):
        assert not is_plugin_spec(name), name


def test_plugin_is_created_with_the_model_and_options(plugin_module):
    assert provider_class("fake_plugin_pkg.models:Named") is Named
    model = create_model("fake_plugin_pkg.models:Named", "m1", seed=3, no_thinking=True)
    assert isinstance(model, Named) and model.model == "m1"
    assert model.options == {"seed": 3, "no_thinking": True}


def test_run_folder_label(plugin_module):
    assert provider_label("openai") == "openai"
    assert provider_label("fake_plugin_pkg.models:Named") == "my-echo"
    assert provider_label("fake_plugin_pkg.models:Bad_Label") == "bad-label"


@pytest.mark.parametrize(("spec", "message"), [
    ("fake_plugin_pkg.models:Missing", "has no 'Missing'"),
    ("fake_plugin_pkg.models:NotAModel", "NotAModel is not a subclass"),
    ("fake_plugin_pkg.nothing_here:Named", "cannot import module fake_plugin_pkg.nothing_here"),
    ("not-a-provider", "or a plugin 'package.module:ClassName'"),
])
def test_bad_plugins_are_config_errors(plugin_module, spec, message):
    with pytest.raises(ConfigError, match=message):
        provider_class(spec)
