"""Stage 04's worker processes: how many, and how they start (docs/design.md, "Stage 04 passes").

Workers are forked where the platform allows it, so they inherit the imported modules instead
of importing them again (about 0.5 s each); elsewhere they are spawned. Work is handed out whole
(a run, a figure) and results come back in submission order, so what Stage 04 writes does not
depend on the number of workers.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor


def usable_cpus() -> int:
    """The CPUs this process may use (its affinity mask on Linux): the default worker count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def worker_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` worker processes (forked where possible, else spawned)."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(method))
