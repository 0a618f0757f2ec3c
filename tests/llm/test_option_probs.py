"""``--option-probs`` end to end: providers' log-probabilities, Stage 03 records, Stage 04 AUROC.

The openai provider against the loopback OpenAI-compatible server (which sends OpenAI's
``logprobs.content``, the shape vLLM's server sends too), the opensource provider against the
stub ``vllm`` (per-token ``Logprob`` maps, as vLLM 0.33 gives them), and the refusals.
"""

from __future__ import annotations

import csv
import json
import math
import runpy
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import vllm_stub
from local_provider_helpers import (
    ROOT,
    read_manifest,
    read_records,
    run_eval_cli,
    stage03_bundle,
    write_marked_bundle,
)
from loopback import LoopbackServer

from chexpercept.errors import ConfigError
from chexpercept.evaluation.api import evaluate
from chexpercept.layouts import all_models_dir
from utils.llm import create_model
from utils.llm.base import Message, TurnRequest
from utils.llm.openai_provider import OpenAIChatModel, chat_top_logprobs
from utils.llm.registry import providers_with_logprobs
from utils.llm.retry import RetryPolicy
from utils.llm.vllm_provider import sample_top_logprobs

KEY = "sk-test-SECRET-0123456789"
FAST = RetryPolicy(max_retries=1, base_delay_s=0.001, max_delay_s=0.01)
ANALYZE = ROOT / "src" / "04_analyze_eval_result" / "01_analyze_model_performance.py"
MODEL = "gpt-4.1"  # not a reasoning model: it can return log-probabilities


def _cli(argv: list[str]) -> int:
    """``00_eval.py`` as the console runs it: a ``ChexperceptError`` is one line, exit 2."""
    from utils.cli import run_main

    return run_main(lambda a: run_eval_cli(list(a or [])), argv)


def _eval_argv(server: LoopbackServer, bench: Path, out: Path, *extra: str) -> list[str]:
    return ["--provider", "openai", "--model", MODEL, "--base-url", server.base_url,
            "--benchmark-dir", str(bench), "--output-path", str(out), "--no-progress",
            "--max-retries", "1", *extra]


def _analyze(results: Path, out: Path, bench: Path) -> int:
    main = runpy.run_path(str(ANALYZE), run_name="analyze_under_test")["main"]
    return main(["--results-dir", str(results), "--output-dir", str(out), "--benchmark-dir",
                 str(bench), "--no-viewer", "--bootstrap", "0", "--no-progress"])


