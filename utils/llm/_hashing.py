"""Stable hashing for seeding per-request generators (``hash()`` differs between processes)."""

from __future__ import annotations

import hashlib


def stable_hash(label: str) -> int:
    """A 64-bit hash of ``label`` that is the same in every process and on every machine.

    ``utils`` may not import ``chexpercept``, so this mirrors ``chexpercept.rng.stable_hash``
    (blake2b, 8-byte digest, big endian); both give the same value for the same label.

    Args:
        label: Any text, e.g. a request id ``<key_id>/<turn name>``.

    Returns:
        An int in [0, 2**64).
    """
    return int.from_bytes(hashlib.blake2b(label.encode("utf-8"), digest_size=8).digest(), "big")
