"""Stage 03 on a local Ray cluster: N replicas give a one-engine run's results and run folder.

One cluster for the module (``tests/ray_cluster.py``). Each test compares a replicated run's
``all_results.json`` byte for byte with a one-engine run of the same command, and reads the
records (each names its replica) and the plugin's request log (each ``generate`` call with its
process id) to check that a case's turns all ran on one replica and that each turn index was
one call per replica. A replica that SIGKILLs itself mid-batch is restarted and only its batch
is asked again; one that keeps dying stops the run naming it, and a re-run resumes; a driver
killed mid-run resumes as a one-engine run does.
"""

from __future__ import annotations

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

from chexpercept import io
from chexpercept.errors import ConfigError
from chexpercept.evaluation import EvalSettings, load_bundle, select_key_ids, validate_bundle
from chexpercept.evaluation.api import evaluate
from chexpercept.evaluation.replicas import RayReplicas, run_replicated, start_replicas
from utils.cli import run_main
from utils.errors import EngineStartError, MissingDependencyError, ProviderError

require_ray()

from ray_plugin import DIE_ALWAYS_ENV, DIE_AT_ENV, DIE_MARKER_ENV  # noqa: E402

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parents[1] / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"
ECHO = "stage03_plugin:SlowEchoModel"
DYING = "ray_plugin:DyingEchoModel"
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
    return io.read_jsonl(io.records_path(summary.run_dir))


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
    manifest = json.loads(io.run_manifest_path(many.run_dir).read_text(encoding="utf-8"))
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


def test_a_killed_replica_is_restarted_and_only_its_batch_asked_again(cluster, bench, tmp_path,
                                                                      plugin_env, monkeypatch):
    marker = tmp_path / "died"
    monkeypatch.setenv(DIE_AT_ENV, "cardiomegaly_s50000004_positive_0/"
                                   "contour_revision_qa_expansion")
    monkeypatch.setenv(DIE_MARKER_ENV, str(marker))
    many = _run(bench, tmp_path / "many", DYING, model="echo", replicas=2)
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
    one = _run(bench, tmp_path / "one", ECHO, model="echo")
    _same_results(one, many)


def test_a_replica_that_keeps_dying_stops_the_run_and_a_rerun_resumes(cluster, bench, tmp_path,
                                                                      plugin_env, monkeypatch):
    monkeypatch.setenv(DIE_AT_ENV, "effusion_s50000001_positive_0/contour_evaluation_qa")
    monkeypatch.setenv(DIE_MARKER_ENV, str(tmp_path / "died"))
    monkeypatch.setenv(DIE_ALWAYS_ENV, "1")
    with pytest.raises(ProviderError, match=r"replica \d on node .* died 2 time\(s\), more "
                                            r"than --ray-max-restarts 1"):
        _run(bench, tmp_path / "many", DYING, model="echo", replicas=2, max_restarts=1)
    records = io.read_jsonl(io.records_path(tmp_path / "many" / "slowecho_echo"
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
    assert not io.run_manifest_path(run_dir).exists()
    assert not io.records_path(run_dir).exists()
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
    records = io.records_path(out / "slowecho_echo" / "oracle_implicit")
    cmd = [sys.executable, str(SCRIPT), *argv]
    with open(tmp_path / "first.log", "wb") as err:
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        n_at_kill = _kill_when_half_done(first, records)
    assert first.returncode == -signal.SIGKILL and n_at_kill < TOTAL_TURNS
    second = subprocess.run(cmd, env={**env, SLEEP_ENV: "0"}, capture_output=True, text=True,
                            timeout=120)
    assert second.returncode == 0, second.stderr[-3000:]
    done = io.read_jsonl(records)
    assert len(done) == TOTAL_TURNS == len({(r["key_id"], r["turn"]) for r in done})
    assert "(already done: " in second.stderr
    monkeypatch.setenv("PYTHONPATH", plugin_pythonpath(HERE))
    one = _run(bench, tmp_path / "one", ECHO, model="echo")
    assert (out / "slowecho_echo" / "oracle_implicit" / "all_results.json").read_bytes() == \
        one.all_results_path.read_bytes()


def test_api_providers_and_async_engine_are_refused(bench, tmp_path):
    for provider in ("openai", "gemini"):
        with pytest.raises(ConfigError, match="--ray applies to the local engines"):
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
