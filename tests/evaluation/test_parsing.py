"""Strict answer parser: a table of realistic raw outputs -> (answer, status)."""

from __future__ import annotations

import pytest

from chexpercept.evaluation.parsing import parse_answer, parse_payload
from chexpercept.schema import STATUSES

YES_NO = ["Yes", "No"]
POINTS = ["red point", "orange point", "yellow point", "None"]
MASKS = ["1st mask", "2nd mask", "3rd mask", "4th mask"]
ZONES = ["1 zone", "2 zones", "3 zones", "4 zones or more"]
SEVERITY = ["Less than 1/3 of the right lung area",
            "1/3 or more but less than 2/3 of the right lung area",
            "2/3 or more of the right lung area"]
LOCATION = ["the right costophrenic angle",
            "the intersection of the right lateral lung and the right mid zone lung",
            "the intersection of the left medial lung and the left upper zone lung",
            "None of the above (options 1-3)"]
COMPARISON = ["Both lesions are similar in size.",
              "The left lung lesion is larger than the right lung lesion.",
              "The right lung lesion is larger than the left lung lesion.",
              "The lesion is present in only one lung (left or right)."]

S, M = False, True  # single choice / multi-select
OK, UNP, TRUNC, REF, ERR = "ok", "unparseable", "truncated", "refused", "error"

