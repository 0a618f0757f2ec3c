r"""Stage 03: the statements of a reply and the one that decides it.

See docs/parsing.md, "Statement grammar".

``answer_grammar`` reads one option list; this module finds where a reply states one and
which statement decides the reply:

* tier 2, markers and commitments: ``Answer:`` (at a line or sentence start, not quoted, not
  after "Wrong" or "Possible"), a box, an ``Answer`` heading, phrases ("the answer is",
  "I would select", "So:"), a sentence or clause that opens with a list and commits to it
  ("Option 2 is correct", "The 3rd mask best matches"), and the point questions' own verb
  ("the mask should be expanded toward the red point");
* tier 1, where a reply has no tier-2 statement: sentences that open with a list ended by
  punctuation ("Yes, there is ...", "The red and yellow points.");
* tier 0, where it has neither, on single-choice questions only: prose that names exactly one
  option after a verb of presence ("The lesion is seen in 2 zones").

The last statement of the strongest tier decides, unless what follows it retracts it, changes
it without a statement of its own ("Answer: 3. On second thought, 1."), adds an option
("Option 2 also applies."), or states another answer in a sentence; then the reply is read as
nothing, never in part.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from chexpercept.evaluation.answer_grammar import (
    ABSENT,
    CHANGE_OF_MIND_WORDS,
    CLOSERS,
    HEDGE,
    HEDGE_WORDS,
    MENTION,
    NUMBER,
    ORDINAL_MENTION,
    PUNCT_BOUNDARY,
    QUALIFIES,
    READ,
    TOO,
    TRAILING,
    UNREADABLE,
    ListReading,
    OptionForms,
    match_text,
    names_other_option,
    option_forms,
    read_item,
    read_list,
)

# --- markers ----------------------------------------------------------------------------

#: ``Answer:`` (also ``Final answer:``, ``Correct answer:``, ``Answers:``): a *strong* marker,
#: whose list must be read (an unreadable one decides the reply as unparseable).
_STRONG = re.compile(r"(?<![A-Za-z])(?:(?:final\s+|correct\s+)?answers?|答案|回答|antwort|"
                     r"respuesta|r[ée]ponse|risposta|resposta|ответ)\s*[:：]", re.IGNORECASE)
#: What may stand before ``Answer:`` on its line or in its sentence ("So the final answer:");
#: "Wrong answer:", "Possible answers:", "Please respond with Answer:" are no statements.
_STRONG_PREFIX = re.compile(
    r"[\s>*#•-]*(?:(?:so|thus|therefore|hence|overall|in\s+(?:summary|conclusion|short)|"
    r"to\s+conclude|my|our|the|final|correct|best|short|direct|one-word)(?![A-Za-z])"
    r"[\s,:]*)*", re.IGNORECASE)
#: A change of mind before ``Answer:`` ("On reflection, Answer: 1").
_CHANGE_PREFIX = re.compile(r"[\s>*#•-]*(?:(?:actually|on\s+(?:second|further|closer)\s+\w+|"
                            r"on\s+reflection|upon\s+reflection|wait|correction|so|hmm+|"
                            r"my|final|the|revised|corrected|updated|new)(?![A-Za-z])[\s,:]*)+",
                            re.IGNORECASE)
#: A line that is only ``Answer`` (a markdown heading ``### Answer`` once its marks are gone):
#: its list is the next non-empty line.
_ANSWER_HEADING = re.compile(r"(?im)^[ \t>]*(?:final\s+|my\s+)?answers?[ \t]*:?[ \t]*$")
#: Phrase markers: a statement only where an option list follows them.
_PHRASE = re.compile(
    r"(?<![A-Za-z])(?:"
    r"answers?\s+(?:is|are|would\s+be|should\s+be|will\s+be|must\s+be|here\s+is)"
    r"|(?:correct|right|best|appropriate|final|accurate|likely)\s+(?:option|choice|response|"
    r"selection|mask|match|fit)s?\s+(?:is|are|would\s+be|should\s+be|here\s+is)"
    r"|best\s+(?:matches|fits)\s+(?:is|are)"
    r"|(?:i|we)(?:\s+would|\s+will|'d|'ll|\s+therefore|\s+would\s+therefore|\s+now)?\s+"
    r"(?:choose|select|pick|go\s+with|opt\s+for|answer(?:\s+with)?|am\s+going\s+with|"
    r"'m\s+going\s+with)"
    r"|(?:i|we)'m\s+going\s+with"
    r"|my\s+(?:final\s+)?(?:choice|selection|pick)\s+(?:is|would\s+be)"
    r"|(?:so|thus|therefore|hence|in\s+short|in\s+summary|overall|verdict|conclusion)\s*(?=:)"
    r")(?![A-Za-z])\s*[:：]?\s*", re.IGNORECASE)
#: Before a phrase marker in its sentence: the phrase is someone else's, or a condition
#: ("You might think the answer is 2", "The obvious answer is 2", "If it isn't, the answer
#: would be 2").
_NOT_OWN = re.compile(
    r"\b(?:if|unless|otherwise|were\s+it|had\s+it|(?:might|would|could|may)\s+(?:think|say|"
    r"argue|suggest|seem|expect)|obvious|tempting|naive|at\s+first|initially|first\s+glance|"
    r"wrong|incorrect|not|isn'?t|never|some|many|others?|people|one\s+might|you\s+might|"
    r"expected|example|format|draft)\b", re.IGNORECASE)
#: After an option list at a sentence or clause start: the sentence commits to it.
_COMMIT_AFTER = re.compile(
    r"[\s,]*(?:(?:is|are|would\s+be|seems\s+to\s+be|appears\s+to\s+be)\s+(?P<also>also\s+)?"
    r"(?:the\s+)?(?:correct|right|best|most\s+(?:appropriate|accurate|likely|correct))"
    r"|(?:best|most\s+closely|most\s+accurately|correctly)\s+(?:matches|fits|reflects|applies|"
    r"describes|represents|corresponds|captures|shows)"
    r"|(?:shows|gives|provides|is|has)\s+the\s+best\s+(?:fit|match)"
    r"|applies\s+exactly"
    r"|(?:matches|fits)\s+best)(?![A-Za-z])", re.IGNORECASE)
#: After an option list: "needs expansion" / "need to be contracted" (for the point questions,
#: whose stem asks for that verb; see ``_question_verbs``).
_NEEDS = re.compile(
    r"[ \t]+(?:needs?|requires?)[ \t]+(?:to[ \t]+be[ \t]+)?(?P<verb>expan\w*|contract\w*)"
    r"(?P<also>)", re.IGNORECASE)
#: The revision verbs of the point questions (docs/qa_generation.md, "Question types"), as a
#: reply repeats them: "the mask should be expanded toward the red point".
_VERB_MARKER = re.compile(
    r"(?<![A-Za-z])(?P<verb>expan\w*|grow\w*|contract\w*|shrink\w*)[ \t]+(?:back[ \t]+)?"
    r"(?:toward|towards|away[ \t]+from|at|to)[ \t]+", re.IGNORECASE)
_VERB_STEMS = {"expan": "expan", "grow": "expan", "contra": "contra", "shrink": "contra"}
_NEGATION = re.compile(r"\b(?:not|no|never|neither|nor|without)\b|n't\b", re.IGNORECASE)
#: Words that judge an option instead of choosing it ("The 2nd mask is wrong").
_EVALUATIVE = re.compile(
    r"\b(?:wrong|incorrect|false|worst|least|rejected|ruled\s+out|unlikely|underestimat\w*|"
    r"overestimat\w*|too\s+(?:few|many|much|little|small|large|wide|narrow)|not\s+correct|"
    r"isn'?t\s+(?:correct|right))\b", re.IGNORECASE)
#: Words that describe a flaw of the option a sentence opens with ("The 2nd mask misses the
#: lateral consolidation"): that sentence does not choose it.
_FLAW = re.compile(r"\b(?:over-?expands?|under-?expands?|misses|unchanged|fails?|lacks?|"
                   r"too)\b", re.IGNORECASE)
#: A verb of presence right before an option text named in prose (tier 0).
_PRESENCE = re.compile(
    r"(?:is\s+(?:seen|present|located|found|visible)\s+in|involves?|involving|occupies|occupy|"
    r"occupying|covers?|covering|affects?|affecting|spans?|spanning|extends?\s+(?:over|into|"
    r"across)|is\s+in|are\s+in)\s+(?:about\s+|approximately\s+|roughly\s+|only\s+)?$",
    re.IGNORECASE)

# --- what may follow the deciding statement ----------------------------------------------

_CHANGE_WORDS = (CHANGE_OF_MIND_WORDS
                 + r"|on\s+(?:second|further|closer)\s+(?:look|thought|inspection|review|"
                 r"examination)|reconsider\w*|re-?evaluat\w*|re-?examin\w*|changing\s+my|"
                 r"after\s+all")
#: Words between two statements that conclude: the later one is the answer ("..., so the
#: answer is 3").
_CONCLUSION = re.compile(r"\b(?:so|thus|therefore|hence|overall|final(?:ly)?|in\s+(?:summary|"
                         r"conclusion|short)|to\s+conclude|which\s+means|meaning)\b",
                         re.IGNORECASE)
#: Words between two statements that mark a change of mind (the later one wins, even in one
#: sentence).
_CHANGE = re.compile(rf"\b(?:{_CHANGE_WORDS}|rather|instead|revis\w*)\b", re.IGNORECASE)
#: A change of mind after the deciding statement: with an option after it, the answer was
#: changed without a statement of its own ("Answer: 3. On second thought, 1.").
_CHANGE_AFTER = re.compile(rf"\b(?:{_CHANGE_WORDS}|drop|except|no,)(?![A-Za-z])", re.IGNORECASE)
#: A retraction after the last statement voids it (and so the reply).
_RETRACTION = re.compile(
    r"\b(?:no\s+longer\s+(?:sure|certain|confident)"
    r"|not\s+(?:\w+\s+)?(?:sure|certain|confident)|either\s+way"
    r"|(?:can'?t|cannot|can\s+not|unable\s+to|could\s+not|couldn'?t|not\s+able\s+to)\s+"
    r"(?:reliably\s+)?(?:decide|choose|resolve|tell|say\s+which|judge|assess|determine|"
    r"distinguish\s+between|pick\s+between|be\s+(?:sure|certain|confident))"
    r"|i\s+take\s+(?:that|it)\s+back|scratch\s+that|i\s+retract|disregard\s+(?:that|my)"
    r"|just\s+kidding|could\s+equally\s+be|equally\s+(?:likely|plausible|possible))",
    re.IGNORECASE)
#: A later sentence that adds an option needs a predicate of choosing with "also"/"too".
_ADDS = re.compile(r"\b(?:needs?\s+(?:expansion|contraction|to\s+be)|should\s+(?:also\s+)?be\s+"
                   r"(?:included|expanded|contracted|added|selected|chosen)|extends?\s+(?:to|"
                   r"into)|involv\w*)\b", re.IGNORECASE)
#: Where a sentence starts: the reply's start, a line start (after a bullet or quote mark),
#: or after a sentence end.
_SENTENCE_START = re.compile(r"(?:^|\n)[ \t]*(?:[-*•>][ \t]+)?|(?<=[.!?])[ \t]+", re.MULTILINE)
#: Where a clause starts inside a sentence (item-first commitments only).
_CLAUSE_START = re.compile(r"(?<=[,;:])[ \t]+(?:(?:but|and|while|whereas|yet)[ \t]+)?"
                           r"|\bbut[ \t]+", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")
#: A numbered line of a list ("1. The lesion ...", "2) ...").
_ENUMERATION = re.compile(r"\d+[.)][ \t]+\S")
#: A sentence that opens with a list and then turns against it ("..., but not by 1.5 times").
_CONTRAST = re.compile(r"[\s,;]*(?:but|however|although|though|yet|whereas)\b", re.IGNORECASE)
#: A line that numbers an option ("2. 1st mask", "(1) 3rd mask").
_NUMBERED_LINE = re.compile(r"(?m)^[ \t>*•-]*[(\[]?(\d+)[)\].:][ \t]*")


@dataclass(frozen=True)
class Statement:
    """One statement of a reply: where it is, how strong it is and what it states.

    Attributes:
        start: Position of the marker (or of the list, for item-first statements).
        end: Position after the list.
        tier: 2 for a marker or a commitment, 1 for a sentence that opens with an option
            list (read only where a reply has no tier-2 statement).
        reading: What the list states.
    """

    start: int
    end: int
    tier: int
    reading: ListReading


@dataclass(frozen=True)
class Decision:
    """What decides a reply: the indices read, or why none were.

    Attributes:
        indices: The options stated (None unless read).
        detail: Why nothing was read ('' when read).
        end: Position after the deciding statement's list (0 if none).
    """

    indices: tuple[int, ...] | None
    detail: str = ""
    end: int = 0


def read_statement(text: str, option_texts: Sequence[str] = (), *,
                   none_index: int | None = None, multi_select: bool = False,
                   question: str = "", cut_off: bool = False) -> Decision:
    """Decide a cleaned reply by its statements (docs/parsing.md, "Statement grammar").

    Args:
        text: The reply after chat-template tokens, reasoning and wrappers were removed.
        option_texts: Option labels as displayed, in order.
        none_index: 1-based "None" option of a multi-select question (its phrases select it).
        multi_select: Whether the question takes a set; prose that names one option (tier 0)
            is read only for single-choice questions.
        question: The question as asked ('' if unknown): a reply that repeats its verb
            ("should be expanded toward ...") states an answer with it.
        cut_off: The reply hit the token limit: prose and sentence openers that reach the
            end of the text, and a marker left without its list, are no answer.

    Returns:
        The deciding statement's indices (not range-checked), or None with the reason.
    """
    forms = option_forms(tuple(option_texts), none_index)
    if _renumbers(text, forms):
        return Decision(None, "the reply numbers the options in an order of its own")
    verbs = _question_verbs(question)
    item_first, tier1 = _sentence_statements(text, forms, verbs, cut_off=cut_off)
    tier2 = _dedupe(_strong_statements(text, forms) + _phrase_statements(text, forms)
                    + _verb_statements(text, forms, verbs) + item_first)
    tier1 = _dedupe(tier1)
    statements = tier2 or tier1
    if not statements:
        named = None if multi_select or cut_off else _only_option_named(text, forms)
        if named is not None:
            return Decision((named,), end=len(text))
        return Decision(None, "no answer statement")
    if not tier2 and len({_key(s) for s in statements}) > 1:
        return Decision(None, "sentences state different answers")
    last = statements[-1]
    problem = _after_problem(text, last, tier1 if tier2 else [], forms, cut_off)
    if problem:
        return Decision(None, problem)
    if len(statements) > 1 and _key(statements[-2]) != _key(last):
        prev = statements[-2]
        between = text[prev.end:last.start]
        if not _SENTENCE_END.search(between) and not _CHANGE.search(between):
            return Decision(None, "two statements of one sentence disagree")
        changed = _CHANGE.search(between) or _CONCLUSION.search(between)
        if prev.reading.kind == READ and not changed and not _STRONG.match(text, last.start) \
                and not _ANSWER_HEADING.match(text, last.start):
            return Decision(None, "two statements disagree without a change of mind")
    if last.reading.kind == HEDGE:
        return Decision(None, f"hedged answer {_quote(text, last)}")
    if last.reading.kind != READ:
        return Decision(None, f"cannot read answer from {_quote(text, last)}")
    return Decision(last.reading.indices, end=last.end)


def _key(statement: Statement) -> object:
    reading = statement.reading
    return frozenset(reading.indices) if reading.kind == READ else reading.kind


def _after_problem(text: str, last: Statement, weak: list[Statement], forms: OptionForms,
                   cut_off: bool) -> str:
    """Why what follows the deciding statement voids it ('' if nothing does)."""
    after = text[last.end:]
    chosen = last.reading.indices if last.reading.kind == READ else ()
    if _RETRACTION.search(after):
        return "the answer is retracted after it is stated"
    for m in _CHANGE_AFTER.finditer(after):
        if _names_any_option(after[m.end():], forms):
            return "the answer is changed after its statement, not in a statement"
    for sentence in _sentences(after):
        if TOO.search(sentence) and (QUALIFIES.search(sentence) or _ADDS.search(sentence)) \
                and names_other_option(sentence, chosen, forms):
            return "a later sentence adds an option"
    for s in weak:
        if s.start >= last.end and s.reading.kind == READ and _key(s) != _key(last):
            return "a later sentence states another answer"
    for m in _SENTENCE_START.finditer(after):
        text_form = match_text(after, m.end(), forms) if forms.patterns else None
        if text_form is not None and text_form[0] not in chosen and _WITH_VERB.search(
                after, m.end(), text_form[1]):
            return "a later sentence states another option"  # comparison options are clauses
    if last.tier < 2 and _EVALUATIVE.search(after):
        return "a later sentence judges the option named"
    if cut_off and (_STRONG.search(after) or _PHRASE.search(after)):
        return "a statement is cut off"
    return ""


def _sentences(text: str) -> list[str]:
    return [part for part in _SENTENCE_END.split(text) if part.strip()]


def _names_any_option(text: str, forms: OptionForms) -> bool:
    """Whether ``text`` names any option.

    By a number that is no decimal, fraction or measurement, an ordinal with an option noun,
    or an option text.
    """
    return names_other_option(text, (), forms)


def _renumbers(text: str, forms: OptionForms) -> bool:
    """Whether a line numbers an option with another number ("1. 3rd mask")."""
    if not forms.patterns:
        return False
    for m in _NUMBERED_LINE.finditer(text):
        found = match_text(text, m.end(), forms)
        if found is not None and found[0] != int(m.group(1)) and PUNCT_BOUNDARY.match(
                text, found[1]):
            return True
    return False


def _strong_statements(text: str, forms: OptionForms) -> list[Statement]:
    out = []
    for m in _STRONG.finditer(text):
        if _in_quotes(text, m.start()) or not _own_marker(_sentence_before(text, m.start())):
            continue  # "Wrong answer: 2", 'reply like "Answer: 1"'
        pos = m.end()
        line_end = text.find("\n", pos)
        line_end = len(text) if line_end < 0 else line_end
        if not text[pos:line_end].strip():  # "Answer:" alone: the next non-empty line
            pos = _next_line(text, line_end)
            if pos is None:
                out.append(Statement(m.start(), line_end, 2, ListReading(UNREADABLE)))
                continue
            if _STRONG.match(text, pos) or _ANSWER_HEADING.match(text, pos):
                continue  # "Answer:\nAnswer: 2" (a box or tag declared on its own line)
        reading = read_list(text, _skip_space(text, pos), forms)
        if reading.kind in (ABSENT, TRAILING):
            reading = ListReading(UNREADABLE, end=max(reading.end, pos))
        out.append(Statement(m.start(), max(reading.end, pos), 2, reading))
    for m in _ANSWER_HEADING.finditer(text):
        pos = _next_line(text, m.end())
        if pos is None:
            continue
        reading = read_list(text, pos, forms)
        if reading.kind != ABSENT:
            out.append(Statement(m.start(), reading.end, 2, reading))
    return out


_ENDS_THE = re.compile(r"\bthe\s*$", re.IGNORECASE)
_OTHER_ANSWER = re.compile(r"\b(?:possible|wrong|incorrect|false|draft|candidate|other)\b",
                           re.IGNORECASE)
_OPEN_SINGLE_QUOTE = re.compile(r"(?:^|\s)'[^']*$")
_CLAUSE_FLAW = re.compile(r"\b(?:except|but|apart\s+from|other\s+than|besides|among\s+the\s+"
                          r"rest|of\s+the\s+(?:others|rest|remaining)|second|next)\b", re.I)
_WITH_VERB = re.compile(r"\s(?:is|are)\s")


def _own_marker(prefix: str) -> bool:
    """Whether ``Answer:`` after ``prefix`` (its sentence so far) is the reply's own."""
    if _STRONG_PREFIX.fullmatch(prefix) or _CHANGE_PREFIX.fullmatch(prefix):
        return True
    return _ENDS_THE.search(prefix) is not None and not (
        _NOT_OWN.search(prefix) or _OTHER_ANSWER.search(prefix))


