"""Every script in benchmarks/ runs: its ``--help``, and a tiny setting of seconds.

``RUNS`` says, for each script found in ``benchmarks/`` (a ``.py`` file with a ``__main__``
block), how the suite runs it: a tiny command line and a line its output must hold, or the test
file that already runs it. A script added without an entry fails
``test_every_benchmark_script_has_an_entry``. Each run is a subprocess of this interpreter from
the repository root (``--help`` of every script, then the tiny setting; 120 s at most, the real
vLLM runs 600 s), with no network and no GPU. A script that needs vLLM (the engine venv), Ray or
Chromium runs its tiny setting only where that is here and is skipped with the reason otherwise
(Ray and Chromium fail instead under ``CI=true``, where CI installs them). Asserts the exit code
and the output line, never a timing (benchmarks/README.md).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
TIMEOUT_S = 120
#: The real vLLM runs (engine venv, opt in with --runengine): vLLM's CPU build takes minutes to
#: start a server or an engine; tests/engine allows 300 s for a server to be ready.
ENGINE_TIMEOUT_S = 600
#: Nothing phones home: no Hugging Face hub, no vLLM or Ray usage reports.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
               "RAY_USAGE_STATS_ENABLED": "0"}


@dataclass(frozen=True)
class Tiny:
    """Run ``benchmarks/<script> *args`` here; one output line must contain ``expect``."""

    args: tuple[str, ...]
    expect: str
    #: ``vllm``, ``ray`` or ``chromium``: run only where it is available.
    needs: str | None = None


@dataclass(frozen=True)
class Elsewhere:
    """Run by another test file (``test``, relative to the repository root), not again here."""

    test: str


RUNS: dict[str, Tiny | Elsewhere] = {
    "bench_analysis.py": Tiny(("--tiny",), "oracle_implicit: ours wall"),
    "bench_api_throughput.py": Tiny(
        ("--cases", "10", "--concurrency", "4", "--latency", "0.01"), "[kill at 50% + resume]"),
    "bench_faults.py": Tiny(
        ("--cases", "10", "--concurrency", "4", "--latency", "0.01", "--outage", "0.3",
         "--max-retries", "2"), "turns lost (no record after the re-run):"),
    "bench_hf_export.py": Tiny(("--tiny",), "load+validate:"),
    "bench_parser.py": Tiny(("--n", "200", "--repeats", "1"), "responses/s; target"),
    "bench_parser_corpus.py": Elsewhere("tests/evaluation/test_parser_corpus.py"),
    "bench_ray_replicas.py": Tiny(
        ("--cases", "10", "--replicas", "1", "--fixed-ms", "1", "--per-request-ms", "0"),
        "Ray overhead at 1 replica", needs="ray"),
    "bench_resume.py": Tiny(
        ("--cases", "20", "--concurrency", "4", "--latency-ms", "5", "--batch-latency-ms", "20"),
        "async: recorded at kill"),
    "bench_stage01.py": Tiny(("--tiny",), "morphological, 1 worker(s): 2 cases"),
    "bench_stage02.py": Tiny(("--tiny",), "validate alone:"),
    "bench_viewer.py": Tiny(("--cases", "50", "--runs", "1", "--repeat", "1"),
                            "open to first index (wall)", needs="chromium"),
    "bench_vllm_server.py": Tiny(
        ("--cases", "4", "--concurrency", "4", "--max-new-tokens", "4"),
        '"harness_over_bare_sdk"', needs="vllm"),
    "coverage_auroc.py": Elsewhere("tests/analysis/test_confidence.py"),
    "coverage_grid.py": Tiny(("--tiny",), "| before: mover on wilson | 91.7 %"),
    "coverage_paired.py": Elsewhere("tests/analysis/test_paired_coverage.py"),
    # tests/llm/test_vllm_provider.py runs its main() on a stub vllm; here the real engine
    "gpu_stage_batching.py": Tiny(
        ("--cases", "3", "--sequential-cases", "2", "--max-new-tokens", "4", "--max-model-len",
         "8192", "--enforce-eager", "--modes", "sequential,batched", "--repeat", "2"),
        '"repeats_requests_per_s"', needs="vllm"),
    "kv_projection.py": Tiny((), "| medgemma1.5 |"),
}


def _scripts() -> list[str]:
    """The scripts of benchmarks/: ``.py`` files with a ``__main__`` block."""
    return sorted(p.name for p in BENCH.glob("*.py")
                  if '__name__ == "__main__"' in p.read_text(encoding="utf-8"))


def _run(script: str, *args: str, timeout_s: float = TIMEOUT_S
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **OFFLINE_ENV})


def _unavailable(reason: str, *, ci_installs_it: bool) -> None:
    if ci_installs_it and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}, but CI installs it (scripts/run_tests.sh)")
    pytest.skip(reason)


def _require(needs: str | None) -> None:
    if needs == "vllm":
        pytest.importorskip("vllm", reason="vllm is not importable by this interpreter: run "
                            "with the engine venv (.venv-engine/bin/python -m pytest -m engine "
                            "--runengine)")
    elif needs == "ray" and importlib.util.find_spec("ray") is None:
        _unavailable("ray is not installed", ci_installs_it=True)
    elif needs == "chromium":
        if importlib.util.find_spec("playwright") is None:
            _unavailable("playwright is not installed", ci_installs_it=True)
        if not (os.environ.get("CHEXPERCEPT_CHROMIUM") or shutil.which("chromium")):
            _unavailable("no chromium (apt-get install -y chromium, or CHEXPERCEPT_CHROMIUM)",
                         ci_installs_it=True)


def test_every_benchmark_script_has_an_entry():
    assert sorted(RUNS) == _scripts(), (
        "benchmarks/ and RUNS differ: give each new script a tiny setting of seconds (a "
        "--tiny flag or small flags) and an entry in RUNS")


@pytest.mark.parametrize("script", sorted(n for n, r in RUNS.items() if isinstance(r, Elsewhere)))
def test_covered_elsewhere_is_run_there(script):
    test = ROOT / RUNS[script].test
    assert test.is_file() and script in test.read_text(encoding="utf-8"), test


@pytest.mark.parametrize("script", _scripts())
def test_help(script):
    done = _run(script, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:"), done.stdout[:500]


@pytest.mark.parametrize("script", [
    pytest.param(name, marks=[pytest.mark.engine] if run.needs == "vllm" else [])
    for name, run in sorted(RUNS.items()) if isinstance(run, Tiny)])
def test_tiny_setting_runs(script):
    run = RUNS[script]
    _require(run.needs)
    done = _run(script, *run.args,
                timeout_s=ENGINE_TIMEOUT_S if run.needs == "vllm" else TIMEOUT_S)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert any(run.expect in line for line in output.splitlines()), output[-3000:]
