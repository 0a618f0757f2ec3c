"""Check the smoke run's Stage 04 summaries (run by sample_test.sh at its end).

The ``oracle`` baseline must score 100 % on every stage of every path, with the full depth. The
``dummy`` baseline (always option 1) must score exactly what the benchmark's answer keys give
when worked out by hand here, independently of Stage 04. This script checks both, under every
oracle setting the run analysed. It prints ``check: ok ...`` and exits 0, or prints one line
naming the first difference and exits 1.

Usage::

    python scripts/sample_test/check_summary.py --work-dir outputs/sample_test
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

from chexpercept.schema import load_benchmark, qa_path_of

PATHS = ("revision_required", "revision_free", "lesion_free")
STAGES = {"revision_required": ["s1", "s2", "s3", "s4"], "revision_free": ["s1", "s2", "s4"],
          "lesion_free": ["s1"]}
COLUMNS = {"s1": "acc(stage1)", "s2": "acc(stage2)", "s3": "acc(stage3)", "s4": "acc(stage4)"}
MAX_DEPTH = {"revision_required": 4, "revision_free": 3, "lesion_free": 1}


def _mean(values: list[bool]) -> float:
    return sum(values) / len(values) if values else math.nan


def dummy_expected(bench: dict) -> dict[tuple[str, str], dict[str, float]]:
    """The dummy baseline's summary rows, by hand: it answers option 1 to every question.

    Args:
        bench: key_id -> benchmark item (``chexpercept.schema.load_benchmark``).

    Returns:
        ``(path, setting) -> {column: value}`` for ``end_to_end`` and ``oracle_passed``
        (NaN where a path has no case).
    """
    per_path: dict[str, list[dict[str, bool]]] = {p: [] for p in PATHS}
    for key_id, item in bench.items():
        path = qa_path_of(item)
        flags = {"s1": item.detection_qa.answer_index == 1}
        if path != "lesion_free":
            cq = item.contour_qa
            flags["s2"] = cq.contour_eval_qa.answer_index == 1
            if path == "revision_required":
                flags["s3"] = (set(cq.contour_revision_qa_expansion.answer_index) == {1}
                               and set(cq.contour_revision_qa_contraction.answer_index) == {1}
                               and cq.contour_revision_qa_revision_result.answer_index == 1)
            ae = item.attribute_extraction_qa
            if ae is not None:
                flags["s4"] = (ae.distribution.answer_index == 1
                               and set(ae.location.answer_index) == {1}
                               and ae.severity_measurement.answer_index == 1
                               and ae.comparison.answer_index == 1)
        flags["cardio"] = key_id.startswith("cardiomegaly_")
        per_path[path].append(flags)
    out = {}
    for path, cases in per_path.items():
        order = STAGES[path]
        e2e: dict[str, list[bool]] = {s: [] for s in order}
        own: dict[str, list[bool]] = {s: [] for s in order}
        depths = []
        for c in cases:
            ok_prefix, depth, last = True, 0, None
            for s in order:
                if s not in c:
                    continue
                ok_prefix = ok_prefix and bool(c[s])
                e2e[s].append(ok_prefix)
                own[s].append(bool(c[s]))
                depth += ok_prefix
                last = ok_prefix
            if c["cardio"] and path != "lesion_free" and last:
                depth += 1  # cardiomegaly has no stage 4: its last stage counts for it
            depths.append(depth)
        depth_mean = _mean(depths)
        out[(path, "end_to_end")] = {COLUMNS[s]: _mean(v) for s, v in e2e.items()}
        out[(path, "end_to_end")]["depth"] = depth_mean
        out[(path, "oracle_passed")] = {COLUMNS[s]: _mean(v) for s, v in own.items()}
        out[(path, "oracle_passed")]["depth"] = depth_mean
        out[(path, "oracle_passed")]["acc(stage1)"] = out[(path, "end_to_end")]["acc(stage1)"]
    return out


def oracle_expected() -> dict[tuple[str, str], dict[str, float]]:
    """The oracle baseline's rows: 1.0 on every stage of a path and its full depth."""
    return {(path, kind): {**{COLUMNS[s]: 1.0 for s in STAGES[path]},
                           "depth": float(MAX_DEPTH[path])}
            for path in PATHS for kind in ("end_to_end", "oracle_passed")}


def _float(text: str) -> float:
    return float(text) if text not in ("", "NA", "nan") else math.nan


def check(work: Path) -> list[str]:
    """Every difference between the summaries under ``work`` and the expected rows."""
    bench_file = work / "chexpercept" / "chexpercept.json"
    if not bench_file.is_file():
        return [f"{bench_file}: missing (did the run export the benchmark?)"]
    expected = {"oracle_baseline": oracle_expected(),
                "dummy_baseline": dummy_expected(load_benchmark(bench_file))}
    summaries = sorted((work / "04_analyze_eval_result").glob("all_models_oracle_*/"
                                                              "all_models_summary.csv"))
    if not summaries:
        return [f"{work / '04_analyze_eval_result'}: no all_models_summary.csv"]
    problems = []
    for summary in summaries:
        with summary.open(newline="", encoding="utf-8") as fh:
            rows = {(r["model"], r["path"], r["setting"]): r for r in csv.DictReader(fh)}
        for model, table in expected.items():
            for (path, kind), columns in table.items():
                row = rows.get((model, path, kind))
                if row is None:
                    problems.append(f"{summary}: no row {model} / {path} / {kind}")
                    continue
                for column, want in columns.items():
                    got = _float(row.get(column, ""))
                    same = (math.isnan(want) and math.isnan(got)) or \
                        (not math.isnan(want) and abs(got - want) <= 1e-6)
                    if not same:
                        problems.append(f"{summary}: {model} {path} {kind} {column} is {got:g}, "
                                        f"expected {want:g}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Check; 0 when every row is as expected, else 1 (one line)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", required=True, help="sample_test.sh's work folder")
    args = parser.parse_args(argv)
    problems = check(Path(args.work_dir))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        print(f"check: FAILED: {problems[0]}{more}", file=sys.stderr)
        return 1
    print("check: ok (oracle rows 100 %, dummy rows equal the answer keys worked out by hand)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
