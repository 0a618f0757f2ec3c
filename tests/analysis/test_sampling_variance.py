"""Sampling variance (docs/metrics.md, "Sampling variance"): rows, cluster interval coverage,
a Stage 03 ``--samples 3`` run analysed by Stage 04."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from chexpercept.analysis.bootstrap import cluster_interval
from chexpercept.analysis.case_table import METRIC_INDEX, METRICS, CaseTable
from chexpercept.analysis.sampling import sampling_rows


def _table(correct: list[int]) -> CaseTable:
    """n lesion-free effusion cases whose e2e stage 1 is ``correct``."""
    n = len(correct)
    values = np.zeros((n, len(METRICS)))
    applicable = np.zeros((n, len(METRICS)), dtype=bool)
    values[:, METRIC_INDEX["e2e:stage1"]] = correct
    applicable[:, METRIC_INDEX["e2e:stage1"]] = True
    return CaseTable("run", tuple(f"effusion_s{i:08d}_negative_0" for i in range(n)),
                     np.zeros(n, np.int8), np.full(n, 2, np.int8), values, applicable,
                     np.zeros((n, 4), bool), np.zeros((n, 4, 6), np.int32), True)


def test_mean_between_sample_sd_and_agreement_hand_computed():
    # 12 cases, 3 samples: sample accuracies 6/12, 9/12, 12/12
    s0 = [1] * 6 + [0] * 6
    s1 = [1] * 9 + [0] * 3
    s2 = [1] * 12
    tables = [_table(s) for s in (s0, s1, s2)]
    answers = [[[str(2 - c), None, None, None] for c in s] for s in (s0, s1, s2)]
    rows = {(r["path"], r["metric"]): r
            for r in sampling_rows(tables, answers, n_boot=500, seed=0)}
    acc = rows[("all", "e2e:stage1")]
    assert acc["samples"] == 3 and acc["n_cases"] == 12
    assert acc["value"] == pytest.approx(27 / 36)
    assert acc["sd_between_samples"] == pytest.approx(np.std([0.5, 0.75, 1.0], ddof=1))
    assert acc["ci_low"] < acc["value"] < acc["ci_high"]
    assert rows[("lesion_free", "e2e:stage1")]["value"] == acc["value"]
    assert ("revision_free", "e2e:stage1") not in rows  # no case there
    agree = rows[("all", "agree_all:stage1")]
    assert agree["value"] == pytest.approx(6 / 12)  # cases 0-5 right in all three samples
    # cases 6-8: answers (0, 1, 1) -> 1 of 3 pairs agree; 9-11: (0, 0, 1) -> 1 of 3
    pairwise = rows[("all", "agree_pairwise:stage1")]
    assert pairwise["value"] == pytest.approx((6 * 1 + 6 * (1 / 3)) / 12)
    assert math.isnan(pairwise["sd_between_samples"])
    assert ("all", "agree_all:stage2") not in rows  # stage 2 never asked


def test_cluster_interval_is_never_zero_width_and_needs_ten_cases():
    low, high = cluster_interval(np.ones(20), 0.0, 1.0, n_boot=200, seed=0, label="x")
    assert 0.8 < low < high == 1.0
    assert all(math.isnan(v) for v in cluster_interval(np.ones(9), 0.0, 1.0, n_boot=200,
                                                        seed=0, label="x"))
    assert all(math.isnan(v) for v in cluster_interval(np.ones(20), 0.0, 1.0, n_boot=0,
                                                        seed=0, label="x"))


def test_cluster_interval_coverage_over_cases_and_samples():
    """Cases with their own accuracy p_i ~ Beta (intraclass correlation 0.3), K Bernoulli
    samples each: the interval covers the mean accuracy E[p] in >= 93 % of the runs of each
    (n cases, K) cell (nominal 95 %), pooled over true accuracies 0.25, 0.5 and 0.8."""
    rng = np.random.default_rng(20261203)
    reps, rho = 150, 0.3
    spread = 1 / rho - 1
    coverage = {}
    for n in (10, 30, 100, 200):
        for k in (2, 5):
            hits = 0
            for mu in (0.25, 0.5, 0.8):
                for r in range(reps):
                    p = rng.beta(mu * spread, (1 - mu) * spread, n)
                    x = rng.random((n, k)) < p[:, None]
                    low, high = cluster_interval(x.mean(axis=1), 0.0, 1.0, n_boot=400,
                                                 seed=r, label=f"{n}/{k}/{mu}")
                    hits += low <= mu <= high
            coverage[(n, k)] = hits / (3 * reps)
    print("coverage per (n, K):", {k: round(v, 3) for k, v in coverage.items()})
    assert np.mean(list(coverage.values())) >= 0.93, coverage
    assert min(coverage.values()) >= 0.93, coverage


def test_stage03_samples_run_gives_sampling_variance_csv_and_report_section(tmp_path):
    from chexpercept.analysis.api import analyze
    from chexpercept.evaluation.api import evaluate
    from chexpercept.layouts import all_models_dir
    from tests.evaluation.stage03_bundle import CASES, write_bundle

    bench = write_bundle(tmp_path / "bench")
    results = tmp_path / "results"
    evaluate(bench, provider="random", output_path=results, oracle_setting="none", seed=3,
             samples=3)
    evaluate(bench, provider="dummy", output_path=results, oracle_setting="none")
    out = tmp_path / "out"
    analyze(results, "none", output_dir=out, benchmark_dir=bench, bootstrap=200, seed=0,
            viewer=False, jobs=1)
    all_dir = all_models_dir(out, "none")
    with (all_dir / "sampling_variance.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    # dummy: one sample; the CSVs name the run by its folder, which carries K and the seed
    assert rows and {r["model"] for r in rows} == {"random_baseline+samples=3+seed=3"}
    by = {(r["path"], r["metric"]): r for r in rows}
    stage1 = by[("all", "e2e:stage1")]
    assert stage1["samples"] == "3" and stage1["n_cases"] == str(len(CASES))
    assert 0.0 <= float(stage1["value"]) <= 1.0 and float(stage1["sd_between_samples"]) >= 0
    assert stage1["ci_low"] == ""  # 7 cases: fewer than 10, no interval
    assert ("all", "agree_all:stage1") in by and ("all", "agree_pairwise:stage4") in by
    report = (all_dir / "report.md").read_text(encoding="utf-8")
    assert "## Sampling variance (`--samples K` runs)" in report
    # the report names the run with its protocol (issue 33 item 1); the CSVs keep the folder
    assert "| random_baseline+samples=3+seed=3 | 3 |" in report
    assert "| random_baseline+samples=3+seed=3 | random | baseline | default | samples=3, " \
           "seed=3 |" in report


def test_limit_applies_to_the_sampling_variance_as_to_every_other_table(tmp_path):
    # before: --limit 3 scored 3 cases everywhere but sampling_variance.csv used all 7
    from chexpercept.analysis.api import analyze
    from chexpercept.evaluation.api import evaluate
    from chexpercept.layouts import all_models_dir
    from tests.evaluation.stage03_bundle import write_bundle

    bench = write_bundle(tmp_path / "bench")
    results = tmp_path / "results"
    evaluate(bench, provider="random", output_path=results, oracle_setting="none", seed=3,
             samples=2)
    out = tmp_path / "out"
    analyze(results, "none", output_dir=out, benchmark_dir=bench, bootstrap=0, seed=0,
            viewer=False, jobs=1, limit=3)
    with (all_models_dir(out, "none") / "sampling_variance.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    stage1 = next(r for r in rows if (r["path"], r["metric"]) == ("all", "e2e:stage1"))
    assert stage1["n_cases"] == "3"


def test_a_sample_file_of_other_cases_is_refused(tmp_path):
    # before: a sample file whose case had another QA path / ground truth (copied from another
    # benchmark's run) was silently pooled into the sampling variance
    import json

    from chexpercept.analysis.api import analyze
    from chexpercept.errors import SchemaError
    from chexpercept.evaluation.api import evaluate, run_folder
    from chexpercept.layouts import sample_results_path
    from tests.evaluation.stage03_bundle import write_bundle

    bench = write_bundle(tmp_path / "bench")
    results = tmp_path / "results"
    evaluate(bench, provider="random", output_path=results, oracle_setting="none", seed=3,
             samples=2, option_order="shuffled")
    path = sample_results_path(run_folder(results, "random", "baseline", "none", seed=3,
                                          samples=2, option_order="shuffled"), 1)
    data = json.loads(path.read_text(encoding="utf-8"))
    key_id = next(iter(data))
    analyze(results, "none", output_dir=tmp_path / "ok", benchmark_dir=bench, bootstrap=0,
            seed=0, viewer=False, jobs=1)  # a genuine shuffled run passes the check
    gt = data[key_id]["detection_qa"]["ground_truth"]
    data[key_id]["detection_qa"]["ground_truth"] = 3 - gt
    path.write_text(json.dumps(data), encoding="utf-8")
    # with the bundle, Stage 04's recomputation against its answer keys names it first
    with pytest.raises(SchemaError, match=rf"all_results_sample_1\.json: [\s\S]*{key_id}: "
                                          rf"(QA path or ground truth differs|detection_qa: "
                                          rf"stored ground_truth)"):
        analyze(results, "none", output_dir=tmp_path / "out", benchmark_dir=bench,
                bootstrap=0, seed=0, viewer=False, jobs=1)
