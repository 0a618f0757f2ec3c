"""Python examples are tests: every Python example of the docs and the docstrings runs here as
printed, or is listed with the reason it cannot (docs/README.md, "Examples").

What counts as an example:

- in ``README.md`` and ``docs/*.md``, every fenced block whose info string is ``python`` (or
  ``py``, ``python3``). A block that is not meant to run as it stands (a fragment, a signature)
  carries ``<!-- not-run: REASON -->`` on the line just above its opening fence; that marker
  is the one convention, and its reason must not be empty;
- in ``src/`` and ``utils/``, every literal block (the indented block after a line ending in
  ``::``) of a module, class or function docstring that parses as Python and imports
  something (the shell examples of the CLI modules do not parse, so they are not examples).

Each example is in exactly one place: a step of :data:`CHAINS` (run here), :data:`NOT_RUN`
(code that needs what CI lacks: a real API key, a GPU, real weights; with the reason), or
marked ``not-run`` in its document. An unclassified example fails
:func:`test_every_python_example_is_run_or_listed`, and so does a listed one that is gone.

How an example runs (:func:`_run_example`): its text, unchanged, is written to a file outside
the chain's folder and run as a script from that folder (``python example.py``: a fresh
interpreter, ``__name__ == "__main__"``, and worker processes that are spawned import the file
again, as they would for a user who pastes it into a file). A chain is one scratch folder and
its steps run in order in it, each reading what the earlier ones wrote:

- ``bundle``: a folder holding the Stage 03 test bundle (tests/evaluation/stage03_bundle.py)
  at ``data/chexpercept``, the released benchmark's place;
- ``repository``: a copy of the repository (every tracked and untracked, not ignored, file;
  ``PYTHONPATH`` names the copy's ``src/`` and root, so ``${ROOT}`` of the config is the copy)
  with the synthetic sample fixture (:func:`chexpercept.synth.make_fixtures`, what
  ``bash sample_test.sh`` generates) at ``data/sample_test/generated``; the build stages write
  their default ``src/NN_*/outputs`` folders in the copy;
- ``empty``: an empty folder.

The environment has no API key, the Hugging Face Hub offline and matplotlib's Agg backend.
Nothing is written into the repository.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from chexpercept.synth import make_fixtures

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
CODE_ROOTS = (ROOT / "src", ROOT / "utils")
PYTHON_FENCES = ("python", "py", "python3")
NOT_RUN_MARKER = re.compile(r"^\s*<!--\s*not-run:(?P<reason>.*?)-->\s*$")
#: Seconds one example may take before it counts as hung (a spawned pool without the main
#: guard restarts its workers for ever).
EXAMPLE_TIMEOUT_S = 120


@dataclass(frozen=True)
class Example:
    """One Python example: where it is, its first line's number, its text and its marker.

    Attributes:
        source: The file, relative to the repository root.
        line: Its first line of code in that file (1-based).
        text: The code, dedented.
        not_run: The reason of a ``<!-- not-run: ... -->`` marker above it, else None.
    """

    source: str
    line: int
    text: str
    not_run: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        """``(file, first line of code)``: what :data:`CHAINS` and :data:`NOT_RUN` name."""
        return self.source, self.text.strip().splitlines()[0].strip()


def markdown_examples(path: Path, source: str | None = None) -> list[Example]:
    """The fenced Python blocks of one Markdown file (:data:`PYTHON_FENCES`), in order."""
    out, lines = [], path.read_text(encoding="utf-8").splitlines(keepends=True)
    source = str(path.relative_to(ROOT)) if source is None else source
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)(`{3,})\s*([\w+-]*)", lines[i])
        if not opening:
            i += 1
            continue
        _, ticks, info = opening.groups()
        end = i + 1
        while end < len(lines) and not (lines[end].strip().startswith(ticks)
                                        and lines[end].strip().strip("`") == ""):
            end += 1
        if info.lower() in PYTHON_FENCES:
            marker = NOT_RUN_MARKER.match(lines[i - 1]) if i else None
            body = textwrap.dedent("".join(lines[i + 1:end]))
            out.append(Example(source, i + 2, body,
                               marker.group("reason").strip() if marker else None))
        i = end + 1
    return out


def _literal_blocks(doc: str) -> list[tuple[int, str]]:
    """``(line offset in doc, dedented text)`` of the ``::`` literal blocks of a docstring."""
    lines, out, i = doc.expandtabs().splitlines(), [], 0
    while i < len(lines):
        if not lines[i].rstrip().endswith("::"):
            i += 1
            continue
        base = len(lines[i]) - len(lines[i].lstrip())
        j = i + 1
        while j < len(lines) and (not lines[j].strip()
                                  or len(lines[j]) - len(lines[j].lstrip()) > base):
            j += 1
        body = lines[i + 1:j]
        first = next((k for k, text in enumerate(body) if text.strip()), 0)
        out.append((i + 1 + first, textwrap.dedent("\n".join(body)).strip("\n") + "\n"))
        i = j
    return out


def _is_python_example(text: str) -> bool:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.Import | ast.ImportFrom) for node in ast.walk(tree))


def docstring_examples(path: Path) -> list[Example]:
    """The Python literal blocks of every docstring of one module, in order."""
    out = []
    source = str(path.relative_to(ROOT))
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                          | ast.AsyncFunctionDef):
            continue
        doc = ast.get_docstring(node, clean=True)
        if not doc or not node.body:
            continue
        for offset, text in _literal_blocks(doc):
            if _is_python_example(text):
                out.append(Example(source, node.body[0].lineno + offset, text))
    return sorted(out, key=lambda example: example.line)


def python_examples() -> list[Example]:
    """Every Python example of the docs and of the docstrings of ``src/`` and ``utils/``."""
    found = [example for path in DOCS for example in markdown_examples(path)]
    for root in CODE_ROOTS:
        for path in sorted(root.rglob("*.py")):
            found.extend(docstring_examples(path))
    return found


def _doc(name: str) -> str:
    """The repository path of docs page ``name`` (as :attr:`Example.source` holds it)."""
    return f"docs/{name}.md"


@dataclass(frozen=True)
class Step:
    """One example of a chain and what it must leave behind.

    Attributes:
        example: The example's :attr:`Example.key`.
        expect: Files (globs, relative to the chain's folder) it must have written.
        prints: Text its standard output must hold.
    """

    example: tuple[str, str]
    expect: tuple[str, ...] = ()
    prints: tuple[str, ...] = ()


@dataclass(frozen=True)
class Setup:
    """Code of this test run between two examples of a chain, like an example.

    Attributes:
        why: What it stands for.
        code: The Python script.
    """

    why: str
    code: str


@dataclass(frozen=True)
class Chain:
    """Examples run in order in one scratch folder (``bundle``, ``repository`` or ``empty``)."""

    folder: str
    steps: tuple[Step | Setup, ...]


#: Stage 00.01 to 00.04 between the Stage 00.00 and Stage 01.00 examples: candidate masks,
#: then the expert review, auto-approved as the smoke run does (scripts/lib/smoke.sh,
#: smoke_review), and the distribution to two annotators.
REVIEW = Setup("the Stage 00 review of bash sample_test.sh", '''\
import runpy

from chexpercept.config_schema import load_chexpercept_config
from chexpercept.curation import (
    distribute_labeling,
    generate_candidate_masks,
    prepare_negative_sheet,
)
from chexpercept.layouts import CurationLayout, stage_output_dir

cfg = load_chexpercept_config("cfg/config_sample_test.yaml")
layout = CurationLayout(stage_output_dir("00", cfg.path.work_dir))
autofill = runpy.run_path("scripts/sample_test/autofill_optimal.py", run_name="fill")["main"]
print(generate_candidate_masks(cfg).line())
assert autofill([str(layout.positive_sheet()), "--no-progress"]) == 0
prepare_negative_sheet(cfg)
assert autofill([str(layout.negative_sheet), "--no-progress"]) == 0
distribute_labeling(cfg, num_annotators=2)
''')
S00, S01, S02 = ("src/00_source_data_curation/outputs", "src/01_mask_deformation/outputs",
                 "src/02_qa_generation/outputs")
#: The examples run here, chain by chain.
CHAINS: dict[str, Chain] = {
    # Stage 03 then Stage 04, from their modules' docstrings
    "stage03_04_docstrings": Chain("bundle", (
        Step(("src/chexpercept/evaluation/api.py",
              "from chexpercept.evaluation.api import evaluate"),
             expect=("outputs/03/random_baseline/oracle_none/all_results.json",),
             prints=("cases: 7/7 finished",)),
        Step(("src/chexpercept/analysis/api.py", "from chexpercept.analysis.api import analyze"),
             expect=("outputs/04/all_models_oracle_none/report.md",),
             prints=("random_baseline",)),
    )),
    # the same from docs/python_api.md, in one block
    "python_api_evaluate": Chain("bundle", (
        Step((_doc("python_api"), "from chexpercept.evaluation.api import evaluate"),
             expect=("outputs/03/random_baseline/oracle_none/all_results.json",
                     "outputs/04/all_models_oracle_none/report.md"),
             prints=("cases: 7/7 finished", "random_baseline")),
    )),
    # the build stages on the sample config, each from its api.py docstring, then the
    # Stage 02 export (docs/python_api.md)
    "build_stages": Chain("repository", (
        Step(("src/chexpercept/curation/api.py",
              "from chexpercept.config_schema import load_chexpercept_config"),
             expect=(f"{S00}/sampling_summary.json", f"{S00}/cxr_1024/*"),
             prints=("done:",)),
        REVIEW,
        Step(("src/chexpercept/anatomy/api.py",
              "from chexpercept.anatomy import generate_anatomy_masks"),
             expect=(f"{S01}/anatomy_summary.json",)),
        Step(("src/chexpercept/deformation/api.py",
              "from chexpercept.config_schema import load_chexpercept_config"),
             expect=(f"{S01}/deformation_results/deformation_results.json",),
             prints=("failed 0",)),
        Step(("src/chexpercept/qa/api.py",
              "from chexpercept.config_schema import load_chexpercept_config"),
             expect=(f"{S02}/qa_results/qa_results.json", "outputs/bench/chexpercept.json")),
        Step((_doc("python_api"),
              "from chexpercept.config_schema import load_chexpercept_config"),
             expect=("outputs/bench/chexpercept.json", "outputs/bench/stats.csv"),
             prints=("0 file(s) linked",)),
    )),
    # a provider built from a config object and from the factory (no request is sent)
    "provider_settings": Chain("empty", (
        Step((_doc("engines"), "from utils.llm import create_model")),
    )),
}
#: Examples that cannot run here, and why (none at present: every example runs).
NOT_RUN: dict[tuple[str, str], str] = {}


def _run_keys() -> list[tuple[str, str]]:
    return [step.example for chain in CHAINS.values() for step in chain.steps
            if isinstance(step, Step)]


def test_every_python_example_is_run_or_listed():
    examples = python_examples()
    found = {example.key: example for example in examples}
    assert len(found) == len(examples), "two examples of one file start with the same line"
    run = _run_keys()
    assert len(run) == len(set(run)), "an example is run in two steps"
    marked = {key for key, example in found.items() if example.not_run is not None}
    empty = sorted(f"{found[key].source}:{found[key].line}" for key in marked
                   if not found[key].not_run)
    assert empty == [], "give the reason in <!-- not-run: REASON -->"
    unlisted = sorted(set(found) - set(run) - set(NOT_RUN) - marked)
    assert unlisted == [], "run these examples in CHAINS, or list them in NOT_RUN with a reason"
    stale = sorted((set(run) | set(NOT_RUN)) - set(found))
    assert stale == [], "these listed examples are no longer in the docs or docstrings"
    twice = sorted((set(run) & set(NOT_RUN)) | (marked & (set(run) | set(NOT_RUN))))
    assert twice == [], "an example is run, listed in NOT_RUN or marked not-run: one of them"
    assert all(reason.strip() for reason in NOT_RUN.values())


def test_the_extractors_read_the_conventions(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Text\n\n```python\nimport os\n```\n\n<!-- not-run: a fragment -->\n"
                    "```py\nmodel.generate(requests)\n```\n\n```bash\npython -c 1\n```\n"
                    "- item\n\n  ```python\n  import sys\n  ```\n", encoding="utf-8")
    found = [(e.line, e.text, e.not_run) for e in markdown_examples(page, "page.md")]
    assert found == [(4, "import os\n", None), (9, "model.generate(requests)\n", "a fragment"),
                     (18, "import sys\n", None)]
    doc = ("One line.\n\nShell::\n\n    python src/x.py --flag\n\nPython::\n\n"
           "    from a import b\n    b()\n\nAfter.\n")
    blocks = [text for _, text in _literal_blocks(doc) if _is_python_example(text)]
    assert blocks == ["from a import b\nb()\n"]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


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


def _folder(kind: str, tmp: Path, fixture_dir: Path) -> tuple[Path, str | None]:
    """The chain's scratch folder, and the ``PYTHONPATH`` its examples run with."""
    if kind == "bundle":
        bundle = _load("stage03_bundle_for_doc_examples",
                       ROOT / "tests" / "evaluation" / "stage03_bundle.py")
        bundle.write_bundle(tmp / "folder" / "data" / "chexpercept")
        return tmp / "folder", None
    if kind == "repository":
        copy = _copy_of_the_repository(tmp / "root")
        (copy / "data" / "sample_test" / "generated").symlink_to(
            make_fixtures(fixture_dir, 0).paths.root, target_is_directory=True)
        return copy, f"{copy / 'src'}{os.pathsep}{copy}"
    assert kind == "empty", kind
    (tmp / "folder").mkdir()
    return tmp / "folder", None


#: Variables of the environment that would reach a real service or another folder.
DROPPED_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY",
                     "AZURE_OPENAI_ENDPOINT", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                     "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CHEXPERCEPT_WORK_DIR",
                     "CHEXPERCEPT_BENCHMARK_DIR", "PYTHONPATH")


