r"""Stage 03: the answer-statement grammar (docs/parsing.md, "Statement grammar").

A reply commits to an answer in *statements*. A statement is a marker (``Answer:``,
"the answer is", "the correct option is", "I would select", a box, ...) followed by an *option
list*, or, at the start of a sentence, an option list followed by a commitment ("Option 2 is
correct", "The 3rd mask best matches ..."), or, where a reply has neither, a sentence that
opens with an option list and a clause boundary ("Yes, there is ...", "The red and yellow
points."). The option list is read whole or not at all; it ends at a clause boundary (a
sentence end, a newline, a comma, colon, semicolon, dash or bracket that is not followed by
another option, or a connective such as ``because``, ``since``, ``as``, ``which``). What
follows the boundary is explanation and is never read as an option.

:func:`read_statement` chooses the statement that decides a reply: the last committing
statement of the strongest tier, voided by a later retraction ("I can't decide"), and
refused when two statements of one sentence disagree without a change of mind between them.
The caller (``parsing.parse_answer``) has already removed chat-template tokens, reasoning and
wrappers, and range-checks what this module returns.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

# Reading kinds of an option list (``ListReading.kind``).
#: The list was read: ``indices`` hold the options it states.
READ = "read"
#: No option list starts here (the marker is no statement).
ABSENT = "absent"
#: The list hedges (``2 or 3``, ``either``, ``between 2 and 3``, ``2/3``, ``2 (maybe 3)``).
HEDGE = "hedge"
#: The list contradicts itself (``1 - No`` on a yes/no question) or adds options after its end
#: (``1. Also 3``): part of the answer could not be read, so none of it is.
UNREADABLE = "unreadable"

_WORD_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6,
                  "seventh": 7, "eighth": 8, "ninth": 9}
_WORD_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8}
_ORDINAL = (r"(?:(?P<ord>\d+)(?:st|nd|rd|th)|(?P<word>"
            + "|".join(_WORD_ORDINALS) + r"))")
#: A word ordinal names an option only with "the" before it or a noun after it ("the second",
#: "second mask"): "First, ..." opens a sentence.
#: Nouns that may follow an ordinal or precede a number in an option item.
_ITEM_NOUNS = r"(?:options?|choices?|masks?|points?|answers?|ones?|candidates?)"
#: An option number: ``2``, ``(2)``, ``[2]``, ``option 2``, ``mask #2``, ``2)``; not a
#: decimal, fraction, percentage, ordinal or measurement.
_NUMBER = re.compile(
    r"(?:(?:the\s+)?(?:options?|choices?|masks?|points?|numbers?|no\.)\s*)?(?:#\s*)?"
    r"(?:\(\s*(?P<p>\d+)\s*\)|\[\s*(?P<b>\d+)\s*\]"
    r"|(?P<n>\d+)(?![\d/%]|\.\d|st\b|nd\b|rd\b|th\b"
    r"|\s*(?:mm|cm|°|px|pixels?|degrees?|zones?|ribs?)(?![A-Za-z]))(?P<close>[)\]])?)",
    re.IGNORECASE)
_ORDINAL_ITEM = re.compile(
    rf"(?P<the>the\s+)?{_ORDINAL}(?P<noun>\s+{_ITEM_NOUNS}(?![A-Za-z]))?(?![A-Za-z0-9])",
    re.IGNORECASE)
#: List separators between items.
_SEPARATOR = re.compile(r"[ \t]*(?:,[ \t]*(?:and[ \t]+|&[ \t]*)?|;[ \t]*(?:and[ \t]+)?|&[ \t]*|"
                        r"\band[ \t]+|[ \t]+as[ \t]+well[ \t]+as[ \t]+|[ \t]+plus[ \t]+)",
                        re.IGNORECASE)
#: What between two items makes the list a hedge (``2 or 3``, ``2/3``, ``2-3``, ``2 to 3``).
_HEDGE_SEPARATOR = re.compile(
    r"[ \t]*(?:/|\bor\b|\band/or\b|\bnor\b|\bto\b|\bthrough\b|\bvs\.?|\bversus\b)[ \t]*"
    r"|[ \t]*[-–—][ \t]*(?=\(?\[?(?:options?\s*)?\d)", re.IGNORECASE)
#: Words before a list that make it a hedge (``either 1 or 2``, ``between 2 and 3``).
_HEDGE_LEAD = re.compile(
    r"(?:either|between|maybe|perhaps|possibly|probably\s+either|not\s+sure|unsure|"
    r"somewhere\s+between)(?![A-Za-z])\s*:?\s*", re.IGNORECASE)
#: Words after a list's boundary that continue it as a hedge or an addition
#: (``2. Or 3``, ``2 - or possibly 3``, ``1 (red). Also 3``); an option must follow.
_AMEND_LEAD = re.compile(
    r"(?:or|nor|maybe|perhaps|possibly|either|and|also|plus|as\s+well\s+as|along\s+with|"
    r"together\s+with|alternatively)(?![A-Za-z])[\s,]*(?:(?:possibly|maybe|perhaps|also|even|"
    r"option|options|point|points|mask)\s+)*", re.IGNORECASE)
#: A note after an item that is itself a hedge or an addition (``2 (or 3)``, ``1 (maybe)``).
_NOTE_HEDGE = re.compile(
    r"\s*(?:or|nor|maybe|perhaps|possibly|either|and|also|plus|alternatively|unsure|"
    r"uncertain)(?![A-Za-z])", re.IGNORECASE)
_TOO = re.compile(r"\b(?:too|as\s+well|also)\b", re.IGNORECASE)
#: Words that open a justification after an item (a clause boundary).
_CONNECTIVE = re.compile(
    r"\s*,?\s*(?:because|since|as|which|who|due|given|so|that|with|where|while|whereas|but|"
    r"rather|instead|not|is|are|was|were|would|should|could|seems?|appears?|best|most|"
    r"indicating|indicates|suggesting|suggests|showing|shows|meaning|means|based|considering|"
    r"for|here|in|on|at|from|covers?|covering|involves?|involving|matches|fits|reflects|"
    r"needs?|requires?|lies?|sits?|"
    r"represents|describes|corresponds|applies|accurately|correctly|clearly|only|then|"
    r"though|although|however|therefore|thus|hence)(?![A-Za-z])", re.IGNORECASE)
#: Punctuation that ends an option list when no option follows it.
_PUNCT_BOUNDARY = re.compile(r"\s*(?:$|\n|[.!?](?:\s|$)|[.!?]$|[,;:]|\s[-–—]|[-–—]\s|[–—]|"
                             r"[(\[]|\.{3}|…)")
#: Whitespace and closing quotes/emphasis that may stand between an item and its boundary.
_CLOSERS = re.compile(r"[\"'”’]*")

_QUOTES = "\"'“‘"


@dataclass(frozen=True)
class ListReading:
    """An option list read at one position.

    Attributes:
        kind: ``READ``, ``ABSENT``, ``HEDGE`` or ``UNREADABLE``.
        indices: The stated 1-based option numbers in the order written (``READ`` only;
            not yet range-checked).
        end: Position after the list (its last item, echo or note).
    """

    kind: str
    indices: tuple[int, ...] = ()
    end: int = 0


@dataclass(frozen=True)
class Statement:
    """One statement of a reply: where it is, how strong it is and what it states.

    Attributes:
        start: Position of the marker (or of the list, for item-first statements).
        end: Position after the list.
        tier: 2 for a marker or an item-first commitment, 1 for a sentence that opens with
            an option list (read only where a reply has no tier-2 statement).
        reading: What the list states.
    """

    start: int
    end: int
    tier: int
    reading: ListReading


@dataclass(frozen=True)
class OptionForms:
    """The written forms of a question's options (docs/parsing.md, "Statement grammar").

    Attributes:
        patterns: (1-based index, pattern) of every form of every option text, longest
            first; each pattern matches at a position, with an optional article, brackets or
            quotes, and ends at a word end.
        num_options: How many options the question has (0 when the texts are unknown).
        start: Matches wherever an option list may start (a superset: a position it does not
            match starts no list), so most positions are rejected with one match.
        any_text: Matches wherever one of ``patterns`` may match (a superset, likewise).
    """

    patterns: tuple[tuple[int, re.Pattern[str]], ...]
    num_options: int
    start: re.Pattern[str]
    any_text: re.Pattern[str] | None


_NONE_PHRASES = ("none", "none of the above", "none of these", "none of them",
                 "none of the options", "none of the points", "no point", "no points",
                 "none of the listed options")
_PARENTHETICAL_TAIL = re.compile(r"\s*\([^()]*\)\s*\.?$")
_WHITESPACE_RUN = re.compile(r"\s+")
_ARTICLE = re.compile(r"^(?:the|a|an)\s+")


def norm(text: str) -> str:
    """``text`` lower-cased, single-spaced, without surrounding quotes and full stops."""
    text = _WHITESPACE_RUN.sub(" ", text.strip().lower())
    return text.strip(" .\"'")


def _form_pattern(form: str, plural_head: str | None = None) -> re.Pattern[str]:
    """A form, bare, in brackets or in quotes, after an optional article, at a word end."""
    body = r"\s+".join(re.escape(word) for word in form.split(" "))
    art = r"(?:(?:the|a|an)\s+)?"
    if plural_head:  # "red" also as "red point(s)" / "red one(s)" in a list
        body += rf"(?:\s+(?:{re.escape(plural_head)}s?|ones?))?"
    return re.compile(
        rf"(?:(?:the|a|an)\s+)?(?:\(\s*{art}{body}\s*\.?\s*\)|\[\s*{art}{body}\s*\.?\s*\]"
        rf"|[\"'“‘]{art}{body}\.?[\"'”’]|{body})(?![A-Za-z0-9])", re.IGNORECASE)


@functools.lru_cache(maxsize=1024)
def option_forms(option_texts: tuple[str, ...], none_index: int | None) -> OptionForms:
    """The written forms of each option.

    Its text, its text without a trailing parenthetical, its
    distinguishing word where every other option shares the same last word (``red`` of
    ``red point``), and the "None" phrases of a multi-select question (``none_index``).

    A form that two options share is dropped (the full text always wins).
    """
    full = [_ARTICLE.sub("", norm(text)) for text in option_texts]
    forms: dict[str, int] = {}
    for i, text in enumerate(full, start=1):
        if text:
            forms.setdefault(text, i)
    extra: dict[str, set[int]] = {}
    for i, text in enumerate(full, start=1):
        short = _ARTICLE.sub("", norm(_PARENTHETICAL_TAIL.sub("", text)))
        if short and short != text:
            extra.setdefault(short, set()).add(i)
    if none_index is not None:
        for phrase in _NONE_PHRASES:
            extra.setdefault(phrase, set()).add(none_index)
    heads: dict[int, str] = {}
    # (a digit is never a short form: "2" of "2 zones" would read as option number 2)
    named = [(i, t.split(" ")) for i, t in enumerate(full, start=1)
             if len(t.split(" ")) == 2 and i != none_index
             and not any(c.isdigit() for c in t.split(" ")[0])]
    if len(named) >= 2 and len({words[-1] for _, words in named}) == 1:
        for i, words in named:
            extra.setdefault(words[0], set()).add(i)
            heads[i] = words[-1]
    for form, indices in extra.items():
        if len(indices) == 1 and form not in forms:
            forms[form] = next(iter(indices))
    ordered = sorted(forms.items(), key=lambda item: -len(item[0]))
    patterns = tuple((i, _form_pattern(form, heads.get(i) if form in
                                       {w[0] for _, w in named} else None))
                     for form, i in ordered)
    firsts = sorted({re.escape(form.split(" ")[0]) for form in forms}, key=len, reverse=True)
    start = re.compile(
        r"[ \t\"'“‘]*(?:(?:the|a|an)\s+)?(?:[\d(\[{#\"'“‘]|options?|choices?|masks?|points?|"
        r"numbers?|no\.|" + "|".join(_WORD_ORDINALS) + r"|either|between|maybe|perhaps|"
        r"possibly|probably|not\s+sure|unsure|somewhere"
        + "".join("|" + f for f in firsts) + ")", re.IGNORECASE)
    any_text = re.compile(r"(?:(?:the|a|an)\s+)?[(\[\"'“‘]?\s*(?:(?:the|a|an)\s+)?(?:"
                          + "|".join(firsts) + ")", re.IGNORECASE) if firsts else None
    return OptionForms(patterns, len(option_texts), start, any_text)


def _match_text(s: str, pos: int, forms: OptionForms) -> tuple[int, int] | None:
    """(index, end) of the longest option text form at ``pos``, or None."""
    if forms.any_text is None or forms.any_text.match(s, pos) is None:
        return None
    best: tuple[int, int] | None = None
    for i, pattern in forms.patterns:
        m = pattern.match(s, pos)
        if m and (best is None or m.end() > best[1]):
            best = (i, m.end())
    return best


def _at_item_end(s: str, pos: int) -> bool:
    """Whether an item may end at ``pos`` (end, punctuation, separator or connective)."""
    return (_PUNCT_BOUNDARY.match(s, pos) is not None or _CONNECTIVE.match(s, pos) is not None
            or _SEPARATOR.match(s, pos) is not None or _HEDGE_SEPARATOR.match(s, pos) is not None
            or s[pos:pos + 1] in ("", ")", "]", *_QUOTES, "”", "’"))


def _listy_end(s: str, pos: int) -> bool:
    """Whether a list may go on or end at ``pos`` (punctuation, separator, bracket, end)."""
    return (_PUNCT_BOUNDARY.match(s, pos) is not None or _SEPARATOR.match(s, pos) is not None
            or _HEDGE_SEPARATOR.match(s, pos) is not None
            or re.compile(r"[ \t]+(?:because|since|as|due|given)\b").match(s, pos) is not None
            or s[pos:pos + 1] in ("", ")", "]", *_QUOTES, "”", "’"))


@dataclass(frozen=True)
class _Item:
    index: int
    end: int
    kind: str = READ  # UNREADABLE when a number is written with another option's text
    bracketed: bool = False


def _read_item(s: str, pos: int, forms: OptionForms, *, listed: bool = False) -> _Item | None:
    """One option item at ``pos``: a number (with its own text echoed), an ordinal, a text.

    With ``listed`` (an item after a list separator) an option text must end the clause or
    the list there: in ``1; the yellow point lies on normal lung`` the text is the subject of
    an explanation, not a second item.
    """
    while pos < len(s) and s[pos] in " \t" + _QUOTES:
        pos += 1
    text = _match_text(s, pos, forms) if forms.patterns else None
    number = _NUMBER.match(s, pos)
    ordinal = _ORDINAL_ITEM.match(s, pos)
    candidates: list[_Item] = []
    if text is not None and (_listy_end(s, text[1]) if listed else _at_item_end(s, text[1])):
        candidates.append(_Item(text[0], text[1]))
    if number is not None:
        value = int(number.group("p") or number.group("b") or number.group("n"))
        bracketed = number.group("n") is None or number.group("close") is not None
        candidates.append(_echo(s, _Item(value, number.end(), bracketed=bracketed), forms))
    if ordinal is not None and (ordinal.group("word") is None or ordinal.group("the")
                                or ordinal.group("noun")) and _at_item_end(s, ordinal.end()):
        value = int(ordinal.group("ord")) if ordinal.group("ord") else _WORD_ORDINALS[
            ordinal.group("word").lower()]
        candidates.append(_echo(s, _Item(value, ordinal.end()), forms))
    if not candidates:
        return None
    return max(candidates, key=lambda item: item.end)


_ECHO_LEAD = re.compile(r"[ \t]*(?:[:\-–—.=][ \t]*)?")


def _echo(s: str, item: _Item, forms: OptionForms) -> _Item:
    """``item`` extended over its own option text written after it (``(2) No``, ``2: No``).

    Another option's text there makes the item ``UNREADABLE`` (``1 - No`` on a yes/no
    question). The echo counts only where an item may end after it, so ``1. No other region
    is involved`` is option 1 and an explanation.
    """
    lead = _ECHO_LEAD.match(s, item.end)
    at = lead.end() if lead else item.end
    if forms.patterns:
        text = _match_text(s, at, forms)
        # after a full stop or a dash the echo must end its clause: "1. No." echoes,
        # "1. No other region ..." and "2 - the 3rd mask is too wide" explain
        strict = lead is not None and any(c in lead.group() for c in ".-–—")
        if text is not None and (_listy_end(s, text[1]) if strict
                                 else _at_item_end(s, text[1])):
            if text[0] == item.index:
                return _Item(item.index, text[1], bracketed=item.bracketed)
            return _Item(item.index, text[1], UNREADABLE)
    elif item.bracketed and lead is not None:
        # no option texts known: a label after a closed bracket is an echo (``(2) No``)
        m = re.compile(r"[A-Za-z][A-Za-z ]{0,40}?(?=$|[\n.,;:!?)(\]]|\s[-–—]\s)").match(s, at)
        if m:
            return _Item(item.index, m.end(), bracketed=True)
    return item


_NOTE = re.compile(r"[ \t]*(?:\((?P<r>(?:[^()]|\([^()]*\))*)\)|\[(?P<s>[^\[\]]*)\])")


def _note(s: str, pos: int, chosen: Sequence[int], forms: OptionForms) -> tuple[int, str]:
    """(end, kind) of a bracketed note after an item at ``pos`` (``pos`` and READ if none).

    A note is explanation, except one that hedges (``2 (or 3)``, ``1 (maybe)``) or adds an
    option (``1 (and 3)``, ``1 (point 3 as well)``), which makes the list unreadable.
    """
    m = _NOTE.match(s, pos)
    if m is None:
        return pos, READ
    content = m.group("r") if m.group("r") is not None else m.group("s")
    if _NOTE_HEDGE.match(content):
        return m.end(), HEDGE
    lead = content.lstrip()
    item = _read_item(lead, 0, forms)
    if item is not None and item.index not in chosen and not lead.lower().startswith("not"):
        return m.end(), UNREADABLE  # "1 (3)", "1 (yellow point), 2"
    if _TOO.search(content) and _mentions_other(content, chosen, forms):
        return m.end(), UNREADABLE
    return m.end(), READ


_ORDINAL_MENTION = re.compile(r"(?<![\w./])(\d+)(?:st|nd|rd|th)\s+(?:ones?|options?|masks?|"
                              r"choices?|points?)\b", re.IGNORECASE)
_MENTION = re.compile(r"(?<![\w./])(\d+)(?![\w/%]|\.\d)")


def _mentions_other(text: str, chosen: Sequence[int], forms: OptionForms) -> bool:
    """Whether ``text`` names an option number outside ``chosen`` (for addition notes)."""
    return any(int(m.group(1)) not in chosen for m in _MENTION.finditer(text))


def read_list(s: str, pos: int, forms: OptionForms) -> ListReading:
    """Read the option list that starts at ``pos`` (docs/parsing.md, "Statement grammar").

    Returns:
        ``READ`` with the indices when the list is read whole and ends at a clause boundary;
        ``ABSENT`` when no option item starts at ``pos``; ``HEDGE`` or ``UNREADABLE``
        otherwise. Never a part of a list.
    """
    if forms.start.match(s, pos) is None:
        return ListReading(ABSENT, end=pos)
    enclosed = _enclosed(s, pos, forms)
    if enclosed is not None:
        return enclosed
    lead = _HEDGE_LEAD.match(s, pos)
    if lead is not None and _read_item(s, lead.end(), forms) is not None:
        return ListReading(HEDGE, end=lead.end())
    indices: list[int] = []
    listed = False
    while True:
        item = _read_item(s, pos, forms, listed=listed)
        if item is None:
            if not indices:
                return ListReading(ABSENT, end=pos)
            break
        indices.append(item.index)
        if item.kind != READ:
            return ListReading(item.kind, end=item.end)
        pos = item.end
        while True:  # each bracketed note of this item ("1 (red) (on the opacity)")
            after_note, note_kind = _note(s, pos, indices, forms)
            if note_kind != READ:
                return ListReading(note_kind, end=after_note)
            if after_note == pos:
                break
            pos = after_note
        hedge = _HEDGE_SEPARATOR.match(s, pos)
        if hedge is not None and _read_item(s, hedge.end(), forms) is not None:
            return ListReading(HEDGE, end=hedge.end())
        sep = _SEPARATOR.match(s, pos)
        if sep is not None and _read_item(s, sep.end(), forms, listed=True) is not None:
            pos = sep.end()
            listed = True
            continue
        break
    return _after_list(s, pos, tuple(indices), forms)


_OPENERS = {"[": "]", "(": ")", "{": "}"}


def _enclosed(s: str, pos: int, forms: OptionForms) -> ListReading | None:
    """A whole list in brackets (``[1, 3]``, ``(1, 3)``), read inside; None if there is none."""
    close = _OPENERS.get(s[pos:pos + 1])
    if close is None:
        return None
    end = s.find(close, pos + 1)
    newline = s.find("\n", pos + 1)
    if end < 0 or (0 <= newline < end) or any(c in s[pos + 1:end] for c in "([{"):
        return None
    inner = s[pos + 1:end]
    reading = read_list(inner, 0, forms)
    if reading.kind != READ or inner[reading.end:].strip(" .") or (
            len(reading.indices) < 2 and _NUMBER.match(s, pos)):
        return None  # one number in brackets is an item ("(2) No"), read by the caller
    return _after_list(s, end + 1, reading.indices, forms)


#: Predicates that, with "also"/"too"/"as well", make a clause add an option to the answer
#: (``1, because 3 is also on the lesion``; ``1; the yellow point lies on it too``).
_QUALIFIES = re.compile(
    r"\b(?:on\s+(?:it|them|the\s+(?:lesion|opacity|finding|abnormality|consolidation|effusion|"
    r"edema|oedema|atelectasis|pneumonia|heart))|correct|right|valid|applies|apply|fits|"
    r"qualif\w*|involved|included|needed|required|affected)\b", re.IGNORECASE)
#: In the clause after a list: a separator and a bare number, as a list item would be.
_LIST_GOES_ON = re.compile(
    r"(?:[,;&]|\band\b)[ \t]*(?:options?[ \t]*)?[(\[]?\d+[)\]]?(?=[ \t]*(?:$|[,;.)\]([]|[ \t]-|"
    r"[ \t]and\b|[ \t]*[:\-–—][ \t]*[A-Za-z]))", re.IGNORECASE)
_BRACKETED_TOO = re.compile(r"[(\[][^)\]]*\b(?:too|as\s+well|also)\b", re.IGNORECASE)
#: A hedge on an option number in the clause after a list (not after a sentence end).
_CLAUSE_HEDGE = re.compile(
    r"\b(?:or|maybe|perhaps|possibly|either)[ \t]+(?:(?:possibly|maybe|even|also|option|point|"
    r"mask)s?[ \t]+)*[(\[]?\d", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[.!?](?:\s|$)|\n")


def _after_list(s: str, pos: int, indices: tuple[int, ...], forms: OptionForms) -> ListReading:
    """The reading of a list of ``indices`` that ended at ``pos``.

    What follows must be a clause boundary, and the clause after it must not amend the list
    (add or hedge an option, or go on as a list).
    """
    end = pos
    pos = _CLOSERS.match(s, pos).end()
    boundary = _PUNCT_BOUNDARY.match(s, pos)
    if boundary is None:
        if _CONNECTIVE.match(s, pos) is None and pos < len(s):
            return ListReading(UNREADABLE, end=end)
        after = pos
    else:
        after = boundary.end()
        while after < len(s) and s[after] in " \t*\"'":
            after += 1
        amend = _AMEND_LEAD.match(s, after)
        if amend is not None and amend.end() > after:
            item = _read_item(s, amend.end(), forms)
            if item is not None and item.index not in indices:
                return ListReading(UNREADABLE, end=end)  # "2. Or 3", "1 (red). Also 3"
        text = _match_text(s, after, forms) if forms.patterns else None
        if text is not None and text[0] not in indices and (
                text[1] >= len(s) or _PUNCT_BOUNDARY.match(s, text[1])
                or (" " not in s[after:text[1]].strip() and _at_item_end(s, text[1]))):
            return ListReading(UNREADABLE, end=end)  # "2. Yes." / "1 - No because ..."
        again = read_list(s, after, forms) if s[after:after + 1].strip() else None
        if again is not None and again.kind == READ and set(again.indices) - set(indices) \
                and _PUNCT_BOUNDARY.match(s, _CLOSERS.match(s, again.end).end()):
            return ListReading(UNREADABLE, end=end)  # "Answer: 2. 3." states another list
    if boundary is not None and "\n" in boundary.group():
        return ListReading(READ, indices, end)  # the next line is a sentence of its own
    clause_end = _CLAUSE_END.search(s, after)
    clause = s[after:clause_end.start() if clause_end else len(s)]
    sentence_end = boundary is not None and boundary.group().strip()[:1] in (".", "!", "?")
    echoed = _match_text(s, after, forms) if forms.patterns and not sentence_end else None
    if echoed is not None and re.match(r"[ \t]+[(\[]?\d", s[echoed[1]:]):
        return ListReading(UNREADABLE, end=end)  # "1 - Yes 0"
    if not sentence_end and _CLAUSE_HEDGE.search(clause):
        return ListReading(HEDGE, end=end)  # "1, 0/1 (or 2)", "2 - or possibly 3"
    if not sentence_end and _LIST_GOES_ON.search(clause):
        return ListReading(UNREADABLE, end=end)  # "1 - dense, 0": the list may go on
    for m in _MENTION.finditer("" if sentence_end else clause):  # "2 - No 2 - Yes"
        lead = _ECHO_LEAD.match(clause, m.end())
        text = _match_text(clause, lead.end(), forms) if forms.patterns else None
        if text is not None and text[0] not in indices and lead.end() > m.end():
            return ListReading(UNREADABLE, end=end)
    if _TOO.search(clause) and (_QUALIFIES.search(clause) or _BRACKETED_TOO.search(clause)) \
            and (boundary is None or _names_other(clause, indices, forms)):
        return ListReading(UNREADABLE, end=end)  # "1; option 2 fits too": an addition
    return ListReading(READ, indices, end)


def _names_other(text: str, chosen: Sequence[int], forms: OptionForms) -> bool:
    """Whether ``text`` names an option outside ``chosen``.

    By a number that is no decimal, fraction or measurement, an ordinal with an option noun,
    or one of its text forms.
    """
    if _mentions_other(text, chosen, forms):
        return True
    for m in _ORDINAL_MENTION.finditer(text):
        if int(m.group(1)) not in chosen:
            return True
    for i, pattern in forms.patterns:
        if i not in chosen and pattern.search(text):
            return True
    return False


# --- statements ---------------------------------------------------------------------------

#: ``Answer:`` (also ``Final answer:``, ``Answers:``), not after a letter: a *strong* marker,
#: whose list must be read (an unreadable one decides the reply as unparseable).
_STRONG = re.compile(r"(?<![A-Za-z])(?:final\s+|correct\s+)?answers?\s*[:：]", re.IGNORECASE)
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
    r")(?![A-Za-z])\s*[:：]?\s*", re.IGNORECASE)
#: After an option list at a sentence start: the sentence commits to it (item-first form).
_COMMIT_AFTER = re.compile(
    r"[\s,]*(?:(?:is|are|would\s+be|seems\s+to\s+be|appears\s+to\s+be)\s+(?P<also>also\s+)?"
    r"(?:the\s+)?(?:correct|right|best|most\s+(?:appropriate|accurate|likely|correct))"
    r"|(?:best|most\s+closely|most\s+accurately|correctly)\s+(?:matches|fits|reflects|applies|"
    r"describes|represents|corresponds|captures|shows)"
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


def _question_verbs(question: str) -> frozenset[str]:
    """Revision verbs the question asks about: ``expan`` and/or ``contra``."""
    low = question.lower()
    return frozenset(stem for stem, word in (("expan", "expanded toward"),
                                             ("contra", "contracted away"))
                     if word in low)


def _verb_statements(text: str, forms: OptionForms, verbs: frozenset[str]) -> list[Statement]:
    """Statements that repeat a point question's verb.

    "The mask should be expanded toward the red and yellow points" on the expansion question;
    not in a negated or conditional sentence.
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
        if _NEGATION.search(before) or _CONDITIONAL.search(before):
            continue
        reading = read_list(text, m.end(), forms)
        if reading.kind != ABSENT:
            out.append(Statement(m.start(), reading.end, 2, reading))
    return out


