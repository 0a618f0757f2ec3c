"""Shared CLI plumbing: common flags, logging set-up, progress bars and exit codes.

A stage script parses its flags here and hands the library step two callbacks made here:
:func:`log_dir_hook` (``on_log_dir``: start the log file in the folder the step names) and
:func:`progress_hook` (``progress``: one tqdm bar per item loop).

Exit codes (README, "On a fresh machine"): 0 success, 2 usage/config/input error (one line,
no traceback), 3 a Stage 03 run left cases unfinished (docs/engines.md, "Faults"), 1 an
unexpected failure (traceback kept).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from utils.errors import ChexperceptError, ConfigError
from utils.ray_pool import DEFAULT_MAX_RESTARTS, RAY_EXTRA, RayWorkers, require_ray

T = TypeVar("T")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_PROGRESS_ENABLED = True


def positive_int(text: str) -> int:
    """Parse an int >= 1 (an argparse ``type``)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """Parse an int >= 0 (an argparse ``type``)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_aliased_arg(parser: argparse.ArgumentParser, dest: str, **kwargs: Any) -> argparse.Action:
    """Add ``--kebab-case`` with its release spelling ``--snake_case`` as an alias.

    Args:
        parser: The script's parser.
        dest: The release's underscore name, e.g. ``output_dir`` (gives ``--output-dir`` and
            ``--output_dir``, stored in ``args.output_dir``).
        **kwargs: Passed to ``add_argument`` (``type``, ``default``, ``help``, ...).

    Returns:
        The argparse action.
    """
    return parser.add_argument(f"--{dest.replace('_', '-')}", f"--{dest}", dest=dest, **kwargs)


def add_output_dir_arg(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Add ``--output-dir`` / ``--output_dir`` (default None: the stage's own folder).

    Args:
        parser: The script's parser.
        help_text: The flag's help, naming the default folder.
    """
    add_aliased_arg(parser, "output_dir", default=None, help=help_text)


def add_config_arg(parser: argparse.ArgumentParser, default: str | Path | None) -> None:
    """Add ``--config`` (path to the YAML config).

    Args:
        parser: The script's parser.
        default: The file read without ``--config`` (the stage scripts pass the repository's
            ``cfg/config.yaml`` as an absolute path, so the default does not depend on the
            working directory), or None for a script whose config is optional.
    """
    parser.add_argument(
        "--config",
        default=None if default is None else str(default),
        help=f"YAML config file (default: {default if default is not None else 'none'}).",
    )


def add_common_args(
    parser: argparse.ArgumentParser,
    *,
    workers: int | None = None,
    parts: bool = False,
    seed: bool = False,
) -> None:
    """Add the generic flags every stage script shares.

    Args:
        parser: The script's parser.
        workers: Default for ``--num-workers``/``--num_workers``; None leaves the flag out.
        parts: Add ``--part`` and ``--total-parts`` (deterministic sharding).
        seed: Add ``--seed`` (overrides the config's ``seed``).
    """
    if workers is not None:
        add_aliased_arg(parser, "num_workers", type=int, default=workers,
                        help=f"Worker processes (default: {workers}).")
    if parts:
        parser.add_argument("--part", type=int, default=None,
                            help="Shard index in [0, total-parts) (default: no sharding).")
        add_aliased_arg(parser, "total_parts", type=int, default=1,
                        help="Number of shards (default: 1).")
    if seed:
        parser.add_argument("--seed", type=int, default=None,
                            help="Override the config's seed (default: the config's value).")
    add_aliased_arg(
        parser, "log_level", type=str.upper, choices=LOG_LEVELS,
        default=os.environ.get("CHEXPERCEPT_LOG_LEVEL", "INFO").upper(),
        help="Logging level (default: $CHEXPERCEPT_LOG_LEVEL or INFO; choices: %(choices)s).",
    )
    add_aliased_arg(parser, "no_progress", action="store_true",
                    help="Disable progress bars (default: off).")


class _TqdmHandler(logging.StreamHandler):
    """Console handler that writes through tqdm so bars are not broken by log lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


class _OnceFilter(logging.Filter):
    """Drop exact repeats of a warning message (each is emitted once)."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        key = (record.name, record.getMessage())
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


