"""Stage 01.01 deformation: writes ``deformed_masks/<key_id>/`` and ``deformation_results.json``.

Optimal masks, verified local expansion/contraction edits, the sequential QA deformation chain
and distractors (docs/deformation.md). :func:`deform_masks` is the 01.01 step from a config
(``api``).
"""

from chexpercept.deformation.api import DEFAULT_NUM_WORKERS, DeformationRun, deform_masks
from chexpercept.deformation.morphological import (
    CaseDeformation,
    CaseFailure,
    DeformationParams,
    deform_case,
    optimal_components,
)
from chexpercept.deformation.pipeline import (
    DEFORMATION_BACKENDS,
    DeformationSettings,
    DeformationSummary,
    DeformationTask,
    build_tasks,
    check_backend,
    run_deformation,
)

__all__ = [
    "DEFAULT_NUM_WORKERS",
    "DEFORMATION_BACKENDS",
    "CaseDeformation",
    "CaseFailure",
    "DeformationParams",
    "DeformationRun",
    "DeformationSettings",
    "DeformationSummary",
    "DeformationTask",
    "build_tasks",
    "check_backend",
    "deform_case",
    "deform_masks",
    "optimal_components",
    "run_deformation",
]