def _only_option_named(text: str, forms: OptionForms) -> int | None:
    """The one option a reply without statements names in prose, or None.

    Only forms of two or more words or with a digit count (``2 zones``, ``4th mask``,
    ``Less than 1/3 of the right lung area``); the reply must name no other option, and no
    sentence that names it may be negated or hedged.
    """
    named: set[int] = set()
    rest = text
    for i, pattern in forms.patterns:
        for m in pattern.finditer(text):
            form = m.group().strip()
            if " " not in form and not any(c.isdigit() for c in form):
                continue
            rest = rest.replace(m.group(), " ")
            sentence = _sentence_before(text, m.start()) + text[m.start():_sentence_end(
                text, m.end())]
            if _NEGATION.search(sentence) or _HEDGE_WORDS.search(sentence):
                return None
            named.add(i)
    if len(named) != 1 or _mentions_other(rest, tuple(named), forms):
        return None  # "The mask covers 3 zones and I think 2 is close"
    return next(iter(named))


_HEDGE_WORDS = re.compile(r"\b(?:or|maybe|perhaps|possibly|either|between|unsure|uncertain|"
                          r"unclear|might|could)\b", re.IGNORECASE)


def _sentence_end(text: str, pos: int) -> int:
    m = _SENTENCE_END.search(text, pos)
    return m.start() if m else len(text)


