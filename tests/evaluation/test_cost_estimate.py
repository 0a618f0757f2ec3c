"""--estimate-cost: offline token and cost estimate of a run (no API call)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from stage03_bundle import write_bundle

from chexpercept.evaluation import SYSTEM_PROMPT, load_bundle, validate_bundle
from chexpercept.evaluation.cost_estimate import call_shapes, estimate, text_tokens

REPO = Path(__file__).resolve().parents[2]
LF = "effusion_s50000003_negative_0"
RR = "effusion_s50000001_positive_0"


@pytest.fixture()
def cases(tmp_path):
    bundle = load_bundle(write_bundle(tmp_path / "bench"))
    return {c.key_id: c for c in validate_bundle(bundle)}


def test_one_call_per_turn_and_history_resent(cases):
    shapes = call_shapes(list(cases.values()))
    assert len(shapes) == 33
    rr = call_shapes([cases[RR]])
    assert [s.prior_answers for s in rr] == list(range(9))
    assert [s.prefix_images for s in rr][:4] == [0, 1, 2, 3]  # earlier images re-sent
    assert all(b.prefix_text > a.prefix_text for a, b in zip(rr, rr[1:], strict=False))


def test_single_call_priced_by_hand(cases):
    shape = call_shapes([cases[LF]])[0]
    question = cases[LF].turns[0].question
    assert shape.prefix_text == text_tokens(SYSTEM_PROMPT)
    assert shape.new_text == text_tokens(question) and shape.new_images == 1
    e = estimate([shape], "gpt-5.4")
    expected_in = text_tokens(SYSTEM_PROMPT) + text_tokens(question) + 800
    assert (e.calls, e.input_tokens, e.output_tokens) == (1, expected_in, 1000)
    assert e.cacheable_tokens == 0  # prefix below OpenAI's 1024-token cache minimum
    assert e.cost_usd == pytest.approx((expected_in * 2.5 + 1000 * 15.0) / 1e6)


def test_cached_variant_and_unknown_model(cases):
    shapes = call_shapes([cases[RR]])
    e = estimate(shapes, "gpt-5.4-nano")
    assert 0 < e.cacheable_tokens < e.input_tokens and e.cost_cached_usd < e.cost_usd
    unknown = estimate(shapes, "mystery-model")
    assert unknown.cost_usd is None and unknown.cost_cached_usd is None


def test_cli_estimate_needs_no_key_and_calls_nothing(tmp_path, monkeypatch, capsys):
    bench = write_bundle(tmp_path / "bench")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    script = runpy.run_path(str(REPO / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"))
    code = script["main"](["--provider", "openai", "--model", "mystery-model",
                           "--benchmark-dir", str(bench), "--api-keys",
                           str(tmp_path / "missing.yaml"), "--estimate-cost", "--no-progress",
                           "--output-path", str(tmp_path / "out")])
    assert code == 0
    out = capsys.readouterr().out
    assert "mystery-model" in out and "NA" in out and "gemini-3.1-pro-preview" in out
    assert not (tmp_path / "out").exists()


def test_an_encoding_that_cannot_be_loaded_falls_back_to_chars_over_4(monkeypatch, caplog):
    """tiktoken installed but its o200k_base file not downloadable (offline): chars/4, a warning."""
    import sys
    import types

    from chexpercept.evaluation import cost_estimate

    def no_download(name):
        raise ConnectionError(f"cannot download {name}")

    monkeypatch.setitem(sys.modules, "tiktoken", types.SimpleNamespace(get_encoding=no_download))
    cost_estimate._encoder.cache_clear()
    try:
        with caplog.at_level("WARNING"):
            assert cost_estimate.tokenizer_name() == "chars/4"
            assert text_tokens("x" * 9) == 3
        assert "o200k_base could not be loaded" in caplog.text
    finally:
        cost_estimate._encoder.cache_clear()
