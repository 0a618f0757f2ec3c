r"""Stage 03: strict answer parsing of raw model output into option indices and a status.

The parser reads only what the model declared; it never guesses. The release's fallback of
taking *all integers anywhere in the text* is not reproduced (docs/differences.md D34): text that
does not commit to an answer is ``unparseable``. The rules below are applied in this order;
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
   boxes joined by list separators are one list. A box holding anything else
   (``\boxed{3.5 cm}``) is plain text.
6. The cleaned text is read by the statement grammar (``answer_grammar.read_statement``;
   docs/parsing.md, "Statement grammar"): a statement is a marker (``Answer:``, a box, "the
   answer is", "I would select", ...) and an option list, or a committing sentence; the list
   ends at a clause boundary, after which everything is explanation; the last committing
   statement wins, a later retraction voids it, and a hedged, amended or contradictory list
   is read as nothing, never in part.
7. Out-of-range numbers, several numbers for a single-choice question, or "None" together with
   other options make the answer ``unparseable``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chexpercept.evaluation.answer_grammar import READ, option_forms, read_list
from chexpercept.evaluation.answer_statements import read_statement
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
#: What may stand between two boxes of one list (``boxed{1}, boxed{3}``).
_BOX_LIST_GAP = re.compile(r"\s*(?:,|;|&|and|,\s*and)?\s*", re.IGNORECASE)
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
#: LaTeX math delimiters ``\(`` ``\)`` ``\[`` ``\]``, removed like ``$``.
_LATEX_MATH = re.compile(r"\\[()\[\]]")
_ANSWER_TAG_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_TAG_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
_HEADING = re.compile(r"(?m)^\s*#+\s*")
#: What may end a reply cut off by the token limit right after its answer list: the start of
#: a clause that never came ("Answer: 2, but"), so the list may have gone on.
_DANGLING = re.compile(r"\s*(?:[,;:\-–—(&]\s*[\w']*|[\w']+)\s*")
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

    A box whose content ``is_answer`` starts an ``Answer:`` declaration, so its list is the
    content and what follows on the line; a later box joined to it by list separators only is
    part of that list (``\boxed{1}, \boxed{3}`` is ``1, 3``), any other later box starts a
    statement of its own (``\boxed{1} ... on reflection \boxed{4}``). A box holding anything else (a
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
        if line_declared and not _BOX_LIST_GAP.fullmatch(before):
            line_declared = False  # "boxed{1} ... on reflection boxed{4}": a new statement
        if not line_declared and is_answer(content):
            pieces.append("\nAnswer: ")
            line_declared = True
        pieces.append(content)
        if "\n" in content:
            line_declared = False
        pos = m.end()
    pieces.append(text[pos:])
    return "".join(pieces)


def parse_payload(payload: str, option_texts: Sequence[str] = (), *,
                  multi_select: bool = False, none_index: int | None = None) -> list[int] | None:
    """Option indices that ``payload``, read alone as an option list, states; or None.

    The list must start the payload and end at a clause boundary (docs/parsing.md, "Statement
    grammar"); what follows the boundary is explanation.

    Args:
        payload: Text that should open with an option list (a box's content, the rest of an
            ``Answer:`` line).
        option_texts: Option labels in order (text answers such as "Yes", "red point").
        multi_select: Whether ``none`` phrases select ``none_index``.
        none_index: 1-based index of the "None" option, if any.

    Returns:
        Indices in the order written (not range-checked), or None if the payload does not
        open with an option list that is read whole.
    """
    payload = _to_ascii_forms(payload).strip()
    if not payload:
        return None
    forms = option_forms(tuple(option_texts), none_index if multi_select else None)
    reading = read_list(payload, 0, forms)
    return list(reading.indices) if reading.kind == READ else None


def parse_answer(raw: str | None, *, num_options: int, multi_select: bool = False,
                 option_texts: Sequence[str] = (), none_index: int | None = None,
                 finish_reason: str | None = None,
                 completion_status: str = "ok", question: str = "") -> ParsedAnswer:
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
        question: The question as asked (options included), or ''; a reply that repeats
            the point questions' verb ("should be expanded toward the red point") states its
            answer with it (docs/parsing.md, "Statement grammar").

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
    decision = read_statement(final, option_texts,
                              none_index=none_index if multi_select else None,
                              multi_select=multi_select, question=question,
                              cut_off=cut_off)
    if decision.indices is None:
        return _missing(decision.detail)
    if cut_off and _DANGLING.fullmatch(final[decision.end:]):
        return _missing("the answer is cut off after its list")  # "Answer: 2, but"
    if unclosed:  # "Answer: 1 <think> hmm, actually ...": reasoning reopened, never closed
        return _missing("a reasoning block opens after the answer and never closes")
    indices = decision.indices
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