#: Where a sentence starts: the reply's start, a line start (after a bullet or quote mark),
#: or after a sentence end.
_SENTENCE_START = re.compile(r"(?:^|\n)[ \t]*(?:[-*•>][ \t]+)?|(?<=[.!?])[ \t]+", re.MULTILINE)
#: Words between two statements that mark a change of mind (the later one wins, even in
#: one sentence).
_CHANGE = re.compile(
    r"\b(?:actually|on\s+(?:second|further|closer)\s+(?:look|thought|inspection|review|"
    r"examination)|on\s+reflection|upon\s+reflection|wait|correction|rather|instead|"
    r"reconsider\w*|re-?evaluat\w*|re-?examin\w*|revis\w*|i\s+mean|changing\s+my|after\s+all)"
    r"\b", re.IGNORECASE)
#: A retraction after the last statement voids it (and so the reply).
_RETRACTION = re.compile(
    r"\b(?:no\s+longer\s+(?:sure|certain|confident)|not\s+sure\s+(?:any\s*more|which|between)"
    r"|(?:can'?t|cannot|can\s+not|unable\s+to|could\s+not|couldn'?t)\s+(?:reliably\s+)?"
    r"(?:decide|choose|resolve\s+this|tell\s+which|say\s+which|determine\s+(?:which|this|that)|"
    r"distinguish\s+between|pick\s+between|be\s+(?:sure|certain|confident))"
    r"|i\s+take\s+(?:that|it)\s+back|scratch\s+that|i\s+retract|disregard\s+(?:that|my)"
    r"|could\s+equally\s+be|equally\s+(?:likely|plausible|possible))", re.IGNORECASE)
