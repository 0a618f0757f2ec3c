"""Lazy optional imports with an actionable error."""

from __future__ import annotations

import importlib
from types import ModuleType

from utils.errors import MissingDependencyError


def require(package: str, extra: str, feature: str) -> ModuleType:
    """Import an optional package or explain how to install it.

    Args:
        package: Importable module name, e.g. ``"openai"`` or ``"google.genai"``.
        extra: The ``chexpercept`` extra that provides it, e.g. ``"openai"``.
        feature: What needs it, for the message, e.g. ``"the openai provider"``.

    Returns:
        The imported module.

    Raises:
        MissingDependencyError: If the import fails; the message holds the exact
            ``pip install "chexpercept[extra]"`` line.
    """
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature} needs the Python package '{package}', which is not installed "
            f"({exc}). Install it with: pip install -e \".[{extra}]\""
        ) from exc
