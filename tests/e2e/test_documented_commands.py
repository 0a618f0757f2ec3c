"""Documented commands are tests: the shell blocks of README.md and docs/*.md that run a stage
script or a harness are run here as printed, from the repository root, or listed with a reason.

Each block that invokes ``inspect eval``, ``lmms-eval`` / ``python -m lmms_eval``, ``00_eval.py``,
a Stage 04 script (``src/04_analyze_eval_result/``), ``02_validate_bundle.py``, ``03_import_*``
or ``02_import_*`` must be in :data:`RUNS` (run here) or :data:`SKIPPED` (with the reason); a
new block fails :func:`test_every_documented_command_is_run_or_skipped_with_a_reason` until it
is classified, and an entry whose block is gone fails it too.

How a block is run (:func:`run_block`): its text, with only the listed placeholder
substitutions, goes to ``bash -e -c`` in a scratch copy of the repository root (every tracked
and untracked, not ignored, file of the working tree; ``PYTHONPATH`` points at the copy's
``src/`` and ``utils/``, so the code of the copy runs and its default output folders are the
copy's). Nothing is written into the repository. The copy holds the sample bundle where the
docs name it: ``outputs/sample_test/chexpercept`` (what ``bash sample_test.sh`` exports) and
``data/chexpercept`` (the released benchmark's place), both the Stage 03 test bundle
(tests/evaluation/stage03_bundle.py). Servers are loopback OpenAI-compatible servers on
127.0.0.1 (tests/llm/loopback.py). The environment: ``.venv/bin`` first on ``PATH``, caches and
inspect's data folder in tmp, no network (HF offline), no API key (``OPENAI_API_KEY`` unset).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


def _doc(name: str) -> str:
    """The repository path of docs page ``name`` (as ``Block.doc`` holds it)."""
    return f"docs/{name}.md"
#: A block is a documented command when it invokes one of these.
INVOKES = re.compile(r"inspect eval|lmms[-_]eval|\b00_eval\.py|04_analyze|02_validate_bundle\.py"
                     r"|\b0[23]_import_")
SAMPLE_BUNDLE = "outputs/sample_test/chexpercept"
RELEASED_BUNDLE = "data/chexpercept"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


loopback = _load("loopback_for_doc_commands", ROOT / "tests" / "llm" / "loopback.py")
stage03_bundle = _load("stage03_bundle_for_doc_commands",
                       ROOT / "tests" / "evaluation" / "stage03_bundle.py")


@dataclass(frozen=True)
class Block:
    """One shell block of a document: its file, first line (its name) and text."""

    doc: str
    line: int
    text: str

    @property
    def key(self) -> tuple[str, str]:
        """``(document, first command line)``: what :data:`RUNS` and :data:`SKIPPED` name."""
        return self.doc, self.text.splitlines()[0].strip()


SHELL_FENCES = ("bash", "sh", "shell", "console", "")


def _shell_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line number, text)`` of the fenced shell blocks (:data:`SHELL_FENCES`) and of
    the indented code blocks (4 spaces after a blank line, outside fences) of a Markdown file."""
    out, lines = [], text.splitlines(keepends=True)
    fence, start, body = None, 0, []
    indented: list[str] = []
    for i, line in enumerate(lines, start=1):
        if fence is not None:
            if line.strip() == "```":
                if fence in SHELL_FENCES:
                    out.append((start, "".join(body)))
                fence = None
            else:
                body.append(line)
            continue
        if line.startswith("```"):
            fence, start, body = line[3:].strip(), i + 1, []
            continue
        if line.startswith("    ") and (indented or lines[i - 2].strip() == ""):
            if not indented:
                start = i
            indented.append(line)
            continue
        if indented:
            out.append((start, textwrap.dedent("".join(indented))))
            indented = []
    return out


def documented_blocks() -> list[Block]:
    """Every shell block of the docs that invokes a command of :data:`INVOKES`, in order."""
    blocks = []
    for path in DOCS:
        doc = str(path.relative_to(ROOT))
        for line, body in _shell_blocks(path.read_text(encoding="utf-8")):
            if INVOKES.search(body):
                blocks.append(Block(doc, line, body))
    return blocks


@dataclass(frozen=True)
class Run:
    """How a block is run here.

    Attributes:
        substitutions: ``(as printed, as run)`` pairs, each a placeholder of the block (or a
            line of :data:`SKIPPED_LINES`, left out); the run value may name ``{port}`` (the
            loopback server's port) or ``{runs}`` (the fixture runs' folder).
        servers: The model each loopback server serves, by the name its port is given in the
            substitutions (``port``).
        fixture_runs: ``(folder in the copy, oracle settings)``: Stage 03 runs of the ``dummy``
            and ``random`` baselines on the sample bundle made there first (the runs a Stage
            04 command reads).
        expect: Files (globs, relative to the copy's root) the block must have written.
    """

    substitutions: tuple[tuple[str, str], ...] = ()
    servers: dict[str, str] = field(default_factory=dict)
    fixture_runs: tuple[str, tuple[str, ...]] | None = None
    expect: tuple[str, ...] = ()


