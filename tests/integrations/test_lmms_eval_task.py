"""The lmms-eval task asks Stage 03's dialogue and scores each case as Stage 03 does.

lmms-eval's own evaluator (``simple_evaluate``, in-process, the task folder through a
``TaskManager`` include path) runs the ``chexpercept_*`` tasks on the synthetic Stage 03 bundle
with two stand-in model classes registered here: a simple one (one text and an image list per
round, as lmms-eval's Qwen-VL / LLaVA classes take them) and a chat one (messages per round, as
its vLLM chat class). Both answer scripted replies keyed by ``<key_id>/<turn>``; the same
replies go through Stage 03's runner (``run_evaluation`` with a scripted provider). No network:
the datasets cache is in tmp_path and the task reads the bundle from disk.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lmms_eval")

import lmms_eval.evaluator  # noqa: E402
from lmms_eval.api.model import lmms  # noqa: E402
from lmms_eval.api.registry import register_model  # noqa: E402
from lmms_eval.evaluator import simple_evaluate  # noqa: E402
from lmms_eval.loggers import EvaluationTracker  # noqa: E402
from lmms_eval.tasks import TaskManager  # noqa: E402

from chexpercept.errors import ConfigError, SchemaError  # noqa: E402
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation  # noqa: E402
from chexpercept.evaluation.cases import validate_bundle  # noqa: E402
from chexpercept.evaluation.dialogue import SYSTEM_PROMPT, request_id  # noqa: E402
from chexpercept.integrations import lmms_eval_task  # noqa: E402
from chexpercept.integrations.lmms_eval_samples import read_lmms_samples  # noqa: E402
from chexpercept.layouts import all_results_path  # noqa: E402
from chexpercept_cli.import_lmms_samples import main as import_lmms  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TASKS_DIR = REPO / "src" / "chexpercept" / "integrations" / "lmms_eval_tasks"
#: Scripted replies: right or wrong answers, a multi-select, a bold declaration, an unparseable
#: hedge (docs/parsing.md); which one a turn gets is a function of its request id.
REPLIES = ("Answer: 1", "Answer: 2", "The findings fit both.\nAnswer: 1,2", "**Answer:** 3",
           "I cannot tell from this image.", "Answer: 4", "Looking at the image.\nAnswer: 2")
SECTIONS = {"detection": "detection_qa", "contour_evaluation": "contour_evaluation_qa",
            "contour_revision": "contour_revision_qa",
            "attribute_extraction": "attribute_extraction_qa"}


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


stage03_bundle = _load("stage03_bundle_for_lmms", REPO / "tests" / "evaluation" /
                       "stage03_bundle.py")
stage03_fakes = _load("stage03_fakes_for_lmms", REPO / "tests" / "evaluation" /
                      "stage03_fakes.py")


# lmms-eval 0.7.3 patches filelock's private ``filelock._api`` before every run, a module
# filelock 4 no longer has (this venv has filelock 4, which torch and datasets accept). The patch
# only guards nested ``load_dataset`` calls, which this task never makes (its stub is a local
# JSON file), so it is marked done here; the ``lmms`` extra pins filelock<4 for a real run
# (docs/integrations.md, "lmms-eval").
lmms_eval.evaluator._enable_reentrant_filelocks._patched = True


def scripted(rid: str) -> str:
    """The reply to request ``rid`` (the same in both harnesses)."""
    return REPLIES[sum(map(ord, rid)) % len(REPLIES)]


class _Scripted(lmms):
    """Answers each round with :func:`scripted` (or ``overrides``); records what it was sent."""

    def __init__(self, overrides: dict[str, str] | None = None) -> None:
        super().__init__()
        self.overrides = overrides or {}
        self.sent: dict[str, Any] = {}  # request id -> what the round carried

    def reply(self, doc: dict[str, Any], round_idx: int, sent: Any) -> str:
        case = lmms_eval_task.case_of(doc)
        rid = request_id(case.key_id, case.turns[round_idx].spec.name)
        self.sent[rid] = sent
        return self.overrides.get(rid, scripted(rid))

    def loglikelihood(self, requests):
        raise NotImplementedError

    def generate_until(self, requests):
        raise NotImplementedError


@register_model("chexpercept_scripted_simple")
class ScriptedSimple(_Scripted):
    """A simple model class: one text and a list of images per round (lmms-eval's protocol)."""

    is_simple = True

    def generate_until_multi_round(self, requests):
        out = []
        for request in requests:
            ctx, _gen, doc_to_visual, doc_to_text, doc_id, task, split = request.args
            doc = self.task_dict[task][split][doc_id]
            visuals, text, outputs, info = doc_to_visual(doc), ctx, [], None
            while True:
                outputs.append(self.reply(doc, len(outputs), (text, visuals)))
                visuals, text, terminal, outputs, info = doc_to_text(
                    doc, previous_output=outputs, round_idx=len(outputs),
                    previous_round_info=info)
                if terminal:
                    break
            out.append(list(outputs))
        return out


@register_model("chexpercept_scripted_chat")
class ScriptedChat(_Scripted):
    """A chat model class: messages per round (as lmms-eval's vLLM chat class asks them)."""

    is_simple = False

    def generate_until_multi_round(self, requests):
        out = []
        for request in requests:
            _ctx, doc_to_messages, _gen, doc_id, task, split = request.arguments
            doc = self.task_dict[task][split][doc_id]
            messages, outputs, info = doc_to_messages(doc), [], None
            while True:
                outputs.append(self.reply(doc, len(outputs), messages))
                messages, terminal, _prev, info = doc_to_messages(
                    doc, round_idx=len(outputs), previous_output=list(outputs),
                    previous_round_info=info)
                if terminal:
                    break
            out.append(outputs)
        return out


@pytest.fixture()
def bench(tmp_path, monkeypatch):
    root = stage03_bundle.write_bundle(tmp_path / "bench")
    monkeypatch.setenv(lmms_eval_task.BENCHMARK_DIR_ENV, str(root))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_datasets"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def run_lmms(model: _Scripted, setting: str, samples_dir: Path | None = None):
    """Run ``chexpercept_<setting>`` through lmms-eval; key_id -> its logged sample, results.

    With ``samples_dir`` the samples file is written there as ``lmms-eval --log_samples
    --output_path`` writes it (lmms-eval's ``EvaluationTracker``).
    """
    task = f"chexpercept_{setting}"
    manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False)
    tracker = None if samples_dir is None else EvaluationTracker(output_path=str(samples_dir))
    out = simple_evaluate(model=model, tasks=[task], task_manager=manager, bootstrap_iters=0,
                          log_samples=True, batch_size=1, evaluation_tracker=tracker)
    logged = out.pop("samples")
    samples = {s["doc"]["key_id"]: s for s in copy.deepcopy(logged[task])}
    if tracker is not None:  # as lmms-eval's CLI saves them
        tracker.save_results_aggregated(results=out, samples=logged,
                                        datetime_str="2026-12-03T10-00-00")
        tracker.save_results_samples(task_name=task, samples=logged[task])
    return samples, out["results"][task]


