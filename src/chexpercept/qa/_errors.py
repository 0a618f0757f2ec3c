"""Stage 02: the error a single case raises when it cannot be built (recorded in summary.json)."""

from __future__ import annotations

from chexpercept.errors import InputError


class CaseBuildError(InputError):
    """One case cannot be built; the message (naming the key_id) is its reason in the summary."""
