"""The reply cap: an over-long reply is kept as its first part, truncated, never replayed whole.

docs/engines.md, "Reply cap" (issue 29, item 6).
"""

from __future__ import annotations

import json

import pytest
from stage03_bundle import write_bundle
from stage03_fakes import ScriptedModel, right

from chexpercept.errors import ConfigError
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.evaluation.reply_cap import (
    MIN_REPLY_CHARS,
    REPLY_CHARS_PER_TOKEN,
    cap_reply,
    reply_cap_chars,
)
from chexpercept.files import read_json, read_jsonl
from chexpercept.layouts import all_results_path, records_path, run_manifest_path
from utils.llm.base import Completion

RR = "effusion_s50000001_positive_0"
HUGE = 10_000_000  # characters (10 MB of ASCII)
CAP = 1000


@pytest.fixture()
def bundle(tmp_path):
    return load_bundle(write_bundle(tmp_path / "bench"))


def _flood(request):
    """10 MB for RR's detection turn (its first 20 characters declare the right answer)."""
    if request.request_id == f"{RR}/detection_qa":
        return right(request) + "\n" + "x" * HUGE
    return right(request)


def _request_chars(request) -> int:
    return sum(len(m.text) for m in request.messages)


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_a_10_mb_reply_is_kept_as_its_prefix_truncated_and_never_replayed_whole(
        bundle, tmp_path, runner):
    run_dir = tmp_path / "run"
    settings = EvalSettings("scripted", "m", oracle_setting="none", max_reply_chars=CAP)
    model = ScriptedModel(_flood)
    if runner == "sync":
        summary = run_evaluation(bundle, validate_bundle(bundle), model, settings, run_dir)
    else:
        summary = run_evaluation_async(bundle, validate_bundle(bundle), model, settings,
                                       run_dir, concurrency=2)
    records = {r["request_id"]: r for r in read_jsonl(records_path(run_dir))}
    flood = records[f"{RR}/detection_qa"]
    assert flood["status"] == "truncated" and flood["correct"] is False
    assert flood["completion_status"] == "truncated" and flood["answer"] is None
    assert flood["reply_chars"] == HUGE + len(right_text(model, RR)) + 1
    assert len(flood["raw"]) == CAP and flood["raw"].startswith("Answer: ")
    assert "over the reply cap of 1000" in flood["detail"]
    # every other record is as before: no reply_chars field
    assert [k for k, r in records.items() if "reply_chars" in r] == [f"{RR}/detection_qa"]
    # the later turns of the case carry the kept part, not the 10 MB
    later = [r for batch in model.batches for r in batch
             if r.request_id.startswith(RR + "/") and r.request_id != f"{RR}/detection_qa"]
    assert later and max(_request_chars(r) for r in later) < 20_000
    assert all(len(r.messages[2].text) == CAP for r in later)  # the history's reply
    assert summary.statuses["truncated"] == 1
    assert read_json(run_manifest_path(run_dir))["max_reply_chars"] == CAP
    results = read_json(all_results_path(run_dir))
    assert results[RR]["detection_qa"]["status"] == "truncated"
    assert len(json.dumps(results)) < 200_000  # the results file never holds the 10 MB


def right_text(model, key_id):
    return "Answer: " + str(model.answers[f"{key_id}/detection_qa"])


def test_a_resumed_run_replays_the_kept_part_and_asks_nothing_again(bundle, tmp_path):
    run_dir = tmp_path / "run"
    settings = EvalSettings("scripted", "m", oracle_setting="none", max_reply_chars=CAP)
    run_evaluation(bundle, validate_bundle(bundle), ScriptedModel(_flood), settings, run_dir)
    again = ScriptedModel(_flood)
    summary = run_evaluation(bundle, validate_bundle(bundle), again, settings, run_dir)
    assert again.calls == [] and summary.turns_requested == 0
    assert summary.statuses["truncated"] == 1


def test_the_default_cap_follows_max_new_tokens_with_a_floor():
    assert reply_cap_chars(None, 2048) == REPLY_CHARS_PER_TOKEN * 2048
    assert reply_cap_chars(None, 16) == MIN_REPLY_CHARS
    assert reply_cap_chars(None, None) == REPLY_CHARS_PER_TOKEN * 8192  # a baseline, a plugin
    assert reply_cap_chars(50, 8192) == 50  # --max-reply-chars wins
    with pytest.raises(ValueError, match="--max-reply-chars must be >= 1"):
        reply_cap_chars(0, 8192)


def test_a_cut_keeps_the_provider_s_own_refusal_or_error():
    long = "y" * 100
    assert cap_reply(Completion(long), 100) == Completion(long)  # fits: unchanged
    refused = cap_reply(Completion(long, status="refused"), 10)
    assert (refused.text, refused.status, refused.reply_chars) == ("y" * 10, "refused", 100)
    cut = cap_reply(Completion(long, finish_reason="stop"), 10)
    assert (cut.status, cut.finish_reason, cut.reply_chars) == ("truncated", "stop", 100)


def test_a_cap_below_one_is_a_config_error(bundle, tmp_path):
    with pytest.raises(ConfigError, match="--max-reply-chars must be >= 1"):
        run_evaluation(bundle, validate_bundle(bundle), ScriptedModel(right),
                       EvalSettings("scripted", "m", max_reply_chars=0), tmp_path / "run")


def test_max_reply_chars_flag_reaches_the_run(tmp_path):
    from chexpercept_cli.eval import main

    bench, out = write_bundle(tmp_path / "bench"), tmp_path / "out"
    # the random baseline answers "Answer: N" (9 characters or more): every reply is over 5
    assert main(["--benchmark-dir", str(bench), "--output-path", str(out), "--no-progress",
                 "--provider", "random", "--max-reply-chars", "5", "--limit", "1",
                 "--oracle_setting", "none"]) == 0
    run_dir = out / "random_baseline" / "oracle_none"
    records = read_jsonl(records_path(run_dir))
    assert records and all(r["status"] == "truncated" and r["raw"] == r["raw"][:5]
                           and len(r["raw"]) == 5 and r["reply_chars"] > 5 for r in records)
    assert read_json(run_manifest_path(run_dir))["max_reply_chars"] == 5
