"""Stage 04 extended tables: cells per lesion x path, chance baseline, bootstrap CIs, statuses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chexpercept.analysis import case_table, cell_stats, chance_table, strata_weights
from chexpercept.analysis.case_table import METRICS
from chexpercept.analysis.extended import (
    RunAnalysis,
    analyse_chance,
    funnel_rows,
    lesion_rows,
    status_rows,
    subquestion_rows,
)
from chexpercept.analysis.runs import RunRef
from chexpercept.errors import SchemaError
from chexpercept.schema import BenchmarkItem


def _analysis(cases, name="dummy_baseline", n_boot=0, seed=0):
    table = case_table(name, {c["key_id"]: c for c in cases})
    run = RunRef(name=name, provider=name.split("_")[0], model=name.split("_", 1)[1],
                 oracle_setting="implicit", run_dir=None)
    return RunAnalysis(run, None, table, cell_stats(table, n_boot=n_boot, seed=seed))


def _row(rows, **match):
    (row,) = [r for r in rows if all(r[k] == v for k, v in match.items())]
    return row


def test_lesion_by_path_cells_with_hand_computed_values(builders):
    mk = builders.make_case
    a = _analysis([
        mk("effusion_s1_positive_0", "revision_required", s2=False),   # depth 1
        mk("effusion_s1_positive_1", "revision_required"),             # depth 4
        mk("edema_s1_positive_0", "revision_required", s4=False),      # depth 3
        mk("cardiomegaly_s1_positive_0", "revision_free"),             # depth 2 + 1 bonus
        mk("cardiomegaly_s1_negative_0", "lesion_free", s1=False),     # depth 0
    ])
    rows = lesion_rows(a)
    r = _row(rows, lesion="effusion", path="revision_required", setting="end_to_end",
             stage="acc(stage3)")
    assert r["value"] == 0.5 and r["n_cases"] == 2
    r = _row(rows, lesion="effusion", path="revision_required", setting="oracle_passed",
             stage="acc(stage3)")
    assert r["value"] == 1.0
    r = _row(rows, lesion="all", path="revision_required", setting="end_to_end",
             stage="acc(stage4)")
    assert r["value"] == pytest.approx(1 / 3) and r["n_cases"] == 3
    r = _row(rows, lesion="all", path="revision_required", setting="end_to_end", stage="depth")
    assert r["value"] == pytest.approx(8 / 3)
    assert _row(rows, lesion="cardiomegaly", path="revision_free", stage="depth")["value"] == 3
    # stage 1 pooled over every path of a lesion
    r = _row(rows, lesion="cardiomegaly", path="all", setting="oracle_passed",
             stage="acc(stage1)")
    assert r["value"] == 0.5 and r["n_cases"] == 2
    # structurally impossible cells are left out; possible-but-empty ones are NA with n 0
    assert not [r for r in rows if r["lesion"] == "cardiomegaly" and r["stage"] == "acc(stage4)"]
    assert not [r for r in rows if r["path"] == "revision_free" and r["stage"] == "acc(stage3)"]
    r = _row(rows, lesion="opacity", path="lesion_free", setting="end_to_end",
             stage="acc(stage1)")
    assert math.isnan(r["value"]) and r["n_cases"] == 0

    funnel = funnel_rows(a)
    cardio_rf = [r for r in funnel if r["lesion"] == "cardiomegaly"
                 and r["path"] == "revision_free"]
    assert [r["value"] for r in cardio_rf] == [1.0, 1.0, 1.0]  # bonus level reached
    rr = [r["value"] for r in funnel if r["lesion"] == "all" and r["path"] == "revision_required"]
    assert rr == pytest.approx([1.0, 2 / 3, 2 / 3, 1 / 3])
    assert sum(rr) == pytest.approx(8 / 3)  # the funnel sums to the mean depth


def test_subquestion_rows_by_lesion(builders):
    mk = builders.make_case
    a = _analysis([
        mk("effusion_s1_positive_0", "revision_required", s3=False,
           rev={"expansion": True, "contraction": False, "revision_result": True}),
        mk("effusion_s1_positive_1", "revision_free", s4=False,
           attr={"distribution": False, "location": True, "severity/measurement": True,
                 "comparison": True}),
        mk("cardiomegaly_s1_positive_0", "revision_required"),
    ])
    rows = subquestion_rows(a)
    assert _row(rows, lesion="all", question="contraction")["value"] == 0.5
    assert _row(rows, lesion="effusion", question="contraction")["value"] == 0.0
    assert _row(rows, lesion="cardiomegaly", question="contraction")["value"] == 1.0
    r = _row(rows, lesion="effusion", question="distribution",
             path="revision_required+revision_free")
    assert r["value"] == 0.5 and r["n_cases"] == 2
    assert _row(rows, lesion="effusion", question="distribution",
                path="revision_free")["value"] == 0.0
    assert not [r for r in rows if r["lesion"] == "cardiomegaly" and r["question"] == "location"]


def test_status_rates_and_missing_counts(builders):
    mk = builders.make_case
    with_status = mk("effusion_s1_positive_0", "revision_required", s2=None)
    with_status["detection_qa"]["status"] = "ok"
    for key, status in (("expansion", "unparseable"), ("contraction", "refused"),
                        ("revision_result", "ok")):
        with_status["contour_revision_qa"][key]["status"] = status
    for key in ("distribution", "location", "severity/measurement"):
        with_status["attribute_extraction_qa"][key]["status"] = "ok"
    with_status["attribute_extraction_qa"]["comparison"]["status"] = "truncated"
    rows = status_rows(_analysis([with_status]))
    s1, s2, s3, s4 = rows
    assert s1["n_questions"] == 1 and s1["rate(ok)"] == 1.0 and s1["rate(error)"] == 0.0
    assert s2["n_missing"] == 1 and s2["n_cases"] == 1 and s2["n_questions"] == 0
    assert math.isnan(s2["rate(ok)"])
    assert s3["rate(unparseable)"] == pytest.approx(1 / 3)
    assert s3["rate(refused)"] == pytest.approx(1 / 3)
    assert s4["rate(truncated)"] == 0.25 and s4["rate(ok)"] == 0.75
    # release files carry no status keys: rates are NA, missing counts still reported
    rows = status_rows(_analysis([mk("edema_s1_positive_0", "revision_free", s4=None)]))
    assert all(math.isnan(r["rate(ok)"]) and r["n_questions"] is None for r in rows)
    assert [r["n_missing"] for r in rows] == [0, 0, 0, 1]

    bad = mk("edema_s1_positive_0", "revision_free")
    bad["detection_qa"]["status"] = "weird"
    with pytest.raises(SchemaError, match="edema_s1_positive_0: detection_qa.status"):
        _analysis([bad])


def test_chance_values_equal_hand_computed(bench_builder):
    bench = {
        "effusion_s1_negative_0": bench_builder("lesion_free"),
        "effusion_s1_positive_0": bench_builder("revision_free"),
        "effusion_s1_positive_1": bench_builder("revision_required", n_points=3),
        "cardiomegaly_s1_positive_0": bench_builder("revision_required", "cardiomegaly",
                                                    n_points=2),
    }
    items = {k: BenchmarkItem.model_validate(v) for k, v in bench.items()}
    cases = [("effusion_s1_negative_0", "lesion_free"),
             ("effusion_s1_positive_0", "revision_free"),
             ("effusion_s1_positive_1", "revision_required"),
             ("cardiomegaly_s1_positive_0", "revision_required")]
    cells = cell_stats(chance_table(items, cases))
    attr = (1 / 4) * (1 / 8) * (1 / 3) * (1 / 4)          # distribution, location, ...
    assert cells.get("all", "lesion_free", "e2e:stage1")[0] == 0.5
    assert cells.get("all", "lesion_free", "depth")[0] == 0.5
    assert cells.get("all", "revision_free", "oracle:stage4")[0] == pytest.approx(attr)
    assert cells.get("all", "revision_free", "e2e:stage4")[0] == pytest.approx(attr / 4)
    assert cells.get("all", "revision_free", "depth")[0] == pytest.approx(0.75 + attr / 4)
    eff3 = (1 / 8) * (1 / 8) * (1 / 4)                       # 3 points: 2**3 answer sets
    car3 = (1 / 4) * (1 / 4) * (1 / 4)                       # 2 points
    assert cells.get("effusion", "revision_required", "oracle:stage3")[0] == pytest.approx(eff3)
    assert cells.get("all", "revision_required", "oracle:stage3")[0] == pytest.approx(
        (eff3 + car3) / 2)
    assert cells.get("all", "revision_required", "e2e:stage3")[0] == pytest.approx(
        (eff3 + car3) / 8)
    assert cells.get("cardiomegaly", "revision_required", "depth")[0] == pytest.approx(
        0.5 + 0.25 + car3 / 4 + car3 / 4)                    # + bonus level
    assert cells.get("all", "revision_required", "sub:location")[0] == 1 / 8
    assert cells.get("all", "revision_required", "sub:expansion")[0] == pytest.approx(
        (1 / 8 + 1 / 4) / 2)
    assert cells.get("all", "revision_required", "e2e:stage1")[3] == 2  # n cases
    assert np.isnan(cells.ci_low).all()  # chance has no interval


def test_chance_without_benchmark_is_na(builders, caplog):
    a = _analysis([builders.make_case("edema_s1_positive_0", "revision_free")])
    chance = analyse_chance(None, [a])
    assert np.isnan(chance.cells.value).all()
    assert (chance.cells.n == 0).all()
    rows = lesion_rows(chance)
    assert rows and all(math.isnan(r["value"]) for r in rows)
    assert rows[0]["model"] == "chance"


def _coin_cases(mk, n, lesion="effusion"):
    return [mk(f"{lesion}_s{i}_negative_0", "lesion_free", s1=i % 2 == 0) for i in range(n)]


def test_bootstrap_ci_contains_estimate_shrinks_and_is_seeded(builders):
    small = _analysis(_coin_cases(builders.make_case, 20), n_boot=400, seed=0)
    large = _analysis(_coin_cases(builders.make_case, 200), n_boot=400, seed=0)
    for a in (small, large):
        value, low, high, n = a.cells.get("all", "lesion_free", "e2e:stage1")
        assert value == 0.5 and low <= value <= high and low < high
    width = {id(a): a.cells.get("all", "lesion_free", "e2e:stage1")[2]
             - a.cells.get("all", "lesion_free", "e2e:stage1")[1] for a in (small, large)}
    assert width[id(large)] < 0.6 * width[id(small)]
    # every finite cell's interval contains its point estimate
    cells = small.cells
    ok = np.isfinite(cells.ci_low)
    assert ok.any()
    assert (cells.ci_low[ok] <= cells.value[ok] + 1e-12).all()
    assert (cells.value[ok] <= cells.ci_high[ok] + 1e-12).all()
    # same seed -> identical; lesion-free cases only, so depth is the 0/1 stage-1 outcome and
    # gets the same Wilson interval (docs "Small cells"): no interval depends on the seed;
    # empty cells have no interval
    again = _analysis(_coin_cases(builders.make_case, 20), n_boot=400, seed=0)
    assert np.array_equal(again.cells.ci_low, cells.ci_low, equal_nan=True)
    other = _analysis(_coin_cases(builders.make_case, 200), n_boot=400, seed=1)
    depth = METRICS.index("depth")
    assert np.array_equal(other.cells.ci_low, large.cells.ci_low, equal_nan=True)
    assert np.array_equal(large.cells.ci_low[:, depth],
                          large.cells.ci_low[:, METRICS.index("e2e:stage1")], equal_nan=True)
    assert math.isnan(cells.get("all", "revision_free", "e2e:stage1")[1])


def test_strata_weights_keep_each_stratum_size_and_ignore_row_order(builders):
    mk = builders.make_case
    cases = _coin_cases(mk, 7) + [mk(f"edema_s{i}_positive_0", "revision_free")
                                  for i in range(5)]
    a = _analysis(cases)
    w = strata_weights(a.table, 50, seed=3)
    assert w.shape == (50, 12)
    assert (w[:, :7].sum(axis=1) == 7).all() and (w[:, 7:].sum(axis=1) == 5).all()
    b = _analysis(list(reversed(cases)))
    wb = strata_weights(b.table, 50, seed=3)
    order = [b.table.key_ids.index(k) for k in a.table.key_ids]
    assert np.array_equal(w, wb[:, order])  # weights follow key_ids, not file order
