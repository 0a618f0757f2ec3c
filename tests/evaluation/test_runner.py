"""Stage-synchronous runner: batching, mapping, resume, manifest, errors, all_results schema."""

from __future__ import annotations

import json

import pytest
from stage03_bundle import CASES, load_items, write_bundle
from stage03_fakes import ScriptedModel, right, wrong

from chexpercept import schema
from chexpercept.errors import ConfigError
from chexpercept.evaluation import (
    ORACLE_SETTINGS,
    EvalSettings,
    load_bundle,
    run_evaluation,
    validate_bundle,
)
from chexpercept.files import read_jsonl, write_json_atomic
from chexpercept.layouts import all_results_path, faults_path, records_path, run_manifest_path
from utils.llm import create_model
from utils.llm.base import Completion

KEYS = list(CASES)
RR = "effusion_s50000001_positive_0"
RF = "effusion_s50000002_positive_0"


@pytest.fixture()
def bundle(tmp_path):
    return load_bundle(write_bundle(tmp_path / "bench"))


def _run(bundle, run_dir, model, **settings):
    kwargs = {"oracle_setting": "implicit", **settings}
    overwrite = kwargs.pop("overwrite", False)
    return run_evaluation(bundle, validate_bundle(bundle), model,
                          EvalSettings("scripted", "m", **kwargs), run_dir, overwrite=overwrite)


def _results(run_dir):
    path = all_results_path(run_dir)
    data = json.loads(path.read_text(encoding="utf-8"))
    schema.parse_all_results(data, path)
    return data


def _mixed(request):
    """Right for some cases/turns, wrong for others, decided by the request id only."""
    return right(request) if sum(map(ord, request.request_id)) % 3 else wrong(request)


@pytest.mark.parametrize("setting", ORACLE_SETTINGS)
def test_oracle_provider_scores_one_everywhere(bundle, tmp_path, setting):
    model = create_model("oracle")
    summary = run_evaluation(bundle, validate_bundle(bundle), model,
                             EvalSettings("oracle", "baseline", oracle_setting=setting),
                             tmp_path / "run")
    results = _results(tmp_path / "run")
    assert list(results) == KEYS
    flags = []
    for res in results.values():
        for section in ("detection_qa", "contour_evaluation_qa", "contour_revision_qa",
                        "attribute_extraction_qa"):
            if res[section]:
                flags.append(res[section]["correct"])
                flags += [v["correct"] for v in res[section].values()
                          if isinstance(v, dict) and "correct" in v]
    assert flags and all(flags)
    assert summary.statuses == {"ok": 33}


def test_one_generate_call_per_turn_index_with_every_active_case(bundle, tmp_path):
    model = ScriptedModel(right)
    summary = _run(bundle, tmp_path / "run", model)
    positives = [k for k in KEYS if "positive" in k]
    rr = [KEYS[0], KEYS[3], KEYS[6]]
    stage4 = [KEYS[0], KEYS[1], KEYS[6]]
    expected = [
        [f"{k}/detection_qa" for k in KEYS],
        [f"{k}/contour_evaluation_qa" for k in positives],
        [f"{k}/contour_revision_qa_expansion" for k in rr],
        [f"{k}/contour_revision_qa_contraction" for k in rr],
        [f"{k}/contour_revision_qa_revision_result" for k in rr],
        *([f"{k}/attribute_extraction_qa_{a}" for k in stage4] for a in schema.ATTRIBUTE_KEYS),
    ]
    assert model.calls == expected
    assert summary.generate_calls == 9 and summary.turns_requested == 33


def test_results_are_mapped_back_to_the_right_case(bundle, tmp_path):
    good = {KEYS[0], KEYS[2], KEYS[4]}

    def answer(request):
        return right(request) if request.request_id.split("/")[0] in good else wrong(request)

    _run(bundle, tmp_path / "run", ScriptedModel(answer), oracle_setting="none")
    results = _results(tmp_path / "run")
    for key_id, res in results.items():
        assert res["detection_qa"]["correct"] is (key_id in good)
        if res["contour_revision_qa"]:
            assert res["contour_revision_qa"]["correct"] is (key_id in good)
    records = read_jsonl(records_path(tmp_path / "run"))
    assert all(r["request_id"] == f"{r['key_id']}/{r['turn']}" for r in records)