#: A sentence end between two statements.
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")


def _strong_statements(text: str, forms: OptionForms) -> list[Statement]:
    out = []
    for m in _STRONG.finditer(text):
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
        if reading.kind == ABSENT:
            reading = ListReading(UNREADABLE, end=pos)
        out.append(Statement(m.start(), max(reading.end, pos), 2, reading))
    for m in _ANSWER_HEADING.finditer(text):
        pos = _next_line(text, m.end())
        if pos is None:
            continue
        reading = read_list(text, pos, forms)
        if reading.kind != ABSENT:
            out.append(Statement(m.start(), reading.end, 2, reading))
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
        line = text[start:nl] if nl >= start else ""
        if line.strip():
            return _skip_space(text, start)
        pos = nl + 1 if nl < len(text) else len(text)
        if nl >= len(text):
            break
    return None


def _in_quotes(text: str, pos: int) -> bool:
    """Whether ``pos`` lies inside a pair of double quotes on its line (a quoted phrase)."""
    start = text.rfind("\n", 0, pos) + 1
    before = text[start:pos]
    return (before.count('"') % 2 == 1) or before.count("“") > before.count("”")


def _phrase_statements(text: str, forms: OptionForms) -> list[Statement]:
    out = []
    for m in _PHRASE.finditer(text):
        if _in_quotes(text, m.start()) or _CONDITIONAL.search(_sentence_before(text, m.start())):
            continue
        reading = read_list(text, m.end(), forms)
        if reading.kind != ABSENT:
            out.append(Statement(m.start(), reading.end, 2, reading))
    return out