def setup_logging(
    level: str = "INFO", log_dir: str | Path | None = None, *, name: str = "run",
    progress: bool = True,
) -> Path | None:
    """Configure root logging once: console (through tqdm) and an optional log file.

    Args:
        level: One of ``LOG_LEVELS``.
        log_dir: Folder for ``<name>_<YYYYmmdd_HHMMSS>.log``; None for console only.
        name: Log file prefix (usually the script name).
        progress: False disables every progress bar made by :func:`progress`.

    Returns:
        The log file path, or None.
    """
    global _PROGRESS_ENABLED
    _PROGRESS_ENABLED = progress
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(level)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    console = _TqdmHandler()
    console.setFormatter(fmt)
    console.addFilter(_OnceFilter())
    root.addHandler(console)
    log_path = None
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        log_path = Path(log_dir) / f"{name}_{time.strftime('%Y%m%d_%H%M%S')}.log"
        fh = logging.FileHandler(log_path, encoding="utf-8")
        fh.setFormatter(fmt)
        root.addHandler(fh)
    return log_path


def start_logging(args: argparse.Namespace, log_dir: str | Path | None = None, *,
                  name: str = "run") -> Path | None:
    """:func:`setup_logging` from the ``--log-level`` / ``--no-progress`` flags.

    Args:
        args: Parsed flags of a parser given :func:`add_common_args`.
        log_dir: Folder of the log file; None for console only.
        name: Log file prefix (usually the script name).

    Returns:
        The log file path, or None.
    """
    return setup_logging(args.log_level, log_dir, name=name, progress=not args.no_progress)


def log_dir_hook(args: argparse.Namespace, name: str) -> Callable[[Path], Path | None]:
    """An ``on_log_dir`` callback for a library step: :func:`start_logging` into that folder.

    The step calls it once it knows its output folder and before any work, so the log file
    lands beside the stage's outputs.
    """
    return lambda log_dir: start_logging(args, log_dir, name=name)


def progress_hook(desc: str) -> Callable[[Iterable[T], int], Iterator[T]]:
    """A library step's ``progress(iterable, total)`` wrapper: one :func:`progress` bar."""
    return lambda iterable, total: progress(iterable, total=total, desc=desc)


def progress(iterable: Iterable[T], *, total: int | None = None, desc: str = "") -> Iterator[T]:
    """One tqdm bar per item loop; off with ``--no-progress`` or when stderr is not a TTY."""
    disable = (not _PROGRESS_ENABLED) or (not sys.stderr.isatty())
    if disable:
        yield from iterable
        return
    from tqdm import tqdm

    yield from tqdm(iterable, total=total, desc=desc, dynamic_ncols=True)


def add_allow_failures_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--allow-failures``: exit 0 even when some items could not be built."""
    parser.add_argument(
        "--allow-failures", "--allow_failures", dest="allow_failures", action="store_true",
        help="Exit 0 even if some items failed (they are still listed with their reasons in "
             "the stage summary). Default: off, any failed item makes the stage exit 2.")


def failures_exit_code(failed: int, total: int, *, what: str, summary: str | Path,
                       allow: bool) -> int:
    """Exit code of a stage that finished with ``failed`` of ``total`` items not built.

    Failed items are never dropped silently: without ``--allow-failures`` the stage prints one
    ``error:`` line pointing at the summary file and exits 2, so driver scripts stop there.
    Finished items stay on disk and a re-run only redoes the failed ones.

    Returns:
        0 when nothing failed or failures are allowed, else 2.
    """
    if failed <= 0:
        return 0
    message = f"{failed} of {total} {what} failed; reasons in {summary}"
    if allow:
        logging.getLogger("utils.cli").warning("%s (--allow-failures: exit 0)", message)
        return 0
    print(f"error: {message}. Fix the inputs and re-run (finished items are kept), or pass "
          f"--allow-failures to accept the rest.", file=sys.stderr)
    return 2


def run_main(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Run a script's ``main`` and map errors to exit codes.

    ``ChexperceptError`` (user-fixable) prints one ``error: ...`` line and returns 2;
    anything else propagates (traceback, exit 1).
    """
    try:
        return main(argv)
    except ChexperceptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: what was finished is kept; re-run the same command to resume",
              file=sys.stderr)
        return 130


