"""Stage 01.01 driver: per-case deformation, resume, process pool, ``deformation_results.json``.

Also writes ``deformation_results/summary.json``.

Reads candidate masks (``rosalia_pred/<target>/<pair_id>/pred_mask.png``), anatomy masks
(``chexmasku_pred/``, ``cxas_pred/``); writes ``deformed_masks/<key_id>/*.png`` and
``deformation_results/items/<key_id>.json`` per finished case (docs/deformation.md, "Outputs";
docs/differences.md D46: per-item writes, resume, failures recorded).
"""

from __future__ import annotations

import logging
import multiprocessing
import shutil
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chexpercept.anatomy.provided import load_case_anatomy
from chexpercept.deformation.morphological import (
    CaseFailure,
    DeformationParams,
    deform_case,
    optimal_components,
)
from chexpercept.deformation.sam import (
    SAM_BACKENDS,
    ComponentSkip,
    SamRealiser,
    SamSettings,
    check_sam_settings,
    load_predictor,
    refine_components,
)
from chexpercept.errors import ConfigError, InputError
from chexpercept.files import read_json, write_json_atomic
from chexpercept.images import read_cxr, read_mask, write_mask
from chexpercept.layouts import DeformationLayout
from chexpercept.lesions import validate_lesion
from chexpercept.rng import rng_for
from chexpercept.schema import parse_deformation_results
from utils.ray_pool import RayWorkers, map_on_ray

logger = logging.getLogger(__name__)

DEFORMATION_BACKENDS: tuple[str, ...] = ("morphological", "sam3", "sam2")
"""``mask_deformation.backend`` choices (``sam2``/``sam3`` need torch and the model package)."""

#: Indentation of ``deformation_results.json`` (the release writes indent 4;
#: docs/deformation.md, "Outputs").
RESULTS_INDENT = 4

REASON_MISSING_INPUT = "missing_input"
REASON_UNEXPECTED = "unexpected_error"


def check_backend(backend: str, md: Any = None) -> SamSettings | None:
    """Validate the deformation backend (and, for SAM backends, its config keys).

    Args:
        backend: ``mask_deformation.backend``.
        md: The ``mask_deformation`` config section (needed for ``sam2``/``sam3``).

    Returns:
        None for ``morphological``; the model settings for ``sam2``/``sam3``.

    Raises:
        ConfigError: For an unknown name, or a SAM backend without its checkpoint (and BPE file
            for sam3) configured and present.
    """
    if backend == "morphological":
        return None
    if backend in SAM_BACKENDS:
        if md is None:
            raise ConfigError(f"mask_deformation.backend {backend!r} needs the "
                              f"mask_deformation config section")
        return check_sam_settings(backend, md)
    raise ConfigError(f"mask_deformation.backend: unknown value {backend!r}; expected one of "
                      f"{', '.join(DEFORMATION_BACKENDS)}")


@dataclass(frozen=True)
class DeformationTask:
    """One accepted case of the positive sheet (picklable, sent to workers).

    Attributes:
        key_id: ``<lesion>_<pair_id>``.
        dicom_id: The CXR's dicom id.
        lesion: The sheet's ``target``.
        candidate_mask: Path of the candidate (ROSALIA-layout) mask.
        cxr_path: Path of the CXR (``<mimic_cxr_path>/<dicom_id>.png``; checked to exist).
    """

    key_id: str
    dicom_id: str
    lesion: str
    candidate_mask: str
    cxr_path: str


@dataclass(frozen=True)
class DeformationSettings:
    """Everything a worker needs besides the task (picklable).

    Attributes:
        out_dir: Stage-01 output root (:class:`~chexpercept.layouts.DeformationLayout`).
        seed: Config seed; each case uses ``rng_for(seed, "deformation", key_id)``.
        params: Backend parameters.
        chexmask_dir: CheXmask-U folder.
        cxas_dir: CXAS folder (lungs).
        zone_source: ``mask_deformation.zone_mask_source``.
        cxas_zone_dir: CXAS folder for zones (``path.cxas_mask_path``), used for ``cxas`` zones.
        sam: Model settings of a ``sam2``/``sam3`` backend (None: ``morphological``); each
            worker process loads the model once.
    """

    out_dir: str
    seed: int
    params: DeformationParams
    chexmask_dir: str
    cxas_dir: str
    zone_source: str
    cxas_zone_dir: str | None = None
    sam: SamSettings | None = None


