"""Stage 02: QA generation, image rendering, benchmark sampling and export.

Reads Stage 01 ``deformation_results.json`` + masks and the Stage 00 sheets; writes
``qa_results/`` and ``chexpercept/<key_id>/`` (:func:`generate_qa`), then the released
benchmark layout ``chexpercept.json`` + ``chexpercept/`` (:func:`export_benchmark`).
"""

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
    "LINK_MODES",
    "QAInputs",
    "QAReport",
    "assign_revision_free",
    "count_questions",
    "export_benchmark",
    "generate_qa",
    "sample_cases",
    "select_cases",
]
