"""Baseline providers, the provider registry, stable hashing and pricing."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from chexpercept.rng import stable_hash as core_stable_hash
from utils.errors import ConfigError, ProviderError
from utils.llm import PROVIDERS, create_model, default_model
from utils.llm._hashing import stable_hash
from utils.llm.base import Message, TurnRequest, Usage
from utils.llm.pricing import cost_usd


def _request(request_id, *, n=4, multi=False, gt=1, none_index=None):
    del gt  # the answer is never in a request; the oracle gets it from set_answer_key
    return TurnRequest(messages=(Message("user", "q"),), request_id=request_id,
                       meta={"num_options": n, "multi_select": multi,
                             "option_texts": [str(i) for i in range(1, n + 1)],
                             "none_index": none_index})


def _indices(text):
    assert text.startswith("Answer: ")
    return tuple(int(x) for x in text.removeprefix("Answer: ").split(","))


def test_dummy_always_answers_one():
    model = create_model("dummy")
    assert model.model == "baseline"
    out = model.generate([_request("a"), _request("b", multi=True, gt=[2])])
    assert [c.text for c in out] == ["1", "1"] and all(c.status == "ok" for c in out)


def test_oracle_answers_the_key_it_was_given_and_no_request_carries_it():
    oracle = create_model("oracle")
    assert oracle.needs_answer_key and not create_model("random").needs_answer_key
    oracle.set_answer_key({"a": 3, "b": (2, 4)})
    requests = [_request("a", gt=3), _request("b", multi=True, gt=[4, 2])]
    assert all("ground_truth" not in r.meta for r in requests)
    assert [c.text for c in oracle.generate(requests)] == ["Answer: 3", "Answer: 2,4"]
    with pytest.raises(ProviderError, match="no answer for request 'c'"):
        oracle.generate([_request("c")])


def test_random_is_reproducible_per_request_and_seed():
    reqs = [_request(f"case{i}/detection_qa") for i in range(50)]
    a = [c.text for c in create_model("random", seed=7).generate(reqs)]
    b = [c.text for c in create_model("random", seed=7).generate(reqs[::-1])][::-1]
    c = [c.text for c in create_model("random", seed=8).generate(reqs)]
    assert a == b  # independent of batch order
    assert a != c


def test_random_single_choice_is_uniform_over_options():
    model = create_model("random", seed=0)
    counts = Counter(_indices(c.text) for c in model.generate(
        [_request(f"k{i}", n=3) for i in range(3000)]))
    assert set(counts) == {(1,), (2,), (3,)}
    assert all(800 < v < 1200 for v in counts.values())


def test_random_multi_select_is_uniform_over_valid_sets():
    model = create_model("random", seed=0)
    # location: 3 regions + None -> 7 non-empty subsets + {None} = 8 sets
    counts = Counter(_indices(c.text) for c in model.generate(
        [_request(f"k{i}", n=4, multi=True, gt=[4], none_index=4) for i in range(4000)]))
    assert len(counts) == 8
    assert (4,) in counts and not any(4 in s and len(s) > 1 for s in counts)
    assert all(350 < v < 650 for v in counts.values())
    # without a None option only non-empty subsets are drawn
    counts = Counter(_indices(c.text) for c in model.generate(
        [_request(f"j{i}", n=2, multi=True, gt=[1]) for i in range(300)]))
    assert set(counts) == {(1,), (2,), (1, 2)}


def test_registry_defaults_and_unavailable_providers(monkeypatch):
    assert default_model("dummy") == "baseline" and default_model("opensource") == "medgemma1.5"
    for name in ("opensource", "transformers", "openai", "azure", "gemini"):
        assert name in PROVIDERS
    monkeypatch.setitem(PROVIDERS, "ghost", "no_such_pkg.no_such_module:Ghost")
    with pytest.raises(ConfigError, match="provider 'ghost' is not available in this version"):
        create_model("ghost", "some-model")
    with pytest.raises(ConfigError, match="unknown provider 'gpt'"):
        create_model("gpt")


def test_stable_hash_matches_core():
    for label in ("", "a", "effusion_s1_positive_0/detection_qa"):
        assert stable_hash(label) == core_stable_hash(label)


def test_pricing():
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=0, output_tokens=1_000_000)
    assert cost_usd("gemini-3.1-pro", usage) == pytest.approx(14.0)  # differences.md D37
    assert cost_usd("gpt-5.4-nano-2026-03-05", usage) == pytest.approx(1.45)  # snapshot date
    assert cost_usd("medgemma1.5", usage) is None  # unknown model: NA, not 0
    cached = Usage(input_tokens=1_000_000, cached_input_tokens=1_000_000, output_tokens=0)
    assert cost_usd("gpt-5.4", cached) == pytest.approx(0.25)


def test_imports_load_no_heavy_dependency():
    code = ("import sys, chexpercept.evaluation, utils.llm, utils.llm.registry, "
            "utils.llm.baselines; heavy = {'torch', 'vllm', 'transformers', 'openai', "
            "'google.genai', 'sam2'}; print(sorted(heavy & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_a_misspelt_provider_option_is_an_error_that_names_it():
    with pytest.raises(ConfigError, match=r"provider 'random' has no option\(s\) temprature; "
                                          r"it takes: .*seed"):
        create_model("random", temprature=0.0)
    with pytest.raises(ConfigError, match=r"no option\(s\) max_retires.*max_retries"):
        create_model("openai", "gpt-5.4", env={}, max_retires=3)
    # run-wide options are taken by every provider; Azure takes the OpenAI options it passes on
    assert create_model("dummy", seed=3, no_thinking=True).model == "baseline"
    from utils.llm.registry import provider_class, provider_options
    assert {"deployment", "reasoning_effort", "max_retries"} <= provider_options(
        provider_class("azure"))


@pytest.mark.parametrize(("option", "value"), [("max_retries", -1), ("max_retries", "abc"),
                                               ("concurrency", 0), ("timeout_s", 0)])
def test_api_provider_limits_are_checked_from_python_too(option, value):
    with pytest.raises(ConfigError, match=rf"{option} must be"):
        create_model("openai", "gpt-5.4", env={}, **{option: value})