@dataclass(frozen=True)
class CaseOutcome:
    """What happened to one case (returned by workers).

    ``skipped_components`` are the :class:`~chexpercept.deformation.sam.ComponentSkip` entries
    of SAM refinement (docs/deformation.md, "SAM prompts").
    """

    key_id: str
    status: str  # "done", "skipped", "failed"
    reason: str = ""
    detail: str = ""
    qa_deformation_success: bool | None = None
    skipped_components: tuple[dict[str, Any], ...] = ()


def build_tasks(
    rows: Sequence[Mapping[str, str]], accepted: Sequence[str], *, sheet_path: str | Path,
    candidate_root: str | Path, cxr_dir: str | Path,
) -> list[DeformationTask]:
    """Tasks for the accepted key_ids, in sheet order.

    Args:
        rows: Positive-sheet rows (``key_id``, ``dicom_id``, ``target``, ``pair_id``).
        accepted: Accepted key_ids (``schema.accepted_key_ids``).
        sheet_path: The sheet (for messages).
        candidate_root: Root of ``<target>/<pair_id>/pred_mask.png``.
        cxr_dir: Folder of ``<dicom_id>.png``.

    Raises:
        InputError: Listing every duplicated key_id and every accepted row with an unknown
            lesion, a blank field or a key_id that is not ``<target>_<pair_id>``.
    """
    by_key: dict[str, Mapping[str, str]] = {}
    problems: list[str] = []
    for i, row in enumerate(rows, start=1):
        if row["key_id"] in by_key:
            problems.append(f"row {i}: key_id {row['key_id']} appears more than once")
        by_key.setdefault(row["key_id"], row)
    tasks = []
    for key_id in dict.fromkeys(accepted):
        row = by_key[key_id]
        blank = [c for c in ("dicom_id", "target", "pair_id") if not (row.get(c) or "").strip()]
        if blank:
            problems.append(f"key_id {key_id}: blank {blank}")
            continue
        try:
            lesion = validate_lesion(row["target"].strip(), where=f"key_id {key_id} target")
        except InputError as exc:
            problems.append(str(exc))
            continue
        if key_id != f"{lesion}_{row['pair_id'].strip()}":
            problems.append(f"key_id {key_id}: expected {lesion}_{row['pair_id'].strip()} "
                            f"(<target>_<pair_id>)")
            continue
        dicom = row["dicom_id"].strip()
        tasks.append(DeformationTask(
            key_id=key_id, dicom_id=dicom, lesion=lesion,
            candidate_mask=str(Path(candidate_root) / row["target"].strip()
                               / row["pair_id"].strip() / "pred_mask.png"),
            cxr_path=str(Path(cxr_dir) / f"{dicom}.png"),
        ))
    if problems:
        raise InputError(f"{sheet_path}: {len(problems)} bad accepted row(s):\n  "
                         + "\n  ".join(problems))
    return tasks


def _clear_case_dir(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)