def _auroc_rows(out: Path) -> list[dict[str, str]]:
    with (all_models_dir(out, "implicit") / "auroc.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


# -- the provider side ------------------------------------------------------------------------
def test_capability_is_declared_by_the_providers_that_can():
    assert providers_with_logprobs() == ["opensource", "openai", "azure"]


def test_chat_top_logprobs_reads_openai_shape_and_sums_equal_texts():
    block = {"content": [
        {"token": "Answer", "logprob": -0.01, "top_logprobs": [
            {"token": "Answer", "logprob": -0.01}]},
        {"token": " 1", "logprob": math.log(0.6), "top_logprobs": [
            {"token": " 1", "logprob": math.log(0.4)}, {"token": " 1", "logprob": math.log(0.2)},
            {"token": " 2", "logprob": math.log(0.3)}, {"token": "x", "logprob": -math.inf}]}]}
    steps = chat_top_logprobs(block)
    assert [t for t, _ in steps] == ["Answer", " 1"]
    assert math.exp(steps[1][1][" 1"]) == pytest.approx(0.6)
    assert set(steps[1][1]) == {" 1", " 2"}  # -inf (probability 0) adds nothing
    for bad in (None, {}, {"content": []}, {"content": [{"token": "1"}]},
                {"content": [{"token": "1", "top_logprobs": [{"token": "1", "logprob": "x"}]}]}):
        assert chat_top_logprobs(bad) is None


def test_openai_requests_logprobs_only_when_asked_and_reasoning_models_refuse():
    asked = OpenAIChatModel(MODEL, base_url="http://127.0.0.1:9/v1", top_logprobs=20)
    assert asked.request_params()["logprobs"] is True
    assert asked.request_params()["top_logprobs"] == 20
    plain = OpenAIChatModel(MODEL, base_url="http://127.0.0.1:9/v1")
    assert "logprobs" not in plain.request_params()
    with pytest.raises(ConfigError, match="reasoning model"):
        OpenAIChatModel("gpt-5.4", base_url="http://127.0.0.1:9/v1", top_logprobs=20)
    with pytest.raises(ConfigError, match="top_logprobs must be an integer from 1 to 20"):
        OpenAIChatModel(MODEL, base_url="http://127.0.0.1:9/v1", top_logprobs=21)


def test_vllm_sample_top_logprobs_from_vllm_shaped_outputs():
    ids, steps = vllm_stub.sample_logprobs("Answer: 2", 3)
    out = sample_top_logprobs(SimpleNamespace(token_ids=ids, logprobs=steps))
    assert [t for t, _ in out] == ["Answer:", " 2"]
    assert math.exp(out[1][1][" 2"]) == pytest.approx(0.7)
    assert len(out[1][1]) == 3  # top 3, the sampled token among them
    # two token ids that decode alike are summed
    Logprob = vllm_stub.Logprob
    dup = SimpleNamespace(token_ids=[7], logprobs=[{7: Logprob(math.log(0.5), 1, "1"),
                                                    8: Logprob(math.log(0.25), 2, "1")}])
    assert math.exp(sample_top_logprobs(dup)[0][1]["1"]) == pytest.approx(0.75)
    # missing, misaligned or undecoded log-probabilities: None (recorded as missing)
    assert sample_top_logprobs(SimpleNamespace(token_ids=ids, logprobs=None)) is None
    assert sample_top_logprobs(SimpleNamespace(token_ids=ids[:1], logprobs=steps)) is None
    undecoded = SimpleNamespace(token_ids=[7], logprobs=[{7: Logprob(-0.1, 1, None)}])
    assert sample_top_logprobs(undecoded) is None
    assert sample_top_logprobs(SimpleNamespace(token_ids=[9], logprobs=[{7: Logprob(-1.0)}])) \
        is None


# -- refusals ---------------------------------------------------------------------------------
def test_a_provider_without_logprobs_is_refused(tmp_path, capsys):
    bench = stage03_bundle.write_bundle(tmp_path / "bench")
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="provider random cannot return token log-prob") as info:
        evaluate(bench, provider="random", output_path=out, option_probs=True)
    assert "opensource, openai, azure" in str(info.value)
    assert not out.exists()  # refused before anything is written
    rc = _cli(["--provider", "gemini", "--model", "gemini-3-flash", "--option-probs",
                       "--benchmark-dir", str(bench), "--output-path", str(out),
                       "--no-progress"])
    assert rc == 2
    assert "--option-probs: provider gemini cannot return token log-probabilities" in \
        capsys.readouterr().err
    assert not out.exists()


