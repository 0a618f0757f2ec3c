"""The optional judge model of Stage 03 (docs/parsing.md, "Judge model"; issue 28 item 4).

A scripted model answers some turns in words the parser cannot read and the rest with
``Answer: N``; a scripted judge reads the option named in the reply it is shown
(``judge_fakes.py``). The judge is given to the
runners as the CLI gives it (a :class:`~chexpercept.evaluation.judge.Judge` around a provider).
"""

from __future__ import annotations

import json

import pytest
from judge_fakes import LABEL, FakeJudge, hedged, prose
from stage03_bundle import CASES, write_bundle
from stage03_fakes import ScriptedModel, right

from chexpercept import schema
from chexpercept.errors import ConfigError
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.evaluation.cases import TURNS
from chexpercept.evaluation.judge import (
    JUDGE_PROMPT_SHA256,
    Judge,
    KeptReplies,
    audited,
    create_judge,
    judge_prompt,
    judge_seed,
    read_verdict,
)
from chexpercept.files import read_jsonl
from chexpercept.layouts import all_results_path, faults_path, records_path, run_manifest_path
from chexpercept.run_store import KEPT_REPLY_FIELD
from utils.llm.base import Completion, TurnRequest
from utils.llm.registry import split_model_spec

KEYS = list(CASES)
RR = "effusion_s50000001_positive_0"


@pytest.fixture()
def bundle(tmp_path):
    return load_bundle(write_bundle(tmp_path / "bench"))


def _run(bundle, run_dir, model, judge=None, *, runner=run_evaluation, **settings):
    kwargs = {"oracle_setting": "implicit", **settings}
    return runner(bundle, validate_bundle(bundle), model, EvalSettings("scripted", "m", **kwargs),
                  run_dir, judge=judge)


def _records(run_dir):
    return {(r["key_id"], r["turn"]): r for r in read_jsonl(records_path(run_dir))}


def _results(run_dir):
    path = all_results_path(run_dir)
    data = json.loads(path.read_text(encoding="utf-8"))
    schema.parse_all_results(data, path)
    return data


def _judge(fake=None, **kwargs):
    return Judge(fake or FakeJudge(), LABEL, **{"audit_rate": 0.0, **kwargs})


def test_only_unparseable_replies_reach_the_judge(bundle, tmp_path):
    def answer(request):  # refusals and truncations never go to the judge
        if request.request_id.endswith("/detection_qa") and RR not in request.request_id:
            return "I'm sorry, I cannot help with that."
        if request.request_id.endswith("contour_evaluation_qa"):
            return Completion(text="Let me think about the", finish_reason="length")
        return prose(request)

    plain = _run(bundle, tmp_path / "plain", ScriptedModel(answer))
    fake = FakeJudge()
    judged = _run(bundle, tmp_path / "judged", ScriptedModel(answer), _judge(fake))
    unreadable = {r["request_id"] for r in _records(tmp_path / "plain").values()
                  if r["status"] == "unparseable"}
    assert unreadable and plain.statuses["refused"] and plain.statuses["truncated"]
    assert sorted(fake.seen) == sorted("judge:" + i for i in unreadable)
    assert judged.statuses["judged"] == len(unreadable) == judged.judge_requests
    assert judged.statuses["refused"] == plain.statuses["refused"]
    assert judged.statuses["truncated"] == plain.statuses["truncated"]
    assert judged.statuses["unparseable"] == 0
    assert "judged=" in judged.line() and "judged=" not in plain.line()


def test_a_judged_record_holds_the_judged_reading_and_the_judge_object(bundle, tmp_path):
    fake = FakeJudge()
    _run(bundle, tmp_path / "run", ScriptedModel(prose), _judge(fake))
    records = _records(tmp_path / "run")
    judged = [r for r in records.values() if r["status"] == "judged"]
    assert judged
    for rec in judged:
        assert rec["correct"] is True  # the prose named the ground truth
        assert rec["answer"] and rec["parsed"] == ",".join(map(str, rec["answer"]))
        assert rec["detail"]  # why the parser could not read it
        judge = rec["judge"]
        assert judge["model"] == LABEL and judge["prompt_sha256"] == JUDGE_PROMPT_SHA256
        assert judge["raw"].endswith("Answer: " + rec["parsed"])
        assert judge["answer"] == rec["answer"] and judge["status"] == "ok"
        assert "judge_audit" not in rec
    assert all("judge" not in r for r in records.values() if r["status"] == "ok")
    # the prompt holds the question, the numbered options as shown and the raw reply
    rec = judged[0]
    assert any(rec["raw"] in p and "Options, numbered" not in p and "1: " in p
               for p in fake.prompts)
    # all_results.json: the question's block has the status, the answer and the judge object
    results = _results(tmp_path / "run")
    key, turn = rec["key_id"], rec["turn"]
    spec = next(t for t in TURNS if t.name == turn)
    block = results[key][spec.section]
    block = block if spec.sub is None else block[spec.sub]
    assert block["status"] == "judged" and block["correct"] is True
    assert block["judge"] == rec["judge"]


