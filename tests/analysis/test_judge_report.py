"""Stage 04 on runs made with a judge: both readings, the judged share, the audit agreement.

docs/metrics.md, "Strict and judged readings". The runs are real Stage 03 runs of the scripted
model and judge of ``tests/evaluation/judge_fakes.py`` (loaded by path) on the Stage 03 test
bundle, with and without the judge, in one results folder each.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path
from types import ModuleType

import pytest

from chexpercept.analysis.api import analyze
from chexpercept.analysis.judge_report import JUDGE_CSV, strict_results
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.api import run_folder
from chexpercept.evaluation.judge import Judge
from chexpercept.files import read_json
from chexpercept.layouts import ALL_SUMMARY_CSV, all_results_path

EVAL_TESTS = Path(__file__).resolve().parents[1] / "evaluation"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_judge_report_{name}",
                                                  EVAL_TESTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bundle_mod, fakes, judge_fakes = _load("stage03_bundle"), _load("stage03_fakes"), \
    _load("judge_fakes")


def _stage03(bench: Path, out: Path, setting: str, judge: Judge | None) -> Path:
    bundle = load_bundle(bench)
    run_dir = run_folder(out, "scripted", "m", setting)
    run_evaluation(bundle, validate_bundle(bundle), fakes.ScriptedModel(judge_fakes.prose),
                   EvalSettings("scripted", "m", oracle_setting=setting, seed=5), run_dir,
                   judge=judge)
    return run_dir


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module", params=["none", "implicit"])
def runs(request, tmp_path_factory):
    """Stage 03 with and without the judge, then Stage 04 on each (strict and --judged)."""
    setting = request.param
    root = tmp_path_factory.mktemp(f"judge_{setting}")
    bench = bundle_mod.write_bundle(root / "bench")
    plain_dir = _stage03(bench, root / "plain", setting, None)
    judged_dir = _stage03(bench, root / "judged", setting,
                          Judge(judge_fakes.FakeJudge(), judge_fakes.LABEL, audit_rate=0.5,
                                seed=5))
    out = {}
    for name, results in (("plain", root / "plain"), ("strict", root / "judged"),
                          ("judged", root / "judged")):
        target = root / f"analysis_{name}"
        analyze(results, setting, output_dir=target, benchmark_dir=bench, bootstrap=0,
                viewer=False, jobs=1, judged=name == "judged")
        out[name] = target / f"all_models_oracle_{setting}"
    return {"setting": setting, "plain_run": plain_dir, "judged_run": judged_dir, **out}


def _summary(folder: Path) -> list[dict[str, str]]:
    return _csv(folder / ALL_SUMMARY_CSV)


def test_the_strict_score_is_the_score_of_the_run_without_a_judge(runs):
    assert _summary(runs["strict"]) == _summary(runs["plain"])
    for name in ("stage_accuracy_ci.csv", "e2e_funnel.csv", "stage_status.csv"):
        assert _csv(runs["strict"] / name) == _csv(runs["plain"] / name), name
    # the strict reading of the judged run's file is the plain run's file, but for the judge
    judged = read_json(all_results_path(runs["judged_run"]))
    plain = read_json(all_results_path(runs["plain_run"]))
    strict = strict_results(judged)
    for key_id, case in plain.items():
        for section in ("detection_qa", "contour_evaluation_qa", "contour_revision_qa",
                        "attribute_extraction_qa"):
            a, b = case[section], strict[key_id][section]
            assert a.get("correct") == b.get("correct"), (key_id, section)


def test_the_judged_reading_scores_the_judged_questions(runs):
    strict, judged = _summary(runs["strict"]), _summary(runs["judged"])
    assert strict != judged
    rows = [r for r in _csv(runs["strict"] / JUDGE_CSV) if r["metric"] == "acc"]
    by = {(r["reading"], r["path"], r["setting"], r["stage"]): r["value"] for r in rows}
    for reading, summary in (("strict", strict), ("judged", judged)):
        for row in summary:
            for stage in range(1, 5):
                assert by[(reading, row["path"], row["setting"], str(stage))] == \
                    row[f"acc(stage{stage})"]
    # the scripted prose always names the truth: judged >= strict everywhere, > somewhere
    values = [(float(by[("strict", *k[1:])] or "nan"), float(v or "nan"))
              for k, v in by.items() if k[0] == "judged"]
    assert all(j >= s for s, j in values if not math.isnan(s))
    assert any(j > s for s, j in values if not math.isnan(s))


def test_judge_summary_has_the_judged_share_and_the_audit_agreement(runs):
    rows = _csv(runs["strict"] / JUDGE_CSV)
    assert {r["judge"] for r in rows} == {judge_fakes.LABEL}
    share = {r["stage"]: r for r in rows if r["metric"] == "share_judged"}
    assert set(share) == {"1", "2", "3", "4", "all"}
    total = share["all"]
    assert int(total["k"]) > 0 and int(total["n"]) > int(total["k"])
    assert sum(int(share[s]["k"]) for s in "1234") == int(total["k"])
    (audit,) = [r for r in rows if r["metric"] == "audit_agreement"]
    assert int(audit["n"]) > 0 and audit["k"] == audit["n"] and float(audit["value"]) == 1.0
    assert 0.0 < float(audit["ci_low"]) < 1.0 and float(audit["ci_high"]) == 1.0
    assert not (runs["plain"] / JUDGE_CSV).exists()


def test_report_has_both_scores_and_the_judged_share(runs):
    report = (runs["strict"] / "report.md").read_text(encoding="utf-8")
    section = report.split("## Judge model", 1)[1].split("\n## ", 1)[0]
    assert "use the **strict** reading" in section
    assert judge_fakes.LABEL in section and "strict / judged" in section
    assert "Share of judged questions" in section and "Agreement of the judge" in section
    assert " / " in section.split("| depth |", 1)[1]
    assert f"[{JUDGE_CSV}]({JUDGE_CSV})" in report
    judged = (runs["judged"] / "report.md").read_text(encoding="utf-8")
    assert "use the **judged** reading" in judged
    plain = (runs["plain"] / "report.md").read_text(encoding="utf-8")
    assert "## Judge model" not in plain and JUDGE_CSV not in plain


def test_audit_agreement_follows_the_one_small_cell_rule_and_interval():
    # issue 30 item 4: the audit agreement used plain Wilson at every n
    import math

    import numpy as np

    from chexpercept.analysis.bootstrap import proportion_interval
    from chexpercept.analysis.judge_report import agreement_interval

    value, low, high = agreement_interval(9, 9)  # below 10 audited: no interval
    assert value == 1.0 and math.isnan(low) and math.isnan(high)
    lo, hi = proportion_interval(np.array([18]), np.array([20]))
    assert agreement_interval(18, 20) == (0.9, float(lo[0]), float(hi[0]))
