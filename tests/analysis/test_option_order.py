"""Stage 04 option-position tables (chexpercept.analysis.option_order)."""

from __future__ import annotations

import math

import pytest

from chexpercept.analysis.option_order import always_k_baselines, position_accuracy


def _record(det_gt: int, det_ok: bool, *, order=None, circ=None, loc=None):
    det = {"response": "1", "ground_truth": det_gt, "correct": det_ok, "status": "ok"}
    if order is not None:
        det["option_order"] = order
    if circ is not None:
        det["circular_correct"] = circ
    rec = {"qa_path": "revision_free", "detection_qa": det}
    if loc is not None:  # a multi-select sub-question: never counted
        rec["attribute_extraction_qa"] = {
            "responses": {"location": "1,2"}, "ground_truth": {"location": loc,
                                                               "severity": 2},
            "correct": False, "location": {"correct": False, "status": "ok"},
            "severity": {"correct": True, "status": "ok"}}
    return rec


def test_release_always_one_is_perfect_on_positive_detection():
    records = {f"k{i}": _record(1, True) for i in range(5)}
    base = always_k_baselines(records)
    assert base.to_dict("records") == [
        {"question": "detection_qa", "path": "revision_free", "k": 1, "n": 5, "accuracy": 1.0}]


def test_displayed_position_follows_option_order():
    # original option 1 ("Yes") shown at position 2 in half the cases
    records = {"a": _record(1, True, order=[2, 1]), "b": _record(1, False, order=[1, 2]),
               "c": _record(1, True, order=[2, 1]), "d": _record(1, True, order=[1, 2])}
    base = always_k_baselines(records).set_index("k")["accuracy"].to_dict()
    assert base == {1: 0.5, 2: 0.5}
    acc = position_accuracy(records)
    assert acc[["position", "n", "accuracy"]].values.tolist() == [[1, 2, 0.5], [2, 2, 1.0]]
    assert acc["circular_accuracy"].isna().all()


def test_circular_accuracy_next_to_plain():
    records = {"a": _record(1, True, circ=False), "b": _record(1, True, circ=True)}
    row = position_accuracy(records).iloc[0]
    assert row["accuracy"] == 1.0 and row["circular_accuracy"] == 0.5


def test_multi_select_not_counted_sub_questions_are():
    records = {"a": _record(2, False, loc=[1, 3])}
    acc = position_accuracy(records)
    assert set(acc["question"]) == {"detection_qa", "attribute_extraction_qa.severity"}
    assert not math.isnan(acc.set_index("question").loc[
        "attribute_extraction_qa.severity", "accuracy"])


def test_bad_option_order_names_key_id():
    with pytest.raises(ValueError, match="k9: detection_qa"):
        position_accuracy({"k9": _record(3, True, order=[2, 1])})


@pytest.mark.parametrize("circ", ["yes", 1, 0, [True]])
def test_circular_correct_not_a_bool_is_refused_not_counted_wrong(circ):
    # a corrupt circular_correct ('yes', 1) once entered the circular denominator as wrong
    with pytest.raises(ValueError, match="k4: detection_qa: circular_correct"):
        position_accuracy({"k4": _record(1, True, circ=circ)})
