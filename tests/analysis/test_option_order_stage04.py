"""The option-position tables in a Stage 04 run (issue 23 item 2, analysis half).

``analysis.option_order`` wired into the pass: ``option_position_accuracy.csv``,
``always_k_baselines.csv`` (k over the bundle's option count) and the report section.
"""

from __future__ import annotations

import csv
import json

import pytest

from chexpercept.analysis.api import analyze
from chexpercept.analysis.chance import load_chance_or_none
from chexpercept.analysis.option_order import option_counts, option_tables
from chexpercept.errors import SchemaError

RF = [f"effusion_s{i}_positive_0" for i in range(1, 4)]
LF = "effusion_s9_negative_0"


def _rows(path):
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _bench(tmp_path, bench_builder):
    bench = tmp_path / "bench"
    bench.mkdir()
    items = {k: bench_builder("revision_free") for k in RF}
    items[LF] = bench_builder("lesion_free")
    (bench / "chexpercept.json").write_text(json.dumps(items), encoding="utf-8")
    return bench


def _release_run(builders):
    cases = [builders.make_case(k, "revision_free", s1=True, s2=i != 0)
             for i, k in enumerate(RF)]
    lf = builders.make_case(LF, "lesion_free", s1=False)
    lf["detection_qa"]["ground_truth"] = 2  # "No"
    return [*cases, lf]


def test_option_counts_come_from_the_bundle(tmp_path, bench_builder):
    counts = option_counts(load_chance_or_none(_bench(tmp_path, bench_builder)))
    assert counts[RF[0]] == {"detection_qa": 2, "contour_evaluation_qa": 2,
                             "contour_revision_qa.revision_result": 4,
                             "attribute_extraction_qa.distribution": 4,
                             "attribute_extraction_qa.severity/measurement": 3,
                             "attribute_extraction_qa.comparison": 4}
    assert counts[LF] == {"detection_qa": 2}
    assert option_counts(None) is None


def test_stage04_writes_both_tables_and_a_report_section(tmp_path, builders, bench_builder):
    results = tmp_path / "results"
    builders.write_run(results, "dummy_baseline", _release_run(builders))
    shuffled = _release_run(builders)
    for i, case in enumerate(shuffled[:3]):  # "Yes" shown second in two of the three
        case["detection_qa"]["option_order"] = [2, 1] if i < 2 else [1, 2]
        case["detection_qa"]["circular_correct"] = i == 0
    builders.write_run(results, "other_model", shuffled)
    out = tmp_path / "out"
    analyze(results, "implicit", output_dir=out, benchmark_dir=_bench(tmp_path, bench_builder),
            bootstrap=0, viewer=False, jobs=1)
    all_dir = out / "all_models_oracle_implicit"

    pos = _rows(all_dir / "option_position_accuracy.csv")
    assert list(pos[0]) == ["model", "provider", "model_name", "variant", "question", "path",
                            "position", "n", "accuracy", "circular_accuracy"]
    cell = {(r["model"], r["question"], r["path"], r["position"]): r for r in pos}
    # release run (no option_order): the position is the ground truth
    assert cell[("dummy_baseline", "detection_qa", "revision_free", "1")]["n"] == "3"
    assert cell[("dummy_baseline", "contour_evaluation_qa", "revision_free", "1")][
        "accuracy"] == "0.666667"
    assert cell[("dummy_baseline", "detection_qa", "lesion_free", "2")]["accuracy"] == \
        "0.000000"
    assert cell[("dummy_baseline", "detection_qa", "revision_free", "1")][
        "circular_accuracy"] == ""
    # option_order maps "Yes" (original 1) to its displayed position
    assert cell[("other_model", "detection_qa", "revision_free", "2")]["n"] == "2"
    assert cell[("other_model", "detection_qa", "revision_free", "2")][
        "circular_accuracy"] == "0.500000"
    assert "chance" not in {r["model"] for r in pos}

    base = {(r["model"], r["question"], r["path"], r["k"]): r["accuracy"]
            for r in _rows(all_dir / "always_k_baselines.csv")}
    assert base[("dummy_baseline", "detection_qa", "revision_free", "1")] == "1.000000"
    # k = 2 is never correct on positive detection: listed because the bundle has 2 options
    assert base[("dummy_baseline", "detection_qa", "revision_free", "2")] == "0.000000"
    assert base[("dummy_baseline", "detection_qa", "lesion_free", "1")] == "0.000000"
    assert base[("other_model", "detection_qa", "revision_free", "2")] == "0.666667"

    report = (all_dir / "report.md").read_text(encoding="utf-8")
    section = report.split("## Option position", 1)[1].split("\n## ", 1)[0]
    assert ("| dummy_baseline | detection_qa | revision_free | 1: 100.0 (n=3) | 1: 100.0, "
            "2: 0.0 |") in section
    assert "| other_model | detection_qa | revision_free | 1: 100.0 (n=1); 2: 100.0 (n=2) |" \
        in section and "circular accuracy by position" in section
    assert "Circular accuracy (`--option-order circular` runs): the share" in section
    assert "[option_position_accuracy.csv](option_position_accuracy.csv)" in report
    assert "[always_k_baselines.csv](always_k_baselines.csv)" in report


def test_only_scored_cases_count(builders):
    records = {c["key_id"]: c for c in _release_run(builders)}
    tables = option_tables(records, [RF[0], LF], None, "all_results.json")
    assert [(r["path"], r["position"], r["n"]) for r in tables.positions
            if r["question"] == "detection_qa"] == [("lesion_free", 2, 1),
                                                    ("revision_free", 1, 1)]
    # without the bundle the largest correct position seen stands in for the option count
    assert [r["k"] for r in tables.baselines if r["path"] == "revision_free"] == [1, 1]


def test_bad_tables_name_the_file_and_key_id(builders):
    records = {c["key_id"]: c for c in _release_run(builders)}
    records[RF[1]]["detection_qa"]["option_order"] = [3, 1]
    with pytest.raises(SchemaError, match=f"all_results.json: {RF[1]}: detection_qa"):
        option_tables(records, list(records), None, "all_results.json")
    records = {c["key_id"]: c for c in _release_run(builders)}
    counts = {LF: {"detection_qa": 1}}
    with pytest.raises(SchemaError, match=f"{LF}: detection_qa: correct option shown at "
                                          "position 2 but the benchmark item has 1 options"):
        option_tables(records, list(records), counts, "all_results.json")
