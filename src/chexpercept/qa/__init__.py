"""Stage 02: QA generation, image rendering, benchmark sampling and export.

Reads Stage 01 ``deformation_results.json`` + masks and the Stage 00 sheets; writes
``qa_results/`` and ``chexpercept/<key_id>/`` (:func:`generate_qa`), then the released
benchmark layout ``chexpercept.json`` + ``chexpercept/`` (:func:`export_benchmark`). The
steps from a config (``api``): :func:`generate_qa_from_config` (02.00),
:func:`export_benchmark_from_config` (02.01) and :func:`validate_benchmark` (02.02).
"""

from chexpercept.qa.api import (
    DEFAULT_BENCHMARK_DIR,
    DEFAULT_NUM_WORKERS,
    NAME_RULES,
    BundleValidation,
    export_benchmark_from_config,
    generate_qa_from_config,
    qa_inputs,
    validate_benchmark,
)
from chexpercept.qa.export import LINK_MODES, export_benchmark, sample_cases
from chexpercept.qa.generate import (
    QAInputs,
    QAReport,
    assign_revision_free,
    count_questions,
    generate_qa,
    select_cases,
)

__all__ = [
    "DEFAULT_BENCHMARK_DIR",
    "DEFAULT_NUM_WORKERS",
    "LINK_MODES",
    "NAME_RULES",
    "BundleValidation",
    "QAInputs",
    "QAReport",
    "assign_revision_free",
    "count_questions",
    "export_benchmark",
    "export_benchmark_from_config",
    "generate_qa",
    "generate_qa_from_config",
    "qa_inputs",
    "sample_cases",
    "select_cases",
    "validate_benchmark",
]
