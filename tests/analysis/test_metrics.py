"""Stage 04 scoring: end-to-end prefix, depth with the cardiomegaly bonus, missing stages."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from chexpercept.analysis import case_table, run_metrics
from chexpercept.analysis.case_table import METRIC_INDEX, SUB_KEYS
from chexpercept.errors import InputError, SchemaError
from chexpercept.lesions import expected_stages
from chexpercept.schema import (
    ATTRIBUTE_DETAIL_COLUMNS,
    REVISION_DETAIL_COLUMNS,
    SUMMARY_COLUMNS,
)

REVS = ("expansion", "contraction", "revision_result")


def _table(cases):
    return case_table("dummy_baseline", {c["key_id"]: c for c in cases})


def _score(case):
    """One case's row of the table, as stage -> flag dicts, depth, missing, sub-questions."""
    t = _table([case])
    v, app = t.values[0], t.applicable[0]

    def flags(kind):
        return {k: bool(v[METRIC_INDEX[f"{kind}:stage{k}"]]) for k in range(1, 5)
                if app[METRIC_INDEX[f"{kind}:stage{k}"]]}

    sub = {k: bool(v[METRIC_INDEX[f"sub:{k}"]]) for k in SUB_KEYS
           if app[METRIC_INDEX[f"sub:{k}"]]}
    return SimpleNamespace(stages=tuple(flags("oracle")), oracle=flags("oracle"), e2e=flags("e2e"),
                           depth=int(v[METRIC_INDEX["depth"]]),
                           missing=tuple(k + 1 for k in range(4) if t.missing[0, k]),
                           revision_detail={k: sub[k] for k in REVS if k in sub} or None)


def test_expected_stages_per_path_and_cardiomegaly():
    assert expected_stages("revision_required", "effusion") == (1, 2, 3, 4)
    assert expected_stages("revision_free", "effusion") == (1, 2, 4)
    assert expected_stages("lesion_free", "effusion") == (1,)
    assert expected_stages("revision_required", "cardiomegaly") == (1, 2, 3)
    assert expected_stages("revision_free", "cardiomegaly") == (1, 2)
    with pytest.raises(InputError, match="unknown qa_path"):
        expected_stages("bogus", "effusion")


def test_e2e_is_the_correct_prefix_and_oracle_is_per_stage(builders):
    s = _score(builders.make_case("edema_s1_positive_0", "revision_required",
                                  s1=True, s2=False, s3=True, s4=True))
    assert s.oracle == {1: True, 2: False, 3: True, 4: True}
    assert s.e2e == {1: True, 2: False, 3: False, 4: False}
    assert s.depth == 1
    s = _score(builders.make_case("edema_s1_positive_0", "revision_required"))
    assert s.e2e == {1: True, 2: True, 3: True, 4: True} and s.depth == 4


def test_depth_cardiomegaly_bonus_only_when_last_stage_correct(builders):
    rr_ok = _score(builders.make_case("cardiomegaly_s1_positive_0", "revision_required"))
    assert rr_ok.stages == (1, 2, 3) and rr_ok.depth == 4
    rf_ok = _score(builders.make_case("cardiomegaly_s1_positive_1", "revision_free"))
    assert rf_ok.depth == 3
    rr_bad = _score(builders.make_case("cardiomegaly_s1_positive_2", "revision_required",
                                       s3=False))
    assert rr_bad.depth == 2
    lf = _score(builders.make_case("cardiomegaly_s1_negative_0", "lesion_free"))
    assert lf.depth == 1  # no bonus on the lesion-free path: max depth is 1
    # a lung-lesion RF case gets no bonus
    assert _score(builders.make_case("effusion_s1_positive_0", "revision_free")).depth == 3


def test_missing_expected_stage_counts_wrong_not_skipped(builders):
    # The release skips the empty stage 2, so stage 3/4 would be E2E-correct and depth 3.
    case = builders.make_case("opacity_s1_positive_0", "revision_required", s2=None)
    s = _score(case)
    assert s.missing == (2,)
    assert s.oracle[2] is False
    assert s.e2e == {1: True, 2: False, 3: False, 4: False}
    assert s.depth == 1
    # a result dict without "correct" also counts wrong
    case["contour_evaluation_qa"] = {"responses": "1", "ground_truth": 1}
    assert _score(case).e2e[2] is False
    # a missing stage 3 makes all revision sub-flags wrong
    s = _score(builders.make_case("opacity_s1_positive_1", "revision_required", s3=None))
    assert s.revision_detail == {"expansion": False, "contraction": False,
                                 "revision_result": False}
    assert s.depth == 2


