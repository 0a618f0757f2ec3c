"""Stage 04 fast path: columnar scan == validating path; bad input still named; lean loaders."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from chexpercept.analysis import (
    analyse_run,
    analyse_run_file,
    discover_runs,
    load_chance_or_none,
    load_run,
    score_run,
)
from chexpercept.analysis._columnar import scan_records, table_from_scan
from chexpercept.analysis.tables import (
    GROUPS,
    METRICS,
    _strata,
    bootstrap_means,
    cell_stats,
    group_matrix,
    masked_values,
    percentile_ci,
    question_chance,
    strata_weights,
)
from chexpercept.errors import SchemaError
from chexpercept.schema import STATUSES, BenchmarkItem

REVS = ("expansion", "contraction", "revision_result")
ATTRS = ("distribution", "location", "severity/measurement", "comparison")


def _varied_cases(mk, n=60):
    """Every path and lesion kind, missing stages, odd sub-blocks, statuses, extra keys."""
    rng = np.random.default_rng(5)
    cases = []
    for i in range(n):
        lesion = ("cardiomegaly", "edema", "effusion")[i % 3]
        path = ("revision_required", "revision_free", "lesion_free")[(i // 3) % 3]
        flags = {k: bool(rng.random() < 0.6) for k in ("s1", "s2", "s3", "s4")}
        kind = "negative" if path == "lesion_free" else "positive"
        case = mk(f"{lesion}_s{i}_{kind}_0", path, **flags)
        r = i % 11
        if r == 1:
            case["contour_evaluation_qa"] = {}                      # missing stage 2
        elif r == 2:
            case.pop("attribute_extraction_qa")                     # absent block
        elif r == 3 and case["contour_revision_qa"]:
            del case["contour_revision_qa"]["correct"]              # missing stage 3
        elif r == 4 and case["contour_revision_qa"]:
            case["contour_revision_qa"]["expansion"] = "garbled"    # not a result block
        elif r == 5:
            case["detection_qa"] = {}                               # missing stage 1
        elif r == 6:
            case["token_usage"] = {"in": 3}
            case["_chat_history_idx"] = {"turn_0": 0}
        if i % 2:
            for block in ("detection_qa", "contour_evaluation_qa"):
                if case[block]:
                    case[block]["status"] = STATUSES[i % len(STATUSES)]
            for block, subs in (("contour_revision_qa", REVS),
                                ("attribute_extraction_qa", ATTRS)):
                for j, sub in enumerate(subs):
                    sub_block = case.get(block, {}).get(sub)
                    if isinstance(sub_block, dict) and (i + j) % 3:
                        sub_block["status"] = STATUSES[(i + j) % len(STATUSES)]
        cases.append(case)
    return cases


def _assert_same_table(fast, ref):
    assert fast.key_ids == ref.key_ids
    for name in ("lesion", "path", "values", "applicable", "missing", "status"):
        assert np.array_equal(getattr(fast, name), getattr(ref, name)), name
    assert fast.has_status == ref.has_status


def _same(a, b):
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("limit", [None, 25])
def test_fast_path_equals_validating_path(tmp_path, builders, limit):
    builders.write_run(tmp_path, "dummy_baseline", _varied_cases(builders.make_case))
    (run,) = discover_runs(tmp_path, "implicit")
    ref = analyse_run(run, load_run(run, limit=limit), n_boot=50, seed=2)
    fast = analyse_run_file(run, n_boot=50, seed=2, limit=limit)
    _assert_same_table(fast.table, ref.table)
    assert fast.table.has_status and fast.table.missing.any()
    for name in ("summary", "revision_detail", "attribute_detail"):
        rows_f, rows_r = getattr(fast.metrics, name), getattr(ref.metrics, name)
        assert [list(r) for r in rows_f] == [list(r) for r in rows_r]
        assert all(_same(f[k], r[k]) for f, r in zip(rows_f, rows_r, strict=True) for k in f)
    assert fast.metrics.n_cases == ref.metrics.n_cases
    assert fast.metrics.n_missing == ref.metrics.n_missing
    for name in ("value", "n", "ci_low", "ci_high"):
        assert np.array_equal(getattr(fast.cells, name), getattr(ref.cells, name),
                              equal_nan=True), name


def test_fast_path_shares_key_strings_between_runs(builders):
    data = {c["key_id"]: c for c in _varied_cases(builders.make_case, 12)}
    pool: dict[str, str] = {}
    a = table_from_scan("a", scan_records(data), key_pool=pool)
    b = table_from_scan("b", scan_records(copy.deepcopy(data)), key_pool=pool)
    assert a.key_ids == b.key_ids and all(x is y for x, y in zip(a.key_ids, b.key_ids,
                                                                 strict=True))


def _bad(mk, how):
    cases = [mk("effusion_s1_positive_0", "revision_required"),
             mk("edema_s2_positive_0", "revision_free"),
             mk("cardiomegaly_s3_negative_0", "lesion_free")]
    data = {c["key_id"]: c for c in cases}
    rec = data["edema_s2_positive_0"]
    if how == "correct":
        rec["detection_qa"]["correct"] = "yes"
    elif how == "sub_correct":
        rec["attribute_extraction_qa"]["location"]["correct"] = 1
    elif how == "status":
        rec["attribute_extraction_qa"]["comparison"]["status"] = "weird"
    elif how == "status_unhashable":
        rec["detection_qa"]["status"] = ["ok"]
    elif how == "qa_path":
        rec["qa_path"] = "elsewhere"
    elif how == "key_id":
        rec["key_id"] = "edema_s9_positive_0"
    elif how == "no_detection":
        del rec["detection_qa"]
    elif how == "block_type":
        rec["contour_revision_qa"] = [1]
    elif how == "record_type":
        data["edema_s2_positive_0"] = 5
    elif how == "lesion":
        data["nodule_s4_positive_0"] = dict(rec, key_id="nodule_s4_positive_0")
    return data


@pytest.mark.parametrize("how", ["correct", "sub_correct", "status", "status_unhashable",
                                 "qa_path", "key_id", "no_detection", "block_type",
                                 "record_type", "lesion"])
def test_irregular_records_take_the_validating_path_and_are_named(tmp_path, builders, how):
    data = _bad(builders.make_case, how)
    assert scan_records(copy.deepcopy(data)) is None
    run_dir = tmp_path / "dummy_baseline" / "oracle_implicit"
    run_dir.mkdir(parents=True)
    (run_dir / "all_results.json").write_text(json.dumps(data))
    (run,) = discover_runs(tmp_path, "implicit")
    with pytest.raises(SchemaError) as fast:
        analyse_run_file(run, n_boot=0, seed=0)
    with pytest.raises(SchemaError) as ref:  # the reference path, step by step
        analyse_run(run, load_run(run), n_boot=0, seed=0)
    assert str(fast.value) == str(ref.value)
    bad_key = "nodule_s4_positive_0" if how == "lesion" else "edema_s2_positive_0"
    assert bad_key in str(fast.value) and "all_results.json" in str(fast.value)


def test_irregular_record_past_the_limit_is_validated_like_load_run(tmp_path, builders):
    # a non-boolean flag past --limit: load_run + score_run accept it (only the first
    # cases are scored), and so does the fast path's fallback
    data = _bad(builders.make_case, "correct")
    data = {k: data[k] for k in ("effusion_s1_positive_0", "edema_s2_positive_0")}
    run_dir = tmp_path / "dummy_baseline" / "oracle_implicit"
    run_dir.mkdir(parents=True)
    (run_dir / "all_results.json").write_text(json.dumps(data))
    (run,) = discover_runs(tmp_path, "implicit")
    score_run(run, load_run(run, limit=1))
    assert analyse_run_file(run, n_boot=0, seed=0, limit=1).table.key_ids == (
        "effusion_s1_positive_0",)


def _dense_bootstrap_means(table, weights):
    """The reference formula: one (B, n) @ (n, groups * metrics) product."""
    values, ok = masked_values(table)
    gm = group_matrix(table)
    n = gm.T.astype(np.float64) @ ok
    z = (gm[:, :, None] * values[:, None, :]).astype(np.float32).reshape(table.n_cases, -1)
    sums = (weights @ z).astype(np.float64).reshape(len(weights), *n.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, sums / np.where(n > 0, n, 1), np.nan)


def test_stratified_bootstrap_equals_the_dense_product(tmp_path, builders):
    builders.write_run(tmp_path, "dummy_baseline", _varied_cases(builders.make_case, 90))
    (run,) = discover_runs(tmp_path, "implicit")
    table = analyse_run_file(run, n_boot=0, seed=0).table
    weights = strata_weights(table, 130, seed=4)  # not a multiple of the product block
    dense = _dense_bootstrap_means(table, weights)
    assert np.array_equal(bootstrap_means(table, weights), dense, equal_nan=True)
    low, high = percentile_ci(dense)
    cells = cell_stats(table, n_boot=130, seed=4)
    assert np.array_equal(cells.ci_low, low, equal_nan=True)
    assert np.array_equal(cells.ci_high, high, equal_nan=True)
    assert cells.n_boot == 130 and cells.ci_low.shape == (len(GROUPS), len(METRICS))
    given = cell_stats(table, weights=weights)
    assert np.array_equal(given.ci_low, low, equal_nan=True)
    assert len(_strata(table)) == 9  # 3 lesions x 3 paths


def test_chance_loader_keeps_only_probabilities(tmp_path, bench_builder, caplog):
    bench = {"effusion_s1_negative_0": bench_builder("lesion_free"),
             "effusion_s1_positive_1": bench_builder("revision_required", n_points=3),
             "cardiomegaly_s1_positive_0": bench_builder("revision_free", "cardiomegaly")}
    (tmp_path / "chexpercept.json").write_text(json.dumps(bench))
    got = load_chance_or_none(tmp_path)
    want = {k: question_chance(BenchmarkItem.model_validate(v)) for k, v in bench.items()}
    assert list(got) == list(want)
    assert all(_same(got[k][q], want[k][q]) for k in want for q in want[k])
    bench["effusion_s1_negative_0"]["detection_qa"] = "not a question"
    (tmp_path / "chexpercept.json").write_text(json.dumps(bench))
    caplog.clear()
    assert load_chance_or_none(tmp_path) is None
    assert "chexpercept.json" in caplog.text and "chance rows are NA" in caplog.text
    assert load_chance_or_none(tmp_path / "missing") is None