def _phrase_statements(text: str, forms: OptionForms) -> list[Statement]:
    out = []
    for m in _PHRASE.finditer(text):
        if _in_quotes(text, m.start()) or _NOT_OWN.search(_sentence_before(text, m.start())):
            continue
        reading = read_list(text, m.end(), forms)
        if reading.kind != ABSENT:
            out.append(Statement(m.start(), reading.end, 2, reading))
    return out


def _question_verbs(question: str) -> frozenset[str]:
    """Revision verbs the question asks about: ``expan`` and/or ``contra``."""
    low = question.lower()
    return frozenset(stem for stem, word in (("expan", "expanded toward"),
                                             ("contra", "contracted away"))
                     if word in low)


def _verb_statements(text: str, forms: OptionForms, verbs: frozenset[str]) -> list[Statement]:
    """Statements that repeat a point question's verb.

    "The mask should be expanded toward the red and yellow points" on the expansion question;
    not in a negated, conditional or attributed sentence; with "also" or "too" in the
    sentence it adds an option and is unreadable.
    """
    if not verbs:
        return []
    out = []
    for m in _VERB_MARKER.finditer(text):
        word = m.group("verb").lower()
        stem = next((v for k, v in _VERB_STEMS.items() if word.startswith(k)), None)
        if stem not in verbs:
            continue
        before = _sentence_before(text, m.start())
        if _NEGATION.search(before) or _NOT_OWN.search(before):
            continue
        reading = read_list(text, m.end(), forms)
        if reading.kind == ABSENT:
            continue
        if TOO.search(before + text[reading.end:_sentence_end(text, reading.end)]):
            reading = ListReading(UNREADABLE, end=reading.end)
        out.append(Statement(m.start(), reading.end, 2, reading))
    return out


