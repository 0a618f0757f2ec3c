"""Stage 00 as a Python API: one function per numbered script (00.00 to 00.04), from a config.

``src/00_source_data_curation/NN_*.py`` parse their flags and call these; a notebook or a
script can call them directly::

    from chexpercept.config_schema import load_chexpercept_config
    from chexpercept.curation import sample_mimic_ils_cases

    report = sample_mimic_ils_cases(load_chexpercept_config("cfg/config_sample_test.yaml"))
    print(report.line())

Each function resolves the Stage 00 output folder (``output_dir``, else
``<path.work_dir>/00_source_data_curation``, else ``src/00_source_data_curation/outputs``),
runs its step and writes the step's summary (and ``run_meta.json`` where the step has one).
What each step reads and writes: docs/curation.md.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chexpercept.callbacks import OnLogDir, Progress
from chexpercept.config_schema import load_chexpercept_config
from chexpercept.curation import candidates, public, sampling
from chexpercept.curation.images import PrepareSummary, prepare_images
from chexpercept.curation.segmenters import create_segmenter
from chexpercept.curation.sheets import (
    MergeOutcome,
    NegativeOutcome,
    SheetTask,
    distribute,
    merge_annotations,
    merge_parts,
    positive_dicoms,
    prepare_negatives,
)
from chexpercept.curation.sources import MIMIC_ILS
from chexpercept.errors import ConfigError, InputError
from chexpercept.files import read_json, write_csv_atomic, write_json_atomic
from chexpercept.frame import prepared_png, transforms_index
from chexpercept.layouts import CurationLayout, repo_root, stage_output_dir
from chexpercept.lesions import LESIONS
from chexpercept.provenance import write_run_meta
from chexpercept.schema import (
    NEGATIVE_SHEET_COLUMNS,
    POSITIVE_PART_SHEET_COLUMNS,
    POSITIVE_SHEET_COLUMNS,
)
from utils.ray_pool import RayWorkers, map_on_ray

if TYPE_CHECKING:
    from chexpercept.config_schema import ChexperceptConfig

logger = logging.getLogger(__name__)


#: Bump when the sampling rule changes, so old outputs are not reused (docs/differences.md D5).
SAMPLING_VERSION = "2"
#: Annotators are labelled A..Z (docs/curation.md, "Labeling distribution").
MAX_ANNOTATORS = 26
#: Annotators when neither ``--num-annotators`` nor a config gives the number (the release's).
DEFAULT_NUM_ANNOTATORS = 6


def stage00_dir(work_dir: str | Path | None, output_dir: str | Path | None = None) -> Path:
    """The Stage 00 output folder: ``output_dir`` when given, else from ``path.work_dir``.

    Args:
        work_dir: Config ``path.work_dir`` (None: ``src/00_source_data_curation/outputs``).
        output_dir: An explicit folder (``--output-dir``), or None.
    """
    return Path(output_dir) if output_dir else stage_output_dir("00", work_dir)


# --------------------------------------------------------------------------------------
# 00.00 sampling and CXR preparation
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingReport:
    """Result of :func:`sample_mimic_ils_cases`.

    Attributes:
        output_dir: The Stage 00 output folder.
        selection: The sampled buckets (``global``, ``basic``, ``negative``; lesion -> entries).
        reused: Whether the sampling outputs were current and reused (docs/differences.md D5).
        images: dicom_id -> MIMIC-CXR-JPG relative path of every sampled CXR.
        prepared: Counts of the CXR preparation (None when skipped or not needed).
    """

    output_dir: Path
    selection: sampling.SourcePool
    reused: bool
    images: dict[str, str]
    prepared: PrepareSummary | None = None

    def line(self) -> str:
        """The stage's last log line."""
        sel = self.selection
        positives = (sum(len(v) for v in sel.global_info.values())
                     + sum(len(v) for v in sel.basic_info.values()))
        negatives = sum(len(v) for v in sel.negative_info.values())
        return (f"done: {positives} positive, {negatives} negative entries, {len(self.images)} "
                f"dicoms; outputs in {self.output_dir}")


