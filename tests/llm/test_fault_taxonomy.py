"""Faults are never answers (issue 11): what stops a run, what keeps a case unfinished.

Every test drives ``00_eval.py`` in-process with the real openai SDK against the loopback
server (tests/llm/loopback.py) and compares the finished run with a fault-free one. The rules are
in docs/engines.md, "Faults".
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from local_provider_helpers import EVAL_SCRIPT, read_records, write_marked_bundle
from loopback import LoopbackServer

from chexpercept.analysis.extended import analyse_run_file
from chexpercept.analysis.markdown import _incomplete_warning
from chexpercept.analysis.runs import run_from_dir
from chexpercept.layouts import all_results_path, faults_path, records_path
from utils.cli import run_main
from utils.llm import _images

#: The case whose turns the tests fault (revision-required: 9 turns).
TARGET = "effusion_s50000001_positive_0"


def _main():
    import runpy

    return runpy.run_path(str(EVAL_SCRIPT), run_name="eval_under_test")["main"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture()
def port() -> int:
    """One port per test: the server's URL is part of the run's identity, so the server that
    answers the re-run must listen where the faulty one did."""
    return _free_port()


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bench")
    write_marked_bundle(root)
    return root


def _argv(bench: Path, out: Path, base_url: str, *extra: str) -> list[str]:
    return ["--benchmark-dir", str(bench), "--output-path", str(out), "--provider", "openai",
            "--model", "srv", "--base-url", base_url, "--no-progress", "--max-retries", "1",
            "--concurrency", "3", "--server-wait", "5", *extra]


def _run(bench: Path, out: Path, base_url: str, *extra: str) -> int:
    return run_main(_main(), _argv(bench, out, base_url, *extra))


def _run_dir(out: Path) -> Path:
    dirs = [p.parent for p in out.rglob("run_manifest.json")]
    assert len(dirs) == 1, dirs
    return dirs[0]


def _all_results(out: Path) -> bytes:
    return all_results_path(_run_dir(out)).read_bytes()


@pytest.fixture(scope="module")
def reference(bench, tmp_path_factory) -> bytes:
    """``all_results.json`` of a run without faults."""
    out = tmp_path_factory.mktemp("reference")
    with LoopbackServer(models=["srv"]) as server:
        assert _run(bench, out, server.base_url) == 0
    return _all_results(out)


def _first_image_url(body: dict[str, Any]) -> str | None:
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if part.get("type") == "image_url":
                    return part["image_url"]["url"]
    return None


def _turn_of(bench: Path, key_id: str, turn: int):
    """A ``respond`` hook matching the requests of ``key_id``'s turn ``turn`` (0-based)."""
    xray = _images.image_data_url(bench / "chexpercept" / key_id / "detection_qa" / "xray.png")

    def matches(body: dict[str, Any]) -> bool:
        users = sum(m.get("role") == "user" for m in body.get("messages", []))
        return _first_image_url(body) == xray and users == turn + 1
    return matches


# -- fatal for the run ------------------------------------------------------------------------
@pytest.mark.parametrize(("action", "words"), [
    ({"status": 429, "error_code": "insufficient_quota",
      "error_message": "You exceeded your current quota"}, "quota or billing is exhausted"),
    ({"status": 401, "error_message": "Incorrect API key"}, "HTTP 401"),
    ({"status": 404, "error_code": "model_not_found",
      "error_message": "The model `srv` does not exist"}, "HTTP 404"),
    ({"status": 400, "error_code": "context_length_exceeded",
      "error_message": "This model's maximum context length is 4096 tokens"},
     "does not fit the model's context"),
], ids=["quota", "auth", "model-not-found", "context-length"])
def test_fatal_faults_stop_the_run_at_once_and_nothing_is_an_answer(
        bench, reference, tmp_path, port, capsys, action, words):
    out = tmp_path / "out"
    hits = []
    is_target = _turn_of(bench, TARGET, 0)

    def respond(body):
        if is_target(body) and not hits:
            hits.append(1)
            return action
        return None

    with LoopbackServer(models=["srv"], port=port, respond=respond) as server:
        code = _run(bench, out, server.base_url)
        faulted = [s for s in server.chat_requests() if s.status != 200]
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("error:") == 1
    assert len(faulted) == 1  # never retried
    run_dir = _run_dir(out)
    records = read_records(run_dir) if records_path(run_dir).exists() else []
    assert all(r["key_id"] != TARGET for r in records)  # the faulted turn has no record
    assert all(r["status"] == "ok" for r in records)
    results = json.loads(all_results_path(run_dir).read_text())
    assert results[TARGET]["unfinished"]["turns_answered"] == 0

    with LoopbackServer(models=["srv"], port=port) as server:  # the cause fixed: re-run completes
        assert _run(bench, out, server.base_url) == 0
    assert _all_results(out) == reference