def test_resume_after_interruption_requests_nothing_twice(bundle, tmp_path):
    reference = ScriptedModel(_mixed)
    _run(bundle, tmp_path / "ref", reference)

    crashing = ScriptedModel(_mixed, fail_on_call=4)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(bundle, tmp_path / "run", crashing)
    partial = _results(tmp_path / "run")  # finished cases are saved even on a crash
    finished = {k for k, v in partial.items() if "unfinished" not in v}
    assert finished == {"effusion_s50000003_negative_0", "cardiomegaly_s50000005_positive_0",
                        "cardiomegaly_s50000006_negative_2"}
    # the others are listed as unfinished, with no stage result that could be scored
    for key_id in set(partial) - finished:
        assert partial[key_id]["unfinished"]["reason"].startswith("not reached")
        assert partial[key_id]["detection_qa"] == {}

    resumed = ScriptedModel(_mixed)
    summary = _run(bundle, tmp_path / "run", resumed, save_every=1)
    first = {i for call in crashing.calls for i in call}
    second = {i for call in resumed.calls for i in call}
    assert not first & second
    assert first | second == {i for call in reference.calls for i in call}
    assert summary.turns_resumed == len(first) and summary.turns_requested == len(second)
    assert all_results_path(tmp_path / "run").read_bytes() == \
        all_results_path(tmp_path / "ref").read_bytes()

    again = ScriptedModel(_mixed)
    summary = _run(bundle, tmp_path / "run", again)
    assert again.calls == [] and summary.turns_requested == 0 and summary.cases_finished == 7


def test_resume_survives_a_torn_last_record(bundle, tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError):
        _run(bundle, run_dir, ScriptedModel(_mixed, fail_on_call=2))
    with open(records_path(run_dir), "a", encoding="utf-8") as fh:
        fh.write('{"key_id": "effusion_s5000')  # killed mid-write
    _run(bundle, run_dir, ScriptedModel(_mixed))
    _run(bundle, tmp_path / "ref", ScriptedModel(_mixed))
    assert _results(run_dir) == _results(tmp_path / "ref")


def test_checkpoint_every_save_every_finished_cases(bundle, tmp_path):
    seen = {}

    def spy(run_dir):
        def hook(call):
            path = all_results_path(run_dir)
            seen[(run_dir.name, call)] = (
                [k for k, v in json.loads(path.read_text()).items() if "unfinished" not in v]
                if path.exists() else None)
        return hook

    for name, every in (("every2", 2), ("every10", 10)):
        run_dir = tmp_path / name
        _run(bundle, run_dir, ScriptedModel(right, on_call=spy(run_dir)), save_every=every)
    # after turn 0 the two lesion-free cases are finished
    assert seen[("every2", 1)] == ["effusion_s50000003_negative_0",
                                   "cardiomegaly_s50000006_negative_2"]
    assert seen[("every10", 1)] is None


def test_manifest_mismatch_is_refused_and_overwrite_starts_afresh(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, ScriptedModel(right))
    with pytest.raises(ConfigError, match=r"field\(s\) differ: 'seed' \(run folder has 0, this "
                                          r"command has 1\)\. To run this command as a new run, "
                                          r"give it another --output-path \(the run here stays as "
                                          r"it is\); --overwrite would erase this run's"):
        _run(bundle, run_dir, ScriptedModel(right), seed=1)
    # the option order is part of the identity too: the refusal says to give it its own folder
    with pytest.raises(ConfigError, match=r"'option_order' \(run folder has 'release', this "
                                          r"command has 'shuffled'\)\. To run this command as a "
                                          r"new run, give it another --output-path"):
        _run(bundle, run_dir, ScriptedModel(right), option_order="shuffled")
    with pytest.raises(ConfigError, match="'oracle_setting'"):
        _run(bundle, run_dir, ScriptedModel(right), oracle_setting="none")
    with pytest.raises(ConfigError, match="'provider_settings'"):
        _run(bundle, run_dir, ScriptedModel(right, settings={"temperature": 1.0}))
    data = load_items(bundle.layout.root)
    data[RR]["detection_qa"]["question"] += " (edited)"
    bundle.layout.json_path.write_text(json.dumps(data), encoding="utf-8")
    changed = load_bundle(bundle.layout.root)
    with pytest.raises(ConfigError, match="'benchmark_json_sha256'"):
        _run(changed, run_dir, ScriptedModel(right))
    model = ScriptedModel(wrong)
    _run(changed, run_dir, model, overwrite=True)
    assert len(model.calls) == 9
    assert not _results(run_dir)[RR]["detection_qa"]["correct"]


def test_foreign_results_without_manifest_are_refused(bundle, tmp_path):
    run_dir = tmp_path / "run"
    write_json_atomic(all_results_path(run_dir), {})
    with pytest.raises(ConfigError, match="no run_manifest.json"):
        _run(bundle, run_dir, ScriptedModel(right))


