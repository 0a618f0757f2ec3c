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


def make_item(qa_path, lesion="effusion", n_points=3):
    """A minimal valid ``chexpercept.json`` item (option counts are what matter here)."""
    def mc(options, answer=1):
        return {"question": "q", "answer_options": list(options),
                "answer": options[answer - 1], "answer_index": answer}

    positive = qa_path != "lesion_free"
    item = {"detection_qa": mc(["Yes", "No"], 1 if positive else 2), "pair_id": "p",
            "dicom_id": "d"}
    if not positive:
        return item
    points = [{"point": [10 * i, 10 * i], "color": f"c{i}"} for i in range(n_points)]
    points.append({"point": None, "color": "None"})
    item["contour_qa"] = {
        "no_deformation": qa_path == "revision_free",
        "contour_eval_qa": {**mc(["Yes", "No"]), "relative_path": "x.png"},
        "contour_revision_qa_expansion": {"question": "q", "answer_options": points,
                                          "answer": "c0 point", "answer_index": [1]},
        "contour_revision_qa_contraction": {"question": "q", "answer_options": points,
                                            "answer": "None", "answer_index": [n_points + 1]},
        "contour_revision_qa_revision_result": {
            "question": "q", "answer": "1st mask", "answer_index": 1,
            "answer_options": [{"type": "true", "masks": ["m"], "relative_path": "o1.png"}]
            + [{"type": "fake", "masks": ["m"], "relative_path": f"o{i}.png"}
               for i in (2, 3, 4)]},
    }
    if lesion != "cardiomegaly":
        item["attribute_extraction_qa"] = {
            "distribution": {**mc(["1", "2", "3", "4+"]), "answer_zones": []},
            "location": {"question": "q", "answer_options": ["a", "b", "c", "None"],
                         "answer": "a", "answer_index": [1], "answer_zones": []},
            "severity/measurement": {**mc(["<1/3", "<2/3", ">=2/3"]), "overlap_ratio": 0.1,
                                     "selected_lung": "left lung"},
            "comparison": {**mc(["s", "l", "r", "one"]), "left_size": 1, "right_size": 0,
                           "left_has_overlap": True, "right_has_overlap": False}}
    return item


@pytest.fixture
def bench_builder():
    """``bench_builder(qa_path, lesion=..., n_points=...)`` -> a chexpercept.json item dict."""
    return make_item
