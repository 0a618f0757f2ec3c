"""Stage 04: find/load Stage 03 runs (``<results-dir>/<run>/oracle_<setting>/all_results.json``).

Stage 04 reads nothing but these files (STYLE.md "Module boundaries"); each is validated with
``schema.parse_all_results`` before it is scored.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chexpercept import io
from chexpercept.analysis.metrics import CaseScore, RunMetrics, score_case, summarize
from chexpercept.errors import ChexperceptError, InputError, SchemaError
from chexpercept.schema import CaseResult, parse_all_results

logger = logging.getLogger(__name__)

#: Oracle settings of Stage 03 (spec section 5.4), in the release's ``--oracle_setting`` order.
ORACLE_SETTINGS: tuple[str, ...] = ("explicit", "implicit", "none")
#: Record keys Stage 04 does not read; dropped before validation to halve peak memory.
UNUSED_RECORD_KEYS: tuple[str, ...] = ("chat_history", "token_usage", "_chat_history_idx")
#: Run-folder suffix of a ``--no-thinking`` Stage 03 run (spec section 5.1).
NO_THINKING = "no_thinking"


@dataclass(frozen=True)
class RunRef:
    """One Stage 03 run found on disk.

    Attributes:
        name: The run folder name ``<provider>_<model>[_no_thinking]``; used as the ``model``
            column so equal aliases under different providers stay apart (defect 31).
        provider: Text before the first underscore of ``name`` (release split, spec section 6).
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
        return NO_THINKING if self.model.endswith(f"_{NO_THINKING}") else "default"

    @property
    def model_name(self) -> str:
        """The model id without the variant suffix (``qwen3.6-27b`` for ``..._no_thinking``)."""
        return self.model.removesuffix(f"_{NO_THINKING}")

    @property
    def all_results(self) -> Path:
        """``<run_dir>/all_results.json``."""
        return io.all_results_path(self.run_dir)


def _split(name: str) -> tuple[str, str]:
    provider, _, model = name.partition("_")
    return provider, model


def discover_runs(results_dir: str | Path, oracle_setting: str, *, provider: str | None = None,
                  model: str | None = None) -> list[RunRef]:
    """Runs under ``results_dir`` that have ``oracle_<setting>/all_results.json``.

    Runs are returned in sorted folder order (spec section 6 "Discovery"). ``provider`` keeps
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
        if not io.all_results_path(run_dir).is_file():
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
    if not io.all_results_path(run_dir).is_file():
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


def load_run(run: RunRef, *, limit: int | None = None) -> dict[str, CaseResult]:
    """Read and validate one run's ``all_results.json`` (read once).

    ``chat_history``, ``token_usage`` and ``_chat_history_idx`` are dropped before
    validation: the analysis needs only the per-stage result blocks.

    Args:
        run: The run.
        limit: Keep only the first ``limit`` cases in file order (``--limit``); None keeps all.

    Returns:
        key_id -> record, in evaluation order.

    Raises:
        InputError: If the file is missing.
        SchemaError: On invalid JSON or schema, or a record whose ``key_id`` differs from its
            key (every bad key_id is listed, with the file).
    """
    path = run.all_results
    return validate_results(path, io.read_json(path), limit=limit)


def validate_results(path: Path, data: Any, *, limit: int | None = None
                     ) -> dict[str, CaseResult]:
    """Validate the parsed content of ``path`` (an ``all_results.json``); see :func:`load_run`.

    The records' unused blocks (:data:`UNUSED_RECORD_KEYS`) and the cases marked unfinished
    (:func:`split_unfinished`, not scored) are removed from ``data`` in place.

    Raises:
        SchemaError: On invalid schema or a record whose ``key_id`` differs from its key
            (every bad key_id is listed, with the file).
    """
    split_unfinished(path, data)
    if isinstance(data, dict):
        for record in data.values():  # Stage 04 never reads these large blocks
            if isinstance(record, dict):
                for key in UNUSED_RECORD_KEYS:
                    record.pop(key, None)
    results = parse_all_results(data, path)
    del data
    bad = [f"{k}: record key_id is '{r.key_id}'" for k, r in results.items() if r.key_id != k]
    if bad:
        raise SchemaError(f"{path}: {len(bad)} schema problem(s):\n  " + "\n  ".join(bad))
    if limit is not None:
        results = dict(list(results.items())[:max(limit, 0)])
    return results


def split_unfinished(path: Path, data: Any) -> dict[str, str]:
    """Remove the cases Stage 03 marked ``unfinished`` from ``data``; key_id -> reason.

    A case is unfinished when a turn got no answer (a fault of the network or the server) or
    the run stopped before it finished: it is missing, never a wrong answer of the model
    (docs/engines.md, "Faults"), so it is not scored and the report says the run is
    incomplete. Logs one warning naming the file when there are any.

    Args:
        path: The ``all_results.json`` (for the warning).
        data: Its parsed content (key_id -> record); modified in place.

    Returns:
        key_id -> the recorded reason, in file order (empty for a complete run).
    """
    if not isinstance(data, dict):
        return {}
    out: dict[str, str] = {}
    for key_id, record in data.items():
        if isinstance(record, dict) and isinstance(record.get("unfinished"), dict):
            out[key_id] = str(record["unfinished"].get("reason") or "unfinished")
    for key_id in out:
        del data[key_id]
    if out:
        logger.warning("%s: incomplete run: %d case(s) got no answer for a turn or were not "
                       "reached (counted as missing, not as wrong answers; re-run Stage 03 to "
                       "complete them), e.g. %s: %s", path, len(out), next(iter(out)),
                       next(iter(out.values()))[:200])
    return out


def warn_incomplete(run: RunRef, incomplete: Sequence[str]) -> None:
    """One warning listing (the first five of) the cases that lack an expected stage result."""
    if incomplete:
        logger.warning("%s: %d case(s) lack an expected stage result (counted wrong, not "
                       "skipped): %s%s", run.all_results, len(incomplete),
                       ", ".join(incomplete[:5]), " ..." if len(incomplete) > 5 else "")


def score_run(run: RunRef, results: dict[str, CaseResult]) -> tuple[list[CaseScore], RunMetrics]:
    """Score every case of a run and aggregate the metrics.

    Expected stages with no result are counted wrong (defect 12) and reported in one warning.

    Args:
        run: The run (its folder name becomes the ``model`` column).
        results: Its validated records (:func:`load_run`).

    Returns:
        The case scores and the run's metrics.

    Raises:
        SchemaError: Listing every key_id that cannot be scored, with the file.
    """
    scores: list[CaseScore] = []
    problems: list[str] = []
    for key_id, result in results.items():
        try:
            scores.append(score_case(result))
        except ChexperceptError as exc:
            problems.append(f"{key_id}: {exc}")
    if problems:
        raise SchemaError(f"{run.all_results}: {len(problems)} case(s) cannot be scored:\n  "
                          + "\n  ".join(problems))
    metrics = summarize(scores, run.name)
    warn_incomplete(run, [s.key_id for s in scores if s.missing])
    return scores, metrics