def test_manifest_records_identity_and_no_secret(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, ScriptedModel(right, settings={"api_key": "sk-SECRET-123",
                                                         "endpoint": "https://x"}))
    manifest = json.loads(run_manifest_path(run_dir).read_text(encoding="utf-8"))
    for field in ("provider", "model", "oracle_setting", "seed", "system_prompt_sha256",
                  "benchmark_json_sha256", "packages", "git_commit"):
        assert field in manifest
    assert manifest["benchmark_json_sha256"] == bundle.json_sha256
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert "sk-SECRET-123" not in path.read_text(encoding="utf-8")


def test_provider_error_is_recorded_not_raised(bundle, tmp_path):
    def flaky(request):
        if request.request_id in (f"{RR}/detection_qa", f"{RF}/contour_evaluation_qa"):
            return Completion(text="", status="error", error="HTTP 500 from server")
        if request.request_id == f"{RR}/contour_evaluation_qa":
            return Completion(text="<think>The mask looks", status="truncated",
                              finish_reason="length")
        if request.request_id == f"{RF}/detection_qa":
            return "I cannot tell from this image."
        return right(request)

    summary = _run(bundle, tmp_path / "run", ScriptedModel(flaky), oracle_setting="none")
    results = _results(tmp_path / "run")
    assert results[RR]["detection_qa"] == {"response": "", "ground_truth": 1, "correct": False,
                                           "status": "error"}
    assert results[RR]["contour_evaluation_qa"]["status"] == "truncated"
    assert results[RF]["detection_qa"]["status"] == "refused"
    assert results[RF]["contour_evaluation_qa"]["status"] == "error"
    assert results[RR]["contour_revision_qa"]["correct"]  # the dialogue went on
    assert summary.cases_finished == 7
    assert summary.statuses["error"] == 2 and summary.statuses["ok"] == 29
    rec = next(r for r in read_jsonl(records_path(tmp_path / "run"))
               if r["request_id"] == f"{RR}/detection_qa")
    assert rec["status"] == "error" and rec["error"] == "HTTP 500 from server"


def test_all_results_schema(bundle, tmp_path):
    _run(bundle, tmp_path / "run", ScriptedModel(_mixed))
    results = _results(tmp_path / "run")
    rr, lf = results[RR], results["effusion_s50000003_negative_0"]
    assert list(rr)[:6] == ["key_id", "qa_path", "detection_qa", "contour_evaluation_qa",
                            "contour_revision_qa", "attribute_extraction_qa"]
    assert set(rr["detection_qa"]) == {"response", "ground_truth", "correct", "status"}
    assert set(rr["contour_evaluation_qa"]) == {"responses", "ground_truth", "correct", "status"}
    rev = rr["contour_revision_qa"]
    assert rev["ground_truth"] == {"expansion": [2], "contraction": [1], "revision_result": 2}
    assert set(rev["responses"]) == {"expansion", "contraction", "revision_result"}
    assert rev["correct"] == all(rev[k]["correct"] for k in ("expansion", "contraction",
                                                            "revision_result"))
    attr = rr["attribute_extraction_qa"]
    assert set(attr["ground_truth"]) == set(schema.ATTRIBUTE_KEYS)
    assert attr["correct"] == all(attr[k]["correct"] for k in schema.ATTRIBUTE_KEYS)
    assert rr["_chat_history_idx"]["attribute_extraction_qa_comparison"] == 8
    assert rr["token_usage"]["num_calls"] == 9 and rr["token_usage"]["input_tokens"] == 90
    assert lf["contour_evaluation_qa"] == {} and lf["contour_revision_qa"] == {}
    assert lf["attribute_extraction_qa"] == {} and len(lf["chat_history"]) == 1
    rf = results[RF]
    assert rf["contour_revision_qa"] == {}
    assert rf["_chat_history_idx"]["attribute_extraction_qa_distribution"] == 2
    assert results["cardiomegaly_s50000004_positive_0"]["attribute_extraction_qa"] == {}


def test_dummy_and_random_providers_run(bundle, tmp_path):
    for name in ("dummy", "random"):
        model = create_model(name, seed=0)
        summary = run_evaluation(bundle, validate_bundle(bundle), model,
                                 EvalSettings(name, "baseline"), tmp_path / name)
        assert summary.statuses["ok"] == 33
    dummy = _results(tmp_path / "dummy")
    assert all(e[2] == "1" or len(e) == 4 for r in dummy.values() for e in r["chat_history"])
    assert dummy["effusion_s50000003_negative_0"]["detection_qa"]["correct"] is False


