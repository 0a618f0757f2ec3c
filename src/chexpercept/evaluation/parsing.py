r"""Stage 03: strict answer parsing of raw model output into option indices and a status.

The parser reads only what the model declared; it never guesses. The release's fallback of
taking *all integers anywhere in the text* (original_release_spec.md section 5.5, defect 11 in
section 8) is not reproduced: text that does not declare an answer is ``unparseable``.

Order of operations:

1. Provider failures keep their status (``error``, ``refused``).
2. Reasoning is removed: text after the last ``</think>`` (or Gemma's ``<unused95>``) is kept;
   an unclosed ``<think>`` / ``<unused94>`` leaves nothing after it, so the answer is
   ``truncated`` when the output hit the token limit and ``unparseable`` otherwise.
3. Wrappers are removed: other ``<unusedN>`` tokens, ``$``, markdown emphasis, code ticks and
   heading marks. A GLM ``<|begin_of_box|>..<|end_of_box|>``, a ``\boxed{..}`` and an
   ``<answer>..</answer>`` tag each count as an ``Answer:`` line.
4. The *last* ``Answer:`` declaration wins (its line; if empty, the next non-empty line); without
   one, the last "the answer is ..." phrase; without either, a one-line bare response.
5. The declaration must be, in full: option numbers (``2``, ``(2)``, ``[2]``, ``option 2``, each
   optionally followed by its own option text) joined by commas, semicolons, ``&`` or ``and``;
   or the exact text of an option (case-insensitive), or several option texts joined by commas.
6. Out-of-range numbers, several numbers for a single-choice question, or "None" together with
   other options make the answer ``unparseable``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

#: Parse statuses (``chexpercept.schema.STATUSES``); anything but ``ok`` scores as wrong.
OK, UNPARSEABLE, REFUSED, TRUNCATED, ERROR = "ok", "unparseable", "refused", "truncated", "error"

#: Finish reasons meaning "stopped at the token limit" (vLLM/OpenAI, Anthropic, Gemini).
LENGTH_FINISH_REASONS = frozenset({"length", "max_tokens", "MAX_TOKENS"})


@dataclass(frozen=True)
class ParsedAnswer:
    """Result of parsing one response.

    Attributes:
        answer: Sorted distinct 1-based option indices, or None unless ``status == "ok"``.
        status: One of ``ok``, ``unparseable``, ``refused``, ``truncated``, ``error``.
        detail: Why the answer was not accepted ('' when ok).
    """

    answer: tuple[int, ...] | None
    status: str
    detail: str = ""

    @property
    def text(self) -> str:
        """The parsed answer as stored in ``all_results.json`` (``"2"``, ``"1,3"``; '' if none)."""
        return ",".join(str(i) for i in self.answer) if self.answer else ""


_CLOSE_TAGS = re.compile(r"</think\s*>|<unused95>", re.IGNORECASE)
_OPEN_TAGS = re.compile(r"<think\s*>|<unused94>", re.IGNORECASE)
_UNUSED = re.compile(r"<unused\d+>")
_GLM_BOX_OPEN = re.compile(r"<\|begin_of_box\|>")
_GLM_BOX_CLOSE = re.compile(r"<\|end_of_box\|>")
_BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")
_TEXT_CMD = re.compile(r"\\text(?:bf)?\s*\{([^{}]*)\}")
_ANSWER_TAG_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_TAG_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
# An answer declaration is ``[final ]answer[s]:`` not preceded by a letter. ``final\s+`` does
# not change where a declaration ends, so the patterns leave it out, and the letter check is
# done on each match (``_last_declaration_end``) rather than by a look-behind.
_EXPLICIT = re.compile(r"answers?\s*[:：]", re.IGNORECASE)
_PHRASE = re.compile(r"answers?\s+(?:is|are|would\s+be|should\s+be)\s*[:：]?", re.IGNORECASE)
_LETTER = re.compile(r"[A-Za-z]", re.IGNORECASE)
_WHITESPACE_RUN = re.compile(r"\s+")
_HEADING = re.compile(r"(?m)^\s*#+\s*")
_TEXT_SPLITTERS = (re.compile(r"\s*[,;]\s*(?:and\s+)?", re.I), re.compile(r"\s+and\s+", re.I))
_BRACKETS = re.compile(r"[\[\]()]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_NUMBER_ITEM = re.compile(
    r"(?:options?\s*)?(?:\(\s*(\d+)\s*\)|\[\s*(\d+)\s*\]|(\d+)(?!\d)(?!\.\d))", re.IGNORECASE)
_SEPARATOR = re.compile(r"\s*(?:,\s*(?:and\s+)?|;\s*|&\s*|and\s+)", re.IGNORECASE)
_TEXT_LEAD = re.compile(r"\s*(?:[:\-–—.]\s*)?")
_REFUSAL = re.compile(
    r"\b(?:i'?m sorry|i am sorry|i cannot|i can'?t|i can not|i am unable|i'?m unable|"
    r"i am not able|unable to (?:provide|assist|help)|as an ai)\b", re.IGNORECASE)
#: Words one of which every ``_REFUSAL`` match contains (lower-case ASCII text).
_REFUSAL_WORDS = ("sorry", "i can", "unable", "not able", "as an ai")


def _is_refusal(text: str) -> bool:
    """Whether ``text`` contains a refusal phrase (``_REFUSAL``)."""
    if text.isascii():  # skip the regex scan when no refusal word is present
        low = text.lower()
        if not any(word in low for word in _REFUSAL_WORDS):
            return False
    return _REFUSAL.search(text) is not None


def _strip_reasoning(text: str) -> tuple[str, bool]:
    """Text after the last reasoning block, and whether a reasoning block was left open."""
    if "<" not in text:  # every reasoning tag starts with "<"
        return text, False
    closes = list(_CLOSE_TAGS.finditer(text))
    tail = text[closes[-1].end():] if closes else text
    opened = _OPEN_TAGS.search(tail)
    if opened:
        return tail[:opened.start()], True
    return tail, False


def _clean(text: str) -> str:
    # Each substitution runs only when the text holds a character its pattern needs (same
    # result, fewer regex scans).
    if "<" in text:
        # A GLM box or \boxed{..} declares the answer: it counts as an ``Answer:`` line.
        text = _GLM_BOX_OPEN.sub("\nAnswer: ", text)
        text = _GLM_BOX_CLOSE.sub("\n", text)
        text = _UNUSED.sub("", text)
    if "\\" in text:
        for _ in range(3):  # nested \text{..} inside \boxed{..}
            text = _TEXT_CMD.sub(r"\1", text)
        text = _BOXED.sub(r"\nAnswer: \1\n", text)
    if "<" in text:
        text = _ANSWER_TAG_OPEN.sub("\nAnswer: ", text)
        text = _ANSWER_TAG_CLOSE.sub("\n", text)
    # Removing every "*" also removes "**" (markdown bold).
    text = text.replace("$", "").replace("__", "").replace("`", "").replace("*", "")
    if "#" in text:
        text = _HEADING.sub("", text)
    return text


def _payload_after(text: str, end: int, *, next_line: bool) -> str:
    rest = text[end:]
    line, _, after = rest.partition("\n")
    if not line.strip() and next_line:
        for candidate in after.split("\n"):
            if candidate.strip():
                line = candidate
                break
    return _SENTENCE_END.split(line.strip(), maxsplit=1)[0]


def _last_declaration_end(pattern: re.Pattern[str], text: str) -> int | None:
    """End of the last match of ``pattern`` (which starts with "answer") not after a letter.

    Matches cannot overlap, so the last one is the right-most "answer" at which ``pattern``
    matches. ASCII text (nearly every response) is searched from the right with ``str.rfind``
    (positions in ``text.lower()`` are those in ``text``); other text is scanned with the
    case-insensitive pattern, whose case folding differs from ``str.lower`` for a few letters.
    """
    if text.isascii():
        low = text.lower()
        end = len(low)
        while (at := low.rfind("answer", 0, end)) >= 0:
            if at == 0 or not text[at - 1].isalpha():
                m = pattern.match(text, at)
                if m is not None:
                    return m.end()
            end = at + len("answer") - 1
        return None
    last = None
    for m in pattern.finditer(text):
        at = m.start()
        if at == 0 or not _LETTER.match(text, at - 1):
            last = m.end()
    return last


def _declared(text: str) -> str | None:
    """The payload of the last answer declaration, or None if the text declares none."""
    end = _last_declaration_end(_EXPLICIT, text)
    if end is not None:
        return _payload_after(text, end, next_line=True)
    end = _last_declaration_end(_PHRASE, text)
    if end is not None:
        return _payload_after(text, end, next_line=False)
    return None


def _norm(text: str) -> str:
    text = _WHITESPACE_RUN.sub(" ", text.strip().lower())
    return text.strip(" .\"'")


@functools.lru_cache(maxsize=1024)
def _norm_options(option_texts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_norm(option) for option in option_texts)


def _match_option(text: str, option_texts: Sequence[str]) -> int | None:
    target = _norm(text)
    if not target:
        return None
    for i, option in enumerate(_norm_options(tuple(option_texts)), start=1):
        if option == target:
            return i
    return None


def _parse_option_texts(payload: str, option_texts: Sequence[str]) -> list[int] | None:
    whole = _match_option(payload, option_texts)
    if whole is not None:
        return [whole]
    for splitter in _TEXT_SPLITTERS:
        parts = [p for p in splitter.split(payload.strip().rstrip(".")) if p]
        if len(parts) < 2:
            continue
        found = [_match_option(p, option_texts) for p in parts]
        if all(i is not None for i in found):
            return [i for i in found if i is not None]
    return None


def _skip_option_text(s: str, pos: int, number: int, option_texts: Sequence[str]) -> int:
    """Position after ``number``'s own option text at ``pos`` (as in ``(2) No``), else ``pos``."""
    if not 1 <= number <= len(option_texts):
        return pos
    pattern = _option_text_pattern(option_texts[number - 1])
    if pattern is None:
        return pos
    lead = _TEXT_LEAD.match(s, pos)
    start = lead.end() if lead else pos
    m = pattern.match(s, start)
    return m.end() if m else pos