def _sentence_statements(text: str, forms: OptionForms, verbs: frozenset[str],
                         *, cut_off: bool) -> tuple[list[Statement], list[Statement]]:
    """Item-first commitments and sentence-opening lists.

    Item-first commitments (tier 2) are looked for at sentence and clause starts;
    sentence-opening lists (tier 1) at sentence starts only.
    """
    echoes = _echo_lines(text, forms)
    strong, weak = [], []
    starts = {m.end(): True for m in _SENTENCE_START.finditer(text)}
    for m in _CLAUSE_START.finditer(text):
        if forms.start.match(text, m.end()):
            starts.setdefault(m.end(), False)
    for pos in sorted(starts):
        if pos >= len(text) or (text.rfind("\n", 0, pos) + 1) in echoes:
            continue
        reading = read_list(text, pos, forms)
        if reading.kind == ABSENT:
            continue
        commit = _COMMIT_AFTER.match(text, reading.end)
        if commit is None and verbs:
            need = _NEEDS.match(text, reading.end)
            commit = need if need is not None and any(
                need.group("verb").lower().startswith(v) for v in verbs) else None
        if commit is not None and reading.kind in (READ, TRAILING):
            rest = text[commit.end():_sentence_end(text, commit.end())]
            if commit.group("also") or TOO.search(rest) or _CLAUSE_FLAW.search(rest):
                reading = ListReading(UNREADABLE, end=commit.end())
            else:
                reading = ListReading(READ, reading.indices, reading.end, reading.boundary)
            strong.append(Statement(pos, commit.end(), 2, reading))
        elif starts[pos] and _opens_sentence(text, pos, reading, cut_off):
            weak.append(Statement(pos, reading.end, 1, reading))
    return strong, weak


