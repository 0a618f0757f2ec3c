"""Core: the two hooks a stage's library function takes from its caller (a CLI, a notebook).

- :data:`Progress`: ``progress(iterable, total) -> iterable`` wraps an item loop (a CLI passes
  a tqdm bar, ``utils.cli.progress_hook``);
- :data:`OnLogDir`: called once with the step's log folder before the step writes anything
  (a CLI starts its log file there, ``utils.cli.log_dir_hook``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

#: ``progress(iterable, total) -> iterable``: wraps an item loop.
Progress = Callable[[Iterable[Any], int], Iterable[Any]]
#: Called once with the step's log folder, before the step writes anything.
OnLogDir = Callable[[Path], object]
