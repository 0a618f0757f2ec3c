"""Stage 01 anatomy: lungs, zones and the 20 lung regions, and lesion-overlap geometry.

Writes (01.00: provided masks, or the ``cxas`` / ``chexmask-u`` model backends) and reads
CheXmask-U / CXAS masks (``chexmasku_pred/``, ``cxas_pred/``) and builds the anatomy that
``deformation_results.json`` (``geometrical_mask_infos``) and Stage 02 refer to
(docs/deformation.md, "Anatomy masks" and "Lung geometry"). :func:`generate_anatomy_masks` is
the 01.00 step from a config (``api``).
"""

from chexpercept.anatomy.api import AnatomyMasksRun, generate_anatomy_masks
from chexpercept.anatomy.backends import (
    AnatomySegmenter,
    create_anatomy_segmenter,
    register_anatomy_segmenter,
    run_anatomy_segmenter,
)
from chexpercept.anatomy.generate import AnatomyReport, create_segmenters, generate_anatomy
from chexpercept.anatomy.masks import CaseAnatomy, build_case_anatomy, build_lungs
from chexpercept.anatomy.names import LUNG_REGION_NAMES, ZONE_NAMES, ZONE_SOURCES
from chexpercept.anatomy.overlap import geometrical_mask_info, overlapping_anatomy
from chexpercept.anatomy.provided import (
    ANATOMY_BACKENDS,
    load_case_anatomy,
    prepare_provided_anatomy,
)

__all__ = [
    "ANATOMY_BACKENDS",
    "AnatomyMasksRun",
    "AnatomyReport",
    "AnatomySegmenter",
    "CaseAnatomy",
    "LUNG_REGION_NAMES",
    "ZONE_NAMES",
    "ZONE_SOURCES",
    "build_case_anatomy",
    "build_lungs",
    "create_anatomy_segmenter",
    "create_segmenters",
    "generate_anatomy",
    "generate_anatomy_masks",
    "geometrical_mask_info",
    "load_case_anatomy",
    "overlapping_anatomy",
    "prepare_provided_anatomy",
    "register_anatomy_segmenter",
    "run_anatomy_segmenter",
]
