"""Error hierarchy shared by ``utils`` and ``chexpercept``.

It lives in ``utils`` because ``utils`` may not import ``chexpercept``; ``chexpercept.errors``
re-exports these classes and adds the CXR-specific ones.
"""

from __future__ import annotations


class ChexperceptError(Exception):
    """Base class of every error a user can fix (bad input, bad config, missing extra).

    CLIs turn it into one line on stderr and exit code 2, without a traceback.
    """


class ConfigError(ChexperceptError):
    """A config file is missing, malformed, or has a missing/unknown/invalid key."""


class MissingDependencyError(ChexperceptError):
    """An optional dependency is not installed; the message gives the pip line."""


class ProviderError(ChexperceptError):
    """A model provider failed in a way that retrying will not fix (auth, bad request)."""


class InputError(ChexperceptError):
    """A required input (file, image, mask, CSV row) is missing or unusable.

    It lives here because :mod:`utils.imaging` raises it; ``chexpercept.errors`` re-exports it.
    """


class EngineStartError(ProviderError):
    """An offline engine (vLLM, transformers) could not be built or loaded.

    Raised before the first request, so the run stops before its folder gets a manifest or a
    record (docs/engines.md, "Faults"); never one request's ``error``. The message names the
    cause and the flag (or the part of the environment) that fixes it.

    Args:
        message: The whole one-line message.
        fix: The flag(s) or setting that fix it, as in the message ('' when unknown).
    """

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix
