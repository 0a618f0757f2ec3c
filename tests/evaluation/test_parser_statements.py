r"""The statement grammar on the replies issue 28 lists (docs/parsing.md, "Statement grammar").

Each reply was refused (or read wrong with status ``ok``) by the blacklist rules before the
grammar; each is read here as a careful human reads it.
"""

from __future__ import annotations

import pytest
from parser_replies import LOCATION, MASKS, POINTS, YES_NO, ZONES

from chexpercept.evaluation.parsing import OK, parse_answer
from chexpercept.qa import _text

S, M = False, True
EXPANSION = _text.with_options(_text.expansion_stem("consolidation"), POINTS)
CONTRACTION = _text.with_options(_text.contraction_stem("consolidation"), POINTS)

#: (reply, options, multi-select, the answer a careful human reads or None)
READ = [
    # explanations after a clause boundary are never read as options
    ("The answer is 2. Option 1 is a common distractor because it looks similar.", MASKS, S,
     (2,)),
    ("Answer: 2 because the mask misses the 3 lower regions.", YES_NO, S, (2,)),
    ("Answer: 2, as the consolidation occupies the right mid and lower zones.", ZONES, S, (2,)),
    ("Answer: 2. The 3rd mask also expands laterally but keeps the medial overshoot.", MASKS, S,
     (2,)),
    ("Answer: 1 and 2 (the medial and lateral right lower zone; option 3 is spared)", LOCATION,
     M, (1, 2)),
    ("Answer: 2 (not 3)", MASKS, S, (2,)),
    ("The answer is option 2. Option 1 would require involvement of a single zone only.", ZONES,
     S, (2,)),
    ("Answer: 1. No other region is involved.", YES_NO, S, (1,)),
    # the last committing statement wins, in any form
    (r"\boxed{1} ... on reflection \boxed{4}", MASKS, S, (4,)),
    ("Answer: 2\n\nOn second look, the opacity also reaches the right upper zone, so the "
     "answer is 3.", ZONES, S, (3,)),
    ("Answer: 2\nLooking again at the film, so the correct option is 3.", ZONES, S, (3,)),
    # answers in prose that commit
    ("Yes, there is a right-sided pleural effusion with blunting of the costophrenic angle.",
     YES_NO, S, (1,)),
    ("The red and yellow points.", POINTS, M, (1, 3)),
    ("the second mask", MASKS, S, (2,)),
    ("Answer: 1st", MASKS, S, (1,)),
    ("Mask #2", MASKS, S, (2,)),
    ("The 3rd mask best matches the requested expansion.", MASKS, S, (3,)),
    ("I would select option 2, since the mask extends beyond the lesion.", YES_NO, S, (2,)),
    ("Looking at the overlay, the best choice is **(1) Yes**.", YES_NO, S, (1,)),
    ("### Answer\n**1, 3**", POINTS, M, (1, 3)),
    ("<think>Maybe 1. Hmm 2.</think>\nAnswer: 2", YES_NO, S, (2,)),
    ("Option 2 is correct.", MASKS, S, (2,)),
    ("The lesion is seen in 2 zones, the right mid zone and the right lower zone.", ZONES, S,
     (2,)),
    # never read: a retraction, a hedge, an addition, a contradiction
    ("Answer: 3\n\nActually, I'm no longer sure: the 2nd mask could equally be right ... I "
     "can't decide between them.", MASKS, S, None),
    ("Answer: 2 or 3", MASKS, S, None),
    ("Answer: either 1 or 2", MASKS, S, None),
    ("Answer: between 2 and 3", ZONES, S, None),
    ("Answer: 2/3", MASKS, S, None),
    ("Answer: 2. Or 3.", MASKS, S, None),
    ("Answer: 1 (red). Also 3", POINTS, M, None),
    ("Answer: 1, because 3 is also on the lesion", POINTS, M, None),
    ("Answer: 1 - No", YES_NO, S, None),
    ("Option 3 is also correct.", MASKS, S, None),
    ("The mask covers 3 zones and I think 2 is close.", ZONES, S, None),
    ("On balance the lesions are similar, so option 1, although by the rule the left one is "
     "larger, so option 2.", MASKS, S, None),
    ("Answer: 2, 3", MASKS, S, None),
    # what follows the deciding statement (found by the attacks of parser_attacks.json)
    ("Answer: 3. On second thought, 1.", MASKS, S, None),   # changed, not restated
    ("Answer: 3\n\nCorrection: 1.", MASKS, S, None),
    ("No, wait, yes.", YES_NO, S, None),
    ("Yes. No.", YES_NO, S, None),
    ("Wrong answer: 2", MASKS, S, None),                     # not the reply's own marker
    ("You might think the answer is 2, but it is 3.", MASKS, S, None),
    ("Answer: 2 only if the hilum is excluded", MASKS, S, None),
    ("Answer: 2?", MASKS, S, None),
    ("Answer: 1\n\nOption 2 also applies.", LOCATION, M, None),
    ("Red point - on normal lung, so no expansion.", POINTS, M, None),  # a label
    ("The 2nd mask is wrong.", MASKS, S, None),
    ("The answer is (1) 1st mask. The answer is (2) 2nd mask.", MASKS, S, None),
    ("Answer: two zones", ZONES, S, (2,)),
    ("Less than 1/3.", ("Less than 1/3 of the right lung area",
                        "1/3 or more but less than 2/3 of the right lung area",
                        "2/3 or more of the right lung area"), S, (1,)),
    ("On reflection, Answer: 1", MASKS, S, (1,)),
]


def _parse(raw, options, multi, **kw):
    none_index = next((i for i, t in enumerate(options, 1) if t.startswith("None")),
                      None) if multi else None
    return parse_answer(raw, num_options=len(options), multi_select=multi,
                        option_texts=options, none_index=none_index, **kw)


@pytest.mark.parametrize(("raw", "options", "multi", "human"), READ)
def test_reply_is_read_as_a_human_reads_it(raw, options, multi, human):
    parsed = _parse(raw, options, multi)
    if human is None:
        assert parsed.status != OK, (raw, parsed.answer)
    else:
        assert (parsed.answer, parsed.status) == (human, OK), parsed.detail


def test_option_number_and_text_without_option_texts():
    parsed = parse_answer("Answer: (2) No", num_options=2)
    assert (parsed.answer, parsed.status) == ((2,), OK)


def test_point_verbs_follow_the_question_asked():
    reply = "The mask should be expanded toward the red point and the yellow point."
    assert _parse(reply, POINTS, M, question=EXPANSION).answer == (1, 3)
    # the same words answer nothing on the contraction question, or when negated
    assert _parse(reply, POINTS, M, question=CONTRACTION).status != OK
    negated = "The mask should not be expanded toward the red point."
    assert _parse(negated, POINTS, M, question=EXPANSION).status != OK
    assert _parse("None of the points need expansion.", POINTS, M,
                  question=EXPANSION).answer == (4,)


def test_a_cut_off_reply_does_not_commit_by_prose_or_a_dangling_clause():
    assert _parse("Answer: 2, but", MASKS, S, finish_reason="length").status == "truncated"
    assert _parse("Answer: 2", MASKS, S, finish_reason="length").answer == (2,)
    prose = "The lesion is seen in 2 zones, the right mid zone and"
    assert _parse(prose, ZONES, S, finish_reason="length").status == "truncated"