def _opens_sentence(text: str, pos: int, reading: ListReading, cut_off: bool) -> bool:
    """Whether a list at a sentence start makes a tier-1 statement."""
    if reading.kind in (ABSENT, TRAILING):
        return False
    end = CLOSERS.match(text, reading.end).end()
    if cut_off and not text[end:].strip():
        return False  # "... The 2nd mask" cut off: the sentence never ended
    if reading.kind != READ:
        return True  # a hedge or an amended list: it still says something
    if reading.boundary in (":", "w"):
        return False  # "Red: no." is a label; "No lesion" no list
    span = text[pos:reading.end]
    if reading.boundary in ("-", "–", "—") and " " in span.strip() \
            and not span.strip()[:1].isdigit():
        return False  # "Red point - on normal lung" labels a walk-through
    if _ENUMERATION.match(text, pos) and "\n" in text.strip():
        return False  # "1. Lesion location: ..." is an enumeration mark, not an answer
    rest = text[end:_sentence_end(text, end)]
    return not (_CONTRAST.match(rest) or _EVALUATIVE.search(rest) or _FLAW.search(rest))


def _only_option_named(text: str, forms: OptionForms) -> int | None:
    """The one option a reply without statements names in prose, or None (tier 0).

    Only forms of two or more words or with a digit count (``2 zones``, ``4th mask``,
    ``Less than 1/3 of the right lung area``), each after a verb of presence ("is seen in",
    "involves", "occupies") or before a commitment ("shows the best fit"); the reply must
    name no other option, and no sentence that names it may be negated, hedged or judge it.
    """
    named: set[int] = set()
    rest = text
    for i, pattern in forms.patterns:
        for m in pattern.finditer(text):
            form = m.group().strip()
            if " " not in form and not any(c.isdigit() for c in form):
                continue
            rest = rest.replace(m.group(), " ")
            before = _sentence_before(text, m.start())
            after = text[m.end():_sentence_end(text, m.end())]
            sentence = before + " " + after
            if _NEGATION.search(sentence) or HEDGE_WORDS.search(sentence) \
                    or _EVALUATIVE.search(sentence) or _FLAW.search(sentence) \
                    or _NOT_OWN.search(sentence):
                return None
            if not (_PRESENCE.search(before) or _COMMIT_AFTER.match(text, m.end())):
                return None
            named.add(i)
    if len(named) != 1 or any(int(m.group(1)) not in named for m in MENTION.finditer(rest)) \
            or any(int(m.group(1)) not in named for m in ORDINAL_MENTION.finditer(rest)):
        return None  # "The mask covers 3 zones and I think 2 is close"
    return next(iter(named))


