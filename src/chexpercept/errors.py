"""Core: the error hierarchy (re-exported from ``utils.errors`` plus CXR-specific classes)."""

from __future__ import annotations

from utils.errors import (
    ChexperceptError,
    ConfigError,
    InputError,
    MissingDependencyError,
    ProviderError,
)

__all__ = [
    "ChexperceptError",
    "ConfigError",
    "InputError",
    "MissingDependencyError",
    "ProviderError",
    "SchemaError",
]


class SchemaError(ChexperceptError):
    """An on-disk artifact (JSON, CSV, PNG) does not match its schema.

    The message names the file and the key_id / row / field at fault.
    """