def _sampling_params(cfg: ChexperceptConfig, seed: int) -> dict[str, Any]:
    """The settings hashed into ``sampling_summary.json`` (reuse only while unchanged)."""
    cur = cfg.source_data_curation
    return {"sampling_version": SAMPLING_VERSION, "seed": seed,
            "max_samples_per_lesion": cur.max_samples_per_lesion,
            "samples_per_lesion_negative": cur.samples_per_lesion_negative,
            "positive_views": cur.positive_views if cfg.path.mimic_meta_path else None,
            "mimic_report_path": cfg.path.mimic_report_path,
            "ils_splits": list(cur.ils_splits),
            "mimic_cxr_splits": (list(cur.mimic_cxr_splits) if cur.mimic_cxr_splits
                                 else None)}


def _check_sampling_inputs(cfg: ChexperceptConfig, config_path: str | Path | None) -> None:
    """Fail before any work on a missing split CSV setting or MIMIC-ILS file."""
    where = config_path if config_path is not None else "the config"
    if not cfg.path.mimic_ils_path:
        raise ConfigError(f"path.mimic_ils_path must be set for source_data_curation.source "
                          f"mimic-ils in {where}")
    if cfg.source_data_curation.mimic_cxr_splits and not cfg.path.mimic_split_meta_path:
        raise ConfigError(f"source_data_curation.mimic_cxr_splits is set, so "
                          f"path.mimic_split_meta_path (MIMIC-CXR-JPG split.csv) must be set "
                          f"in {where}")
    if not Path(cfg.path.mimic_ils_path).is_file():
        raise InputError(f"MIMIC-ILS file not found: {cfg.path.mimic_ils_path} "
                         f"(config path.mimic_ils_path in {where})")


def _load_selection(layout: CurationLayout) -> sampling.SourcePool:
    return sampling.SourcePool(*(read_json(layout.segmentation_info(kind))
                                 for kind in ("global", "basic", "negative")))


def _filtered_pool(cfg: ChexperceptConfig, split_csv: str | None
                   ) -> tuple[sampling.SourcePool, list[dict[str, str]]]:
    """The bucketed pool after the optional view and split filters, and the dropped pairs."""
    cur = cfg.source_data_curation
    train = sampling.load_splits(cfg.path.mimic_ils_path, cur.ils_splits)
    pool = sampling.bucket_pairs(train, source=cfg.path.mimic_ils_path,
                                 report_root=cfg.path.mimic_report_path)
    dropped: list[dict[str, str]] = []
    if cfg.path.mimic_meta_path:
        views = sampling.read_view_positions(cfg.path.mimic_meta_path)
        pool, dropped = sampling.filter_views(pool, views, cur.positive_views)
    if split_csv:
        pool, by_split = sampling.filter_splits(pool, sampling.read_split_map(split_csv),
                                                cur.mimic_cxr_splits)
        dropped += by_split
    for d in dropped:
        logger.info("dropped %s (dicom %s): %s", d["key_id"], d["dicom_id"], d["reason"])
    return pool, dropped


def _draw(cfg: ChexperceptConfig, layout: CurationLayout, seed: int, split_csv: str | None,
          digest: str, params: dict[str, Any]) -> sampling.Selection:
    """Sample afresh and write the three segmentation-info JSONs and ``sampling_summary.json``."""
    cur = cfg.source_data_curation
    pool, dropped = _filtered_pool(cfg, split_csv)
    selection = sampling.sample_pool(pool, seed=seed, max_positive=cur.max_samples_per_lesion,
                                     negatives_per_lesion=cur.samples_per_lesion_negative)
    for kind, bucket in (("global", selection.global_info), ("basic", selection.basic_info),
                         ("negative", selection.negative_info)):
        write_json_atomic(layout.segmentation_info(kind), bucket, indent=4)
    write_json_atomic(layout.sampling_summary, {
        "inputs_hash": digest, "params": params, "pool": pool.counts(),
        "selected": selection.counts(), "dropped": dropped,
        "shortfalls": selection.shortfalls})
    return selection


