"""API prices (``cfg/pricing.yaml``) and the cost of one call (docs/evaluation_protocol.md, "Cost").

The table lives in ``cfg/pricing.yaml`` (USD per 1M tokens), not in code. A model id matches an
entry by exact id or alias, case-insensitively, ignoring a leading ``<vendor>/`` or ``models/``
and a trailing ``-YYYY-MM-DD`` snapshot date. Unlike the release (docs/differences.md: only
``-preview`` ids were priced, README names cost $0), ``gemini-3.1-pro`` matches through its
alias, and a model with no entry costs ``None`` (reported as NA, warned once), never 0.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from utils.config import load_config
from utils.errors import ConfigError
from utils.llm.base import Usage

logger = logging.getLogger(__name__)

#: The price table shipped with the repository.
PRICING_PATH = Path(__file__).resolve().parents[2] / "cfg" / "pricing.yaml"

_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_warned: set[str] = set()


class ProviderConstants(BaseModel):
    """Per-provider constants of the offline estimate."""

    model_config = ConfigDict(extra="forbid")

    image_tokens: int = Field(ge=0)
    """Tokens billed per attached image (docs/evaluation_protocol.md, "Cost")."""
    cache_min_tokens: int = Field(ge=0)
    """Shortest prefix the provider caches, in tokens (docs/evaluation_protocol.md, "Cost")."""


class ModelPrice(BaseModel):
    """One model's prices, USD per 1M tokens."""

    model_config = ConfigDict(extra="forbid")

    provider: str = "other"
    """Key of ``providers`` (image tokens, cache minimum)."""
    aliases: list[str] = Field(default_factory=list)
    """Other ids billed the same (e.g. without ``-preview``)."""
    input: float = Field(ge=0)
    """Uncached input tokens."""
    cached_input: float = Field(ge=0)
    """Cached input tokens."""
    output: float = Field(ge=0)
    """Output tokens, reasoning/thinking included."""
    output_tokens_per_call: int | None = Field(default=None, ge=0)
    """Assumed output per call in ``--estimate-cost`` (None: the table default)."""


class PricingTable(BaseModel):
    """The whole ``cfg/pricing.yaml``."""

    model_config = ConfigDict(extra="forbid")

    providers: dict[str, ProviderConstants]
    """Per-provider estimate constants; must hold ``other``."""
    default_output_tokens_per_call: int = Field(default=500, ge=0)
    """Estimate output per call for a model without its own value."""
    models: dict[str, ModelPrice]
    """Model id -> prices."""


@dataclass(frozen=True)
class PriceMatch:
    """A resolved price entry.

    Attributes:
        key: The entry's id in the table.
        price: Its prices.
        constants: Its provider's estimate constants.
        output_tokens_per_call: Estimate output per call (entry value or table default).
    """

    key: str
    price: ModelPrice
    constants: ProviderConstants
    output_tokens_per_call: int


def _normalise(model_id: str) -> str:
    name = model_id.strip().lower().rsplit("/", 1)[-1]
    return name


@functools.lru_cache(maxsize=8)
def load_pricing(path: str | Path | None = None) -> PricingTable:
    """Load and validate the price table.

    Args:
        path: YAML file; None uses :data:`PRICING_PATH`.

    Returns:
        The validated table.

    Raises:
        ConfigError: If the file is missing or invalid (names the key), a provider named by a
            model is not in ``providers``, ``providers.other`` is missing, or two entries claim
            the same id.
    """
    path = Path(path) if path is not None else PRICING_PATH
    table = load_config(path, PricingTable)
    problems = []
    if "other" not in table.providers:
        problems.append("'providers.other' is missing")
    seen: dict[str, str] = {}
    for key, entry in table.models.items():
        if entry.provider not in table.providers:
            problems.append(f"'models.{key}.provider' is {entry.provider!r}; expected one of "
                            f"{sorted(table.providers)}")
        for name in (key, *entry.aliases):
            norm = _normalise(name)
            if norm in seen and seen[norm] != key:
                problems.append(f"'{name}' (models.{key}) is also claimed by models.{seen[norm]}")
            seen[norm] = key
    if problems:
        raise ConfigError(f"{path}: invalid price table:\n  - " + "\n  - ".join(problems))
    return table


def lookup(model_id: str, path: str | Path | None = None) -> PriceMatch | None:
    """The price entry of ``model_id`` (exact id or alias, see the module docstring), or None.

    Cached per (model id, table): :func:`cost_usd` runs once per recorded turn, and scanning
    every entry's aliases cost ~20 us a call (benchmarks/bench_api_throughput.py).
    """
    table = load_pricing(path)
    cached = _LOOKUPS.get((model_id, id(table)))
    if cached is not None and cached[0] is table:
        return cached[1]
    match = _lookup(model_id, table)
    _LOOKUPS[(model_id, id(table))] = (table, match)
    return match


#: (model id, id(table)) -> (table, match); the table is kept so its id is never reused.
_LOOKUPS: dict[tuple[str, int], tuple[PricingTable, PriceMatch | None]] = {}


def _lookup(model_id: str, table: PricingTable) -> PriceMatch | None:
    norm = _normalise(model_id)
    candidates = [norm]
    if _SNAPSHOT.search(norm):
        candidates.append(_SNAPSHOT.sub("", norm))
    for candidate in candidates:
        for key, entry in table.models.items():
            if candidate in (_normalise(n) for n in (key, *entry.aliases)):
                per_call = (entry.output_tokens_per_call
                            if entry.output_tokens_per_call is not None
                            else table.default_output_tokens_per_call)
                return PriceMatch(key, entry, table.providers[entry.provider], per_call)
    return None


def cost_usd(model_id: str, usage: Usage, path: str | Path | None = None) -> float | None:
    """Estimated cost of one call in USD.

    cost = ((input - cached) * in + cached * cached_price + output * out) / 1e6
    (docs/evaluation_protocol.md, "Cost").

    Args:
        model_id: Model id or alias.
        usage: Token counts of the call.
        path: Price table; None uses :data:`PRICING_PATH`.

    Returns:
        Cost in USD: 0.0 when the call used no tokens, None (NA) for a model with no entry
        (the first miss per model id is logged as a warning).
    """
    if not (usage.input_tokens or usage.cached_input_tokens or usage.output_tokens):
        return 0.0  # nothing was billed (baselines, cached replays): no price lookup needed
    match = lookup(model_id, path)
    if match is None:
        if model_id not in _warned:
            _warned.add(model_id)
            logger.warning("no price for model '%s' in %s; its cost is reported as NA",
                           model_id, path or PRICING_PATH)
        return None
    price = match.price
    uncached = max(usage.input_tokens - usage.cached_input_tokens, 0)
    return (uncached * price.input + usage.cached_input_tokens * price.cached_input
            + usage.output_tokens * price.output) / 1e6
