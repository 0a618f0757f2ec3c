"""The viewer numbers a shuffled run's answer and ground truth as the model saw the options.

A ``--option-order shuffled`` / ``circular`` record keeps ``answer`` and the results keep
``ground_truth`` in the original numbering (docs/evaluation_protocol.md, "Option order"), while
the question text in ``chat_history`` lists the options as displayed; the viewer labels numbers
with the displayed option lines, so it must show displayed numbers (docs/viewer.md).
"""

from __future__ import annotations

from pathlib import Path

from chexpercept.analysis.viewer import _as_displayed, _case_detail, _Images

KEY = "cardiomegaly_s1_positive_0"
SHUFFLED_TEXT = "Is cardiomegaly visible?\n\nOptions:\n(1) No\n(2) Yes"


def _record() -> dict:
    return {"key_id": KEY, "qa_path": "revision_free",
            "chat_history": [[SHUFFLED_TEXT, [], "Answer: 2"]],
            "_chat_history_idx": {"detection_qa": 0},
            "detection_qa": {"ground_truth": 1, "response": 1, "correct": True}}


def _turn(records: dict, tmp_path: Path) -> dict:
    images = _Images(tmp_path / "viewer", None, None)
    return _case_detail(_record(), KEY, records, images)["turns"][0]


def test_shuffled_answer_and_ground_truth_are_shown_as_displayed(tmp_path):
    # the model saw "(1) No (2) Yes" and answered 2 (Yes); original option 1 is "Yes"
    rec = {"raw": "Answer: 2", "parsed": "1", "answer": [1], "status": "ok", "correct": True,
           "option_order": [2, 1], "displayed_answer": [2]}
    turn = _turn({f"{KEY}/detection_qa": rec}, tmp_path)
    assert turn["gt"] == 2 and turn["answer"] == [2]  # both "(2) Yes" on the page
    assert turn["correct"] is True


def test_release_order_is_left_as_recorded(tmp_path):
    rec = {"raw": "Answer: 1", "parsed": "1", "answer": [1], "status": "ok", "correct": True}
    turn = _turn({f"{KEY}/detection_qa": rec}, tmp_path)
    assert turn["gt"] == 1 and turn["answer"] == [1]


def test_as_displayed_maps_lists_and_leaves_unknown_values():
    assert _as_displayed([3, 1], [3, 1, 2, 4]) == [1, 2]
    assert _as_displayed(4, [3, 1, 2, 4]) == 4
    assert _as_displayed(9, [2, 1]) == 9
    assert _as_displayed(None, [2, 1]) is None
    assert _as_displayed(2, None) == 2