def _prepare_cxrs(cfg: ChexperceptConfig, images: dict[str, str], *, skip: bool,
                  progress: Progress | None) -> PrepareSummary | None:
    """Convert the sampled JPGs into ``path.mimic_cxr_path`` (docs/curation.md, "Working frame").

    Raises:
        InputError: When ``path.mimic_cxr_jpg_path`` is unset and sampled PNGs are missing
            (every one listed), or a source JPG is missing.
    """
    cxr_dir, mode = cfg.path.mimic_cxr_path, cfg.source_data_curation.prepare_mode
    if skip:
        logger.info("image preparation skipped (--skip-prepare)")
        return None
    if cfg.path.mimic_cxr_jpg_path:
        summary = prepare_images(images, cfg.path.mimic_cxr_jpg_path, cxr_dir, mode=mode,
                                 iterate=(lambda xs: progress(xs, len(xs))) if progress
                                 else iter)
        logger.info("CXR PNGs in %s (%s): %d converted, %d already there; transforms in %s",
                    cxr_dir, mode, summary.converted, summary.skipped,
                    transforms_index(cxr_dir))
        return summary
    missing = [f"{d}: {prepared_png(cxr_dir, d)}" for d in images
               if not prepared_png(cxr_dir, d).is_file()]
    if missing:
        raise InputError(f"path.mimic_cxr_jpg_path is unset and {len(missing)} sampled CXR "
                         f"PNG(s) are missing from path.mimic_cxr_path:\n  "
                         + "\n  ".join(missing))
    logger.info("path.mimic_cxr_jpg_path unset; all %d sampled CXR PNGs already in %s",
                len(images), cxr_dir)
    return None


def sample_mimic_ils_cases(
    cfg: ChexperceptConfig, *, config_path: str | Path | None = None,
    output_dir: str | Path | None = None, seed: int | None = None, skip_prepare: bool = False,
    force: bool = False, progress: Progress | None = None, on_log_dir: OnLogDir | None = None,
) -> SamplingReport:
    """Stage 00.00: seeded MIMIC-ILS sample per lesion, then the working-frame CXR PNGs.

    With public sources in ``source_data_curation.source`` the sample comes from their box
    tables instead (:mod:`chexpercept.curation.public`; docs/curation.md, "Public sources"),
    into the same files plus ``data_sources.json``.

    Writes ``global_segmentation_info.json``, ``basic_segmentation_info.json``,
    ``global_segmentation_negative_info.json`` and ``sampling_summary.json`` (reused unchanged
    while the inputs, seed and settings hash the same, unless ``force``), the
    ``path.mimic_cxr_path/<dicom_id>.png`` copies with their transforms, and ``run_meta.json``
    (docs/curation.md, "Sampling" and "Working frame"; docs/differences.md D2-D5).

    Args:
        cfg: The loaded config (``path.*``, ``source_data_curation.*``, ``seed``).
        config_path: The config file, named in error messages (None: "the config").
        output_dir: Stage 00 output folder (None: from ``path.work_dir``).
        seed: Overrides ``cfg.seed`` (None: the config's).
        skip_prepare: Do not convert the sampled JPGs.
        force: Resample even if the outputs are current.
        progress: Wraps the CXR conversion loop.
        on_log_dir: Called with the output folder before any work.

    Returns:
        The report (``line()`` is the stage's summary line).

    Raises:
        ConfigError: If ``mimic_cxr_splits`` is set without ``path.mimic_split_meta_path``.
        InputError: If the MIMIC-ILS file, a source JPG or (without a JPG root) a prepared PNG
            is missing.
        SchemaError: If the MIMIC-ILS file is malformed (every bad entry listed).
    """
    seed = cfg.seed if seed is None else seed
    cur = cfg.source_data_curation
    out = stage00_dir(cfg.path.work_dir, output_dir)
    layout = CurationLayout(out)
    if on_log_dir is not None:
        on_log_dir(out)
    if list(cur.source) != [MIMIC_ILS]:
        return _sample_public_cases(cfg, layout, seed, skip_prepare=skip_prepare, force=force,
                                    progress=progress)
    params = _sampling_params(cfg, seed)
    _check_sampling_inputs(cfg, config_path)
    split_csv = cfg.path.mimic_split_meta_path if cur.mimic_cxr_splits else None
    digest = sampling.inputs_hash([cfg.path.mimic_ils_path, cfg.path.mimic_meta_path,
                                   split_csv], params)
    outputs = [layout.segmentation_info(k) for k in ("global", "basic", "negative")]
    previous = (read_json(layout.sampling_summary) if layout.sampling_summary.is_file()
                else {})
    reused = (not force and all(p.is_file() for p in outputs)
              and previous.get("inputs_hash") == digest)
    if reused:
        logger.info("sampling outputs in %s are current (same inputs, seed and settings); "
                    "reusing them", out)
        selection = _load_selection(layout)
    else:
        selection = _draw(cfg, layout, seed, split_csv, digest, params)
    for lesion in LESIONS:
        logger.info("%-13s global %4d  basic %4d  negative %4d", lesion,
                    len(selection.global_info[lesion]), len(selection.basic_info[lesion]),
                    len(selection.negative_info[lesion]))
    images = sampling.selected_dicoms(selection)
    write_json_atomic(layout.data_sources, public.mimic_data_sources(images))
    prepared = _prepare_cxrs(cfg, images, skip=skip_prepare, progress=progress)
    write_run_meta(out, stage="00.00", config=cfg, seeds={"curation": seed},
                      repo_root=repo_root())
    return SamplingReport(output_dir=out, selection=selection, reused=reused, images=images,
                          prepared=prepared)


