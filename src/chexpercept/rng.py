"""Core: seeded random generators derived from the config seed.

Every random choice in the pipeline uses a generator from :func:`rng_for`, derived from the
config ``seed`` plus stable labels (stage name, key_id). Results therefore do not depend on
processing order or worker count, and the same inputs + seed give byte-identical outputs.
No global RNG is ever seeded.
"""

from __future__ import annotations

import hashlib

import numpy as np


def stable_hash(label: str) -> int:
    """A 64-bit hash of ``label`` that is the same in every process (unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(label.encode("utf-8"), digest_size=8).digest(), "big")


def rng_for(seed: int, *labels: str) -> np.random.Generator:
    """A ``numpy.random.Generator`` for ``seed`` and a sequence of labels.

    Args:
        seed: The config seed (non-negative int).
        *labels: Stable labels, e.g. ``("deformation", key_id)``.

    Returns:
        An independent PCG64 generator.
    """
    return np.random.default_rng([int(seed), *(stable_hash(x) for x in labels)])


def sample_seed(seed: int, sample: int) -> int:
    """The seed of sample ``sample`` of a ``--samples K`` run.

    See docs/evaluation_protocol.md, "Sampling". Sample 0 keeps the run seed, so a K-sample
    run's sample 0 asks what the one-sample run asks; sample k >= 1 gets a draw of
    :func:`rng_for` ``(seed, "03_eval", "sample", str(k))``.

    Args:
        seed: The run seed (non-negative int).
        sample: Sample index, >= 0.

    Returns:
        A seed in [0, 2**31 - 1) (the range every provider's ``seed`` takes).

    Raises:
        ValueError: If ``sample`` is negative.
    """
    if sample < 0:
        raise ValueError(f"sample index must be >= 0, got {sample}")
    if sample == 0:
        return int(seed)
    return int(rng_for(seed, "03_eval", "sample", str(sample)).integers(0, 2 ** 31 - 1))
