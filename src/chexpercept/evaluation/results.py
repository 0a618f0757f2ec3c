"""Stage 03: build ``all_results.json`` entries (docs/evaluation_protocol.md, "Run folder").

One entry per finished case.

Release schema, plus an additive ``status`` key in each question's result (and, with
``--option-probs``, ``option_probs``; docs/metrics.md, "Option probabilities and AUROC").
Stage 1 keeps its parsed answer under ``response`` and Stage 2 under ``responses`` (the
release's two names, both kept); unvisited stages stay ``{}``; ``chat_history`` holds raw
text, with the original raw text as a 4th element where the implicit oracle patched a turn.

Under ``--option-order shuffled`` each question's result also holds ``option_order`` (displayed
position i showed original option ``option_order[i]``); under ``circular`` each single-choice
question's holds ``circular_correct`` (the question and every rotation of it correct). Both are
absent in the release order (docs/evaluation_protocol.md, "Option order").

With ``--judge`` a question the judge read holds its ``judge`` object (its status then
``judged`` when the judge read an option), and an audited one its ``judge_audit``
(docs/parsing.md, "Judge model"); both are absent without a judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chexpercept.evaluation.cases import PlannedTurn
from chexpercept.evaluation.dialogue import Dialogue, TurnOutcome
from chexpercept.evaluation.scoring import stage_correct
from utils.llm.base import Usage
from utils.llm.pricing import cost_usd


def _gt(value: int | tuple[int, ...]) -> int | list[int]:
    return list(value) if isinstance(value, tuple) else value


def token_usage(model_id: str, usages: Sequence[Mapping[str, int]], *,
                priced: bool = True) -> dict[str, Any]:
    """The ``token_usage`` block: totals over the case's calls plus ``per_call``.

    Args:
        model_id: Model id used for pricing (docs/evaluation_protocol.md, "Cost").
        usages: One mapping per call with ``input_tokens``, ``cached_input_tokens``,
            ``output_tokens`` and ``thinking_tokens``.
        priced: False when the calls went elsewhere than the provider's own API
            (``ChatModel.pricing_refusal``; docs/engines.md, "Endpoints"): every cost is then
            None (NA).
    """
    per_call = []
    for u in usages:
        usage = Usage(int(u.get("input_tokens", 0)), int(u.get("cached_input_tokens", 0)),
                      int(u.get("output_tokens", 0)), int(u.get("thinking_tokens", 0)))
        per_call.append({"input_tokens": usage.input_tokens,
                         "cached_input_tokens": usage.cached_input_tokens,
                         "output_tokens": usage.output_tokens,
                         "thinking_tokens": usage.thinking_tokens,
                         "total_tokens": usage.total_tokens,
                         "cost_usd": cost_usd(model_id, usage) if priced else None})
    keys = ("input_tokens", "cached_input_tokens", "output_tokens", "thinking_tokens",
            "total_tokens")
    costs = [c["cost_usd"] for c in per_call]
    return {"model_id": model_id, "num_calls": len(per_call),
            **{k: sum(c[k] for c in per_call) for k in keys},
            # None (NA) when the model has no price in cfg/pricing.yaml, never a made-up 0.
            "estimated_cost_usd": None if None in costs else sum(costs),
            "per_call": per_call}


def _order_flags(turn: PlannedTurn, correct: bool,
                 rotated: Mapping[str, Sequence[bool]]) -> dict[str, Any]:
    """``option_order`` (shuffled) and ``circular_correct`` (circular) of one question."""
    out: dict[str, Any] = {}
    if turn.option_order is not None:
        out["option_order"] = list(turn.option_order)
    if turn.spec.name in rotated:
        out["circular_correct"] = correct and all(rotated[turn.spec.name])
    return out


def _judge_fields(outcome: TurnOutcome) -> dict[str, Any]:
    """``judge`` / ``judge_audit`` of a question's result (``--judge`` runs only)."""
    return {k: v for k, v in (("judge", outcome.judge), ("judge_audit", outcome.judge_audit))
            if v is not None}


def build_case_result(dialogue: Dialogue, usages: Sequence[Mapping[str, int]],
                      model_id: str, *, priced: bool = True) -> dict[str, Any]:
    """The ``all_results.json`` value of one finished case.

    Args:
        dialogue: A finished dialogue (every turn of its path answered).
        usages: Token counts of its calls, in turn order.
        model_id: Model id (``token_usage.model_id``, pricing).
        priced: See :func:`token_usage`.

    Returns:
        A JSON-ready dict in the release's key order.

    Raises:
        ValueError: If the dialogue is not finished.
    """
    if not dialogue.finished:
        raise ValueError(f"{dialogue.case.key_id}: case not finished")
    case = dialogue.case
    out: dict[str, Any] = {"key_id": case.key_id, "qa_path": case.qa_path, "detection_qa": {},
                           "contour_evaluation_qa": {}, "contour_revision_qa": {},
                           "attribute_extraction_qa": {}}
    sections: dict[str, list] = {}
    rotated: dict[str, list[bool]] = {}
    for turn in case.turns:
        if turn.rotation_of is not None:
            rotated.setdefault(turn.rotation_of, []).append(
                dialogue.outcomes[turn.spec.name].correct)
    for turn in case.turns:
        if turn.rotation_of is not None:
            continue
        outcome = dialogue.outcomes[turn.spec.name]
        section = turn.spec.section
        if turn.spec.sub is None:
            key = "response" if section == "detection_qa" else "responses"
            out[section] = {key: outcome.parsed.text, "ground_truth": _gt(turn.ground_truth),
                            "correct": outcome.correct, "status": outcome.parsed.status,
                            **_order_flags(turn, outcome.correct, rotated)}
            if outcome.option_probs is not None:  # --option-probs
                out[section]["option_probs"] = outcome.option_probs
            out[section].update(_judge_fields(outcome))
        else:
            sections.setdefault(section, []).append((turn, outcome))
    for section, answered in sections.items():
        gt = {t.spec.sub: _gt(t.ground_truth) for t, _ in answered}
        responses = {t.spec.sub: o.parsed.text for t, o in answered}
        block: dict[str, Any] = (
            {"ground_truth": gt, "responses": responses} if section == "contour_revision_qa"
            else {"responses": responses, "ground_truth": gt})
        block["correct"] = stage_correct(o.correct for _, o in answered)
        for t, o in answered:
            block[t.spec.sub] = {"correct": o.correct, "status": o.parsed.status,
                                 **_order_flags(t, o.correct, rotated)}
            if o.option_probs is not None:  # --option-probs
                block[t.spec.sub]["option_probs"] = o.option_probs
            block[t.spec.sub].update(_judge_fields(o))
        out[section] = block
    out["_chat_history_idx"] = dict(dialogue.history_idx)
    out["token_usage"] = token_usage(model_id, usages, priced=priced)
    out["chat_history"] = [list(entry) for entry in dialogue.history]
    return out
