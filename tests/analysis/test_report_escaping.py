"""report.md escapes what runs and bundles put in it (issue 29 item 5).

A ``random`` Stage 03 run on the tiny bundle of ``tests/evaluation/stage03_bundle.py`` is
renamed to a folder holding an ``<img onerror>`` tag; its manifest's model and judge hold one
too, and its ``all_results.json`` gets an unfinished case whose reason holds a table pipe and
a ``javascript:`` link (a key_id holding them is refused outright: last test). Stage 04 writes report.md; it is rendered by markdown-it-py
with raw HTML allowed (as a permissive renderer would) and opened in headless Chromium: no
script ran, no element carries an ``onerror``, no link points at ``javascript:``, and the
tables keep their columns, the hostile names shown as text in their own cells. A second run
(``dummy``) keeps its ordinary name.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import runpy
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from chexpercept.analysis.markdown import escape_markdown
from chexpercept.analysis.runs import protocol_fields, run_label
from chexpercept.layouts import all_models_dir, all_results_path, repo_root, run_manifest_path
from utils.cli import run_main

markdown_it = pytest.importorskip("markdown_it")

ROOT = repo_root()
EVAL = ROOT / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"
ANALYZE = ROOT / "src" / "04_analyze_eval_result" / "01_analyze_model_performance.py"
_spec = importlib.util.spec_from_file_location(
    "stage03_bundle", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
stage03_bundle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage03_bundle)

TITLE = "chexpercept report"
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"
RUN_NAME = f"random_{HOSTILE}"
#: The run's label: its folder name and the judge its manifest names (``runs.run_label``).
LABEL = run_label(RUN_NAME, protocol_fields({"judge": {"model": HOSTILE}}))
KEY_ID = "k|[x](javascript:alert(1))"
#: The unfinished case's key_id in the run: a path-like or markup key_id is refused by Stage 04
#: before any report is written (layouts.key_id_problem), so the hostile text rides in the
#: reason; ``escape_markdown`` is checked on ``KEY_ID`` directly.
SAFE_KEY_ID = "effusion_s59999999_hostile_reason"
REASON = ("turn 2 | no answer [x](javascript:alert(1)) *bold* `tick`\n"
          "<img src=y onerror=\"document.title='pwned too'\">")
#: Chromium flags: no sandbox (root in containers), nothing that phones home
#: (as tests/viewer/conftest.py).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-default-apps",
                 "--no-default-browser-check"]


def _main(script, name):
    return runpy.run_path(str(script), run_name=name)["main"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> str:
    """report.md of the hostile ``random`` run and an ordinary ``dummy`` run."""
    tmp = tmp_path_factory.mktemp("escaping")
    bench = stage03_bundle.write_bundle(tmp / "bench")
    results = tmp / "results"
    for provider in ("random", "dummy"):
        argv = ["--benchmark-dir", str(bench), "--output-path", str(results), "--no-progress",
                "--provider", provider]
        assert run_main(_main(EVAL, "stage03_eval"), argv) == 0
    run = results / RUN_NAME
    shutil.move(results / "random_baseline", run)
    run_dir = run / "oracle_implicit"
    manifest = json.loads(run_manifest_path(run_dir).read_text(encoding="utf-8"))
    manifest["model"] = HOSTILE
    manifest["judge"] = {"model": HOSTILE}
    run_manifest_path(run_dir).write_text(json.dumps(manifest), encoding="utf-8")
    data = json.loads(all_results_path(run_dir).read_text(encoding="utf-8"))
    data[SAFE_KEY_ID] = {"unfinished": {"reason": REASON}}
    all_results_path(run_dir).write_text(json.dumps(data), encoding="utf-8")
    out = tmp / "out"
    argv = ["--results-dir", str(results), "--output-dir", str(out), "--benchmark-dir",
            str(bench), "--bootstrap", "0", "--no-viewer", "--no-progress", "--jobs", "1"]
    assert _main(ANALYZE, "stage04_analyze")(argv) == 0
    return (all_models_dir(out, "implicit") / "report.md").read_text(encoding="utf-8")


class _Dom(HTMLParser):
    """The title, every element's attributes and every table's rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.title = ""
        self.attrs: list[tuple[str, dict[str, str | None]]] = []
        self.tables: list[list[list[str]]] = []
        self._in_title = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.attrs.append((tag, dict(attrs)))
        if tag == "title":
            self._in_title = True
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._cell is not None:
            self._cell.append(data)


