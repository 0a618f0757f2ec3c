r"""Stage 03: strict answer parsing of raw model output into option indices and a status.

The parser reads only what the model declared; it never guesses. The release's fallback of
taking *all integers anywhere in the text* is not reproduced (docs/differences.md D34): text that
does not declare an answer is ``unparseable``. The rules below are applied in this order;
``docs/parsing.md``, section "Parser rules", gives them with examples, what stays
unparseable, and the statuses.

1. Provider outcomes keep their status (``error``, ``refused``, ``blocked``).
2. Full-width forms are mapped to ASCII by an explicit table (``：（），；［］【】．。－``, the
   ideographic space and ``０``-``９``; ``、`` becomes a comma, a list separator). ASCII
   replies skip this step.
3. Chat-template tokens that a server did not strip are removed and the reply's own turn is
   kept: the first non-blank stretch that is not a user/system turn, ending at the first
   end-of-turn token (``<|im_end|>``, ``<|eot_id|>``, ``<|eom_id|>``, ``<end_of_turn>``,
   ``<eos>``, ``</s>``, ``<|endoftext|>``, ``<|end_of_text|>``, ``<|end|>``, ``[/INST]``) or
   turn-start token (``<|im_start|>ROLE``, ``<start_of_turn>ROLE``,
   ``<|start_header_id|>ROLE<|end_header_id|>``, ``<|user|>``, ``<|assistant|>``,
   ``[INST]``). What follows (a new turn the model invented) is dropped. Padding tokens
   (``<s>``, ``<bos>``, ``<|begin_of_text|>``, ``[gMASK]``, ``<sop>``, ``<eop>``) are
   dropped wherever they are. A reply closed by such a token was not cut by the token limit.
4. Reasoning is removed: text after the last ``</think>`` (or Gemma's ``<unused95>``, or a
   ``## Final Response`` heading) is kept; an unclosed ``<think>`` / ``<unused94>``, or a reply
   that opens with a ``## Thinking`` heading and never reaches ``## Final Response``, leaves
   nothing after it, so the answer is ``truncated`` when the output hit the token limit and
   ``unparseable`` otherwise.
5. Wrappers are removed: other ``<unusedN>`` tokens, ``$``, the LaTeX delimiters ``\(``
   ``\)`` ``\[`` ``\]``, ``\text{..}``-style commands, markdown emphasis, code ticks and
   heading marks. An ``<answer>..</answer>`` tag counts as an ``Answer:`` line, and so does a
   GLM ``<|begin_of_box|>..<|end_of_box|>`` or a ``\boxed{..}`` whose content is an answer;
   its payload runs to the end of its line. A box holding anything else (``\boxed{3.5 cm}``)
   is plain text.
6. The *last* ``Answer:`` declaration wins (the rest of its line; if empty, the next non-empty
   line); without one, the last "the answer is ..." phrase; without either, a one-line bare
   response.
7. That payload is read whole or not at all. It must be, from its start, an *answer*:

   * option numbers (``2``, ``(2)``, ``[2]``, ``option 2``, or ``2)``/``2]`` with a lone
     closing bracket), each optionally followed by its own option text (``2: No``,
     ``(1) Yes``, ``1. Yes``, ``2 (No)``, ``[2] "No"``, ``2 - 2 zones``) and, before the next
     number, by its own bracketed note (``1 (red), 3 (yellow)``), joined by commas,
     semicolons, ``&`` or ``and``; a lone opening bracket (``(2``) is not an answer;
   * or the text of an option, case-insensitive; also the text without a trailing
     parenthetical when that names one option only (``None of the above`` for
     ``None of the above (options 1-3)``), and for multi-select questions ``none`` /
     ``none of the above`` for the "None" option; or several option texts joined by commas;

   optionally followed by a *justification*: text after ``because``, ``since``, ``given
   that`` or ``due to`` (any text), or after a dash (`` - ``, ``–``, ``—``), colon,
   semicolon, period or opening bracket (text that starts with a letter, not with a hedge
   word such as ``or``, ``and``, ``maybe``, and not with the text of an option that was not
   chosen). A single-choice number that echoed its option text may also take a comma and
   a justification (``(2) No, the mask ...``). No justification or note names an option that
   was not chosen: by an integer or ordinal that is not a decimal, fraction or measurement
   (``1, because 3 is also ...``), by an option text of two or more words or with a digit,
   or by an option text next to a number. Nothing else may follow: words after a bare
   space are not a justification (``Answer: 2 zones`` is option 2 only when that is its text).
8. Out-of-range numbers, several numbers for a single-choice question, or "None" together with
   other options make the answer ``unparseable``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from utils.status import Status

#: Parse statuses (``utils.status.Status``); anything but ``ok`` scores as wrong.
OK, UNPARSEABLE, REFUSED = Status.OK, Status.UNPARSEABLE, Status.REFUSED
TRUNCATED, ERROR, BLOCKED = Status.TRUNCATED, Status.ERROR, Status.BLOCKED

#: Finish reasons meaning "stopped at the token limit" (vLLM/OpenAI, Anthropic, Gemini).
LENGTH_FINISH_REASONS = frozenset({"length", "max_tokens", "MAX_TOKENS"})


@dataclass(frozen=True)
class ParsedAnswer:
    """Result of parsing one response.

    Attributes:
        answer: Sorted distinct 1-based option indices, or None unless ``status == "ok"``.
        status: One of ``ok``, ``unparseable``, ``refused``, ``truncated``, ``error``,
            ``blocked``.
        detail: Why the answer was not accepted ('' when ok).
    """

    answer: tuple[int, ...] | None
    status: str
    detail: str = ""

    @property
    def text(self) -> str:
        """The parsed answer as stored in ``all_results.json`` (``"2"``, ``"1,3"``; '' if none)."""
        return ",".join(str(i) for i in self.answer) if self.answer else ""


# Full-width forms (docs/parsing.md, "Parser rules", rule 2): an explicit table rather than
# NFKC, which would also rewrite ligatures, superscripts and other letters of the reply.
_FULL_WIDTH = str.maketrans({
    "：": ":", "（": "(", "）": ")", "，": ",", "、": ",", "；": ";", "［": "[", "］": "]",
    "【": "[", "】": "]", "．": ".", "。": ".", "－": "-", "\u3000": " ",
    **{chr(0xFF10 + d): str(d) for d in range(10)},
    # invisible characters a server or a tokenizer leaves in (zero-width spaces, joiners, BOM)
    **dict.fromkeys(("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"), ""),
})

# Chat-template tokens (docs/parsing.md, "Parser rules", rule 3). Turn starts may carry a role;
# ``[/INST]`` ends the user's turn, so what follows it is the assistant's.
_ROLES = "assistant|user|system|model|tool|ipython|developer|human|observation"
_PROMPT_ROLES = frozenset({"user", "system", "developer", "human", "tool", "ipython",
                           "observation"})
# Every token starts with "<" or "[" (``_first_turn_mark`` relies on it).
_TURN_MARK = re.compile(
    rf"<(?:(?:\|im_start\||start_of_turn)>[ \t]*(?:(?P<role>{_ROLES})(?![A-Za-z]))?"
    r"|\|start_header_id\|>\s*(?P<hrole>[A-Za-z_]*)\s*<\|end_header_id\|>"
    r"|\|(?P<grole>user|assistant|system|observation)\|>"
    r"|(?P<end>\|im_end\|>|\|eot_id\|>|\|eom_id\|>|end_of_turn>|/s>|eos>|\|endoftext\|>"
    r"|\|end_of_text\|>|\|end\|>)"
    r"|(?P<noise>s>|bos>|\|begin_of_text\|>|sop>|eop>|\|start_header_id\|>|\|end_header_id\|>))"
    r"|\[(?:(?P<inst>INST\])|(?P<endinst>/INST\])|(?P<pad>gMASK\]))")

_CLOSE_TAGS = re.compile(r"</think\s*>|<unused95>", re.IGNORECASE)
_OPEN_TAGS = re.compile(r"<think\s*>|<unused94>", re.IGNORECASE)
# Case-sensitive, so that ``_strip_reasoning`` can look for "esponse"/"ESPONSE" first.
_FINAL_RESPONSE = re.compile(
    r"^[ \t]*#+[ \t]*(?:[Ff]inal[ \t]+[Rr]esponse|FINAL[ \t]+RESPONSE)[ \t]*:?", re.M)
_THINKING_HEADING = re.compile(r"\s*#+[ \t]*thinking\b", re.IGNORECASE)
_UNUSED = re.compile(r"<unused\d+>")
_GLM_BOX_OPEN = re.compile(r"<\|begin_of_box\|>")
_GLM_BOX_CLOSE = re.compile(r"<\|end_of_box\|>")
#: A box: ``\boxed{..}`` (group 1) or GLM's ``<|begin_of_box|>..<|end_of_box|>`` (group 2).
_BOX = re.compile(r"\\boxed\s*\{([^{}]*)\}|<\|begin_of_box\|>(.*?)<\|end_of_box\|>", re.DOTALL)
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
#: LaTeX math delimiters ``\(`` ``\)`` ``\[`` ``\]``, removed like ``$``.
_LATEX_MATH = re.compile(r"\\[()\[\]]")
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
#: First and last characters that enclose a whole payload (``[1, 3]``, ``"2"``).
_ENCLOSERS = ("[]", "()", "{}", '""', "''", "“”")
# A number: ``(2)``, ``[2]``, or ``2`` optionally closed by a lone ``)``/``]`` (``2)``).
_NUMBER_ITEM = re.compile(
    r"(?:options?\s*)?(?:\(\s*(\d+)\s*\)|\[\s*(\d+)\s*\]|(\d+)(?!\d)(?!\.\d)[)\]]?)",
    re.IGNORECASE)
_SEPARATOR = re.compile(r"\s*(?:,\s*(?:and\s+)?|;\s*|&\s*|and\s+)", re.IGNORECASE)
_TEXT_LEAD = re.compile(r"\s*(?:[:\-–—.]\s*)?")
#: A bracketed note after one number of a list (``1 (red), 3 (yellow)``), without nesting.
_NOTE = re.compile(r"\s*(?:\([^()\[\]]*\)|\[[^()\[\]]*\])")
#: An integer (or ordinal, ``3rd``) in prose: not part of a word, a decimal (``3.5``) or a
#: fraction (``1/3``), and not a measurement (``3 cm``, ``40%``).
_NUMBER_MENTION = re.compile(
    r"(?<![A-Za-z0-9/])(?<!\d\.)(\d+)(?:st|nd|rd|th)?"
    r"(?![A-Za-z0-9/]|\.\d|\s*(?:mm|cm|%|°|px|pixels?|degrees?)(?![A-Za-z]))",
    re.IGNORECASE)
#: What may stand between a number and its option text in an answer item (``(2) Yes``).
_ITEM_TEXT_LEAD = re.compile(r"[)\]]?\s*(?:[:\-–—.]\s*)?")
# What introduces a justification (docs/parsing.md, "Parser rules", rule 7). A hyphen-minus
# needs a space on one side, so ``2-3`` and ``2-zone`` are not a number and a justification.
_JUSTIFY_LEAD = re.compile(
    r"(?P<word>\s*,?\s+(?:because|since|given\s+that|due\s+to)\b)"
    r"|\s*\.\s*"
    r"|(?P<comma>\s*,\s*)"
    r"|\s+-\s*|\s*-\s+|\s*[–—:;]\s*|\s*[(\[]\s*", re.IGNORECASE)
#: Words that open a hedge rather than a justification (``2 - or 3``, ``2 (maybe 3)``).
_HEDGE_START = re.compile(
    r"(?:or|nor|and|maybe|perhaps|possibly|either|to|through|vs|versus|also|plus)(?![A-Za-z])",
    re.IGNORECASE)
#: A trailing parenthetical of an option text (``None of the above (options 1-3)``).
_PARENTHETICAL_TAIL = re.compile(r"\s*\([^()]*\)\s*\.?$")
#: Phrases that select the "None" option of a multi-select question.
_NONE_PHRASES = ("none", "none of the above", "none of these", "none of them",
                 "none of the options")
_QUOTES = "\"'“‘"
_REFUSAL = re.compile(
    r"\b(?:i'?m sorry|i am sorry|i cannot|i can'?t|i can not|i am unable|i'?m unable|"
    r"i am not able|i'?m not able|unable to (?:provide|assist|help)|as an ai)\b", re.IGNORECASE)
#: Words one of which every ``_REFUSAL`` match contains (lower-case ASCII text).
_REFUSAL_WORDS = ("sorry", "i can", "unable", "not able", "as an ai")


def _is_refusal(text: str) -> bool:
    """Whether ``text`` contains a refusal phrase (``_REFUSAL``)."""
    if text.isascii():  # skip the regex scan when no refusal word is present
        low = text.lower()
        if not any(word in low for word in _REFUSAL_WORDS):
            return False
    return _REFUSAL.search(text) is not None


def _to_ascii_forms(text: str) -> str:
    """``text`` with the full-width forms of ``_FULL_WIDTH`` mapped to ASCII."""
    return text if text.isascii() else text.translate(_FULL_WIDTH)


def _turn_role(m: re.Match[str]) -> str | None:
    """Role of the turn that the chat-template token ``m`` starts (None: the reply's own)."""
    if m.group("inst") is not None:
        return "user"
    role = m.group("role") or m.group("hrole") or m.group("grole")
    return role.lower() if role else None


def _first_turn_mark(text: str) -> re.Match[str] | None:
    """The first chat-template token in ``text``, or None.

    Same result as ``_TURN_MARK.search``, but the pattern is tried only at each "<" and "["
    (a reply holds few), which is several times faster on long reasoning.
    """
    best: re.Match[str] | None = None
    for char in "<[":
        at = text.find(char)
        while at >= 0 and (best is None or at < best.start()):
            m = _TURN_MARK.match(text, at)
            if m is not None:
                best = m
                break
            at = text.find(char, at + 1)
    return best


def _reply_turn(text: str) -> tuple[str, bool]:
    """The reply's own turn, without chat-template tokens, and whether a token ended it.

    The reply is the first non-blank stretch between turn boundaries (end-of-turn and
    turn-start tokens) that is not a user/system turn; padding tokens are dropped.
    """
    first = _first_turn_mark(text)
    if first is None:
        return text, False
    role: str | None = None
    pieces: list[str] = []
    pos = 0
    for m in _TURN_MARK.finditer(text, first.start()):
        pieces.append(text[pos:m.start()])
        pos = m.end()
        if m.group("noise") is not None or m.group("pad") is not None:
            continue
        segment = "".join(pieces)
        pieces = []
        if role not in _PROMPT_ROLES and segment.strip():
            return segment, True
        role = _turn_role(m)
    pieces.append(text[pos:])
    return ("" if role in _PROMPT_ROLES else "".join(pieces)), False


def _strip_reasoning(text: str) -> tuple[str, bool]:
    """Text after the last reasoning block, and whether a reasoning block was left open."""
    tail = text
    if "<" in tail:  # every reasoning tag starts with "<"
        closes = list(_CLOSE_TAGS.finditer(tail))
        if closes:
            tail = tail[closes[-1].end():]
    if "#" in tail:  # HuatuoGPT's "## Thinking" ... "## Final Response"
        heads = (list(_FINAL_RESPONSE.finditer(tail))
                 if "esponse" in tail or "ESPONSE" in tail else [])
        if heads:
            tail = tail[heads[-1].end():]
        elif _THINKING_HEADING.match(tail):
            return "", True
    if "<" in tail:
        opened = _OPEN_TAGS.search(tail)
        if opened:
            return tail[:opened.start()], True
    return tail, False


def _clean(text: str, is_answer: Callable[[str], bool]) -> str:
    """``text`` without wrappers, with each box that declares an answer made an ``Answer:`` line.

    See docs/parsing.md, "Parser rules", rule 5. ``is_answer`` tells whether a box's content,
    read alone, is an answer to the question.
    """
    # Each substitution runs only when the text holds a character its pattern needs (same
    # result, fewer regex scans).
    glm_box = False
    if "<" in text:
        if "<unused" in text:
            text = _UNUSED.sub("", text)
        text = _ANSWER_TAG_OPEN.sub("\nAnswer: ", text)
        text = _ANSWER_TAG_CLOSE.sub("\n", text)
        glm_box = "_box|>" in text
    boxed = False
    if "\\" in text:
        for _ in range(3):  # nested \text{..} inside \boxed{..}
            text = _TEXT_CMD.sub(r"\1", text)
        text = _LATEX_MATH.sub("", text)
        boxed = "boxed" in text
    # Removing every "*" also removes "**" (markdown bold).
    text = text.replace("$", "").replace("__", "").replace("`", "").replace("*", "")
    if "#" in text:
        text = _HEADING.sub("", text)
    if boxed or glm_box:
        text = _declare_boxes(text, is_answer)
    if glm_box:  # a GLM box token without its partner still declares (opening) or ends
        text = _GLM_BOX_OPEN.sub("\nAnswer: ", text)
        text = _GLM_BOX_CLOSE.sub("\n", text)
    return text


def _declare_boxes(text: str, is_answer: Callable[[str], bool]) -> str:
    r"""``text`` with each box (``_BOX``) replaced by its content, declared where it is an answer.

    The first box on a line whose content ``is_answer`` starts an ``Answer:`` declaration, so
    its payload is the content and the rest of the line; later boxes on that line are part of
    that payload (``\boxed{1}, \boxed{3}`` is ``1, 3``). A box holding anything else (a
    measurement such as ``\boxed{3.5 cm}``) is plain text and declares nothing
    (docs/parsing.md, "Parser rules", rule 5).
    """
    pieces: list[str] = []
    pos, line_declared = 0, False
    for m in _BOX.finditer(text):
        before = text[pos:m.start()]
        if "\n" in before:
            line_declared = False
        pieces.append(before)
        content = m.group(1) if m.group(1) is not None else m.group(2)
        if not line_declared and is_answer(content):
            pieces.append("\nAnswer: ")
            line_declared = True
        pieces.append(content)
        if "\n" in content:
            line_declared = False
        pos = m.end()
    pieces.append(text[pos:])
    return "".join(pieces)


def _payload_after(text: str, end: int, *, next_line: bool) -> str:
    rest = text[end:]
    line, _, after = rest.partition("\n")
    if not line.strip() and next_line:
        for candidate in after.split("\n"):
            if candidate.strip():
                line = candidate
                break
    return line.strip()


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


def _text_pattern(text: str) -> re.Pattern[str]:
    """Pattern of a normalised option text, bare, in brackets or in quotes, at a word end."""
    body = r"\s+".join(re.escape(word) for word in text.split(" "))
    # A full stop after a bare form is left to the caller (end of answer or a justification).
    return re.compile(rf"(?:\(\s*{body}\s*\.?\s*\)|[\"'“‘]{body}\.?[\"'”’]|{body})"
                      r"(?![A-Za-z0-9])", re.IGNORECASE)


@dataclass(frozen=True)
class _OptionForms:
    """The written forms of a question's options (docs/parsing.md, "Parser rules", rule 7).

    Attributes:
        by_text: Normalised form -> 1-based option index.
        prefixes: (index, pattern) of every form, longest form first.
        echoes: Index -> patterns of that option's forms, longest first.
        initials: First characters of the forms (skips the prefix scan for other payloads).
        shortest: Length of the shortest form (a shorter payload is no form and more).
        mentions: Finds, anywhere in a text, the forms that name their option in prose (those
            of two or more words or with a digit), longest first; None if there are none.
        mention_index: Group name of ``mentions`` -> 1-based option index.
    """

    by_text: dict[str, int]
    prefixes: tuple[tuple[int, re.Pattern[str]], ...]
    echoes: dict[int, tuple[re.Pattern[str], ...]]
    initials: frozenset[str]
    shortest: int
    mentions: re.Pattern[str] | None
    mention_index: dict[str, int]


@functools.lru_cache(maxsize=1024)
def _option_forms(option_texts: tuple[str, ...], none_index: int | None) -> _OptionForms:
    """Forms of the options: full texts, unambiguous short forms, and "None" phrases.

    ``none_index`` is the "None" option of a multi-select question (None otherwise).
    """
    full = [_norm(_to_ascii_forms(option)) for option in option_texts]
    by_text: dict[str, int] = {}
    for i, option in enumerate(full, start=1):
        by_text.setdefault(option, i)
    extra: dict[str, set[int]] = {}
    for i, option in enumerate(full, start=1):
        short = _norm(_PARENTHETICAL_TAIL.sub("", option))
        if short and short != option:
            extra.setdefault(short, set()).add(i)
    if none_index is not None:
        for phrase in _NONE_PHRASES:
            extra.setdefault(phrase, set()).add(none_index)
    for form, indices in extra.items():
        if len(indices) == 1 and form not in by_text:  # full texts win; ambiguity drops a form
            by_text[form] = next(iter(indices))
    by_text.pop("", None)
    ordered = sorted(by_text.items(), key=lambda item: -len(item[0]))
    prefixes = tuple((i, _text_pattern(form)) for form, i in ordered)
    echoes: dict[int, tuple[re.Pattern[str], ...]] = {}
    for i, pattern in prefixes:
        echoes[i] = (*echoes.get(i, ()), pattern)
    initials = frozenset(form[0] for form in by_text) | frozenset("(" + _QUOTES)
    shortest = min((len(form) for form in by_text), default=0)
    # One-word forms (``Yes``, ``No``, ``None``) are ordinary words of a justification
    # ("no other region"); they are refused only where a justification starts.
    named = [(form, i) for form, i in ordered if " " in form or any(c.isdigit() for c in form)]
    mention_index = {f"m{k}": i for k, (_, i) in enumerate(named)}
    mentions = re.compile("|".join(
        rf"(?P<m{k}>(?<![A-Za-z0-9])" + r"\s+".join(map(re.escape, form.split(" ")))
        + r"(?![A-Za-z0-9]))" for k, (form, _) in enumerate(named)),
        re.IGNORECASE) if named else None
    return _OptionForms(by_text, prefixes, echoes, initials, shortest, mentions, mention_index)


def _names_other_option(text: str, chosen: set[int], forms: _OptionForms) -> bool:
    """Whether ``text`` (a justification or note) names an option outside ``chosen``.

    An option is named by a form of its text of two or more words or with a digit
    (``yellow point``, ``3 zones``), or by any form of its text written after a number as in
    an answer item (``2 - Yes``). Any integer or ordinal in prose that is not a chosen
    option number counts as naming another option, whatever its value (``1 - red, 0`` states
    two numbers), unless it is part of a decimal, a fraction or a measurement
    (docs/parsing.md, "Parser rules", rule 7). The chosen options' own texts are skipped
    before numbers are looked for (``4 (None of the above (options 1-3))``).
    """
    if forms.mentions is not None:
        kept: list[str] = []
        pos = 0
        for m in forms.mentions.finditer(text):
            if forms.mention_index[m.lastgroup or ""] not in chosen:
                return True
            kept.append(text[pos:m.start()])
            pos = m.end()
        if kept:
            text = " ".join(kept) + " " + text[pos:]
    for m in _NUMBER_MENTION.finditer(text):
        if int(m.group(1)) not in chosen:
            return True
        # a number written with another option's text reads as an answer item (``2 - Yes``)
        at = _ITEM_TEXT_LEAD.match(text, m.end()).end()
        if any(i not in chosen and p.match(text, at) for i, p in forms.prefixes):
            return True
    return False


def _is_justification(rest: str, chosen: set[int], forms: _OptionForms, *,
                      allow_comma: bool) -> bool:
    """Whether ``rest`` (the text after an answer) is a justification, not more of an answer.

    See docs/parsing.md, "Parser rules", rule 7: ``because``-style words introduce any text;
    after punctuation the text must start with a letter, not with a hedge word and not with
    the text of an option outside ``chosen`` (``1. No`` is option 1 with option 2's text). A
    comma leads a justification only where ``allow_comma``. In every case the text must not
    name an option outside ``chosen`` (``_names_other_option``), so that a justification
    never hides part of the answer (``1, because 3 is also ...``).
    """
    m = _JUSTIFY_LEAD.match(rest)
    if m is None:
        return False
    text = rest[m.end():]
    if m.group("word") is not None:
        return bool(text.strip()) and not _names_other_option(text, chosen, forms)
    if m.group("comma") is not None and not allow_comma:
        return False
    text = text.lstrip(_QUOTES)
    if not text[:1].isalpha() or _HEDGE_START.match(text):
        return False
    if any(i not in chosen and p.match(text) for i, p in forms.prefixes):
        return False
    return not _names_other_option(text, chosen, forms)


def _ends_item(s: str, pos: int) -> bool:
    """Whether an answer item may end at ``pos``: end, separator or justification follows."""
    rest = s[pos:]
    return (not rest.strip() or _SEPARATOR.match(rest) is not None
            or _JUSTIFY_LEAD.match(rest) is not None)


def _match_option(text: str, forms: _OptionForms) -> int | None:
    target = _norm(text)
    return forms.by_text.get(target) if target else None


def _parse_option_texts(payload: str, forms: _OptionForms) -> list[int] | None:
    whole = _match_option(payload, forms)
    if whole is not None:
        return [whole]
    for splitter in _TEXT_SPLITTERS:
        parts = [p for p in splitter.split(payload.strip().rstrip(".")) if p]
        if len(parts) < 2:
            continue
        found = [_match_option(p, forms) for p in parts]
        if all(i is not None for i in found):
            return [i for i in found if i is not None]
    # A form and a justification are longer than the form; an ASCII payload can only start
    # with a form's first letter or "(" (IGNORECASE folds a few non-ASCII letters to ASCII).
    if len(payload) <= forms.shortest or (payload.isascii()
                                          and payload[:1].lower() not in forms.initials):
        return None
    for i, pattern in forms.prefixes:  # one option's text, then a justification
        m = pattern.match(payload)
        if m and _is_justification(payload[m.end():], {i}, forms, allow_comma=False):
            return [i]
    return None


def _skip_option_text(s: str, pos: int, number: int, forms: _OptionForms) -> int:
    """Position after ``number``'s own option text at ``pos`` (as in ``(2) No``), else ``pos``.

    The echo counts only where an answer item may end (``2 - no lesion is missed`` is the
    number 2 and a justification, not 2, "No" and stray words).
    """
    patterns = forms.echoes.get(number)
    if not patterns:
        return pos
    lead = _TEXT_LEAD.match(s, pos)
    start = lead.end() if lead else pos
    for pattern in patterns:
        m = pattern.match(s, start)
        if m and _ends_item(s, m.end()):
            return m.end()
    return pos


def _parse_numbers(payload: str, forms: _OptionForms, multi_select: bool) -> list[int] | None:
    """Option numbers of ``payload`` (rule 7 of docs/parsing.md, "Parser rules"), or None.

    Every number is read, each with its own option text or bracketed note; whatever follows
    the last one must be a justification that names no other option.
    """
    s = payload.strip()
    whole = s[:-1].rstrip() if s.endswith(".") else s  # "The answer is [1, 3]."
    if len(whole) >= 2 and whole[0] + whole[-1] in _ENCLOSERS and not _BRACKETS.search(
            whole[1:-1]):
        s = whole[1:-1].strip()
    pos, numbers, echoed = 0, [], False
    while True:
        while pos < len(s) and s[pos].isspace():
            pos += 1
        m = _NUMBER_ITEM.match(s, pos)
        if not m:
            return None
        number = int(next(g for g in m.groups() if g is not None))
        numbers.append(number)
        pos = _skip_option_text(s, m.end(), number, forms)
        echoed = pos != m.end()
        sep = _SEPARATOR.match(s, pos)
        if sep is None and pos < len(s):
            # A bracketed note of this number's own (``1 (red), 3 (yellow)``) is read only
            # when another number follows it; after the last number it is a justification.
            note = _NOTE.match(s, pos)
            if note and _is_justification(note.group(), {number}, forms, allow_comma=False):
                sep = _SEPARATOR.match(s, note.end())
        if sep and _NUMBER_ITEM.match(s, sep.end()):
            pos = sep.end()
            continue
        break
    rest = s[pos:]
    if rest.strip() in ("", "."):
        return numbers
    allow_comma = echoed and not multi_select
    return numbers if _is_justification(rest, set(numbers), forms,
                                        allow_comma=allow_comma) else None


def parse_payload(payload: str, option_texts: Sequence[str] = (), *,
                  multi_select: bool = False, none_index: int | None = None) -> list[int] | None:
    """Option indices declared by an answer payload (the text after ``Answer:``), or None.

    Args:
        payload: One line of text.
        option_texts: Option labels in order (exact, case-insensitive text answers).
        multi_select: For multi-select questions ``none`` / ``none of the above`` select
            ``none_index``, and a comma after an answer always continues a list.
        none_index: 1-based index of the "None" option, if any.

    Returns:
        Indices in the order given (not yet range-checked), or None if the payload is not, in
        full, an answer optionally followed by a justification that names no other option.
    """
    if not payload.isascii():
        payload = payload.translate(_FULL_WIDTH)
    payload = payload.strip()
    if not payload:
        return None
    forms = _option_forms(tuple(option_texts), none_index if multi_select else None)
    by_text = _parse_option_texts(payload, forms)
    if by_text is not None:
        return by_text
    return _parse_numbers(payload, forms, multi_select)


def parse_answer(raw: str | None, *, num_options: int, multi_select: bool = False,
                 option_texts: Sequence[str] = (), none_index: int | None = None,
                 finish_reason: str | None = None,
                 completion_status: str = "ok") -> ParsedAnswer:
    """Parse one raw response strictly (see docs/parsing.md, "Parser rules").

    Args:
        raw: Raw model output (None or '' when the provider returned nothing).
        num_options: Number of options; indices outside 1..num_options are unparseable.
        multi_select: True for set answers (expansion, contraction, location).
        option_texts: Option labels in order, for exact text answers ("Yes", "red point").
        none_index: 1-based index of the "None" option of a multi-select question; it is only
            valid alone.
        finish_reason: Provider finish reason; ``length`` turns a missing answer into
            ``truncated`` unless an end-of-turn token closed the reply.
        completion_status: The provider's status (``ok``, ``refused``, ``truncated``,
            ``error``, ``blocked``).

    Returns:
        The parsed answer and its status.
    """
    if completion_status == ERROR:
        return ParsedAnswer(None, ERROR, "provider error")
    if completion_status == REFUSED:
        return ParsedAnswer(None, REFUSED, "provider refused")
    if completion_status == BLOCKED:
        return ParsedAnswer(None, BLOCKED, "provider blocked the response")
    text = raw or ""
    if not text.isascii():
        text = text.translate(_FULL_WIDTH)
    if "\x00" in text:  # NUL bytes (a broken detokenizer): not part of any answer
        text = text.replace("\x00", "")
    reply, turn_closed = text, False
    if "<" in text or "[" in text:  # every chat-template token starts with one of them
        reply, turn_closed = _reply_turn(text)
    cut_off = not turn_closed and (completion_status == TRUNCATED
                                   or finish_reason in LENGTH_FINISH_REASONS)
    final, unclosed = _strip_reasoning(reply)

    boxes: dict[str, list[int] | None] = {}

    def _box_is_answer(content: str) -> bool:
        # Whether a box declares (rule 5). Its content is most often the whole payload then,
        # so the reading is kept.
        key = content.strip()
        if key not in boxes:
            boxes[key] = parse_payload(key, option_texts, multi_select=multi_select,
                                       none_index=none_index)
        return boxes[key] is not None

    final = _clean(final, _box_is_answer).strip()

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
    indices = boxes[payload] if payload in boxes else parse_payload(
        payload, option_texts, multi_select=multi_select, none_index=none_index)
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
