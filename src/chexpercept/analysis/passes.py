"""Stage 04: one pass per run (parse once, score, convert for the viewer), over worker processes.

Each run's ``all_results.json`` is parsed once: the parsed object is scored
(:func:`extended.analyse_run_file`, on a shallow copy, so its schema errors, which name every bad
key_id, come first) and then converted for the case viewer (:func:`viewer.convert_run`, which
writes the run's chunk files). Runs are independent, so with ``jobs > 1`` they are spread over
worker processes (docs/design.md, "Stage 04 passes"); results come back in run order and every
file written is byte-identical to a one-process run, whatever ``jobs`` is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import repeat
from pathlib import Path
from typing import Any

from chexpercept.analysis._workers import worker_pool
from chexpercept.analysis.case_table import results_case_table
from chexpercept.analysis.detection import check_pair_types
from chexpercept.analysis.error_anatomy import CaseFacts, analyse_errors
from chexpercept.analysis.extended import RunAnalysis, analyse_run_file
from chexpercept.analysis.judge_report import (
    JudgeSummary,
    has_judge,
    judge_counts,
    strict_results,
)
from chexpercept.analysis.option_order import option_tables
from chexpercept.analysis.release_tables import run_metrics
from chexpercept.analysis.rescore import AnswerKey, rescore_results
from chexpercept.analysis.runs import RunRef
from chexpercept.analysis.sampling import analyse_samples
from chexpercept.analysis.viewer import CHUNK_SIZE, ViewerPart, convert_run
from chexpercept.errors import InputError
from chexpercept.run_store import JUDGE_FIELD, RunStore


@dataclass(frozen=True)
class PassOptions:
    """What each run's pass does.

    Attributes:
        n_boot: Bootstrap resamples (0: no CIs).
        seed: Bootstrap seed (the same for every run, as in a one-process run).
        limit: Score only the first ``limit`` finished cases (``--limit``); None: all.
        viewer_dir: The viewer folder (``viewer.prepare_viewer_dir``); None: no viewer.
        image_max_side: Copy images into the viewer (``--copy-images``); None: link them.
        chunk_size: Cases per viewer chunk file.
        option_counts: Option counts of the benchmark's single-choice questions
            (``option_order.option_counts``) for the always-k baselines; None: the largest
            correct position seen stands in.
        error_facts: Benchmark facts of the error classes (``error_anatomy.load_error_facts``);
            None: only the classes that need none are counted.
        judged: Score the headline tables of a run made with ``--judge`` in the judged
            reading (``--judged``); False: the strict one (docs/metrics.md, "Strict and
            judged readings").
        answer_keys: The bundle's answer keys (``rescore.load_answer_keys``) every stored
            ``correct`` flag is recomputed against; None: each block's stored ground truth.
        other_bundle: The answer keys are of another bundle than the runs'
            (``--allow-other-bundle``): the recomputed flags replace the stored ones
            (docs/metrics.md, "Recomputed correctness").
    """

    n_boot: int
    seed: int
    limit: int | None = None
    viewer_dir: Path | None = None
    image_max_side: int | None = None
    chunk_size: int = CHUNK_SIZE
    option_counts: Mapping[str, Mapping[str, int]] | None = None
    error_facts: Mapping[str, CaseFacts] | None = None
    judged: bool = False
    answer_keys: Mapping[str, AnswerKey] | None = None
    other_bundle: bool = False


def run_pass(r: int, run: RunRef, options: PassOptions,
             key_pool: dict[str, str] | None = None) -> tuple[RunAnalysis, ViewerPart | None]:
    """Score run ``r``, count its error anatomy and (with a viewer folder) write its viewer chunks.

    The run's file is parsed once; the error anatomy (``error_anatomy.analyse_errors``) reads
    the scored cases' answers from the same parsed file. Its wrong revised masks are left
    pending (``error_anatomy.resolve_mask_ious`` measures them once for all runs; then
    :func:`api.analyze` gives each case's error classes to the viewer, ``ViewerPart.errors``).

    Returns:
        ``(analysis, part)``: the run's :class:`RunAnalysis` and its viewer part (None
        without a viewer folder).

    Raises:
        InputError: If the run has no ``all_results.json``.
        SchemaError: As :func:`extended.analyse_run_file` (invalid JSON, or naming every bad
            key_id); from :func:`rescore.rescore_results` for a stored ``correct`` flag that
            disagrees with the recomputed one (in any sample's file); from the viewer's
            ``records.jsonl``; from
            :func:`option_order.option_tables` for a bad ``option_order`` or ground truth;
            from :func:`detection.check_pair_types` for a case whose pair id's
            positive/negative type disagrees with its ``qa_path``.
    """
    store = RunStore(run.run_dir)
    # every stored correct flag recomputed (docs/metrics.md, "Recomputed correctness")
    raw = _rescored(store, 0, options)
    judge = _judge_of(store, raw)
    # a run made with --judge: its headline reading (docs/metrics.md, "Strict and judged
    # readings"); the viewer shows the file as it is
    data = raw if judge is None or options.judged else strict_results(raw)
    scored = dict(data) if isinstance(data, dict) else data  # scoring drops unfinished cases
    analysis = analyse_run_file(run, n_boot=options.n_boot, seed=options.seed,
                                limit=options.limit, key_pool=key_pool, results=scored)
    del scored
    if judge is not None:
        analysis = replace(analysis, judge=_judge_summary(run, raw, analysis, judge, options))
    # before anything of this run is written: a pair id contradicting its path (detection)
    check_pair_types(analysis.table, source=run.all_results)
    # the option-position tables read the same parsed file (docs/metrics.md, "Option order")
    analysis = replace(analysis, option_order=option_tables(
        data, analysis.table.key_ids, options.option_counts, run.all_results))
    # wrong revised masks are measured afterwards, once for all runs (resolve_mask_ious)
    errors = analyse_errors(data, analysis.table.key_ids, options.error_facts, run.all_results,
                            measure=False)
    analysis = replace(analysis, errors=errors)
    samples = store.samples()
    if samples > 1:  # a --samples K run: sampling_variance.csv (docs/metrics.md)
        reading = strict_results if judge is not None and not options.judged else dict
        analysis = replace(analysis, sampling=tuple(analyse_samples(
            [dict(data), *(reading(_rescored(store, k, options)) for k in range(1, samples))],
            [store.sample_results_path(k) for k in range(samples)], run.name,
            n_boot=options.n_boot, seed=options.seed,
            key_ids=None if options.limit is None else analysis.table.key_ids)))
    part = None
    if options.viewer_dir is not None:
        part = convert_run(r, run, raw, options.viewer_dir,
                           image_max_side=options.image_max_side,
                           chunk_size=options.chunk_size)
    return analysis, part


def _rescored(store: RunStore, sample: int, options: PassOptions) -> Any:
    """Sample ``sample``'s parsed results with every ``correct`` flag recomputed.

    Raises:
        InputError: If the file is missing.
        SchemaError: On invalid JSON, or a stored flag that disagrees with the recomputed one
            (``rescore.rescore_results``).
    """
    data = (store.read_results(validate=False, missing_ok=False) if sample == 0
            else store.read_sample_results(sample))
    return rescore_results(data, store.sample_results_path(sample), options.answer_keys,
                           other_bundle=options.other_bundle)


def _judge_of(store: RunStore, data: Any) -> str | None:
    """The judge's label of a run made with ``--judge`` (its manifest), else None.

    A run whose manifest is missing but whose file holds judged questions gets ''.
    """
    manifest = store.read_manifest() or {}
    judge = manifest.get(JUDGE_FIELD)
    if isinstance(judge, dict):
        return str(judge.get("model") or "")
    return "" if has_judge(data) else None


def _judge_summary(run: RunRef, raw: Any, analysis: RunAnalysis, judge: str,
                   options: PassOptions) -> JudgeSummary:
    """Both readings' release tables, judged shares and audit agreement of a judged run.

    The reading the headline did not use is scored over the same cases, without intervals.

    Raises:
        SchemaError: As :func:`extended.analyse_run_file`.
    """
    headline = "judged" if options.judged else "strict"
    other_data = strict_results(raw) if options.judged else dict(raw)
    table, _ = results_case_table(other_data, run.all_results, run.name, limit=options.limit)
    other = "strict" if options.judged else "judged"
    readings = {headline: analysis.metrics, other: run_metrics(table, run.name)}
    shares, audited, agreed = judge_counts(raw, analysis.table.key_ids)
    return JudgeSummary(judge, headline, readings, shares, audited, agreed)


def run_passes(runs: Sequence[RunRef], options: PassOptions, *, jobs: int = 1,
               progress: Callable[..., Iterable[Any]] | None = None
               ) -> Iterator[tuple[RunAnalysis, ViewerPart | None]]:
    """:func:`run_pass` of every run, in run order, over ``jobs`` worker processes.

    With ``jobs`` 1 (or one run) everything runs in this process and key_id strings are shared
    between the runs' tables. Workers are forked where the platform allows it (no re-import),
    else spawned; each holds one run at a time.

    Args:
        runs: The runs, in report order.
        options: The pass settings.
        jobs: Worker processes (>= 1; ``--jobs``); at most one per run is started.
        progress: Optional wrapper of the iteration (``utils.cli.progress``).

    Yields:
        ``(analysis, part)`` per run, in run order.

    Raises:
        InputError: If ``jobs < 1``.
        SchemaError: As :func:`run_pass`, for the first run (in run order) that fails.
    """
    if jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {jobs}")
    jobs = min(jobs, len(runs))
    if jobs <= 1:
        key_pool: dict[str, str] = {}
        results: Iterable[Any] = (run_pass(r, run, options, key_pool)
                                  for r, run in enumerate(runs))
        yield from (progress(results, total=len(runs), desc="runs") if progress else results)
        return
    with worker_pool(jobs) as pool:
        results = pool.map(run_pass, range(len(runs)), runs, repeat(options))
        yield from (progress(results, total=len(runs), desc="runs") if progress else results)
