"""Benchmark of Stage 04 (analysis) on a paper-sized synthetic input.

Generates, in a temporary folder, 14 models x 2,100 cases of synthetic Stage 03 results in the
release schema (docs/evaluation_protocol.md, "Run folder"; per lesion 100 lesion-free, 100
revision-free and 100 revision-required cases, docs/paper.md, "Benchmark size") for the two oracle
settings ``implicit`` and ``none``, plus a matching ``chexpercept.json`` (for the chance rows),
then runs ``01_analyze_model_performance.py`` end to end (all tables and plots, 1,000
bootstrap resamples, the case viewer) in a child process, ``--repeat`` times per setting, and
prints the median run's wall time, CPU time (the process tree's) and peak memory.

With ``--release-dir DIR`` (a checkout of the original release, e.g. of the public repository
checkoneee/CheXpercept) the release's own Stage 04 runs on the same files in the same
invocation, alternating with ours run by run, from a scratch copy outside this repository (it
writes next to its script), and the ratios are printed. Without it, the ratios use the
release's figures measured earlier (about 5 s and 141 MiB per setting on 2 cores).

Memory is measured two ways, since Stage 04 may fork workers (``--jobs``): ``peak RSS`` is the
largest single process (the kernel's ``ru_maxrss`` of the tree), ``tree`` is the peak of the
summed PSS of the process and its workers, sampled every 20 ms (the memory the machine gives
the whole run: pages shared between forked workers counted once). ``--jobs`` is passed to ours.
``--tracemalloc`` also reports the Python-heap peak of one in-process analysis (slower).
No assertion on timings.

Usage::

    python benchmarks/bench_analysis.py [--models 14] [--bootstrap 1000] [--repeat 3]
        [--keep DIR] [--release-dir DIR] [--jobs N]
    python benchmarks/bench_analysis.py --tiny   # a smoke run, seconds
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from chexpercept.files import write_json_atomic
from chexpercept.layouts import repo_root
from chexpercept.lesions import LESIONS

SCRIPT = repo_root() / "src" / "04_analyze_eval_result" / "01_analyze_model_performance.py"
REFERENCE_WALL_S = 5.0
REFERENCE_PEAK_MIB = 141.0
SETTINGS = ("implicit", "none")
PER_PATH = 100
ATTRS = ("distribution", "location", "severity/measurement", "comparison")
COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown")
QUESTION = ("Please look at the chest X-ray and answer the question about the finding. " * 8)


def _cases(per_path: int = PER_PATH) -> list[tuple[str, str, str]]:
    """(key_id, lesion, qa_path) of the cases (2,100 at ``PER_PATH``), in export order."""
    out = []
    for lesion in LESIONS:
        for path, kind in (("lesion_free", "negative"), ("revision_free", "positive"),
                           ("revision_required", "positive")):
            for i in range(per_path):
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
    # a path of the case's bundle folder (<bundle>/chexpercept/<key_id>/; docs/benchmark_format.md,
    # "Paths a bundle names"), absent as the release's absolute paths are on another machine
    rec["chat_history"] = [[QUESTION, [f"/bench/chexpercept/{key_id}/xray.png"] if i == 0 else [],
                            f"The finding is described as follows. Answer: {r}"]
                           for i, r in enumerate(turns)]
    return rec


def generate(root: Path, n_models: int, seed: int = 0, per_path: int = PER_PATH
             ) -> tuple[Path, Path]:
    """Write the synthetic benchmark and results; return (benchmark_dir, results_dir)."""
    rng = np.random.default_rng(seed)
    cases = _cases(per_path)
    bench, truths = {}, {}
    for key_id, lesion, path in cases:
        bench[key_id], truths[key_id] = _benchmark_item(rng, lesion, path)
    bench_dir = root / "chexpercept"
    write_json_atomic(bench_dir / "chexpercept.json", bench)
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


def _tree_pss_kib(root: int) -> int:
    """Summed PSS (KiB) of ``root`` and its descendants, from /proc (0 once they are gone).

    PSS divides each shared page among the processes that map it, so pages a forked worker
    shares with its parent are counted once, not once per process as summed RSS would be.
    """
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        try:
            with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
    return total


def _measure(cmd: list[str], cwd: Path | None = None) -> tuple[float, float, float, float]:
    """Run ``cmd``; (wall s, CPU s of the tree, peak single-process RSS MiB, peak tree PSS MiB)."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, cwd=cwd)
    stop = threading.Event()
    peak_tree = [0]

    def sample() -> None:
        while not stop.wait(0.02):
            peak_tree[0] = max(peak_tree[0], _tree_pss_kib(child.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)  # this child's rusage (its reaped workers too)
    wall = time.perf_counter() - start
    stop.set()
    sampler.join()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, cmd)
    return (wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0,
            peak_tree[0] / 1024.0)


