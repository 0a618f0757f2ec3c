"""Hand-built Stage 02 inputs: small deformation cases, masks, sheets and CXRs.

Geometry (1024x1024): the patient's right lung is image-left (x 150..470), the left lung is
image-right (x 560..880), both y 200..820. Imported by tests/qa/* directly and by
tests/scripts/test_stage02_* through importlib (no sys.path changes).
"""

from __future__ import annotations

import copy
import csv
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from chexpercept.files import write_json_atomic
from chexpercept.images import write_mask
from chexpercept.schema import DeformationCase

SIZE = 1024
SIDES = ("right", "left")
ZONES = ("upper zone lung", "mid zone lung", "lung base")
REGIONS = ("medial lung", "lateral lung", "peripheral lung")


_YY, _XX = np.ogrid[:SIZE, :SIZE]


def disk(cx: int, cy: int, r: int) -> np.ndarray:
    return (_XX - cx) ** 2 + (_YY - cy) ** 2 <= r * r


def rect(x0: int, y0: int, x1: int, y1: int) -> np.ndarray:
    m = np.zeros((SIZE, SIZE), bool)
    m[y0:y1, x0:x1] = True
    return m


RIGHT_LUNG = rect(150, 200, 470, 820)
LEFT_LUNG = rect(560, 200, 880, 820)


def region_names() -> list[str]:
    """The 20 Stage 01 lung-region names in release insertion order."""
    names = [f"{s} costophrenic angle" for s in SIDES]
    for region in REGIONS:
        for side in SIDES:
            names += [f"{side} {region} & {side} {zone}" for zone in ZONES]
    return names


def gmi(cid: str, positives: list[str], *, left: tuple[bool, float, int] = (False, 0.0, 0),
        right: tuple[bool, float, int] = (False, 0.0, 0), cardio: bool = False) -> dict[str, Any]:
    """A ``geometrical_mask_infos`` entry; ``positives`` are the regions with has_overlap."""
    zones = {f"{s} {z}": {"has_overlap": False, "overlap_ratio": 0.0} for s in SIDES for z in ZONES}
    overlap: dict[str, Any] = {
        "left lung": {"has_overlap": left[0], "overlap_ratio": left[1], "size": left[2]},
        "right lung": {"has_overlap": right[0], "overlap_ratio": right[1], "size": right[2]},
        "zones": zones,
    }
    if not cardio:
        overlap["lung_regions"] = {
            name: {"has_overlap": name in positives,
                   "overlap_ratio": 0.4 if name in positives else 0.05}
            for name in region_names()}
    return {"mask_component_id": cid, "overlap": overlap}


def step(sid: str, op: str, idx: int, anatomy: str, center: list[int], before: str, after: str,
         fakes: list[str], fp_exp: list[list[int]], fp_cont: list[list[int]]) -> dict[str, Any]:
    """A Stage 01 step entry (``op`` is the deformation; the revision is its opposite)."""
    entry = {"suboptimal_component_id": sid,
             "exp_idx" if op == "expansion" else "cont_idx": idx,
             "anatomy": anatomy, "points": [center], "mask_path": before,
             "center_point": center,
             "fake_masks": [{"org_mask": before, "fake_mask": f} for f in fakes],
             "fake_points_expansion": fp_exp, "fake_points_contraction": fp_cont,
             "revision": "contraction" if op == "expansion" else "expansion",
             "revision_flow": {"before revision": before, "after revision": after}}
    return entry


