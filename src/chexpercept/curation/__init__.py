"""Stage 00 (source data curation): MIMIC-ILS sampling, CXR preparation, candidate masks, sheets.

Modules: ``sampling`` (00.00 buckets + seeded sample), ``images`` (00.00 JPG -> flat PNG),
``segmenters`` (00.01 candidate-mask sources: ``provided``, ``rosalia``), ``candidates`` (00.01
candidate masks, plots, results, sheets), ``sheets`` (00.02 merge, 00.03
negatives, 00.04 distribution and merge-back), and ``api``: one function per numbered script,
from a config (:func:`sample_mimic_ils_cases`, :func:`generate_candidate_masks`,
:func:`merge_candidate_parts`, :func:`prepare_negative_sheet`, :func:`distribute_labeling`).
"""

from chexpercept.curation.api import (
    CandidateReport,
    LabelingReport,
    NegativeReport,
    SamplingReport,
    distribute_labeling,
    generate_candidate_masks,
    merge_candidate_parts,
    prepare_negative_sheet,
    sample_mimic_ils_cases,
)
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
    "CandidateReport",
    "LabelingReport",
    "NegativeReport",
    "SamplingReport",
    "SegmentResult",
    "Segmenter",
    "bucket_pairs",
    "build_work_list",
    "create_segmenter",
    "distribute",
    "distribute_labeling",
    "generate_candidate_masks",
    "load_train_split",
    "location_text",
    "merge_annotations",
    "merge_candidate_parts",
    "merge_parts",
    "prepare_images",
    "prepare_negative_sheet",
    "prepare_negatives",
    "process_item",
    "register_segmenter",
    "sample_mimic_ils_cases",
    "sample_pool",
    "shard",
]
