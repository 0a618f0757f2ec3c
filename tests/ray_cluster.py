"""A one-machine Ray cluster for the tests that run stages on Ray (started once per module).

``require_ray()`` skips a module when Ray is not installed, except under CI (``CI=true``),
where Ray is part of the ``dev`` extra and a missing Ray fails the run instead of silently
skipping it. ``start_cluster`` sizes the cluster for a 2-core machine: 4 logical CPUs, a
200 MB object store, no dashboard, Ray's files under the pytest temporary folder.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


def require_ray() -> ModuleType:
    """Import Ray; skip the calling module without it (fail under CI)."""
    try:
        import ray
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("Ray is not installed, but CI runs the Ray tests: "
                        "pip install -e \".[dev]\" (it holds ray==2.60.0)", pytrace=False)
        pytest.skip("Ray is not installed (pip install -e \".[ray]\")",
                    allow_module_level=True)
    return ray


@contextmanager
def start_cluster(tmp_dir: Path, *, num_cpus: int = 4) -> Iterator[str]:
    """Start a local Ray cluster in this process; yields its address (host:port)."""
    ray = require_ray()
    ray.init(num_cpus=num_cpus, num_gpus=0, object_store_memory=200 * 1024 ** 2,
             include_dashboard=False, _temp_dir=str(tmp_dir), log_to_driver=False,
             namespace="chexpercept", configure_logging=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def plugin_pythonpath(*dirs: Path) -> str:
    """``PYTHONPATH`` that makes the tests' plugin providers importable in Ray's workers."""
    parts = [str(d) for d in dirs] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    return os.pathsep.join(parts)


class FlakyWorker:
    """A Ray actor's object for the pool tests: doubles items; its process SIGKILLs itself on
    ``die_on`` (once when ``marker`` is given and does not exist yet, else every time)."""

    def __init__(self, die_on: int | None = None, marker: str | None = None) -> None:
        self.die_on = die_on
        self.marker = Path(marker) if marker else None

    def run(self, item: int) -> tuple[int, int]:
        if item == self.die_on and (self.marker is None or not self.marker.exists()):
            if self.marker is not None:
                self.marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return item * 2, os.getpid()


class Accumulator:
    """A Ray actor's object for the stream tests: a running total held in memory (lost with its
    process). ``load(total)`` sets it; ``add(x)`` sleeps ``sleep_s`` seconds, adds ``x`` and
    returns ``(total, pid)``. On ``die_on`` its process SIGKILLs itself (once when ``marker``
    is given and does not exist yet), on ``fail_on`` it raises ValueError."""

    def __init__(self, die_on: int | None = None, marker: str | None = None, *,
                 fail_on: int | None = None, sleep_s: float = 0.0) -> None:
        self.total = 0
        self.die_on = die_on
        self.marker = Path(marker) if marker else None
        self.fail_on = fail_on
        self.sleep_s = sleep_s

    def load(self, total: int) -> None:
        self.total = total

    def add(self, x: int) -> tuple[int, int]:
        if x == self.fail_on:
            raise ValueError(f"cannot add {x}")
        time.sleep(self.sleep_s)
        if x == self.die_on and (self.marker is None or not self.marker.exists()):
            if self.marker is not None:
                self.marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        self.total += x
        return self.total, os.getpid()
