"""Stage 04 CLI: new tables, chance rows, report.md, extra plots, and 02_compare_runs.py."""

from __future__ import annotations

import csv
import json
import runpy
from pathlib import Path

import pytest

from chexpercept.layouts import ALL_SUMMARY_CSV, PLOT_NAMES, all_models_dir, repo_root
from utils.cli import run_main

ANALYZE = repo_root() / "src" / "04_analyze_eval_result" / "01_analyze_model_performance.py"
COMPARE = repo_root() / "src" / "04_analyze_eval_result" / "02_compare_runs.py"
NEW_CSVS = ("stage_accuracy_ci.csv", "lesion_stage_accuracy.csv", "subquestion_accuracy.csv",
            "e2e_funnel.csv", "stage_status.csv")
NEW_PLOTS = ("plot_lesion_heatmap.png", "plot_e2e_funnel.png")


def _main(script):
    return runpy.run_path(str(script))["main"]


def _case(key_id, qa_path, ok=True, status=None):
    # a wrong answer names option 2 (the bundle's answer key is 1: _bench), so Stage 04's
    # recomputed correctness agrees with the flag
    flag = {"ground_truth": 1, "correct": ok, **({"status": status} if status else {})}
    answer = "1" if ok else "2"
    case = {"key_id": key_id, "qa_path": qa_path, "detection_qa": {"response": answer, **flag}}
    if qa_path != "lesion_free":
        case["contour_evaluation_qa"] = {"responses": answer, **flag}
    return case


def _write(results: Path, name: str, cases, setting="implicit") -> Path:
    run_dir = results / name / f"oracle_{setting}"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "all_results.json").write_text(json.dumps({c["key_id"]: c for c in cases}))
    return run_dir


def _bench(root: Path, keys) -> Path:
    """chexpercept.json with detection (2 options) and, for positives, contour eval."""
    def mc(n):
        opts = [f"o{i}" for i in range(n)]
        return {"question": "q", "answer_options": opts, "answer": opts[0], "answer_index": 1}

    items = {}
    for key_id, qa_path in keys:
        item = {"detection_qa": {**mc(2), "answer": "Yes" if qa_path != "lesion_free" else "No"},
                "pair_id": "p", "dicom_id": "d"}
        if qa_path != "lesion_free":
            item["contour_qa"] = {"no_deformation": True,
                                  "contour_eval_qa": {**mc(2), "relative_path": "x.png"}}
        items[key_id] = item
    bench = root / "bench"
    bench.mkdir()
    (bench / "chexpercept.json").write_text(json.dumps(items))
    return bench


KEYS = [("cardiomegaly_s1_positive_0", "revision_free"),
        ("cardiomegaly_s2_positive_0", "revision_free"),
        ("cardiomegaly_s3_negative_0", "lesion_free")]


@pytest.fixture
def results(tmp_path):
    res = tmp_path / "results"
    _write(res, "dummy_baseline", [_case(k, p, ok=True, status="ok") for k, p in KEYS])
    # a refused answer is wrong (Stage 04 recomputes it so): the refusal is case 1's
    _write(res, "random_baseline", [_case(k, p, ok=i == 0, status="refused" if i == 1 else "ok")
                                    for i, (k, p) in enumerate(KEYS)])
    _write(res, "opensource_qwen3.6-27b_no_thinking", [_case(k, p) for k, p in KEYS])
    return res


def _rows(path: Path):
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _args(results, out, *extra):
    return ["--results-dir", str(results), "--output-dir", str(out), "--no-progress",
            "--bootstrap", "50", *extra]