def run_stage03(root: Path, run_dir: Path, setting: str, overrides=None, answer=None):
    """The same replies through Stage 03's runner; all_results.json and the requests sent."""
    overrides = overrides or {}
    model = stage03_fakes.ScriptedModel(answer or (
        lambda request: overrides.get(request.request_id, scripted(request.request_id))))
    bundle = load_bundle(root)
    run_evaluation(bundle, validate_bundle(bundle), model,
                   EvalSettings("scripted", "m", oracle_setting=setting), run_dir)
    requests = {r.request_id: r for batch in model.batches for r in batch}
    return json.loads(all_results_path(run_dir).read_text(encoding="utf-8")), requests


@pytest.mark.parametrize("setting", ["none", "implicit", "explicit"])
@pytest.mark.parametrize("model_class", [ScriptedSimple, ScriptedChat])
def test_scores_equal_stage03_for_the_same_replies(bench, tmp_path, setting, model_class):
    samples, _ = run_lmms(model_class(), setting)
    results, _ = run_stage03(bench, tmp_path / "run", setting)
    assert list(samples) == list(results)
    for key_id, expected in results.items():
        sample = samples[key_id]
        case = sample["chexpercept_case"]
        assert case["finished"] and sample["unfinished"] == 0
        assert case["oracle_setting"] == setting
        for metric, section in SECTIONS.items():
            want = float(expected[section]["correct"]) if expected[section] else None
            assert sample[metric] == want, (key_id, metric)
            assert (case["stages"].get(section)) == (expected[section].get("correct")), key_id
        history = expected["chat_history"]
        turns = expected["_chat_history_idx"]
        assert list(case["turns"]) == list(turns)
        for name, idx in turns.items():
            entry = history[idx]
            raw = entry[3] if len(entry) > 3 else entry[2]  # the implicit patch keeps the raw
            assert case["turns"][name]["raw"] == raw


