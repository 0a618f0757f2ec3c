"""The parser's fast paths (benchmarks/bench_parser.py) keep the regex semantics exactly.

ASCII text is searched with ``str.lower``/``rfind``; other text falls back to the
case-insensitive regexes, whose folding also maps the long s and dotted I to ASCII letters.
"""

from __future__ import annotations

import pytest

from chexpercept.evaluation import parsing
from chexpercept.evaluation.parsing import parse_answer

YES_NO = ["Yes", "No"]


@pytest.mark.parametrize(("raw", "answer", "status"), [
    ("anſwer: 2", (2,), "ok"),                       # long s folds to s (regex IGNORECASE)
    ("Ｘ the ANſWER: 1", (1,), "ok"),
    ("İ cannot help with this image.", None, "refused"),  # dotted I folds to i
    ("I CAN'T do that", None, "refused"),
    ("é\nfinal answer: 2\nmore", (2,), "ok"),
    ("Answer：2", (2,), "ok"),                       # full-width colon
    ("answer: 1 xanswer: 2", None, "unparseable"),    # 'xanswer' is no declaration
    ("Answer: 2\nthe answers are 1", None, "unparseable"),  # two answers, no change of mind
    ("réponse. Answer: 1\nSo the answers are 2", (2,), "ok"),  # a conclusion: the later wins
    ("ſome text\nthe answer is (2).", (2,), "ok"),
    ("Final answer: 1 ... Answer:2", (2,), "ok"),     # the last declaration wins
    ("2 zones\n" + "reasoning " * 200 + "\nAnswer: 1", (1,), "ok"),
    ("no decl\nhere 2", None, "unparseable"),
])
def test_ascii_and_unicode_paths_agree_with_the_rules(raw, answer, status):
    parsed = parse_answer(raw, num_options=2, option_texts=YES_NO)
    assert (parsed.answer, parsed.status) == (answer, status), parsed.detail


def test_clean_gates_are_literals_of_their_patterns():
    # docs/parsing.md, "Fast paths": _clean runs these patterns only when the reply holds
    # the text checked for, so each pattern must contain that text literally.
    assert parsing._UNUSED.pattern.startswith("<unused")
    assert parsing._GLM_BOX_OPEN.pattern.endswith("_box\\|>")
    assert parsing._GLM_BOX_CLOSE.pattern.endswith("_box\\|>")
    assert parsing._BOX.pattern.startswith("\\\\boxed")  # the \boxed{..} alternative
    assert "|<\\|begin_of_box\\|>" in parsing._BOX.pattern  # the GLM one holds "_box|>"


@pytest.mark.parametrize(("raw", "answer", "status"), [
    ("<unused1>2", (2,), "ok"),
    ("<UNUSED1>2", None, "unparseable"),  # the token is case-sensitive
    ("Answer: 1<|end_of_box|>", (1,), "ok"),
    ("\\boxed{2}", (2,), "ok"),
    ("\\boxed {2}", (2,), "ok"),
])
def test_clean_gates_keep_the_results(raw, answer, status):
    parsed = parse_answer(raw, num_options=2, option_texts=YES_NO)
    assert (parsed.answer, parsed.status) == (answer, status), parsed.detail
