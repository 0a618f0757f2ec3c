"""Each provider says what it is (docs/architecture.md, "Provider capabilities"): its kind, its
Ray replica needs and its options; the evaluation layer and the CLI ask, never branch on names."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import ClassVar

import pytest

from utils.errors import ConfigError
from utils.llm.base import ChatModel, Completion
from utils.llm.registry import (
    PROVIDERS,
    flag_options,
    provider_class,
    provider_flags,
    providers_of_kind,
)
from utils.llm.settings import ApiConfig

ROOT = Path(__file__).resolve().parents[2]


def _branches_on_names(path: Path) -> set[str]:
    """Provider names the code of ``path`` compares a value against (``==``, ``in``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        parts = [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
        for part in parts:
            items = part.elts if isinstance(part, (ast.Tuple, ast.List, ast.Set)) else [part]
            found |= {i.value for i in items if isinstance(i, ast.Constant)
                      and isinstance(i.value, str) and i.value in PROVIDERS}
    return found


def test_no_provider_name_outside_the_registry():
    """The evaluation layer and the command line never branch on a provider's name."""
    files = [*(ROOT / "src" / "chexpercept" / "evaluation").glob("*.py"),
             *(ROOT / "src" / "chexpercept_cli").glob("*.py")]
    found = {str(p.relative_to(ROOT)): sorted(_branches_on_names(p)) for p in files}
    assert {k: v for k, v in found.items() if v} == {}


def test_registered_providers_declare_their_kind():
    assert providers_of_kind("api") == ["openai", "azure", "gemini", "anthropic"]
    assert providers_of_kind("baseline") == ["dummy", "random", "oracle"]
    assert set(providers_of_kind("engine")) == {"opensource", "transformers"}
    assert all(provider_class(name).description for name in PROVIDERS)


def test_ray_replica_needs_come_from_the_provider():
    vllm, hf = provider_class("opensource"), provider_class("transformers")
    assert vllm.replica_gpus("any/model", {"tensor_parallel_size": 2}, 8.0) == 2.0
    assert vllm.replica_options({}, 2.0) == {"tensor_parallel_size": 2}
    with pytest.raises(ConfigError, match="--vllm-engine batched"):
        vllm.replica_gpus("any/model", {"engine": "async"}, 8.0)
    assert hf.replica_gpus("m", {}, 1.0) == 1.0
    assert hf.replica_gpus("m", {"device": "cpu"}, 1.0) == 0
    assert provider_class("openai").replica_gpus("m", {}, 0.0) is None
    assert provider_class("dummy").replica_gpus("m", {}, 0.0) == 0.0


def test_one_rule_maps_every_provider_flag():
    flags = {f.flag: f for f in provider_flags()}
    assert flags["--request-timeout"].option == "timeout_s"
    assert flags["--vllm-engine"].providers == ("opensource",)
    assert flag_options("openai", {"--request-timeout": 5.0, "--extra-body": {"top_k": 1}}) == \
        {"timeout_s": 5.0, "extra_body": {"top_k": 1}}
    with pytest.raises(ConfigError, match="--vllm-engine applies to --provider opensource, not "
                                          "gemini"):
        flag_options("gemini", {"--vllm-engine": "async"})
    with pytest.raises(ConfigError, match="--max-new-tokens applies to --provider .*, not "
                                          "dummy"):
        flag_options("dummy", {"--max-new-tokens": 10})
    with pytest.raises(ConfigError, match="--server-wait applies to --provider openai, not "
                                          "azure"):
        flag_options("azure", {"--server-wait": 10.0})


class ApiPlugin(ChatModel):
    """A plugin that calls a hosted API: it declares what it is, nothing else is needed."""

    kind: ClassVar[str] = "api"
    config_class = ApiConfig

    def __init__(self, model: str, config: ApiConfig | None = None, **options) -> None:
        super().__init__(model)
        self.config = self.make_config(config, options)

    def generate(self, requests):
        return [Completion(text="Answer: 1") for _ in requests]


def test_a_plugin_gets_the_treatment_of_its_kind(tmp_path, monkeypatch):
    import sys

    from chexpercept.evaluation.replicas import check_ray_provider
    from chexpercept_cli import eval as cli

    monkeypatch.setitem(sys.modules, "capability_plugin", sys.modules[__name__])
    spec = "capability_plugin:ApiPlugin"
    with pytest.raises(ConfigError, match="--ray applies to providers that run a model here"):
        check_ray_provider(spec, "m", {})
    args = cli.build_parser().parse_args(["--provider", spec, "--request-timeout", "3",
                                          "--benchmark-dir", str(tmp_path)])
    with pytest.raises(ConfigError, match="needs --model"):
        cli.check_provider_flags(args, spec)
    assert cli.provider_flag_options(args, spec) == {"timeout_s": 3.0}
    args = cli.build_parser().parse_args(["--provider", spec, "--vllm-engine", "async",
                                          "--benchmark-dir", str(tmp_path)])
    with pytest.raises(ConfigError, match="--vllm-engine applies to --provider opensource"):
        cli.provider_flag_options(args, spec)