#: The blocks run here, by (document, first line).
RUNS: dict[tuple[str, str], Run] = {
    # inspect_ai against a loopback server, then its log as a Stage 03 run folder
    (_doc("integrations"), "export LOCAL_API_KEY=EMPTY    # or the server's key"): Run(
        substitutions=(("NAME", "loopback-vlm"), ("PORT", "{port}"),
                       ("outputs/inspect_logs/<the .eval file>",
                        '"$(ls outputs/inspect_logs/*.eval)"')),
        servers={"port": "loopback-vlm"},
        expect=("outputs/inspect_logs/*.eval", "src/03_eval_vlm_on_chexpercept/outputs/"
                "inspect_openai-api--local--loopback-vlm/oracle_implicit/all_results.json")),
    # Stage 04's synopsis: every run of a results folder, all-models mode
    ("README.md", "python src/04_analyze_eval_result/01_analyze_model_performance.py "
                  "--results-dir DIR --oracle_setting S \\"): Run(
        substitutions=(("--results-dir DIR", "--results-dir outputs/runs"),
                       ("--oracle_setting S", "--oracle_setting none"),
                       ("[--benchmark-dir B]", f"--benchmark-dir {SAMPLE_BUNDLE}"),
                       ("[--provider P] ", ""), ("[--model M] ", ""), ("[--output-dir O] ", ""),
                       ("[--bootstrap 1000]", "--bootstrap 1000"), ("[--jobs N]", "--jobs 1"),
                       ("[--allow-other-bundle]", "")),
        fixture_runs=("outputs/runs", ("none",)),
        expect=("src/04_analyze_eval_result/all_models_oracle_none/report.md",
                "src/04_analyze_eval_result/all_models_oracle_none/viewer/index.html")),
    # Stage 03 against an OpenAI-compatible server (the server itself: SKIPPED_LINES)
    (_doc("engines"), "python -m vllm.entrypoints.openai.api_server --model /models/Qwen3-VL-8B"
                        " \\"): Run(
        substitutions=(("python -m vllm.entrypoints.openai.api_server --model "
                        "/models/Qwen3-VL-8B \\\n    --served-model-name qwen3-vl --host "
                        "127.0.0.1 --port 8000 \\\n    --max-model-len 32768 "
                        "--limit-mm-per-prompt '{\"image\": 7}'\n", ""),
                       ("http://127.0.0.1:8000/v1", "http://127.0.0.1:{port}/v1")),
        servers={"port": "qwen3-vl"},
        expect=("src/03_eval_vlm_on_chexpercept/outputs/openai_qwen3-vl/oracle_implicit/"
                "all_results.json",)),
    # the parquet export, and Stage 03 on it
    (_doc("hf_dataset"), "python src/02_qa_generation/03_export_hf_dataset.py --benchmark-dir "
                           "data/chexpercept --out outputs/hf/chexpercept"): Run(
        expect=("outputs/hf/chexpercept/data/*.parquet",
                "src/03_eval_vlm_on_chexpercept/outputs/random_*/oracle_implicit/"
                "all_results.json")),
    # the viewer: from Stage 04's defaults, and for any runs
    (_doc("viewer"), "python src/04_analyze_eval_result/01_analyze_model_performance.py "
                       "--oracle_setting implicit"): Run(
        fixture_runs=("src/03_eval_vlm_on_chexpercept/outputs", ("implicit",)),
        expect=("src/04_analyze_eval_result/all_models_oracle_implicit/viewer/index.html",)),
    (_doc("viewer"), "python src/04_analyze_eval_result/03_view_cases.py \\"): Run(
        substitutions=(("RESULTS/openai_gpt-5.4/oracle_implicit",
                        "{runs}/dummy_baseline/oracle_implicit"),
                       ("RESULTS/gemini_gemini-3.1-pro/oracle_implicit",
                        "{runs}/random_baseline/oracle_implicit"),
                       (" [--output-dir DIR]", "")),
        fixture_runs=("outputs/runs", ("implicit",)),
        expect=("outputs/runs/dummy_baseline/oracle_implicit/viewer/index.html",)),
}
#: Lines of a run block that are not run, and why (they are left out by its substitutions).
SKIPPED_LINES = {
    (_doc("engines"), "python -m vllm.entrypoints.openai.api_server"):
        "a vLLM server needs a GPU and the Qwen3-VL-8B weights; a loopback OpenAI-compatible "
        "server serving 'qwen3-vl' stands in for it",
}
_LMMS = ("lmms-eval's vllm model class needs a GPU and the Qwen/Qwen2.5-VL-7B-Instruct weights "
         "from the Hugging Face Hub (no network here)")
