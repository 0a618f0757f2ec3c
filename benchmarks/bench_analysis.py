"""Benchmark of Stage 04 (analysis) on a paper-sized synthetic input.

Generates, in a temporary folder, 14 models x 2,100 cases of synthetic Stage 03 results in the
release schema (docs/evaluation_protocol.md, "Run folder"; per lesion 100 lesion-free, 100
revision-free and 100 revision-required cases, docs/paper.md, "Benchmark size") for the two oracle
settings ``implicit`` and ``none``, plus a matching ``chexpercept.json`` (for the chance rows),
then runs ``01_analyze_model_performance.py`` end to end (all tables and plots, 1,000
bootstrap resamples) in a child process, ``--repeat`` times per setting, and
prints the fastest run's wall time, CPU time and peak resident memory (the child's own
``rusage``) next to the release's reference figures (about 5 s and 141 MiB per setting on 2
cores) as ratios. ``--tracemalloc`` also reports the Python-heap peak of one
in-process analysis (slower). No assertion on timings.

Usage::

    python benchmarks/bench_analysis.py [--models 14] [--bootstrap 1000] [--repeat 3]
        [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io as _io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from chexpercept import io
from chexpercept.lesions import LESIONS

SCRIPT = io.repo_root() / "src" / "04_analyze_eval_result" / "01_analyze_model_performance.py"
REFERENCE_WALL_S = 5.0
REFERENCE_PEAK_MIB = 141.0
SETTINGS = ("implicit", "none")
PER_PATH = 100
ATTRS = ("distribution", "location", "severity/measurement", "comparison")
COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown")
QUESTION = ("Please look at the chest X-ray and answer the question about the finding. " * 8)


def _cases() -> list[tuple[str, str, str]]:
    """(key_id, lesion, qa_path) of the 2,100 cases, in export order."""
    out = []
    for lesion in LESIONS:
        for path, kind in (("lesion_free", "negative"), ("revision_free", "positive"),
                           ("revision_required", "positive")):
            for i in range(PER_PATH):
                sid = 50_000_000 + len(out)
                out.append((f"{lesion}_s{sid}_{kind}_{i % 3}", lesion, path))
    return out


def _mc(n: int, answer: int) -> dict:
    opts = [f"option {i + 1}" for i in range(n)]
    return {"question": QUESTION, "answer_options": opts, "answer": opts[answer - 1],
            "answer_index": answer}


def _benchmark_item(rng: np.random.Generator, lesion: str, path: str) -> tuple[dict, dict]:
    """A valid ``chexpercept.json`` item and its ground truth per question."""
    positive = path != "lesion_free"
    item = {"detection_qa": {**_mc(2, 1 if positive else 2),
                             "answer": "Yes" if positive else "No",
                             "answer_options": ["Yes", "No"]},
            "pair_id": "p", "dicom_id": "d"}
    gt = {"detection": 1 if positive else 2}
    if not positive:
        return item, gt
    n_points = int(rng.integers(2, 7))
    points = [{"point": [int(x), int(y)], "color": COLORS[i]}
              for i, (x, y) in enumerate(rng.integers(0, 1024, (n_points, 2)))]
    points.append({"point": None, "color": "None"})
    exp = sorted(int(i) for i in rng.choice(n_points, int(rng.integers(1, 3)), replace=False) + 1)
    con = [n_points + 1]
    rr = int(rng.integers(1, 5))
    item["contour_qa"] = {
        "no_deformation": path == "revision_free",
        "contour_eval_qa": {**_mc(2, 2 if path == "revision_free" else 1),
                            "answer_options": ["Yes", "No"],
                            "relative_path": "contour_eval_qa/xray_with_mask.png"},
        "contour_revision_qa_expansion": {"question": QUESTION, "answer_options": points,
                                          "answer": "x", "answer_index": exp},
        "contour_revision_qa_contraction": {"question": QUESTION, "answer_options": points,
                                            "answer": "None", "answer_index": con},
        "contour_revision_qa_revision_result": {
            "question": QUESTION, "answer": "x", "answer_index": rr,
            "answer_options": [{"type": "true" if i + 1 == rr else "fake", "masks": ["m"],
                                "relative_path": f"option_{i + 1}.png"} for i in range(4)]},
    }
    gt.update(contour_eval=2 if path == "revision_free" else 1, expansion=exp,
              contraction=con, revision_result=rr)
    if lesion != "cardiomegaly":
        d, s, c = (int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 5)))
        loc = [int(rng.integers(1, 5))]
        item["attribute_extraction_qa"] = {
            "distribution": {**_mc(4, d), "answer_zones": []},
            "location": {"question": QUESTION, "answer_options": ["a", "b", "c", "None"],
                         "answer": "a", "answer_index": loc, "answer_zones": []},
            "severity/measurement": {**_mc(3, s), "overlap_ratio": 0.1,
                                     "selected_lung": "left lung"},
            "comparison": {**_mc(4, c), "left_size": 1, "right_size": 0,
                           "left_has_overlap": True, "right_has_overlap": False}}
        gt.update(distribution=d, location=loc, **{"severity/measurement": s}, comparison=c)
    return item, gt


def _answer(rng: np.random.Generator, skill: float, truth: int | list[int]) -> tuple[str, bool]:
    ok = bool(rng.random() < skill)
    if isinstance(truth, list):
        return (",".join(map(str, truth)) if ok else "9"), ok
    return (str(truth) if ok else str(truth % 4 + 1)), ok


def _result(rng: np.random.Generator, key_id: str, path: str, gt: dict, skill: float) -> dict:
    """One ``all_results.json`` record (release schema, no status keys)."""
    turns = []
    rec = {"key_id": key_id, "qa_path": path}
    resp, ok = _answer(rng, skill, gt["detection"])
    rec["detection_qa"] = {"response": resp, "ground_truth": gt["detection"], "correct": ok}
    turns.append(resp)
    rec["contour_evaluation_qa"] = rec["contour_revision_qa"] = {}
    rec["attribute_extraction_qa"] = {}
    if path != "lesion_free":
        resp, ok = _answer(rng, skill, gt["contour_eval"])
        rec["contour_evaluation_qa"] = {"responses": resp, "ground_truth": gt["contour_eval"],
                                        "correct": ok}
        turns.append(resp)
    if path == "revision_required":
        block = {"ground_truth": {}, "responses": {}, "correct": True}
        for sub in ("expansion", "contraction", "revision_result"):
            resp, ok = _answer(rng, skill * 0.7, gt[sub])
            block["ground_truth"][sub], block["responses"][sub] = gt[sub], resp
            block[sub] = {"correct": ok}
            block["correct"] = block["correct"] and ok
            turns.append(resp)
        rec["contour_revision_qa"] = block
    if path != "lesion_free" and "distribution" in gt:
        block = {"responses": {}, "ground_truth": {}, "correct": True}
        for sub in ATTRS:
            resp, ok = _answer(rng, skill * 0.8, gt[sub])
            block["ground_truth"][sub], block["responses"][sub] = gt[sub], resp
            block[sub] = {"correct": ok}
            block["correct"] = block["correct"] and ok
            turns.append(resp)
        rec["attribute_extraction_qa"] = block
    rec["_chat_history_idx"] = {f"turn_{i}": i for i in range(len(turns))}
    rec["chat_history"] = [[QUESTION, [f"/bench/{key_id}/xray.png"] if i == 0 else [],
                            f"The finding is described as follows. Answer: {r}"]
                           for i, r in enumerate(turns)]
    return rec


def generate(root: Path, n_models: int, seed: int = 0) -> tuple[Path, Path]:
    """Write the synthetic benchmark and results; return (benchmark_dir, results_dir)."""
    rng = np.random.default_rng(seed)
    cases = _cases()
    bench, truths = {}, {}
    for key_id, lesion, path in cases:
        bench[key_id], truths[key_id] = _benchmark_item(rng, lesion, path)
    bench_dir = root / "chexpercept"
    io.write_json_atomic(bench_dir / "chexpercept.json", bench)
    results_dir = root / "results"
    for m in range(n_models):
        skill = 0.45 + 0.5 * m / max(n_models - 1, 1)
        name = ("openai_model-%02d" if m % 2 else "opensource_model-%02d") % m
        for setting in SETTINGS:
            records = {k: _result(rng, k, p, truths[k], skill) for k, _, p in cases}
            run_dir = results_dir / name / f"oracle_{setting}"
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "all_results.json").write_text(json.dumps(records, indent=2))
    return bench_dir, results_dir


def _run_once(results_dir: Path, bench_dir: Path, out_dir: Path, setting: str,
              n_boot: int) -> tuple[float, float, float]:
    """Run the CLI in a child process; return (wall s, CPU s, peak RSS MiB) of that child."""
    cmd = [sys.executable, str(SCRIPT), "--results-dir", str(results_dir), "--oracle_setting",
           setting, "--output-dir", str(out_dir), "--benchmark-dir", str(bench_dir),
           "--bootstrap", str(n_boot), "--no-progress", "--log-level", "WARNING"]
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, cmd)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0


def _tracemalloc_peak(results_dir: Path, bench_dir: Path, out_dir: Path, n_boot: int) -> float:
    import runpy
    import tracemalloc

    main = runpy.run_path(str(SCRIPT))["main"]
    tracemalloc.start()
    with contextlib.redirect_stdout(_io.StringIO()):  # the summary table and output list
        main(["--results-dir", str(results_dir), "--oracle_setting", SETTINGS[0],
              "--output-dir", str(out_dir), "--benchmark-dir", str(bench_dir), "--bootstrap",
              str(n_boot), "--no-progress", "--log-level", "WARNING"])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> int:
    """Generate, analyse, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=14, help="Models (default: 14).")
    parser.add_argument("--bootstrap", type=int, default=1000,
                        help="Bootstrap resamples (default: 1000).")
    parser.add_argument("--keep", default=None,
                        help="Generate into this folder and keep it (default: a temp dir).")
    parser.add_argument("--repeat", type=int, default=3,
                        help="Runs per setting; the fastest is reported, as other processes "
                             "may share the cores (default: 3).")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="Also measure the Python-heap peak in-process (default: off).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        start = time.perf_counter()
        bench_dir, results_dir = generate(root, args.models)
        size_mib = sum(p.stat().st_size for p in results_dir.rglob("*.json")) / 2**20
        print(f"generated {args.models} models x 2100 cases x {len(SETTINGS)} settings "
              f"({size_mib:.0f} MiB of all_results.json) in {time.perf_counter() - start:.1f} s")
        for setting in SETTINGS:
            runs = [_run_once(results_dir, bench_dir, root / "out", setting, args.bootstrap)
                    for _ in range(args.repeat)]
            wall, cpu, peak = min(runs)  # other processes share the cores: take the best
            print(f"oracle_{setting}: wall {wall:.2f} s (x{wall / REFERENCE_WALL_S:.2f} of the "
                  f"release's ~{REFERENCE_WALL_S:.0f} s; CPU {cpu:.2f} s), peak RSS "
                  f"{peak:.0f} MiB (x{peak / REFERENCE_PEAK_MIB:.2f} of "
                  f"~{REFERENCE_PEAK_MIB:.0f} MiB)"
                  + (f"; best of {args.repeat}, walls "
                     + " ".join(f"{r[0]:.2f}" for r in runs) if args.repeat > 1 else ""))
        if args.tracemalloc:
            peak = _tracemalloc_peak(results_dir, bench_dir, root / "out_tm", args.bootstrap)
            print(f"tracemalloc Python-heap peak (oracle_{SETTINGS[0]}): {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
