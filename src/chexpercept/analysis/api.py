"""Stage 04 as a Python API: analyse the Stage 03 runs of a results folder.

``src/04_analyze_eval_result/01_analyze_model_performance.py`` parses its flags and calls
:func:`analyze`; a notebook can call it directly::

    from chexpercept.analysis.api import analyze
    result = analyze("outputs/03", "none", output_dir="outputs/04",
                     benchmark_dir="data/chexpercept")
    print(result.summary)

``02_compare_runs.py`` calls :func:`compare_runs` the same way.
What each output holds is in docs/metrics.md, "Output files".
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.analysis._workers import usable_cpus
from chexpercept.analysis.chance import load_chance_or_none
from chexpercept.analysis.compare import (
    COMPARE_COLUMNS,
    PairedRow,
    comparison_labels,
    format_comparison,
    paired_comparison,
)
from chexpercept.analysis.error_anatomy import class_bits, load_error_facts, resolve_mask_ious
from chexpercept.analysis.extended import (
    RunAnalysis,
    analyse_chance,
    analyse_run_file,
    write_extended_csvs,
    write_judge_csv,
)
from chexpercept.analysis.markdown import render_report, write_report
from chexpercept.analysis.option_order import option_counts
from chexpercept.analysis.passes import PassOptions, run_passes
from chexpercept.analysis.plots import write_plots
from chexpercept.analysis.release_tables import (
    format_cell,
    format_summary_table,
    write_all_models_csvs,
    write_model_csvs,
)
from chexpercept.analysis.rescore import bundle_sha256, load_answer_keys, rescore_results
from chexpercept.analysis.runs import RunRef, discover_runs, run_from_dir
from chexpercept.analysis.viewer import prepare_viewer_dir, write_viewer_index
from chexpercept.errors import InputError
from chexpercept.files import write_csv_atomic
from chexpercept.layouts import all_models_dir, repo_root
from chexpercept.parquet_bundle import is_parquet_bundle, unpack_parquet_bundle
from chexpercept.provenance import write_run_meta
from chexpercept.run_store import RunStore

logger = logging.getLogger(__name__)

#: The run manifest's field naming the sha256 of the ``chexpercept.json`` the run was made on.
BUNDLE_SHA_FIELD = "benchmark_json_sha256"


@dataclass
class AnalysisResult:
    """What :func:`analyze` produced.

    Attributes:
        analyses: One :class:`RunAnalysis` per run, in run order.
        written: Every file written, in order.
        summary: The release's summary table as text (printed by the CLI).
        out_dir: ``<output_dir>/all_models_oracle_<setting>/`` (all-models mode), else None.
        viewer: ``<out_dir>/viewer/index.html``, the case viewer (all-models mode with
            ``viewer=True``), else None.
    """

    analyses: list[RunAnalysis]
    written: list[Path] = field(default_factory=list)
    summary: str = ""
    out_dir: Path | None = None
    viewer: Path | None = None


def analyze(results_dir: str | Path, oracle_setting: str, *, output_dir: str | Path,
            benchmark_dir: str | Path | None, provider: str | None = None,
            model: str | None = None, bootstrap: int = 1000, seed: int = 0,
            limit: int | None = None, meta: Mapping[str, Any] | None = None,
            progress: Callable[..., Iterable[Any]] | None = None, viewer: bool = True,
            system_prompt: str | None = None,
            viewer_image_max_side: int | None = None, jobs: int | None = None,
            judged: bool = False, allow_other_bundle: bool = False) -> AnalysisResult:
    """Analyse the runs of ``results_dir`` with this oracle setting and write the outputs.

    All-models mode (neither ``provider`` nor ``model``): the per-model CSVs next to each
    ``all_results.json`` and, in ``<output_dir>/all_models_oracle_<setting>/``, the all-models
    CSVs, the new tables, the plots, the case viewer (``viewer/index.html``, docs/viewer.md),
    ``report.md`` and ``run_meta.json``. Single-model mode:
    the per-model CSVs and the new tables in each matching run's folder (docs/metrics.md,
    "Output files"). Cases Stage 03 left unfinished are missing, never wrong.

    Args:
        results_dir: Stage 03 output folder holding ``<provider>_<model>/oracle_<setting>/``.
        oracle_setting: ``none``, ``implicit`` or ``explicit``.
        output_dir: Folder that receives ``all_models_oracle_<setting>/``.
        benchmark_dir: Folder with ``chexpercept.json`` (chance rows), a parquet dataset
            folder (read in its unpacked folder form), or None (NA).
        provider: Only runs of this provider (single-model mode).
        model: Only runs of this model, ``<model>[_no_thinking]`` (single-model mode).
        bootstrap: Resamples of the 95 % intervals (docs/metrics.md, "Bootstrap"); 0: none.
        seed: Bootstrap seed.
        limit: Use only the first ``limit`` cases of each run, in file order.
        meta: Further settings recorded in ``run_meta.json`` (the CLI's ``--config``).
        progress: Optional wrapper of the loop over runs (``utils.cli.progress``).
        viewer: Write the case viewer of the runs (all-models mode).
        system_prompt: Stage 03's system prompt, shown by the viewer for runs whose manifest
            records its sha256 (None: the viewer shows the hash only).
        viewer_image_max_side: Copy the images into the viewer, longer side at most this many
            pixels (None: the viewer links the bundle's images).
        jobs: Worker processes for the per-run passes (``analysis.passes``) and the figures
            (the outputs are byte-identical for any value); None: the usable CPUs. A pool
            never starts more workers than it has runs or figures.
        judged: Score the headline tables of runs made with ``--judge`` in the judged reading
            (``--judged``); False: the strict reading, a judged question counted as
            unparseable (docs/metrics.md, "Strict and judged readings"). Either way such runs
            get both readings in ``judge_summary.csv`` and the report.
        allow_other_bundle: Accept a ``benchmark_dir`` whose ``chexpercept.json`` is not the
            one a run's manifest names (``--allow-other-bundle``): that run is scored against
            its answer keys, with a warning in the log, ``report.md`` and ``run_meta.json``
            (docs/metrics.md, "Recomputed correctness"); False: refused.

    Returns:
        The analyses, the files written and the summary table.

    Raises:
        InputError: If ``results_dir`` does not exist or holds no matching run, ``jobs < 1``,
            or ``benchmark_dir`` is not the bundle a run was made on (without
            ``allow_other_bundle``).
        SchemaError: If an ``all_results.json`` is invalid, or a stored ``correct`` flag
            disagrees with the one recomputed from its answer (names the file and key_ids).
    """
    results_dir = Path(results_dir)
    if benchmark_dir is not None and is_parquet_bundle(benchmark_dir):
        # its folder form, as Stage 03 read it (docs/hf_dataset.md, "Reading it back")
        benchmark_dir = unpack_parquet_bundle(benchmark_dir)
    all_models = provider is None and model is None
    runs = discover_runs(results_dir, oracle_setting, provider=provider, model=model)
    logger.info("analysing %d run(s) with oracle_%s in %s (bootstrap %d, seed %d)", len(runs),
                oracle_setting, results_dir, bootstrap, seed)
    benchmark = load_chance_or_none(benchmark_dir)  # question probabilities only
    answer_keys = load_answer_keys(benchmark_dir) if benchmark is not None else None
    other_bundle = _other_bundle_runs(runs, benchmark_dir, answer_keys, allow_other_bundle)
    result = AnalysisResult([])
    if all_models:
        result.out_dir = out_dir = all_models_dir(output_dir, oracle_setting)
    viewer_dir = prepare_viewer_dir(out_dir) if all_models and viewer else None
    # the error classes' benchmark facts: only of a benchmark the chance loader accepted
    error_facts = load_error_facts(benchmark_dir) if benchmark is not None else None
    options = PassOptions(n_boot=bootstrap, seed=seed, limit=limit, viewer_dir=viewer_dir,
                          image_max_side=viewer_image_max_side, error_facts=error_facts,
                          option_counts=option_counts(benchmark), judged=judged,
                          answer_keys=answer_keys,
                          other_bundle=frozenset(str(r.run_dir) for r in other_bundle))
    parts = []
    cpus = usable_cpus() if jobs is None else jobs  # each pool: at most one per item
    # each file is read once: scored, then converted for the viewer (docs/design.md,
    # "Stage 04 passes"); only the per-case matrix and the viewer's index columns are kept
    for run, (analysis, part) in zip(runs, run_passes(
            runs, options, jobs=cpus, progress=progress), strict=True):
        parts.append(part)
        result.written.extend(write_model_csvs(analysis.metrics, run.run_dir))
        logger.info("%s: %d case(s) (%s) -> %s", run.name, analysis.table.n_cases,
                    ", ".join(f"{p} {n}" for p, n in analysis.metrics.n_cases.items()),
                    run.run_dir)
        if benchmark is not None and limit is None and analysis.table.n_cases < len(benchmark):
            logger.warning("%s has results for %d of the benchmark's %d cases; the other %d are "
                           "not in any table (unfinished run? re-run Stage 03 to resume it)",
                           run.name, analysis.table.n_cases, len(benchmark),
                           len(benchmark) - analysis.table.n_cases)
        result.analyses.append(analysis)
    # wrong revised masks: each distinct option pair measured once for all runs
    resolve_mask_ious((a.errors for a in result.analyses), jobs=cpus)
    for analysis, part in zip(result.analyses, parts, strict=True):
        if part is not None and analysis.errors is not None:  # the viewer's error filter
            part.errors = [class_bits(analysis.errors.case_classes.get(k, ()))
                           for k in part.keys]
    all_metrics = [a.metrics for a in result.analyses]
    if all_models:
        chance = analyse_chance(benchmark, result.analyses)
        result.written.extend(write_all_models_csvs(all_metrics, out_dir))
        result.written.extend(write_extended_csvs(result.analyses, chance, out_dir))
        result.written.extend(write_judge_csv(result.analyses, out_dir))
        plots = write_plots(all_metrics, out_dir, oracle_setting, analyses=result.analyses,
                            chance=chance, jobs=cpus)
        result.written.extend(plots)
        if viewer_dir is not None:
            result.viewer = write_viewer_index(parts, viewer_dir, system_prompt=system_prompt)
            result.written.append(result.viewer)
        note = (f"option counts from {benchmark_dir}/chexpercept.json" if benchmark
                is not None else f"NA: no valid chexpercept.json in {benchmark_dir}")
        bundle_warning = _other_bundle_warning(other_bundle, benchmark_dir)
        if bundle_warning:
            note += f"; WARNING: {bundle_warning}"
        result.written.append(write_report(out_dir, render_report(
            result.analyses, chance, oracle_setting=oracle_setting, n_boot=bootstrap,
            seed=seed, benchmark_note=note, plots=plots, viewer=result.viewer)))
        result.written.append(write_run_meta(
            out_dir, stage="04",
            config={"results_dir": str(results_dir), "oracle_setting": oracle_setting,
                    "limit": limit, **dict(meta or {}), "benchmark_dir": str(benchmark_dir),
                    "bootstrap": bootstrap},
            seeds={"bootstrap": seed}, repo_root=repo_root(),
            extra={"runs": [str(r.all_results) for r in runs],
                   **({"bundle_warning": bundle_warning} if bundle_warning else {})}))
    else:
        for analysis in result.analyses:
            chance = analyse_chance(benchmark, [analysis])
            result.written.extend(write_extended_csvs([analysis], chance, analysis.run.run_dir))
            result.written.extend(write_judge_csv([analysis], analysis.run.run_dir))
    result.summary = format_summary_table(all_metrics, oracle_setting)
    n_cases = sum(sum(m.n_cases.values()) for m in all_metrics)
    n_missing = sum(m.n_missing for m in all_metrics)
    logger.info("done: %d run(s), %d case(s), %d missing stage result(s) counted wrong, 0 "
                "failed; outputs in %s", len(all_metrics), n_cases, n_missing,
                result.out_dir if all_models else ", ".join(str(r.run_dir) for r in runs))
    return result


def _other_bundle_runs(runs: Sequence[RunRef], benchmark_dir: str | Path | None,
                       answer_keys: Mapping[str, Any] | None, allow: bool) -> list[RunRef]:
    """The runs whose manifest names another ``chexpercept.json`` than ``benchmark_dir``'s.

    Logs how each run's correctness is recomputed (docs/metrics.md, "Recomputed correctness"):
    against the stored ground truth when there is no bundle, and that a run without a manifest
    (release format) cannot be checked against the bundle.

    Raises:
        InputError: Naming the bundle, its sha256 and every run made on another one, unless
            ``allow``.
    """
    if answer_keys is None or benchmark_dir is None:
        logger.warning("no valid chexpercept.json in %s: each turn's correctness is recomputed "
                       "against the ground_truth stored in all_results.json; the answer keys "
                       "were not checked (pass --benchmark-dir, the runs' bundle)", benchmark_dir)
        return []
    sha = bundle_sha256(benchmark_dir)
    other: list[RunRef] = []
    for run in runs:
        recorded = (RunStore(run.run_dir).read_manifest() or {}).get(BUNDLE_SHA_FIELD)
        if recorded is None:
            logger.info("%s: no run_manifest.json benchmark_json_sha256 (a release-format "
                        "run?): whether it was made on %s/chexpercept.json cannot be checked",
                        run.run_dir, benchmark_dir)
        elif recorded != sha:
            other.append(run)
    if other and not allow:
        raise InputError(
            f"{benchmark_dir}/chexpercept.json (sha256 {sha}) is not the bundle "
            f"{len(other)} run(s) were made on: "
            + "; ".join(f"{r.run_dir}/run_manifest.json benchmark_json_sha256 "
                        f"{(RunStore(r.run_dir).read_manifest() or {}).get(BUNDLE_SHA_FIELD)}"
                        for r in other)
            + " (pass that run's bundle as --benchmark-dir, or --allow-other-bundle to score "
              "it against this bundle's answer keys)")
    for run in other:
        logger.warning("%s was made on another bundle than %s/chexpercept.json (sha256 %s; "
                       "--allow-other-bundle): its correctness is recomputed against this "
                       "bundle's answer keys", run.run_dir, benchmark_dir, sha)
    return other


def _other_bundle_warning(other: Sequence[RunRef], benchmark_dir: str | Path | None) -> str:
    """The report's warning line for runs scored against another bundle ('' for none)."""
    if not other:
        return ""
    return (f"{', '.join(r.label for r in other)} scored against the answer keys of "
            f"{benchmark_dir}/chexpercept.json, not of the bundle the run was made on "
            f"(--allow-other-bundle; docs/metrics.md, \"Recomputed correctness\")")


@dataclass
class ComparisonResult:
    """What :func:`compare_runs` produced.

    Attributes:
        rows: The paired rows (docs/metrics.md, "Bootstrap", paired comparison), pooled rows first.
        csv_path: ``<output_dir>/paired_comparisons/<A>_vs_<B>.csv``.
        text: The pooled rows as a table (printed by the CLI).
        n_cases: Cases compared (the same in both runs).
    """

    rows: list[PairedRow]
    csv_path: Path
    text: str
    n_cases: int


def _rescored(run: RunRef) -> Any:
    """The run's parsed ``all_results.json``, its flags recomputed (docs/metrics.md).

    No bundle is given, so each block's stored ground truth is the answer key ("Recomputed
    correctness").

    Raises:
        InputError: If the file is missing.
        SchemaError: On invalid JSON, or a stored flag that disagrees with the recomputed one.
    """
    store = RunStore(run.run_dir)
    data = rescore_results(store.read_results(validate=False, missing_ok=False),
                           store.results_path, None)
    return dict(data) if isinstance(data, dict) else data


def _compare_cell(key: str, value: object) -> object:
    """CSV text of one comparison cell (raw and Holm-adjusted p-values: 6 significant digits)."""
    if key in ("p_value", "p_holm") and isinstance(value, float) and not math.isnan(value):
        return f"{value:.6g}"
    return format_cell(value)


def compare_runs(run_a: str | Path, run_b: str | Path, *, output_dir: str | Path | None = None,
                 n_boot: int = 1000, seed: int = 0) -> ComparisonResult:
    """Compare two Stage 03 runs on the same cases and write the paired CSV.

    Args:
        run_a: Run A: an ``oracle_<setting>/`` folder or its ``all_results.json``.
        run_b: Run B, compared with A as B - A.
        output_dir: Folder receiving ``paired_comparisons/<A>_vs_<B>.csv`` (``<A>`` is
            ``<run>.oracle_<setting>``); None: the deepest folder holding both runs, next to
            the inputs (never the source tree).
        n_boot: Paired bootstrap resamples (0: no intervals).
        seed: Bootstrap seed.

    Returns:
        The :class:`ComparisonResult`.

    Raises:
        InputError: If a run folder has no ``all_results.json``.
        SchemaError: If a file is invalid, a stored ``correct`` flag disagrees with the one
            recomputed from its answer and stored ground truth, or the runs' key_id sets
            differ (names them).
    """
    ref_a, ref_b = run_from_dir(run_a), run_from_dir(run_b)
    label_a, label_b = comparison_labels(ref_a, ref_b)
    a = analyse_run_file(ref_a, n_boot=0, seed=seed, results=_rescored(ref_a))
    b = analyse_run_file(ref_b, n_boot=0, seed=seed, results=_rescored(ref_b))
    rows = paired_comparison(a.table, b.table, n_boot=n_boot, seed=seed, label_a=label_a,
                             label_b=label_b)
    out_root = Path(output_dir) if output_dir is not None else Path(
        os.path.commonpath([ref_a.run_dir.resolve(), ref_b.run_dir.resolve()]))
    out = out_root / "paired_comparisons" / f"{label_a}_vs_{label_b}.csv"
    write_csv_atomic(out, [{k: _compare_cell(k, v) for k, v in r.as_row().items()}
                              for r in rows], COMPARE_COLUMNS)
    logger.info("done: compared %d case(s), %d row(s), 0 failed; output %s", a.table.n_cases,
                len(rows), out)
    return ComparisonResult(rows, out, format_comparison(rows, label_a, label_b),
                            a.table.n_cases)