# -- Ray cluster flags (docs/ray.md) ---------------------------------------------------------
def add_ray_worker_args(parser: Any, what: str) -> None:
    """``--ray [ADDRESS]``, ``--ray-workers``, ``--gpus-per-worker``, ``--ray-max-restarts``.

    Args:
        parser: An ``argparse.ArgumentParser``.
        what: What one worker does, for the help (e.g. ``"loads SAM once"``).
    """
    group = parser.add_argument_group(f"Ray cluster (pip install -e \".[{RAY_EXTRA}]\")")
    group.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help=f"Run the items on --ray-workers Ray actors (each {what}); the "
                            f"outputs and the resume of a one-process run. ADDRESS: host:port, "
                            f"ray://host:port, 'auto' or 'local'; without it Ray's rule "
                            f"(RAY_ADDRESS, else the cluster 'ray start' began here, else a new "
                            f"local one) (default: off).")
    group.add_argument("--ray-workers", dest="ray_workers", type=positive_int, default=None,
                       help="Number of Ray actors with --ray (default: 1).")
    group.add_argument("--gpus-per-worker", dest="gpus_per_worker", type=float, default=None,
                       help="GPUs each actor reserves (default: 1 for a model on CUDA, else 0).")
    group.add_argument("--cpus-per-worker", dest="cpus_per_worker", type=float, default=1.0,
                       help="CPUs each actor reserves (default: %(default)s).")
    group.add_argument("--ray-max-restarts", dest="ray_max_restarts", type=non_negative_int,
                       default=DEFAULT_MAX_RESTARTS,
                       help="Restarts of an actor whose process or node died before the run "
                            "stops naming it (default: %(default)s).")


def ray_workers_from_args(args: Any) -> RayWorkers | None:
    """The :class:`RayWorkers` of parsed :func:`add_ray_worker_args` flags (None without --ray).

    Raises:
        ConfigError: For ``--ray-workers`` without ``--ray``.
        MissingDependencyError: With ``--ray`` when Ray is not installed (the install line).
    """
    if args.ray is None:
        if args.ray_workers is not None or args.gpus_per_worker is not None:
            raise ConfigError("--ray-workers / --gpus-per-worker need --ray (a Ray cluster); "
                              "without Ray split the run with --part i --total-parts n (or "
                              "--num-workers where the stage has it)")
        return None
    require_ray("--ray")
    return RayWorkers(address=args.ray or None, workers=args.ray_workers or 1,
                      gpus_per_worker=args.gpus_per_worker,
                      cpus_per_worker=args.cpus_per_worker, max_restarts=args.ray_max_restarts)


def add_ray_replica_args(parser: argparse.ArgumentParser) -> None:
    """Stage 03's Ray flags: ``--ray``, ``--replicas``, the restarts and resources (docs/ray.md)."""
    group = parser.add_argument_group(
        f"Ray cluster (pip install -e \".[{RAY_EXTRA}]\"; providers that run a model here, the "
        f"baselines and plugins; not an API provider, which already runs --concurrency "
        f"requests from one process)")
    group.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="Run --replicas replicas of the provider as Ray actors, each "
                            "holding one engine; the run folder is a one-engine run's. "
                            "ADDRESS: a head's host:port or ray://host:port, 'auto' (a running "
                            "cluster), 'local' (a new one-machine cluster); without it Ray's "
                            "rule: RAY_ADDRESS, else the cluster 'ray start' began here, else a "
                            "new local one (default: off).")
    group.add_argument("--replicas", type=positive_int, default=None,
                       help="Number of replicas with --ray (default: 1).")
    group.add_argument("--ray-max-restarts", dest="ray_max_restarts", type=non_negative_int,
                       default=DEFAULT_MAX_RESTARTS,
                       help="Restarts of a replica whose process or node died before the run "
                            "stops naming it; its turn batch is sent again (default: "
                            "%(default)s).")
    group.add_argument("--gpus-per-replica", dest="gpus_per_replica", type=float,
                       default=None,
                       help="GPUs each replica reserves (default: opensource: "
                            "--tensor-parallel-size, else the model's gpu_num, else 1; "
                            "transformers: 1 when the cluster has GPUs, else 0; others: 0).")
    group.add_argument("--cpus-per-replica", dest="cpus_per_replica", type=float,
                       default=1.0, help="CPUs each replica reserves (default: %(default)s).")
