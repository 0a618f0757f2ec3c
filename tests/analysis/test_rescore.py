"""Stage 04 recomputes every stored ``correct`` flag and checks the bundle is the run's (issue 29
item 3; docs/metrics.md, "Recomputed correctness")."""

from __future__ import annotations

import json
import logging
import runpy
from pathlib import Path

import pytest

from chexpercept.analysis.api import analyze
from chexpercept.analysis.case_table import METRIC_INDEX
from chexpercept.analysis.rescore import load_answer_keys, rescore_results
from chexpercept.errors import InputError, SchemaError
from chexpercept.evaluation.api import evaluate, run_folder
from chexpercept.layouts import all_models_dir, sample_results_path
from tests.evaluation.stage03_bundle import write_bundle
from utils.cli import run_main

ANALYZE = (Path(__file__).resolve().parents[2] / "src" / "04_analyze_eval_result"
           / "01_analyze_model_performance.py")
RR_CASE = "effusion_s50000001_positive_0"


def _stage03(root: Path, **kw) -> tuple[Path, Path]:
    bench = write_bundle(root / "bench")
    results = root / "results"
    evaluate(bench, provider="random", output_path=results, oracle_setting="none", seed=3, **kw)
    return bench, run_folder(results, "random", "baseline", "none", seed=3, **kw)


def _analyze(root: Path, bench: Path | None, **kw):
    return analyze(root / "results", "none", output_dir=root / "out", benchmark_dir=bench,
                   bootstrap=0, seed=0, viewer=False, jobs=1, **kw)


def _flip_all(path: Path) -> None:
    """Every ``correct`` flag of the file set to true (the issue's tampered file)."""
    def flip(node):
        if isinstance(node, dict):
            return {k: True if k in ("correct", "circular_correct") else flip(v)
                    for k, v in node.items()}
        return [flip(v) for v in node] if isinstance(node, list) else node

    path.write_text(json.dumps(flip(json.loads(path.read_text(encoding="utf-8")))),
                    encoding="utf-8")


@pytest.mark.parametrize("kw", [{}, {"option_order": "shuffled"}, {"option_order": "circular"},
                                {"samples": 2}],
                         ids=["release", "shuffled", "circular", "samples2"])
def test_genuine_runs_pass_and_every_flag_set_true_is_refused(tmp_path, kw):
    bench, run_dir = _stage03(tmp_path, **kw)
    result = _analyze(tmp_path, bench)  # a genuine run: every recomputed flag agrees
    assert result.analyses[0].table.n_cases == 7
    target = sample_results_path(run_dir, 1) if "samples" in kw else run_dir / "all_results.json"
    _flip_all(target)
    with pytest.raises(SchemaError) as exc:
        _analyze(tmp_path, bench)
    text = str(exc.value)
    assert str(target) in text and "stored correct true, recomputed false" in text
    assert any(f"{k}: {b}" in text for k in json.loads(target.read_text())
               for b in ("detection_qa", "contour_evaluation_qa", "contour_revision_qa.",
                         "attribute_extraction_qa."))


def test_the_cli_exits_2_naming_the_file_key_id_and_question_block(tmp_path, capsys):
    bench, run_dir = _stage03(tmp_path)
    path = run_dir / "all_results.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    # the first wrong expansion answer of the RR case, flagged correct by hand
    block = data[RR_CASE]["contour_revision_qa"]
    sub = next(s for s in ("expansion", "contraction", "revision_result")
               if not block[s]["correct"])
    block[sub]["correct"] = True
    path.write_text(json.dumps(data), encoding="utf-8")
    main = runpy.run_path(str(ANALYZE))["main"]
    code = run_main(main, ["--results-dir", str(tmp_path / "results"), "--oracle_setting",
                           "none", "--benchmark-dir", str(bench), "--output-dir",
                           str(tmp_path / "out"), "--no-progress", "--no-viewer",
                           "--bootstrap", "0"])
    assert code == 2
    err = capsys.readouterr().err
    assert str(path) in err and f"{RR_CASE}: contour_revision_qa.{sub}: stored correct true" in err


def test_without_a_bundle_the_stored_ground_truth_is_the_key_and_it_is_logged(tmp_path, caplog):
    _, run_dir = _stage03(tmp_path)
    with caplog.at_level(logging.WARNING):
        _analyze(tmp_path, None)
    assert "answer keys were not checked" in caplog.text
    _flip_all(run_dir / "all_results.json")
    with pytest.raises(SchemaError, match="ground_truth stored in each block"):
        _analyze(tmp_path, None)


