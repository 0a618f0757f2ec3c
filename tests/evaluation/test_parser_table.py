"""The strict parser on a table of realistic replies per model family (parser_replies.py)."""

from __future__ import annotations

from collections import Counter

import pytest
from parser_replies import (
    FAMILIES,
    NEGATIVE_KINDS,
    NEW_RULES,
    OLD_RULES,
    OPTIONS,
    REPLIES,
    Reply,
)

from chexpercept.evaluation import parsing
from chexpercept.evaluation.parsing import BLOCKED, ParsedAnswer, parse_answer
from chexpercept.schema import STATUSES

#: The parser's statuses: the schema's, plus ``blocked`` (added to the schema separately).
PARSER_STATUSES = frozenset(STATUSES) | {BLOCKED}


def _row_id(index: int, row: Reply) -> str:
    return f"{row.family}-{index:03d}-{row.rule}"


def _none_index(row: Reply) -> int | None:
    if not row.multi_select:
        return None
    options = OPTIONS[row.kind]
    return next((i for i, t in enumerate(options, 1) if t.lower().startswith("none")), None)


def _parse(row: Reply) -> ParsedAnswer:
    options = OPTIONS[row.kind]
    return parse_answer(row.raw, num_options=len(options), multi_select=row.multi_select,
                        option_texts=options, none_index=_none_index(row),
                        finish_reason=row.finish_reason,
                        completion_status=row.completion_status)


@pytest.mark.parametrize("row", REPLIES, ids=[_row_id(i, r) for i, r in enumerate(REPLIES)])
def test_reply(row):
    parsed = _parse(row)
    assert (parsed.answer, parsed.status) == (row.answer, row.status), parsed.detail
    assert parsed.status in PARSER_STATUSES


def test_table_size_and_families():
    per_family = Counter(row.family for row in REPLIES)
    assert len(REPLIES) >= 200
    assert set(per_family) == set(FAMILIES)
    assert min(per_family.values()) >= 10, per_family


def test_rows_are_well_formed():
    for row in REPLIES:
        assert row.kind in OPTIONS, row
        assert row.rule in NEW_RULES | OLD_RULES, row
        assert row.status in PARSER_STATUSES, row
        assert (row.answer is not None) == (row.status == "ok"), row
    # Templates shared by several families (ChatML) may give the same reply in each of them.
    keys = [(row.family, row.raw, row.kind, row.finish_reason, row.completion_status)
            for row in REPLIES]
    assert len(keys) == len(set(keys)), "duplicate rows within a family"


def test_every_new_rule_has_rows():
    assert NEW_RULES <= {row.rule for row in REPLIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_has_each_negative_kind(family):
    rules = {row.rule for row in REPLIES if row.family == family}
    missing = [kind for kind, tags in NEGATIVE_KINDS.items() if not rules & tags]
    assert not missing, missing


def test_blocked_mirrors_the_other_provider_statuses():
    parsed = parse_answer("Answer: 1", num_options=2, completion_status="blocked")
    assert parsed == ParsedAnswer(None, "blocked", "provider blocked the response")
    assert parse_answer(None, num_options=2, completion_status=BLOCKED).status == BLOCKED


# The fast paths must give what the plain regex would (docs/parsing.md, "Fast paths").

_EXTRA_TEXTS = ["", "plain text", "<", "[", "a<b[c", "<|im_end|>", "x [INST] y [/INST] z",
                "<think>a</think><|eot_id|>", "[1] <s> 2", "<<|im_start|>user", "[[gMASK]"]


@pytest.mark.parametrize("text", [row.raw for row in REPLIES] + _EXTRA_TEXTS)
def test_first_turn_mark_equals_the_regex_search(text):
    fast = parsing._first_turn_mark(text)
    slow = parsing._TURN_MARK.search(text)
    assert (fast and fast.span()) == (slow and slow.span())


def test_final_response_prefilter_never_hides_a_match():
    texts = [row.raw for row in REPLIES] + ["# final response\n2", "## FINAL RESPONSE: 1",
                                            "# Final  Response", "## final Response"]
    for text in texts:
        if parsing._FINAL_RESPONSE.search(text):
            assert "esponse" in text or "ESPONSE" in text, text


def test_full_width_table_leaves_ascii_alone():
    assert all(code > 127 for code in parsing._FULL_WIDTH)
