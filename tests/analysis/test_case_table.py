"""Stage 04 reader: the case table against the definitions, every bad record named, lean loaders."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from chexpercept.analysis import (
    case_table,
    cell_stats,
    discover_runs,
    load_chance_or_none,
    question_chance,
    read_case_table,
    strata_weights,
)
from chexpercept.analysis.bootstrap import (
    GROUPS,
    MIN_BOOTSTRAP_CASES,
    _strata,
    expanded_levels,
    group_matrix,
    masked_values,
    resampled_cells,
    wilson_cc_interval,
)
from chexpercept.analysis.case_table import METRIC_INDEX, METRICS, STAGE_FIELDS
from chexpercept.errors import SchemaError
from chexpercept.lesions import LESIONS, QA_PATHS, expected_stages
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


def _definition(case):
    """One case scored straight from docs/metrics.md: metric -> value, missing, statuses."""
    lesion = case["key_id"].split("_")[0]
    stages = expected_stages(case["qa_path"], lesion)
    out, missing, status = {}, [], np.zeros((4, len(STATUSES)), dtype=np.int32)
    prefix, depth = True, 0
    for stage in stages:
        block = case.get(STAGE_FIELDS[stage], {})
        if "correct" not in block:
            missing.append(stage)
        ok = block.get("correct") is True
        prefix = prefix and ok
        depth += prefix
        out[f"oracle:stage{stage}"], out[f"e2e:stage{stage}"] = float(ok), float(prefix)
        if stage <= 2 and "status" in block:
            status[stage - 1, STATUSES.index(block["status"])] += 1
    if lesion == "cardiomegaly" and case["qa_path"] != "lesion_free" and prefix:
        depth += 1
    out["depth"] = float(depth)
    max_depth = {"revision_required": 4, "revision_free": 3, "lesion_free": 1}[case["qa_path"]]
    for k in range(1, max_depth + 1):
        out[f"reach:{k}"] = float(depth >= k)
    for stage, keys in ((3, REVS), (4, ATTRS)):
        if stage in stages:
            for key in keys:
                sub = case.get(STAGE_FIELDS[stage], {}).get(key)
                sub = sub if isinstance(sub, dict) else {}
                out[f"sub:{key}"] = float(sub.get("correct") is True)
                if "status" in sub:
                    status[stage - 1, STATUSES.index(sub["status"])] += 1
    return out, [s in missing for s in range(1, 5)], status


@pytest.mark.parametrize("limit", [None, 25])
def test_table_follows_the_definitions(tmp_path, builders, limit):
    cases = _varied_cases(builders.make_case)
    builders.write_run(tmp_path, "dummy_baseline", cases)
    (run,) = discover_runs(tmp_path, "implicit")
    table, unfinished = read_case_table(run.run_dir, run.name, limit=limit)
    kept = cases[:limit]
    assert unfinished == {} and table.key_ids == tuple(c["key_id"] for c in kept)
    assert table.has_status and table.missing.any()
    for i, case in enumerate(kept):
        want, missing, status = _definition(case)
        assert {m: table.values[i, METRIC_INDEX[m]] for m in METRICS
                if table.applicable[i, METRIC_INDEX[m]]} == want, case["key_id"]
        assert table.missing[i].tolist() == missing
        assert np.array_equal(table.status[i], status)
        assert LESIONS[table.lesion[i]] == case["key_id"].split("_")[0]
        assert QA_PATHS[table.path[i]] == case["qa_path"]


def test_unfinished_cases_are_removed_and_returned(tmp_path, builders):
    cases = _varied_cases(builders.make_case, 6)
    for block in ("detection_qa", "contour_evaluation_qa", "contour_revision_qa",
                  "attribute_extraction_qa"):  # as Stage 03 writes an unfinished case
        cases[2][block] = {}
    cases[2]["unfinished"] = {"reason": "turn 3: connection reset"}
    builders.write_run(tmp_path, "dummy_baseline", cases)
    (run,) = discover_runs(tmp_path, "implicit")
    table, unfinished = read_case_table(run.run_dir, run.name, limit=5)
    assert unfinished == {cases[2]["key_id"]: "turn 3: connection reset"}
    assert table.key_ids == tuple(c["key_id"] for c in cases if c is not cases[2])[:5]


@pytest.mark.parametrize(("marker", "message"), [
    ({"reason": "x"}, "marked unfinished but holds stage results"),
    ("garbage", "'unfinished' is str, not an object"),
])
def test_an_inconsistent_unfinished_marker_is_an_error_naming_the_case(tmp_path, builders,
                                                                      marker, message):
    cases = _varied_cases(builders.make_case, 3)
    cases[1]["unfinished"] = marker  # a hand edit: the case still has its stage results
    builders.write_run(tmp_path, "dummy_baseline", cases)
    (run,) = discover_runs(tmp_path, "implicit")
    with pytest.raises(SchemaError, match=rf"{cases[1]['key_id']}: {message}"):
        read_case_table(run.run_dir, run.name)


def test_tables_share_key_strings_between_runs(builders):
    data = {c["key_id"]: c for c in _varied_cases(builders.make_case, 12)}
    pool: dict[str, str] = {}
    a = case_table("a", data, key_pool=pool)
    b = case_table("b", copy.deepcopy(data), key_pool=pool)
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


_ALLOWED = ", ".join(STATUSES)
BAD = {
    "correct": "1 case(s) cannot be scored:\n  edema_s2_positive_0: edema_s2_positive_0: "
               "detection_qa.correct: expected true/false, found 'yes'",
    "sub_correct": "1 case(s) cannot be scored:\n  edema_s2_positive_0: edema_s2_positive_0: "
                   "attribute_extraction_qa.location.correct: expected true/false, found 1",
    "status": "1 bad status value(s):\n  edema_s2_positive_0: attribute_extraction_qa."
              f"comparison.status: expected one of {_ALLOWED}, found 'weird'",
    "status_unhashable": "1 bad status value(s):\n  edema_s2_positive_0: detection_qa.status: "
                         f"expected one of {_ALLOWED}, found ['ok']",
    "qa_path": "1 schema problem(s):\n  edema_s2_positive_0: qa_path: ",
    "key_id": "1 schema problem(s):\n  edema_s2_positive_0: record key_id is "
              "'edema_s9_positive_0'",
    "no_detection": "1 schema problem(s):\n  edema_s2_positive_0: detection_qa: ",
    "block_type": "1 schema problem(s):\n  edema_s2_positive_0: contour_revision_qa: ",
    "record_type": "1 schema problem(s):\n  edema_s2_positive_0: ",
    "lesion": "1 case(s) cannot be scored:\n  nodule_s4_positive_0: key_id "
              "'nodule_s4_positive_0': unknown lesion 'nodule'",
}


@pytest.mark.parametrize("how", sorted(BAD))
def test_bad_records_are_named_with_the_file(tmp_path, builders, how):
    run_dir = builders.write_run(tmp_path, "dummy_baseline", [])
    (run_dir / "all_results.json").write_text(json.dumps(_bad(builders.make_case, how)))
    (run,) = discover_runs(tmp_path, "implicit")
    with pytest.raises(SchemaError) as exc:
        read_case_table(run.run_dir, run.name)
    assert str(exc.value).startswith(f"{run.all_results}: {BAD[how]}")
    assert str(exc.value).count("\n  ") == 1  # only the bad record


def test_every_problem_of_a_file_in_one_error(builders):
    data = _bad(builders.make_case, "lesion")
    data["effusion_s1_positive_0"]["qa_path"] = "elsewhere"
    data["edema_s2_positive_0"]["detection_qa"]["correct"] = "yes"
    data["edema_s2_positive_0"]["contour_evaluation_qa"]["correct"] = None
    data["cardiomegaly_s3_negative_0"]["detection_qa"]["status"] = "weird"
    with pytest.raises(SchemaError) as exc:
        case_table("x", data, source="run.json")
    msg = str(exc.value)
    assert msg.startswith("run.json: 1 schema problem(s):\n  effusion_s1_positive_0: qa_path")
    assert ("run.json: 2 case(s) cannot be scored:\n  edema_s2_positive_0: edema_s2_positive_0: "
            "detection_qa.correct: expected true/false, found 'yes'; edema_s2_positive_0: "
            "contour_evaluation_qa.correct: expected true/false, found None\n  "
            "nodule_s4_positive_0: key_id 'nodule_s4_positive_0'") in msg
    assert "run.json: 1 bad status value(s):\n  cardiomegaly_s3_negative_0: " in msg


def test_limit_scores_the_first_cases_and_validates_the_rest(builders):
    # a non-boolean flag past --limit is not scored, so it is not an error ...
    data = _bad(builders.make_case, "correct")
    table = case_table("x", data, limit=1)
    assert table.key_ids == ("effusion_s1_positive_0",)
    # ... but a record that breaks the schema is, wherever it is
    data = _bad(builders.make_case, "qa_path")
    with pytest.raises(SchemaError, match="edema_s2_positive_0: qa_path"):
        case_table("x", data, limit=1)
    with pytest.raises(SchemaError, match="run.json: expected a JSON object keyed by key_id"):
        case_table("x", [1, 2], source="run.json")  # type: ignore[arg-type]


def _dense_bootstrap_means(table, weights):
    """The reference formula: one (B, n) @ (n, groups * metrics) product."""
    values, ok = masked_values(table)
    gm = group_matrix(table)
    n = gm.T.astype(np.float64) @ ok
    z = (gm[:, :, None] * values[:, None, :]).astype(np.float32).reshape(table.n_cases, -1)
    sums = (weights @ z).astype(np.float64).reshape(len(weights), *n.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, sums / np.where(n > 0, n, 1), np.nan)


def test_stratified_bootstrap_equals_the_dense_product(builders):
    table = case_table("x", {c["key_id"]: c for c in _varied_cases(builders.make_case, 90)})
    assert len(_strata(table)) == 9  # 3 lesions x 3 paths of 10 cases: resampled apart
    weights = strata_weights(table, 130, seed=4)  # not a multiple of the product block
    dense = _dense_bootstrap_means(table, weights)
    values, ok = masked_values(table)
    cells = resampled_cells(table, values, ok, n_boot=130, seed=4)
    n = cells.n
    big = n >= MIN_BOOTSTRAP_CASES
    assert big.any() and cells.stratified[big].all() and not cells.stratified[~big].any()
    # the per-stratum products pooled into groups are the dense product, bit for bit
    assert np.array_equal(cells.sums[:, big] / n[big], dense[:, big])
    assert np.isnan(cells.sums[:, ~big]).all()
    # degrees of freedom: n minus the strata with counted cases in the cell
    gm = group_matrix(table)
    n_strata = sum(((gm[rows].any(axis=0)[:, None]) & ok[rows].any(axis=0)[None, :])
                   .astype(int) for _, _, rows in _strata(table))
    assert np.array_equal(cells.df, np.where(big, n - n_strata, 0))
    # depth: expanded percentiles of the dense resampled means; accuracies: Wilson
    stats = cell_stats(table, n_boot=130, seed=4)
    assert stats.n_boot == 130 and stats.ci_low.shape == (len(GROUPS), len(METRICS))
    d = METRICS.index("depth")
    # a lesion-free-only depth cell is the 0/1 stage-1 outcome: Wilson (docs "Small cells")
    lf_only = np.array([p == "lesion_free" for _, p in GROUPS])
    s1 = METRICS.index("e2e:stage1")
    assert np.array_equal(stats.ci_low[lf_only & big[:, d], d],
                          stats.ci_low[lf_only & big[:, d], s1])
    for g in np.flatnonzero(big[:, d] & ~lf_only):
        level = expanded_levels(n[g, d], cells.df[g, d])
        want = np.quantile(dense[:, g, d], [level, 1 - level])
        assert (stats.ci_low[g, d], stats.ci_high[g, d]) == pytest.approx(tuple(want),
                                                                         rel=1e-12)
    binary = big.copy()
    binary[:, d] = False
    k = np.round(stats.value * n)
    low, high = wilson_cc_interval(k[binary], n[binary])
    assert np.array_equal(stats.ci_low[binary], low)
    assert np.array_equal(stats.ci_high[binary], high)
    assert np.isnan(stats.ci_low[~big]).all() and np.isnan(stats.ci_high[~big]).all()


def _same(a, b):
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


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