def test_missing_detection_counts_wrong(builders):
    s = _score(builders.make_case("edema_s1_negative_0", "lesion_free", s1=None))
    assert s.missing == (1,) and s.depth == 0 and s.e2e == {1: False}


def test_non_boolean_correct_is_a_schema_error(builders):
    case = builders.make_case("edema_s1_positive_0", "revision_free")
    case["detection_qa"]["correct"] = "yes"
    with pytest.raises(SchemaError, match="edema_s1_positive_0: detection_qa.correct"):
        _score(case)


def test_unknown_lesion_prefix_cannot_be_scored(builders):
    with pytest.raises(SchemaError, match="nodule_s1_positive_0: key_id 'nodule_s1_positive_0': "
                                          "unknown lesion 'nodule'"):
        _score(builders.make_case("nodule_s1_positive_0", "revision_free"))


def test_summary_rows_values_and_empty_buckets(builders):
    mk = builders.make_case
    cases = [
        mk("effusion_s1_positive_0", "revision_required"),                    # depth 4
        mk("effusion_s1_positive_1", "revision_required", s2=False,
           rev={"expansion": True, "contraction": False, "revision_result": True},
           s3=False),                                                         # depth 1
        mk("cardiomegaly_s2_positive_0", "revision_required"),                # depth 4 (bonus)
        mk("edema_s3_positive_0", "revision_free", s4=False,
           attr={"distribution": True, "location": False,
                 "severity/measurement": True, "comparison": True}),          # depth 2
    ]
    m = run_metrics(_table(cases), "dummy_baseline")
    assert [(r["path"], r["setting"]) for r in m.summary] == [
        (p, s) for p in ("revision_required", "revision_free", "lesion_free")
        for s in ("end_to_end", "oracle_passed")]
    assert all(tuple(r) == SUMMARY_COLUMNS for r in m.summary)
    rr_e2e, rr_or, rf_e2e, rf_or, lf_e2e, lf_or = m.summary
    assert rr_e2e["acc(stage1)"] == 1.0 and rr_or["acc(stage1)"] == 1.0
    assert rr_e2e["acc(stage2)"] == pytest.approx(2 / 3)
    assert rr_e2e["acc(stage3)"] == pytest.approx(2 / 3)
    assert rr_or["acc(stage3)"] == pytest.approx(2 / 3)
    # stage 4: cardiomegaly excluded -> 2 cases
    assert rr_e2e["acc(stage4)"] == pytest.approx(1 / 2)
    assert rr_or["acc(stage4)"] == pytest.approx(1.0)
    assert rr_e2e["depth"] == rr_or["depth"] == pytest.approx(9 / 3)
    assert math.isnan(rf_e2e["acc(stage3)"]) and math.isnan(rf_or["acc(stage3)"])
    assert rf_e2e["acc(stage4)"] == 0.0 and rf_e2e["depth"] == 2.0
    # no lesion-free cases at all: every value is NaN, not 0.0
    for row in (lf_e2e, lf_or):
        assert all(math.isnan(row[c]) for c in SUMMARY_COLUMNS[3:])
    assert m.n_cases == {"revision_required": 3, "revision_free": 1, "lesion_free": 0}
    (rev,) = m.revision_detail
    assert tuple(rev) == REVISION_DETAIL_COLUMNS and rev["path"] == "revision_required"
    assert rev["acc(expansion)"] == 1.0
    assert rev["acc(contraction)"] == pytest.approx(2 / 3)
    (att,) = m.attribute_detail
    assert tuple(att) == ATTRIBUTE_DETAIL_COLUMNS
    assert att["path"] == "revision_required+revision_free"
    assert att["acc(location)"] == pytest.approx(2 / 3)  # cardiomegaly excluded: 3 cases
    assert att["acc(distribution)"] == 1.0


def test_lesion_free_stage_columns_are_empty_buckets(builders):
    m = run_metrics(_table([builders.make_case("edema_s1_negative_0", "lesion_free", s1=False)]),
                    "x")
    lf_e2e = m.summary[4]
    assert lf_e2e["acc(stage1)"] == 0.0 and lf_e2e["depth"] == 0.0
    assert all(math.isnan(lf_e2e[f"acc(stage{k})"]) for k in (2, 3, 4))
    assert math.isnan(m.revision_detail[0]["acc(expansion)"])
    assert math.isnan(m.attribute_detail[0]["acc(comparison)"])