def _parts(messages) -> list[tuple[str, str, int]]:
    return [(m["role"], m["content"][-1]["text"], len(m["content"]) - 1) for m in messages]


@pytest.mark.parametrize("setting", ["none", "implicit", "explicit"])
def test_chat_rounds_carry_stage03_requests(bench, tmp_path, setting):
    """Each chat round is Stage 03's request: system, earlier turns (oracle-patched), images."""
    model = ScriptedChat()
    run_lmms(model, setting)
    _, requests = run_stage03(bench, tmp_path / "run", setting)
    assert set(model.sent) == set(requests)
    for rid, request in requests.items():
        want = [(m.role, m.text, len(m.images)) for m in request.messages]
        assert _parts(model.sent[rid]) == want, rid


def test_simple_rounds_write_the_oracle_passed_history_into_the_prompt(bench, tmp_path):
    """Under ``implicit`` a wrong detection is replaced by the ground truth; under ``none`` not."""
    key_id = "effusion_s50000001_positive_0"  # revision-required, detection ground truth 1
    detection = request_id(key_id, "detection_qa")
    contour = request_id(key_id, "contour_evaluation_qa")
    wrong = "It looks clear to me.\nAnswer: 2"
    texts = {}
    for setting in ("none", "implicit"):
        model = ScriptedSimple({detection: wrong})
        run_lmms(model, setting)
        texts[setting], images = model.sent[contour]
        assert len(images) == 2  # the CXR again, then the contour overlay
    assert f"[Your answer 1]\n{wrong}" in texts["none"]
    assert "[Your answer 1]\nAnswer: 1\n" in texts["implicit"]
    assert wrong not in texts["implicit"]
    assert texts["none"].startswith(SYSTEM_PROMPT)


def test_an_empty_round_is_no_answer_and_stops_the_case(bench, tmp_path):
    """lmms-eval's API classes return '' for a failed request: unfinished, never wrong."""
    key_id = "effusion_s50000002_positive_0"  # revision-free, 6 turns
    contour = request_id(key_id, "contour_evaluation_qa")
    model = ScriptedSimple({contour: ""})
    samples, summary = run_lmms(model, "implicit")
    sample = samples[key_id]
    assert sample["unfinished"] == 1
    assert all(sample[m] is None for m in SECTIONS)
    assert list(sample["chexpercept_case"]["turns"]) == ["detection_qa"]
    assert not any(rid.startswith(f"{key_id}/attribute") for rid in model.sent)
    assert summary["unfinished,none"] == 1
    # the aggregate leaves the unfinished case out, as Stage 04 counts it missing
    finished = [s for s in samples.values() if s["unfinished"] == 0]
    expected = sum(s["detection"] for s in finished) / len(finished)
    assert summary["detection,none"] == pytest.approx(expected)