@functools.lru_cache(maxsize=1024)
def _option_text_pattern(option_text: str) -> re.Pattern[str] | None:
    option = re.escape(_norm(option_text))
    if not option:
        return None
    return re.compile(rf"(?:\(\s*{option}\s*\.?\s*\)|{option}\.?)(?![A-Za-z0-9])", re.I)


def _parse_numbers(payload: str, option_texts: Sequence[str]) -> list[int] | None:
    s = payload.strip()
    if len(s) >= 2 and s[0] + s[-1] in ("[]", "()", "{}") and not _BRACKETS.search(s[1:-1]):
        s = s[1:-1]
    pos, numbers = 0, []
    while True:
        while pos < len(s) and s[pos].isspace():
            pos += 1
        m = _NUMBER_ITEM.match(s, pos)
        if not m:
            return None
        number = int(next(g for g in m.groups() if g is not None))
        numbers.append(number)
        pos = _skip_option_text(s, m.end(), number, option_texts)
        sep = _SEPARATOR.match(s, pos)
        if sep and sep.end() < len(s):
            pos = sep.end()
            continue
        break
    rest = s[pos:].strip()
    return numbers if rest in ("", ".") else None


def parse_payload(payload: str, option_texts: Sequence[str] = (), *,
                  multi_select: bool = False, none_index: int | None = None) -> list[int] | None:
    """Option indices declared by an answer payload (the text after ``Answer:``), or None.

    Args:
        payload: One line of text.
        option_texts: Option labels in order (exact, case-insensitive text answers).
        multi_select: For multi-select questions a bare ``none`` selects ``none_index``.
        none_index: 1-based index of the "None" option, if any.

    Returns:
        Indices in the order given (not yet range-checked), or None if the payload is not, in
        full, an answer.
    """
    payload = payload.strip()
    if not payload:
        return None
    by_text = _parse_option_texts(payload, option_texts)
    if by_text is not None:
        return by_text
    if multi_select and none_index is not None and _norm(payload) == "none":
        return [none_index]
    return _parse_numbers(payload, option_texts)