def _echo_lines(text: str, forms: OptionForms) -> set[int]:
    """Start positions of lines that echo the option list (``(1) Yes`` / ``2. No`` lines).

    A line counts when it is a number followed by that option's own text and nothing else,
    and the reply holds two or more such lines (the options repeated).
    """
    starts: set[int] = set()
    pos = 0
    for line in text.split("\n"):
        body = line.strip().lstrip("-*•> ")
        number = NUMBER.match(body) if body else None
        item = read_item(body, 0, forms) if number else None
        if item is not None and item.kind == READ and item.end != number.end() \
                and not body[item.end:].strip(" ."):
            starts.add(pos)
        pos += len(line) + 1
    return starts if len(starts) >= 2 else set()


def _dedupe(statements: list[Statement]) -> list[Statement]:
    """Statements in text order, one per list.

    A marker and an item-first reading of the same list are one statement; the one that
    starts first is kept, with the reading that is not ``READ`` if either is not.
    """
    out: list[Statement] = []
    for s in sorted(statements, key=lambda s: (s.start, -s.end)):
        if out and s.start < out[-1].end:
            if s.end > out[-1].end and s.reading.kind != READ:
                out[-1] = Statement(out[-1].start, s.end, out[-1].tier, s.reading)
            continue
        out.append(s)
    return out


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


