"""Stage 04 CLI smoke tests: main([...]) in-process through runpy."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from chexpercept.errors import InputError, SchemaError
from chexpercept.layouts import (
    ALL_ATTRIBUTE_CSV,
    ALL_REVISION_CSV,
    ALL_SUMMARY_CSV,
    MODEL_SUMMARY_CSV,
    PLOT_NAMES,
    all_models_dir,
    repo_root,
)

SCRIPT = repo_root() / "src" / "04_analyze_eval_result" / "01_analyze_model_performance.py"
ATTRS = ("distribution", "location", "severity/measurement", "comparison")


def _main():
    return runpy.run_path(str(SCRIPT))["main"]


def _case(key_id, qa_path, ok=True):
    flag = {"correct": ok}
    case = {"key_id": key_id, "qa_path": qa_path, "detection_qa": {"response": "1", **flag}}
    if qa_path != "lesion_free":
        case["contour_evaluation_qa"] = {"responses": "1", **flag}
        case["attribute_extraction_qa"] = {**flag, **{k: dict(flag) for k in ATTRS}}
    if qa_path == "revision_required":
        case["contour_revision_qa"] = {**flag, "expansion": flag, "contraction": flag,
                                       "revision_result": flag}
    return case


def _write(results: Path, name: str, ok=True, setting="implicit"):
    run_dir = results / name / f"oracle_{setting}"
    run_dir.mkdir(parents=True)
    cases = [_case("effusion_s1_positive_0", "revision_required", ok),
             _case("edema_s1_positive_0", "revision_free", ok),
             _case("opacity_s1_negative_0", "lesion_free", ok)]
    (run_dir / "all_results.json").write_text(json.dumps({c["key_id"]: c for c in cases}))
    return run_dir


@pytest.fixture
def results(tmp_path):
    res = tmp_path / "results"
    _write(res, "dummy_baseline", ok=True)
    _write(res, "random_baseline", ok=False)
    return res


def _args(results, out, *extra):
    return ["--results-dir", str(results), "--output-dir", str(out), "--no-progress", *extra]


def test_all_models_default_writes_everything_and_prints_table(results, tmp_path, capsys):
    out = tmp_path / "out"
    assert _main()(_args(results, out)) == 0
    all_dir = all_models_dir(out, "implicit")
    for name in (ALL_SUMMARY_CSV, ALL_REVISION_CSV, ALL_ATTRIBUTE_CSV):
        assert (all_dir / name).is_file()
    for name in PLOT_NAMES:
        assert (all_dir / name).read_bytes().startswith(b"\x89PNG")
    assert (all_dir / "run_meta.json").is_file()
    for run in ("dummy_baseline", "random_baseline"):
        assert (results / run / "oracle_implicit" / MODEL_SUMMARY_CSV).is_file()
    text = capsys.readouterr().out
    assert "dummy_baseline" in text and "random_baseline" in text
    assert "100.0" in text and "n/a" in text and str(all_dir) in text
    summary = (all_dir / ALL_SUMMARY_CSV).read_text().splitlines()
    assert summary[0] == "path,model,setting,acc(stage1),acc(stage2),acc(stage3),acc(stage4),depth"
    assert summary[1] == ("revision_required,dummy_baseline,end_to_end,1.000000,1.000000,"
                          "1.000000,1.000000,4.000000")
    assert summary[5] == "lesion_free,dummy_baseline,end_to_end,1.000000,,,,1.000000"
    assert summary[7] == ("revision_required,random_baseline,end_to_end,0.000000,0.000000,"
                          "0.000000,0.000000,0.000000")


def test_rerun_gives_byte_identical_csvs(results, tmp_path):
    out = tmp_path / "out"
    all_dir = all_models_dir(out, "implicit")
    csvs = [all_dir / ALL_SUMMARY_CSV, all_dir / ALL_REVISION_CSV,
            all_dir / ALL_ATTRIBUTE_CSV,
            results / "dummy_baseline" / "oracle_implicit" / MODEL_SUMMARY_CSV]
    assert _main()(_args(results, out)) == 0
    first = [p.read_bytes() for p in csvs]
    assert _main()(_args(results, out)) == 0
    assert [p.read_bytes() for p in csvs] == first


def test_single_model_mode_only_touches_that_run(results, tmp_path, capsys):
    out = tmp_path / "out"
    assert _main()(_args(results, out, "--provider", "dummy", "--model", "baseline")) == 0
    assert (results / "dummy_baseline" / "oracle_implicit" / MODEL_SUMMARY_CSV).is_file()
    assert not (results / "random_baseline" / "oracle_implicit" / MODEL_SUMMARY_CSV).exists()
    assert not all_models_dir(out, "implicit").exists()
    text = capsys.readouterr().out
    assert "dummy_baseline" in text and "random_baseline" not in text


def test_all_models_flag_with_provider_is_a_usage_error(results, tmp_path):
    with pytest.raises(SystemExit) as exc:
        _main()(_args(results, tmp_path / "out", "--all-models", "--model", "baseline"))
    assert exc.value.code == 2


def test_oracle_setting_alias_and_no_matching_runs_error(results, tmp_path):
    with pytest.raises(InputError) as exc:
        _main()(_args(results, tmp_path / "out", "--oracle_setting", "none"))
    assert str(results) in str(exc.value) and "oracle_none" in str(exc.value)
    _write(results, "dummy_baseline2", setting="none")
    assert _main()(_args(results, tmp_path / "out", "--oracle-setting", "none")) == 0
    assert (all_models_dir(tmp_path / "out", "none") / ALL_SUMMARY_CSV).is_file()


def test_invalid_file_error_exit_code_and_message(results, tmp_path, capsys):
    bad = results / "random_baseline" / "oracle_implicit" / "all_results.json"
    data = json.loads(bad.read_text())
    del data["edema_s1_positive_0"]["detection_qa"]
    bad.write_text(json.dumps(data))
    with pytest.raises(SchemaError):
        _main()(_args(results, tmp_path / "out"))
    from utils.cli import run_main

    assert run_main(_main(), _args(results, tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "edema_s1_positive_0" in err


def test_limit_and_help(results, tmp_path, capsys):
    assert _main()(_args(results, tmp_path / "out", "--model", "baseline", "--provider",
                         "dummy", "--limit", "1")) == 0
    summary = (results / "dummy_baseline" / "oracle_implicit" / MODEL_SUMMARY_CSV)
    assert summary.read_text().splitlines()[3].startswith("revision_free,dummy_baseline,"
                                                          "end_to_end,,")
    with pytest.raises(SystemExit):
        _main()(["--help"])
    help_text = capsys.readouterr().out
    for flag in ("--results-dir", "--oracle_setting", "--oracle-setting", "--all_models",
                 "--all-models", "--provider", "--model", "--limit", "--output-dir"):
        assert flag in help_text


def test_config_work_dir_sets_default_results_dir(tmp_path, capsys):
    work = tmp_path / "work"
    _write(work / "03_eval_vlm_on_chexpercept", "dummy_baseline")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"path:\n  mimic_cxr_path: /x\n  mimic_ils_path: /y\n  work_dir: {work}\n")
    assert _main()(["--config", str(cfg), "--output-dir", str(tmp_path / "out"),
                    "--provider", "dummy", "--no-progress"]) == 0
    assert "dummy_baseline" in capsys.readouterr().out


def test_all_results_nested_200000_deep_is_one_error_line_naming_the_file(tmp_path, capsys):
    """Was: an uncaught RecursionError traceback, exit 1 (issue 29, item 3)."""
    from utils.cli import run_main

    results = tmp_path / "results"
    run_dir = _write(results, "dummy_baseline")
    (run_dir / "all_results.json").write_text("[" * 200_000, encoding="utf-8")
    assert run_main(_main(), _args(results, tmp_path / "out", "--no-viewer")) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: {run_dir / 'all_results.json'}: not usable JSON: ")
    assert "Traceback" not in err and "RecursionError" not in err