def test_missing_benchmark_dir_names_the_variable(monkeypatch):
    monkeypatch.delenv(lmms_eval_task.BENCHMARK_DIR_ENV, raising=False)
    with pytest.raises(ConfigError, match=lmms_eval_task.BENCHMARK_DIR_ENV):
        lmms_eval_task.process_docs(None)


def test_bad_oracle_setting_is_refused():
    with pytest.raises(ConfigError, match="oracle_setting"):
        lmms_eval_task.oracle_setting({"oracle_setting": "oracle"})


def _without_usage(results: dict[str, Any]) -> dict[str, Any]:
    return {k: {f: v for f, v in r.items() if f != "token_usage"} for k, r in results.items()}


@pytest.mark.parametrize("setting", ["none", "implicit"])
def test_samples_file_converts_to_stage03_run(bench, tmp_path, setting):
    """lmms-eval's samples file -> a Stage 03 run folder equal to 00_eval.py's (usage aside)."""
    run_lmms(ScriptedChat(), setting, samples_dir=tmp_path / "lmms_out")
    (samples_file,) = (tmp_path / "lmms_out").rglob(f"*_samples_chexpercept_{setting}.jsonl")
    code = import_lmms(["--samples", str(samples_file), "--model", "qwen/vl",
                        "--output-path", str(tmp_path / "runs"), "--no-progress"])
    assert code == 0
    converted = json.loads(all_results_path(
        tmp_path / "runs" / "lmms_qwen--vl" / f"oracle_{setting}").read_text(encoding="utf-8"))
    expected, _ = run_stage03(bench, tmp_path / "run", setting)
    assert _without_usage(converted) == _without_usage(expected)


def test_samples_file_with_an_empty_round_converts_to_an_unfinished_case(bench, tmp_path):
    key_id = "effusion_s50000002_positive_0"
    model = ScriptedChat({request_id(key_id, "contour_evaluation_qa"): ""})
    run_lmms(model, "implicit", samples_dir=tmp_path / "lmms_out")
    (samples_file,) = (tmp_path / "lmms_out").rglob("*_samples_chexpercept_implicit.jsonl")
    code = import_lmms(["--samples", str(samples_file), "--model", "m",
                        "--output-path", str(tmp_path / "runs"), "--no-progress"])
    assert code == 3
    results = json.loads(all_results_path(tmp_path / "runs" / "lmms_m" / "oracle_implicit")
                         .read_text(encoding="utf-8"))
    assert results[key_id]["unfinished"]["next_turn"] == "contour_evaluation_qa"
    assert "empty reply" in results[key_id]["unfinished"]["reason"]
    assert sum("unfinished" in r for r in results.values()) == 1


def test_converter_refuses_a_file_of_another_task(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"doc_id": 0, "exact_match": 1.0}) + "\n", encoding="utf-8")
    with pytest.raises(SchemaError, match="chexpercept_case"):
        read_lmms_samples(path)


def test_converter_refuses_json_nested_too_deeply_naming_the_line(tmp_path):
    """Was: an uncaught RecursionError (issue 29, item 3)."""
    path = tmp_path / "samples.jsonl"
    path.write_text("[" * 200_000 + "\n", encoding="utf-8")
    with pytest.raises(SchemaError, match=f"{re.escape(str(path))}, line 1: not usable JSON"):
        read_lmms_samples(path)


def _samples_line(key_id: str, raw: Any) -> str:
    return json.dumps({"doc_id": 0, "chexpercept_case": {
        "key_id": key_id, "turns": {"detection_qa": {"raw": raw}}, "oracle_setting": "none",
        "benchmark_dir": "/b", "finished": True}})


