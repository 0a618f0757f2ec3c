r"""Property-based tests of the parser: a reply is read whole or not at all (issue 20).

Hypothesis generates a question (2-5 options drawn from the benchmark's option texts in
``parser_replies.OPTIONS``, single choice or multi-select), a stated answer set, and a reply
that states that set under random decorations: per-number bracketed notes, brackets around the
numbers, option-text echoes (bare, bracketed, quoted), option texts instead of numbers,
markdown emphasis, ``\boxed{..}``, LaTeX math delimiters, leading reasoning and trailing lines
with numbers in them, and same-line justifications. docs/parsing.md, "Parser rules", says
which of these are read; the tests check that

* a reply built only from the decorations the rules read parses to exactly the stated set;
* a reply whose justification or note names an option outside the stated set is never ``ok``;
* any reply, whatever its decorations, parses to exactly the set it states or is not ``ok``
  (never a subset or a superset). The set a reply states includes every number a note or
  justification on the answer line holds, other than a measurement, decimal or fraction.

The settings are fixed (``derandomize``, no database, a bounded number of examples, no
deadline) so that every run, in CI or here, tries the same replies.
"""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from parser_replies import OPTIONS

from chexpercept.evaluation.parsing import OK, parse_answer

CI = settings(derandomize=True, database=None, max_examples=400, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

#: Every option text of the benchmark's question shapes, each once.
TEXTS = tuple(dict.fromkeys(text for options in OPTIONS.values() for text in options))

#: Notes a model writes after one number of a list; none names an option of any shape.
NOTES = ("dense", "faint", "on the opacity", "right upper zone", "lateral edge",
         "covers the base", "the meniscus", "inside the lesion")
#: Justifications whose only numbers are measurements, decimals or fractions, which name no
#: option (docs/parsing.md, "Parser rules", rule 7).
PLAIN_JUSTIFICATIONS = (
    " because the mask follows the opacity", " - the contour follows the meniscus",
    " (the overlay extends {m} beyond the edge)", "; the lesion measures {m}",
    ". The lesion measures {m}.", " because the opacity covers {m} of the lung",
    " since the border sits 12 px inside", ": the angle is 30 degrees",
)
MEASUREMENTS = ("3.5 cm", "2 mm", "40%", "1/3", "12 cm", "4.5 cm")
#: Lines before or after the answer line; their numbers are outside the answer statement.
REASONING = (
    "The overlay is drawn on a frontal radiograph.", "Option 3 would include the hilum.",
    "The lesion measures 4.5 cm and spans 2 zones.", "Points 1 and 2 sit near the rib.",
    "I first considered 2, then checked the base again.",
)
TRAILING = (
    "Option 2 misses the base.", "The lesion spans 3 zones.",
    "It measures \\boxed{3.5 cm} across.", "Points 1, 2 and 4 were checked.",
    "**Reasoning:** the contour crosses the fissure at 2 sites.",
)
DECLARATIONS = ("Answer: {b}", "answer: {b}", "ANSWER: {b}", "Final answer: {b}",
                "**Answer:** {b}", "**Answer: {b}**", "### Answer: {b}", "Answer:\n{b}",
                "The answer is {b}", "The final answer is {b}.", "\\boxed{{{b}}}")
#: Wrappers around the answer statement that the parser removes.
WRAPPERS = ("{b}", "**{b}**", "`{b}`", "${b}$", "\\({b}\\)", "\\[{b}\\]", "\\boxed{{{b}}}",
            "$\\boxed{{{b}}}$", "\\(\\boxed{{{b}}}\\)")
NUMBER_FORMS = ("{n}", "({n})", "[{n}]", "option {n}", "Option {n}", "{n})")
ECHO_FORMS = (" - {t}", ": {t}", " ({t})", ". {t}", " {t}", ' "{t}"', " – {t}")
SEPARATORS = (", ", ",", " and ", "; ", " & ", ", and ")
DIGITS = "0123456789"


class Question(NamedTuple):
    """A generated question: option texts, the question kind and its "None" option."""

    options: tuple[str, ...]
    multi_select: bool
    none_index: int | None


class Case(NamedTuple):
    """A generated reply and the set of options it states."""

    question: Question
    raw: str
    stated: frozenset[int]


def _parse(case: Case):
    q = case.question
    return parse_answer(case.raw, num_options=len(q.options), multi_select=q.multi_select,
                        option_texts=q.options, none_index=q.none_index)


@st.composite
def questions(draw) -> Question:
    n = draw(st.integers(2, 5))
    options = tuple(draw(st.lists(st.sampled_from(TEXTS), min_size=n, max_size=n,
                                  unique=True)))
    multi = draw(st.booleans())
    none_index = next((i for i, t in enumerate(options, 1) if t.lower().startswith("none")),
                      None) if multi else None
    return Question(options, multi, none_index)


@st.composite
def stated_sets(draw, q: Question) -> tuple[int, ...]:
    """A valid answer, in the order the reply states it."""
    indices = range(1, len(q.options) + 1)
    if not q.multi_select:
        return (draw(st.sampled_from(indices)),)
    chosen = draw(st.lists(st.sampled_from(indices), min_size=1, max_size=len(q.options),
                           unique=True))
    if q.none_index in chosen:
        return (q.none_index,)
    return tuple(chosen)


def _echo_text(text: str) -> str:
    # An option's own final full stop reads as the end of the answer, so a list item echoes
    # the text without it (as the options are shown in the prompt).
    return text.rstrip(".")


def _join(draw, items: list[str]) -> str:
    body = items[0]
    for item in items[1:]:
        body += draw(st.sampled_from(SEPARATORS)) + item
    return body


@st.composite
def number_items(draw, q: Question, order: tuple[int, ...], *,
                 first_note: str | None = None, enclose: bool = True) -> str:
    """The stated numbers, each with an optional echo and bracketed note.

    ``first_note`` is put after the first number instead of a drawn note. ``enclose`` lets a
    list of bare numbers be put in brackets (read only as the whole payload, ``[1, 3]``).
    """
    if first_note is None and draw(st.booleans()):  # bare numbers, maybe the list in brackets
        items = [draw(st.sampled_from(("{n}", "option {n}"))).format(n=n) for n in order]
        body = _join(draw, items)
        return draw(st.sampled_from(("{}", "[{}]", "({})") if enclose else ("{}",))).format(
            body)
    items = []
    for n in order:
        item = draw(st.sampled_from(NUMBER_FORMS)).format(n=n)
        if draw(st.booleans()):
            item += draw(st.sampled_from(ECHO_FORMS)).format(t=_echo_text(q.options[n - 1]))
        note = first_note if first_note is not None and not items else (
            draw(st.sampled_from(NOTES)) if draw(st.booleans()) else None)
        if note is not None:
            item += draw(st.sampled_from((" ({})", " [{}]"))).format(note)
        items.append(item)
    return _join(draw, items)


@st.composite
def text_items(draw, q: Question, order: tuple[int, ...]) -> str:
    """The stated options by their texts, joined by commas or semicolons."""
    texts = [_echo_text(q.options[n - 1]) for n in order]
    return draw(st.sampled_from((", ", "; "))).join(texts)


def _surround(draw, statement: str) -> str:
    """``statement`` declared, with reasoning before it and explanation lines after it."""
    declarations = [d for d in DECLARATIONS if "boxed" not in d or "boxed" not in statement]
    raw = draw(st.sampled_from(declarations)).format(b=statement)
    before = draw(st.lists(st.sampled_from(REASONING), max_size=2))
    if before:
        lead = " ".join(before)
        if draw(st.booleans()):
            lead = f"<think>\n{lead}\n</think>"
        raw = f"{lead}\n\n{raw}"
    after = draw(st.lists(st.sampled_from(TRAILING), max_size=2))
    if after:
        raw += "\n\n" + "\n".join(after)
    return raw


@st.composite
def clean_replies(draw) -> Case:
    """Replies built only from decorations that docs/parsing.md says are read."""
    q = draw(questions())
    order = draw(stated_sets(q))
    by_text = draw(st.booleans())
    # A list of option texts, or of numbers in brackets, takes no justification
    # (docs/parsing.md, "Parser rules").
    justified = not (by_text and len(order) > 1) and draw(st.booleans())
    if by_text:
        body = draw(text_items(q, order))
    else:
        body = draw(number_items(q, order, enclose=not justified))
    statement = draw(st.sampled_from(WRAPPERS)).format(b=body)
    if justified:
        statement += draw(st.sampled_from(PLAIN_JUSTIFICATIONS)).format(
            m=draw(st.sampled_from(MEASUREMENTS)))
    return Case(q, _surround(draw, statement), frozenset(order))


def _ordinal(k: int) -> str:
    return f"{k}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(k, 'th')}"


#: Explanations after a clause boundary that name option ``{k}`` (or ``{o}``, its ordinal):
#: never read as an option (docs/parsing.md, "Statement grammar"), so the reply parses.
EXPLANATIONS = (
    " because {k} would leave the base uncovered", ". Option {k} would include the hilum.",
    " - the {o} mask is too wide", ", since point {k} lies on aerated lung",
    " (not {k})", ", as the lesion spans {k} regions", "\n\nOption {k} misses the apex.",
    " because the {o} rib marks the lower edge",
)
#: Amendments after the list that add or hedge option ``{k}``: never ``ok``.
AMENDMENTS = (
    ", because {k} is also on the lesion", " - {k} is also involved", " (and {k})",
    "; option {k} fits too", ". Option {k} is also right.", " because the {o} one fits too",
    " (point {k} as well)", " (or {k})", " (maybe {k})", ". Or {k}.", " or {k}",
    " - or possibly {k}", ". Also {k}.",
)


def _other(draw, q: Question, order) -> int:
    others = [i for i in range(1, len(q.options) + 1) if i not in order]
    assume(others)
    return draw(st.sampled_from(others))


@st.composite
def explained_replies(draw) -> Case:
    """Clean replies whose explanation, after a clause boundary, names another option."""
    q = draw(questions())
    order = draw(stated_sets(q))
    k = _other(draw, q, order)
    body = draw(number_items(q, order, enclose=False))
    statement = draw(st.sampled_from(WRAPPERS[:3])).format(b=body)
    statement += draw(st.sampled_from(EXPLANATIONS)).format(k=k, o=_ordinal(k))
    return Case(q, _surround(draw, statement), frozenset(order))


@st.composite
def amended_replies(draw) -> Case:
    """Clean replies whose answer line adds or hedges an option outside the stated set."""
    q = draw(questions())
    order = draw(stated_sets(q))
    k = _other(draw, q, order)
    body = draw(number_items(q, order, enclose=False))
    statement = draw(st.sampled_from(WRAPPERS)).format(b=body)
    statement += draw(st.sampled_from(AMENDMENTS)).format(k=k, o=_ordinal(k))
    return Case(q, _surround(draw, statement), frozenset(order))


#: Later statements that change the answer (the last committing statement wins).
CORRECTIONS = ("On second look, the opacity reaches further, so the answer is {b}.",
               "Actually, the correct option is {b}.", "Wait, I choose {b} instead.",
               "Final answer: {b}")


@st.composite
def corrected_replies(draw) -> Case:
    """An ``Answer:`` line, then a later statement of another set: read as the later one."""
    q = draw(questions())
    first = draw(stated_sets(q))
    second = draw(stated_sets(q))
    assume(set(first) != set(second))
    raw = "Answer: " + draw(number_items(q, first, enclose=False))
    raw += "\n\n" + draw(st.sampled_from(CORRECTIONS)).format(
        b=", ".join(map(str, second)))
    return Case(q, raw, frozenset(second))


#: Decorations that may or may not be read; the numbers they name are part of the statement.
#: Each tail says whether ``k`` is stated: ``names``, ``measure`` (``k cm``: no number of an
#: option) or ``fraction`` (``n/k``, read as a fraction where a justification holds it, so
#: neither ``n`` nor ``k`` is stated there; as an answer it is a hedge and unparseable).
DUBIOUS_TAILS = (
    (" - {k}", "names"), (" (maybe {k})", "names"), (" or {k}", "names"), (" {k}", "names"),
    (" - the lesion spans {k} regions", "explain"), (" because {k} is off", "explain"),
    (" ({k} cm wide)", "measure"), (" (the {o} rib)", "explain"), (". {k}.", "names"),
    (" and the mask is {k} cm too wide", "measure"), ("/{k}", "fraction"), ("-{k}", "names"),
)


@st.composite
def any_replies(draw) -> Case:
    """Replies with any mix of decorations, read ones and dubious ones."""
    q = draw(questions())
    order = list(draw(stated_sets(q)))
    n_options = len(q.options)
    if draw(st.booleans()):  # numbers outside the options, or several for a single choice
        order.append(draw(st.integers(0, 7)))
    stated: set[int] = set()
    items = []
    for n in order:
        item = draw(st.sampled_from(NUMBER_FORMS)).format(n=n)
        choice = draw(st.integers(0, 5))
        tail = None
        if choice == 1 and 1 <= n <= n_options:
            item += draw(st.sampled_from(ECHO_FORMS)).format(t=_echo_text(q.options[n - 1]))
        elif choice == 2:
            item += draw(st.sampled_from((" ({})", " [{}]", " - {}", ": {}", " {}"))).format(
                draw(st.sampled_from(NOTES)))
        elif choice == 3:
            k = draw(st.integers(1, 6))
            template, tail = draw(st.sampled_from(DUBIOUS_TAILS))
            item += template.format(k=k, o=_ordinal(k))
            if tail == "names":
                stated.add(k)
        elif choice == 4:
            other = draw(st.integers(1, n_options))
            item += draw(st.sampled_from(ECHO_FORMS)).format(
                t=_echo_text(q.options[other - 1]))
            stated.add(other)
        if tail != "fraction":
            stated.add(n)
        items.append(item)
    body = items[0]
    for item in items[1:]:
        body += draw(st.sampled_from(SEPARATORS + (" ", " or ", " / ")))
        body += item
    statement = draw(st.sampled_from(WRAPPERS)).format(b=body)
    if draw(st.booleans()):
        k = draw(st.integers(1, 6))
        template = draw(st.sampled_from(AMENDMENTS + PLAIN_JUSTIFICATIONS))
        statement += template.format(k=k, o=_ordinal(k), m=draw(st.sampled_from(MEASUREMENTS)))
        if "{k}" in template or "{o}" in template:
            stated.add(k)
    return Case(q, _surround(draw, statement), frozenset(stated))


@CI
@given(clean_replies())
def test_clean_replies_parse_to_the_stated_set(case):
    parsed = _parse(case)
    assert parsed.status == OK, (case.raw, parsed.detail)
    assert set(parsed.answer) == case.stated, case.raw


@CI
@given(explained_replies())
def test_an_explanation_naming_another_option_is_not_read(case):
    parsed = _parse(case)
    assert parsed.status == OK, (case.raw, parsed.detail)
    assert set(parsed.answer) == case.stated, case.raw


@CI
@given(amended_replies())
def test_an_answer_line_adding_or_hedging_an_option_is_never_ok(case):
    parsed = _parse(case)
    assert parsed.status != OK, (case.raw, parsed.answer)


@CI
@given(corrected_replies())
def test_a_later_statement_changes_the_answer(case):
    parsed = _parse(case)
    assert parsed.status == OK, (case.raw, parsed.detail)
    assert set(parsed.answer) == case.stated, case.raw


@CI
@given(any_replies())
def test_a_reply_parses_to_its_whole_statement_or_not_at_all(case):
    parsed = _parse(case)
    if parsed.status == OK:
        assert set(parsed.answer) == case.stated, (case.raw, parsed.answer)