def lung_case(dicom_id: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A lung-lesion case: component 0 (right lung) expanded then contracted; component 2
    (left lung, id gap) left as is. ``geometrical_mask_infos`` is listed as [2, 0]."""
    s0, s2 = "suboptimal_component_0", "suboptimal_component_2"
    opt0 = disk(300, 550, 90)
    exp1 = opt0 | disk(210, 520, 50)
    cont1 = exp1 & ~disk(330, 640, 45)
    nd2 = disk(700, 450, 60)
    masks = {
        "optimal_component_0": opt0, "optimal_component_2": nd2,
        f"{s0}_exp1": exp1, f"{s0}_cont1": cont1, f"{s2}_no_contraction": nd2,
        f"{s0}_exp1_fake_contraction_1": exp1 & ~disk(350, 480, 40),
        f"{s0}_exp1_fake_expansion_1": exp1 | disk(380, 400, 40),
        f"{s0}_cont1_fake_expansion_1": cont1 | disk(250, 700, 40),
    }
    qdr = {
        "expansion": {s0: [step(s0, "expansion", 1, "right lateral lung & right mid zone lung",
                                [200, 520], f"{s0}_exp1", "optimal_component_0",
                                [f"{s0}_exp1_fake_contraction_1", f"{s0}_exp1_fake_expansion_1"],
                                [[380, 400], [205, 530]], [[350, 480]])]},
        "contraction": {s0: [step(s0, "contraction", 1, "right peripheral lung & right lung base",
                                  [330, 640], f"{s0}_cont1", f"{s0}_exp1",
                                  [f"{s0}_cont1_fake_expansion_1"], [[250, 700]], [])]},
        "no_deformation": {s2: [{"suboptimal_component_id": s2,
                                 "mask_path": f"{s2}_no_contraction"}]},
    }
    infos = [
        gmi("2", ["left lateral lung & left upper zone lung"], left=(True, 0.05, 11000)),
        gmi("0", ["right lateral lung & right mid zone lung",
                  "right peripheral lung & right lung base", "right costophrenic angle"],
            right=(True, 0.2, 25000)),
    ]
    case = {"org_deformation_results": {"possible_deformation_anatomy": []},
            "qa_deformation_results": qdr, "geometrical_mask_infos": infos,
            "qa_deformation_success": True, "dicom_id": dicom_id}
    return case, masks


def cardio_case(dicom_id: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A cardiomegaly case: the heart (component 0) was expanded once."""
    s0 = "suboptimal_component_0"
    heart = disk(512, 600, 150)
    exp1 = heart | disk(380, 560, 60)
    masks = {"optimal_component_0": heart, f"{s0}_exp1": exp1,
             f"{s0}_exp1_fake_contraction_1": exp1 & ~disk(600, 700, 50)}
    qdr = {"expansion": {s0: [step(s0, "expansion", 1, "right mid zone lung", [360, 560],
                                   f"{s0}_exp1", "optimal_component_0",
                                   [f"{s0}_exp1_fake_contraction_1"], [[700, 300]],
                                   [[600, 700]])]},
           "contraction": {}, "no_deformation": {}}
    infos = [gmi("0", [], left=(True, 0.1, 20000), right=(True, 0.1, 20000), cardio=True)]
    case = {"org_deformation_results": {}, "qa_deformation_results": qdr,
            "geometrical_mask_infos": infos, "qa_deformation_success": True,
            "dicom_id": dicom_id}
    return case, masks


def validated(case: dict[str, Any]) -> DeformationCase:
    return DeformationCase.model_validate(copy.deepcopy(case))


def write_cxr(path: Path, mode: str = "RGB", size: int = SIZE) -> None:
    """A smooth synthetic radiograph in the given PIL mode (RGB, RGBA, L, I;16)."""
    yy, xx = np.mgrid[:size, :size]
    gray = ((xx * 0.15 + yy * 0.1) % 256).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "I;16":
        Image.fromarray(gray.astype(np.uint16) * 257).save(path)
    elif mode == "L":
        Image.fromarray(gray).save(path)
    else:
        rgb = np.repeat(gray[:, :, None], 3, axis=2)
        if mode == "RGBA":
            rgb = np.concatenate([rgb, np.full((size, size, 1), 255, np.uint8)], axis=2)
        Image.fromarray(rgb).save(path)


def write_anatomy(root: Path, dicom_id: str) -> tuple[Path, Path]:
    """CheXmask-U and CXAS lung masks for ``dicom_id``; returns (chexmask_dir, cxas_dir)."""
    chex, cxas = root / "chexmasku_pred", root / "cxas_pred"
    write_mask(chex / dicom_id / "right_lung.png", RIGHT_LUNG)
    write_mask(chex / dicom_id / "left_lung.png", LEFT_LUNG)
    write_mask(cxas / dicom_id / "right lung.png", RIGHT_LUNG & rect(0, 210, SIZE, SIZE))
    write_mask(cxas / dicom_id / "left lung.png", LEFT_LUNG & rect(0, 210, SIZE, SIZE))
    return chex, cxas


def write_masks(mask_root: Path, key_id: str, masks: dict[str, np.ndarray]) -> None:
    for stem, mask in masks.items():
        write_mask(mask_root / key_id / f"{stem}.png", mask)


def write_csv(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


POSITIVES = {  # key_id -> (dicom_id, kind)
    "effusion_s50000001_positive_0": ("dcm_eff1", "lung"),
    "effusion_s50000005_positive_0": ("dcm_eff2", "lung"),
    "cardiomegaly_s50000003_positive_0": ("dcm_card", "cardio"),
}
NEGATIVES = {"cardiomegaly_s50000002_negative_2": "dcm_neg1",
             "effusion_s50000006_negative_0": "dcm_neg2"}
MISSING_KEY = "edema_s50000007_positive_0"      # accepted, not in deformation results
FAILED_KEY = "opacity_s50000008_positive_0"     # accepted, qa_deformation_success false
REJECTED_KEY = "pneumonia_s50000009_positive_0"  # rejected by the annotator


def build_inputs(root: Path, *, cxr_mode: str = "RGB") -> dict[str, Path]:
    """Write a full Stage 02 input tree under ``root``; returns the paths by flag name."""
    deformed = root / "s01" / "deformed_masks"
    chex, cxas = root / "s01" / "chexmasku_pred", root / "s01" / "cxas_pred"
    cases: dict[str, Any] = {}
    for key_id, (dicom, kind) in POSITIVES.items():
        case, masks = lung_case(dicom) if kind == "lung" else cardio_case(dicom)
        cases[key_id] = case
        write_masks(deformed, key_id, masks)
        write_anatomy(root / "s01", dicom)
        write_cxr(root / "cxr" / f"{dicom}.png", cxr_mode)
    failed, _ = lung_case("dcm_fail")
    failed["qa_deformation_success"] = False
    cases[FAILED_KEY] = failed
    for dicom in NEGATIVES.values():
        write_cxr(root / "cxr" / f"{dicom}.png", cxr_mode)
    for case in cases.values():
        validated(case)
    results = root / "s01" / "deformation_results" / "deformation_results.json"
    write_json_atomic(results, cases, indent=4)

    pos_rows = [{"key_id": k, "dicom_id": d, "target": k.split("_")[0],
                 "pair_id": k.split("_", 1)[1], "mapped_location": "",
                 "segmentation_source": "global", "plot_path": "", "optimal?": "y"}
                for k, (d, _) in POSITIVES.items()]
    pos_rows += [{"key_id": MISSING_KEY, "dicom_id": "dcm_missing", "optimal?": "yes"},
                 {"key_id": FAILED_KEY, "dicom_id": "dcm_fail", "optimal?": "1"},
                 {"key_id": REJECTED_KEY, "dicom_id": "dcm_rej", "optimal?": "n"}]
    positive_sheet = root / "s00" / "rosalia_pred" / "labeling_sheet.csv"
    write_csv(positive_sheet, ["key_id", "dicom_id", "target", "pair_id", "mapped_location",
                               "segmentation_source", "plot_path", "optimal?"], pos_rows)
    negative_sheet = root / "s00" / "negative" / "labeling_sheet.csv"
    write_csv(negative_sheet, ["lesion", "key_id", "dicom_id", "optimal?"],
              [{"lesion": k.split("_")[0], "key_id": k, "dicom_id": d, "optimal?": "y"}
               for k, d in NEGATIVES.items()])
    return {"deformation_results_json": results, "positive_labeling_sheet": positive_sheet,
            "negative_labeling_sheet": negative_sheet, "deformed_mask_dir": deformed,
            "chexmask_dir": chex, "cxas_dir": cxas, "cxr_dir": root / "cxr"}