def run_case(task: DeformationTask, settings: DeformationSettings) -> CaseOutcome:
    """Deform one case and write its masks and item JSON (skipped if the item exists).

    The case's mask folder is rebuilt from scratch, so masks of an interrupted earlier run never
    mix with this run's; the item JSON is written last, atomically (it marks the case done).

    Returns:
        The case's outcome; expected failures (missing input, empty mask, no lung overlap, no
        valid deformation) are returned with their reason, not raised.
    """
    layout = DeformationLayout(Path(settings.out_dir))
    item = layout.item_json(task.key_id)
    if item.is_file():
        return CaseOutcome(task.key_id, "skipped")
    skips: list[ComponentSkip] = []
    try:
        if not Path(task.cxr_path).is_file():
            raise InputError(f"key_id {task.key_id}: CXR not found: {task.cxr_path}")
        candidate = read_mask(task.candidate_mask)
        components = optimal_components(candidate, settings.params.min_component_size_px)
        realise = None
        if settings.sam is not None:
            predictor = load_predictor(settings.sam)
            components = refine_components(predictor, components,
                                           settings.params.min_component_size_px, skipped=skips)
            realise = SamRealiser(predictor, read_cxr(task.cxr_path),
                                  settings.params.min_component_size_px)
        lesion_mask = np.zeros_like(candidate)
        for comp in components:
            lesion_mask |= comp
        anatomy = load_case_anatomy(
            task.dicom_id, lesion_mask, with_regions=task.lesion != "cardiomegaly",
            chexmask_dir=settings.chexmask_dir, cxas_dir=settings.cxas_dir,
            zone_source=settings.zone_source, cxas_zone_dir=settings.cxas_zone_dir)
        rng = rng_for(settings.seed, "deformation", task.key_id)
        case = deform_case(task.lesion, components, anatomy, rng, settings.params,
                           realise=realise)
    except CaseFailure as exc:
        return CaseOutcome(task.key_id, "failed", exc.reason, exc.detail,
                           skipped_components=tuple(s.to_json() for s in skips))
    except ConfigError:
        raise
    except InputError as exc:
        return CaseOutcome(task.key_id, "failed", REASON_MISSING_INPUT, str(exc))
    mask_dir = layout.deformed_mask_dir(task.key_id)
    _clear_case_dir(mask_dir)
    for stem, mask in case.masks.items():
        write_mask(layout.deformed_mask(task.key_id, stem), mask)
    write_json_atomic(item, {**case.result, "dicom_id": task.dicom_id}, indent=RESULTS_INDENT)
    return CaseOutcome(task.key_id, "done",
                       qa_deformation_success=case.result["qa_deformation_success"],
                       skipped_components=tuple(s.to_json() for s in skips))


def _safe_run_case(args: tuple[DeformationTask, DeformationSettings]) -> CaseOutcome:
    task, settings = args
    try:
        return run_case(task, settings)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded in summary.json with its traceback
        tb = traceback.format_exc()
        return CaseOutcome(task.key_id, "failed", REASON_UNEXPECTED,
                           f"{type(exc).__name__}: {exc}\n{tb}")


def _worker_init(level: int) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


class _CaseRunner:
    """One Ray actor's worker: runs cases with the run's settings (SAM loads once per actor)."""

    def __init__(self, settings: DeformationSettings, level: int) -> None:
        _worker_init(level)
        self.settings = settings

    def run(self, task: DeformationTask) -> CaseOutcome:
        return _safe_run_case((task, self.settings))


def iter_outcomes(
    tasks: Sequence[DeformationTask], settings: DeformationSettings, num_workers: int,
    ray: RayWorkers | None = None,
) -> Iterator[CaseOutcome]:
    """Run every task; yields outcomes in task order.

    ``num_workers > 1`` uses a ``spawn`` process pool; ``ray`` runs the tasks on Ray actors
    instead (each loads SAM once; 1 GPU each for a SAM backend on CUDA unless
    ``gpus_per_worker`` says otherwise). Results do not depend on the worker count or on Ray
    because each case has its own generator and writes only its own files.
    """
    if ray is not None:
        on_gpu = settings.sam is not None and settings.sam.device.startswith("cuda")
        yield from map_on_ray(_CaseRunner, (settings, logging.getLogger().getEffectiveLevel()),
                              "run", list(tasks), ray, label="deformation-worker",
                              default_gpus=1.0 if on_gpu else 0.0)
        return
    jobs = [(t, settings) for t in tasks]
    workers = max(1, min(int(num_workers), len(jobs)))
    if workers <= 1:
        for job in jobs:
            yield _safe_run_case(job)
        return
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=_worker_init,
                  initargs=(logging.getLogger().getEffectiveLevel(),)) as pool:
        yield from pool.imap(_safe_run_case, jobs, chunksize=1)