def test_a_judge_that_reads_none_keeps_unparseable_and_records_itself(bundle, tmp_path):
    def vague(request):
        return "It is hard to say.\nThe image is ambiguous." if hedged(request) \
            else right(request)

    _run(bundle, tmp_path / "run", ScriptedModel(vague), _judge())
    unread = [r for r in _records(tmp_path / "run").values() if "judge" in r]
    assert unread and all(r["status"] == "unparseable" and r["answer"] is None
                          and r["correct"] is False for r in unread)
    assert all(r["judge"]["answer"] is None and "none" in r["judge"]["detail"] for r in unread)


def test_the_strict_reading_is_the_run_without_a_judge(bundle, tmp_path):
    """Judged turns count as wrong for the oracle, so every setting asks what a run without
    a judge asks: the same conversations, the same replies; only the judged turns differ."""
    for setting in ("implicit", "explicit", "none"):
        plain_dir, judged_dir = tmp_path / f"plain_{setting}", tmp_path / f"judged_{setting}"
        _run(bundle, plain_dir, ScriptedModel(prose), oracle_setting=setting)
        _run(bundle, judged_dir, ScriptedModel(prose), _judge(), oracle_setting=setting)
        plain, judged = _results(plain_dir), _results(judged_dir)
        assert [v["chat_history"] for v in plain.values()] == \
            [v["chat_history"] for v in judged.values()]
        a, b = _records(plain_dir), _records(judged_dir)
        assert a.keys() == b.keys()
        for k, rec in b.items():
            if rec["status"] == "judged":
                assert a[k]["status"] == "unparseable" and a[k]["correct"] is False
            else:
                assert (rec["status"], rec["correct"], rec["oracle"]) == \
                    (a[k]["status"], a[k]["correct"], a[k]["oracle"])


def test_end_to_end_the_dialogue_goes_on_from_the_judged_answer(bundle, tmp_path):
    def first_turn_in_prose(request):
        if request.request_id == f"{RR}/detection_qa":
            return "My pick is the choice numbered one.\nThe effusion is visible."
        return right(request)

    _run(bundle, tmp_path / "run", ScriptedModel(first_turn_in_prose), _judge(),
         oracle_setting="none")
    case = _results(tmp_path / "run")[RR]
    assert case["detection_qa"]["status"] == "judged"
    assert case["detection_qa"]["correct"] is True and case["detection_qa"]["response"] == "1"
    assert case["contour_evaluation_qa"]["correct"] is True  # asked and answered after it
    assert len(case["chat_history"]) == 9  # every turn asked, the raw reply in the history
    assert case["chat_history"][0][2].startswith("My pick is the choice numbered one")


def test_a_judge_fault_is_no_answer_and_a_resume_rejudges_the_kept_reply(bundle, tmp_path):
    run_dir = tmp_path / "run"
    first = ScriptedModel(prose)
    plain_unreadable = sorted(r["request_id"] for r in _records(_plain(bundle, tmp_path))
                              .values() if r["status"] == "unparseable")
    target = plain_unreadable[0]
    failing = FakeJudge(fail={"judge:" + target})
    summary = _run(bundle, run_dir, first, _judge(failing))
    key_id, turn = target.split("/", 1)
    assert (key_id, turn) not in _records(run_dir)  # no answer recorded, not unparseable
    assert summary.unfinished.keys() == {key_id}
    (fault,) = read_jsonl(faults_path(run_dir))
    assert fault["request_id"] == target and fault["error"].startswith("judge:")
    assert fault[KEPT_REPLY_FIELD]["text"].startswith("My pick is")
    assert _results(run_dir)[key_id]["unfinished"]["next_turn"] == turn

    again = ScriptedModel(prose)
    judge = FakeJudge()
    resumed = _run(bundle, run_dir, again, _judge(judge))
    assert target not in {i for call in again.calls for i in call}  # the model is not asked
    assert judge.seen[0] == "judge:" + target  # the kept reply is judged first
    rec = _records(run_dir)[(key_id, turn)]
    assert rec["status"] == "judged" and rec["raw"] == fault[KEPT_REPLY_FIELD]["text"]
    assert rec["usage"] == fault[KEPT_REPLY_FIELD]["usage"]
    assert not resumed.unfinished


