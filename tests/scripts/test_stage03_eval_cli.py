"""CLI smoke tests of src/03_eval_vlm_on_chexpercept/00_eval.py, called in-process via runpy."""

from __future__ import annotations

import importlib.util
import json
import runpy
from pathlib import Path

import pytest

from chexpercept import schema
from chexpercept.layouts import all_results_path, records_path, run_manifest_path
from utils.cli import run_main

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"
_spec = importlib.util.spec_from_file_location(
    "stage03_bundle", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
stage03_bundle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage03_bundle)


@pytest.fixture(scope="module")
def main():
    return runpy.run_path(str(SCRIPT), run_name="stage03_eval")["main"]


@pytest.fixture()
def bench(tmp_path):
    return stage03_bundle.write_bundle(tmp_path / "bench")


def _args(bench, out, *extra):
    return ["--benchmark-dir", str(bench), "--output-path", str(out), "--no-progress", *extra]


def test_oracle_run_writes_release_layout_and_resumes(main, bench, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_main(main, _args(bench, out, "--provider", "oracle")) == 0
    run_dir = out / "oracle_baseline" / "oracle_implicit"
    results = json.loads(all_results_path(run_dir).read_text(encoding="utf-8"))
    schema.parse_all_results(results, run_dir)
    assert list(results) == list(stage03_bundle.CASES)
    assert all(r["detection_qa"]["correct"] for r in results.values())
    assert records_path(run_dir).is_file() and run_manifest_path(run_dir).is_file()
    assert any(run_dir.joinpath("logs").iterdir())
    capsys.readouterr()
    assert run_main(main, _args(bench, out, "--provider", "oracle", "--resume")) == 0
    err = capsys.readouterr().err
    assert "turns requested: 0 (already done: 33)" in err
    assert f"output: {all_results_path(run_dir)}" in err


def test_debug_flags_and_aliases(main, bench, tmp_path):
    out = tmp_path / "out"
    argv = _args(bench, out, "--debug", "--oracle-setting", "none", "--no-thinking",
                 "--per-path-limit", "1", "--seed", "3", "--save_every", "1")
    assert run_main(main, argv) == 0
    run_dir = out / "dummy_baseline_no_thinking" / "oracle_none"
    results = json.loads(all_results_path(run_dir).read_text(encoding="utf-8"))
    assert [r["qa_path"] for r in results.values()] == ["revision_required", "revision_free",
                                                        "lesion_free"]
    manifest = json.loads(run_manifest_path(run_dir).read_text(encoding="utf-8"))
    assert manifest["seed"] == 3 and manifest["no_thinking"] is True


def test_validate_only_names_key_id_and_path(main, bench, tmp_path, capsys):
    missing = (bench / "chexpercept" / "effusion_s50000001_positive_0" /
               "contour_qa" / "contour_revision_qa" / "option_2.png")
    missing.unlink()
    out = tmp_path / "out"
    assert run_main(main, _args(bench, out, "--provider", "random", "--validate-only")) == 2
    err = capsys.readouterr().err
    # one error line (the validator's size warnings about the 8 px test images may precede it)
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1
    assert "effusion_s50000001_positive_0" in err and str(missing) in err
    assert "Traceback" not in err
    # the run refuses to start too: a case is never asked with fewer images
    assert run_main(main, _args(bench, out, "--provider", "random")) == 2
    assert not out.exists()


def test_validate_only_ok(main, bench, tmp_path, capsys):
    assert run_main(main, _args(bench, tmp_path / "out", "--provider", "dummy",
                                "--validate-only")) == 0
    assert "is valid: 7 case(s) checked" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_vllm_is_a_clean_error(main, bench, tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # not installed here; be explicit anyway
    assert run_main(main, _args(bench, tmp_path / "out", "--provider", "opensource")) == 2
    err = capsys.readouterr().err
    assert 'pip install -e ".[gpu]"' in err
    assert "Traceback" not in err


def test_default_provider_without_api_keys_file(main, bench, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no api_info/api_keys.yaml anywhere (docs/differences.md D33)
    assert run_main(main, _args(bench, tmp_path / "out", "--provider", "random")) == 0


def test_concurrency_goes_to_the_provider_only_where_it_is_an_option(main, bench, tmp_path):
    """--concurrency sets the async runner's requests in flight for a local engine; it is not
    a provider option there (the vLLM and transformers configs have none), so it must not be
    passed to the provider (it was: 'provider ... has no option(s) concurrency')."""
    from chexpercept_cli import eval as script  # the numbered script's code

    args = script.build_parser().parse_args(_args(bench, tmp_path, "--concurrency", "4"))
    assert "concurrency" not in script.provider_flag_options(args, "transformers")
    assert "concurrency" not in script.provider_flag_options(args, "opensource")
    assert script.provider_flag_options(args, "openai")["concurrency"] == 4


@pytest.mark.parametrize("flag", ["--output-p", "--oracle_set", "--benchmark-d"])
def test_abbreviated_flags_are_refused(flag, capsys):
    """eval_chexpercept.sh reads --output-path/--oracle_setting/--benchmark-dir from the argv it
    passes to 00_eval.py to point Stage 04 at the run; an abbreviation that argparse accepted
    ('--output-p X') ran Stage 03 into X and Stage 04 on the default folder."""
    from chexpercept_cli import eval as script

    with pytest.raises(SystemExit) as exc:
        script.build_parser().parse_args([flag, "x", "--provider", "random"])
    assert exc.value.code == 2
    assert f"unrecognized arguments: {flag} x" in capsys.readouterr().err