def parse_answer(raw: str | None, *, num_options: int, multi_select: bool = False,
                 option_texts: Sequence[str] = (), none_index: int | None = None,
                 finish_reason: str | None = None,
                 completion_status: str = "ok") -> ParsedAnswer:
    """Parse one raw response strictly (see the module docstring for the rules).

    Args:
        raw: Raw model output (None or '' when the provider returned nothing).
        num_options: Number of options; indices outside 1..num_options are unparseable.
        multi_select: True for set answers (expansion, contraction, location).
        option_texts: Option labels in order, for exact text answers ("Yes", "red point").
        none_index: 1-based index of the "None" option of a multi-select question; it is only
            valid alone.
        finish_reason: Provider finish reason; ``length`` turns a missing answer into
            ``truncated``.
        completion_status: The provider's status (``ok``, ``refused``, ``truncated``, ``error``).

    Returns:
        The parsed answer and its status.
    """
    if completion_status == ERROR:
        return ParsedAnswer(None, ERROR, "provider error")
    if completion_status == REFUSED:
        return ParsedAnswer(None, REFUSED, "provider refused")
    cut_off = completion_status == TRUNCATED or finish_reason in LENGTH_FINISH_REASONS
    final, unclosed = _strip_reasoning(raw or "")
    final = _clean(final).strip()

    def _missing(detail: str) -> ParsedAnswer:
        if cut_off:
            return ParsedAnswer(None, TRUNCATED, detail + " (output hit the token limit)")
        if final and _is_refusal(final):
            return ParsedAnswer(None, REFUSED, detail + " (refusal)")
        return ParsedAnswer(None, UNPARSEABLE, detail)

    if not final:
        return _missing("unclosed reasoning block" if unclosed else "empty response")
    payload = _declared(final)
    if payload is None:
        if "\n" in final:
            return _missing("no answer declaration")
        payload = final
    indices = parse_payload(payload, option_texts, multi_select=multi_select,
                            none_index=none_index)
    if indices is None:
        return _missing(f"cannot read answer from {payload[:80]!r}")
    chosen = sorted(set(indices))
    out_of_range = [i for i in chosen if not 1 <= i <= num_options]
    if out_of_range:
        return ParsedAnswer(None, UNPARSEABLE, f"option(s) {out_of_range} not in 1..{num_options}")
    if not multi_select and len(chosen) > 1:
        return ParsedAnswer(None, UNPARSEABLE, f"several options {chosen} for a single-choice "
                                               f"question")
    if multi_select and none_index in chosen and len(chosen) > 1:
        return ParsedAnswer(None, UNPARSEABLE, f"'None' chosen together with other options "
                                               f"{chosen}")
    return ParsedAnswer(tuple(chosen), OK)