def _plain(bundle, tmp_path):
    run_dir = tmp_path / "plain"
    _run(bundle, run_dir, ScriptedModel(prose))
    return run_dir


def test_a_fatal_judge_error_stops_the_run_with_the_reply_kept(bundle, tmp_path):
    from chexpercept.errors import ProviderError

    class BadKey(FakeJudge):
        def generate(self, requests):
            raise ProviderError("HTTP 401: invalid API key")

    with pytest.raises(ProviderError, match="the judge failed: HTTP 401"):
        _run(bundle, tmp_path / "run", ScriptedModel(prose), _judge(BadKey()))
    faults = list(read_jsonl(faults_path(tmp_path / "run")))
    assert faults and all(KEPT_REPLY_FIELD in f for f in faults)
    assert all(r["status"] == "ok" for r in _records(tmp_path / "run").values())


@pytest.mark.parametrize("other", [None, "fake:other-judge"])
def test_resuming_with_another_judge_or_none_is_refused(bundle, tmp_path, other):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, ScriptedModel(prose), _judge())
    assert json.loads(run_manifest_path(run_dir).read_text())["judge"] == {
        "model": LABEL, "base_url": None, "prompt_sha256": JUDGE_PROMPT_SHA256,
        "audit_rate": 0.0}
    judge = None if other is None else Judge(FakeJudge(), other, audit_rate=0.0)
    with pytest.raises(ConfigError, match=r"'judge'.*--output-path"):
        _run(bundle, run_dir, ScriptedModel(prose), judge)


def test_a_run_without_a_judge_refuses_a_judge_on_resume(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, ScriptedModel(prose))
    assert "judge" not in json.loads(run_manifest_path(run_dir).read_text())
    with pytest.raises(ConfigError, match=r"'judge' \(run folder has None"):
        _run(bundle, run_dir, ScriptedModel(prose), _judge())


def test_the_audit_sample_is_reproducible_for_a_seed(bundle, tmp_path):
    def audited_turns(run_dir):
        return {k for k, r in _records(run_dir).items() if "judge_audit" in r}

    runs = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        _run(bundle, tmp_path / name, ScriptedModel(right), _judge(audit_rate=0.5, seed=seed),
             seed=seed)
        runs[name] = audited_turns(tmp_path / name)
    assert runs["a"] and runs["a"] == runs["b"] and runs["a"] != runs["c"]
    n_turns = len(_records(tmp_path / "a"))
    assert 0.2 < len(runs["a"]) / n_turns < 0.8
    for rec in _records(tmp_path / "a").values():
        assert rec["status"] == "ok" and rec["correct"] is True  # the audit changes nothing
        if "judge_audit" in rec:
            assert rec["judge_audit"] == {"answer": rec["answer"], "raw": rec["judge_audit"]["raw"],
                                          "agrees": True}
    # the draw is the documented one, per key_id and turn
    assert runs["a"] == {(k, t) for k, t in _records(tmp_path / "a")
                         if audited(7, 0.5, k, t)}


def test_an_audited_reply_the_judge_reads_otherwise_disagrees(bundle, tmp_path):
    class Contrarian(FakeJudge):
        def generate(self, requests):
            self.seen += [r.request_id for r in requests]
            return [Completion(text="Answer: none") for _ in requests]

    _run(bundle, tmp_path / "run", ScriptedModel(right), _judge(Contrarian(), audit_rate=1.0))
    records = _records(tmp_path / "run").values()
    assert all(r["judge_audit"] == {"answer": None, "raw": "Answer: none", "agrees": False}
               and r["status"] == "ok" for r in records)
    block = _results(tmp_path / "run")[RR]["detection_qa"]
    assert block["judge_audit"]["agrees"] is False and block["status"] == "ok"


def test_the_async_runner_judges_the_same_way(bundle, tmp_path):
    _run(bundle, tmp_path / "sync", ScriptedModel(prose), _judge())
    _run(bundle, tmp_path / "async", ScriptedModel(prose), _judge(),
         runner=run_evaluation_async)
    strip = ("latency_s", "batch_latency_s")
    a = {k: {f: v for f, v in r.items() if f not in strip}
         for k, r in _records(tmp_path / "sync").items()}
    b = {k: {f: v for f, v in r.items() if f not in strip}
         for k, r in _records(tmp_path / "async").items()}
    assert a == b and any(r["status"] == "judged" for r in a.values())


