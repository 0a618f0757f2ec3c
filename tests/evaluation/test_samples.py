"""Stage 03 ``--samples K``: K independent dialogues per case, seeds, layout, resume, refusals."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from stage03_bundle import CASES, write_bundle
from stage03_fakes import ScriptedModel, right, wrong

from chexpercept import schema
from chexpercept.errors import ConfigError
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.api import check_samples, evaluate, run_folder
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.evaluation.replicas import RayReplicas
from chexpercept.files import read_jsonl
from chexpercept.layouts import (
    all_results_path,
    records_path,
    run_manifest_path,
    sample_results_path,
)
from chexpercept.rng import sample_seed
from chexpercept.run_store import RunStore
from utils.llm import create_model
from utils.llm.base import FAULT, Completion, Message, TurnRequest

KEYS = list(CASES)
TURNS = 33  # turns of the seven cases of the tiny bundle


@pytest.fixture()
def bench(tmp_path):
    return write_bundle(tmp_path / "bench")


def _run(bench, out, **kwargs):
    kwargs = {"provider": "random", "oracle_setting": "none", "seed": 7, **kwargs}
    summary = evaluate(bench, output_path=out, **kwargs)
    run_dir = run_folder(out, kwargs["provider"], "baseline", kwargs["oracle_setting"],
                         samples=kwargs.get("samples", 1), seed=kwargs["seed"],
                         option_order=kwargs.get("option_order", "release"))
    assert summary.run_dir == run_dir
    return summary, run_dir


def test_two_samples_per_case_with_their_own_recorded_seeds(bench, tmp_path):
    summary, run_dir = _run(bench, tmp_path / "a", samples=2)
    assert summary.cases_finished == len(KEYS) and summary.turns_requested == 2 * TURNS
    seeds = [sample_seed(7, 0), sample_seed(7, 1)]
    assert seeds[0] == 7 and seeds[1] != 7
    manifest = json.loads(run_manifest_path(run_dir).read_text(encoding="utf-8"))
    assert manifest["sampling"] == {"samples": 2, "seeds": seeds}
    records = read_jsonl(records_path(run_dir))
    assert len(records) == 2 * TURNS
    by_sample = {0: [], 1: []}
    for rec in records:
        by_sample[rec["sample"]].append(rec)
        assert rec["sample_seed"] == seeds[rec["sample"]]
        suffix = "/sample1" if rec["sample"] else ""
        assert rec["request_id"] == f"{rec['key_id']}/{rec['turn']}{suffix}"
    assert len(by_sample[0]) == len(by_sample[1]) == TURNS
    # two independent dialogues: the random answers differ somewhere
    raw = {s: [(r["key_id"], r["turn"], r["raw"]) for r in recs]
           for s, recs in by_sample.items()}
    assert {k[:2] for k in raw[0]} == {k[:2] for k in raw[1]}
    assert sorted(raw[0]) != sorted(raw[1])
    # sample 0 is release-shaped in all_results.json, sample 1 in its own file
    for path in (all_results_path(run_dir), sample_results_path(run_dir, 1)):
        data = json.loads(path.read_text(encoding="utf-8"))
        schema.parse_all_results(data, path)
        assert list(data) == KEYS
    assert not sample_results_path(run_dir, 2).exists()
    store = RunStore(run_dir)
    assert store.samples() == 2
    assert set(store.read_sample_records()) == {0, 1}
    assert len(store.read_records()) == len(KEYS)  # sample 0 only


def test_samples_are_deterministic_for_a_run_seed_and_sample_0_is_the_one_sample_run(
        bench, tmp_path):
    _, a = _run(bench, tmp_path / "a", samples=2)
    _, b = _run(bench, tmp_path / "b", samples=2)
    _, one = _run(bench, tmp_path / "one")
    _, other_seed = _run(bench, tmp_path / "c", samples=2, seed=8)
    for k in (0, 1):
        assert (RunStore(a).sample_results_path(k).read_bytes()
                == RunStore(b).sample_results_path(k).read_bytes())
    assert all_results_path(a).read_bytes() == all_results_path(one).read_bytes()
    assert (sample_results_path(a, 1).read_bytes()
            != sample_results_path(other_seed, 1).read_bytes())
    manifest = json.loads(run_manifest_path(one).read_text(encoding="utf-8"))
    assert "sampling" not in manifest  # K = 1: the manifest is the release protocol's
    assert not sample_results_path(one, 1).exists()


def test_resume_refuses_another_number_of_samples_and_resumes_the_same(bench, tmp_path):
    out = tmp_path / "out"
    _, first = _run(bench, out, samples=2, limit=2)
    records = (first / "records.jsonl").read_bytes()
    for other in (1, 3):  # K is in the folder's name: another K is another run beside it
        _, other_dir = _run(bench, out, samples=other, limit=1)
        assert other_dir != first and (first / "records.jsonl").read_bytes() == records
    # a folder given another K's name by hand still has its identity: the manifest refuses it
    k3 = run_folder(out, "random", "baseline", "none", samples=3, seed=7)
    shutil.rmtree(k3.parent)
    shutil.copytree(first.parent, k3.parent)
    with pytest.raises(ConfigError, match="'sampling'"):
        _run(bench, out, samples=3)
    summary, run_dir = _run(bench, out, samples=2)
    assert summary.turns_resumed == 2 * (9 + 6)  # the first two cases, both samples
    assert summary.turns_requested == 2 * TURNS - summary.turns_resumed
    assert summary.cases_finished == len(KEYS)
    _, fresh = _run(bench, tmp_path / "fresh", samples=2)
    for k in (0, 1):
        assert (RunStore(run_dir).sample_results_path(k).read_bytes()
                == RunStore(fresh).sample_results_path(k).read_bytes())


def test_oracle_and_dummy_are_deterministic_by_design(bench, tmp_path):
    summary, run_dir = _run(bench, tmp_path / "o", provider="oracle", samples=3)
    assert summary.statuses == {"ok": 3 * TURNS}
    for k in range(3):
        data = json.loads(RunStore(run_dir).sample_results_path(k).read_text(encoding="utf-8"))
        assert all(r["detection_qa"]["correct"] for r in data.values())
    summary, _ = _run(bench, tmp_path / "d", provider="dummy", samples=2)
    assert summary.cases_finished == len(KEYS)


@pytest.mark.parametrize(("provider", "model", "options", "match"), [
    ("transformers", "tiny", {}, "cannot sample"),
    ("opensource", "qwen2.5-vl-3b", {}, "needs --temperature T > 0"),
    ("opensource", "qwen2.5-vl-3b", {"temperature": 0.0}, "needs --temperature T > 0"),
    ("anthropic", "claude-sonnet-4-5", {}, "cannot sample"),
    ("openai", "gpt-4o", {}, "needs --temperature T > 0"),
    ("openai", "gpt-4o", {"temperature": 0.0}, "needs --temperature T > 0"),
    ("gemini", "gemini-2.5-flash", {}, "needs --temperature T > 0"),
    ("openai", "gpt-5.4", {"temperature": 1.0}, "reasoning model"),
])
def test_a_provider_that_cannot_sample_is_refused(provider, model, options, match):
    with pytest.raises(ConfigError, match=match):
        check_samples(2, provider, model, options)
    check_samples(1, provider, model, options)  # one sample: the release protocol


def test_samples_with_parts_or_ray_or_below_one_are_refused():
    check_samples(2, "openai", "gpt-4o", {"temperature": 0.7})
    check_samples(2, "random", "baseline", {})
    with pytest.raises(ConfigError, match="sharded"):
        check_samples(2, "random", "baseline", {}, part=0)
    with pytest.raises(ConfigError, match="Ray"):
        check_samples(2, "random", "baseline", {}, ray=RayReplicas())
    with pytest.raises(ConfigError, match=">= 1"):
        check_samples(0, "random", "baseline", {})


def test_a_sample_seed_reaches_the_openai_body_and_the_random_draw():
    request = TurnRequest((Message("user", "Q"),), "k/detection_qa/sample1",
                          {"num_options": 9, "multi_select": False}, seed=1234)
    model = create_model("openai", "gpt-4o", base_url="http://127.0.0.1:9/v1",
                         temperature=0.7, seed=7)
    assert model._body(request)["seed"] == 1234 and model._body(request)["temperature"] == 0.7
    plain = TurnRequest(request.messages, request.request_id)
    assert model._body(plain)["seed"] == 7
    random = create_model("random", seed=7)
    draws = {random.generate([TurnRequest(request.messages, request.request_id, request.meta,
                                          seed=s)])[0].text for s in range(40)}
    assert len(draws) > 1  # the request's seed, not the run seed, drives the draw


def test_cli_samples_and_temperature_flags(bench, tmp_path, capsys):
    import runpy
    from pathlib import Path

    from utils.cli import run_main
    script = (Path(__file__).resolve().parents[2] / "src" / "03_eval_vlm_on_chexpercept"
              / "00_eval.py")
    main = runpy.run_path(str(script), run_name="stage03_eval")["main"]
    args = ["--benchmark-dir", str(bench), "--output-path", str(tmp_path / "out"),
            "--no-progress", "--provider", "random", "--oracle-setting", "none"]
    assert run_main(main, [*args, "--samples", "2"]) == 0
    run_dir = tmp_path / "out" / "random_baseline+samples=2" / "oracle_none"
    assert sample_results_path(run_dir, 1).is_file()
    capsys.readouterr()
    assert run_main(main, [*args, "--samples", "2", "--temperature", "0.7"]) == 2
    assert "--temperature applies to --provider opensource / openai / azure / gemini" in \
        capsys.readouterr().err
    assert run_main(main, [*args, "--samples", "3"]) == 0  # its own folder
    assert sample_results_path(tmp_path / "out" / "random_baseline+samples=3" / "oracle_none",
                               2).is_file()
    assert run_main(main, [*args, "--provider", "transformers", "--model", "tiny",
                           "--samples", "2"]) == 2
    assert "cannot sample" in capsys.readouterr().err


# -- the runners, faults and resume per sample ----------------------------------------------
def _by_request(request):
    """Right or wrong decided by the request id (sample suffix included), never at random."""
    return right(request) if sum(map(ord, request.request_id)) % 3 else wrong(request)


class _AsyncScripted(ScriptedModel):
    supports_async = True

    async def agenerate(self, request):
        await asyncio.sleep(0)
        return self.generate([request])[0]


def _settings(**kw):
    return EvalSettings("scripted", "m", oracle_setting="implicit", seed=5, **kw)


def test_sync_and_async_runners_write_the_same_samples(bench, tmp_path):
    bundle = load_bundle(bench)
    cases = validate_bundle(bundle)
    run_evaluation(bundle, cases, ScriptedModel(_by_request), _settings(samples=2),
                   tmp_path / "sync")
    model = _AsyncScripted(_by_request)
    summary = run_evaluation_async(bundle, cases, model, _settings(samples=2),
                                   tmp_path / "async", concurrency=4)
    assert summary.cases_finished == len(KEYS) and summary.turns_requested == 2 * TURNS
    asked = [rid for call in model.calls for rid in call]
    assert len(asked) == len(set(asked)) == 2 * TURNS
    assert sum(rid.endswith("/sample1") for rid in asked) == TURNS
    assert {r.seed for batch in model.batches for r in batch} == set(
        _settings(samples=2).sample_seeds())
    for k in (0, 1):
        assert (RunStore(tmp_path / "sync").sample_results_path(k).read_bytes()
                == RunStore(tmp_path / "async").sample_results_path(k).read_bytes())


def test_a_fault_in_one_sample_leaves_only_that_dialogue_unfinished_until_a_rerun(
        bench, tmp_path):
    bundle = load_bundle(bench)
    cases = validate_bundle(bundle)
    rr = KEYS[0]
    gone = f"{rr}/contour_evaluation_qa/sample1"

    def faulty(request):
        if request.request_id == gone:
            return Completion(text="", status=FAULT, error="HTTP 503 after 6 retries")
        return _by_request(request)

    run_dir = tmp_path / "run"
    summary = run_evaluation(bundle, cases, ScriptedModel(faulty), _settings(samples=2),
                             run_dir)
    assert set(summary.unfinished) == {rr} and summary.cases_finished == len(KEYS) - 1
    faults = read_jsonl(run_dir / "faults.jsonl")
    assert [(f["key_id"], f["turn"], f["sample"]) for f in faults] == [
        (rr, "contour_evaluation_qa", 1)]
    sample0 = json.loads(all_results_path(run_dir).read_text(encoding="utf-8"))
    sample1 = json.loads(sample_results_path(run_dir, 1).read_text(encoding="utf-8"))
    assert "unfinished" not in sample0[rr]  # sample 0's dialogue finished
    assert sample1[rr]["unfinished"]["next_turn"] == "contour_evaluation_qa"
    again = ScriptedModel(_by_request)
    summary = run_evaluation(bundle, cases, again, _settings(samples=2), run_dir)
    assert summary.cases_finished == len(KEYS) and not summary.unfinished
    assert [rid for call in again.calls for rid in call][0] == gone  # only what was missing
    assert summary.turns_requested == 8  # the 8 turns of that dialogue from contour evaluation
    run_evaluation(bundle, cases, ScriptedModel(_by_request), _settings(samples=2),
                   tmp_path / "clean")
    for k in (0, 1):
        assert (RunStore(run_dir).sample_results_path(k).read_bytes()
                == RunStore(tmp_path / "clean").sample_results_path(k).read_bytes())


def test_estimate_cost_prices_k_calls_per_turn(bench, monkeypatch):
    from chexpercept.evaluation import cost_estimate
    from chexpercept.evaluation.api import cost_table, select_cases
    monkeypatch.setattr(cost_estimate, "_encoder", lambda: None)  # chars/4: no tiktoken download
    cases = select_cases(bench)
    one, three = cost_table(cases, "gpt-5.4"), cost_table(cases, "gpt-5.4", samples=3)
    assert "x 3 samples" in three and "samples" not in one
    row_one = next(line for line in one.splitlines() if line.startswith("gpt-5.4 "))
    row_three = next(line for line in three.splitlines() if line.startswith("gpt-5.4 "))
    assert int(row_three.split()[1]) == 3 * int(row_one.split()[1]) == 3 * TURNS


def test_samples_with_circular_option_order(bench, tmp_path):
    """Each sample asks every rotation in its own dialogue; the permutations are the run's,
    the same in every sample; the oracle's answer key holds every sample's request ids."""
    summary, run_dir = _run(bench, tmp_path / "c", provider="oracle", samples=2,
                            option_order="circular")
    assert summary.cases_finished == len(KEYS) and set(summary.statuses) == {"ok"}
    records = read_jsonl(records_path(run_dir))
    ids = [r["request_id"] for r in records]
    assert len(ids) == len(set(ids))
    rotations = [r for r in records if "@r" in r["turn"]]
    assert rotations and {r["sample"] for r in rotations} == {0, 1}
    assert all(r["request_id"].endswith("/sample1") == (r["sample"] == 1) for r in records)
    order = {s: {(r["key_id"], r["turn"]): r.get("option_order") for r in records
                 if r["sample"] == s} for s in (0, 1)}
    assert order[0] == order[1]
    for k in (0, 1):
        data = json.loads(RunStore(run_dir).sample_results_path(k).read_text(encoding="utf-8"))
        assert all(r["detection_qa"]["correct"] for r in data.values())


def test_overwrite_removes_every_earlier_samples_results(bench, tmp_path):
    # before: a --samples 3 run overwritten with --samples 2 kept all_results_sample_2.json.
    # K is in the folder's name, so the K = 3 run is given the K = 2 name by hand first.
    _, k3 = _run(bench, tmp_path / "a", samples=3)
    run_dir = run_folder(tmp_path / "a", "random", "baseline", "none", samples=2, seed=7)
    run_dir.parent.parent.mkdir(parents=True, exist_ok=True)
    k3.parent.rename(run_dir.parent)
    assert sample_results_path(run_dir, 2).is_file()
    _run(bench, tmp_path / "a", samples=2, overwrite=True)
    assert sample_results_path(run_dir, 1).is_file()
    assert not sample_results_path(run_dir, 2).exists()
    default = run_folder(tmp_path / "a", "random", "baseline", "none")
    run_dir.parent.rename(default.parent)
    _run(bench, tmp_path / "a", overwrite=True)
    assert not sample_results_path(default, 1).exists()


def test_a_stale_samples_file_without_a_manifest_is_refused(bench, tmp_path):
    # a sample file left in a folder without run_manifest.json would be read as this run's
    _, run_dir = _run(bench, tmp_path / "a", samples=2)
    for path in (run_manifest_path(run_dir), records_path(run_dir), all_results_path(run_dir)):
        path.unlink()
    with pytest.raises(ConfigError, match="all_results_sample_1.json but no run_manifest"):
        _run(bench, tmp_path / "a", samples=2)