@dataclass
class DeformationSummary:
    """Counts of a 01.01 run (``summary.json`` and the stage's last log line)."""

    processed: int = 0
    skipped_done: int = 0
    failed: dict[str, list[str]] = field(default_factory=dict)
    failures: list[dict[str, str]] = field(default_factory=list)
    qa_incomplete: list[str] = field(default_factory=list)
    output: str = ""
    skipped_components: list[dict[str, Any]] = field(default_factory=list)

    def add(self, outcome: CaseOutcome) -> None:
        """Count one outcome."""
        self.skipped_components.extend({"key_id": outcome.key_id, **skip}
                                       for skip in outcome.skipped_components)
        if outcome.status == "skipped":
            self.skipped_done += 1
        elif outcome.status == "failed":
            self.failed.setdefault(outcome.reason, []).append(outcome.key_id)
            self.failures.append({"key_id": outcome.key_id, "reason": outcome.reason,
                                  "detail": outcome.detail})
        else:
            self.processed += 1
            if not outcome.qa_deformation_success:
                self.qa_incomplete.append(outcome.key_id)

    def to_json(self) -> dict[str, Any]:
        """The ``summary.json`` content."""
        return {"processed": self.processed, "skipped_done": self.skipped_done,
                "failed_count": sum(len(v) for v in self.failed.values()),
                "failed_by_reason": {k: len(v) for k, v in sorted(self.failed.items())},
                "failures": self.failures,
                "qa_deformation_success_false": self.qa_incomplete,
                "skipped_components": self.skipped_components,
                "output": self.output}

    def line(self) -> str:
        """The one-line summary."""
        failed = ", ".join(f"{k}={len(v)}" for k, v in sorted(self.failed.items())) or "none"
        return (f"processed {self.processed}, skipped (done) {self.skipped_done}, "
                f"failed {sum(len(v) for v in self.failed.values())} ({failed}), "
                f"qa_deformation_success=false {len(self.qa_incomplete)}; output {self.output}")


def run_deformation(
    tasks: Sequence[DeformationTask], settings: DeformationSettings, *, num_workers: int = 1,
    progress: Callable[[Iterable[CaseOutcome], int], Iterable[CaseOutcome]] | None = None,
    ray: RayWorkers | None = None,
) -> DeformationSummary:
    """Deform every task, then assemble ``deformation_results.json`` and ``summary.json``.

    Args:
        tasks: Accepted cases in sheet order.
        settings: Shared settings.
        num_workers: Worker processes (spawn); 1 runs in-process.
        progress: Optional wrapper ``(iterable, total) -> iterable`` (a progress bar).
        ray: Run the cases on Ray actors instead of ``num_workers`` processes (same outputs).

    Returns:
        The run's summary (also written to ``deformation_results/summary.json``).

    Raises:
        ConfigError: From a worker (bad zone source configuration).
        SchemaError: If an item file does not match :class:`~chexpercept.schema.DeformationCase`.
    """
    layout = DeformationLayout(Path(settings.out_dir))
    summary = DeformationSummary(output=str(layout.results_json))
    outcomes: Iterable[CaseOutcome] = iter_outcomes(tasks, settings, num_workers, ray)
    if progress is not None:
        outcomes = progress(outcomes, len(tasks))
    for outcome in outcomes:
        summary.add(outcome)
        if outcome.status == "failed":
            log = logger.error if outcome.reason == REASON_UNEXPECTED else logger.warning
            log("case %s failed (%s): %s", outcome.key_id, outcome.reason, outcome.detail)
        elif outcome.status == "done" and not outcome.qa_deformation_success:
            logger.warning("case %s: qa_deformation_success is false (a component has no "
                           "verified deformation chain)", outcome.key_id)
    assemble_results(layout, [t.key_id for t in tasks])
    write_json_atomic(layout.summary_json, summary.to_json())
    return summary


def assemble_results(layout: DeformationLayout, key_ids: Sequence[str]) -> dict[str, Any]:
    """Write ``deformation_results.json`` from the finished items, in ``key_ids`` order.

    Cases without an item (failed) are left out (they are listed in ``summary.json``). The
    whole mapping is validated before it is written atomically (indent 4, as the release).

    Returns:
        The written mapping.

    Raises:
        SchemaError: Naming each item and field that does not match the schema.
    """
    data = {k: read_json(layout.item_json(k)) for k in key_ids if layout.item_json(k).is_file()}
    parse_deformation_results(data, layout.results_json)
    write_json_atomic(layout.results_json, data, indent=RESULTS_INDENT)
    return data


__all__ = [
    "CaseOutcome",
    "DEFORMATION_BACKENDS",
    "DeformationSettings",
    "DeformationSummary",
    "DeformationTask",
    "assemble_results",
    "build_tasks",
    "check_backend",
    "iter_outcomes",
    "run_case",
    "run_deformation",
]
