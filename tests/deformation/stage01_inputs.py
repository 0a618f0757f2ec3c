"""Hand-built Stage 01 inputs: ellipse lungs/heart at 1024, candidate masks, sheet, config.

Geometry (1024x1024): the patient's right lung is image-left (centre x 330), the left lung is
image-right (centre x 700), both centred at y 500. Imported by tests/anatomy and
tests/deformation directly and by tests/scripts/test_stage01_* through importlib.
"""

from __future__ import annotations

import csv
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

from chexpercept.images import write_mask

SIZE = 1024


def ellipse(cx: int, cy: int, ax: int, ay: int) -> np.ndarray:
    m = np.zeros((SIZE, SIZE), np.uint8)
    cv2.ellipse(m, (cx, cy), (ax, ay), 0, 0, 360, 1, -1)
    return m.astype(bool)


def right_lung() -> np.ndarray:
    return ellipse(330, 500, 150, 320)


def left_lung() -> np.ndarray:
    return ellipse(700, 500, 150, 320)


def heart() -> np.ndarray:
    return ellipse(520, 680, 150, 110)


#: Candidate masks per lesion (two components for consolidation).
LESION_MASKS = {
    "consolidation": lambda: ellipse(300, 650, 90, 110) | ellipse(720, 350, 60, 70),
    "cardiomegaly": heart,
    "effusion": lambda: ellipse(300, 780, 120, 60),
    "edema": lambda: ellipse(330, 500, 130, 290),
}

SHEET_COLUMNS = ("key_id", "dicom_id", "target", "pair_id", "mapped_location",
                 "segmentation_source", "plot_path", "optimal?")


def write_anatomy(chex_dir: Path, cxas_dir: Path, dicom: str, *, zones: bool = False) -> None:
    """CheXmask-U and CXAS layouts for one dicom (CXAS zones by hand-made bands if asked)."""
    r, lft = right_lung(), left_lung()
    write_mask(chex_dir / dicom / "right_lung.png", r)
    write_mask(chex_dir / dicom / "left_lung.png", lft)
    write_mask(chex_dir / dicom / "heart.png", heart())
    # CXAS lungs slightly different from CheXmask-U (the pipeline intersects them).
    write_mask(cxas_dir / dicom / "right lung.png", r & ~ellipse(330, 180, 60, 30))
    write_mask(cxas_dir / dicom / "left lung.png", lft)
    if zones:
        y = np.arange(SIZE)[:, None]
        bands = {"upper zone lung": y < 400, "mid zone lung": (y >= 400) & (y < 600),
                 "lung base": y >= 600}
        for side, lung in (("right", r), ("left", lft)):
            for z, band in bands.items():
                write_mask(cxas_dir / dicom / f"{side} {z}.png", lung & band)


def write_inputs(root: Path, cases: dict[str, str] | None = None, *, zone_source: str =
                 "chex_vertical_thirds", cxas_zones: bool = False, stage01_anatomy: bool = True,
                 optimal: str = "y", with_cxas_path: bool = True) -> dict[str, Path]:
    """Write a config, a Stage 00 sheet, candidate masks, CXRs and anatomy under ``root``.

    Args:
        root: Temporary folder.
        cases: ``{pair_id suffix: lesion}``; default one consolidation + one cardiomegaly case.
        zone_source: ``mask_deformation.zone_mask_source``.
        cxas_zones: Also write the six CXAS zone PNGs.
        stage01_anatomy: Put the anatomy directly in the Stage 01 output (skips 01.00).
        optimal: Value of every ``optimal?`` cell.
        with_cxas_path: Write ``path.cxas_mask_path`` into the config.

    Returns:
        Paths: ``config``, ``sheet``, ``out00``, ``out01``, ``provided_chex``, ``provided_cxas``.
    """
    cases = cases or {"s50000001_positive_0": "consolidation",
                      "s50000002_positive_0": "cardiomegaly"}
    work = root / "work"
    out00, out01 = work / "00_source_data_curation", work / "01_mask_deformation"
    prov_chex, prov_cxas = root / "provided" / "chexmasku_pred", root / "provided" / "cxas_pred"
    cxr_dir = root / "cxr"
    rows = []
    for i, (pair_id, lesion) in enumerate(cases.items()):
        dicom = f"dicom{i:04d}"
        key_id = f"{lesion}_{pair_id}"
        mask = LESION_MASKS[lesion]()
        rgb = np.repeat(np.where(mask, 255, 0).astype(np.uint8)[..., None], 3, axis=2)
        path = out00 / "rosalia_pred" / lesion / pair_id / "pred_mask.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rgb).save(path)
        cxr_dir.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((SIZE, SIZE), 90, np.uint8)).save(cxr_dir / f"{dicom}.png")
        write_anatomy(prov_chex, prov_cxas, dicom, zones=cxas_zones)
        if stage01_anatomy:
            write_anatomy(out01 / "chexmasku_pred", out01 / "cxas_pred", dicom)
        rows.append({"key_id": key_id, "dicom_id": dicom, "target": lesion, "pair_id": pair_id,
                     "mapped_location": "", "segmentation_source": "provided",
                     "plot_path": "", "optimal?": optimal})
    sheet = out00 / "rosalia_pred" / "labeling_sheet.csv"
    with open(sheet, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=SHEET_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    cxas_line = f"  cxas_mask_path: {prov_cxas}\n" if with_cxas_path else ""
    config = root / "config.yaml"
    config.write_text(
        "seed: 7\n"
        "path:\n"
        f"  mimic_cxr_path: {cxr_dir}\n"
        f"  mimic_ils_path: {root / 'ils.json'}\n"
        f"  chexmask_path: {prov_chex}\n"
        f"{cxas_line}"
        f"  work_dir: {work}\n"
        "mask_deformation:\n"
        "  backend: morphological\n"
        f"  zone_mask_source: {zone_source}\n"
    )
    return {"config": config, "sheet": sheet, "out00": out00, "out01": out01,
            "provided_chex": prov_chex, "provided_cxas": prov_cxas, "cxr": cxr_dir}


def deformation_tasks(root: Path, cases: dict[str, str], out_name: str = "out01"):
    """Inputs for ``cases`` under ``root`` and the morphological run's ``(tasks, settings)``.

    The settings write to ``root/out_name`` with seed 7, the CheXmask-U and CXAS masks of the
    inputs and ``chex_vertical_thirds`` lung zones.
    """
    from chexpercept.deformation import DeformationParams, DeformationSettings, build_tasks
    from chexpercept.files import read_csv_rows
    from chexpercept.schema import accepted_key_ids

    paths = write_inputs(root, cases)
    rows = read_csv_rows(paths["sheet"])
    tasks = build_tasks(rows, accepted_key_ids(rows, paths["sheet"]), sheet_path=paths["sheet"],
                        candidate_root=paths["out00"] / "rosalia_pred", cxr_dir=paths["cxr"])
    settings = DeformationSettings(
        out_dir=str(root / out_name), seed=7, params=DeformationParams(),
        chexmask_dir=str(paths["out01"] / "chexmasku_pred"),
        cxas_dir=str(paths["out01"] / "cxas_pred"), zone_source="chex_vertical_thirds")
    return tasks, settings
