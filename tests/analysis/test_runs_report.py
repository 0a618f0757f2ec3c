"""Stage 04 discovery, loading, CSV writing (exact layout, byte-stable) and error messages."""

from __future__ import annotations

import json

import pytest

from chexpercept.analysis import (
    analyse_run_file,
    discover_runs,
    format_summary_table,
    read_case_table,
    write_all_models_csvs,
    write_model_csvs,
    write_plots,
)
from chexpercept.errors import InputError, SchemaError
from chexpercept.layouts import (
    MODEL_ATTRIBUTE_CSV,
    MODEL_REVISION_CSV,
    MODEL_SUMMARY_CSV,
    PLOT_NAMES,
    all_models_dir,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _cases(mk):
    return [
        mk("effusion_s1_positive_0", "revision_required"),
        mk("effusion_s1_positive_1", "revision_free", s2=False),
        mk("cardiomegaly_s2_positive_0", "revision_required", s3=None),
    ]


def test_discovery_sorted_filters_and_setting(tmp_path, builders):
    for name in ("opensource_qwen3.6-27b_no_thinking", "azure_gpt-5.4", "openai_gpt-5.4"):
        builders.write_run(tmp_path, name, _cases(builders.make_case))
    builders.write_run(tmp_path, "dummy_baseline", _cases(builders.make_case), setting="none")
    runs = discover_runs(tmp_path, "implicit")
    assert [r.name for r in runs] == ["azure_gpt-5.4", "openai_gpt-5.4",
                                      "opensource_qwen3.6-27b_no_thinking"]
    assert runs[2].provider == "opensource" and runs[2].model == "qwen3.6-27b_no_thinking"
    assert [r.name for r in discover_runs(tmp_path, "implicit", model="gpt-5.4")] == [
        "azure_gpt-5.4", "openai_gpt-5.4"]
    assert [r.name for r in discover_runs(tmp_path, "implicit", provider="openai")] == [
        "openai_gpt-5.4"]
    assert [r.name for r in discover_runs(tmp_path, "none")] == ["dummy_baseline"]


def test_no_matching_run_names_folder_setting_and_runs_present(tmp_path, builders):
    builders.write_run(tmp_path, "dummy_baseline", _cases(builders.make_case))
    with pytest.raises(InputError) as exc:
        discover_runs(tmp_path, "explicit")
    msg = str(exc.value)
    assert str(tmp_path) in msg and "oracle_explicit" in msg and "dummy_baseline (implicit)" in msg
    with pytest.raises(InputError, match="matching provider=openai"):
        discover_runs(tmp_path, "implicit", provider="openai")
    with pytest.raises(InputError, match="results folder not found"):
        discover_runs(tmp_path / "nope", "implicit")


def test_invalid_all_results_names_file_and_key_id(tmp_path, builders):
    run_dir = builders.write_run(tmp_path, "dummy_baseline", _cases(builders.make_case))
    data = json.loads((run_dir / "all_results.json").read_text())
    data["effusion_s1_positive_1"]["qa_path"] = "somewhere"
    (run_dir / "all_results.json").write_text(json.dumps(data))
    (run,) = discover_runs(tmp_path, "implicit")
    with pytest.raises(SchemaError) as exc:
        read_case_table(run.run_dir, run.name)
    assert "all_results.json" in str(exc.value) and "effusion_s1_positive_1" in str(exc.value)

    (run_dir / "all_results.json").write_text("{not json")
    with pytest.raises(SchemaError, match=r"all_results\.json: not valid JSON"):
        read_case_table(run.run_dir, run.name)


def test_unscorable_case_names_file_and_key_id(tmp_path, builders):
    builders.write_run(tmp_path, "dummy_baseline",
                       [builders.make_case("nodule_s1_positive_0", "revision_free")])
    (run,) = discover_runs(tmp_path, "implicit")
    with pytest.raises(SchemaError) as exc:
        analyse_run_file(run, n_boot=0, seed=0)
    assert "all_results.json" in str(exc.value) and "nodule_s1_positive_0" in str(exc.value)


def test_limit_keeps_first_cases_in_file_order(tmp_path, builders):
    builders.write_run(tmp_path, "dummy_baseline", _cases(builders.make_case))
    (run,) = discover_runs(tmp_path, "implicit")
    table, _ = read_case_table(run.run_dir, run.name, limit=2)
    assert table.key_ids == ("effusion_s1_positive_0", "effusion_s1_positive_1")


def test_model_csvs_exact_text_and_empty_cells(tmp_path, builders):
    run_dir = builders.write_run(tmp_path, "dummy_baseline", _cases(builders.make_case))
    (run,) = discover_runs(tmp_path, "implicit")
    metrics = analyse_run_file(run, n_boot=0, seed=0).metrics
    paths = write_model_csvs(metrics, run.run_dir)
    assert [p.name for p in paths] == [MODEL_SUMMARY_CSV, MODEL_REVISION_CSV,
                                       MODEL_ATTRIBUTE_CSV]
    assert all(p.parent == run_dir for p in paths)
    assert paths[0].read_text() == (
        "path,model,setting,acc(stage1),acc(stage2),acc(stage3),acc(stage4),depth\n"
        "revision_required,dummy_baseline,end_to_end,1.000000,1.000000,0.500000,1.000000,"
        "3.000000\n"
        "revision_required,dummy_baseline,oracle_passed,1.000000,1.000000,0.500000,1.000000,"
        "3.000000\n"
        "revision_free,dummy_baseline,end_to_end,1.000000,0.000000,,0.000000,1.000000\n"
        "revision_free,dummy_baseline,oracle_passed,1.000000,0.000000,,1.000000,1.000000\n"
        "lesion_free,dummy_baseline,end_to_end,,,,,\n"
        "lesion_free,dummy_baseline,oracle_passed,,,,,\n")
    assert paths[1].read_text() == (
        "path,model,acc(expansion),acc(contraction),acc(revision_result)\n"
        "revision_required,dummy_baseline,0.500000,0.500000,0.500000\n")
    assert paths[2].read_text() == (
        "path,model,acc(distribution),acc(location),acc(severity/measurement),"
        "acc(comparison)\n"
        "revision_required+revision_free,dummy_baseline,1.000000,1.000000,1.000000,1.000000\n")


def _analyse(results_dir, out_dir):
    all_metrics = []
    for run in discover_runs(results_dir, "implicit"):
        m = analyse_run_file(run, n_boot=0, seed=0).metrics
        write_model_csvs(m, run.run_dir)
        all_metrics.append(m)
    return all_metrics, write_all_models_csvs(all_metrics, out_dir)


def test_all_models_csvs_concatenate_and_are_byte_identical_on_rerun(tmp_path, builders):
    results = tmp_path / "results"
    for name in ("openai_gpt-5.4", "azure_gpt-5.4"):
        builders.write_run(results, name, _cases(builders.make_case))
    out = all_models_dir(tmp_path / "out", "implicit")
    metrics, paths = _analyse(results, out)
    first = {p: p.read_bytes() for p in paths}
    summary = paths[0].read_text().splitlines()
    assert len(summary) == 1 + 12
    # model column = run folder name: same alias under two providers stays apart
    # (docs/differences.md D43)
    assert [line.split(",")[1] for line in summary[1:]] == ["azure_gpt-5.4"] * 6 + [
        "openai_gpt-5.4"] * 6
    _analyse(results, out)
    assert {p: p.read_bytes() for p in paths} == first
    table = format_summary_table(metrics, "implicit")
    assert "azure_gpt-5.4" in table and "n/a" in table and "100.0" in table


def test_plots_written_as_png(tmp_path, builders):
    builders.write_run(tmp_path, "dummy_baseline", _cases(builders.make_case))
    builders.write_run(tmp_path, "random_baseline",
                       [builders.make_case("edema_s1_negative_0", "lesion_free", s1=False)])
    metrics, _ = _analyse(tmp_path, tmp_path / "out")
    paths = write_plots(metrics, tmp_path / "out", "implicit")
    assert [p.name for p in paths] == list(PLOT_NAMES)
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000


def test_report_gives_each_runs_prefix_cache_hit_rate(tmp_path, builders):
    """Stage 04 shows the share of prompt tokens vLLM found cached (issue 21, item 1)."""
    from chexpercept.analysis.api import analyze

    results = tmp_path / "results"
    cases = [builders.make_case(f"effusion_s{i}_positive_0", "revision_required")
             for i in range(4)]
    for i, case in enumerate(cases):
        case["token_usage"] = {"input_tokens": 1000, "cached_input_tokens": 250 * i}
    builders.write_run(results, "opensource_tiny", cases)
    builders.write_run(results, "dummy_baseline",
                       [builders.make_case(f"effusion_s{i}_positive_0", "revision_required")
                        for i in range(4)])
    res = analyze(results, "implicit", output_dir=tmp_path / "out", benchmark_dir=None,
                  bootstrap=0, jobs=1)
    by_name = {a.name: a.table for a in res.analyses}
    assert by_name["opensource_tiny"].prefix_cache_hit_rate == 1500 / 4000
    report = (res.out_dir / "report.md").read_text(encoding="utf-8")
    row = next(line for line in report.splitlines() if line.startswith("| opensource_tiny "))
    assert row.rstrip(" |").endswith("37.5 % (1,500 of 4,000 tokens)")
    dummy = next(line for line in report.splitlines() if line.startswith("| dummy_baseline "))
    assert dummy.rstrip(" |").endswith("n/a")
