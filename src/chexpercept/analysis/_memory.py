"""Stage 04: handing back the memory of the analysis's large transients (figure rasters).

Each figure's raster is a large buffer freed before the next; glibc keeps freed memory mapped,
so the plots hand it back (:func:`release_free_memory`: 4 MiB lower peak RSS in
benchmarks/bench_analysis.py). Parsed JSON needs nothing here: ``chexpercept.files.read_json``
pauses the garbage collector while it parses.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

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