def _chromium() -> str:
    exe = os.environ.get("CHEXPERCEPT_CHROMIUM") or shutil.which("chromium") \
        or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("no chromium on PATH under CI (apt-get install -y chromium)")
        pytest.skip("no chromium on PATH (apt-get install -y chromium)")
    return exe


@pytest.fixture(scope="module")
def dom(report, tmp_path_factory) -> _Dom:
    """The DOM Chromium built from report.md rendered with raw HTML allowed, after it ran."""
    md = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table")
    page = tmp_path_factory.mktemp("rendered") / "report.html"
    page.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{TITLE}</title>"
                    f"</head><body>{md.render(report)}</body></html>", encoding="utf-8")
    try:
        res = subprocess.run([_chromium(), *CHROMIUM_ARGS, "--virtual-time-budget=3000",
                              "--dump-dom", page.as_uri()], capture_output=True, text=True,
                             timeout=90, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("Chromium did not finish the page in 90 s (a script opened a dialog?)")
    assert res.returncode == 0 and "<body" in res.stdout, res.stderr[-2000:]
    parsed = _Dom()
    parsed.feed(res.stdout)
    return parsed


def test_escape_markdown_leaves_ordinary_names_alone():
    for name in ("openai_gpt-4o.oracle_implicit", "random_baseline", "chance",
                 "hf_Qwen--Qwen2.5-VL-7B-Instruct_no_thinking", "fake:judge-model",
                 "random_baseline+order=shuffled", "/tmp/pytest-of-x/test_a0/bench"):
        assert escape_markdown(name) == name
    assert escape_markdown(KEY_ID) == r"k\|\[x\](javascript:alert(1))"
    assert escape_markdown("_x_ a*b\nc") == r"\_x\_ a\*b c"
    assert escape_markdown(HOSTILE) == "&lt;img src=x onerror=\"document.title='pwned'\"&gt;"


def test_report_md_holds_no_raw_html_or_link(report):
    assert "<img" not in report
    assert not re.search(r"(?<!\\)\]\(javascript:", report)  # only escaped brackets
    assert "&lt;img src=x onerror=" in report
    assert "| dummy_baseline |" in report  # an ordinary name is written as it was


def test_no_script_runs_in_the_rendered_report(dom):
    assert dom.title == TITLE
    assert [t for t, a in dom.attrs if any(k.startswith("on") for k in a)] == []
    images = [a.get("src") for t, a in dom.attrs if t == "img"]
    assert images and all(src.startswith("plot_") for src in images)  # the report's figures
    hrefs = [a.get("href") or "" for t, a in dom.attrs if t == "a"]
    assert hrefs and not [h for h in hrefs if h.strip().lower().startswith("javascript:")]


def test_tables_keep_their_columns_and_show_the_names_as_text(dom):
    for table in dom.tables:
        header, *rows = table
        assert all(len(row) == len(header) for row in rows), header
    runs = next(t for t in dom.tables if t[0][:3] == ["model", "provider", "model name"])
    header, *rows = runs
    by_name = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    assert set(by_name) == {"dummy_baseline", LABEL}
    hostile = by_name[LABEL]
    assert hostile["provider"] == "random" and hostile["model name"] == HOSTILE
    assert hostile["unfinished cases (missing, not scored)"] == "1"
    judge = next(t for t in dom.tables if t[0][:3] == ["model", "judge", "path"])
    assert {row[1] for row in judge[1:]} == {HOSTILE}


def test_a_markup_key_id_is_refused_before_any_report(tmp_path, capsys):
    """A key_id with a pipe and a link is no safe folder name: Stage 04 exits 2 naming it."""
    bench = stage03_bundle.write_bundle(tmp_path / "bench")
    results = tmp_path / "results"
    argv = ["--benchmark-dir", str(bench), "--output-path", str(results), "--no-progress",
            "--provider", "random"]
    assert run_main(_main(EVAL, "stage03_eval"), argv) == 0
    run_dir = results / "random_baseline" / "oracle_implicit"
    data = json.loads(all_results_path(run_dir).read_text(encoding="utf-8"))
    data[KEY_ID] = {"unfinished": {"reason": "x"}}
    all_results_path(run_dir).write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "out"
    argv = ["--results-dir", str(results), "--output-dir", str(out), "--benchmark-dir",
            str(bench), "--bootstrap", "0", "--no-viewer", "--no-progress", "--jobs", "1"]
    assert run_main(_main(ANALYZE, "stage04_analyze"), argv) == 2
    err = capsys.readouterr().err
    assert "not a safe folder name" in err and repr(KEY_ID) in err
    assert not (all_models_dir(out, "implicit") / "report.md").exists()
