"""The inspect_ai task asks the same dialogue as Stage 03 and scores it the same way.

The same scripted replies (a loopback OpenAI-compatible server whose reply is a function of the
conversation's text) go through inspect's ``openai-api/local/NAME`` provider with a base URL
(``inspect_ai.eval`` in-process) and through ``00_eval.py --provider openai --base-url``; the
per-case, per-stage correctness, the turns asked and the parses must agree under ``none`` and
``implicit`` (and under ``shuffled`` and ``circular`` option orders), and the eval log
converted to a run folder must give Stage 03's ``all_results.json`` and manifest protocol; so
must ``samples=2`` with a temperature (both sample files) and ``option_probs``.
No network: inspect's log dir is in tmp_path and nothing phones home
(no telemetry or api-key hook; the openai-api provider counts no tokens with tiktoken).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("inspect_ai")

from chexpercept.errors import InputError, SchemaError  # noqa: E402
from chexpercept.evaluation.cases import load_bundle, validate_bundle  # noqa: E402
from chexpercept.evaluation.dialogue import Dialogue  # noqa: E402
from chexpercept.evaluation.replay import (  # noqa: E402
    RecordedModel,
    RecordedReply,
    answer_turn,
    write_recorded_run,
)
from chexpercept.integrations.inspect_log import convert_inspect_log  # noqa: E402
from utils.llm.base import FAULT  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TASK_FILE = "src/chexpercept/integrations/inspect_task.py"
MODEL = "loopback-vlm"
#: The scripted replies: parseable right or wrong answers, a multi-select, a bold declaration,
#: an unparseable hedge (docs/parsing.md).
REPLIES = ("Answer: 1", "Answer: 2", "The findings fit both.\nAnswer: 1,2", "**Answer:** 3",
           "I cannot tell from this image.", "Answer: 4", "Answer: 2")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


loopback = _load("loopback_for_inspect", REPO / "tests" / "llm" / "loopback.py")
stage03_bundle = _load("stage03_bundle_for_inspect",
                       REPO / "tests" / "evaluation" / "stage03_bundle.py")


def conversation_texts(body: dict[str, Any]) -> list[str]:
    """The texts of a chat request's messages, in order (roles and images left out)."""
    texts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.append("".join(p.get("text", "") for p in content or ()
                                 if p.get("type") == "text"))
    return texts


def scripted_reply(body: dict[str, Any]) -> str:
    """A reply chosen by the conversation's text (so arrival order does not matter)."""
    digest = hashlib.sha256("\x1e".join(conversation_texts(body)).encode("utf-8")).digest()
    return REPLIES[int.from_bytes(digest[:4], "big") % len(REPLIES)]


@pytest.fixture
def offline_inspect(tmp_path, monkeypatch):
    """inspect's environment for the test: local key, logs in tmp_path, no hooks."""
    for var in ("INSPECT_TELEMETRY", "INSPECT_API_KEY_OVERRIDE", "INSPECT_EVAL_MODEL",
                "LOCAL_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LOCAL_API_KEY", "sk-local-test")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test")
    monkeypatch.setenv("INSPECT_LOG_DIR", str(tmp_path / "inspect_logs"))
    monkeypatch.setenv("INSPECT_DISPLAY", "none")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg_data"))
    monkeypatch.chdir(REPO)  # the task file as docs/integrations.md gives it
    return tmp_path


def run_inspect(server, bench: Path, oracle_setting: str, log_dir: Path | None, *,
                task_args: dict[str, Any] | None = None, **kwargs: Any):
    """``inspect eval`` of the task file against the loopback server; returns the log.

    ``log_dir`` None leaves inspect's own default (``INSPECT_LOG_DIR``, else ``./logs``).
    """
    from inspect_ai import eval as inspect_eval

    logs = inspect_eval(TASK_FILE, model=f"openai-api/local/{MODEL}",
                        model_base_url=server.base_url,
                        task_args={"benchmark_dir": str(bench),
                                   "oracle_setting": oracle_setting, **(task_args or {})},
                        **({} if log_dir is None else {"log_dir": str(log_dir)}),
                        display="none", **kwargs)
    assert len(logs) == 1
    return logs[0]


