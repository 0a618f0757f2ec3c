"""Stage 04: memory helpers for the analysis's large transients (parsed JSON, figure rasters).

Stage 04 allocates and frees a few large buffers in turn: each ``all_results.json``'s text and
parsed records, each figure's raster. glibc keeps freed memory mapped (its mmap and trim
thresholds grow with the largest block freed so far), so without help the resident size
ratchets up to the sum of those peaks instead of the largest one. And parsing a results file
creates tens of thousands of containers, which would set off the cyclic garbage collector
dozens of times although parsed JSON holds no cycles.
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
    """Pause the cyclic garbage collector (for ``json.loads`` of a large file: ~30% faster).

    Only for code that creates no reference cycles; the collector's previous state is restored.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