def _fault_on(request_id: str):
    """An answer function: a ``fault`` completion for ``request_id``, ``right`` otherwise."""
    def answer(request):
        if request.request_id == request_id:
            return Completion("", status="fault", error="no answer after 7 attempt(s): boom",
                              attempts=7)
        return right(request)
    return answer


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_a_fault_is_never_recorded_and_its_case_alone_waits_for_the_rerun(bundle, tmp_path,
                                                                          runner):
    from chexpercept.evaluation.async_runner import run_evaluation_async

    def run(model, run_dir, **settings):
        if runner == "sync":
            return _run(bundle, run_dir, model, **settings)
        return run_evaluation_async(bundle, validate_bundle(bundle), model,
                                    EvalSettings("scripted", "m", oracle_setting="implicit",
                                                 **settings), run_dir, concurrency=2)

    _run(bundle, tmp_path / "ref", ScriptedModel(right))
    faulty = f"{RR}/contour_evaluation_qa"
    summary = run(ScriptedModel(_fault_on(faulty)), tmp_path / "run")
    assert summary.turns_faulted == 1 and list(summary.unfinished) == [RR]
    assert "1 of 7 case(s) unfinished" in summary.unfinished_message()
    records = [json.loads(x) for x in records_path(tmp_path / "run").read_text().splitlines()]
    assert faulty not in {r["request_id"] for r in records}
    reference = records_path(tmp_path / "ref").read_text().splitlines()
    assert len(records) == len(reference) - 8  # only the faulted case's last 8 turns wait
    assert summary.cases_finished == 6
    assert _results(tmp_path / "run")[RR]["unfinished"]["next_turn"] == "contour_evaluation_qa"

    again = ScriptedModel(right)
    summary = run(again, tmp_path / "run")
    assert summary.unfinished == {} and summary.unfinished_message() is None
    assert [i for call in again.calls for i in call][0] == faulty
    assert _results(tmp_path / "run") == _results(tmp_path / "ref")


def test_a_provider_block_is_recorded_as_blocked_and_counted_apart_from_refusals(bundle,
                                                                                 tmp_path):
    from chexpercept.analysis.extended import analyse_run_file
    from chexpercept.analysis.runs import run_from_dir

    def answer(request):
        if request.request_id == f"{RR}/detection_qa":
            return Completion("", status="blocked", finish_reason="SAFETY",
                              error="the provider withheld the answer (SAFETY)")
        if request.request_id.startswith("cardiomegaly_s50000004"):
            return "I'm sorry, I cannot help with that."
        return right(request)

    run_dir = tmp_path / "oracle_implicit"
    _run(bundle, run_dir, ScriptedModel(answer))
    records = {r["request_id"]: r for r in map(json.loads,
                                               records_path(run_dir).read_text().splitlines())}
    blocked = records[f"{RR}/detection_qa"]
    assert blocked["status"] == "blocked" and blocked["correct"] is False
    assert _results(run_dir)[RR]["detection_qa"]["status"] == "blocked"
    table = analyse_run_file(run_from_dir(run_dir), n_boot=0, seed=0).table
    counts = dict(zip(schema.STATUSES, table.status.sum(axis=(0, 1)).tolist(), strict=True))
    assert counts["blocked"] == 1 and counts["refused"] >= 1


def test_a_torn_or_garbled_faults_log_never_blocks_a_resume(bundle, tmp_path, caplog):
    faulty = f"{RR}/contour_evaluation_qa"
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, ScriptedModel(_fault_on(faulty)))
    faults = faults_path(run_dir)
    with open(faults, "a", encoding="utf-8") as fh:
        fh.write('{"key_id": "effusion_s5')  # a writer killed mid-line
    _run(bundle, run_dir, ScriptedModel(_fault_on(faulty)))  # faults again: a new line
    lines = faults.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and all(json.loads(x)["request_id"] == faulty for x in lines)
    hostile = ["not json", "[1, 2]", "[" * 200_000 + "]" * 200_000,  # nested past the parser
               '{"key_id": "a", "turn": "b", "n": ' + "9" * 5000 + "}",  # too long a number
               '{"key_id": "a", "turn": []}']  # a turn that is no name
    faults.write_text("\n".join([lines[0], *hostile, lines[1]]) + "\n", encoding="utf-8")
    summary = _run(bundle, run_dir, ScriptedModel(right))  # the log is not a source of truth
    assert summary.unfinished == {}
    assert f"{faults}, line 2: not valid JSON" in caplog.text
    assert "line 3 is not a fault entry" in caplog.text
    assert f"{faults}, line 4: not usable JSON: arrays or objects nested" in caplog.text
    assert f"{faults}, line 5: not usable JSON" in caplog.text
    assert "line 6 is not a fault entry" in caplog.text
