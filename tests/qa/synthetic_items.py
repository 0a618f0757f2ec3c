"""chexpercept.json values built in memory (JSON only, no images), for counting and sampling.

Each item validates against :class:`chexpercept.schema.BenchmarkItem` and has the questions of
its path: LF detection only; RF detection + contour eval (+ 4 attributes for lung lesions);
RR additionally the three revision questions.
"""

from __future__ import annotations

from typing import Any

RR, RF, LF = "revision_required", "revision_free", "lesion_free"


def _q(stem: str, options: list[str]) -> str:
    return stem + "\n\nOptions:\n" + "\n".join(f"({i}) {o}" for i, o in enumerate(options, 1))


def _mc(options: list[str], index: int, **extra: Any) -> dict[str, Any]:
    return {"question": _q("Q?", options), "answer_options": options,
            "answer": options[index - 1], "answer_index": index, **extra}


def _points() -> dict[str, Any]:
    options = [{"point": [100, 100], "color": "red"}, {"point": [300, 300], "color": "orange"},
               {"point": None, "color": "None"}]
    return {"question": _q("Which?", ["red point", "orange point", "None"]),
            "answer_options": options, "answer": "red point", "answer_index": [1]}


def attributes() -> dict[str, Any]:
    location = ["the right costophrenic angle", "region b", "region c",
                "None of the above (options 1-3)"]
    return {
        "distribution": _mc(["1 zone", "2 zones", "3 zones", "4 zones or more"], 1,
                            answer_zones=["right lower zone lung"]),
        "location": {"question": _q("Where?", location), "answer_options": location,
                     "answer": location[0], "answer_index": [1], "answer_zones": [location[0]]},
        "severity/measurement": _mc(["low", "mid", "high"], 1, overlap_ratio=0.1,
                                    selected_lung="right lung"),
        "comparison": _mc(["a", "b", "c", "d"], 4, left_size=0, right_size=10,
                          left_has_overlap=False, right_has_overlap=True),
    }


def item(key_id: str, path: str, dicom_id: str) -> dict[str, Any]:
    """One case of ``path`` for ``key_id`` on CXR ``dicom_id``."""
    lesion, pair_id = key_id.split("_", 1)
    out: dict[str, Any] = {"detection_qa": _mc(["Yes", "No"], 2 if path == LF else 1)}
    if path != LF:
        contour: dict[str, Any] = {
            "no_deformation": path == RF, "revision_before_masks": ["b"],
            "revision_after_masks": ["a"],
            "contour_eval_qa": _mc(["Yes", "No"], 2 if path == RF else 1,
                                   relative_path="contour_eval_qa/xray_with_mask.png")}
        if path == RR:
            contour["initial_context"] = "Points mark places to adjust."
            contour["contour_revision_qa_expansion"] = _points()
            contour["contour_revision_qa_contraction"] = _points()
            options = [{"type": "true" if i == 1 else "fake", "masks": [f"m{i}"],
                        "relative_path": f"option_{i}.png"} for i in range(1, 5)]
            contour["contour_revision_qa_revision_result"] = {
                "question": _q("Which mask?", ["1st mask", "2nd mask", "3rd mask", "4th mask"]),
                "answer_options": options, "answer": "1st mask", "answer_index": 1}
        out["contour_qa"] = contour
        out["attribute_extraction_qa"] = None if lesion == "cardiomegaly" else attributes()
    out["pair_id"] = pair_id
    out["dicom_id"] = dicom_id
    return out
