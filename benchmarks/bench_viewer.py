"""Benchmark of the Stage 04 case viewer on a paper-sized run opened in Chromium.

Generates, in a temporary folder, ``--runs`` synthetic Stage 03 runs of ``--cases`` cases
(default 2 x 10,400: the lesions and paths in turn, every path's turns with realistic question
and reply lengths, ``records.jsonl`` with parser fields and oracle actions, seven small PNGs
hard-linked into every case's bundle folder ``chexpercept/<key_id>/``), writes the viewer
(``analysis.viewer.write_viewer``) and opens it in the system Chromium through Playwright
(``/usr/bin/chromium`` or ``$CHEXPERCEPT_CHROMIUM``; no ``playwright install``). Prints, best
of ``--repeat``: the write time, the data sizes, the time from navigation to the first rendered
index (target < 2 s), and the page's reaction times for a filter, a sort, opening a case (its
chunk is loaded then) and a text search over every reply (all chunks loaded), each next to the
2 s target as a ratio. No assertion on timings.

Usage::

    python benchmarks/bench_viewer.py [--cases 10400] [--runs 2] [--repeat 3] [--keep DIR]
    python benchmarks/bench_viewer.py --cases 50 --runs 1 --repeat 1   # a smoke run, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from chexpercept.analysis.viewer import ViewerRun, write_viewer
from chexpercept.lesions import LESIONS, QA_PATHS

TARGET_S = 2.0
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
TURNS = {
    "revision_required": ["detection_qa", "contour_evaluation_qa",
                          "contour_revision_qa_expansion", "contour_revision_qa_contraction",
                          "contour_revision_qa_revision_result",
                          "attribute_extraction_qa_distribution",
                          "attribute_extraction_qa_location",
                          "attribute_extraction_qa_severity/measurement",
                          "attribute_extraction_qa_comparison"],
    "revision_free": ["detection_qa", "contour_evaluation_qa",
                      "attribute_extraction_qa_distribution", "attribute_extraction_qa_location",
                      "attribute_extraction_qa_severity/measurement",
                      "attribute_extraction_qa_comparison"],
    "lesion_free": ["detection_qa"],
}
QUESTION = "Look at this chest X-ray and answer the question about the finding. " * 5
REPLY = "The image shows findings I weigh against each option before answering. " * 8


IMAGE_NAMES = ["xray", "xray_with_mask", "xray_with_mask_and_points",
               *(f"option_{i}" for i in range(1, 5))]
#: The images each turn sends, by index into IMAGE_NAMES.
TURN_IMAGES = {"detection_qa": [0], "contour_evaluation_qa": [1],
               "contour_revision_qa_expansion": [2],
               "contour_revision_qa_revision_result": [3, 4, 5, 6]}


def _images(root: Path) -> list[Path]:
    """Seven small PNGs, the sources every case's images are hard links to."""
    root.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(IMAGE_NAMES):
        Image.fromarray(np.full((256, 256, 3), 40 * i, dtype=np.uint8)).save(root / f"{name}.png")
    return [root / f"{name}.png" for name in IMAGE_NAMES]


def _case_images(bundle: Path, key: str, sources: list[Path]) -> dict[str, list[str]]:
    """Hard links to ``sources`` in the case's bundle folder; the image paths of each turn.

    Stage 04 takes a case's images only from ``<bundle>/chexpercept/<key_id>/``
    (docs/benchmark_format.md, "Paths a bundle names").
    """
    folder = bundle / "chexpercept" / key
    if not folder.is_dir():  # the runs share their cases
        folder.mkdir(parents=True)
        for source in sources:
            os.link(source, folder / source.name)
    return {turn: [str(folder / sources[i].name) for i in idx]
            for turn, idx in TURN_IMAGES.items()}


def _block(turns: list[str], correct: dict[str, bool], block: str) -> dict:
    """A stage block of ``all_results.json``: right when all its turns are."""
    names = [t for t in turns if t.startswith(block)]
    if not names:
        return {}
    return {"correct": all(correct[t] for t in names), "ground_truth": 1, "status": "ok"}


