"""The model registry: the paper's models, their settings, --model-path and custom models."""

from __future__ import annotations

import hashlib
import logging

import pytest

from utils.errors import ConfigError
from utils.llm.models import MODELS, model_fingerprint, paper_models, resolve_model

PAPER = {  # docs/paper.md, "Models": the model identifiers
    "gemini-3.1-pro": "gemini-3.1-pro", "gemini-3.1-flash": "gemini-3.1-flash",
    "gpt-5.4": "gpt-5.4", "gpt-5.4-nano": "gpt-5.4-nano",
    "qwen3.6-27b": "Qwen/Qwen3.6-27B", "qwen3.5-moe": "Qwen/Qwen3.5-122B-A10B",
    "glm-4v": "zai-org/GLM-4.6V", "internvl3.5": "OpenGVLab/InternVL3_5-38B",
    "gemma4": "google/gemma-4-31B-it", "medgemma": "google/medgemma-27b-it",
    "medgemma1.5": "google/medgemma-1.5-4b-it",
    "huatuo": "FreedomIntelligence/HuatuoGPT-Vision-7B-Qwen2.5VL",
    "lingshu": "lingshu-medical-mllm/Lingshu-32B", "hulu-med": "ZJU-AI4H/Hulu-Med-32B",
}
RELEASE_ALIASES = ("qwen3.5-moe", "qwen3.6-27b", "qwen3.6", "qwen3.5", "glm-4v", "internvl3.5",
                   "gemma3", "gemma4", "medgemma", "medgemma1.5", "huatuo", "lingshu",
                   "hulu-med")
REMOTE_CODE = {"glm-4v", "internvl3.5", "gemma3", "gemma4", "medgemma1.5", "lingshu",
               "hulu-med"}


def test_every_paper_model_and_release_alias_is_registered():
    assert {m.alias: m.model_id for m in paper_models()} == PAPER
    assert len(paper_models()) == 14
    assert set(RELEASE_ALIASES) <= set(MODELS)
    counts = {(m.backend == "api", m.domain) for m in paper_models()}
    assert counts == {(True, "general"), (False, "general"), (False, "medical")}
    assert sum(m.domain == "medical" for m in paper_models()) == 5


def test_release_settings_per_alias():
    for alias in RELEASE_ALIASES:
        spec = MODELS[alias]
        expected_len = {"internvl3.5": 40960, "hulu-med": 32768}.get(alias, 65536)
        assert spec.max_model_len == expected_len, alias
        assert spec.trust_remote_code is (alias in REMOTE_CODE), alias
        assert spec.domain == ("medical" if alias.startswith(("med", "huatuo", "lingshu",
                                                               "hulu")) else "general"), alias
        if alias == "hulu-med":
            assert (spec.backend, spec.provider, spec.hf_interface) == (
                "transformers", "transformers", "hulu-med")
            assert spec.limit_mm_per_prompt is None
        else:
            assert (spec.backend, spec.provider) == ("vllm", "opensource"), alias
            # every vLLM model takes the 7 images of a revision-required dialogue, medgemma
            # included (the release omitted it there: docs/differences.md D38)
            assert spec.limit_mm_per_prompt == {"image": 7}, alias
        assert spec.thinking is alias.startswith("qwen"), alias
    assert MODELS["glm-4v"].gpu_num == 4 and MODELS["huatuo"].gpu_num == 4
    assert MODELS["gemini-3.1-pro"].provider == "gemini"
    assert MODELS["gpt-5.4"].provider == "azure"


def test_model_path_points_an_alias_at_a_local_folder(tmp_path):
    spec = resolve_model("medgemma", "opensource", model_path=tmp_path)
    assert spec.model_path == str(tmp_path) and spec.source == str(tmp_path)
    assert spec.model_id == "google/medgemma-27b-it"
    assert spec.limit_mm_per_prompt == {"image": 7} and spec.max_model_len == 65536
    assert resolve_model("medgemma", "opensource").source == "google/medgemma-27b-it"
    with pytest.raises(ConfigError, match="not a folder"):
        resolve_model("medgemma", "opensource", model_path=tmp_path / "missing")
    with pytest.raises(ConfigError, match="only for the local providers"):
        resolve_model("gpt-5.4", "azure", model_path=tmp_path)


def test_hf_id_of_an_alias_uses_its_settings_and_unknown_names_get_defaults(tmp_path, caplog):
    spec = resolve_model("OpenGVLab/InternVL3_5-38B", "opensource")
    assert spec.max_model_len == 40960 and spec.trust_remote_code
    with caplog.at_level(logging.WARNING):
        custom = resolve_model("someorg/SomeVLM-2B", "opensource")
    assert "not a registered alias" in caplog.text
    assert (custom.model_id, custom.max_model_len, custom.trust_remote_code) == (
        "someorg/SomeVLM-2B", None, False)
    assert custom.limit_mm_per_prompt == {"image": 7} and custom.thinking is None
    local = resolve_model(str(tmp_path), "transformers")
    assert local.model_path == str(tmp_path) and local.backend == "transformers"
    assert resolve_model("MedGemma1.5", "opensource").alias == "medgemma1.5"
    api = resolve_model("gpt-4.1-mini", "openai")
    assert (api.backend, api.model_id) == ("api", "gpt-4.1-mini")


def test_providers_that_cannot_run_a_model_are_named():
    with pytest.raises(ConfigError, match="--provider transformers"):
        resolve_model("hulu-med", "opensource")
    with pytest.raises(ConfigError, match="--provider gemini"):
        resolve_model("gemini-3.1-pro", "opensource")
    assert resolve_model("medgemma1.5", "transformers").backend == "vllm"  # HF can run it too
    assert resolve_model("gpt-5.4-nano", "openai").provider == "azure"


def test_fingerprint_of_a_local_folder(tmp_path):
    (tmp_path / "config.json").write_text('{"a": 1}')
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "T"}')
    spec = resolve_model("lingshu", "opensource", model_path=tmp_path)
    found = model_fingerprint(spec)
    assert found == {"revision": None,
                     "config_sha256": hashlib.sha256(b'{"a": 1}').hexdigest(),
                     "chat_template_sha256": hashlib.sha256(b"T").hexdigest()}
    (tmp_path / "chat_template.jinja").write_text("J")
    assert model_fingerprint(spec)["chat_template_sha256"] == hashlib.sha256(b"J").hexdigest()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert model_fingerprint(resolve_model("lingshu", "opensource", model_path=empty)) == {
        "revision": None, "config_sha256": None, "chat_template_sha256": None}
