"""Stage 03: one multi-turn conversation per case, with the three oracle settings.

Implements docs/evaluation_protocol.md, "Turn order", "Prompt structure" and "Oracle settings"
(wording of the system prompt and of the explicit-oracle paragraphs is ours; their content is
the release's):

- every request resends the whole history, earlier images included, and replays the assistant's
  raw text (docs/evaluation_protocol.md, "Prompt structure");
- ``none``: nothing is injected (End-to-End);
- ``implicit`` (Oracle-Passed): when the step before a stage was wrong, the wrong assistant
  turn(s) are overwritten with the ground truth ``Answer: N`` (lists sorted, comma-joined) and
  the original raw text is kept as the 4th element of that ``chat_history`` entry;
- ``explicit``: under the same conditions a "Ground Truth Provided: ..." paragraph is put before
  the next question instead.

Trigger conditions (docs/evaluation_protocol.md, "Oracle settings"): before Stage 2, detection
wrong; before Stage 3 (expansion), contour evaluation wrong; before the revision result,
expansion or contraction wrong; before Stage 4 (distribution), contour evaluation wrong on the
revision-free path and the revision result wrong on the revision-required path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.bundle import ordinal
from chexpercept.evaluation.cases import EvalCase, PlannedTurn
from chexpercept.evaluation.option_order import ROTATION_MARK
from chexpercept.evaluation.parsing import ParsedAnswer
from chexpercept.layouts import ORACLE_SETTINGS
from utils.llm.base import Message, TurnRequest
from utils.status import Status

#: System message of every request (docs/evaluation_protocol.md, "Prompt structure"; our
#: wording, the release's meaning).
SYSTEM_PROMPT = (
    "You are an expert radiologist. Examine the chest X-ray image(s) and answer each "
    "multiple-choice question about them. Think through the findings as needed, then finish "
    "your response with a final line of the form 'Answer: <option number(s)>' that gives only "
    "the option number(s), separated by commas when several options apply "
    "(for example 'Answer: 1' or 'Answer: 1,3')."
)

_ABSOLUTE = "Treat this as an absolute fact and disregard your previous answer."


def system_prompt_sha256(text: str = SYSTEM_PROMPT) -> str:
    """sha256 of the system prompt (recorded in the run manifest)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def request_id(key_id: str, turn_name: str, sample: int = 0) -> str:
    """The id of one turn's request: ``<key_id>/<turn name>`` (logs, records, answer keys).

    A rotation of a circular run (turn name ``<name>@r<k>``) is its own dialogue branch:
    ``<key_id>@r<k>/<name>`` (docs/evaluation_protocol.md, "Option order"). Sample k >= 1 of a
    ``--samples K`` run appends ``/sample<k>`` (docs/evaluation_protocol.md, "Sampling"), so its
    draws and logs differ from sample 0's.
    """
    name, mark, k = turn_name.partition(ROTATION_MARK)
    base = f"{key_id}{ROTATION_MARK}{k}/{name}" if mark else f"{key_id}/{turn_name}"
    return f"{base}/sample{sample}" if sample else base


def answer_key(cases: Iterable[EvalCase], samples: int = 1) -> dict[str, int | tuple[int, ...]]:
    """request_id -> ground truth of every turn of ``cases`` (each of ``samples`` samples).

    The one channel by which a provider may learn the answers (the ``oracle`` baseline); no
    request carries them (docs/evaluation_protocol.md, "Providers").

    Returns:
        A 1-based option as displayed (docs/evaluation_protocol.md, "Option order"), or the
        sorted tuple of options of a multi-select question, per request id.
    """
    return {request_id(case.key_id, turn.spec.name, k): turn.displayed_ground_truth
            for case in cases for turn in case.turns for k in range(samples)}


def answer_text(ground_truth: int | tuple[int, ...] | list[int]) -> str:
    """The implicit-oracle patch: ``Answer: 2`` or ``Answer: 2,5`` (sorted, comma-joined)."""
    if isinstance(ground_truth, int):
        return f"Answer: {ground_truth}"
    return "Answer: " + ",".join(str(i) for i in sorted(ground_truth))


def colour_phrase(colours: list[str]) -> str:
    """``red point`` / ``red and blue points`` / ``red, blue, and green points``."""
    if len(colours) == 1:
        return f"{colours[0]} point"
    if len(colours) == 2:
        return f"{colours[0]} and {colours[1]} points"
    return ", ".join(colours[:-1]) + f", and {colours[-1]} points"


def _gt_colours(turn: PlannedTurn) -> list[str] | None:
    """Ground-truth point colours in JSON order, or None when the answer is the None option."""
    gt = turn.ground_truth
    indices = list(gt) if isinstance(gt, tuple) else [gt]
    if turn.none_index is not None and indices == [turn.none_index]:
        return None
    texts = turn.original_option_texts  # the ground truth is in original numbers
    return [texts[i - 1].removesuffix(" point") for i in indices]