def _run(run_dir: Path, n_cases: int, bundle: Path, sources: list[Path], seed: int) -> None:
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    results, lines = {}, []
    for i in range(n_cases):
        lesion = LESIONS[i % len(LESIONS)]
        path = QA_PATHS[(i // len(LESIONS)) % len(QA_PATHS)]
        key = f"{lesion}_s{i:08d}_{'negative' if path == 'lesion_free' else 'positive'}_0"
        turns = TURNS[path] if lesion != "cardiomegaly" else [
            t for t in TURNS[path] if not t.startswith("attribute")]
        images = _case_images(bundle, key, sources)
        history, idx, correct = [], {}, {}
        for j, turn in enumerate(turns):
            right = bool(rng.random() < 0.6)
            correct[turn] = right
            reply = f"{REPLY}\nAnswer: {1 if right else 2}"
            history.append([f"{QUESTION}\n\nOptions:\n(1) Yes\n(2) No", images.get(turn, []),
                            reply])
            idx[turn] = j
            lines.append(json.dumps({
                "key_id": key, "turn": turn, "turn_index": j, "request_id": f"{key}/{turn}",
                "raw": reply, "parsed": "1" if right else "2", "answer": [1 if right else 2],
                "status": "ok", "detail": "", "correct": right, "finish_reason": "stop",
                "latency_s": 1.2, "usage": {"input_tokens": 900, "output_tokens": 150},
                "oracle": {"setting": "none", "triggered": False, "prefix": None,
                           "patched": []}}))

        results[key] = {"key_id": key, "qa_path": path,
                        **{b: _block(turns, correct, b) for b in (
                            "detection_qa", "contour_evaluation_qa", "contour_revision_qa",
                            "attribute_extraction_qa")},
                        "_chat_history_idx": idx, "chat_history": history}
    (run_dir / "all_results.json").write_text(json.dumps(results), encoding="utf-8")
    (run_dir / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (run_dir / "run_manifest.json").write_text(json.dumps(
        {"provider": "synthetic", "model": f"bench-{seed}", "oracle_setting": "none",
         "seed": seed, "git_commit": "0" * 40}), encoding="utf-8")


def _browser_times(page_path: Path, executable: str, repeat: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    best: dict[str, float] = {}

    def keep(name: str, seconds: float) -> None:
        best[name] = min(best.get(name, float("inf")), seconds)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        for _ in range(repeat):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(120_000)
            for name, seconds in _measure(page, page_path).items():
                best[name] = min(best.get(name, float("inf")), seconds)
            page.close()
        browser.close()
    return best


def _timed(page, action, done) -> float:
    """Seconds from ``action()`` until ``done()`` holds (polled every 5 ms)."""
    t0 = time.perf_counter()
    action()
    while not done():
        page.wait_for_timeout(5)
    return time.perf_counter() - t0


def _measure(page, page_path: Path) -> dict[str, float]:
    """One pass: open, filter, sort, open a case, search."""
    out = {}
    start = time.perf_counter()
    page.goto(page_path.resolve().as_uri())
    page.wait_for_selector("body[data-ready]")
    out["open to first index (wall)"] = time.perf_counter() - start
    out["open to first index (page clock)"] = page.evaluate("() => performance.now()") / 1000

    def count() -> int:
        text = page.inner_text("#count-shown")
        return int(text) if text else -1

    total = count()
    out["filter by lesion"] = _timed(page, lambda: page.select_option("#f-lesion", value="edema"),
                                     lambda: 0 <= count() < total)
    out["sort by A depth"] = _timed(
        page, lambda: page.click("th[data-sort=adepth]"),
        lambda: page.query_selector("th.sorted-asc[data-sort=adepth]") is not None)
    page.click("#f-reset")
    key = page.get_attribute("#cases-body tr:nth-child(50)", "data-key")
    out["open a case (chunk load + render)"] = _timed(
        page, lambda: page.click(f"#cases-body tr[data-key='{key}']"),
        lambda: page.query_selector("#case-body .turn") is not None)
    page.keyboard.press("Escape")
    out["text search over all replies"] = _timed(
        page, lambda: page.fill("#f-text", "answer: 2"),
        lambda: not page.inner_text("#counts").startswith("loading"))
    return out


def main(argv: list[str] | None = None) -> int:
    """Generate the runs, write the viewer, time it in Chromium, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_400, help="cases per run (10400)")
    parser.add_argument("--runs", type=int, default=2, help="runs (2: side by side)")
    parser.add_argument("--repeat", type=int, default=3, help="browser repeats (3)")
    parser.add_argument("--keep", default=None, help="keep the files in this folder")
    args = parser.parse_args(argv)
    executable = os.environ.get("CHEXPERCEPT_CHROMIUM") or shutil.which("chromium")
    if executable is None:
        print("bench_viewer: no chromium (apt-get install -y chromium)", file=sys.stderr)
        return 2
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_viewer_"))
    try:
        sources = _images(root / "images")
        t0 = time.perf_counter()
        runs = []
        for r in range(args.runs):
            run_dir = root / "03" / f"synthetic_bench-{r}" / "oracle_none"
            _run(run_dir, args.cases, root / "bench", sources, seed=r)
            runs.append(ViewerRun(f"synthetic_bench-{r}", "none", run_dir))
        made = time.perf_counter() - t0
        t0 = time.perf_counter()
        page = write_viewer(runs, root / "04")
        written = time.perf_counter() - t0
        data = page.parent / "data"
        chunks = sorted(data.glob("r0_c*.js"))
        print(f"synthetic input: {args.runs} run(s) x {args.cases} cases ({made:.1f} s)")
        index_mb = (data / "index.js").stat().st_size / 1e6
        print(f"write_viewer: {written:.2f} s; index.js {index_mb:.2f} MB; {len(chunks)} "
              f"chunk(s) per run, "
              f"{sum(c.stat().st_size for c in chunks) / len(chunks) / 1e3:.0f} kB each")
        times = _browser_times(page, executable, args.repeat)
        print(f"{'Chromium (best of ' + str(args.repeat) + ')':<38} {'seconds':>8} "
              f"{'target':>7} {'ratio':>6}")
        for name, seconds in times.items():
            print(f"{name:<38} {seconds:>8.3f} {TARGET_S:>7.1f} {seconds / TARGET_S:>6.2f}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
