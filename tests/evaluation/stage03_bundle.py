"""A tiny Stage 03 benchmark bundle (chexpercept.json + 8x8 PNGs) built inside the tests.

Cases (JSON order), covering every path with and without Stage 4:

- ``effusion_s50000001_positive_0``: revision-required, 9 turns;
- ``effusion_s50000002_positive_0``: revision-free, 6 turns;
- ``effusion_s50000003_negative_0``: lesion-free, 1 turn;
- ``cardiomegaly_s50000004_positive_0``: revision-required, no Stage 4, 5 turns;
- ``cardiomegaly_s50000005_positive_0``: revision-free, no Stage 4, 2 turns;
- ``cardiomegaly_s50000006_negative_2``: lesion-free, 1 turn;
- ``opacity_s50000007_positive_0``: revision-required, multi-point answers, 9 turns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

RR, RF, LF = "revision_required", "revision_free", "lesion_free"
CASES = {
    "effusion_s50000001_positive_0": RR,
    "effusion_s50000002_positive_0": RF,
    "effusion_s50000003_negative_0": LF,
    "cardiomegaly_s50000004_positive_0": RR,
    "cardiomegaly_s50000005_positive_0": RF,
    "cardiomegaly_s50000006_negative_2": LF,
    "opacity_s50000007_positive_0": RR,
}
COLOURS = ["red", "orange", "yellow", "green"]
ORDINALS = ["1st", "2nd", "3rd", "4th"]


def _q(text: str, options: list[str]) -> str:
    return text + "\n\nOptions:\n" + "\n".join(f"({i}) {o}" for i, o in enumerate(options, 1))


def _mc(text: str, options: list[str], answer_index: int, **extra: Any) -> dict[str, Any]:
    return {"question": _q(text, options), "answer_options": options,
            "answer": options[answer_index - 1], "answer_index": answer_index, **extra}


def _points(n_points: int, kind: str, gt: list[int]) -> dict[str, Any]:
    options = [{"point": [100 * (i + 1), 200], "color": COLOURS[i]} for i in range(n_points)]
    options.append({"point": None, "color": "None"})
    texts = [f"{o['color']} point" if o["point"] else "None" for o in options]
    answer = "None" if gt == [len(options)] else ", ".join(texts[i - 1] for i in gt)
    return {"question": _q(f"Which point(s) should the mask be {kind} toward?", texts),
            "answer_options": options, "answer": answer, "answer_index": gt}


def _attributes(location_gt: list[int], distribution: int = 2) -> dict[str, Any]:
    loc_options = ["the right costophrenic angle",
                   "the intersection of the right lateral lung and the right mid zone lung",
                   "the intersection of the left medial lung and the left upper zone lung",
                   "None of the above (options 1-3)"]
    return {
        "distribution": _mc("In how many zones is the lesion present?",
                            ["1 zone", "2 zones", "3 zones", "4 zones or more"], distribution,
                            answer_zones=["right mid zone lung", "right lower zone lung"]),
        "location": {"question": _q("Where is the lesion? Select all that apply.", loc_options),
                     "answer_options": loc_options,
                     "answer": ", ".join(loc_options[i - 1] for i in location_gt),
                     "answer_index": location_gt,
                     "answer_zones": [loc_options[i - 1] for i in location_gt]},
        "severity/measurement": _mc(
            "What proportion of the right lung does the lesion occupy?",
            ["Less than 1/3 of the right lung area",
             "1/3 or more but less than 2/3 of the right lung area",
             "2/3 or more of the right lung area"], 1,
            overlap_ratio=0.2, selected_lung="right lung"),
        "comparison": _mc("Compare the lesion sizes in both lungs.",
                          ["Both lesions are similar in size.",
                           "The left lung lesion is larger than the right lung lesion.",
                           "The right lung lesion is larger than the left lung lesion.",
                           "The lesion is present in only one lung (left or right)."], 4,
                          left_size=0, right_size=5000, left_has_overlap=False,
                          right_has_overlap=True),
    }


def _item(key_id: str, path: str, *, release_names: bool) -> dict[str, Any]:
    lesion, pair_id = key_id.split("_", 1)
    detection = _mc(f"Is there any finding suggestive of {lesion}?", ["Yes", "No"],
                    2 if path == LF else 1)
    item: dict[str, Any] = {"detection_qa": detection}
    if path != LF:
        contour: dict[str, Any] = {
            "no_deformation": path == RF,
            "initial_context": "Colored points mark possible adjustment locations.",
            "contour_eval_qa": _mc("Does the mask need a major revision?", ["Yes", "No"],
                                   2 if path == RF else 1,
                                   relative_path="contour_eval_qa/xray_with_mask.png"),
        }
        if path == RR:
            if key_id.startswith("cardiomegaly"):
                exp_gt, con_gt, n_points, answer = [4], [1, 2], 3, 3
            elif key_id.startswith("opacity"):
                exp_gt, con_gt, n_points, answer = [2, 4], [1, 3], 4, 1
            else:
                exp_gt, con_gt, n_points, answer = [2], [1], 3, 2
            contour["contour_revision_qa_expansion"] = _points(n_points, "expanded", exp_gt)
            contour["contour_revision_qa_contraction"] = _points(n_points, "contracted", con_gt)
            options = []
            for i in range(1, 5):
                kind = "true" if i == answer else "fake"
                name = (f"option_{i}_mask_{'answer' if kind == 'true' else 'fake'}.png"
                        if release_names else f"option_{i}.png")
                options.append({"type": kind, "masks": [f"mask_{i}"], "relative_path": name})
            contour["contour_revision_qa_revision_result"] = {
                "question": _q("Which revised mask is correct?",
                               [f"{o} mask" for o in ORDINALS]),
                "answer_options": options, "answer": f"{ORDINALS[answer - 1]} mask",
                "answer_index": answer}
        item["contour_qa"] = contour
        if lesion == "cardiomegaly":
            item["attribute_extraction_qa"] = None
        else:
            item["attribute_extraction_qa"] = _attributes(
                [1, 2] if lesion == "opacity" else [4], 3 if lesion == "opacity" else 2)
    item["pair_id"] = pair_id
    item["dicom_id"] = "dicom_" + pair_id.split("_")[0]
    return item


def image_relpaths(key_id: str, item: dict[str, Any]) -> list[str]:
    """Paths (relative to ``chexpercept/<key_id>/``) of every image the case needs."""
    out = ["detection_qa/xray.png"]
    contour = item.get("contour_qa")
    if contour:
        out.append("contour_qa/" + contour["contour_eval_qa"]["relative_path"])
        if not contour["no_deformation"]:
            out.append("contour_qa/contour_revision_qa/xray_with_mask_and_points.png")
            out += ["contour_qa/contour_revision_qa/" + o["relative_path"]
                    for o in contour["contour_revision_qa_revision_result"]["answer_options"]]
    return out


def write_bundle(root: Path, *, release_names: bool = False,
                 cases: dict[str, str] | None = None) -> Path:
    """Write ``root/chexpercept.json`` and ``root/chexpercept/<key_id>/...`` PNGs; return root."""
    cases = CASES if cases is None else cases
    data = {k: _item(k, p, release_names=release_names) for k, p in cases.items()}
    root.mkdir(parents=True, exist_ok=True)
    (root / "chexpercept.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    pixels = np.full((8, 8, 3), 128, dtype=np.uint8)
    for key_id, item in data.items():
        for rel in image_relpaths(key_id, item):
            path = root / "chexpercept" / key_id / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(path)
    return root


def load_items(root: Path) -> dict[str, Any]:
    """The raw JSON of a written bundle."""
    return json.loads((root / "chexpercept.json").read_text(encoding="utf-8"))