def _sample_public_cases(cfg: ChexperceptConfig, layout: CurationLayout, seed: int, *,
                         skip_prepare: bool, force: bool,
                         progress: Progress | None) -> SamplingReport:
    """Stage 00.00 for public sources (docs/curation.md, "Public sources")."""
    selection, reused = public.draw_public(cfg, layout, seed, force=force)
    for lesion in LESIONS:
        logger.info("%-13s positive %4d  negative %4d", lesion,
                    len(selection.global_info[lesion]), len(selection.negative_info[lesion]))
    images = {im.dicom_id: im.candidates[0] for im in public.source_images(selection)}
    prepared = None
    if skip_prepare:
        logger.info("image preparation skipped (--skip-prepare)")
    else:
        prepared = public.prepare_public(cfg, selection, progress=progress)
        logger.info("CXR PNGs in %s: %d converted, %d already there", cfg.path.mimic_cxr_path,
                    prepared.converted, prepared.skipped)
    write_run_meta(layout.out, stage="00.00", config=cfg, seeds={"curation": seed},
                      repo_root=repo_root())
    return SamplingReport(output_dir=layout.out, selection=selection, reused=reused,
                          images=images, prepared=prepared)


# --------------------------------------------------------------------------------------
# 00.01 candidate masks
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CandidateReport:
    """Result of :func:`generate_candidate_masks` (also written as ``summary[_part<p>].json``).

    Attributes:
        segmenter: ``source_data_curation.segmenter``.
        items: Work items of this shard.
        processed: Items written now.
        skipped: Items whose outputs were already there (resume).
        failed: ``{key_id, reason}`` of every item that could not be built.
        sheet: The labeling sheet written (``labeling_sheet[_part<p>].csv``).
        summary_json: The summary file written.
    """

    segmenter: str
    items: int
    processed: int
    skipped: int
    failed: list[dict[str, str]]
    sheet: Path
    summary_json: Path

    def to_json(self) -> dict[str, Any]:
        """The ``summary[_part<p>].json`` record."""
        return {"segmenter": self.segmenter, "items": self.items, "processed": self.processed,
                "skipped": self.skipped, "failed": self.failed}

    def failure_counts(self) -> tuple[int, int, str]:
        """``(failed, total, what)`` for the stage's exit code (``failures_exit_code``)."""
        return len(self.failed), self.items, "pair(s)"

    def line(self) -> str:
        """The stage's last log line (failures counted by reason)."""
        reasons = dict(Counter(f["reason"] for f in self.failed))
        return (f"done: processed {self.processed}, skipped {self.skipped} (already done), "
                f"failed {len(self.failed)} {reasons}; sheet {self.sheet}")