def explicit_oracle_text(case: EvalCase, turn_name: str) -> str:
    """The "Ground Truth Provided: ..." paragraph placed before ``turn_name`` (explicit setting).

    Args:
        case: The case.
        turn_name: ``contour_evaluation_qa``, ``contour_revision_qa_expansion``,
            ``contour_revision_qa_revision_result`` or ``attribute_extraction_qa_distribution``.

    Returns:
        The paragraph (no trailing blank line).

    Raises:
        ValueError: For a turn that never gets an oracle paragraph.
    """
    lesion = case.lesion
    if turn_name == "contour_evaluation_qa":
        return (f"Ground Truth Provided: {lesion.capitalize()} is definitively present in this "
                f"chest X-ray. "
                f"{_ABSOLUTE}")
    if turn_name == "contour_revision_qa_expansion":
        return (f"Ground Truth Provided: The mask shown for {lesion} definitively needs "
                f"revision. {_ABSOLUTE}")
    if turn_name == "contour_revision_qa_revision_result":
        lines = ["Ground Truth Provided: Treat the following as absolute facts and disregard "
                 "your previous answers."]
        for op, name in (("expansion", "contour_revision_qa_expansion"),
                         ("contraction", "contour_revision_qa_contraction")):
            turn = case.turn(name)
            colours = _gt_colours(turn) if turn is not None else None
            if colours is None:
                lines.append(f"The mask does not need any revision by {op}.")
            else:
                lines.append(f"The mask needs revision by {op} at the "
                             f"{colour_phrase(colours)}.")
        return "\n".join(lines)
    if turn_name == "attribute_extraction_qa_distribution":
        if case.qa_path == "revision_free":
            return (f"Ground Truth Provided: The mask shown for {lesion} definitively does not "
                    f"need revision. {_ABSOLUTE}")
        result = case.turn("contour_revision_qa_revision_result")
        if result is None or not isinstance(result.ground_truth, int):
            raise ValueError(f"{case.key_id}: no revision result to name")
        return (f"Ground Truth Provided: The mask that correctly reflects the requested "
                f"modifications is the {ordinal(result.displayed(result.ground_truth))} mask. "
                f"{_ABSOLUTE}")
    raise ValueError(f"no oracle text before turn {turn_name!r}")


@dataclass
class TurnOutcome:
    """A finished turn: raw text, parse and score.

    Attributes:
        raw: The model's text.
        parsed: The parse.
        correct: Whether it is correct.
        option_probs: With ``--option-probs``, the turn's record field
            (:func:`chexpercept.evaluation.option_probs.turn_option_probs`); else None.
        judge: With ``--judge``, the ``judge`` object of a reply the judge read (its reading
            is ``parsed`` when the status is ``judged``; docs/parsing.md, "Judge model");
            else None.
        judge_audit: With ``--judge``, the ``judge_audit`` object of an audited ``ok`` reply;
            else None.
    """

    raw: str
    parsed: ParsedAnswer
    correct: bool
    option_probs: dict[str, Any] | None = None
    judge: dict[str, Any] | None = None
    judge_audit: dict[str, Any] | None = None

    @property
    def strict_correct(self) -> bool:
        """Whether the turn is correct in the strict reading (a ``judged`` turn is not).

        See docs/parsing.md, "Judge model".
        """
        return self.correct and self.parsed.status != Status.JUDGED


@dataclass(frozen=True)
class PreparedTurn:
    """A turn about to be asked.

    Attributes:
        turn: The planned turn.
        text: The user text sent (oracle paragraph, preamble and question).
        oracle: ``{"setting", "triggered", "prefix", "patched"}``: whether the previous step
            was wrong, the explicit paragraph (or None) and the turns patched (implicit).
        request: The provider request (system prompt + whole history + this turn).
    """

    turn: PlannedTurn
    text: str
    oracle: dict[str, Any]
    request: TurnRequest


