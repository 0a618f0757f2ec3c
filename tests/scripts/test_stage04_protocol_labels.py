"""The protocol on every Stage 04 output (issue 33 item 1).

A release and a ``--option-order shuffled`` Stage 03 run of one baseline model (``random``, on
the tiny bundle of ``tests/evaluation/stage03_bundle.py``): report.md's runs table names the
order, the option-position text follows the run's own order, and ``02_compare_runs.py`` gives
the two runs distinct names in its header and file name. A default run keeps its name.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import runpy

import pytest

from chexpercept.analysis.compare import comparison_labels
from chexpercept.analysis.runs import protocol_fields, run_from_dir, run_label
from chexpercept.layouts import all_models_dir, repo_root, run_manifest_path
from utils.cli import run_main

ROOT = repo_root()
EVAL = ROOT / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"
ANALYZE = ROOT / "src" / "04_analyze_eval_result" / "01_analyze_model_performance.py"
COMPARE = ROOT / "src" / "04_analyze_eval_result" / "02_compare_runs.py"
_spec = importlib.util.spec_from_file_location(
    "stage03_bundle", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
stage03_bundle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage03_bundle)
RELEASE_TEXT = ("Under the release order the correct option's position is the ground truth "
                "(\"Yes\" is option 1), so always-1 scores 100 on positive detection; a score "
                "close to its always-k baseline may be position preference.")


def _main(script, name):
    return runpy.run_path(str(script), run_name=name)["main"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``(bench, release run folder, shuffled run folder)`` of the ``random`` baseline."""
    tmp = tmp_path_factory.mktemp("protocol")
    bench = stage03_bundle.write_bundle(tmp / "bench")
    main = _main(EVAL, "stage03_eval")
    out = {}
    for order in ("release", "shuffled"):
        argv = ["--benchmark-dir", str(bench), "--output-path", str(tmp / order),
                "--no-progress", "--provider", "random", "--option-order", order]
        assert run_main(main, argv) == 0
        name = "random_baseline" + ("" if order == "release" else f"+order={order}")
        out[order] = tmp / order / name / "oracle_implicit"
    return bench, out["release"], out["shuffled"]


def _report(results, bench, out):
    argv = ["--results-dir", str(results), "--output-dir", str(out), "--benchmark-dir",
            str(bench), "--bootstrap", "0", "--no-viewer", "--no-progress", "--jobs", "1"]
    assert _main(ANALYZE, "stage04_analyze")(argv) == 0
    return (all_models_dir(out, "implicit") / "report.md").read_text(encoding="utf-8")


def test_report_names_the_shuffled_runs_order(runs, tmp_path):
    bench, _, shuffled = runs
    text = _report(shuffled.parents[1], bench, tmp_path / "out")
    label = "random_baseline+order=shuffled"
    header = next(line for line in text.splitlines() if line.startswith("| model |"))
    assert "| protocol |" in header
    row = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
    assert "| order=shuffled |" in row
    assert "Under the release order" not in text
    assert "Under the shuffled order each question's options are shown in an order drawn " \
           "from the run's seed" in text
    assert f"| {label} | detection_qa |" in text  # the option-position rows carry the label


def test_figures_name_the_run_by_its_label(runs, tmp_path, monkeypatch):
    from chexpercept.analysis import plots

    seen = []
    real = plots._draw

    def draw(figure):
        kind, args = figure
        seen.append([m.model for m in args[0]] if kind in ("stage", "depth")
                    else list(args[0]) if kind == "bars" else [a.name for a in args[0]])
        return real(figure)

    monkeypatch.setattr(plots, "_draw", draw)
    bench, _, shuffled = runs
    _report(shuffled.parents[1], bench, tmp_path / "out")
    assert len(seen) == 6
    assert all(names[0] == "random_baseline+order=shuffled" for names in seen)


def test_default_run_report_has_no_protocol_column_and_the_release_text(runs, tmp_path):
    bench, release, _ = runs
    text = _report(release.parents[1], bench, tmp_path / "out")
    assert "| protocol |" not in text
    assert "Runs (model = `<provider>_<model>[_no_thinking]`):" in text
    assert RELEASE_TEXT in text
    assert "| random_baseline |" in text and "random_baseline+" not in text