def _part_suffix(part: int | None) -> str:
    """``_part<p>`` of a shard's file names and run_meta stage, empty when unsharded."""
    return f"_part{part}" if part is not None else ""


def _positive_info(layout: CurationLayout) -> dict[str, Any]:
    """The global and basic segmentation-info JSONs of Stage 00.00.

    Raises:
        InputError: If one is missing.
    """
    info = {}
    for kind in ("global", "basic"):
        path = layout.segmentation_info(kind)
        if not path.is_file():
            raise InputError(f"{path} not found; run 00_sample_mimic_ils_case.py first")
        info[kind] = read_json(path)
    return info


class _ItemRunner:
    """One Ray actor's worker of 00.01: creates the segmenter once, then processes items."""

    def __init__(self, cfg: ChexperceptConfig, layout: CurationLayout) -> None:
        self.cfg = cfg
        self.layout = layout
        self.segmenter = create_segmenter(cfg.source_data_curation.segmenter, cfg)

    def run(self, item: dict[str, Any]) -> candidates.ItemOutcome:
        return candidates.process_item(item, self.layout, cxr_dir=self.cfg.path.mimic_cxr_path,
                                       seg_mask_root=self.cfg.path.mimic_ils_seg_mask_path,
                                       segmenter=self.segmenter)


def _run_items(
    items: list[dict[str, Any]], layout: CurationLayout, cfg: ChexperceptConfig,
    segmenter: Any, progress: Progress | None, ray: RayWorkers | None = None,
) -> tuple[list[candidates.ItemOutcome], dict[str, list[dict]], list[dict[str, str]]]:
    """Process every item; its ``results.json`` entry and sheet row follow unless it failed.

    With ``ray``, the items run on Ray actors (each creates the segmenter once) and their
    outcomes come back in item order, so what is written is what one process writes.

    Returns:
        The outcomes (item order), the ``results.json`` mapping and the sheet rows.
    """
    results: dict[str, list[dict]] = {}
    rows: list[dict[str, str]] = []
    outcomes = []
    done = (map_on_ray(_ItemRunner, (cfg, layout), "run", items, ray,
                       label="segmenter-worker", default_gpus=None) if ray is not None else
            (candidates.process_item(item, layout, cxr_dir=cfg.path.mimic_cxr_path,
                                     seg_mask_root=cfg.path.mimic_ils_seg_mask_path,
                                     segmenter=segmenter) for item in items))
    for item, outcome in zip(progress(items, len(items)) if progress else items, done,
                             strict=True):
        outcomes.append(outcome)
        if outcome.status == "failed":
            logger.warning("%s failed: %s", outcome.key_id, outcome.reason)
            continue
        results.setdefault(item["pair_id"], []).append(candidates.result_entry(item, layout))
        rows.append(candidates.sheet_row(item, layout))
    return outcomes, results, rows