#: The blocks not run here, and why.
SKIPPED: dict[tuple[str, str], str] = {
    (_doc("integrations"), "export CHEXPERCEPT_BENCHMARK_DIR=outputs/sample_test/chexpercept"
                             "   # a bundle folder or its parquet export"):
        _LMMS + "; the converter needs that run's samples file. "
        "tests/integrations/test_lmms_eval_task.py::"
        "test_documented_command_through_the_lmms_eval_cli_then_the_converter runs both "
        "commands with a stand-in model class plugged into lmms-eval's CLI",
    (_doc("parsing"), "python src/03_eval_vlm_on_chexpercept/00_eval.py --benchmark-dir "
                        "data/chexpercept \\"):
        "run as printed by tests/llm/test_judge_end_to_end.py against two loopback servers, "
        "with the judge's own checks (not run twice)",
    (_doc("ray"), "python src/03_eval_vlm_on_chexpercept/00_eval.py --provider opensource "
                    "--model medgemma \\"):
        "needs a Ray cluster of 16 GPUs and the MedGemma weights (Ray replicas on CPU: "
        "tests/evaluation/test_ray_replicas.py)",
}


def test_every_documented_command_is_run_or_skipped_with_a_reason():
    found = {b.key: b for b in documented_blocks()}
    assert len(found) == len(documented_blocks())  # (document, first line) names one block
    unlisted = sorted(set(found) - set(RUNS) - set(SKIPPED))
    assert unlisted == [], "classify these blocks in RUNS or SKIPPED"
    stale = sorted((set(RUNS) | set(SKIPPED)) - set(found))
    assert stale == [], "these listed blocks are no longer in the docs"
    assert not set(RUNS) & set(SKIPPED)
    assert all(reason.strip() for reason in SKIPPED.values())
    for key, run in RUNS.items():
        for before, _ in run.substitutions:  # every substitution names text of the block
            assert before in found[key].text, (key, before)
    for (doc, line), reason in SKIPPED_LINES.items():
        assert any(d == doc and line in b.text for (d, _), b in found.items()), (doc, line)
        assert reason.strip()


def _copy_of_the_repository(dest: Path) -> Path:
    """Every tracked and untracked (not ignored) file of the working tree, copied to ``dest``."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _environment(copy: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "INSPECT_TELEMETRY", "INSPECT_API_KEY_OVERRIDE",
                        "INSPECT_EVAL_MODEL", "INSPECT_LOG_DIR", "LOCAL_BASE_URL",
                        "LOCAL_API_KEY", "CHEXPERCEPT_BENCHMARK_DIR", "PYTHONPATH")}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "PYTHONPATH": f"{copy / 'src'}{os.pathsep}{copy}",
                "CHEXPERCEPT_CACHE_DIR": str(tmp / "cache"), "XDG_DATA_HOME": str(tmp / "xdg"),
                "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "INSPECT_DISPLAY": "none",
                "MPLBACKEND": "Agg", "NO_COLOR": "1"})
    return env


def _fixture_runs(copy: Path, folder: str, settings: tuple[str, ...]) -> None:
    from chexpercept.evaluation.api import evaluate

    for setting in settings:
        for provider in ("dummy", "random"):
            evaluate(copy / SAMPLE_BUNDLE, provider=provider, output_path=copy / folder,
                     oracle_setting=setting, seed=0)


def run_block(block: Block, run: Run, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run ``block`` as printed (``run``'s substitutions only) from a copy of the repository."""
    copy = _copy_of_the_repository(tmp / "root")
    for where in (SAMPLE_BUNDLE, RELEASED_BUNDLE):
        stage03_bundle.write_bundle(copy / where)
    if run.fixture_runs is not None:
        _fixture_runs(copy, *run.fixture_runs)
    servers = {name: loopback.LoopbackServer(models=[model]).start()
               for name, model in run.servers.items()}
    try:
        values = {name: str(server.port) for name, server in servers.items()}
        values["runs"] = run.fixture_runs[0] if run.fixture_runs else ""
        text = block.text
        for before, after in run.substitutions:
            text = text.replace(before, after.format(**values))
        done = subprocess.run(["bash", "-e", "-c", text], cwd=copy,
                              env=_environment(copy, tmp), capture_output=True, text=True,
                              timeout=600)
    finally:
        for server in servers.values():
            server.stop()
    assert done.returncode == 0, (f"{block.doc}:{block.line} exited {done.returncode}:\n{text}\n"
                                  f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    for pattern in run.expect:
        assert list(copy.glob(pattern)), f"{block.doc}:{block.line}: nothing at {pattern}"
    return done


@pytest.mark.parametrize("key", list(RUNS), ids=lambda k: f"{k[0]}:{k[1][:40]}")
def test_documented_command_runs_as_printed(key, tmp_path):
    blocks = {b.key: b for b in documented_blocks()}
    if key not in blocks:
        pytest.fail(f"{key} is no longer in the docs")
    block = blocks[key]
    if "inspect eval" in block.text:
        pytest.importorskip("inspect_ai")
    if "03_export_hf_dataset" in block.text:
        pytest.importorskip("datasets")
    run_block(block, RUNS[key], tmp_path)