def _environment(tmp: Path, pythonpath: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_VARIABLES}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "CHEXPERCEPT_CACHE_DIR": str(tmp / "cache"), "HF_HUB_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1", "MPLBACKEND": "Agg",
                "CHEXPERCEPT_LOG_LEVEL": "WARNING"})
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def _run_example(name: str, code: str, folder: Path, env: dict[str, str],
                 scripts: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as the script ``scripts/<name>.py`` from ``folder``; kill its process group
    (spawned workers included) when it outlives :data:`EXAMPLE_TIMEOUT_S`."""
    script = scripts / f"{name}.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(script)], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=EXAMPLE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{name} ran past {EXAMPLE_TIMEOUT_S} s (a script whose call spawns worker "
                    f"processes needs `if __name__ == \"__main__\":`):\n{code}\n{err[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("chain_name", list(CHAINS))
def test_python_examples_run_as_printed(chain_name, tmp_path, tmp_path_factory):
    examples = {example.key: example for example in python_examples()}
    chain = CHAINS[chain_name]
    # the fixture folder tests/curation and tests/scripts share (built once per session)
    folder, pythonpath = _folder(chain.folder, tmp_path,
                                 tmp_path_factory.getbasetemp() / "synth_fixture_seed0")
    env, scripts = _environment(tmp_path, pythonpath), tmp_path / "examples"
    scripts.mkdir()
    for index, step in enumerate(chain.steps):
        if isinstance(step, Setup):
            where, code = f"setup: {step.why}", step.code
        else:
            if step.example not in examples:
                pytest.fail(f"{step.example} is no longer in the docs or docstrings")
            example = examples[step.example]
            where, code = f"{example.source}:{example.line}", example.text
        done = _run_example(f"step{index}", code, folder, env, scripts)
        assert done.returncode == 0, (f"{where} exited {done.returncode}:\n{code}\n"
                                      f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        if isinstance(step, Step):
            for pattern in step.expect:
                assert list(folder.glob(pattern)), f"{where}: nothing at {pattern}"
            for text in step.prints:
                assert text in done.stdout, f"{where} did not print {text!r}:\n{done.stdout}"