def test_compare_release_with_shuffled_names_both_runs(runs, tmp_path, capsys):
    _, release, shuffled = runs
    out = tmp_path / "cmp"
    assert _main(COMPARE, "stage04_compare")(["--run-a", str(release), "--run-b", str(shuffled),
                                              "--output-dir", str(out), "--bootstrap", "0",
                                              "--no-progress"]) == 0
    printed = capsys.readouterr().out
    a, b = "random_baseline.oracle_implicit", "random_baseline+order=shuffled.oracle_implicit"
    assert f"B - A, A = {a}, B = {b} (" in printed
    assert [p.name for p in (out / "paired_comparisons").iterdir()] == [f"{a}_vs_{b}.csv"]


def test_two_copies_of_one_run_are_told_apart_as_a_and_b(runs, caplog):
    _, release, _ = runs
    ref = run_from_dir(release)
    with caplog.at_level(logging.WARNING, logger="chexpercept.analysis.compare"):
        labels = comparison_labels(ref, ref)
    assert labels == ("random_baseline.oracle_implicit.A", "random_baseline.oracle_implicit.B")
    assert "same name and protocol" in caplog.text


def test_release_manifest_gives_the_folder_name(runs):
    _, release, shuffled = runs
    assert run_from_dir(release).label == "random_baseline"
    manifest = json.loads(run_manifest_path(shuffled).read_text(encoding="utf-8"))
    assert protocol_fields(manifest) == (("order", "shuffled"),)


@pytest.mark.parametrize(("manifest", "label"), [
    (None, "m"),
    ({"option_order": "release", "seed": 0}, "m"),
    ({"seed": 0, "provider_settings": {"params": {"temperature": 0.0}}}, "m"),
    # Gemini 3's default temperature is 1.0 (the release's): a default run. Stage 03 records
    # the provider's default in provider_decoding; Stage 04 never branches on a provider name
    ({"provider": "gemini", "model": "gemini-3.1-pro", "seed": 0,
      "provider_decoding": {"default_temperature": 1.0, "sampling": "temperature"},
      "provider_settings": {"generation_config": {"temperature": 1.0}}}, "m"),
    ({"provider": "gemini", "model": "gemini-3.1-pro", "seed": 0,  # written before the field
      "provider_settings": {"generation_config": {"temperature": 1.0}}}, "m+temperature=1"),
    ({"provider": "gemini", "model": "gemini-2.5-pro", "seed": 0,
      "provider_decoding": {"default_temperature": 0.0, "sampling": "temperature"},
      "provider_settings": {"generation_config": {"temperature": 1.0}}}, "m+temperature=1"),
    ({"option_order": "circular", "seed": 3}, "m+order=circular+seed=3"),
    # a greedy release-order run's seed changes no answer; the random baseline's does
    ({"provider": "openai", "seed": 3, "provider_settings": {"params": {"temperature": 0}}},
     "m"),
    ({"provider": "random", "seed": 3, "provider_decoding": {"sampling": "seeded"}},
     "m+seed=3"),
    ({"provider": "my.plugin:Seeded", "seed": 3, "provider_decoding": {"sampling": "seeded"}},
     "m+seed=3"),  # the provider's declaration, not its name
    ({"sampling": {"samples": 5, "seeds": [0, 1, 2, 3, 4]}, "seed": 0,
      "provider_settings": {"sampling": {"temperature": 0.7}}},
     "m+samples=5+temperature=0.7"),
    ({"seed": 0, "judge": {"model": "openai:gpt-5.4", "audit_rate": 0.1}},
     "m+judge=openai-gpt-5.4"),
    ({"seed": 0, "option_probs": True, "ablation": "no_images"},
     "m+option_probs=yes+ablation=no_images"),
])
def test_label_carries_every_non_default_identity_field(manifest, label):
    assert run_label("m", protocol_fields(manifest)) == label


def test_stage03_records_the_providers_default_decoding(runs):
    from utils.llm.gemini_provider import GeminiChatModel

    _, release, _ = runs
    manifest = json.loads(run_manifest_path(release).read_text(encoding="utf-8"))
    assert manifest["provider_decoding"] == {"default_temperature": 0.0, "sampling": "seeded"}
    assert GeminiChatModel.default_temperature("gemini-3.1-pro") == 1.0
    assert GeminiChatModel.default_temperature("gemini-2.5-flash") == 0.0
