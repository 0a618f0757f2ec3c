"""Stage 02 as a Python API: QA generation, benchmark export and bundle validation, from a config.

``src/02_qa_generation/NN_*.py`` parse their flags and call these; a notebook or a script can
call them directly (a script under ``if __name__ == "__main__":``: worker processes are
spawned, and each imports the script again)::

    from chexpercept.config_schema import load_chexpercept_config
    from chexpercept.qa import export_benchmark_from_config, generate_qa_from_config

    if __name__ == "__main__":
        cfg = load_chexpercept_config("cfg/config_sample_test.yaml")
        print(generate_qa_from_config(cfg, num_workers=2).lines()[0])
        print(export_benchmark_from_config(cfg, benchmark_dir="outputs/bench").lines()[0])

They resolve every input from the Stage 00 / Stage 01 output folders of ``path.work_dir``
(or the ``src/NN_*/outputs`` defaults) unless given, and call :func:`~chexpercept.qa.generate_qa`
and :func:`~chexpercept.qa.export_benchmark` (docs/qa_generation.md, "Export and sampling";
the written layout: docs/benchmark_format.md, "Files").
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chexpercept.bundle import BundleCheck, stats_rows, validate_benchmark_dir
from chexpercept.callbacks import OnLogDir, Progress
from chexpercept.errors import ConfigError
from chexpercept.files import read_json
from chexpercept.layouts import (
    DEFAULT_BENCHMARK_DIR,
    CurationLayout,
    DeformationLayout,
    QALayout,
    default_benchmark_dir,
    repo_root,
    stage_output_dir,
)
from chexpercept.provenance import write_run_meta
from chexpercept.qa.export import ExportReport, export_benchmark
from chexpercept.qa.generate import QAInputs, QAReport, generate_qa
from chexpercept.schema import BenchmarkItem

if TYPE_CHECKING:
    from chexpercept.config_schema import ChexperceptConfig

logger = logging.getLogger(__name__)


#: Worker processes of ``00_generate_qa.py`` (``--num-workers``) when not given; capped at the
#: CPU count.
DEFAULT_NUM_WORKERS = 16
#: ``names`` of :func:`validate_benchmark`: ``auto`` detects our bundles (marker /
#: ``option_<i>.png``); ``strict`` makes answer-revealing names errors; ``release`` makes them
#: warnings (docs/benchmark_format.md, "Option naming").
NAME_RULES: dict[str, bool | None] = {"auto": None, "strict": True, "release": False}


def qa_inputs(cfg: ChexperceptConfig, *, deformation_results_json: str | Path | None = None,
              positive_labeling_sheet: str | Path | None = None,
              negative_labeling_sheet: str | Path | None = None,
              positive_annotation_csv: str | Path | None = None,
              negative_annotation_csv: str | Path | None = None,
              deformed_mask_dir: str | Path | None = None,
              chexmask_dir: str | Path | None = None, cxas_dir: str | Path | None = None,
              output_dir: str | Path | None = None) -> QAInputs:
    """Stage 02 paths: each one given, else its default from the config.

    The Stage NN folders are ``<path.work_dir>/NN_<stage>``, else ``src/NN_<stage>/outputs``.
    CXRs are always read from ``path.mimic_cxr_path``.

    Args:
        cfg: The loaded config (``path.*``).
        deformation_results_json: Stage 01 results (None:
            ``deformation_results/deformation_results.json`` of Stage 01).
        positive_labeling_sheet: None: Stage 00 ``rosalia_pred/labeling_sheet.csv``.
        negative_labeling_sheet: None: Stage 00 ``negative/labeling_sheet.csv``.
        positive_annotation_csv: Replaces the positive sheet for the selection (column
            ``optimal`` or ``optimal?``); no default.
        negative_annotation_csv: The same for negatives; no default.
        deformed_mask_dir: Root of ``<key_id>/<stem>.png`` (None: Stage 01 ``deformed_masks``).
        chexmask_dir: None: ``path.chexmask_path``, else Stage 01 ``chexmasku_pred``.
        cxas_dir: None: ``path.cxas_mask_path``, else Stage 01 ``cxas_pred``.
        output_dir: None: the Stage 02 folder.

    Returns:
        The resolved paths.
    """
    work_dir = cfg.path.work_dir
    out00 = CurationLayout(stage_output_dir("00", work_dir))
    out01 = DeformationLayout(stage_output_dir("01", work_dir))
    return QAInputs(
        deformation_results_json=Path(deformation_results_json or out01.results_json),
        positive_labeling_sheet=Path(positive_labeling_sheet or out00.positive_sheet()),
        negative_labeling_sheet=Path(negative_labeling_sheet or out00.negative_sheet),
        positive_annotation_csv=Path(positive_annotation_csv) if positive_annotation_csv
        else None,
        negative_annotation_csv=Path(negative_annotation_csv) if negative_annotation_csv
        else None,
        deformed_mask_dir=Path(deformed_mask_dir or out01.deformed_masks_root),
        chexmask_dir=Path(chexmask_dir or cfg.path.chexmask_path or out01.chexmask_dir),
        cxas_dir=Path(cxas_dir or cfg.path.cxas_mask_path or out01.cxas_dir),
        cxr_dir=Path(cfg.path.mimic_cxr_path),
        output_dir=Path(output_dir or stage_output_dir("02", work_dir)),
    )


def generate_qa_from_config(
    cfg: ChexperceptConfig, *, deformation_results_json: str | Path | None = None,
    positive_labeling_sheet: str | Path | None = None,
    negative_labeling_sheet: str | Path | None = None,
    positive_annotation_csv: str | Path | None = None,
    negative_annotation_csv: str | Path | None = None,
    deformed_mask_dir: str | Path | None = None, chexmask_dir: str | Path | None = None,
    cxas_dir: str | Path | None = None, output_dir: str | Path | None = None,
    num_workers: int = DEFAULT_NUM_WORKERS, review_figures: bool = True,
    progress: Progress | None = None, on_log_dir: OnLogDir | None = None,
) -> QAReport:
    """Stage 02.00: the QA items and images of every accepted case, then ``run_meta.json``.

    Writes ``qa_results/{qa_results.json, qa_labeling.csv, summary.json, items/}``, the review
    figures and ``chexpercept/<key_id>/`` under the Stage 02 output folder
    (:func:`~chexpercept.qa.generate_qa`; docs/benchmark_format.md, "JSON fields" and "Image
    bundle"). Output does not depend on the worker count.

    Args:
        cfg: The loaded config (``seed``, ``qa_generation.no_deformation_ratio``, ``path.*``).
        deformation_results_json: See :func:`qa_inputs` (None: its default).
        positive_labeling_sheet: See :func:`qa_inputs`.
        negative_labeling_sheet: See :func:`qa_inputs`.
        positive_annotation_csv: Replaces the positive sheet for selecting the cases (None:
            the sheet selects).
        negative_annotation_csv: The same for negatives.
        deformed_mask_dir: See :func:`qa_inputs`.
        chexmask_dir: See :func:`qa_inputs`.
        cxas_dir: See :func:`qa_inputs`.
        output_dir: Stage 02 output folder (None: from ``path.work_dir``).
        num_workers: Worker processes, capped at the CPU count (at least 1).
        review_figures: Draw the figures ``qa_labeling.csv`` names.
        progress: Wraps the case loop.
        on_log_dir: Called with ``logs/`` of the output folder before any input is read.

    Returns:
        The report (``lines()`` are its summary lines, ``failure_counts()`` feeds the exit code).

    Raises:
        InputError: If an input file is missing.
        SchemaError: If an input does not match its schema.
    """
    inputs = qa_inputs(cfg, deformation_results_json=deformation_results_json,
                       positive_labeling_sheet=positive_labeling_sheet,
                       negative_labeling_sheet=negative_labeling_sheet,
                       positive_annotation_csv=positive_annotation_csv,
                       negative_annotation_csv=negative_annotation_csv,
                       deformed_mask_dir=deformed_mask_dir, chexmask_dir=chexmask_dir,
                       cxas_dir=cxas_dir, output_dir=output_dir)
    if on_log_dir is not None:
        on_log_dir(inputs.output_dir / "logs")
    workers = max(1, min(num_workers, os.cpu_count() or 1))
    report = generate_qa(inputs, seed=cfg.seed, ratios=cfg.qa_generation.no_deformation_ratio,
                         num_workers=workers, review_figures=review_figures, progress=progress)
    write_run_meta(inputs.output_dir, stage="02_generate_qa", config=cfg,
                   seeds={"seed": cfg.seed}, repo_root=repo_root(),
                   extra={"num_workers": workers})
    return report


def export_benchmark_from_config(
    cfg: ChexperceptConfig, *, qa_results_json: str | Path | None = None,
    bundle_dir: str | Path | None = None, benchmark_dir: str | Path | None = None,
    link: str = "hardlink", allow_mixed_licences: bool = False,
) -> ExportReport:
    """Stage 02.01: sample the benchmark cases and write the released layout, then validate it.

    Cases per lesion and path come from ``qa_generation.sampling`` (docs/qa_generation.md,
    "Export and sampling"); see :func:`~chexpercept.qa.export_benchmark` for what is written.

    Args:
        cfg: The loaded config (``seed``, ``qa_generation.sampling``, ``path.work_dir``).
        qa_results_json: Stage 02 results (None: ``qa_results/qa_results.json`` of the Stage
            02 output folder).
        bundle_dir: Stage 02 image bundle (None: ``chexpercept/`` of the Stage 02 output
            folder).
        benchmark_dir: Output root (None: ``<repo>/data/chexpercept``).
        link: ``hardlink`` (copy where linking fails) or ``copy``.
        allow_mixed_licences: Export even when redistributable and restricted sources meet
            (docs/curation.md, "Licences"). The sources come from the Stage 00
            ``data_sources.json`` of ``path.work_dir``; without that file (outputs of an
            older Stage 00) no licence is recorded and a warning says so.

    Returns:
        The report (``stats`` holds the stats rows, ``lines()`` its summary lines).

    Raises:
        InputError: For an unknown ``link``, a missing results file or missing case images,
            or mixed licences without ``allow_mixed_licences``.
        SchemaError: If the results do not validate, or the written bundle fails the check.
    """
    out02 = QALayout(stage_output_dir("02", cfg.path.work_dir))
    sampling = cfg.qa_generation.sampling
    sources_json = CurationLayout(stage_output_dir("00", cfg.path.work_dir)).data_sources
    data_sources = read_json(sources_json) if sources_json.is_file() else None
    if data_sources is None:
        logger.warning("%s not found: the exported cases carry no licence record (re-run "
                       "Stage 00.00 to record it)", sources_json)
    return export_benchmark(
        read_json(qa_results_json or out02.qa_results_json),
        bundle_dir=Path(bundle_dir or out02.bundle_dir),
        benchmark_dir=Path(benchmark_dir or default_benchmark_dir()),
        seed=cfg.seed, per_path=sampling.per_path(), link=link,
        distinct_cxrs=sampling.distinct_cxrs, data_sources=data_sources,
        allow_mixed_licences=allow_mixed_licences)


@dataclass(frozen=True)
class BundleValidation:
    """Result of :func:`validate_benchmark`.

    Attributes:
        benchmark_dir: The folder checked.
        check: Cases and images checked, warnings (problems raise instead).
        items: The validated ``chexpercept.json`` items.
    """

    benchmark_dir: Path
    check: BundleCheck
    items: dict[str, BenchmarkItem]

    @property
    def stats(self) -> list[dict[str, Any]]:
        """Cases, CXRs and QA items per lesion, path and stage (``stats.csv`` rows)."""
        return stats_rows(self.items)

    def line(self) -> str:
        """The stage's summary line."""
        c = self.check
        return (f"bundle valid: {len(c.cases)} case(s), {c.images} image(s) checked "
                f"({len(c.conversions)} need conversion), {len(c.warnings)} warning(s); names "
                f"rule: {'strict' if c.strict_names else 'release'} -> {self.benchmark_dir}")


def validate_benchmark(benchmark_dir: str | Path | None = None, *,
                       names: str = "auto") -> BundleValidation:
    """Stage 02.02: validate a benchmark bundle (ours or the released one); writes nothing.

    Runs the shared validator (:func:`chexpercept.bundle.validate_benchmark_dir`, the same
    checks as the export and Stage 03's ``--validate-only``) and logs its warnings, one per
    line (docs/benchmark_format.md; docs/images.md, "Image loading").

    Args:
        benchmark_dir: Folder with ``chexpercept.json`` and ``chexpercept/`` (None:
            ``<repo>/data/chexpercept``).
        names: Rule for answer-revealing file names, a key of :data:`NAME_RULES`.

    Returns:
        The validation (``stats`` for the table, ``line()`` the summary line).

    Raises:
        ConfigError: For an unknown ``names`` rule.
        InputError: If ``chexpercept.json`` or ``chexpercept/`` is missing.
        SchemaError: Once, listing every problem of the bundle.
    """
    if names not in NAME_RULES:
        raise ConfigError(f"names rule {names!r}: expected one of {', '.join(NAME_RULES)}")
    root = Path(benchmark_dir) if benchmark_dir else default_benchmark_dir()
    check, items = validate_benchmark_dir(root, strict_names=NAME_RULES[names])
    check.log_warnings()
    return BundleValidation(benchmark_dir=root, check=check, items=items)


__all__ = [
    "DEFAULT_BENCHMARK_DIR",
    "DEFAULT_NUM_WORKERS",
    "NAME_RULES",
    "BundleValidation",
    "export_benchmark_from_config",
    "generate_qa_from_config",
    "qa_inputs",
    "validate_benchmark",
]
