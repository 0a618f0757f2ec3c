"""USD prices per million tokens and the cost of one call (original_release_spec.md section 5.9).

Prices are matched by the longest key contained in the model id. Unlike the release (spec
section 8 item 28), a key also matches without its ``-preview`` suffix, so ``gemini-3.1-pro``
is priced like ``gemini-3.1-pro-preview``. Unknown models cost 0.0.
"""

from __future__ import annotations

from utils.llm.base import Usage

#: model key -> (input, cached input, output) USD per 1M tokens (spec section 5.9).
PRICES_PER_M: dict[str, tuple[float, float, float]] = {
    "gemini-3.1-flash-lite-preview": (0.25, 0.025, 1.50),
    "gemini-3.1-pro-preview": (2.00, 0.20, 12.00),
    "gpt-5.4-nano": (0.20, 0.02, 1.25),
    "gpt-5.4-mini": (0.75, 0.075, 4.50),
    "gpt-5.4": (2.50, 0.25, 15.00),
}


def _match(model_id: str) -> tuple[float, float, float] | None:
    model_id = model_id.lower()
    best: tuple[int, tuple[float, float, float]] | None = None
    for key, prices in PRICES_PER_M.items():
        for alias in {key, key.removesuffix("-preview")}:
            if alias in model_id and (best is None or len(alias) > best[0]):
                best = (len(alias), prices)
    return None if best is None else best[1]


def cost_usd(model_id: str, usage: Usage) -> float:
    """Estimated cost of one call in USD.

    cost = ((input - cached) * in + cached * cached_price + output * out) / 1e6.

    Args:
        model_id: Model id or alias (matched case-insensitively).
        usage: Token counts of the call.

    Returns:
        Cost in USD; 0.0 for a model with no price entry (baselines, local models).
    """
    prices = _match(model_id)
    if prices is None:
        return 0.0
    price_in, price_cached, price_out = prices
    uncached = max(usage.input_tokens - usage.cached_input_tokens, 0)
    return (uncached * price_in + usage.cached_input_tokens * price_cached
            + usage.output_tokens * price_out) / 1e6