def test_all_models_writes_new_tables_plots_report_and_chance(results, tmp_path):
    bench = _bench(tmp_path, KEYS)
    out = tmp_path / "out"
    assert _main(ANALYZE)(_args(results, out, "--benchmark-dir", str(bench))) == 0
    all_dir = all_models_dir(out, "implicit")
    for name in NEW_CSVS:
        assert (all_dir / name).is_file()
    for name in (*PLOT_NAMES, *NEW_PLOTS):
        data = (all_dir / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 1000
    report = (all_dir / "report.md").read_text()
    for text in ("dummy_baseline", "chance", "## Stage accuracy per path", *NEW_PLOTS,
                 "stage_status.csv", "refused"):
        assert text in report

    rows = _rows(all_dir / "stage_accuracy_ci.csv")
    assert list(rows[0]) == ["model", "provider", "model_name", "variant", "path", "setting",
                             "metric", "value", "ci_low", "ci_high", "n_cases"]
    qwen = [r for r in rows if r["model"] == "opensource_qwen3.6-27b_no_thinking"]
    assert qwen[0]["provider"] == "opensource" and qwen[0]["model_name"] == "qwen3.6-27b"
    assert qwen[0]["variant"] == "no_thinking"
    # chance: RF cardiomegaly = detection 1/2, contour eval 1/2; depth with bonus 1/2+1/4+1/4
    chance = {(r["path"], r["setting"], r["metric"]): r for r in rows if r["model"] == "chance"}
    assert chance[("revision_free", "end_to_end", "acc(stage2)")]["value"] == "0.250000"
    assert chance[("revision_free", "oracle_passed", "acc(stage2)")]["value"] == "0.500000"
    assert chance[("revision_free", "end_to_end", "depth")]["value"] == "1.000000"
    assert chance[("lesion_free", "end_to_end", "acc(stage1)")]["n_cases"] == "1"
    assert chance[("lesion_free", "end_to_end", "acc(stage1)")]["ci_low"] == ""
    rnd = {(r["path"], r["setting"], r["metric"]): r for r in rows
           if r["model"] == "random_baseline"}
    r = rnd[("revision_free", "oracle_passed", "acc(stage1)")]
    assert r["value"] == "0.500000" and r["n_cases"] == "2"
    # 2 cases: too few for an interval, the count stands instead (docs/metrics.md, "Bootstrap")
    assert r["ci_low"] == r["ci_high"] == ""
    # status table: the random run's refusal is counted, the qwen run has no statuses
    status = {(r["model"], r["stage"]): r for r in _rows(all_dir / "stage_status.csv")}
    assert float(status[("random_baseline", "stage1")]["rate(refused)"]) == pytest.approx(1 / 3)
    assert status[("opensource_qwen3.6-27b_no_thinking", "stage1")]["rate(ok)"] == ""
    assert status[("dummy_baseline", "stage4")]["n_cases"] == "0"
    # release CSVs unchanged in layout: no chance row, no new columns
    summary = (all_dir / ALL_SUMMARY_CSV).read_text().splitlines()
    assert len(summary) == 1 + 3 * 6 and "chance" not in "".join(summary)


def test_rerun_is_byte_identical_and_seed_changes_intervals(results, tmp_path):
    out = tmp_path / "out"
    all_dir = all_models_dir(out, "implicit")
    assert _main(ANALYZE)(_args(results, out, "--seed", "3")) == 0
    first = {n: (all_dir / n).read_bytes() for n in NEW_CSVS}
    assert _main(ANALYZE)(_args(results, out, "--seed", "3")) == 0
    assert {n: (all_dir / n).read_bytes() for n in NEW_CSVS} == first
    assert (all_dir / "report.md").is_file()


def test_missing_benchmark_gives_na_chance_and_one_warning(results, tmp_path, capsys):
    out = tmp_path / "out"
    assert _main(ANALYZE)(_args(results, out, "--benchmark-dir", str(tmp_path / "nope"))) == 0
    err = capsys.readouterr().err
    assert err.count("chance rows are NA") == 1 and "nope" in err
    rows = _rows(all_models_dir(out, "implicit") / "lesion_stage_accuracy.csv")
    chance = [r for r in rows if r["model"] == "chance"]
    assert chance and all(r["value"] == "" for r in chance)


def test_single_model_mode_writes_new_tables_next_to_the_run(results, tmp_path):
    out = tmp_path / "out"
    assert _main(ANALYZE)(_args(results, out, "--provider", "dummy", "--bootstrap", "0")) == 0
    run_dir = results / "dummy_baseline" / "oracle_implicit"
    for name in NEW_CSVS:
        assert (run_dir / name).is_file()
    assert not (results / "random_baseline" / "oracle_implicit" / NEW_CSVS[0]).exists()
    rows = _rows(run_dir / "stage_accuracy_ci.csv")
    assert {r["model"] for r in rows} == {"dummy_baseline", "chance"}
    assert all(r["ci_low"] == "" for r in rows)  # --bootstrap 0: no intervals
    assert not all_models_dir(out, "implicit").exists()


def test_help_lists_new_flags(capsys):
    with pytest.raises(SystemExit):
        _main(ANALYZE)(["--help"])
    text = capsys.readouterr().out
    for flag in ("--benchmark-dir", "--bootstrap", "--seed"):
        assert flag in text


def test_compare_runs_writes_csv_and_refuses_other_cases(results, tmp_path, capsys):
    a = results / "dummy_baseline" / "oracle_implicit"
    b = results / "random_baseline" / "oracle_implicit"
    out = tmp_path / "cmp"
    assert _main(COMPARE)(["--run-a", str(a), "--run-b", str(b), "--output-dir", str(out),
                           "--bootstrap", "50", "--no-progress"]) == 0
    path = out / "paired_comparisons" / ("dummy_baseline.oracle_implicit_vs_"
                                         "random_baseline.oracle_implicit.csv")
    rows = _rows(path)
    (r,) = [r for r in rows if (r["lesion"], r["path"], r["metric"])
            == ("all", "all", "oracle:stage1")]
    assert (r["n_cases"], r["n_a_only_correct"], r["n_b_only_correct"]) == ("3", "2", "0")
    assert r["diff_b_minus_a"] == "-0.666667" and r["mcnemar_test"] == "score"
    # 2 vs 0 discordant: z = 2 / sqrt(2); Holm over the comparison's tests, never below p
    assert float(r["p_value"]) == pytest.approx(0.157299, abs=1e-6)
    assert float(r["p_holm"]) >= float(r["p_value"])
    assert "B - A" in capsys.readouterr().out

    other = _write(tmp_path / "other", "x_y", [_case("edema_s9_negative_0", "lesion_free")])
    assert run_main(_main(COMPARE), ["--run-a", str(a), "--run-b", str(other / "all_results.json"),
                                     "--output-dir", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "only in A" in err and "edema_s9_negative_0" in err


def test_run_covering_part_of_the_benchmark_is_reported(tmp_path, capsys):
    res = tmp_path / "results"
    _write(res, "dummy_baseline", [_case(k, p, ok=True, status="ok") for k, p in KEYS[:2]])
    bench = _bench(tmp_path, KEYS)
    assert _main(ANALYZE)(_args(res, tmp_path / "out", "--benchmark-dir", str(bench))) == 0
    err = capsys.readouterr().err
    assert "dummy_baseline has results for 2 of the benchmark's 3 cases" in err


def test_compare_runs_api_writes_what_the_cli_writes(results, tmp_path, capsys):
    from chexpercept.analysis.api import compare_runs

    a = results / "dummy_baseline" / "oracle_implicit"
    b = results / "random_baseline" / "oracle_implicit"
    assert _main(COMPARE)(["--run-a", str(a), "--run-b", str(b), "--output-dir",
                           str(tmp_path / "cli"), "--bootstrap", "50", "--seed", "4",
                           "--no-progress"]) == 0
    printed = capsys.readouterr().out
    result = compare_runs(a, b, output_dir=tmp_path / "api", n_boot=50, seed=4)
    cli_csv = tmp_path / "cli" / "paired_comparisons" / result.csv_path.name
    assert result.csv_path.read_bytes() == cli_csv.read_bytes()
    assert result.text in printed and result.n_cases == 3
    assert [r.as_row()["metric"] for r in result.rows][:1] == [_rows(cli_csv)[0]["metric"]]
    # without output_dir: next to the inputs (the folder holding both runs)
    assert compare_runs(a, b, n_boot=0).csv_path.parent == results / "paired_comparisons"
