"""Stage 04: find Stage 03 runs (``<results-dir>/<run>/oracle_<setting>/all_results.json``).

Stage 04 reads nothing but these files (the import contracts in pyproject.toml); the folder
name is built by :func:`chexpercept.layouts.eval_run_dir` and parsed by
:func:`chexpercept.layouts.parse_run_name`. Each file is read and validated
by :func:`chexpercept.analysis.case_table.read_case_table`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from chexpercept.errors import InputError
from chexpercept.layouts import NO_THINKING_SUFFIX, all_results_path, parse_run_name

logger = logging.getLogger(__name__)

#: Oracle settings of Stage 03 (docs/evaluation_protocol.md, "Oracle settings"), in the
#: release's ``--oracle_setting`` order.
ORACLE_SETTINGS: tuple[str, ...] = ("explicit", "implicit", "none")
#: Run-folder suffix of a ``--no-thinking`` Stage 03 run (docs/evaluation_protocol.md,
#: "Run folder").
NO_THINKING = "no_thinking"


@dataclass(frozen=True)
class RunRef:
    """One Stage 03 run found on disk.

    Attributes:
        name: The run folder name ``<provider>_<model>[_no_thinking]``; used as the ``model``
            column so equal aliases under different providers stay apart
            (docs/differences.md D43).
        provider: Text before the first underscore of ``name`` (the release's split).
        model: Text after it (``""`` when ``name`` has no underscore).
        oracle_setting: ``explicit`` / ``implicit`` / ``none``.
        run_dir: ``<results-dir>/<name>/oracle_<setting>/`` (per-model CSVs go here).
    """

    name: str
    provider: str
    model: str
    oracle_setting: str
    run_dir: Path

    @property
    def variant(self) -> str:
        """``no_thinking`` for a ``--no-thinking`` run (folder suffix), else ``default``."""
        return NO_THINKING if self.model.endswith(NO_THINKING_SUFFIX) else "default"

    @property
    def model_name(self) -> str:
        """The model id without the variant suffix (``qwen3.6-27b`` for ``..._no_thinking``)."""
        return self.model.removesuffix(NO_THINKING_SUFFIX)

    @property
    def all_results(self) -> Path:
        """``<run_dir>/all_results.json``."""
        return all_results_path(self.run_dir)


def _split(name: str) -> tuple[str, str]:
    """``(provider, model with its variant suffix)`` of a run folder name (``parse_run_name``)."""
    provider, model, no_thinking = parse_run_name(name)
    return provider, model + (NO_THINKING_SUFFIX if no_thinking else "")


def discover_runs(results_dir: str | Path, oracle_setting: str, *, provider: str | None = None,
                  model: str | None = None) -> list[RunRef]:
    """Runs under ``results_dir`` that have ``oracle_<setting>/all_results.json``.

    Runs are returned in sorted folder order (the release's order). ``provider`` keeps
    runs whose folder starts with ``<provider>_``; ``model`` keeps runs whose folder is
    ``<provider>_<model>`` (``/`` in ``model`` written as ``--``, as Stage 03 names folders;
    give ``<model>_no_thinking`` for a no-thinking run).

    Args:
        results_dir: Stage 03 output folder (``--output-path`` of ``00_eval.py``).
        oracle_setting: One of :data:`ORACLE_SETTINGS`.
        provider: Optional provider filter (exact).
        model: Optional model filter (exact).

    Returns:
        Matching runs; never empty.

    Raises:
        InputError: If ``results_dir`` is not a folder, the setting is unknown, or no run
            matches (the message names the folder, setting, filters and the runs present).
    """
    results_dir = Path(results_dir)
    if oracle_setting not in ORACLE_SETTINGS:
        raise InputError(f"unknown oracle setting '{oracle_setting}'; expected one of "
                         f"{', '.join(ORACLE_SETTINGS)}")
    if not results_dir.is_dir():
        raise InputError(f"results folder not found: {results_dir} (pass --results-dir, the "
                         f"--output-path of src/03_eval_vlm_on_chexpercept/00_eval.py)")
    safe_model = model.strip("/").replace("/", "--") if model else None
    runs: list[RunRef] = []
    for entry in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        run_dir = entry / f"oracle_{oracle_setting}"
        prov, mod = _split(entry.name)
        if provider is not None and prov != provider:
            continue
        if safe_model is not None and mod != safe_model:
            continue
        if not all_results_path(run_dir).is_file():
            logger.debug("skipping %s: no oracle_%s/all_results.json", entry, oracle_setting)
            continue
        runs.append(RunRef(name=entry.name, provider=prov, model=mod,
                           oracle_setting=oracle_setting, run_dir=run_dir))
    if not runs:
        filters = ", ".join(f"{k}={v}" for k, v in (("provider", provider), ("model", model))
                            if v is not None)
        have = _available(results_dir)
        raise InputError(
            f"no run with oracle_{oracle_setting}/all_results.json in {results_dir}"
            + (f" matching {filters}" if filters else "")
            + (f"; runs present: {'; '.join(have)}" if have else "; the folder holds no runs")
        )
    return runs


def run_from_dir(path: str | Path) -> RunRef:
    """The run stored in ``path``: an ``oracle_<setting>/`` folder or its ``all_results.json``.

    Args:
        path: ``<results-dir>/<provider>_<model>[_no_thinking]/oracle_<setting>``, or the
            ``all_results.json`` in it.

    Returns:
        The run (name from the parent folder, setting from ``oracle_<setting>``).

    Raises:
        InputError: If there is no ``all_results.json`` there or the folder is not named
            ``oracle_<setting>`` with a known setting.
    """
    path = Path(path)
    run_dir = path.parent if path.name == "all_results.json" else path
    if not all_results_path(run_dir).is_file():
        raise InputError(f"no all_results.json in {run_dir} (pass a Stage 03 run folder "
                         f"<results-dir>/<provider>_<model>/oracle_<setting>/)")
    setting = run_dir.name.removeprefix("oracle_")
    if not run_dir.name.startswith("oracle_") or setting not in ORACLE_SETTINGS:
        raise InputError(f"{run_dir}: expected a folder named oracle_<setting> with setting in "
                         f"{', '.join(ORACLE_SETTINGS)}")
    name = run_dir.resolve().parent.name
    provider, model = _split(name)
    return RunRef(name=name, provider=provider, model=model, oracle_setting=setting,
                  run_dir=run_dir)


def _available(results_dir: Path) -> list[str]:
    """``<run> (oracle settings)`` for every run folder holding any all_results.json."""
    out = []
    for entry in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        settings = sorted(f.parent.name.removeprefix("oracle_")
                          for f in entry.glob("oracle_*/all_results.json"))
        if settings:
            out.append(f"{entry.name} ({', '.join(settings)})")
    return out