def _next_line(text: str, pos: int) -> int | None:
    """Start of the first non-blank line after ``pos`` (its first non-space), or None."""
    while pos < len(text):
        nl = text.find("\n", pos)
        start = pos + 1 if text[pos:pos + 1] == "\n" else pos
        if nl < 0:
            nl = len(text)
        if text[start:nl].strip():
            return _skip_space(text, start)
        if nl >= len(text):
            break
        pos = nl + 1
    return None


def _in_quotes(text: str, pos: int) -> bool:
    """Whether ``pos`` lies inside a pair of quotes on its line (a quoted phrase)."""
    start = text.rfind("\n", 0, pos) + 1
    before = text[start:pos]
    return (before.count('"') % 2 == 1) or before.count("“") > before.count("”") \
        or _OPEN_SINGLE_QUOTE.search(before) is not None


def _sentence_before(text: str, pos: int) -> str:
    """The text of ``pos``'s sentence before ``pos``."""
    start = max(text.rfind("\n", 0, pos), *(text.rfind(c + " ", 0, pos) for c in ".!?"))
    return text[start + 1:pos]


def _sentence_end(text: str, pos: int) -> int:
    m = _SENTENCE_END.search(text, pos)
    return m.start() if m else len(text)


def _quote(text: str, statement: Statement) -> str:
    return repr(text[statement.start:max(statement.end, statement.start + 1)][:80])
