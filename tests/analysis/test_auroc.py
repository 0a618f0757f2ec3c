"""Stage 04 AUROC of the recorded option probabilities (``analysis.auroc``), hand-computed."""

import math

import pytest

from chexpercept.analysis.auroc import auroc_rows, option_scores
from chexpercept.analysis.case_table import case_table
from chexpercept.analysis.confidence import auroc_interval
from chexpercept.errors import SchemaError


def _block(gt: int, p_gt: float | None, status: str = "ok") -> dict:
    block = {"response": str(gt), "ground_truth": gt, "correct": True, "status": "ok"}
    if status == "ok":
        block["option_probs"] = {"status": "ok", "probs": {str(gt): p_gt,
                                                           str(3 - gt): 1 - p_gt},
                                 "residual": 0.0, "token_index": 1}
    elif status != "absent":
        block["option_probs"] = {"status": status}
    return block


def _case(key_id: str, path: str, det: dict, contour: dict | None = None) -> dict:
    out = {"key_id": key_id, "qa_path": path, "detection_qa": det, "contour_evaluation_qa": {},
           "contour_revision_qa": {}, "attribute_extraction_qa": {}}
    if contour is not None:
        out["contour_evaluation_qa"] = {**contour, "responses": contour.pop("response")}
    return out


def _results() -> dict:
    """Effusion: 3 revision-free positives, 2 lesion-free negatives, one without probs."""
    cases = [
        # positives: P(Yes) = P(ground truth "Yes" = 1)
        _case("effusion_s1_positive_0", "revision_free", _block(1, 0.9), _block(2, 0.8)),
        _case("effusion_s2_positive_0", "revision_free", _block(1, 0.4), _block(2, 0.6)),
        _case("effusion_s3_positive_0", "revision_free", _block(1, 0.7), _block(2, 0.7)),
        # negatives: P(Yes) = 1 - P(ground truth "No" = 2)
        _case("effusion_s4_negative_0", "lesion_free", _block(2, 0.5)),
        _case("effusion_s5_negative_0", "lesion_free", _block(2, 0.8)),
        _case("effusion_s6_negative_0", "lesion_free", _block(2, None, "missing")),
    ]
    return {c["key_id"]: c for c in cases}


def test_detection_auroc_is_hand_computed_and_unusable_turns_are_counted_apart():
    results = _results()
    scores = option_scores(results, case_table("run", results))
    det = scores.scores["detection"]
    assert det[:5] == pytest.approx([0.9, 0.4, 0.7, 0.5, 0.2])
    assert math.isnan(det[5]) and scores.without["detection"].tolist() == [False] * 5 + [True]
    rows = {(r["question"], r["lesion"]): r for r in auroc_rows(scores)}
    pooled = rows[("detection", "all")]
    # pairs (pos > neg): 0.9 > both, 0.4 > 0.2 only, 0.7 > both -> 5 of 6
    assert pooled["auroc"] == pytest.approx(5 / 6)
    assert (pooled["auroc"], pooled["ci_low"], pooled["ci_high"]) == pytest.approx(
        auroc_interval([0.9, 0.4, 0.7, 0.5, 0.2], [True] * 3 + [False] * 2))
    assert (pooled["n_positive"], pooled["n_negative"], pooled["n_without_probs"]) == (3, 2, 1)
    assert rows[("detection", "effusion")]["auroc"] == pytest.approx(5 / 6)
    # contour evaluation: only revision-free cases, no positive -> no AUROC, a note
    contour = rows[("contour_evaluation", "all")]
    assert math.isnan(contour["auroc"]) and "needs >= 2" in contour["note"]
    assert (contour["n_positive"], contour["n_negative"]) == (0, 3)
    assert ("detection", "cardiomegaly") not in rows  # no cases: no row


def test_no_option_probs_gives_none_and_malformed_ones_name_the_case():
    results = _results()
    for case in results.values():
        for block in (case["detection_qa"], case["contour_evaluation_qa"]):
            block.pop("option_probs", None)
    assert option_scores(results, case_table("run", results)) is None
    bad = _results()
    bad["effusion_s2_positive_0"]["detection_qa"]["option_probs"]["probs"] = {"1": 2.0, "2": 0}
    with pytest.raises(SchemaError, match="effusion_s2_positive_0: detection_qa"):
        option_scores(bad, case_table("run", bad), "x/all_results.json")


def test_tied_and_perfect_scores_get_an_interval():
    results = _results()
    for case in results.values():
        op = case["detection_qa"].get("option_probs")
        if op and op["status"] == "ok":
            op["probs"] = {"1": 0.5, "2": 0.5}
    rows = auroc_rows(option_scores(results, case_table("run", results)))
    pooled = next(r for r in rows if r["question"] == "detection" and r["lesion"] == "all")
    assert pooled["auroc"] == 0.5 and pooled["ci_low"] < 0.5 < pooled["ci_high"]
    assert pooled["note"] == ""
    # every positive above every negative: AUROC 1 with a finite lower bound
    results = _results()
    results["effusion_s2_positive_0"]["detection_qa"]["option_probs"]["probs"] = {"1": 0.95,
                                                                                  "2": 0.05}
    rows = auroc_rows(option_scores(results, case_table("run", results)))
    pooled = next(r for r in rows if r["question"] == "detection" and r["lesion"] == "all")
    assert pooled["auroc"] == 1.0 and 0 < pooled["ci_low"] < 1 and pooled["ci_high"] == 1.0


def test_option_probs_not_summing_to_one_are_refused():
    # Stage 03 renormalises the two option masses to sum 1; {0.9, 0.9} is a corrupt file
    bad = _results()
    bad["effusion_s1_positive_0"]["detection_qa"]["option_probs"]["probs"] = {"1": 0.9,
                                                                               "2": 0.9}
    with pytest.raises(SchemaError, match="effusion_s1_positive_0: detection_qa.*summing to 1"):
        option_scores(bad, case_table("run", bad), "x/all_results.json")