def test_a_server_that_refuses_connections_at_first_is_waited_for(bench, reference, tmp_path):
    port = _free_port()
    server = LoopbackServer(models=["srv"], port=port)
    timer = threading.Timer(1.0, server.start)
    timer.start()
    try:
        out = tmp_path / "out"
        assert _run(bench, out, f"http://127.0.0.1:{port}/v1", "--server-wait", "30") == 0
        assert not faults_path(_run_dir(out)).exists()
    finally:
        timer.cancel()
        server.stop()
    assert _all_results(out) == reference


# -- retryable: when the retries run out, the case stays unfinished -------------------------
def test_a_turn_whose_retries_run_out_keeps_its_case_unfinished_and_a_rerun_asks_it(
        bench, reference, tmp_path, port, capsys):
    out = tmp_path / "out"
    is_target = _turn_of(bench, TARGET, 1)  # its contour-evaluation turn
    with LoopbackServer(models=["srv"], port=port,
                        respond=lambda b: {"status": 500} if is_target(b) else None) as server:
        code = _run(bench, out, server.base_url)
        assert sum(is_target(s.body) for s in server.chat_requests()) == 2  # 1 + 1 retry
    err = capsys.readouterr().err
    assert code == 3 and "1 of 7 case(s) unfinished" in err and "HTTP 500" in err
    assert "--give-up-unanswered" in err
    run_dir = _run_dir(out)
    records = read_records(run_dir)
    assert [r["turn"] for r in records if r["key_id"] == TARGET] == ["detection_qa"]
    faults = [json.loads(line) for line in faults_path(run_dir).read_text().splitlines()]
    assert [(f["key_id"], f["turn"], f["attempts"]) for f in faults] == \
        [(TARGET, "contour_evaluation_qa", 2)]
    results = json.loads(all_results_path(run_dir).read_text())
    marker = results[TARGET]["unfinished"]
    assert marker["next_turn"] == "contour_evaluation_qa" and marker["turns_answered"] == 1
    assert "HTTP 500" in marker["reason"] and results[TARGET]["detection_qa"] == {}
    assert sum("unfinished" in r for r in results.values()) == 1

    # Stage 04: missing, not wrong; the report says the run is incomplete
    analysis = analyse_run_file(run_from_dir(run_dir), n_boot=0, seed=0)
    assert analysis.table.n_cases == 6 and list(analysis.unfinished) == [TARGET]
    assert "incomplete run" in "\n".join(_incomplete_warning([analysis]))

    # giving up: not asked again, exit 0, still marked
    with LoopbackServer(models=["srv"], port=port) as server:
        assert _run(bench, out, server.base_url, "--give-up-unanswered") == 0
        assert server.chat_requests() == []
    assert "unfinished" in json.loads(all_results_path(run_dir).read_text())[TARGET]

    # the fault cleared: the same command asks the turn again and the run completes
    with LoopbackServer(models=["srv"], port=port) as server:
        assert _run(bench, out, server.base_url) == 0
        asked = server.chat_requests()
    assert len(asked) == 8 and is_target(asked[0].body)  # the 8 turns the case had left
    assert _all_results(out) == reference


def test_many_faults_in_a_row_stop_the_run(bench, tmp_path, port, capsys):
    out = tmp_path / "out"
    with LoopbackServer(models=["srv"], port=port, respond=lambda b: {"status": 503}) as server:
        code = _run(bench, out, server.base_url, "--max-retries", "0",
                    "--max-consecutive-faults", "3")
        asked = len(server.chat_requests())
    err = capsys.readouterr().err
    assert code == 2 and "3 request(s) in a row got no answer" in err
    assert asked < 7  # not every case was tried against a dead server
    run_dir = _run_dir(out)
    assert not records_path(run_dir).exists() or read_records(run_dir) == []
    results = json.loads(all_results_path(run_dir).read_text())
    assert len(results) == 7 and all("unfinished" in r for r in results.values())