# -- openai end to end ------------------------------------------------------------------------
def test_openai_option_probs_run_records_them_and_stage04_writes_auroc(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    bench = stage03_bundle.write_bundle(tmp_path / "bench")
    results = tmp_path / "results"
    with LoopbackServer() as server:
        assert run_eval_cli(_eval_argv(server, bench, results, "--option-probs")) == 0
        bodies = [s.body for s in server.chat_requests()]
    assert all(b["logprobs"] is True and b["top_logprobs"] == 20 for b in bodies)
    run_dir = results / f"openai_{MODEL}" / "oracle_implicit"
    assert read_manifest(run_dir)["option_probs"] is True
    records = read_records(run_dir)
    assert len(records) == 33
    assert Counter(r["option_probs"]["status"] for r in records) == {"ok": 33}
    for rec in records:
        probs = rec["option_probs"]["probs"]
        assert sum(probs.values()) == pytest.approx(1.0)
        assert rec["option_probs"]["token_index"] == 1  # "Answer:", " 1"
        assert max(probs, key=probs.get) == "1"  # the answer given
    data = json.loads((run_dir / "all_results.json").read_text())
    rr = data["effusion_s50000001_positive_0"]
    assert rr["detection_qa"]["option_probs"]["status"] == "ok"
    assert rr["contour_evaluation_qa"]["option_probs"]["status"] == "ok"
    assert rr["contour_revision_qa"]["expansion"]["option_probs"]["status"] == "ok"

    out = tmp_path / "analysis"
    assert _analyze(results, out, bench) == 0
    rows = _auroc_rows(out)
    pooled = {r["question"]: r for r in rows if r["lesion"] == "all"}
    assert (pooled["detection"]["n_positive"], pooled["detection"]["n_negative"]) == ("5", "2")
    assert (pooled["contour_evaluation"]["n_positive"],
            pooled["contour_evaluation"]["n_negative"]) == ("3", "2")
    assert 0.0 <= float(pooled["detection"]["auroc"]) <= 1.0
    assert {r["model"] for r in rows} == {f"openai_{MODEL}"}  # no chance rows, no zeros
    # a lesion with 1 negative: no AUROC, a note, never a number
    effusion = next(r for r in rows if r["question"] == "detection"
                    and r["lesion"] == "effusion")
    assert effusion["auroc"] == "" and "needs >= 2" in effusion["note"]
    report = (all_models_dir(out, "implicit") / "report.md").read_text()
    assert "## AUROC from option probabilities" in report
    # the run's label names its protocol (analysis.runs.run_label): --option-probs
    assert f"| openai_{MODEL}+option_probs=yes | {float(pooled['detection']['auroc']):.3f}" \
        in report


def test_missing_logprobs_are_a_recorded_problem_not_zeros(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    bench = stage03_bundle.write_bundle(tmp_path / "bench")
    results = tmp_path / "results"

    with LoopbackServer() as server:
        server.push(*({"logprobs": None} for _ in range(3)))  # the first three requests
        assert run_eval_cli(_eval_argv(server, bench, results, "--option-probs",
                                       "--concurrency", "1")) == 0
    run_dir = results / f"openai_{MODEL}" / "oracle_implicit"
    records = read_records(run_dir)
    statuses = Counter(r["option_probs"]["status"] for r in records)
    assert statuses == {"missing": 3, "ok": 30}
    missing = [r for r in records if r["option_probs"]["status"] == "missing"]
    assert all("probs" not in r["option_probs"] for r in missing)
    assert all(r["status"] == "ok" for r in missing)  # the answers themselves are kept
    out = tmp_path / "analysis"
    assert _analyze(results, out, bench) == 0
    pooled = {r["question"]: r for r in _auroc_rows(out) if r["lesion"] == "all"}
    without = sum(int(r["n_without_probs"]) for r in pooled.values())
    counted = sum(int(r["n_positive"]) + int(r["n_negative"]) for r in pooled.values())
    scored_turns = sum(1 for r in records if r["turn"] in ("detection_qa",
                                                           "contour_evaluation_qa"))
    assert without + counted == scored_turns and without >= 1


def test_option_probs_is_part_of_the_runs_identity(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    bench = stage03_bundle.write_bundle(tmp_path / "bench")
    results = tmp_path / "results"
    with LoopbackServer() as server:
        assert run_eval_cli(_eval_argv(server, bench, results, "--limit", "2")) == 0
        manifest = read_manifest(results / f"openai_{MODEL}" / "oracle_implicit")
        assert "option_probs" not in manifest  # earlier runs' manifests stay equal
        capsys.readouterr()
        assert _cli(_eval_argv(server, bench, results, "--option-probs")) == 2
        err = capsys.readouterr().err
        assert "'option_probs'" in err
        n = len(server.chat_requests())
        # a run made with the flag resumes with it, and is refused without it
        assert run_eval_cli(_eval_argv(server, bench, results, "--option-probs",
                                       "--overwrite", "--limit", "2")) == 0
        assert run_eval_cli(_eval_argv(server, bench, results, "--option-probs")) == 0
        assert _cli(_eval_argv(server, bench, results)) == 2
        assert "'option_probs'" in capsys.readouterr().err
        assert len(server.chat_requests()) == n + 33


def test_a_run_without_option_probs_gets_no_auroc_rows_and_a_line_saying_why(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    bench = stage03_bundle.write_bundle(tmp_path / "bench")
    results = tmp_path / "results"
    with LoopbackServer() as server:
        assert run_eval_cli(_eval_argv(server, bench, results)) == 0
    records = read_records(results / f"openai_{MODEL}" / "oracle_implicit")
    assert all("option_probs" not in r for r in records)
    out = tmp_path / "analysis"
    assert _analyze(results, out, bench) == 0
    assert _auroc_rows(out) == []
    report = (all_models_dir(out, "implicit") / "report.md").read_text()
    assert f"No AUROC for openai_{MODEL}: run without `--option-probs`" in report


# -- opensource (vLLM) through the stub -------------------------------------------------------
def test_opensource_option_probs_through_vllm_logprobs(monkeypatch, tmp_path):
    def respond(conversation):
        grey = vllm_stub.decode_data_url(
            vllm_stub.image_parts(conversation)[0]["image_url"]["url"]).getpixel((0, 0))[0]
        # case 20 (the first) names a number before its answer: not the answer's token
        return (f"Case {grey}. Answer: 1" if grey == 20 else "Answer: 1"), "stop"

    module = vllm_stub.make_vllm_module(respond)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    model_dir = tmp_path / "local_model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"model_type": "qwen3_vl"}', encoding="utf-8")
    (model_dir / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m['role'] }}{% endfor %}", encoding="utf-8")
    bench = tmp_path / "bench"
    write_marked_bundle(bench)
    out = tmp_path / "out"
    assert run_eval_cli(["--benchmark-dir", str(bench), "--output-path", str(out),
                         "--provider", "opensource", "--model", "qwen3.6-27b",
                         "--model-path", str(model_dir), "--no-progress",
                         "--option-probs"]) == 0
    (engine,) = module.LLM.instances
    assert {call.sampling_params.logprobs for call in engine.calls} == {20}
    run_dir = out / "opensource_qwen3.6-27b" / "oracle_implicit"
    assert read_manifest(run_dir)["option_probs"] is True
    records = read_records(run_dir)
    first_case = next(iter(json.loads((run_dir / "all_results.json").read_text())))
    for rec in records:
        op = rec["option_probs"]
        if rec["key_id"] == first_case:
            assert op["status"] == "mismatch" and "' 2'" in op["detail"]
        else:
            assert op["status"] == "ok"
            # the stub's digits 1..4 other than the answer share 0.25 (vllm_stub.sample_logprobs)
            others = min(len(op["probs"]), 4) - 1
            assert op["probs"]["1"] == pytest.approx(0.7 / (0.7 + 0.25 / 3 * others))


def test_vllm_completion_carries_top_logprobs_and_none_without_the_option(monkeypatch,
                                                                         tmp_path):
    module = vllm_stub.make_vllm_module(lambda conversation: ("Answer: 2", "stop"))
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"model_type": "qwen3_vl"}', encoding="utf-8")
    request = TurnRequest((Message("system", "s"), Message("user", "q")), request_id="r")
    with_lp = create_model("opensource", "lingshu", model_path=str(model_dir), top_logprobs=5)
    (completion,) = with_lp.generate([request])
    assert [t for t, _ in completion.top_logprobs] == ["Answer:", " 2"]
    plain = create_model("opensource", "lingshu", model_path=str(model_dir))
    assert plain.generate([request])[0].top_logprobs is None
    assert module.LLM.instances[-1].calls[0].sampling_params.logprobs is None