def test_read_verdict_is_strict_and_maps_displayed_numbers_back(bundle):
    case = validate_bundle(bundle, [RR])[0]
    detection = case.turns[0]
    assert read_verdict(detection, Completion("Answer: 2")).answer == (2,)
    for none in ("Answer: none", "**Answer: None**", "reasoning\nAnswer: none."):
        parsed = read_verdict(detection, Completion(none))
        assert parsed.answer is None and parsed.status == "unparseable"
    assert read_verdict(detection, Completion("Answer: 1 or 2")).status == "unparseable"
    assert read_verdict(detection, Completion("", status="refused")).status == "refused"
    from chexpercept.evaluation.option_order import apply_option_order

    shuffled = next(t for t in apply_option_order(case, "shuffled", 3).turns
                    if t.option_order is not None and t.option_order != (1, 2, 3, 4)
                    and not t.multi_select and t.num_options > 2)
    shown = 1
    assert read_verdict(shuffled, Completion(f"Answer: {shown}")).answer == \
        (shuffled.original(shown),)
    prompt = judge_prompt(shuffled, "my reply")
    assert f"1: {shuffled.option_texts[0]}" in prompt and "my reply" in prompt
    assert shuffled.question in prompt


def test_split_model_spec_and_create_judge():
    assert split_model_spec("openai:judge-model") == ("openai", "judge-model")
    assert split_model_spec("openai:org/model:tag") == ("openai", "org/model:tag")
    assert split_model_spec("stage03_fakes:ScriptedModel:m") == ("stage03_fakes:ScriptedModel",
                                                                 "m")
    for bad in ("openai", "nope:model", "openai:", ":model"):
        with pytest.raises(ConfigError, match="PROVIDER:MODEL"):
            split_model_spec(bad)
    judge = create_judge("openai:judge-model", seed=3, base_url="http://u:pw@127.0.0.1:9/v1",
                         options={"api_keys": None})
    params = judge.model.describe()["params"]  # greedy and seeded
    assert params["temperature"] == 0.0 and params["seed"] == judge_seed(3) != 3
    assert judge.identity()["base_url"] == \
        "http://***@127.0.0.1:9/v1" and "pw" not in json.dumps(judge.identity())
    assert judge.label == "openai:judge-model"
    with pytest.raises(ConfigError, match="takes no base URL"):
        create_judge("dummy:baseline", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match=r"in \[0, 1\]"):
        create_judge("dummy:baseline", audit_rate=1.5)


def test_kept_replies_answer_once_then_ask_the_model():
    inner = ScriptedModel(lambda r: "Answer: 1")
    inner.answers = {"a/t": 1, "b/t": 1}
    kept = KeptReplies(inner, {"a/t": Completion("kept")})
    reqs = [TurnRequest(messages=(), request_id=i) for i in ("a/t", "b/t")]
    assert [c.text for c in kept.generate(reqs)] == ["kept", "Answer: 1"]
    assert inner.calls == [["b/t"]]
    assert [c.text for c in kept.generate(reqs[:1])] == ["Answer: 1"]  # once only


def test_judge_settings_without_a_judge_or_with_ray_are_refused():
    from chexpercept.evaluation.api import check_judge
    from chexpercept.evaluation.replicas import RayReplicas

    check_judge(None, None, 0.1, None)  # the default: nothing to check
    check_judge("openai:m", "http://127.0.0.1:1/v1", 0.0, None)
    with pytest.raises(ConfigError, match="need --judge"):
        check_judge(None, "http://127.0.0.1:1/v1", 0.1, None)
    with pytest.raises(ConfigError, match="need --judge"):
        check_judge(None, None, 0.5, None)
    with pytest.raises(ConfigError, match=r"in \[0, 1\]"):
        check_judge("openai:m", None, -0.1, None)
    with pytest.raises(ConfigError, match="Ray replicas"):
        check_judge("openai:m", None, 0.1, RayReplicas())


def test_the_cli_refuses_a_judge_flag_without_a_judge(tmp_path, capsys):
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "src" / "03_eval_vlm_on_chexpercept" / \
        "00_eval.py"
    main = runpy.run_path(str(script), run_name="eval_under_test")["main"]
    bench = write_bundle(tmp_path / "bench")
    with pytest.raises(ConfigError, match="need --judge"):
        main(["--benchmark-dir", str(bench), "--provider", "dummy", "--output-path",
              str(tmp_path / "out"), "--judge-base-url", "http://127.0.0.1:1/v1"])
    with pytest.raises(SystemExit):
        main(["--benchmark-dir", str(bench), "--provider", "dummy", "--judge-audit-rate", "2"])
    assert "must be in [0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