def generate_candidate_masks(
    cfg: ChexperceptConfig, *, output_dir: str | Path | None = None,
    max_samples: int | None = None, part: int | None = None, total_parts: int = 1,
    progress: Progress | None = None, on_log_dir: OnLogDir | None = None,
    ray: RayWorkers | None = None,
) -> CandidateReport:
    """Stage 00.01: candidate masks, review plots, results and the labeling sheet of one shard.

    Per pair: ``rosalia_pred/<target>/<pair_id>/{pred_img.png, pred_mask.png,
    pred_text.json}`` and ``plots/<target>/<key_id>.png`` (skipped when all exist); then
    ``results[_part<p>].json``, ``labeling_sheet[_part<p>].csv``, ``summary[_part<p>].json`` and
    ``run_meta.json`` (docs/curation.md, "Candidate masks"). The segmenter
    (``source_data_curation.segmenter``) is created only when some item is still to do.

    Args:
        cfg: The loaded config.
        output_dir: Stage 00 output folder (None: from ``path.work_dir``).
        max_samples: Positives per lesion, global first then basic (None:
            ``source_data_curation.max_samples_per_lesion``).
        part: Shard index in ``[0, total_parts)``; None processes every item.
        total_parts: Number of shards (release rule ``chunk = ceil(N / total_parts)``).
        progress: Wraps the item loop.
        on_log_dir: Called with ``rosalia_pred/`` before any input is read.
        ray: Run the items on Ray actors (``--ray``, ``--ray-workers``; each creates the
            segmenter once, 1 GPU each when the cluster has GPUs) instead of in this process;
            the outputs are byte-identical (docs/design.md, "Ray replicas").

    Returns:
        The report; failed items are listed there, not raised.

    Raises:
        ConfigError: For an unknown segmenter, a ``part`` outside ``[0, total_parts)``, or a
            segmenter whose settings are missing.
        InputError: If the Stage 00.00 segmentation-info JSONs are missing.
    """
    cur = cfg.source_data_curation
    candidates.check_segmenter(cur.segmenter)
    layout = CurationLayout(stage00_dir(cfg.path.work_dir, output_dir))
    if on_log_dir is not None:
        on_log_dir(layout.candidate_root)
    info = _positive_info(layout)
    limit = max_samples if max_samples is not None else cur.max_samples_per_lesion
    work = candidates.build_work_list(info["global"], info["basic"], limit)
    items = candidates.shard(work, part, total_parts)
    todo = [it for it in items if not candidates.item_done(it, layout)]
    # Load the model only when there is work (a finished shard re-runs without a GPU).
    on_ray = ray is not None and bool(todo)  # the actors create it there
    segmenter = create_segmenter(cur.segmenter, cfg) if todo and not on_ray else None
    logger.info("%d work item(s)%s of %d", len(items),
                f" in part {part}/{total_parts}" if part is not None else "", len(work))
    outcomes, results, rows = _run_items(items, layout, cfg, segmenter or cur.segmenter,
                                         progress, ray if on_ray else None)
    columns = POSITIVE_PART_SHEET_COLUMNS if part is not None else POSITIVE_SHEET_COLUMNS
    write_json_atomic(layout.candidate_results(part), results, indent=4)
    write_csv_atomic(layout.positive_sheet(part), rows, columns)
    counts = Counter(o.status for o in outcomes)
    report = CandidateReport(
        segmenter=cur.segmenter, items=len(items), processed=counts["processed"],
        skipped=counts["skipped"],
        failed=[{"key_id": o.key_id, "reason": o.reason} for o in outcomes
                if o.status == "failed"],
        sheet=layout.positive_sheet(part), summary_json=layout.candidate_summary(part))
    write_json_atomic(report.summary_json, report.to_json())
    write_run_meta(layout.candidate_root, stage=f"00.01{_part_suffix(part)}", config=cfg,
                      seeds={}, repo_root=repo_root())
    return report


# --------------------------------------------------------------------------------------
# 00.02 merge of shard outputs
# --------------------------------------------------------------------------------------


def merge_candidate_parts(base_out: str | Path | None = None, *,
                          config_path: str | Path | None = None, total_parts: int = 4,
                          force: bool = False) -> MergeOutcome:
    """Stage 00.02: merge the shards of 00.01 into ``results.json`` and ``labeling_sheet.csv``.

    A missing part is an error and an unsharded run is never clobbered (docs/differences.md D7;
    :func:`chexpercept.curation.sheets.merge_parts`).

    Args:
        base_out: The ``rosalia_pred`` folder (None: under the Stage 00 output folder of
            ``config_path``'s ``path.work_dir``, else of the default output folder).
        config_path: Config file, read only when ``base_out`` is None.
        total_parts: Number of parts to merge.
        force: Merge even if the unsharded outputs are newer than the parts.

    Returns:
        The outcome (``written`` False when nothing was to do; ``line()`` says what happened).

    Raises:
        ConfigError: If the config file is invalid.
        InputError: If some but not all parts exist (missing ones named), or nothing does.
        SchemaError: If a part sheet lacks columns.
    """
    if base_out:
        root = Path(base_out)
    else:
        work_dir = load_chexpercept_config(config_path).path.work_dir if config_path else None
        root = CurationLayout(stage00_dir(work_dir)).candidate_root
    return merge_parts(root, total_parts, force=force)


