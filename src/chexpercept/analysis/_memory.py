"""Stage 04: helpers for the analysis's large transients (parsed JSON, figure rasters).

Parsing a results file creates tens of thousands of containers, which would set off the
cyclic garbage collector many times although parsed JSON holds no cycles (:func:`gc_paused`:
``json.loads`` of a 9 MiB benchmark-sized file 19 ms instead of 22 ms). Each figure's raster
is a large buffer freed before the next; glibc keeps freed memory mapped, so the plots hand it
back (:func:`release_free_memory`: 4 MiB lower peak RSS in benchmarks/bench_analysis.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
from collections.abc import Callable, Iterator

_trim: Callable[[int], int] | None = None
_looked_up = False


def release_free_memory() -> None:
    """Return free heap pages to the OS (glibc ``malloc_trim(0)``; a no-op elsewhere).

    Costs well under a millisecond; call it after dropping a large transient.
    """
    global _trim, _looked_up
    if not _looked_up:
        _looked_up = True
        try:  # glibc's soname on every Linux distribution that uses it
            _trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc: macOS, musl, Windows
            _trim = None
    if _trim is not None:
        _trim(0)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (for ``json.loads`` of a large file).

    Only for code that creates no reference cycles; the collector's previous state is restored.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
