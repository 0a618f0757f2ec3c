"""Stage 03 ``--estimate-cost``: expected API cost of a run, computed offline (no API call).

Replays each selected case's dialogue exactly as the runner builds it (system prompt, every turn
of the case's ground-truth path, the whole history with every earlier image re-sent each turn;
docs/evaluation_protocol.md, "Prompt structure") and prices it with ``cfg/pricing.yaml``
(docs/evaluation_protocol.md, "Cost"; the method of the release's ``estimate_cost.py``):

- text tokens: ``tiktoken``'s ``o200k_base`` when tiktoken is installed, else ``ceil(chars / 4)``
  (a common rule of thumb for English; expect +-20 %);
- image tokens: the provider's ``image_tokens`` per image (Gemini 1089, OpenAI 800, else 1024);
- each answer: the model's ``output_tokens_per_call`` (release: 1000; 500 unknown), replayed as
  assistant history in later turns;
- no oracle text (the explicit setting adds a short paragraph only after a wrong step);
- the cached variant bills the prefix (system + history) at the cached price when it is at
  least the provider's ``cache_min_tokens`` (Gemini 8000, OpenAI 1024), the new user turn at the
  input price.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from chexpercept.evaluation.cases import EvalCase
from chexpercept.evaluation.dialogue import SYSTEM_PROMPT, Dialogue, TurnOutcome
from chexpercept.evaluation.parsing import ParsedAnswer
from utils.llm.pricing import PriceMatch, load_pricing, lookup

logger = logging.getLogger(__name__)


@cache
def _encoder() -> Any:
    """The ``o200k_base`` encoder of tiktoken, or None (not installed, or file not loadable).

    tiktoken downloads the encoding file on first use; offline and without a cached copy
    (``TIKTOKEN_CACHE_DIR``) that fails, and the estimate falls back to ``chars/4`` with a
    warning (the report names the tokenizer used, :func:`tokenizer_name`).
    """
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        return tiktoken.get_encoding("o200k_base")
    except Exception as exc:  # network / cache errors vary by tiktoken version
        reason = str(exc).splitlines()[0][:160] if str(exc) else ""
        logger.warning("cost estimate: tiktoken's o200k_base could not be loaded (%s: %s); "
                       "counting text tokens as chars/4", type(exc).__name__, reason)
        return None


def tokenizer_name() -> str:
    """``tiktoken o200k_base`` or ``chars/4`` (what :func:`text_tokens` uses)."""
    return "tiktoken o200k_base" if _encoder() is not None else "chars/4"


def text_tokens(text: str) -> int:
    """Token count of ``text`` (tiktoken when installed, else ``ceil(len / 4)``)."""
    encoder = _encoder()
    if encoder is not None:
        return len(encoder.encode(text))
    return math.ceil(len(text) / 4)


@dataclass(frozen=True)
class CallShape:
    """One call's size, independent of the model.

    Attributes:
        prefix_text: Text tokens of the system prompt and earlier user turns.
        prefix_images: Images in earlier user turns.
        prior_answers: Earlier assistant turns (each ``output_tokens_per_call`` long).
        new_text: Text tokens of this turn's user message.
        new_images: Images of this turn.
    """

    prefix_text: int
    prefix_images: int
    prior_answers: int
    new_text: int
    new_images: int


def call_shapes(cases: Sequence[EvalCase], system_prompt: str = SYSTEM_PROMPT
                ) -> list[CallShape]:
    """Every call the runner would make for ``cases`` (oracle setting ``none``)."""
    shapes = []
    ok = ParsedAnswer(None, "ok", "")
    for case in cases:
        dialogue = Dialogue(case, "none", system_prompt)
        while not dialogue.finished:
            prep = dialogue.prepare()
            messages = prep.request.messages
            users = [m for m in messages[:-1] if m.role != "assistant"]
            shapes.append(CallShape(
                prefix_text=sum(text_tokens(m.text) for m in users),
                prefix_images=sum(len(m.images) for m in users),
                prior_answers=sum(m.role == "assistant" for m in messages),
                new_text=text_tokens(messages[-1].text),
                new_images=len(messages[-1].images)))
            dialogue.commit(prep, TurnOutcome("", ok, True))
    return shapes


@dataclass(frozen=True)
class CostEstimate:
    """Expected tokens and cost of a run for one model.

    Attributes:
        model: Model id asked for.
        price_key: The ``cfg/pricing.yaml`` entry used, or None (cost NA).
        calls: API calls.
        input_tokens: Input tokens over all calls.
        cacheable_tokens: Input tokens billed at the cached price in the cached variant.
        output_tokens: Output tokens over all calls.
        cost_usd: Cost with no caching, or None.
        cost_cached_usd: Cost with prefix caching, or None.
    """

    model: str
    price_key: str | None
    calls: int
    input_tokens: int
    cacheable_tokens: int
    output_tokens: int
    cost_usd: float | None
    cost_cached_usd: float | None


def estimate(shapes: Sequence[CallShape], model: str, match: PriceMatch | None = None,
             output_tokens_per_call: int | None = None) -> CostEstimate:
    """Price the calls for ``model``.

    Args:
        shapes: From :func:`call_shapes`.
        model: Model id (looked up in ``cfg/pricing.yaml`` unless ``match`` is given).
        match: A resolved price entry.
        output_tokens_per_call: Override of the assumed output per call.

    Returns:
        The estimate; costs are None when the model has no price.
    """
    match = match if match is not None else lookup(model)
    table = load_pricing()
    constants = match.constants if match else table.providers["other"]
    per_call = output_tokens_per_call if output_tokens_per_call is not None else (
        match.output_tokens_per_call if match else table.default_output_tokens_per_call)
    image = constants.image_tokens
    total_in = total_cached = 0
    for s in shapes:
        prefix = s.prefix_text + s.prefix_images * image + s.prior_answers * per_call
        new = s.new_text + s.new_images * image
        total_in += prefix + new
        if prefix >= constants.cache_min_tokens:
            total_cached += prefix
    total_out = per_call * len(shapes)
    cost = cost_cached = None
    if match is not None:
        price = match.price
        cost = (total_in * price.input + total_out * price.output) / 1e6
        cost_cached = ((total_in - total_cached) * price.input + total_cached * price.cached_input
                       + total_out * price.output) / 1e6
    return CostEstimate(model, match.key if match else None, len(shapes), total_in, total_cached,
                        total_out, cost, cost_cached)


def estimate_all_priced(shapes: Sequence[CallShape],
                        output_tokens_per_call: int | None = None) -> list[CostEstimate]:
    """:func:`estimate` for every model in ``cfg/pricing.yaml`` (comparison table)."""
    out = []
    for key in load_pricing().models:
        out.append(estimate(shapes, key, lookup(key), output_tokens_per_call))
    return out


def format_estimates(estimates: Sequence[CostEstimate], cases: int) -> str:
    """A plain-text table (one row per model)."""
    def money(value: float | None) -> str:
        return "NA" if value is None else f"${value:,.2f}"

    header = (f"{'model':32} {'calls':>7} {'input tok':>13} {'cached-eligible':>15} "
              f"{'output tok':>12} {'no cache':>11} {'with cache':>11}")
    lines = [f"estimated cost of {cases} case(s) (text tokens: {tokenizer_name()}; "
             f"prices: cfg/pricing.yaml)", header, "-" * len(header)]
    for e in estimates:
        lines.append(f"{e.model:32} {e.calls:>7} {e.input_tokens:>13,} {e.cacheable_tokens:>15,} "
                     f"{e.output_tokens:>12,} {money(e.cost_usd):>11} "
                     f"{money(e.cost_cached_usd):>11}")
    return "\n".join(lines)