# --------------------------------------------------------------------------------------
# 00.03 negative sheet
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NegativeReport:
    """Result of :func:`prepare_negative_sheet` (also written as ``negative/summary.json``).

    Attributes:
        outcome: Sheet rows, copy counts and shortfalls.
        samples_per_lesion: Negatives requested per lesion.
        excluded_positive_dicoms: Positive dicoms never used as negatives.
        sheet: ``negative/labeling_sheet.csv``.
        summary_json: ``negative/summary.json``.
    """

    outcome: NegativeOutcome
    samples_per_lesion: int
    excluded_positive_dicoms: int
    sheet: Path
    summary_json: Path

    def to_json(self) -> dict[str, Any]:
        """The ``negative/summary.json`` record."""
        o = self.outcome
        return {"samples_per_lesion": self.samples_per_lesion,
                "excluded_positive_dicoms": self.excluded_positive_dicoms,
                "rows": len(o.rows), "copied": o.copied, "skipped": o.skipped,
                "shortfalls": o.shortfalls}

    def line(self) -> str:
        """The stage's last log line."""
        o = self.outcome
        return (f"done: {len(o.rows)} negative(s), {o.copied} copied, {o.skipped} skipped "
                f"(already there), failed 0; sheet {self.sheet}")


def prepare_negative_sheet(
    cfg: ChexperceptConfig, *, output_dir: str | Path | None = None,
    samples_per_lesion: int | None = None, positive_csv: str | Path | None = None,
    on_log_dir: OnLogDir | None = None,
) -> NegativeReport:
    """Stage 00.03: copy the sampled negative CXRs and write the negative sheet and summary.

    Writes ``negative/<lesion>/<key_id>.png`` (existing copies kept), ``negative/
    labeling_sheet.csv`` and ``negative/summary.json``. Every positive dicom is excluded
    (docs/curation.md, "Negatives"; docs/differences.md D8).

    Args:
        cfg: The loaded config.
        output_dir: Stage 00 output folder (None: from ``path.work_dir``).
        samples_per_lesion: Negatives per lesion (None:
            ``source_data_curation.samples_per_lesion_negative``).
        positive_csv: Positive sheet whose dicoms are excluded; given, it must exist (None:
            ``rosalia_pred/labeling_sheet.csv``, skipped with a warning when absent).
        on_log_dir: Called with ``negative/`` before any input is read.

    Returns:
        The report (``line()`` is the stage's summary line).

    Raises:
        InputError: If the negative info JSON, a given positive sheet or a CXR is missing.
    """
    layout = CurationLayout(stage00_dir(cfg.path.work_dir, output_dir))
    if on_log_dir is not None:
        on_log_dir(layout.negative_sheet.parent)
    k = (samples_per_lesion if samples_per_lesion is not None
         else cfg.source_data_curation.samples_per_lesion_negative)
    explicit = positive_csv is not None
    exclude = positive_dicoms(layout, Path(positive_csv) if explicit else layout.positive_sheet(),
                              explicit=explicit)
    outcome = prepare_negatives(layout, cxr_dir=cfg.path.mimic_cxr_path, samples_per_lesion=k,
                                exclude=exclude)
    for lesion, msg in outcome.shortfalls.items():
        logger.warning("%s: %s", lesion, msg)
    write_csv_atomic(layout.negative_sheet, outcome.rows, NEGATIVE_SHEET_COLUMNS)
    report = NegativeReport(outcome=outcome, samples_per_lesion=k,
                            excluded_positive_dicoms=len(exclude), sheet=layout.negative_sheet,
                            summary_json=layout.negative_summary)
    write_json_atomic(report.summary_json, report.to_json())
    return report