def test_converter_refuses_a_case_twice_and_a_reply_that_is_not_text(tmp_path):
    # before: the second line's replies silently joined the first's (one of them scored), and
    # a null reply was scored as the text 'None' (an unparseable answer, i.e. wrong)
    path = tmp_path / "samples.jsonl"
    path.write_text(_samples_line("k1", "Answer: 1") + "\n" + _samples_line("k2", "Answer: 1")
                    + "\n" + _samples_line("k1", "Answer: 2") + "\n", encoding="utf-8")
    with pytest.raises(SchemaError, match=r"line 3: key_id 'k1' again \(first on line 1\)"):
        read_lmms_samples(path)
    path.write_text(_samples_line("k1", None) + "\n", encoding="utf-8")
    with pytest.raises(SchemaError, match="line 1: .*raw reply None is not a string"):
        read_lmms_samples(path)
    path.write_text(_samples_line("k1", "") + "\n", encoding="utf-8")  # an empty round: text
    assert read_lmms_samples(path).replies[0].text == ""


def test_converter_refuses_a_case_without_its_key_id_setting_or_bundle(tmp_path):
    # before: a missing field became the text 'None' and failed much later, far from the line
    path = tmp_path / "samples.jsonl"
    for field in ("key_id", "oracle_setting", "benchmark_dir"):
        line = json.loads(_samples_line("k1", "Answer: 1"))
        del line["chexpercept_case"][field]
        path.write_text(json.dumps(line) + "\n", encoding="utf-8")
        with pytest.raises(SchemaError, match=f"line 1: .*lacks {field}"):
            read_lmms_samples(path)


#: A plugin package for lmms-eval's CLI (``LMMS_EVAL_PLUGINS``): the simple stand-in model
#: under the name ``chexpercept_scripted`` (a legacy plugin needs a ``tasks`` package too).
PLUGIN_MODEL = textwrap.dedent(f"""
    import lmms_eval.evaluator
    from lmms_eval.api.model import lmms

    from chexpercept.evaluation.dialogue import request_id
    from chexpercept.integrations import lmms_eval_task

    lmms_eval.evaluator._enable_reentrant_filelocks._patched = True  # filelock 4 (see the test)
    REPLIES = {REPLIES!r}


    class ScriptedSimple(lmms):
        def __init__(self, **kwargs):
            super().__init__()

        def loglikelihood(self, requests):
            raise NotImplementedError

        def generate_until(self, requests):
            raise NotImplementedError

        def generate_until_multi_round(self, requests):
            out = []
            for request in requests:
                ctx, _gen, doc_to_visual, doc_to_text, doc_id, task, split = request.args
                doc = self.task_dict[task][split][doc_id]
                case = lmms_eval_task.case_of(doc)
                outputs, info = [], None
                while True:
                    rid = request_id(case.key_id, case.turns[len(outputs)].spec.name)
                    outputs.append(REPLIES[sum(map(ord, rid)) % len(REPLIES)])
                    _v, _t, terminal, outputs, info = doc_to_text(
                        doc, previous_output=outputs, round_idx=len(outputs),
                        previous_round_info=info)
                    if terminal:
                        break
                out.append(list(outputs))
            return out
""")