def _other_bundle(bench: Path, root: Path) -> tuple[Path, int]:
    """A copy of ``bench`` whose RR case's detection key names the other option."""
    other = root / "other"
    other.mkdir()
    items = json.loads((bench / "chexpercept.json").read_text(encoding="utf-8"))
    det = items[RR_CASE]["detection_qa"]
    det["answer_index"] = 3 - det["answer_index"]
    (other / "chexpercept.json").write_text(json.dumps(items), encoding="utf-8")
    (other / "chexpercept").symlink_to((bench / "chexpercept").resolve())
    return other, det["answer_index"]


def test_a_bundle_with_another_answer_key_is_refused_by_sha_unless_allowed(tmp_path):
    bench, run_dir = _stage03(tmp_path)
    other, new_key = _other_bundle(bench, tmp_path)
    with pytest.raises(InputError) as exc:
        _analyze(tmp_path, other)
    text = str(exc.value)
    manifest = json.loads((run_dir / "run_manifest.json").read_text(encoding="utf-8"))
    assert str(other / "chexpercept.json") in text
    assert manifest["benchmark_json_sha256"] in text and "--allow-other-bundle" in text

    result = analyze(tmp_path / "results", "none", output_dir=tmp_path / "out",
                     benchmark_dir=other, bootstrap=0, viewer=False, jobs=1,
                     allow_other_bundle=True)
    stored = json.loads((run_dir / "all_results.json").read_text(encoding="utf-8"))
    answer = stored[RR_CASE]["detection_qa"]["response"]
    table = result.analyses[0].table
    row = table.key_ids.index(RR_CASE)
    # scored with the given bundle's key, not the stored flag
    assert table.values[row, METRIC_INDEX["oracle:stage1"]] == float(answer == str(new_key))
    assert table.values[row, METRIC_INDEX["oracle:stage1"]] != float(
        stored[RR_CASE]["detection_qa"]["correct"])
    out = all_models_dir(tmp_path / "out", "none")
    assert "WARNING" in (out / "report.md").read_text(encoding="utf-8")
    assert "--allow-other-bundle" in (out / "report.md").read_text(encoding="utf-8")
    meta = json.loads((out / "run_meta.json").read_text(encoding="utf-8"))
    assert "scored against the answer keys of" in meta["bundle_warning"]


def _record(status="ok", answer="2", gt=1, correct=False, **extra):
    return {"RR_0": {"key_id": "RR_0", "qa_path": "lesion_free",
                     "detection_qa": {"response": answer, "ground_truth": gt,
                                      "correct": correct, "status": status, **extra}}}


@pytest.mark.parametrize("record, wrong", [
    (_record(), False),
    (_record(answer="1", correct=True), False),
    (_record(status="unparseable", answer="", correct=True), True),  # failed turn: wrong
    (_record(status="refused", answer="1", correct=True), True),
    (_record(status="judged", answer="1", correct=True), False),  # the judge's answer
    (_record(status="judged", answer="2", correct=True), True),
    (_record(answer="1", correct=True, circular_correct=True), False),
    (_record(answer="2", correct=False, circular_correct=True), True),  # circular needs correct
    (_record(answer="2", correct=True), True),
])
def test_rescoring_rules(record, wrong):
    if wrong:
        with pytest.raises(SchemaError, match="all_results.json: 1 stored correct flag.*\n.*"
                                              "RR_0: detection_qa"):
            rescore_results(record, "all_results.json", None)
    else:
        assert rescore_results(record, "all_results.json", None) is record


def test_unfinished_and_release_format_cases_are_not_rescored():
    data = {"a": {"key_id": "a", "qa_path": "lesion_free", "detection_qa": {},
                  "unfinished": {"reason": "fault"}},
            "b": {"key_id": "b", "qa_path": "lesion_free",  # release format: no status
                  "detection_qa": {"response": "2", "ground_truth": 1, "correct": True}}}
    assert rescore_results(data, "all_results.json", None) is data
    assert rescore_results(data, "all_results.json", {}) is data


def test_answer_keys_come_from_the_bundle(tmp_path):
    bench = write_bundle(tmp_path / "bench")
    keys = load_answer_keys(bench)
    assert keys is not None and set(keys[RR_CASE]) >= {"detection_qa", "expansion", "location"}
    assert isinstance(keys[RR_CASE]["expansion"], tuple)
    assert load_answer_keys(tmp_path / "missing") is None