#: A numbered line of a list ("1. The lesion ...", "2) ...").
_ENUMERATION = re.compile(r"\d+[.)][ \t]+\S")
#: Words that make a phrase marker's sentence a condition, not a commitment ("If it isn't,
#: the answer would be 2").
_CONDITIONAL = re.compile(r"\b(?:if|unless|otherwise|were\s+it|had\s+it)\b", re.IGNORECASE)


def _sentence_before(text: str, pos: int) -> str:
    """The text of ``pos``'s sentence before ``pos``."""
    start = max(text.rfind("\n", 0, pos), *(text.rfind(c + " ", 0, pos) for c in ".!?"))
    return text[start + 1:pos]


def _echo_lines(text: str, forms: OptionForms) -> set[int]:
    """Start positions of lines that echo the option list (``(1) Yes`` / ``2. No`` lines).

    A line counts when it is a number followed by that option's own text and nothing else,
    and the reply holds two or more such lines (the options repeated), or when it follows an
    ``Options:`` line.
    """
    starts: set[int] = set()
    pos = 0
    after_header = False
    for line in text.split("\n"):
        body = line.strip().lstrip("-*•> ")
        if re.match(r"(?i)options?\s*:?\s*$", body):
            after_header = True
        elif body:
            number = _NUMBER.match(body)
            item = _read_item(body, 0, forms) if number else None
            if item is not None and item.kind == READ and item.end != number.end() and \
                    not body[item.end:].strip(" .") :
                starts.add(pos)
            elif not after_header or not number:
                after_header = False
        pos += len(line) + 1
    return starts if len(starts) >= 2 else set()