def test_documented_command_through_the_lmms_eval_cli_then_the_converter(bench, tmp_path):
    """``lmms-eval --tasks chexpercept_implicit --include_path ... --log_samples`` (the command
    of docs/integrations.md, "lmms-eval", a stand-in model plugged in), then ``03_import_lmms_samples.py``: Stage 03's
    all_results.json for the same replies (token usage aside)."""
    plugin = tmp_path / "plugin" / "chexpercept_lmms_plugin"
    for package in (plugin, plugin / "models", plugin / "tasks"):
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("", encoding="utf-8")
    (plugin / "models" / "__init__.py").write_text(
        'AVAILABLE_MODELS = {"chexpercept_scripted": "ScriptedSimple"}\n', encoding="utf-8")
    (plugin / "models" / "chexpercept_scripted.py").write_text(PLUGIN_MODEL, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "plugin"),
           "LMMS_EVAL_PLUGINS": "chexpercept_lmms_plugin"}
    cli = Path(sys.executable).parent / "lmms-eval"
    done = subprocess.run([str(cli), "--model", "chexpercept_scripted",
                           "--tasks", "chexpercept_implicit", "--include_path", str(TASKS_DIR),
                           "--batch_size", "1", "--log_samples",
                           "--output_path", str(tmp_path / "lmms_out")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "chexpercept_implicit" in done.stdout and "detection" in done.stdout
    (samples_file,) = (tmp_path / "lmms_out").rglob("*_samples_chexpercept_implicit.jsonl")
    assert import_lmms(["--samples", str(samples_file), "--model", "scripted",
                        "--output-path", str(tmp_path / "runs"), "--no-progress"]) == 0
    converted = json.loads(all_results_path(tmp_path / "runs" / "lmms_scripted" /
                                             "oracle_implicit").read_text(encoding="utf-8"))
    expected, _ = run_stage03(bench, tmp_path / "run", "implicit")
    assert _without_usage(converted) == _without_usage(expected)


loopback = _load("loopback_for_lmms", REPO / "tests" / "llm" / "loopback.py")


def by_question(turn_text: str) -> str:
    """A reply chosen by the turn's own text (what both harnesses can see of a request)."""
    digest = hashlib.sha256(turn_text.encode("utf-8")).digest()
    return REPLIES[int.from_bytes(digest[:4], "big") % len(REPLIES)]


def flat_turn_text(flat: str) -> str:
    """The turn's text in a flattened request: what follows its last ``[Question n]``."""
    return re.split(r"\[Question \d+\]\n", flat)[-1]


def _server_reply(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    text = content if isinstance(content, str) else "".join(
        p.get("text", "") for p in content if p.get("type") == "text")
    return by_question(flat_turn_text(text))


@register_model("chexpercept_scripted_generate_until")
class FlatSimple(lmms):
    """A simple class with no multi-round generation: only ``generate_until``."""

    is_simple = True

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, int]] = []

    def loglikelihood(self, requests):
        raise NotImplementedError

    def generate_until(self, requests):
        out = []
        for request in requests:
            ctx, _gen, doc_to_visual, doc_id, task, split = request.args
            self.sent.append((ctx, len(doc_to_visual(self.task_dict[task][split][doc_id]))))
            out.append(by_question(flat_turn_text(ctx)))
        return out

    def generate_until_multi_round(self, requests):
        raise NotImplementedError


def _assert_same_scores(samples: dict[str, Any], expected: dict[str, Any], setting: str) -> None:
    assert list(samples) == list(expected)
    for key_id, want in expected.items():
        case = samples[key_id]["chexpercept_case"]
        assert case["finished"] and case["oracle_setting"] == setting
        for metric, section in SECTIONS.items():
            flag = float(want[section]["correct"]) if want[section] else None
            assert samples[key_id][metric] == flag, (key_id, metric)
        for name, idx in want["_chat_history_idx"].items():
            entry = want["chat_history"][idx]
            assert case["turns"][name]["raw"] == (entry[3] if len(entry) > 3 else entry[2])


@pytest.mark.parametrize("setting", ["none", "implicit"])
def test_flat_task_through_lmms_eval_openai_class(bench, tmp_path, setting):
    """``chexpercept_flat_*`` with lmms-eval's own ``openai`` class against a loopback
    OpenAI-compatible server: each round one user message (the flattened request and all its
    images); per-case scores equal Stage 03's for the same replies."""
    from lmms_eval.models.chat.openai import OpenAICompatible

    with loopback.LoopbackServer(answer=_server_reply) as server:
        model = OpenAICompatible(model_version="loopback-vlm", base_url=server.base_url,
                                 api_key="sk-local-test", httpx_trust_env=False,
                                 max_retries=1, num_concurrent=1)
        samples, _ = run_lmms(model, f"flat_{setting}")
        bodies = [seen.body for seen in server.seen]
    expected, requests = run_stage03(bench, tmp_path / "run", setting,
                                     answer=lambda r: by_question(r.messages[-1].text))
    _assert_same_scores(samples, expected, setting)
    assert len(bodies) == len(requests)  # one API call per turn
    sent_images = sorted(sum(p.get("type") == "image_url" for p in b["messages"][-1]["content"])
                         for b in bodies)
    assert sent_images == sorted(sum(len(m.images) for m in r.messages)
                                 for r in requests.values())
    assert all(len(b["messages"]) == 1 for b in bodies)  # one user message, no system


def test_flat_task_through_a_simple_class_with_only_generate_until(bench, tmp_path):
    model = FlatSimple()
    samples, _ = run_lmms(model, "flat_explicit")
    expected, requests = run_stage03(bench, tmp_path / "run", "explicit",
                                     answer=lambda r: by_question(r.messages[-1].text))
    _assert_same_scores(samples, expected, "explicit")
    assert len(model.sent) == len(requests)
    assert any("Ground Truth Provided" in ctx for ctx, _ in model.sent)


def test_parquet_export_gives_the_same_samples(bench, tmp_path, monkeypatch):
    """``$CHEXPERCEPT_BENCHMARK_DIR`` may name the parquet export (docs/hf_dataset.md)."""
    from chexpercept.qa.hf_export import export_hf_dataset

    monkeypatch.setenv("CHEXPERCEPT_CACHE_DIR", str(tmp_path / "cache"))
    from_folder, _ = run_lmms(ScriptedChat(), "implicit")
    export_hf_dataset(bench, tmp_path / "hf")
    monkeypatch.setenv(lmms_eval_task.BENCHMARK_DIR_ENV, str(tmp_path / "hf"))
    from_parquet, _ = run_lmms(ScriptedChat(), "implicit")
    assert list(from_parquet) == list(from_folder)
    for key_id, sample in from_folder.items():
        other = from_parquet[key_id]
        assert other["chexpercept_case"]["benchmark_dir"] == str((tmp_path / "hf").resolve())
        assert {k: v for k, v in other["chexpercept_case"].items() if k != "benchmark_dir"} == \
            {k: v for k, v in sample["chexpercept_case"].items() if k != "benchmark_dir"}


def test_another_samples_file_of_the_same_name_is_refused_the_same_one_resumes(bench, tmp_path):
    # issue 29: the converted run's identity was the file's name only, so another file of
    # the same name converted into the same folder as if it were the same run
    import shutil

    run_lmms(ScriptedChat(), "implicit", samples_dir=tmp_path / "a")
    other = ScriptedChat({request_id("effusion_s50000002_positive_0", "detection_qa"):
                          "Answer: 2"})
    run_lmms(other, "implicit", samples_dir=tmp_path / "b")
    (first,) = (tmp_path / "a").rglob("*_samples_chexpercept_implicit.jsonl")
    (second,) = (tmp_path / "b").rglob("*_samples_chexpercept_implicit.jsonl")
    assert first.read_bytes() != second.read_bytes()
    renamed = tmp_path / "c" / first.name
    renamed.parent.mkdir()
    shutil.copyfile(second, renamed)
    args = ["--model", "m", "--output-path", str(tmp_path / "runs"), "--no-progress"]
    run_dir = tmp_path / "runs" / "lmms_m" / "oracle_implicit"
    assert import_lmms(["--samples", str(first), *args]) == 0
    before = {f: (run_dir / f).read_bytes() for f in ("all_results.json", "records.jsonl")}
    assert import_lmms(["--samples", str(first), *args]) == 0  # the same file: idempotent
    assert {f: (run_dir / f).read_bytes() for f in before} == before
    with pytest.raises(ConfigError, match=r"'provider_settings' [\s\S]*source_sha256"
                                          r"[\s\S]*give it another --output-path") as info:
        import_lmms(["--samples", str(renamed), *args])
    assert str(info.value).index("--output-path") < str(info.value).index("--overwrite")
    assert {f: (run_dir / f).read_bytes() for f in before} == before  # nothing mixed in