# (raw, options, multi_select, finish_reason, expected answer or None, expected status)
TABLE = [
    ("Answer: 1", YES_NO, S, "stop", (1,), OK),
    ("Answer: 2\u200b", YES_NO, S, "stop", (2,), OK),  # zero-width space left by a server
    ("\ufeffAnswer: 1", YES_NO, S, "stop", (1,), OK),  # byte-order mark
    ("Answer: 2\x00", YES_NO, S, "stop", (2,), OK),  # NUL bytes of a broken detokenizer
    ("Answer:\x00 2", YES_NO, S, "stop", (2,), OK),
    ("Answer: \u0662", YES_NO, S, "stop", (2,), OK),  # decimal digits of any script count
    ("Answer: \u2461", YES_NO, S, "stop", None, UNP),  # a circled number is no digit
    ("answer: 2", YES_NO, S, "stop", (2,), OK),
    ("ANSWER:2", YES_NO, S, "stop", (2,), OK),
    ("The mask covers the effusion.\n\nAnswer: (2)", YES_NO, S, "stop", (2,), OK),
    ("**Answer:** 2", YES_NO, S, "stop", (2,), OK),
    ("**Answer: 1**", YES_NO, S, "stop", (1,), OK),
    ("### Final Answer: 1", YES_NO, S, "stop", (1,), OK),
    ("Answer: (2) No", YES_NO, S, "stop", (2,), OK),
    ("Answer: 1 (Yes)", YES_NO, S, "stop", (1,), OK),
    ("Answer: 1. The mask extends beyond the lesion.", YES_NO, S, "stop", (1,), OK),
    ("Answer: 1\nAnswer: 2", YES_NO, S, "stop", (2,), OK),
    ("Answer: 2\n\nOn reflection, Answer: 1", YES_NO, S, "stop", (1,), OK),
    ("Answer:\n2", YES_NO, S, "stop", (2,), OK),
    ("<think>Option 1 looks right... Answer: 1</think>\nAnswer: 2", YES_NO, S, "stop", (2,), OK),
    ("The lesion is there, so...</think>\n\nAnswer: 1", YES_NO, S, "stop", (1,), OK),
    ("<think>The heart border is obscured. Answer: 1", YES_NO, S, "stop", None, UNP),
    ("<think>The heart border is obscured, so", YES_NO, S, "length", None, TRUNC),
    ("Looking at the lower zones and the costophrenic", YES_NO, S, "length", None, TRUNC),
    ("Answer: 2 and then more text that got cut", YES_NO, S, "length", None, TRUNC),
    ("Answer: 2", YES_NO, S, "length", (2,), OK),
    ("The final answer is $\\boxed{2}$", YES_NO, S, "stop", (2,), OK),
    ("Answer: \\boxed{1}", YES_NO, S, "stop", (1,), OK),
    ("Based on the overlay, \\boxed{2}", YES_NO, S, "stop", (2,), OK),
    ("Answer: $\\boxed{\\text{(1)}}$", YES_NO, S, "stop", (1,), OK),
    ("<think>hmm</think><answer>The mask is fine. <|begin_of_box|>2<|end_of_box|></answer>",
     YES_NO, S, "stop", (2,), OK),
    ("<|begin_of_box|>1<|end_of_box|>", YES_NO, S, "stop", (1,), OK),
    ("<unused94>thought\nThe overlay covers the right base. Answer: 2<unused95>Answer: 1",
     YES_NO, S, "stop", (1,), OK),
    ("<unused94>thought\nThe overlay covers", YES_NO, S, "stop", None, UNP),
    ("<unused0>Answer: 2", YES_NO, S, "stop", (2,), OK),
    ("2", YES_NO, S, "stop", (2,), OK),
    ("  1  ", YES_NO, S, "stop", (1,), OK),
    ("Yes", YES_NO, S, "stop", (1,), OK),
    ("no.", YES_NO, S, "stop", (2,), OK),
    ("Answer: Yes", YES_NO, S, "stop", (1,), OK),
    ("The correct answer is (1).", YES_NO, S, "stop", (1,), OK),
    ("Answer: 3", YES_NO, S, "stop", None, UNP),
    ("Answer: 0", YES_NO, S, "stop", None, UNP),
    ("Answer: 1, 2", YES_NO, S, "stop", None, UNP),
    ("Answer: 1 or 2", YES_NO, S, "stop", None, UNP),
    # docs/differences.md: integers elsewhere in the text are never taken as the answer
    ("The lesion spans 2 zones and the mask needs 1 revision.", ZONES, S, "stop", None, UNP),
    ("The lesion is in 2 zones, Answer 1", ZONES, S, "stop", None, UNP),
    ("I see 3 lesions.\nProbably the second.", ZONES, S, "stop", None, UNP),
    ("", YES_NO, S, "stop", None, UNP),
    ("I'm sorry, but I can't help with interpreting medical images.", YES_NO, S, "stop",
     None, REF),
    ("Answer: 2 zones", ZONES, S, "stop", (2,), OK),
    ("Answer: 4 zones or more", ZONES, S, "stop", (4,), OK),
    ("Answer: Less than 1/3 of the right lung area", SEVERITY, S, "stop", (1,), OK),
    ("Answer: 1/3 or more but less than 2/3 of the right lung area.", SEVERITY, S, "stop",
     (2,), OK),
    ("Answer: 1/3", SEVERITY, S, "stop", None, UNP),
    ("Answer: 1.5", SEVERITY, S, "stop", None, UNP),
    ("Answer: the lesion is present in only one lung (left or right)", COMPARISON, S, "stop",
     (4,), OK),
    ("Answer: 3rd mask", MASKS, S, "stop", (3,), OK),
    ("Answer: Option 3", MASKS, S, "stop", (3,), OK),
    ("Answer: 5", MASKS, S, "stop", None, UNP),
    # multi-select
    ("Answer: 1, 3", POINTS, M, "stop", (1, 3), OK),
    ("Answer: 1,3", POINTS, M, "stop", (1, 3), OK),
    ("Answer: 3, 1", POINTS, M, "stop", (1, 3), OK),
    ("Answer: 1 and 3", POINTS, M, "stop", (1, 3), OK),
    ("Answer: (1), (3)", POINTS, M, "stop", (1, 3), OK),
    ("Answer: [1, 2]", POINTS, M, "stop", (1, 2), OK),
    ("Answer: 2", POINTS, M, "stop", (2,), OK),
    ("1, 3", POINTS, M, "stop", (1, 3), OK),
    ("Answer: red point", POINTS, M, "stop", (1,), OK),
    ("Answer: red point, yellow point", POINTS, M, "stop", (1, 3), OK),
    ("red point", POINTS, M, "stop", (1,), OK),
    ("Answer: None", POINTS, M, "stop", (4,), OK),
    ("Answer: 4", POINTS, M, "stop", (4,), OK),
    ("Answer: 1, 4", POINTS, M, "stop", None, UNP),
    ("Answer: 1, 5", POINTS, M, "stop", None, UNP),
    ("Answer: none", LOCATION, M, "stop", (4,), OK),
    ("Answer: the intersection of the right lateral lung and the right mid zone lung",
     LOCATION, M, "stop", (2,), OK),
    ("Answer: the right costophrenic angle, the intersection of the left medial lung and the "
     "left upper zone lung", LOCATION, M, "stop", (1, 3), OK),
    ("Answer: blue point", POINTS, M, "stop", None, UNP),
    # issue 20: a statement is read whole or not at all (docs/parsing.md, "Parser rules", 7)
    ("Answer: 1 (red), 3 (yellow)", POINTS, M, "stop", (1, 3), OK),  # per-number notes
    ("Answer: 1 [red], 3", POINTS, M, "stop", (1, 3), OK),
    ("Answer: 1 - red point (on the opacity); 3", POINTS, M, "stop", (1, 3), OK),
    ("Answer: 1 (maybe), 3", POINTS, M, "stop", None, UNP),  # a hedge is no note
    ("Answer: 1 (like 3), 2", POINTS, M, "stop", (1, 2), OK),  # a note is explanation
    ("Answer: 1 (yellow point), 2", POINTS, M, "stop", None, UNP),
    ("Answer: 1 (red) 3 (yellow)", POINTS, M, "stop", None, UNP),  # no separator
    ("Answer: 1, because 3 is also on the lesion", POINTS, M, "stop", None, UNP),  # adds 3
    ("Answer: 1 - red, 3 - yellow", POINTS, M, "stop", (1, 3), OK),  # echoes of each
    ("Answer: 1 - red, 0", POINTS, M, "stop", None, UNP),  # any integer counts
    ("Answer: 1 because the yellow point is also on it", POINTS, M, "stop", None, UNP),
    ("Answer: 1 (point 1 is on the opacity)", POINTS, M, "stop", (1,), OK),  # chosen number
    ("Answer: 2 because the mask overshoots by 3 mm", MASKS, S, "stop", (2,), OK),
    ("Answer: 2 because the mask overshoots by 3.5", MASKS, S, "stop", (2,), OK),  # decimal
    ("Answer: 1 because it covers 1/3 of the lung", SEVERITY, S, "stop", (1,), OK),
    ("Answer: 2 because the lesion spans 3 zones", ZONES, S, "stop", (2,), OK),
    ("Answer: 2 - the 3rd mask is too wide", MASKS, S, "stop", (2,), OK),  # explanation
    ("Answer: 2 - the lesion ends at the 3rd rib", MASKS, S, "stop", (2,), OK),
    ("Answer: 1 because no lesion is missed", YES_NO, S, "stop", (1,), OK),  # one-word text
    ("Answer: 1. No other region is involved.", YES_NO, S, "stop", (1,), OK),
    ("Answer: 2 - No 2 - Yes", YES_NO, S, "stop", None, UNP),  # a number with another text
    ("Answer: 4 because none of the above (options 1-3) apply", LOCATION, M, "stop", (4,), OK),
    ('Answer: [2] "No"', YES_NO, S, "stop", (2,), OK),  # quoted echo
    ("The answer is [1, 3].", POINTS, M, "stop", (1, 3), OK),
    # LaTeX math delimiters are removed like "$"
    ("Answer: \\(2\\)", YES_NO, S, "stop", (2,), OK),
    ("Answer: \\[2\\]", YES_NO, S, "stop", (2,), OK),
    ("The answer is \\( 1, 3 \\).", POINTS, M, "stop", (1, 3), OK),
    ("Answer: \\mathbf{2}", YES_NO, S, "stop", (2,), OK),
    # a box declares only an answer; its payload runs to the end of its line
    ("Answer: 2\n\nThe lesion measures \\boxed{3.5 cm}", YES_NO, S, "stop", (2,), OK),
    ("Answer: \\boxed{2}\nIt is \\boxed{3 cm} wide.", YES_NO, S, "stop", (2,), OK),
    ("Answer: 2\n\\boxed{1}", YES_NO, S, "stop", (1,), OK),  # the last declaration wins
    ("\\boxed{1}, \\boxed{3}", POINTS, M, "stop", (1, 3), OK),
    ("\\boxed{1} and \\boxed{3}", POINTS, M, "stop", (1, 3), OK),
    ("\\boxed{1} (red), 3 (yellow)", POINTS, M, "stop", (1, 3), OK),
    ("\\boxed{1} \\boxed{3}", POINTS, M, "stop", None, UNP),
    ("\\boxed{2} because 1 misses the base", YES_NO, S, "stop", (2,), OK),
    ("<|begin_of_box|>1<|end_of_box|>, 3", POINTS, M, "stop", (1, 3), OK),
    ("Answer: 2\n<|begin_of_box|>4 cm<|end_of_box|>", YES_NO, S, "stop", (2,), OK),
    ("<|begin_of_box|>2", YES_NO, S, "stop", (2,), OK),  # an unpaired box token declares
]


