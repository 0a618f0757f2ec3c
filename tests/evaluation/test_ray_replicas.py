"""Stage 03 on a local Ray cluster: N replicas give a one-engine run's results and run folder.

One cluster for the module (``tests/ray_cluster.py``). Each test compares a replicated run's
``all_results.json`` byte for byte with a one-engine run of the same command, and reads the
records (each names its replica) and the plugin's request log (each ``generate`` call with its
process id) to check that a case's turns all ran on one replica and that each turn index was
one call per replica. Each replica prepares, parses and scores its own turns (the driver scores
nothing); faults it meets are logged by the driver, never recorded. A replica that SIGKILLs
itself mid-batch is restarted, rebuilt from the records, and only its batch is asked again; one
that keeps dying stops the run naming it, and a re-run resumes; a driver killed mid-run resumes
as a one-engine run does. The pool's ``stream`` keeps each actor's next call queued, restores a
restarted actor from what the caller handled, and lands the calls in flight when it stops.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from ray_cluster import plugin_pythonpath, require_ray, start_cluster
from stage03_bundle import write_bundle
from stage03_plugin import REQUEST_LOG_ENV, SLEEP_ENV

from chexpercept.errors import ConfigError
from chexpercept.evaluation import EvalSettings, load_bundle, select_key_ids, validate_bundle
from chexpercept.evaluation.api import evaluate
from chexpercept.evaluation.dialogue import answer_key
from chexpercept.evaluation.replicas import (
    RayReplicas,
    ReplicaWorker,
    light_case,
    run_replicated,
    start_replicas,
)
from chexpercept.files import read_jsonl
from chexpercept.layouts import faults_path, records_path, run_manifest_path
from utils.cli import run_main
from utils.errors import EngineStartError, MissingDependencyError, ProviderError
from utils.ray_pool import ActorPool

require_ray()

from ray_plugin import DIE_ALWAYS_ENV, DIE_AT_ENV, DIE_MARKER_ENV, FAULT_AT_ENV  # noqa: E402
from stage03_fakes import ScriptedModel  # noqa: E402

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parents[1] / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"
ECHO = "stage03_plugin:SlowEchoModel"
DYING = "ray_plugin:DyingEchoModel"
FAULTY = "ray_plugin:FaultEchoModel"
TOTAL_TURNS = 33  # stage03_bundle: 9 + 6 + 1 + 5 + 2 + 1 + 9


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with start_cluster(tmp_path_factory.mktemp("ray")) as address:
        yield address


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return write_bundle(tmp_path_factory.mktemp("bench"))


@pytest.fixture()
def plugin_env(monkeypatch, tmp_path):
    """Replicas import the test plugins (PYTHONPATH is forwarded to every actor)."""
    monkeypatch.setenv("PYTHONPATH", plugin_pythonpath(HERE, HERE.parent / "llm"))
    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv(REQUEST_LOG_ENV, str(log))
    monkeypatch.setenv(SLEEP_ENV, "0")
    return log


def _run(bench, out, provider, *, oracle="implicit", replicas=None, max_restarts=3, **kw):
    ray = None if replicas is None else RayReplicas(replicas=replicas, max_restarts=max_restarts,
                                                    cpus_per_replica=0.5)
    return evaluate(bench, provider=provider, output_path=out, oracle_setting=oracle,
                    save_every=1, ray=ray, **kw)


def _events(log: Path) -> list[dict]:
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()
            if line.endswith("}")]


def _records(summary) -> list[dict]:
    return read_jsonl(records_path(summary.run_dir))


def _same_results(a, b) -> None:
    assert a.all_results_path.read_bytes() == b.all_results_path.read_bytes()


def _check_sticky(summary, replicas: int) -> dict[str, int]:
    """Every record names a replica; all turns of a case name the same one. Returns them."""
    by_case: dict[str, set[int]] = defaultdict(set)
    for rec in _records(summary):
        by_case[rec["key_id"]].add(rec["replica"])
    assert all(len(r) == 1 for r in by_case.values()), by_case
    used = {next(iter(r)) for r in by_case.values()}
    assert used == set(range(replicas))  # 7 cases, round robin: every replica has work
    return {k: next(iter(r)) for k, r in by_case.items()}


@pytest.mark.parametrize(("provider", "oracle", "replicas"), [
    ("random", "none", 3), ("random", "implicit", 2), ("oracle", "implicit", 4),
    ("dummy", "none", 2)])
def test_baselines_on_replicas_match_one_engine(cluster, bench, tmp_path, provider, oracle,
                                                replicas):
    one = _run(bench, tmp_path / "one", provider, oracle=oracle)
    many = _run(bench, tmp_path / "many", provider, oracle=oracle, replicas=replicas)
    _same_results(one, many)
    assert many.turns_requested == one.turns_requested == TOTAL_TURNS
    _check_sticky(many, replicas)
    manifest = json.loads(run_manifest_path(many.run_dir).read_text(encoding="utf-8"))
    assert manifest["provider_runtime"]["ray"]["replicas"] == replicas
    if provider == "oracle":  # identity is a one-engine run's: its folder resumes under Ray
        again = _run(bench, tmp_path / "one", provider, oracle=oracle, replicas=replicas)
        assert again.turns_requested == 0 and again.turns_resumed == TOTAL_TURNS


def test_each_turn_index_is_one_call_per_replica(cluster, bench, tmp_path, plugin_env):
    many = _run(bench, tmp_path / "many", ECHO, model="echo", replicas=3)
    replica_of = _check_sticky(many, 3)
    starts = [e for e in _events(plugin_env) if e["event"] == "start"]
    calls = Counter()
    for e in starts:
        turns = {i.split("/", 1)[1] for i in e["ids"]}
        assert len(turns) == 1  # one turn index per call
        replicas = {replica_of[i.split("/", 1)[0]] for i in e["ids"]}
        assert len(replicas) == 1  # one replica's cases per call
        calls[(next(iter(turns)), next(iter(replicas)))] += 1
    assert max(calls.values()) == 1  # each turn index: one call per replica
    pids_of_case = defaultdict(set)
    for e in starts:
        for i in e["ids"]:
            pids_of_case[i.split("/", 1)[0]].add(e["pid"])
    assert all(len(p) == 1 for p in pids_of_case.values())  # one process per case
    assert many.generate_calls == len(starts)
    plugin_env.unlink()
    one = _run(bench, tmp_path / "one", ECHO, model="echo")
    _same_results(one, many)


def test_tiny_vlm_through_transformers_on_replicas(cluster, bench, tmp_path_factory, tmp_path,
                                                   plugin_env):
    """One pair of replicas serves both oracle settings (each replica imports torch once)."""
    pytest.importorskip("transformers")
    build = runpy.run_path(str(HERE.parent / "llm" / "tiny_vlm.py"))["build_tiny_qwen2_vl"]
    model = build(tmp_path_factory.mktemp("tiny") / "tiny_qwen2_vl")
    options = {"model_path": str(model), "device": "cpu", "batch_size": 1,
               "max_new_tokens": 6}
    replicas = start_replicas("transformers", "tiny", {"seed": 0, **options},
                              RayReplicas(replicas=2, cpus_per_replica=0.5))
    try:
        bundle = load_bundle(bench)
        cases = validate_bundle(bundle, select_key_ids(bundle))
        for oracle in ("none", "implicit"):
            one = evaluate(bench, provider="transformers", model="tiny", output_path=tmp_path,
                           oracle_setting=oracle, max_new_tokens=6,
                           provider_options={k: v for k, v in options.items()
                                             if k != "max_new_tokens"})
            settings = EvalSettings(provider="transformers", model="tiny",
                                    oracle_setting=oracle)
            before = sum(replicas.pool.calls)
            many = run_replicated(bundle, cases, replicas, settings,
                                  tmp_path / "many" / oracle)
            _same_results(one, many)
            _check_sticky(many, 2)
            assert many.generate_calls == sum(replicas.pool.calls) - before
    finally:
        replicas.close()


@pytest.mark.parametrize(("oracle", "die_at"), [
    ("implicit", "cardiomegaly_s50000004_positive_0/contour_revision_qa_expansion"),
    # late in a conversation whose history holds an explicit oracle paragraph: the restarted
    # replica's dialogue is rebuilt from the records, or its requests (and answers) differ
    ("explicit", "opacity_s50000007_positive_0/attribute_extraction_qa_distribution")])
def test_a_killed_replica_is_restarted_and_only_its_batch_asked_again(cluster, bench, tmp_path,
                                                                      plugin_env, monkeypatch,
                                                                      oracle, die_at):
    marker = tmp_path / "died"
    monkeypatch.setenv(DIE_AT_ENV, die_at)
    monkeypatch.setenv(DIE_MARKER_ENV, str(marker))
    many = _run(bench, tmp_path / "many", DYING, oracle=oracle, model="echo", replicas=2)
    assert marker.is_file()  # a replica did die
    assert many.cases_finished == 7 and many.turns_requested == TOTAL_TURNS
    starts = [e for e in _events(plugin_env) if e["event"] == "start"]
    asked = Counter(i for e in starts for i in e["ids"])
    twice = sorted(i for i, n in asked.items() if n > 1)
    lost = [e for e in starts if os.environ[DIE_AT_ENV] in e["ids"]]
    dead_pid = lost[0]["pid"]
    assert twice == sorted(lost[0]["ids"])  # only the lost batch was asked again
    assert all(n <= 2 for n in asked.values())
    assert any(e["pid"] != dead_pid and e["ids"] == lost[0]["ids"] for e in starts)
    _check_sticky(many, 2)  # the restarted replica kept its cases
    monkeypatch.delenv(DIE_AT_ENV)
    one = _run(bench, tmp_path / "one", ECHO, oracle=oracle, model="echo")
    _same_results(one, many)


def test_replicas_prepare_parse_and_score_in_their_actors(cluster, bench, tmp_path, plugin_env,
                                                         monkeypatch):
    """The driver scores nothing: it receives finished records and appends them."""
    import chexpercept.evaluation.session as session_module

    def refuse(*args, **kwargs):
        raise AssertionError("the driver scored a completion")

    with monkeypatch.context() as patch:  # the driver only; the replicas are other processes
        patch.setattr(session_module, "score_completion", refuse)
        many = _run(bench, tmp_path / "many", ECHO, model="echo", replicas=2)
    assert many.turns_requested == TOTAL_TURNS
    assert gc.get_freeze_count() == 0  # the driver froze its heap for the loop only
    one = _run(bench, tmp_path / "one", ECHO, model="echo")
    _same_results(one, many)
    assert (one.usage, one.cost_usd, one.statuses) == (many.usage, many.cost_usd, many.statuses)


def test_a_replica_s_faults_are_logged_not_recorded_and_the_breaker_stops_the_run(
        cluster, bench, tmp_path, plugin_env, monkeypatch):
    monkeypatch.setenv(FAULT_AT_ENV, "contour_evaluation_qa")  # 5 cases have that turn
    parked = _run(bench, tmp_path / "many", FAULTY, model="echo", replicas=2,
                  max_consecutive_faults=0)
    run_dir = tmp_path / "many" / "slowecho_echo" / "oracle_implicit"
    faults = read_jsonl(faults_path(run_dir))
    assert sorted(f["turn"] for f in faults) == ["contour_evaluation_qa"] * 5
    assert {r["turn"] for r in read_jsonl(records_path(run_dir))} == {"detection_qa"}
    assert parked.turns_faulted == 5 and parked.cases_finished == 2
    assert len(parked.unfinished) == 5  # parked for the invocation, not asked again
    with pytest.raises(ProviderError, match=r"2 request\(s\) in a row got no answer"):
        _run(bench, tmp_path / "stop", FAULTY, model="echo", replicas=2,
             max_consecutive_faults=2)
    stopped = tmp_path / "stop" / "slowecho_echo" / "oracle_implicit"
    # the other replica's batch, in flight at the stop, landed too: every fault is logged
    assert len(read_jsonl(faults_path(stopped))) == 5
    assert len(read_jsonl(records_path(stopped))) == 7
    monkeypatch.delenv(FAULT_AT_ENV)
    again = _run(bench, tmp_path / "many", FAULTY, model="echo", replicas=2)
    assert again.turns_resumed == 7 and again.cases_finished == 7
    one = _run(bench, tmp_path / "one", ECHO, model="echo")
    _same_results(one, again)


def test_a_replica_asks_nothing_after_its_engine_raised(bench):
    """In the actor: the step queued behind one that raised returns None and asks nothing."""
    bundle = load_bundle(bench)
    cases = [light_case(c) for c in validate_bundle(bundle, select_key_ids(bundle))]
    worker = ReplicaWorker("dummy", "dummy")
    worker.model = engine = ScriptedModel(fail_on_call=1)
    worker.set_answer_key(answer_key(cases))
    worker.load(cases, [[] for _ in cases], EvalSettings(provider="scripted", model="m"), 0)
    assert gc.get_freeze_count() > 0  # its cases are left out of the collector's walks
    first = worker.step(0)
    assert first is not None and len(first.records) == 7 and not first.faults
    assert [r["turn"] for r in first.records] == ["detection_qa"] * 7
    with pytest.raises(RuntimeError, match="simulated crash"):
        worker.step(1)
    assert worker.step(1) is None and worker.step(2) is None
    assert len(engine.calls) == 1  # nothing asked after the crash
    gc.unfreeze()  # load() froze this process's heap, as it does an actor's


def test_stream_queues_the_next_call_and_restores_a_restarted_actor(cluster, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("PYTHONPATH", plugin_pythonpath(HERE.parent))
    from ray_cluster import Accumulator

    marker = tmp_path / "died"
    items = {0: [1, 2, 3, 4, 5, 6], 1: [10, 20, 30]}
    sent = {0: 0, 1: 0}
    totals: dict[int, list[int]] = {0: [], 1: []}
    events: list[tuple[str, int]] = []

    def next_args(i):
        if sent[i] == len(items[i]):
            return None
        sent[i] += 1
        events.append(("ask", i))
        return (items[i][sent[i] - 1],)

    def on_result(i, value):
        events.append(("got", i))
        return lambda: totals[i].append(value[0])

    def restore(i):  # the dead actor's total, from what was handled
        return "load", (totals[i][-1] if totals[i] else 0,)

    pool = ActorPool(Accumulator, (4, str(marker)), size=2, label="worker", num_cpus=0.5)
    try:
        lost = pool.stream("add", next_args, on_result, depth=2, restore=restore)
    finally:
        pool.close()
    assert lost == [] and marker.is_file() and pool.restarts == [1, 0]
    assert totals == {0: [1, 3, 6, 10, 15, 21], 1: [10, 30, 60]}  # running sums, as no death
    assert events[:2] == [("ask", 0), ("ask", 0)]  # the second call queued before the first
    assert pool.calls == [6, 3]  # returned


def test_stream_stops_at_an_error_and_lands_the_calls_in_flight(cluster, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", plugin_pythonpath(HERE.parent))
    from ray_cluster import Accumulator

    for where in ("actor", "caller"):
        items = {0: [1, 2, 3, 4, 5], 1: [11, 12, 13, 14, 15]}
        asked: list[int] = []
        handled: list[int] = []
        after_error: list[int] = []

        def next_args(i, items=items, asked=asked):
            if not items[i]:
                return None
            asked.append(items[i].pop(0))
            return (asked[-1],)

        def on_result(i, value, handled=handled, asked=asked, after_error=after_error,
                      where=where):
            handled.append(value[0])

            def after():
                if where == "caller" and value[0] == 3:  # 1 + 2
                    after_error.append(len(asked))
                    raise ValueError("the caller cannot take 3")
            return after

        pool = ActorPool(Accumulator, (), {"fail_on": 2 if where == "actor" else None,
                                           "sleep_s": 0.2}, size=2, label="worker",
                         num_cpus=0.5)
        try:
            with pytest.raises(ValueError, match="cannot"):
                pool.stream("add", next_args, on_result, depth=2)
        finally:
            pool.close()
        if where == "caller":  # nothing asked after the error; all asked calls landed
            assert after_error == [len(asked)]
            assert len(handled) == len(asked)
        else:  # every call asked but the failed one landed
            assert len(handled) == len(asked) - 1


def test_a_replica_that_keeps_dying_stops_the_run_and_a_rerun_resumes(cluster, bench, tmp_path,
                                                                      plugin_env, monkeypatch):
    monkeypatch.setenv(DIE_AT_ENV, "effusion_s50000001_positive_0/contour_evaluation_qa")
    monkeypatch.setenv(DIE_MARKER_ENV, str(tmp_path / "died"))
    monkeypatch.setenv(DIE_ALWAYS_ENV, "1")
    with pytest.raises(ProviderError, match=r"replica \d on node .* died 2 time\(s\), more "
                                            r"than --ray-max-restarts 1"):
        _run(bench, tmp_path / "many", DYING, model="echo", replicas=2, max_restarts=1)
    records = read_jsonl(records_path(tmp_path / "many" / "slowecho_echo"
                                            / "oracle_implicit"))
    turns = Counter(r["turn"] for r in records)
    assert turns["detection_qa"] == 7  # turn 0 of every case is kept
    # the replica that lived finished its cases (2 of the 5 with a turn 1) before the stop
    assert turns["contour_evaluation_qa"] == 2
    assert {r["replica"] for r in records if r["turn"] != "detection_qa"} == {1}
    monkeypatch.delenv(DIE_AT_ENV)
    again = _run(bench, tmp_path / "many", DYING, model="echo", replicas=2)
    assert again.turns_resumed == len(records) and again.cases_finished == 7
    one = _run(bench, tmp_path / "one", ECHO, model="echo")
    _same_results(one, again)


def test_an_engine_that_cannot_start_stops_before_the_run_folder(cluster, bench, tmp_path,
                                                                 plugin_env):
    """Every replica's engine starts before the run folder is opened (issue 20, item 1): one
    that cannot start stops the run with its own error, no manifest, no record, no request."""
    with pytest.raises(EngineStartError, match="Fix: lower --max-model-len"):
        _run(bench, tmp_path / "many", "ray_plugin:StartFailsEchoModel", model="echo",
             replicas=2)
    run_dir = tmp_path / "many" / "slowecho_echo" / "oracle_implicit"
    assert not run_manifest_path(run_dir).exists()
    assert not records_path(run_dir).exists()
    events = [e["event"] for e in _events(plugin_env)]
    assert "engine" in events and "start" not in events  # no generate call reached a replica


def _kill_when_half_done(proc, records: Path, timeout_s: float = 90.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (rc {proc.returncode}) before it was killed")
        n = records.read_bytes().count(b"\n") if records.is_file() else 0
        if n >= TOTAL_TURNS // 2:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            return n
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the run did not reach half its turns in time")


def test_a_killed_driver_resumes_like_a_one_engine_run(cluster, bench, tmp_path, monkeypatch):
    out = tmp_path / "killed"
    argv = ["--benchmark-dir", str(bench), "--output-path", str(out), "--provider", ECHO,
            "--model", "echo", "--save-every", "1", "--no-progress", "--ray", cluster,
            "--replicas", "2", "--cpus-per-replica", "0.5"]
    env = {**os.environ, SLEEP_ENV: "0.15", "PYTHONPATH": plugin_pythonpath(HERE)}
    env.pop(REQUEST_LOG_ENV, None)
    records = records_path(out / "slowecho_echo" / "oracle_implicit")
    cmd = [sys.executable, str(SCRIPT), *argv]
    with open(tmp_path / "first.log", "wb") as err:
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        n_at_kill = _kill_when_half_done(first, records)
    assert first.returncode == -signal.SIGKILL and n_at_kill < TOTAL_TURNS
    second = subprocess.run(cmd, env={**env, SLEEP_ENV: "0"}, capture_output=True, text=True,
                            timeout=120)
    assert second.returncode == 0, second.stderr[-3000:]
    done = read_jsonl(records)
    assert len(done) == TOTAL_TURNS == len({(r["key_id"], r["turn"]) for r in done})
    assert "(already done: " in second.stderr
    monkeypatch.setenv("PYTHONPATH", plugin_pythonpath(HERE))
    one = _run(bench, tmp_path / "one", ECHO, model="echo")
    assert (out / "slowecho_echo" / "oracle_implicit" / "all_results.json").read_bytes() == \
        one.all_results_path.read_bytes()


def test_api_providers_and_async_engine_are_refused(bench, tmp_path):
    for provider in ("openai", "gemini"):
        with pytest.raises(ConfigError, match="--ray applies to providers that run a model here"):
            evaluate(bench, provider=provider, model="gpt-5.4", output_path=tmp_path,
                     ray=RayReplicas(replicas=2))
    with pytest.raises(ConfigError, match="--vllm-engine batched"):
        evaluate(bench, provider="opensource", output_path=tmp_path,
                 provider_options={"engine": "async"}, ray=RayReplicas(replicas=2))


def test_replica_flags_need_ray_and_missing_ray_names_the_install_line(bench, tmp_path,
                                                                       monkeypatch, capsys):
    main = runpy.run_path(str(SCRIPT), run_name="stage03_eval")["main"]
    base = ["--benchmark-dir", str(bench), "--output-path", str(tmp_path), "--provider",
            "dummy", "--no-progress"]
    assert run_main(main, [*base, "--replicas", "2"]) == 2
    assert "--replicas / --gpus-per-replica need --ray" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(MissingDependencyError, match=r'pip install -e "\.\[ray\]"'):
        main([*base, "--ray", "--replicas", "2"])


def test_a_replica_no_node_can_hold_is_refused_at_once(cluster, bench, tmp_path):
    with pytest.raises(ConfigError, match=r"each replica asks for 1 GPU\(s\), but no node"):
        evaluate(bench, provider="dummy", output_path=tmp_path,
                 ray=RayReplicas(replicas=2, gpus_per_replica=1))
    assert not (tmp_path / "dummy_baseline" / "oracle_implicit" / "records.jsonl").exists()


def test_ray_is_imported_only_when_asked_for():
    code = ("import sys, runpy\n"
            "import chexpercept.evaluation.api, chexpercept.deformation, chexpercept.curation\n"
            "import utils.ray_pool\n"
            f"runpy.run_path({str(SCRIPT)!r}, run_name='x')\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(("provider", "option_order"), [
    ("oracle", "shuffled"), ("random", "shuffled"), ("oracle", "circular"),
    ("random", "circular")])
def test_option_orders_on_replicas_match_one_engine(cluster, bench, tmp_path, provider,
                                                    option_order):
    # docs/evaluation_protocol.md, "Option order": every runner honours every option order;
    # a circular rotation is one more step of its question's turn index
    one = _run(bench, tmp_path / "one", provider, option_order=option_order, seed=3)
    many = _run(bench, tmp_path / "many", provider, replicas=2, option_order=option_order,
                seed=3)
    _same_results(one, many)
    assert many.turns_requested == one.turns_requested
    records = _records(many)
    assert all("option_order" in r for r in records) == (option_order == "shuffled")
    if option_order == "circular":
        assert many.turns_requested > TOTAL_TURNS
        assert any(r["request_id"].startswith(f"{r['key_id']}@r") for r in records)
    if provider == "oracle":  # the answer key is the displayed truth, mapped back to 100 %
        assert all(r["correct"] for r in records)
