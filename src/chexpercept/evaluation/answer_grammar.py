r"""Stage 03: the option-list grammar of an answer statement (docs/parsing.md, "Statement grammar").

An *option list* is one or more items (option numbers, ordinals, option texts and their short
forms, each with its own echoed text and bracketed notes) joined by list separators. It is
read whole or not at all, and it ends at a clause boundary (a sentence end, a newline, a
comma, colon, semicolon, dash or bracket that no other item follows, or a connective such as
``because``, ``since``, ``as``, ``which``); what follows is explanation, never read as an
option, unless the clause right after it hedges or amends the list. :func:`read_list` reads
one list at a position; ``answer_statements`` finds where a reply states one and which
statement decides it.
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
#: Words follow the list without a clause boundary (``2 zones`` where option 2 is "No",
#: ``No lesion is seen``): after a marker the list is unreadable; a sentence that opens so
#: is no statement.
TRAILING = "trailing"

_WORD_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6,
                  "seventh": 7, "eighth": 8, "ninth": 9}
_NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven",
                 8: "eight"}
_ORDINAL = (r"(?:(?P<ord>\d+)(?:st|nd|rd|th)|(?P<word>"
            + "|".join(_WORD_ORDINALS) + r"))")
#: A word ordinal names an option only with "the" before it or a noun after it ("the second",
#: "second mask"): "First, ..." opens a sentence.
#: Nouns that may follow an ordinal or precede a number in an option item.
_ITEM_NOUNS = r"(?:options?|choices?|masks?|points?|answers?|ones?|candidates?)"
#: An option number: ``2``, ``(2)``, ``[2]``, ``option 2``, ``mask #2``, ``2)``; not a
#: decimal, fraction, percentage, ordinal or measurement.
NUMBER = re.compile(
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
    r"probably|likely|just|only|the|option|options|point|points|mask)\s+)*", re.IGNORECASE)
#: A condition right after a list (``Answer: 2 only if the hilum is excluded``): a hedge.
_CONDITION = re.compile(r"[ \t]*,?[ \t]*(?:only[ \t]+)?(?:if|unless|in[ \t]+case|provided|"
                        r"assuming|as[ \t]+long[ \t]+as|when)(?![A-Za-z])", re.IGNORECASE)
#: A change of mind after a list's boundary, with an option after it (``No, wait, yes``,
#: ``Answer: 3. On second thought, 1``, ``Red, no, yellow``, ``the 2nd - no, the 3rd``,
#: ``None - except maybe red``): the list no longer states the answer.
#: The words of a change of mind (docs/parsing.md, "Parser rules"), shared by a list's reading
#: here and the statement reader (``answer_statements``), which each add their own few.
CHANGE_OF_MIND_WORDS = (r"actually|wait|correction|sorry|scratch(?:\s+that)?|just\s+kidding|hm+|"
                        r"i\s+mean|i\s+meant|on\s+reflection|upon\s+reflection|that\s+said|"
                        r"update|or\s+rather")
_CHANGE_LEAD = re.compile(
    rf"(?:{CHANGE_OF_MIND_WORDS}|no|nope|well|rather|instead|except|but|apart\s+from|"
    r"other\s+than|besides|on\s+(?:second|further|closer)\s+\w+|make\s+that)(?![A-Za-z])[\s,:;.!—–-]*(?:(?:possibly|maybe|perhaps|also|even|"
    r"just|only|probably|likely|rather|the|drop|scratch|remove|it'?s|i\s+meant?|make\s+it|"
    r"no|wait)(?![A-Za-z])[\s,:;.!—–-]*)*", re.IGNORECASE)
#: A note after an item that is itself a hedge or an addition (``2 (or 3)``, ``1 (maybe)``).
_NOTE_HEDGE = re.compile(
    r"\s*(?:or|nor|maybe|perhaps|possibly|either|and|also|plus|alternatively|unsure|"
    r"uncertain)(?![A-Za-z])", re.IGNORECASE)
TOO = re.compile(r"\b(?:too|as\s+well|also)\b", re.IGNORECASE)
#: Words that make a sentence a hedge (checked where a list names its option in prose).
HEDGE_WORDS = re.compile(r"\b(?:or|maybe|perhaps|possibly|either|between|unsure|uncertain|"
                         r"unclear|might|could)\b", re.IGNORECASE)
#: Words that open a justification after an item (a clause boundary).
_CONNECTIVE = re.compile(
    r"\s*,?\s*(?:because|since|as|which|who|due|given|so|that|with|where|while|whereas|but|"
    r"rather|instead|not|is|are|was|were|would|should|could|seems?|appears?|best|most|"
    r"indicating|indicates|suggesting|suggests|showing|shows|meaning|means|based|considering|"
    r"for|here|in|on|at|from|covers?|covering|involves?|involving|matches|fits|reflects|"
    r"needs?|requires?|lies?|sits?|contains?|containing|has|have|show|"
    r"represents|describes|corresponds|applies|accurately|correctly|clearly|only|then|"
    r"though|although|however|therefore|thus|hence)(?![A-Za-z])", re.IGNORECASE)
#: Punctuation that ends an option list when no option follows it.
PUNCT_BOUNDARY = re.compile(r"\s*(?:$|\n|[.!?](?:\s|$)|[.!?]$|[,;:]|\s[-–—]|[-–—]\s|[–—]|"
                             r"[(\[]|\.{3}|…)")
#: Whitespace and closing quotes/emphasis that may stand between an item and its boundary.
CLOSERS = re.compile(r"[\"'”’]*")

_QUOTES = "\"'“‘"


@dataclass(frozen=True)
class ListReading:
    r"""An option list read at one position.

    Attributes:
        kind: ``READ``, ``ABSENT``, ``HEDGE`` or ``UNREADABLE``.
        indices: The stated 1-based option numbers in the order written (``READ`` only;
            not yet range-checked).
        end: Position after the list (its last item, echo or note).
        boundary: What ended the list: its punctuation (``.``, ``,``, ``:``, ``-``, ``(``,
            ``\n``; '' at the end of the text) or ``w`` for a connective word.
    """

    kind: str
    indices: tuple[int, ...] = ()
    end: int = 0
    boundary: str = ""


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
#: Words a shortened option text may not end on ("The right lung lesion is ...").
_STOPWORDS = frozenset({"is", "are", "the", "a", "an", "of", "and", "or", "than", "but", "in",
                        "more", "less", "only", "one", "to", "with", "lung"})
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
    for i, text in enumerate(full, start=1):  # "2 zones" also as "two zones"
        head, _, tail = text.partition(" ")
        if head.isdigit() and tail and int(head) in _NUMBER_WORDS:
            extra.setdefault(f"{_NUMBER_WORDS[int(head)]} {tail}", set()).add(i)
    for i, text in enumerate(full, start=1):  # "Less than 1/3" of a longer option text
        words = text.split(" ")
        for k in range(3, len(words)):
            if words[k - 1] not in _STOPWORDS:
                extra.setdefault(" ".join(words[:k]), set()).add(i)
    for form, indices in extra.items():
        if len(indices) == 1 and form not in forms and not any(
                other.startswith(form + " ") for j, other in enumerate(full, 1)
                if j not in indices):
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


def match_text(s: str, pos: int, forms: OptionForms) -> tuple[int, int] | None:
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
    return (PUNCT_BOUNDARY.match(s, pos) is not None or _CONNECTIVE.match(s, pos) is not None
            or _SEPARATOR.match(s, pos) is not None or _HEDGE_SEPARATOR.match(s, pos) is not None
            or s[pos:pos + 1] in ("", ")", "]", *_QUOTES, "”", "’"))


_BECAUSE = re.compile(r"[ \t]+(?:because|since|as|due|given)\b")
#: A label after a closed bracket when no option texts are known (``(2) No``).
_LABEL = re.compile(r"[A-Za-z][A-Za-z ]{0,40}?(?=$|[\n.,;:!?)(\]]|\s[-–—]\s)")
_NUMBER_AFTER = re.compile(r"[ \t]+[(\[]?\d")
_ADDING_CLAUSE = re.compile(r"(?:plus|along\s+with|together\s+with|as\s+well\s+as)\b", re.I)
_AND = re.compile(r"and\b", re.I)


def _listy_end(s: str, pos: int) -> bool:
    """Whether a list may go on or end at ``pos`` (punctuation, separator, bracket, end)."""
    return (PUNCT_BOUNDARY.match(s, pos) is not None or _SEPARATOR.match(s, pos) is not None
            or _HEDGE_SEPARATOR.match(s, pos) is not None
            or _BECAUSE.match(s, pos) is not None
            or s[pos:pos + 1] in ("", ")", "]", *_QUOTES, "”", "’"))


@dataclass(frozen=True)
class Item:
    """One option item: its 1-based option number, where it ends, and whether it was read.

    ``kind`` is ``UNREADABLE`` when a number is written with another option's text
    (``1 - No``); ``bracketed`` when the number was closed by a bracket (``(2)``, ``2)``).
    """

    index: int
    end: int
    kind: str = READ
    bracketed: bool = False


def read_item(s: str, pos: int, forms: OptionForms, *, listed: bool = False) -> Item | None:
    """One option item at ``pos``: a number (with its own text echoed), an ordinal, a text.

    With ``listed`` (an item after a list separator) an option text must end the clause or
    the list there: in ``1; the yellow point lies on normal lung`` the text is the subject of
    an explanation, not a second item.
    """
    while pos < len(s) and s[pos] in " \t" + _QUOTES:
        pos += 1
    text = match_text(s, pos, forms) if forms.patterns else None
    number = NUMBER.match(s, pos)
    ordinal = _ORDINAL_ITEM.match(s, pos)
    candidates: list[Item] = []
    if text is not None and (_listy_end(s, text[1]) if listed else _at_item_end(s, text[1])):
        candidates.append(Item(text[0], text[1]))
    if number is not None:
        value = int(number.group("p") or number.group("b") or number.group("n"))
        bracketed = number.group("n") is None or number.group("close") is not None
        candidates.append(_echo(s, Item(value, number.end(), bracketed=bracketed), forms))
    if ordinal is not None and (ordinal.group("word") is None or ordinal.group("the")
                                or ordinal.group("noun")) and _at_item_end(s, ordinal.end()):
        value = int(ordinal.group("ord")) if ordinal.group("ord") else _WORD_ORDINALS[
            ordinal.group("word").lower()]
        candidates.append(_echo(s, Item(value, ordinal.end()), forms))
    if not candidates:
        return None
    return max(candidates, key=lambda item: item.end)


_ECHO_LEAD = re.compile(r"[ \t]*(?:[:\-–—.=][ \t]*)?")


def _echo(s: str, item: Item, forms: OptionForms) -> Item:
    """``item`` extended over its own option text written after it (``(2) No``, ``2: No``).

    Another option's text there makes the item ``UNREADABLE`` (``1 - No`` on a yes/no
    question). The echo counts only where an item may end after it, so ``1. No other region
    is involved`` is option 1 and an explanation.
    """
    lead = _ECHO_LEAD.match(s, item.end)
    at = lead.end() if lead else item.end
    if forms.patterns:
        text = match_text(s, at, forms)
        # after a full stop or a dash the echo must end its clause: "1. No." echoes,
        # "1. No other region ..." and "2 - the 3rd mask is too wide" explain
        strict = lead is not None and any(c in lead.group() for c in ".-–—")
        if text is not None and (_listy_end(s, text[1]) if strict
                                 else _at_item_end(s, text[1])):
            if text[0] == item.index:
                return Item(item.index, text[1], bracketed=item.bracketed)
            return Item(item.index, text[1], UNREADABLE)
    elif item.bracketed and lead is not None:
        # no option texts known: a label after a closed bracket is an echo (``(2) No``)
        m = _LABEL.match(s, at)
        if m:
            return Item(item.index, m.end(), bracketed=True)
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
    if HEDGE_WORDS.search(content) and names_other_option(content, chosen, forms):
        return m.end(), HEDGE  # "None (the red point maybe)"
    change = _CHANGE_LEAD.match(content.lstrip())
    if change is not None and read_item(content.lstrip(), change.end(), forms) is not None:
        return m.end(), UNREADABLE  # "Answer: 3 (no, 1)"
    lead = _NOTE_LEAD.sub("", content.lstrip())
    item = read_item(lead, 0, forms)
    if item is not None and item.index not in chosen and not lead.lower().startswith("not"):
        return m.end(), UNREADABLE  # "1 (3)", "1 (yellow point), 2"
    if TOO.search(content) and _mentions_other(content, chosen, forms):
        return m.end(), UNREADABLE
    return m.end(), READ


#: Words that open a note restating the item (``mask 2 (i.e. the 3rd mask)``).
_NOTE_LEAD = re.compile(r"^(?:i\.?e\.?|e\.?g\.?|that\s+is|namely|aka|meaning)[\s,:]*", re.I)
ORDINAL_MENTION = re.compile(r"(?<![\w./])(\d+)(?:st|nd|rd|th)\s+(?:ones?|options?|masks?|"
                              r"choices?|points?)\b", re.IGNORECASE)
MENTION = re.compile(r"(?<![\w./])(\d+)(?![\w/%]|\.\d)")


def _mentions_other(text: str, chosen: Sequence[int], forms: OptionForms) -> bool:
    """Whether ``text`` names an option number outside ``chosen`` (for addition notes)."""
    return any(int(m.group(1)) not in chosen for m in MENTION.finditer(text))


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
    if lead is not None and read_item(s, lead.end(), forms) is not None:
        return ListReading(HEDGE, end=lead.end())
    indices: list[int] = []
    listed = False
    while True:
        item = read_item(s, pos, forms, listed=listed)
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
        if hedge is not None and read_item(s, hedge.end(), forms) is not None:
            return ListReading(HEDGE, end=hedge.end())
        sep = _SEPARATOR.match(s, pos)
        if sep is not None and read_item(s, sep.end(), forms, listed=True) is not None:
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
            len(reading.indices) < 2 and NUMBER.match(s, pos)):
        return None  # one number in brackets is an item ("(2) No"), read by the caller
    return _after_list(s, end + 1, reading.indices, forms)


#: Predicates that, with "also"/"too"/"as well", make a clause add an option to the answer
#: (``1, because 3 is also on the lesion``; ``1; the yellow point lies on it too``).
QUALIFIES = re.compile(
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
    r"\b(?:or|maybe|perhaps|possibly|either|probably)[ \t]+(?:(?:possibly|maybe|even|also|just|"
    r"only|simply|rather|the|probably|likely|option|point|mask)s?[ \t]+)*[(\[]?\d",
    re.IGNORECASE)
_CLAUSE_END = re.compile(r"[.!?](?:\s|$)|\n")


def _after_list(s: str, pos: int, indices: tuple[int, ...], forms: OptionForms) -> ListReading:
    """The reading of a list of ``indices`` that ended at ``pos``.

    What follows must be a clause boundary, and the clause after it must not amend the list
    (add or hedge an option, or go on as a list).
    """
    end = pos
    pos = CLOSERS.match(s, pos).end()
    boundary = PUNCT_BOUNDARY.match(s, pos)
    if _CONDITION.match(s, pos):
        return ListReading(HEDGE, end=end, boundary="if")  # "Answer: 2 only if ..."
    if boundary is None:
        if _CONNECTIVE.match(s, pos) is None and pos < len(s):
            return ListReading(TRAILING, end=end)
        after = pos
    else:
        mark = boundary.group()
        if "?" in mark:
            return ListReading(HEDGE, end=end, boundary="?")  # "Answer: 2?", "3 zones? No, 2"
        after = boundary.end()
        while after < len(s) and s[after] in " \t*\"'":
            after += 1
        change = _CHANGE_LEAD.match(s, after)
        if change is not None and read_item(s, change.end(), forms) is not None:
            return ListReading(UNREADABLE, end=end)  # "No, wait, yes", "2 - no, the 3rd"
        amend = _AMEND_LEAD.match(s, after)
        if amend is not None and amend.end() > after:
            item = read_item(s, amend.end(), forms)
            if item is not None and item.index not in indices:
                return ListReading(UNREADABLE, end=end)  # "2. Or 3", "1 (red). Also 3"
        text = match_text(s, after, forms) if forms.patterns else None
        if text is not None and text[0] not in indices and (
                text[1] >= len(s) or PUNCT_BOUNDARY.match(s, text[1])
                or (" " not in s[after:text[1]].strip() and _at_item_end(s, text[1]))):
            return ListReading(UNREADABLE, end=end)  # "2. Yes." / "1 - No because ..."
        again = read_list(s, after, forms) if s[after:after + 1].strip() else None
        if again is not None and again.kind == READ and set(again.indices) - set(indices) \
                and PUNCT_BOUNDARY.match(s, CLOSERS.match(s, again.end).end()):
            return ListReading(UNREADABLE, end=end)  # "Answer: 2. 3." states another list
    mark = _boundary_mark(boundary)
    if boundary is not None and "\n" in boundary.group():
        return ListReading(READ, indices, end, mark)  # the next line is a sentence of its own
    clause_end = _CLAUSE_END.search(s, after)
    clause = s[after:clause_end.start() if clause_end else len(s)]
    sentence_end = boundary is not None and boundary.group().strip()[:1] in (".", "!", "?")
    echoed = match_text(s, after, forms) if forms.patterns and not sentence_end else None
    if echoed is not None and _NUMBER_AFTER.match(s, echoed[1]):
        return ListReading(UNREADABLE, end=end)  # "1 - Yes 0"
    if not sentence_end and (_ADDING_CLAUSE.match(clause) or (_AND.match(clause)
                                                               and TOO.search(clause))):
        return ListReading(UNREADABLE, end=end)  # "2 zones, plus the left lower zone"
    if not sentence_end and _CLAUSE_HEDGE.search(clause):
        return ListReading(HEDGE, end=end)  # "1, 0/1 (or 2)", "2 - or possibly 3"
    if not sentence_end and _LIST_GOES_ON.search(clause):
        return ListReading(UNREADABLE, end=end)  # "1 - dense, 0": the list may go on
    for m in MENTION.finditer("" if sentence_end else clause):  # "2 - No 2 - Yes"
        lead = _ECHO_LEAD.match(clause, m.end())
        text = match_text(clause, lead.end(), forms) if forms.patterns else None
        if text is not None and text[0] not in indices and lead.end() > m.end():
            return ListReading(UNREADABLE, end=end)
    if TOO.search(clause) and (QUALIFIES.search(clause) or _BRACKETED_TOO.search(clause)) \
            and (boundary is None or names_other_option(clause, indices, forms)):
        return ListReading(UNREADABLE, end=end)  # "1; option 2 fits too": an addition
    return ListReading(READ, indices, end, mark)


def _boundary_mark(boundary: re.Match[str] | None) -> str:
    """``ListReading.boundary`` of a boundary match (None: a connective word)."""
    if boundary is None:
        return "w"
    mark = boundary.group()
    if "\n" in mark:
        return "\n"
    mark = mark.strip()
    return mark[:1] if mark else ""


def names_other_option(text: str, chosen: Sequence[int], forms: OptionForms) -> bool:
    """Whether ``text`` names an option outside ``chosen``.

    By a number that is no decimal, fraction or measurement, an ordinal with an option noun,
    or one of its text forms.
    """
    if _mentions_other(text, chosen, forms):
        return True
    for m in ORDINAL_MENTION.finditer(text):
        if int(m.group(1)) not in chosen:
            return True
    for i, pattern in forms.patterns:
        if i not in chosen and pattern.search(text):
            return True
    return False
