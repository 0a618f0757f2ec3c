"""Stage 03: the order in which a question's options are shown (``--option-order``).

Implements docs/evaluation_protocol.md, "Option order":

- ``release``: the options as the benchmark JSON lists them (the paper's protocol); nothing
  here touches the cases.
- ``shuffled``: every question of every case is shown under a seeded permutation of its
  options, drawn with :func:`chexpercept.rng.rng_for` from the run seed and the labels
  ``("option_order", key_id, turn name)``, so it does not depend on case order, concurrency or
  sharding. The option lines of the question text, the option texts (exact text answers) and,
  where the options are images (the revision result's candidate masks), the images are
  permuted together; the "None" option of a multi-select question stays in its place (its
  text, e.g. "None of the above (options 1-3)", names the positions before it).
- ``circular``: every asked question keeps the release order, and each single-choice question
  with n options is asked n - 1 more times, rotation k showing original option
  ``(i + k) mod n + 1`` at displayed position i + 1 (VLMEvalKit's CircularEval). A rotation is
  its own dialogue branch: the conversation up to that question as it was asked, then the
  rotated question; its answer never enters the conversation.

The model's answer is parsed against the displayed options and mapped back to original option
numbers before it is scored (:func:`to_original`; one scoring path,
:mod:`chexpercept.evaluation.scoring`).
"""

from __future__ import annotations

import re
from dataclasses import replace

from chexpercept.errors import ConfigError, SchemaError
from chexpercept.evaluation.cases import EvalCase, PlannedTurn, TurnSpec
from chexpercept.evaluation.parsing import ParsedAnswer
from chexpercept.rng import rng_for

#: ``--option-order`` values (docs/evaluation_protocol.md, "Option order"); ``release`` is the
#: default and the paper's protocol.
OPTION_ORDERS: tuple[str, ...] = ("release", "shuffled", "circular")
#: Separates a turn name from its rotation in a circular run's turn names
#: (``detection_qa@r1``) and request ids (``<key_id>@r1/detection_qa``).
ROTATION_MARK = "@r"

_OPTION_LINE = re.compile(r"^(\s*)\((\d+)\)")


def check_option_order(option_order: str) -> None:
    """Check ``--option-order``.

    Every runner honours every option order: ``release`` and ``shuffled`` change only what
    each turn shows; the rotations of ``circular`` are extra turns with their question's turn
    index, which the sync runner, the async runner, the KV window, Ray replicas (one step per
    rotation) and sharded parts (the merge plans the same turns) ask.

    Raises:
        ConfigError: For a value not in :data:`OPTION_ORDERS` (names the flag).
    """
    if option_order not in OPTION_ORDERS:
        raise ConfigError(f"--option-order must be one of {', '.join(OPTION_ORDERS)}, "
                          f"got {option_order!r}")


def shuffled_order(seed: int, key_id: str, turn: PlannedTurn) -> tuple[int, ...]:
    """The seeded permutation of ``turn``'s options (displayed i shows original order[i]).

    The "None" option of a multi-select question (``turn.none_index``) keeps its position.

    Args:
        seed: The run seed (``--seed``).
        key_id: The case.
        turn: The planned turn (release order).

    Returns:
        A permutation of 1..n as a tuple (1-based original options, in displayed order).
    """
    n = turn.num_options
    movable = [i for i in range(1, n + 1) if i != turn.none_index]
    rng = rng_for(seed, "option_order", key_id, turn.spec.name)
    drawn = [movable[j] for j in rng.permutation(len(movable))]
    order = list(range(1, n + 1))
    for slot, original in zip(movable, drawn, strict=True):
        order[slot - 1] = original
    return tuple(order)


def rotation_order(n: int, k: int) -> tuple[int, ...]:
    """Rotation ``k`` of ``n`` options: displayed i (0-based) shows original (i + k) mod n + 1."""
    return tuple((i + k) % n + 1 for i in range(n))


