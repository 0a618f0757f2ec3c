"""Stage 00 (source data curation): MIMIC-ILS sampling, CXR preparation, candidate masks, sheets.

Modules: ``sampling`` (00.00 buckets + seeded sample), ``images`` (00.00 JPG -> flat PNG),
``segmenters`` (00.01 candidate-mask sources: ``provided``, ``rosalia``), ``candidates`` (00.01
candidate masks, plots, results, sheets), ``sheets`` (00.02 merge, 00.03
negatives, 00.04 distribution and merge-back).
"""

from chexpercept.curation.candidates import build_work_list, location_text, process_item, shard
from chexpercept.curation.images import prepare_images
from chexpercept.curation.sampling import bucket_pairs, load_train_split, sample_pool
from chexpercept.curation.segmenters import (
    Segmenter,
    SegmentResult,
    create_segmenter,
    register_segmenter,
)
from chexpercept.curation.sheets import (
    distribute,
    merge_annotations,
    merge_parts,
    prepare_negatives,
)

__all__ = [
    "SegmentResult",
    "Segmenter",
    "bucket_pairs",
    "build_work_list",
    "create_segmenter",
    "distribute",
    "load_train_split",
    "location_text",
    "merge_annotations",
    "merge_parts",
    "prepare_images",
    "prepare_negatives",
    "process_item",
    "register_segmenter",
    "sample_pool",
    "shard",
]