def _ours(results_dir: Path, bench_dir: Path, out_dir: Path, setting: str, n_boot: int,
          jobs: int | None) -> list[str]:
    return [sys.executable, str(SCRIPT), "--results-dir", str(results_dir), "--oracle_setting",
            setting, "--output-dir", str(out_dir), "--benchmark-dir", str(bench_dir),
            "--bootstrap", str(n_boot), "--no-progress", "--log-level", "WARNING",
            *(["--jobs", str(jobs)] if jobs else [])]


def _median(runs: list[tuple[float, ...]]) -> tuple[float, ...]:
    """The run of median wall time."""
    return sorted(runs)[len(runs) // 2]


def _release_copy(release_dir: Path, scratch: Path) -> Path:
    """Copy the release's Stage 04 (and its utils) into ``scratch``; return its script."""
    for part in ("src/04_analyze_eval_result", "utils"):
        shutil.copytree(release_dir / part, scratch / part, dirs_exist_ok=True)
    script = scratch / "src" / "04_analyze_eval_result" / "01_analyze_model_performance.py"
    if not script.is_file():
        raise SystemExit(f"--release-dir {release_dir}: no "
                         "src/04_analyze_eval_result/01_analyze_model_performance.py")
    return script


def _tracemalloc_peak(results_dir: Path, bench_dir: Path, out_dir: Path, n_boot: int) -> float:
    import runpy
    import tracemalloc

    main = runpy.run_path(str(SCRIPT))["main"]
    tracemalloc.start()
    with contextlib.redirect_stdout(io.StringIO()):  # the summary table and output list
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
                        help="Runs per setting (each tool); the median is reported "
                             "(default: 3).")
    parser.add_argument("--release-dir", default=None,
                        help="A checkout of the original release: run its Stage 04 on the same "
                             "files, alternating with ours (default: compare with the "
                             "release's earlier figures).")
    parser.add_argument("--jobs", type=int, default=None,
                        help="--jobs for our Stage 04 (default: its own default).")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="Also measure the Python-heap peak in-process (default: off).")
    parser.add_argument("--tiny", action="store_true",
                        help="A seconds-long smoke run: 2 models x 210 cases (10 per lesion "
                             "and path), 20 resamples, one run of oracle_implicit only; "
                             "overrides --models, --bootstrap and --repeat (default: off).")
    args = parser.parse_args()
    per_path, settings = PER_PATH, SETTINGS
    if args.tiny:
        args.models, args.bootstrap, args.repeat, per_path = 2, 20, 1, 10
        settings = SETTINGS[:1]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        start = time.perf_counter()
        bench_dir, results_dir = generate(root, args.models, per_path=per_path)
        size_mib = sum(p.stat().st_size for p in results_dir.rglob("*.json")) / 2**20
        n_cases = len(_cases(per_path))
        print(f"generated {args.models} models x {n_cases} cases x {len(SETTINGS)} settings "
              f"({size_mib:.0f} MiB of all_results.json) in {time.perf_counter() - start:.1f} s")
        release = (_release_copy(Path(args.release_dir), root / "release_scratch")
                   if args.release_dir else None)
        for setting in settings:
            ours, theirs = [], []
            for _ in range(args.repeat):  # alternating: both see the same machine state
                ours.append(_measure(_ours(results_dir, bench_dir, root / "out", setting,
                                           args.bootstrap, args.jobs)))
                if release is not None:
                    theirs.append(_measure([sys.executable, str(release), "--results-dir",
                                            str(results_dir), "--oracle_setting", setting],
                                           cwd=release.parent))
            o = _median(ours)
            print(f"oracle_{setting}: ours wall {o[0]:.2f} s (CPU {o[1]:.2f} s), peak RSS "
                  f"{o[2]:.0f} MiB, tree {o[3]:.0f} MiB; walls "
                  + " ".join(f"{r[0]:.2f}" for r in ours))
            if theirs:
                t = _median(theirs)
                print(f"oracle_{setting}: release wall {t[0]:.2f} s (CPU {t[1]:.2f} s), peak "
                      f"RSS {t[2]:.0f} MiB, tree {t[3]:.0f} MiB; walls "
                      + " ".join(f"{r[0]:.2f}" for r in theirs))
                print(f"oracle_{setting}: ours / release: wall x{o[0] / t[0]:.2f}, peak RSS "
                      f"x{o[2] / t[2]:.2f}, tree x{o[3] / t[3]:.2f} (medians of "
                      f"{args.repeat}, alternating)")
            else:
                print(f"oracle_{setting}: ours / the release's earlier figures: wall "
                      f"x{o[0] / REFERENCE_WALL_S:.2f} of ~{REFERENCE_WALL_S:.0f} s, peak RSS "
                      f"x{o[2] / REFERENCE_PEAK_MIB:.2f} of ~{REFERENCE_PEAK_MIB:.0f} MiB")
        if args.tracemalloc:
            peak = _tracemalloc_peak(results_dir, bench_dir, root / "out_tm", args.bootstrap)
            print(f"tracemalloc Python-heap peak (oracle_{SETTINGS[0]}): {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