def reorder_question(question: str, order: tuple[int, ...], where: str) -> str:
    """The question text with its option lines shown in ``order`` and numbered 1..n again.

    The option lines are the ``(i) ...`` lines after the last ``Options:`` line
    (docs/benchmark_format.md, "JSON fields"); every other line is kept as it is.

    Raises:
        SchemaError: If the question does not list exactly options (1)..(n) in that order
            (names ``where``).
    """
    lines = question.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip().lower() == "options:"]
    slots = [i for i in range(starts[-1] + 1, len(lines)) if _OPTION_LINE.match(lines[i])] \
        if starts else []
    numbers = [int(_OPTION_LINE.match(lines[i]).group(2)) for i in slots]  # type: ignore[union-attr]
    if numbers != list(range(1, len(order) + 1)):
        raise SchemaError(f"{where}: cannot reorder the options of the question: it lists "
                          f"options {numbers} after 'Options:', expected 1..{len(order)}")
    originals = [lines[i] for i in slots]
    for shown, (slot, original) in enumerate(zip(slots, order, strict=True), 1):
        line = originals[original - 1]
        lines[slot] = _OPTION_LINE.sub(lambda m, s=shown: f"{m.group(1)}({s})", line, count=1)
    return "\n".join(lines)


def displayed_turn(key_id: str, turn: PlannedTurn, order: tuple[int, ...]) -> PlannedTurn:
    """``turn`` as shown under ``order`` (see :class:`PlannedTurn`, ``option_order``).

    Text options: the question's option lines and ``option_texts`` are permuted; image options
    (``option_images``): the images are permuted and the positional labels and question stay.
    ``ground_truth`` stays in original numbers.

    Raises:
        SchemaError: See :func:`reorder_question`.
    """
    if sorted(order) != list(range(1, turn.num_options + 1)):
        raise ValueError(f"{key_id}/{turn.spec.name}: {order} is not a permutation of "
                         f"1..{turn.num_options}")
    if turn.option_images:
        if len(turn.images) != turn.num_options:
            raise SchemaError(f"{key_id}/{turn.spec.name}: {len(turn.images)} option image(s) "
                              f"for {turn.num_options} options")
        return replace(turn, images=tuple(turn.images[i - 1] for i in order),
                       option_order=order)
    question = reorder_question(turn.question, order, f"{key_id}/{turn.spec.name}")
    texts = tuple(turn.option_texts[i - 1] for i in order)
    none = None if turn.none_index is None else order.index(turn.none_index) + 1
    return replace(turn, question=question, option_texts=texts, none_index=none,
                   option_order=order)


def rotations(key_id: str, turn: PlannedTurn) -> list[PlannedTurn]:
    """The rotations 1..n-1 of a single-choice turn (none for a multi-select one).

    Each is named ``<turn name>@r<k>`` (its record's ``turn``) with the turn's index, section
    and sub-question.
    """
    if turn.multi_select:
        return []
    out = []
    for k in range(1, turn.num_options):
        spec = TurnSpec(turn.spec.index, f"{turn.spec.name}{ROTATION_MARK}{k}",
                        turn.spec.section, turn.spec.sub)
        shown = displayed_turn(key_id, turn, rotation_order(turn.num_options, k))
        out.append(replace(shown, spec=spec, rotation=k, rotation_of=turn.spec.name))
    return out


def apply_option_order(case: EvalCase, option_order: str, seed: int) -> EvalCase:
    """``case`` with the turns ``option_order`` asks (the release order returns ``case``).

    Args:
        case: A planned case (release order).
        option_order: One of :data:`OPTION_ORDERS`.
        seed: The run seed.

    Returns:
        ``shuffled``: the same turns, each under its seeded permutation; ``circular``: each
        single-choice turn followed by its rotations.

    Raises:
        ConfigError: On an unknown ``option_order``.
        SchemaError: If a question's option lines cannot be reordered (names key_id, turn).
    """
    check_option_order(option_order)
    if option_order == "release":
        return case
    turns: list[PlannedTurn] = []
    for turn in case.turns:
        if option_order == "shuffled":
            turns.append(displayed_turn(case.key_id, turn,
                                        shuffled_order(seed, case.key_id, turn)))
        else:
            turns += [turn, *rotations(case.key_id, turn)]
    return replace(case, turns=tuple(turns))


def to_original(parsed: ParsedAnswer, turn: PlannedTurn) -> ParsedAnswer:
    """The parsed answer (displayed numbers) in ORIGINAL option numbers, sorted.

    The identity in the release order. An answer outside 1..n cannot come from the parser
    (it reads an answer whole or not at all), so it raises.

    Raises:
        ValueError: For an option number outside the turn's options.
    """
    if turn.option_order is None or not parsed.answer:
        return parsed
    n = turn.num_options
    bad = [d for d in parsed.answer if not 1 <= d <= n]
    if bad:
        raise ValueError(f"{turn.spec.name}: parsed option(s) {bad} outside 1..{n}")
    return replace(parsed, answer=tuple(sorted(turn.original(d) for d in parsed.answer)))
