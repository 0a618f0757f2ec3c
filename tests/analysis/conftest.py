"""Builders of hand-made ``all_results.json`` records for the Stage 04 tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ATTRS = ("distribution", "location", "severity/measurement", "comparison")
REVS = ("expansion", "contraction", "revision_result")


def make_case(key_id, qa_path, s1=True, s2=True, s3=True, s4=True, rev=None, attr=None):
    """One record; a stage flag of None writes ``{}`` (stage result missing).

    Stages the path does not ask are left ``{}`` as Stage 03 writes them.
    """
    case = {"key_id": key_id, "qa_path": qa_path,
            "detection_qa": {} if s1 is None else {"response": "1", "ground_truth": 1,
                                                    "correct": s1},
            "contour_evaluation_qa": {}, "contour_revision_qa": {},
            "attribute_extraction_qa": {}, "chat_history": []}
    if qa_path == "lesion_free":
        return case
    if s2 is not None:
        case["contour_evaluation_qa"] = {"responses": "1", "ground_truth": 1, "correct": s2}
    if qa_path == "revision_required" and s3 is not None:
        flags = rev if rev is not None else {k: s3 for k in REVS}
        case["contour_revision_qa"] = {"correct": s3, **{k: {"correct": v}
                                                         for k, v in flags.items()}}
    if not key_id.startswith("cardiomegaly") and s4 is not None:
        flags = attr if attr is not None else {k: s4 for k in ATTRS}
        case["attribute_extraction_qa"] = {"correct": s4, **{k: {"correct": v}
                                                             for k, v in flags.items()}}
    return case


def write_run(results_dir: Path, name: str, cases: list[dict], setting="implicit") -> Path:
    run_dir = Path(results_dir) / name / f"oracle_{setting}"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "all_results.json").write_text(
        json.dumps({c["key_id"]: c for c in cases}, indent=2), encoding="utf-8")
    return run_dir


@pytest.fixture
def builders():
    """Access to the builders from tests (``builders.make_case``, ``builders.write_run``)."""

    class _B:
        pass

    b = _B()
    b.make_case = staticmethod(make_case)
    b.write_run = staticmethod(write_run)
    return b