@dataclass
class Dialogue:
    """The conversation of one case; replayable from recorded outcomes (resume).

    Attributes:
        case: The case.
        oracle_setting: One of :data:`ORACLE_SETTINGS`.
        system_prompt: System message text.
        history: ``chat_history`` entries ``[text, [image paths], raw(, original raw)]``.
        history_idx: Turn name -> index into ``history`` (``_chat_history_idx``).
        outcomes: Turn name -> outcome (rotations of a circular run included; they never
            enter ``history``).
        sample: Sample index of a ``--samples K`` run (0: the release-shaped one).
        seed: The sample's seed sent with each request (``TurnRequest.seed``); None (a
            one-sample run): the provider's configured seed.
    """

    case: EvalCase
    oracle_setting: str
    system_prompt: str = SYSTEM_PROMPT
    history: list[list[Any]] = field(default_factory=list)
    history_idx: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, TurnOutcome] = field(default_factory=dict)
    sample: int = 0
    seed: int | None = None
    _images: list[tuple[Path, ...]] = field(default_factory=list)
    _asked: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.oracle_setting not in ORACLE_SETTINGS:
            raise ValueError(f"oracle_setting must be one of {ORACLE_SETTINGS}, "
                             f"got {self.oracle_setting!r}")

    @property
    def next_turn(self) -> PlannedTurn | None:
        """The next turn to ask, or None when the case is finished."""
        done = len(self.outcomes)
        return self.case.turns[done] if done < len(self.case.turns) else None

    @property
    def finished(self) -> bool:
        """Whether every turn of the case's path has an outcome."""
        return self.next_turn is None

    def _wrong(self, name: str) -> bool:
        """Whether turn ``name`` was answered wrong, in the strict reading.

        A judged turn counts as wrong, so the oracle fires as in a run without a judge and the
        conversation is that run's (docs/parsing.md, "Judge model").
        """
        outcome = self.outcomes.get(name)
        return outcome is not None and not outcome.strict_correct

    def _trigger(self, name: str) -> list[str]:
        """Earlier turns whose being wrong triggers the oracle before turn ``name``."""
        if name == "contour_evaluation_qa":
            watched = ["detection_qa"]
        elif name == "contour_revision_qa_expansion":
            watched = ["contour_evaluation_qa"]
        elif name == "contour_revision_qa_revision_result":
            watched = ["contour_revision_qa_expansion", "contour_revision_qa_contraction"]
        elif name == "attribute_extraction_qa_distribution":
            watched = (["contour_evaluation_qa"] if self.case.qa_path == "revision_free"
                       else ["contour_revision_qa_revision_result"])
        else:
            watched = []
        return [w for w in watched if self._wrong(w)]

    def _patch(self, name: str) -> None:
        entry = self.history[self.history_idx[name]]
        turn = self.case.turn(name)
        if turn is None or len(entry) > 3:
            return
        original = entry[2]
        entry[2] = answer_text(turn.displayed_ground_truth)
        entry.append(original)

    def prepare(self) -> PreparedTurn:
        """Apply the oracle for the next turn and build its request.

        Under ``implicit`` this overwrites wrong earlier assistant turns in :attr:`history`.

        Raises:
            ValueError: If the case is already finished.
        """
        turn = self.next_turn
        if turn is None:
            raise ValueError(f"{self.case.key_id}: dialogue already finished")
        if turn.rotation_of is not None:
            return self._prepare_rotation(turn)
        name = turn.spec.name
        wrong = self._trigger(name)
        prefix = None
        patched: list[str] = []
        if wrong and self.oracle_setting == "explicit":
            prefix = explicit_oracle_text(self.case, name)
        elif wrong and self.oracle_setting == "implicit":
            for w in wrong:
                self._patch(w)
            patched = wrong
        oracle = {"setting": self.oracle_setting, "triggered": bool(wrong), "prefix": prefix,
                  "patched": patched}
        return self._prepared(turn, len(self.history), oracle)

    def _prepare_rotation(self, turn: PlannedTurn) -> PreparedTurn:
        """A rotation (circular run): the conversation as its question was asked, rotated.

        The history before the rotated question's own entry, the same oracle paragraph, then
        the question with its options rotated (docs/evaluation_protocol.md, "Option order").

        Raises:
            ValueError: If the question it rotates has not been asked yet.
        """
        base = turn.rotation_of
        asked = self._asked.get(base) if base is not None else None
        if base is None or asked is None or base not in self.history_idx:
            raise ValueError(f"{self.case.key_id}: rotation {turn.spec.name} before {base}")
        oracle = {**asked, "patched": []}
        return self._prepared(turn, self.history_idx[base], oracle)

    def _prepared(self, turn: PlannedTurn, upto: int, oracle: dict[str, Any]) -> PreparedTurn:
        """The request of ``turn`` after the first ``upto`` history entries."""
        text = "\n\n".join(p for p in (oracle["prefix"], turn.preamble, turn.question) if p)
        messages = [Message("system", self.system_prompt)]
        for entry, images in zip(self.history[:upto], self._images[:upto], strict=True):
            messages.append(Message("user", entry[0], images))
            messages.append(Message("assistant", entry[2]))
        messages.append(Message("user", text, turn.images))
        meta = {"num_options": turn.num_options, "multi_select": turn.multi_select,
                "option_texts": list(turn.option_texts), "none_index": turn.none_index}
        request = TurnRequest(messages=tuple(messages),
                              request_id=request_id(self.case.key_id, turn.spec.name,
                                                    self.sample),
                              meta=meta, seed=self.seed)
        return PreparedTurn(turn=turn, text=text, oracle=oracle, request=request)

    def commit(self, prepared: PreparedTurn, outcome: TurnOutcome) -> None:
        """Append the answered turn to the history (a rotation only gets its outcome).

        Raises:
            ValueError: If ``prepared`` is not the next turn.
        """
        if prepared.turn is not self.next_turn:
            raise ValueError(f"{self.case.key_id}: {prepared.turn.spec.name} is not the next turn")
        name = prepared.turn.spec.name
        self.outcomes[name] = outcome
        if prepared.turn.rotation_of is not None:
            return
        self._asked[name] = {k: prepared.oracle[k] for k in ("setting", "triggered", "prefix")}
        self.history_idx[name] = len(self.history)
        self.history.append([prepared.text, [str(p) for p in prepared.turn.images], outcome.raw])
        self._images.append(prepared.turn.images)