def run_stage03(server, bench: Path, oracle_setting: str, out: Path,
                extra: tuple[str, ...] = ()) -> Path:
    """``00_eval.py --provider openai --base-url`` against the loopback server; its run dir."""
    script = runpy.run_path(str(REPO / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"))
    argv = ["--provider", "openai", "--model", MODEL, "--base-url", server.base_url,
            "--benchmark-dir", str(bench), "--output-path", str(out), "--oracle_setting",
            oracle_setting, "--no-progress", "--max-retries", "0", *extra]
    assert script["main"](argv) == 0
    # the folder's name carries a non-default option order, K and seed ("Run folder")
    (run_dir,) = [p / f"oracle_{oracle_setting}" for p in out.iterdir()
                  if p.name.startswith(f"openai_{MODEL}")]
    return run_dir


def stage_flags(result: dict[str, Any]) -> dict[str, bool]:
    return {s: block["correct"] for s in ("detection_qa", "contour_evaluation_qa",
                                         "contour_revision_qa", "attribute_extraction_qa")
            if (block := result[s])}


def without_usage(results: dict[str, Any]) -> dict[str, Any]:
    return {k: {f: v for f, v in r.items() if f != "token_usage"} for k, r in results.items()}


#: Manifest fields that name a run's protocol (identity fields; docs/evaluation_protocol.md).
PROTOCOL_FIELDS = ("oracle_setting", "option_order", "seed", "option_probs", "sampling",
                   "benchmark_json_sha256", "system_prompt_sha256", "protocol_version")


def protocol(run_dir: Path) -> dict[str, Any]:
    manifest = json.loads((run_dir / "run_manifest.json").read_text(encoding="utf-8"))
    return {f: manifest.get(f) for f in PROTOCOL_FIELDS}


@pytest.mark.parametrize("oracle_setting, option_order", [
    ("none", "release"), ("implicit", "release"), ("implicit", "shuffled"),
    ("none", "circular")])
def test_inspect_and_stage03_agree_on_the_same_replies(offline_inspect, oracle_setting,
                                                       option_order):
    tmp = offline_inspect
    bench = stage03_bundle.write_bundle(tmp / "bench")
    with loopback.LoopbackServer(answer=scripted_reply) as server:
        log = run_inspect(server, bench, oracle_setting, tmp / "logs",
                          task_args={"option_order": option_order, "seed": 3})
        inspect_bodies = [s.body for s in server.chat_requests()]
        run_dir = run_stage03(server, bench, oracle_setting, tmp / "out",
                              ("--option-order", option_order, "--seed", "3"))
        stage03_bodies = [s.body for s in server.chat_requests()[len(inspect_bodies):]]

    assert log.status == "success", log.error
    results = json.loads((run_dir / "all_results.json").read_text(encoding="utf-8"))
    by_inspect = {s.id: s.scores["chexpercept_scorer"].metadata for s in log.samples}
    assert set(by_inspect) == set(results) == set(stage03_bundle.CASES)
    # the same conversations were sent, turn for turn (texts; images are the same files)
    assert sorted(map(conversation_texts, inspect_bodies)) == \
        sorted(map(conversation_texts, stage03_bodies))
    records = [json.loads(line) for line in
               (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    for key_id, result in results.items():
        meta = by_inspect[key_id]
        assert meta["stages"] == stage_flags(result), key_id
        value = log.samples[[s.id for s in log.samples].index(key_id)].scores[
            "chexpercept_scorer"].value
        assert value == ("C" if all(meta["stages"].values()) else "I")
        turns = {r["turn"]: {"parsed": r["parsed"], "status": r["status"],
                             "correct": r["correct"]} for r in records if r["key_id"] == key_id}
        assert meta["turns"] == turns, key_id
    flags = [c for r in results.values() for c in stage_flags(r).values()]
    assert any(flags) and not all(flags)  # the script gives right and wrong answers
    if oracle_setting == "implicit":  # an oracle patch happened, and inspect sent it too
        assert any(len(entry) == 4 for r in results.values() for entry in r["chat_history"])

    converted = convert_inspect_log(log.location, tmp / "converted")
    # named as Stage 03 names the same protocol's folder
    name = f"inspect_openai-api--local--{MODEL}" + run_dir.parent.name.removeprefix(
        f"openai_{MODEL}")
    assert converted.all_results_path == (tmp / "converted" / name / f"oracle_{oracle_setting}"
                                          / "all_results.json")
    ours = json.loads(converted.all_results_path.read_text(encoding="utf-8"))
    assert list(ours) == list(results)  # benchmark order
    assert without_usage(ours) == without_usage(results)
    assert converted.unfinished == {}
    # the converted run names the protocol as Stage 03's manifest does (Stage 04 reads it)
    assert protocol(converted.run_dir) == protocol(run_dir)
    if option_order == "circular":  # the rotations were asked and scored, in both
        assert any(block.get("circular_correct") is not None for r in ours.values()
                   for block in r.values() if isinstance(block, dict))
    if option_order == "shuffled":  # the options were shown reordered, in both
        assert any(block.get("option_order") for r in ours.values()
                   for block in r.values() if isinstance(block, dict))


def test_a_turn_without_answer_fails_its_sample_and_is_written_unfinished(offline_inspect,
                                                                           capsys):
    tmp = offline_inspect
    bench = stage03_bundle.write_bundle(tmp / "bench")

    def respond(body: dict[str, Any]) -> dict[str, Any] | None:
        # the opacity case's third turn can never succeed (400: not retried)
        texts = conversation_texts(body)
        if len(texts) == 6 and "opacity" in texts[1]:
            return {"status": 400, "error_message": "scripted bad request"}
        return None

    with loopback.LoopbackServer(answer=scripted_reply, respond=respond) as server:
        log = run_inspect(server, bench, "implicit", tmp / "logs", fail_on_error=False)
    failed = {s.id for s in log.samples if s.error is not None}
    assert failed == {"opacity_s50000007_positive_0"}
    scored = {s.id for s in log.samples if s.scores}
    assert "opacity_s50000007_positive_0" not in scored  # a fault is never scored

    script = runpy.run_path(str(REPO / "src" / "03_eval_vlm_on_chexpercept" /
                                "02_import_inspect_log.py"))
    out = tmp / "converted"
    assert script["main"](["--log", log.location, "--output-path", str(out),
                           "--no-progress"]) == 3  # unfinished, as 00_eval.py says it
    run_dir = out / f"inspect_openai-api--local--{MODEL}" / "oracle_implicit"
    results = json.loads((run_dir / "all_results.json").read_text(encoding="utf-8"))
    entry = results["opacity_s50000007_positive_0"]
    assert entry["unfinished"]["turns_answered"] == 2
    assert "scripted bad request" in entry["unfinished"]["reason"]
    assert all("unfinished" not in r for k, r in results.items() if k not in failed)
    faults = (run_dir / "faults.jsonl").read_text(encoding="utf-8")
    assert "opacity_s50000007_positive_0" in faults
    manifest = json.loads((run_dir / "run_manifest.json").read_text(encoding="utf-8"))
    assert manifest["provider"] == "inspect" and manifest["oracle_setting"] == "implicit"


def _first_case(tmp_path: Path):
    bench = stage03_bundle.write_bundle(tmp_path / "bench")
    bundle = load_bundle(bench)
    return bench, validate_bundle(bundle, ["effusion_s50000001_positive_0"])[0]


def test_a_fault_is_never_scored_and_a_reply_must_answer_its_turn(tmp_path):
    _, case = _first_case(tmp_path)
    dialogue = Dialogue(case, "implicit")
    prepared = dialogue.prepare()
    rid = prepared.request.request_id
    with pytest.raises(ValueError, match="a fault is not an answer"):
        answer_turn(dialogue, prepared, RecordedReply(rid, "", status=FAULT, error="timeout"))
    with pytest.raises(ValueError, match="given for"):
        answer_turn(dialogue, prepared, RecordedReply("other/detection_qa", "Answer: 1"))
    assert dialogue.outcomes == {}
    outcome = answer_turn(dialogue, prepared, RecordedReply(rid, "Answer: 1"))
    assert outcome.parsed.status == "ok" and dialogue.history_idx == {"detection_qa": 0}


def test_recorded_model_refuses_replies_to_another_question(tmp_path):
    _, case = _first_case(tmp_path)
    request = Dialogue(case, "none").prepare().request
    model = RecordedModel(MODEL, {request.request_id: RecordedReply(
        request.request_id, "Answer: 1", user_text="Is there any finding of something else?")},
        source="a test log", label="inspect")
    with pytest.raises(SchemaError, match="another question"):
        model.generate([request])
    missing = RecordedModel(MODEL, {}, source="a test log", label="inspect",
                            errors={case.key_id: "sample timed out"})
    [completion] = missing.generate([request])
    assert completion.status == FAULT and "sample timed out" in completion.error


def test_only_the_task_module_imports_inspect_ai():
    code = (
        "import importlib, pkgutil, sys\n"
        "import chexpercept, utils\n"
        "for pkg in (chexpercept, utils):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if m.name != 'chexpercept.integrations.inspect_task':\n"
        "            importlib.import_module(m.name)\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'inspect_ai']\n"
        "print(loaded[:5])\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def test_inspect_outputs_map_to_stage03_statuses_and_token_counts(tmp_path):
    from inspect_ai.model import ChatMessageAssistant, ContentText, ModelOutput, ModelUsage

    from chexpercept.integrations.inspect_task import TurnFault, recorded_reply

    _, case = _first_case(tmp_path)
    prepared = Dialogue(case, "none").prepare()

    def output(content, stop="stop", **kw):
        return ModelOutput.from_content(MODEL, content, stop_reason=stop, **kw)

    usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=45,
                       input_tokens_cache_read=30, reasoning_tokens=2)
    ok = output("Answer: 1")
    ok.usage = usage
    reply = recorded_reply(ok, prepared)
    assert (reply.status, reply.finish_reason, reply.user_text) == ("ok", "stop", prepared.text)
    assert dict(reply.usage) == {"input_tokens": 40, "cached_input_tokens": 30,
                                 "output_tokens": 5, "thinking_tokens": 2}
    cut = recorded_reply(output("Let me think", stop="max_tokens"), prepared)
    assert cut.finish_reason == "length"
    fresh = Dialogue(case, "none")
    assert answer_turn(fresh, fresh.prepare(), cut).parsed.status == "truncated"
    refusal = ModelOutput.from_message(ChatMessageAssistant(
        content=[ContentText(text="I can't help with that.", refusal=True)]))
    assert recorded_reply(refusal, prepared).status == "refused"
    assert recorded_reply(output("", stop="content_filter"), prepared).status == "blocked"
    with pytest.raises(TurnFault, match="no answer"):
        recorded_reply(output("", error="connection reset"), prepared)


@pytest.mark.parametrize("name, content", [
    ("cut.eval", b"PK\x03\x04 a zip cut short"),  # an .eval log truncated mid-write
    ("cut.json", b'{"version": 2, "eval": {'),  # a .json log truncated
    ("other.json", b'{"foo": 1}'),  # JSON, but no inspect log
])
def test_an_unreadable_log_is_an_input_error_naming_the_file(tmp_path, name, content):
    # before: inspect's ValueError / pydantic's ValidationError escaped as a traceback (exit 1)
    log = tmp_path / name
    log.write_bytes(content)
    with pytest.raises(InputError, match=f"{name}: not a readable inspect_ai eval log"):
        convert_inspect_log(log, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("data", [
    {"request_id": "k/detection_qa", "status": "ok"},  # no text: once scored as ''
    {"request_id": "k/detection_qa", "text": None, "status": "ok"},
    ["k/detection_qa", "Answer: 1"],  # not a dict: once an AttributeError traceback
])
def test_a_recorded_reply_without_text_is_a_schema_error(data):
    with pytest.raises(SchemaError, match="log.eval, sample k: not a recorded reply"):
        RecordedReply.from_json(data, "log.eval, sample k")
    good = RecordedReply("k/detection_qa", "Answer: 1")
    assert RecordedReply.from_json(good.to_json(), "x").to_json() == good.to_json()


def test_recorded_run_refuses_two_replies_to_one_turn_and_replies_to_turns_never_asked(
        tmp_path):
    # before: the later of two replies silently replaced the earlier one, and a reply to a turn
    # the case does not have was ignored
    bench, case = _first_case(tmp_path)
    rid = f"{case.key_id}/detection_qa"
    kwargs = {"key_ids": [case.key_id], "output_path": tmp_path / "runs", "provider": "inspect",
              "model": MODEL, "oracle_setting": "none", "source": "a test log"}
    with pytest.raises(SchemaError, match=f"two replies recorded for {rid}"):
        write_recorded_run(bench, [RecordedReply(rid, "Answer: 1"),
                                   RecordedReply(rid, "Answer: 2")], **kwargs)
    with pytest.raises(SchemaError, match=f"turns Stage 03 does not ask.*{case.key_id}/bogus"):
        write_recorded_run(bench, [RecordedReply(rid, "Answer: 1"),
                                   RecordedReply(f"{case.key_id}/bogus", "Answer: 1")], **kwargs)
    assert not (tmp_path / "runs").exists()
    summary = write_recorded_run(bench, [RecordedReply(rid, "Answer: 1")], **kwargs)
    assert list(summary.unfinished) == [case.key_id]  # a dialogue cut short: unfinished


def test_a_relative_benchmark_dir_is_read_from_where_inspect_was_started(tmp_path, monkeypatch):
    """inspect runs the task from the task file's folder; the documented relative
    ``-T benchmark_dir=outputs/sample_test/chexpercept`` is read from the shell's PWD
    (tests/e2e/test_documented_commands.py runs that command as printed)."""
    from chexpercept.integrations.inspect_task import resolve_benchmark_dir

    bench = stage03_bundle.write_bundle(tmp_path / "outputs" / "bench")
    monkeypatch.chdir(REPO / "src" / "chexpercept" / "integrations")  # where inspect runs it
    monkeypatch.setenv("PWD", str(tmp_path))
    assert resolve_benchmark_dir("outputs/bench") == bench
    assert resolve_benchmark_dir(str(bench)) == bench  # absolute: as given
    with pytest.raises(InputError, match=r"no folder .*outputs/missing.*give an absolute path"):
        resolve_benchmark_dir("outputs/missing")
    monkeypatch.delenv("PWD")
    with pytest.raises(InputError, match="PWD is not set.*give an absolute path"):
        resolve_benchmark_dir("outputs/bench")


def text_logprobs(body: dict[str, Any], text: str) -> list[dict[str, Any]]:
    """The loopback's log-probabilities, drawn from the conversation's texts only.

    inspect adds ``"detail": "auto"`` to each image, which the default draw (the last user
    message's JSON) would see; the texts are what both clients send alike.
    """
    user = {"role": "user", "content": "\x1e".join(conversation_texts(body))}
    return loopback.default_logprobs({"messages": [user],
                                      "top_logprobs": body.get("top_logprobs")}, text)


def test_two_samples_with_temperature_give_stage03s_two_sample_files(offline_inspect):
    from chexpercept.rng import sample_seed

    tmp = offline_inspect
    bench = stage03_bundle.write_bundle(tmp / "bench")
    with loopback.LoopbackServer(answer=scripted_reply) as server:
        log = run_inspect(server, bench, "implicit", tmp / "logs",
                          task_args={"samples": 2, "temperature": 0.7, "seed": 3},
                          max_tokens=64)
        inspect_bodies = [s.body for s in server.chat_requests()]
        run_dir = run_stage03(server, bench, "implicit", tmp / "out",
                              ("--samples", "2", "--temperature", "0.7", "--seed", "3"))
    assert log.status == "success", log.error
    assert len(log.samples) == 2 * len(stage03_bundle.CASES)
    # every request carried the temperature and its sample's own seed (chexpercept.rng)
    assert {b["temperature"] for b in inspect_bodies} == {0.7}
    assert {b["seed"] for b in inspect_bodies} == {sample_seed(3, 0), sample_seed(3, 1)}

    converted = convert_inspect_log(log.location, tmp / "converted")
    ours_dir = converted.run_dir
    for name in ("all_results.json", "all_results_sample_1.json"):
        ours = json.loads((ours_dir / name).read_text(encoding="utf-8"))
        theirs = json.loads((run_dir / name).read_text(encoding="utf-8"))
        assert without_usage(ours) == without_usage(theirs), name
    assert not (ours_dir / "all_results_sample_2.json").exists()
    assert protocol(ours_dir) == protocol(run_dir)
    manifest = json.loads((ours_dir / "run_manifest.json").read_text(encoding="utf-8"))
    assert manifest["sampling"] == {"samples": 2, "seeds": [sample_seed(3, 0),
                                                            sample_seed(3, 1)]}
    assert manifest["provider_settings"]["temperature"] == 0.7
    # inspect's own flags are named too, as Stage 03's provider records its settings
    assert manifest["provider_settings"]["inspect_generate_config"]["max_tokens"] == 64
    # so Stage 04 labels the converted run with its protocol, as it labels Stage 03's
    from chexpercept.analysis.runs import protocol_fields
    theirs = json.loads((run_dir / "run_manifest.json").read_text(encoding="utf-8"))
    assert dict(protocol_fields(manifest)) == dict(protocol_fields(theirs)) == {
        "samples": "2", "temperature": "0.7", "seed": "3"}


def test_option_probs_are_recorded_as_stage03_records_them(offline_inspect):
    tmp = offline_inspect
    bench = stage03_bundle.write_bundle(tmp / "bench")
    with loopback.LoopbackServer(answer=scripted_reply, logprobs=text_logprobs) as server:
        log = run_inspect(server, bench, "none", tmp / "logs",
                          task_args={"option_probs": True, "option_order": "shuffled"})
        inspect_bodies = [s.body for s in server.chat_requests()]
        run_dir = run_stage03(server, bench, "none", tmp / "out",
                              ("--option-probs", "--option-order", "shuffled"))
    assert log.status == "success", log.error
    assert all(b["logprobs"] is True and b["top_logprobs"] == 20 for b in inspect_bodies)
    converted = convert_inspect_log(log.location, tmp / "converted")
    ours = json.loads(converted.all_results_path.read_text(encoding="utf-8"))
    theirs = json.loads((run_dir / "all_results.json").read_text(encoding="utf-8"))
    assert without_usage(ours) == without_usage(theirs)
    statuses = [json.loads(line).get("option_probs", {}).get("status") for line in
                (converted.run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert "ok" in statuses and None not in statuses
    assert protocol(converted.run_dir) == protocol(run_dir)
    assert protocol(run_dir)["option_probs"] is True


def test_what_the_task_cannot_honour_is_refused(tmp_path):
    from chexpercept.errors import ConfigError
    from chexpercept.integrations.inspect_task import check_provider, chexpercept

    bench = str(stage03_bundle.write_bundle(tmp_path / "bench"))
    with pytest.raises(ConfigError, match="--option-order must be one of"):
        chexpercept(bench, option_order="reversed")
    with pytest.raises(ConfigError, match="samples=2 needs temperature"):
        chexpercept(bench, samples=2)
    with pytest.raises(ConfigError, match="samples=2 needs temperature"):
        chexpercept(bench, samples=2, temperature=0)
    with pytest.raises(ConfigError, match="samples must be an integer >= 1"):
        chexpercept(bench, samples=0)
    with pytest.raises(ConfigError, match="option_probs must be true or false"):
        chexpercept(bench, option_probs="maybe")
    task = chexpercept(bench, samples=2, temperature=0.7)
    assert len(task.dataset) == 2 * len(stage03_bundle.CASES)
    # per-request seeds and log-probabilities: only where inspect's provider sends them
    with pytest.raises(ConfigError, match="'anthropic' provider sends no seed per request"):
        check_provider("anthropic/claude-sonnet-4-5", 2, False)
    with pytest.raises(ConfigError, match="'anthropic' provider cannot return token log-prob"):
        check_provider("anthropic/claude-sonnet-4-5", 1, True)
    check_provider("openai-api/local/x", 2, True)
    check_provider("anthropic/claude-sonnet-4-5", 1, False)


def test_the_documented_inspect_commands_log_under_outputs(tmp_path):
    """inspect's CLI defaults ``--log-dir`` to ``./logs`` (or ``INSPECT_LOG_DIR``) before any
    task code runs, so the documented commands pass ``--log-dir outputs/inspect_logs``, a
    git-ignored folder; ``logs/`` is git-ignored too for a command that leaves it out."""
    for doc in (str(Path("docs") / "integrations.md"),):
        text = (REPO / doc).read_text(encoding="utf-8")
        blocks = [b for b in text.split("```") if "inspect eval " in b]
        assert blocks and all("--log-dir outputs/inspect_logs" in b for b in blocks), doc
    ignored = subprocess.run(["git", "check-ignore", "outputs/inspect_logs/x.eval",
                              "logs/x.eval"], cwd=REPO, capture_output=True, text=True)
    assert ignored.stdout.split() == ["outputs/inspect_logs/x.eval", "logs/x.eval"]


@pytest.mark.parametrize("task_args, message", [
    ({"samples": 2, "temperature": 0.7}, "'mockllm' provider sends no seed per request"),
    ({"option_probs": True}, "'mockllm' provider cannot return token log-probabilities"),
])
def test_a_provider_that_cannot_honour_the_arguments_fails_the_eval(offline_inspect,
                                                                    task_args, message):
    # inspect's built-in mockllm stands for a provider without seeds or logprobs (e.g.
    # anthropic): the eval stops with the refusal instead of ignoring the argument
    from inspect_ai import eval as inspect_eval

    tmp = offline_inspect
    bench = stage03_bundle.write_bundle(tmp / "bench")
    [log] = inspect_eval(TASK_FILE, model="mockllm/model", log_dir=str(tmp / "logs"),
                         task_args={"benchmark_dir": str(bench), **task_args},
                         display="none")
    assert log.status == "error"
    assert message in log.error.message


def test_another_log_of_the_same_name_is_refused_the_same_log_converts_again(offline_inspect):
    # issue 29: a converted run's identity was the log's file name only
    from inspect_ai.log import read_eval_log, write_eval_log

    from chexpercept.errors import ConfigError

    tmp = offline_inspect
    bench = stage03_bundle.write_bundle(tmp / "bench")
    with loopback.LoopbackServer(answer=scripted_reply) as server:
        log = run_inspect(server, bench, "none", tmp / "logs", task_args={"limit": 2})
    first = tmp / "a" / "run.json"
    first.parent.mkdir()
    write_eval_log(read_eval_log(log.location), str(first), format="json")
    second = tmp / "b" / "run.json"  # the same samples and replies, other bytes
    second.parent.mkdir()
    second.write_text(json.dumps(json.loads(first.read_text(encoding="utf-8")), indent=1),
                      encoding="utf-8")
    assert first.read_bytes() != second.read_bytes()
    summary = convert_inspect_log(first, tmp / "out")
    before = {f: (summary.run_dir / f).read_bytes() for f in ("all_results.json", "records.jsonl")}
    convert_inspect_log(first, tmp / "out")  # the same log again: nothing changes
    assert {f: (summary.run_dir / f).read_bytes() for f in before} == before
    with pytest.raises(ConfigError, match=r"'provider_settings'[\s\S]*source_sha256[\s\S]*"
                                          r"give it another --output-path"):
        convert_inspect_log(second, tmp / "out")
    assert {f: (summary.run_dir / f).read_bytes() for f in before} == before