def _sentence_statements(text: str, forms: OptionForms, verbs: frozenset[str] = frozenset()
                         ) -> tuple[list[Statement], list[Statement]]:
    """Item-first commitments (tier 2) and sentence-opening lists (tier 1)."""
    echoes = _echo_lines(text, forms)
    strong, weak = [], []
    seen: set[int] = set()
    for m in _SENTENCE_START.finditer(text):
        pos = m.end()
        if pos in seen or pos >= len(text):
            continue
        seen.add(pos)
        line_start = text.rfind("\n", 0, pos) + 1
        if line_start in echoes:
            continue
        reading = read_list(text, pos, forms)
        if reading.kind == ABSENT:
            continue
        commit = _COMMIT_AFTER.match(text, reading.end)
        if commit is None and verbs:
            need = _NEEDS.match(text, reading.end)
            commit = need if need is not None and any(
                need.group("verb").lower().startswith(v) for v in verbs) else None
        if commit is not None:
            if commit.group("also"):
                reading = ListReading(UNREADABLE, end=commit.end())
            strong.append(Statement(pos, commit.end(), 2, reading))
        elif reading.kind == READ and _PUNCT_BOUNDARY.match(
                text, _CLOSERS.match(text, reading.end).end()):
            if _ENUMERATION.match(text, pos) and "\n" in text.strip():
                continue  # "1. Lesion location: ..." is an enumeration mark, not an answer
            weak.append(Statement(pos, reading.end, 1, reading))
        elif reading.kind == HEDGE:
            weak.append(Statement(pos, reading.end, 1, reading))
    return strong, weak


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
        multi_select: Whether the question takes a set; a reply without any statement is read
            by the one option its prose names only for single-choice questions.
        question: The question as asked ('' if unknown): a reply that repeats its verb
            ("should be expanded toward ...") states an answer with it.
        cut_off: The reply hit the token limit: prose that names an option is then no answer
            (the reply may have gone on to another).

    Returns:
        The deciding statement's indices (not range-checked), or None with the reason:
        no statement, a hedge, an unreadable list, a retraction, or two statements of one
        sentence that disagree.
    """
    forms = option_forms(tuple(option_texts), none_index)
    verbs = _question_verbs(question)
    tier2 = (_strong_statements(text, forms) + _phrase_statements(text, forms)
             + _verb_statements(text, forms, verbs))
    item_first, tier1 = _sentence_statements(text, forms, verbs)
    tier2 = _dedupe(tier2 + item_first)
    statements = tier2 or _dedupe(tier1)
    if not statements:
        named = None if multi_select or cut_off else _only_option_named(text, forms)
        if named is not None:
            return Decision((named,), end=len(text))
        return Decision(None, "no answer statement")
    if not tier2:
        readings = {s.reading.indices if s.reading.kind == READ else s.reading.kind
                    for s in statements}
        if len(readings) > 1:
            return Decision(None, "sentences state different answers")
    last = statements[-1]
    if _RETRACTION.search(text, last.end):
        return Decision(None, "the answer is retracted after it is stated")
    if len(statements) > 1:
        prev = statements[-2]
        between = text[prev.end:last.start]
        if prev.reading.kind == READ and last.reading.kind == READ \
                and set(prev.reading.indices) != set(last.reading.indices) \
                and not _SENTENCE_END.search(between) and not _CHANGE.search(between):
            return Decision(None, "two statements of one sentence disagree")
    if last.reading.kind == HEDGE:
        return Decision(None, f"hedged answer {_quote(text, last)}")
    if last.reading.kind != READ:
        return Decision(None, f"cannot read answer from {_quote(text, last)}")
    return Decision(last.reading.indices, end=last.end)


def _dedupe(statements: list[Statement]) -> list[Statement]:
    """Statements in text order, one per list.

    A marker and an item-first reading of the same list are one statement; the one that
    starts first is kept.
    """
    out: list[Statement] = []
    for s in sorted(statements, key=lambda s: (s.start, -s.end)):
        if out and s.start < out[-1].end:
            if s.end > out[-1].end and s.reading.kind != READ:
                out[-1] = Statement(out[-1].start, s.end, out[-1].tier, s.reading)
            continue
        out.append(s)
    return out


def _quote(text: str, statement: Statement) -> str:
    return repr(text[statement.start:max(statement.end, statement.start + 1)][:80])
