"""The viewer's data files (no browser): what the index holds, lazy chunks, images, secrets,
the Stage 04 integration and the two CLIs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from viewer_runs import load_records, load_results

from chexpercept.analysis import read_case_table
from chexpercept.analysis.api import analyze
from chexpercept.analysis.case_table import METRIC_INDEX
from chexpercept.analysis.viewer import ViewerRun, write_viewer
from chexpercept.errors import InputError
from chexpercept.evaluation import SYSTEM_PROMPT

ROOT = Path(__file__).resolve().parents[2]


def _index(viewer_dir: Path) -> dict:
    text = (viewer_dir / "data" / "index.js").read_text(encoding="utf-8")
    prefix = "window.CHEX_INDEX = "
    assert text.startswith(prefix) and text.endswith(";\n")
    return json.loads(text[len(prefix):-2])


def _chunks(viewer_dir: Path, run: int) -> dict:
    out = {}
    for path in sorted((viewer_dir / "data").glob(f"r{run}_c*.js")):
        text = path.read_text(encoding="utf-8")
        head = f"window.chexChunk({run},{int(path.stem.split('_c')[1])},"
        assert text.startswith(head) and text.endswith(");\n")
        out.update(json.loads(text[len(head):-3]))
    return out


def _runs(viewer_runs):
    return [ViewerRun(label.split(".oracle_")[0], label.split(".oracle_")[1], path)
            for label, path in viewer_runs["runs"].items()]


def test_index_matches_the_analysis_and_the_records(viewer_runs, tmp_path):
    runs = _runs(viewer_runs)
    page = write_viewer(runs, tmp_path, system_prompt=SYSTEM_PROMPT, chunk_size=2)
    index = _index(page.parent)
    results = load_results(runs[0].run_dir)
    assert index["keys"] == list(results)
    assert [r["label"] for r in index["runs"]] == [r.label for r in runs]
    for r, run in enumerate(runs):
        table, _ = read_case_table(run.run_dir, run.name)
        depth = dict(zip(table.key_ids, table.values[:, METRIC_INDEX["depth"]], strict=True))
        # the same depth as Stage 04's tables, cardiomegaly bonus included
        assert index["results"][r]["depth"] == [int(depth[k]) for k in index["keys"]]
        for i, key in enumerate(index["keys"]):
            code = index["results"][r]["codes"][i]
            res = load_results(run.run_dir)[key]
            assert code[0] == ("1" if res["detection_qa"]["correct"] else "0")
    # chunks: every case of every run in exactly one file of at most chunk_size cases
    files = sorted((page.parent / "data").glob("r0_c*.js"))
    assert len(files) == 4 and index["runs"][0]["chunks"] == [0, 1, 2, 3]
    details = _chunks(page.parent, 0)
    assert list(details) == index["keys"]
    # the conversation as sent: turn order, raw replies and parser fields from records.jsonl
    records = {(x["key_id"], x["turn"]): x for x in load_records(runs[0].run_dir)}
    for key, detail in details.items():
        idx = results[key]["_chat_history_idx"]
        assert [t["name"] for t in detail["turns"]] == sorted(idx, key=idx.get)
        for t in detail["turns"]:
            rec = records[(key, t["name"])]
            assert (t["raw"], t["status"], t["detail"], t["correct"]) == (
                rec["raw"], rec["status"], rec["detail"], rec["correct"])
    # the system prompt is shown only where the manifest's hash matches
    assert index["runs"][0]["system_prompt"] == SYSTEM_PROMPT
    other = write_viewer(runs[:1], tmp_path / "other", system_prompt="not the prompt")
    assert _index(other.parent)["runs"][0]["system_prompt"] is None


def test_viewer_files_are_byte_stable_and_leave_no_stale_chunk(viewer_runs, tmp_path):
    runs = _runs(viewer_runs)
    page = write_viewer(runs, tmp_path, chunk_size=2)
    first = {p.name: p.read_bytes() for p in (page.parent / "data").iterdir()}
    write_viewer(runs, tmp_path, chunk_size=2)
    assert {p.name: p.read_bytes() for p in (page.parent / "data").iterdir()} == first
    write_viewer(runs[:1], tmp_path, chunk_size=100, image_max_side=32)
    assert sorted(p.name for p in (page.parent / "data").iterdir()) == ["index.js", "r0_c0.js"]
    assert (page.parent / "images").is_dir()
    write_viewer(runs[:1], tmp_path)  # linking again: the earlier copies go
    assert not (page.parent / "images").exists()


def test_images_are_linked_relative_or_copied_small(viewer_runs, tmp_path):
    runs = _runs(viewer_runs)
    page = write_viewer(runs[:1], tmp_path / "linked")
    details = _chunks(page.parent, 0)
    urls = [im["url"] for d in details.values() for t in d["turns"] for im in t["images"]]
    assert urls and all(u and not u.startswith(("/", "file:", "http")) for u in urls)
    assert all((page.parent / u).resolve().is_file() for u in urls)
    assert not (page.parent / "images").exists()  # nothing duplicated
    small = write_viewer(runs[:1], tmp_path / "copied", image_max_side=64)
    copies = sorted((small.parent / "images").iterdir())
    assert copies and all(max(Image.open(p).size) <= 64 for p in copies)
    urls = {im["url"] for d in _chunks(small.parent, 0).values() for t in d["turns"]
            for im in t["images"]}
    assert urls == {f"images/{p.name}" for p in copies}


#: The one case of :func:`_run_showing`; its images lie in :func:`_case_folder`.
SHOWN_KEY = "effusion_s1_negative_0"


def _case_folder(tmp_path: Path) -> Path:
    """``<bundle>/chexpercept/<SHOWN_KEY>/detection_qa/``: the viewer shows bundle files only."""
    folder = tmp_path / "bench" / "chexpercept" / SHOWN_KEY / "detection_qa"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _run_showing(tmp_path: Path, images: list[Path]) -> ViewerRun:
    """A one-case run folder whose only turn was sent with ``images``."""
    run_dir = tmp_path / "run" / "oracle_none"
    run_dir.mkdir(parents=True)
    record = {"qa_path": "lesion_free", "chat_history": [["Is there effusion?",
                                                          [str(p) for p in images], "Answer: 2"]],
              "_chat_history_idx": {"detection_qa": 0}}
    (run_dir / "all_results.json").write_text(json.dumps({SHOWN_KEY: record}))
    return ViewerRun("run", "none", run_dir)


def test_copied_images_go_through_the_one_loader(tmp_path):
    """A 16-bit CXR is rescaled (not clipped white); an EXIF-rotated JPEG is copied upright."""
    sixteen = _case_folder(tmp_path) / "xray16.png"
    gradient = np.linspace(1000, 4000, 48 * 32).reshape(32, 48).astype(np.uint16)
    Image.fromarray(gradient).save(sixteen)  # 12-bit data in 16: above 255 everywhere
    rotated = _case_folder(tmp_path) / "rotated.jpg"
    stored = np.zeros((20, 40), np.uint8)
    stored[:8, :8] = 255  # bright block at the stored top-left
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned 90 degrees clockwise: the block at the top-right
    Image.fromarray(stored).save(rotated, exif=exif, quality=95)
    page = write_viewer([_run_showing(tmp_path, [sixteen, rotated])], tmp_path / "out",
                        image_max_side=64)
    shown = _chunks(page.parent, 0)[SHOWN_KEY]["turns"][0]["images"]
    copies = [page.parent / im["url"] for im in shown]
    with Image.open(copies[0]) as im:
        values = np.asarray(im.convert("L"))
    assert values.min() < 30 and values.max() > 225, (values.min(), values.max())
    with Image.open(copies[1]) as im:
        assert im.size == (20, 40) and im.getexif().get(0x0112) is None
        upright = np.asarray(im.convert("L"))
    assert upright[:6, -6:].mean() > 200 and upright[:6, :6].mean() < 50
    assert upright[-6:, -6:].mean() < 50


def test_an_unreadable_image_to_copy_names_the_file(tmp_path):
    broken = _case_folder(tmp_path) / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(InputError, match="broken.png"):
        write_viewer([_run_showing(tmp_path, [broken])], tmp_path / "out", image_max_side=64)


def test_no_secret_reaches_the_viewer(viewer_runs, tmp_path):
    run = _runs(viewer_runs)[0]
    copy = tmp_path / "run" / "oracle_implicit"
    shutil.copytree(run.run_dir, copy)
    manifest = json.loads((copy / "run_manifest.json").read_text())
    manifest["provider_settings"]["api_key"] = "sk-test-SECRET-123"
    manifest["provider_settings"]["authorization"] = "Bearer tok-SECRET-456"
    manifest["provider_runtime"] = {"base_url": "https://user:pw-SECRET-789@example.org/v1"}
    (copy / "run_manifest.json").write_text(json.dumps(manifest))
    page = write_viewer([ViewerRun("run", "implicit", copy)], tmp_path / "out")
    text = "".join(p.read_text(encoding="utf-8") for p in page.parent.rglob("*")
                   if p.is_file())
    for secret in ("sk-test-SECRET-123", "tok-SECRET-456", "pw-SECRET-789", "example.org"):
        assert secret not in text
    shown = _index(page.parent)["runs"][0]["manifest"]
    assert shown["model"] == manifest["model"] and shown["git_commit"] == manifest["git_commit"]
    assert shown["provider_settings"]["api_key"] == "<redacted>"


def test_bad_input_is_refused_with_the_path(tmp_path):
    with pytest.raises(InputError, match="at least one run"):
        write_viewer([], tmp_path)
    with pytest.raises(InputError, match="all_results.json"):
        write_viewer([ViewerRun("x", "none", tmp_path / "nothing")], tmp_path)


def test_stage04_writes_the_viewer_and_the_report_links_it(viewer_runs, tmp_path):
    result = analyze(viewer_runs["results"], "implicit", output_dir=tmp_path,
                     benchmark_dir=viewer_runs["bench"], bootstrap=20, seed=0,
                     system_prompt=SYSTEM_PROMPT)
    assert result.viewer == result.out_dir / "viewer" / "index.html"
    assert result.viewer.is_file() and result.viewer in result.written
    report = (result.out_dir / "report.md").read_text(encoding="utf-8")
    assert "[viewer/index.html](viewer/index.html)" in report
    for plot in ("plot_lesion_heatmap.png", "plot_e2e_funnel.png", "plot_stage_accuracy.png"):
        assert f"]({plot})" in report
    section = report.split("## Largest differences between the best and the worst run")[1]
    table = [line for line in section.split("## ")[0].splitlines() if line.startswith("| ")]
    assert len(table) == 1 + 5  # header + the five cells
    assert "oracle_baseline" in section.splitlines()[2]  # the best run: always right
    none = analyze(viewer_runs["results"], "implicit", output_dir=tmp_path / "nv",
                   benchmark_dir=viewer_runs["bench"], bootstrap=0, viewer=False)
    assert none.viewer is None and not (none.out_dir / "viewer").exists()


def test_view_cases_cli_prints_where_the_viewer_is(viewer_runs, tmp_path):
    runs = list(viewer_runs["runs"].values())
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "04_analyze_eval_result" / "03_view_cases.py"),
         "--run-dir", str(runs[0]), "--run-dir", str(runs[1]), "--output-dir", str(tmp_path),
         "--no-progress"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / "viewer" / "index.html"
    assert page.is_file() and page.resolve().as_uri() in proc.stdout
    bad = subprocess.run(
        [sys.executable, str(ROOT / "src" / "04_analyze_eval_result" / "03_view_cases.py"),
         "--run-dir", str(tmp_path / "missing")], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "missing" in bad.stderr


def test_compare_runs_writes_next_to_its_inputs_by_default(viewer_runs, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(viewer_runs["results"], results)
    a = results / "mixed_custom" / "oracle_implicit"
    b = results / "oracle_baseline" / "oracle_implicit"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "04_analyze_eval_result" / "02_compare_runs.py"),
         "--run-a", str(a), "--run-b", str(b), "--bootstrap", "20", "--no-progress"],
        cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    written = list((results / "paired_comparisons").glob("*.csv"))
    assert [p.name for p in written] == [
        "mixed_custom.oracle_implicit_vs_oracle_baseline.oracle_implicit.csv"]
    # 7 cases: every cell is too small for an interval, so the count is printed instead
    assert "n=7" in proc.stdout and "[" not in proc.stdout.split("\n", 3)[3]