# --------------------------------------------------------------------------------------
# 00.04 distribution and merge-back
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelingReport:
    """Result of :func:`distribute_labeling`.

    Attributes:
        merged: True for a merge-back, False for a distribution.
        num_annotators: Annotators A.. used.
        tasks: The positive and negative main sheets.
        output_dir: The Stage 00 output folder (``distribute/`` is under it).
        counts: Distribution: task -> annotator -> rows; merge: task -> {accepted, rejected,
            unreviewed}.
    """

    merged: bool
    num_annotators: int
    tasks: list[SheetTask]
    output_dir: Path
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """One log line per sheet, then the stage's summary line."""
        if self.merged:
            return [*(f"{task}: accepted {c['accepted']}, rejected {c['rejected']}, unreviewed "
                      f"{c['unreviewed']}" for task, c in self.counts.items()),
                    f"done: merged {self.num_annotators} annotator(s) into {self.tasks[0].path} "
                    f"and {self.tasks[1].path}"]
        return [*(f"{task}: " + ", ".join(f"{a}={k}" for a, k in per.items())
                  for task, per in self.counts.items()),
                f"done: distributed over {self.num_annotators} annotator(s) into "
                f"{self.output_dir / 'distribute'}"]


def distribute_labeling(
    cfg: ChexperceptConfig | None = None, *, output_dir: str | Path | None = None,
    positive_csv: str | Path | None = None, negative_csv: str | Path | None = None,
    num_annotators: int | None = None, merge: bool = False, allow_unreviewed: bool = False,
    force: bool = False,
) -> LabelingReport:
    """Stage 00.04: deal the sheets over annotators, or (``merge``) merge their answers back.

    Distribution writes ``distribute/annotator_<X>/{positive,negative}/labeling_sheet.csv`` and
    the review images; the merge writes the annotators' ``optimal?`` values into the two main
    sheets, all or nothing (docs/curation.md, "Labeling distribution"; docs/differences.md D10).

    Args:
        cfg: The loaded config, or None (then the default output folder and 6 annotators).
        output_dir: Stage 00 output folder (None: from ``cfg.path.work_dir``).
        positive_csv: Positive sheet (None: ``rosalia_pred/labeling_sheet.csv``).
        negative_csv: Negative sheet (None: ``negative/labeling_sheet.csv``).
        num_annotators: Annotators A, B, ... (None: ``source_data_curation.num_annotators``,
            else 6).
        merge: Merge back instead of distributing.
        allow_unreviewed: With ``merge``: accept blank ``optimal?`` values.
        force: Distribute even over annotator sheets that hold review values.

    Returns:
        The report (``lines()`` are its log lines).

    Raises:
        ConfigError: If the number of annotators is outside ``[1, 26]``.
        InputError: Listing every problem of the sheets, images or annotator answers; nothing
            is written then.
    """
    out = stage00_dir(cfg.path.work_dir if cfg else None, output_dir)
    layout = CurationLayout(out)
    n = num_annotators if num_annotators is not None else (
        cfg.source_data_curation.num_annotators if cfg else DEFAULT_NUM_ANNOTATORS)
    if n < 1 or n > MAX_ANNOTATORS:
        raise ConfigError(f"--num-annotators must be in [1, {MAX_ANNOTATORS}], got {n}")
    tasks = [SheetTask("positive", Path(positive_csv or layout.positive_sheet()), "target"),
             SheetTask("negative", Path(negative_csv or layout.negative_sheet), "lesion")]
    if merge:
        counts = merge_annotations(layout, tasks, n, allow_unreviewed=allow_unreviewed)
    else:
        counts = distribute(layout, tasks, n, overwrite=force)
    return LabelingReport(merged=merge, num_annotators=n, tasks=tasks, output_dir=out,
                          counts=counts)


__all__ = [
    "DEFAULT_NUM_ANNOTATORS",
    "MAX_ANNOTATORS",
    "SAMPLING_VERSION",
    "CandidateReport",
    "LabelingReport",
    "NegativeReport",
    "SamplingReport",
    "distribute_labeling",
    "generate_candidate_masks",
    "merge_candidate_parts",
    "prepare_negative_sheet",
    "sample_mimic_ils_cases",
    "stage00_dir",
]