@pytest.mark.parametrize(("raw", "options", "multi", "finish", "answer", "status"), TABLE)
def test_parser_table(raw, options, multi, finish, answer, status):
    none_index = next((i for i, t in enumerate(options, 1) if t.lower().startswith("none")),
                      None) if multi else None
    parsed = parse_answer(raw, num_options=len(options), multi_select=multi,
                          option_texts=options, none_index=none_index, finish_reason=finish)
    assert (parsed.answer, parsed.status) == (answer, status), parsed.detail
    assert parsed.status in STATUSES


def test_table_is_large_enough():
    assert len(TABLE) >= 30


def test_provider_statuses_pass_through():
    assert parse_answer("Answer: 1", num_options=2, completion_status="error").status == "error"
    assert parse_answer("", num_options=2, completion_status="refused").status == "refused"
    assert parse_answer(None, num_options=2, completion_status="truncated").status == "truncated"


def test_parsed_text_is_sorted_and_comma_joined():
    parsed = parse_answer("Answer: 3, 1", num_options=4, multi_select=True)
    assert parsed.text == "1,3"
    assert parse_answer("blah", num_options=4).text == ""


def test_payload_requires_the_whole_line_to_be_an_answer():
    assert parse_payload("2 because the mask is off", ["Yes", "No"]) == [2]  # justification
    assert parse_payload("2 the mask is off", ["Yes", "No"]) is None  # bare space: no
    assert parse_payload("(2) No", ["Yes", "No"]) == [2]
    assert parse_payload("(1) No", ["Yes", "No"]) is None  # text of another option
