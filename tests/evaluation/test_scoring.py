"""All-or-nothing scoring (docs/evaluation_protocol.md, "Scoring")."""

from __future__ import annotations

from chexpercept.evaluation.parsing import ParsedAnswer
from chexpercept.evaluation.scoring import is_correct, stage_correct


def test_single_choice_exact():
    assert is_correct(ParsedAnswer((2,), "ok"), 2, multi_select=False)
    assert not is_correct(ParsedAnswer((1,), "ok"), 2, multi_select=False)


def test_multi_select_set_equality_no_partial_credit():
    assert is_correct(ParsedAnswer((1, 3), "ok"), (3, 1), multi_select=True)
    assert not is_correct(ParsedAnswer((1,), "ok"), (1, 3), multi_select=True)
    assert not is_correct(ParsedAnswer((1, 2, 3), "ok"), (1, 3), multi_select=True)
    assert is_correct(ParsedAnswer((4,), "ok"), [4], multi_select=True)


def test_non_ok_status_is_wrong():
    for status in ("unparseable", "refused", "truncated", "error"):
        assert not is_correct(ParsedAnswer(None, status), 1, multi_select=False)
        assert not is_correct(ParsedAnswer((1,), status), 1, multi_select=False)


def test_stage_correct_needs_every_sub_question():
    assert stage_correct([True, True, True])
    assert not stage_correct([True, False, True])
    assert not stage_correct([])
