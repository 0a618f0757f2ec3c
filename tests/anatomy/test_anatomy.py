"""Stage 01 anatomy: zones, lung regions, lungs ∪ lesion, overlap thresholds, provided masks."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from PIL import Image

from chexpercept.anatomy import (
    LUNG_REGION_NAMES,
    ZONE_NAMES,
    build_case_anatomy,
    build_lungs,
    geometrical_mask_info,
    load_case_anatomy,
    prepare_provided_anatomy,
)
from chexpercept.anatomy.masks import axial_regions, costophrenic_angles, peripheral_regions
from chexpercept.anatomy.overlap import ensure_best_overlap
from chexpercept.anatomy.provided import check_zone_source
from chexpercept.errors import ConfigError, InputError
from chexpercept.images import read_mask

N = 1024


def ellipse(cx, cy, ax, ay):
    m = np.zeros((N, N), np.uint8)
    cv2.ellipse(m, (cx, cy), (ax, ay), 0, 0, 360, 1, -1)
    return m.astype(bool)


def rect(x0, y0, x1, y1):
    m = np.zeros((N, N), bool)
    m[y0:y1 + 1, x0:x1 + 1] = True
    return m


RIGHT, LEFT = ellipse(330, 500, 150, 320), ellipse(700, 500, 150, 320)


def test_vertical_thirds_follow_the_release_formula():
    right, left = rect(100, 100, 300, 399), rect(600, 200, 800, 499)
    anat = build_case_anatomy(left, right, with_regions=False)
    assert list(anat.zones) == list(ZONE_NAMES)
    # right: ymin 100, h 300, b1 200, b2 300 -> upper y<=200, mid 201..300, base >300
    rows = {z: np.flatnonzero(anat.zones[f"right {z}"].any(axis=1))
            for z in ("upper zone lung", "mid zone lung", "lung base")}
    assert (rows["upper zone lung"][[0, -1]] == [100, 200]).all()
    assert (rows["mid zone lung"][[0, -1]] == [201, 300]).all()
    assert (rows["lung base"][[0, -1]] == [301, 399]).all()
    base_left = np.flatnonzero(anat.zones["left lung base"].any(axis=1))
    assert base_left[0] == 401
    assert anat.lung_regions is None


def test_region_names_and_insertion_order():
    assert len(LUNG_REGION_NAMES) == 20
    assert LUNG_REGION_NAMES[:5] == (
        "right costophrenic angle", "left costophrenic angle",
        "right medial lung & right upper zone lung", "right medial lung & right mid zone lung",
        "right medial lung & right lung base")
    assert LUNG_REGION_NAMES[5] == "left medial lung & left upper zone lung"
    assert LUNG_REGION_NAMES[8] == "right lateral lung & right upper zone lung"
    assert LUNG_REGION_NAMES[-1] == "left peripheral lung & left lung base"
    anat = build_case_anatomy(LEFT, RIGHT, with_regions=True)
    assert tuple(anat.lung_regions) == LUNG_REGION_NAMES
    assert all(anat.lung_regions[n].any() for n in LUNG_REGION_NAMES)


def test_axial_split_patient_right_is_image_left():
    right, left = rect(100, 100, 301, 400), rect(600, 100, 801, 400)
    ax = axial_regions(left, right)
    # right lung: mid = (301 + 100) // 2 = 200; medial = x >= 200 (towards the image centre)
    assert np.flatnonzero(ax["right medial lung"].any(axis=0))[0] == 200
    assert np.flatnonzero(ax["right lateral lung"].any(axis=0))[-1] == 199
    # left lung: mid = 700; medial = x < 700
    assert np.flatnonzero(ax["left medial lung"].any(axis=0))[-1] == 699
    assert np.flatnonzero(ax["left lateral lung"].any(axis=0))[0] == 700


def test_peripheral_band_is_lateral_and_cpa_is_its_bottom_quarter():
    per = peripheral_regions(LEFT, RIGHT)
    right_band = per["right peripheral lung"]
    assert right_band.any() and not (right_band & ~RIGHT).any()
    # the band is lateral: its mean x is left of the right lung's mean x (image-left)
    assert np.nonzero(right_band)[1].mean() < np.nonzero(RIGHT)[1].mean()
    assert np.nonzero(per["left peripheral lung"])[1].mean() > np.nonzero(LEFT)[1].mean()
    cpa = costophrenic_angles(per, LEFT, RIGHT)
    ys = np.flatnonzero(RIGHT.any(axis=1))
    cut = ys[0] + int(0.75 * (ys[-1] - ys[0]))
    assert np.flatnonzero(cpa["right costophrenic angle"].any(axis=1))[0] == cut
    assert not (cpa["right costophrenic angle"] & ~right_band).any()


def test_lungs_are_intersected_and_or_touching_lesion_components():
    cxas_right = RIGHT & ~rect(0, 0, N - 1, 250)
    touching = ellipse(200, 600, 100, 60)  # sticks out of the right lung laterally
    far = ellipse(520, 100, 30, 30)  # between the lungs, touches none
    left, right = build_lungs(LEFT, RIGHT, LEFT, cxas_right, touching | far)
    assert not right[200, 330]  # cut by CXAS
    assert right[600, 105] and not RIGHT[600, 105]  # lesion part outside the lung OR-ed in
    assert not right[100, 520] and not left[100, 520]
    assert (left == LEFT).all()


def test_overlap_thresholds_sizes_and_cardiomegaly():
    anat = build_case_anatomy(LEFT, RIGHT, with_regions=True)
    n_left = int(LEFT.sum())
    tiny = np.zeros((N, N), bool)
    ys, xs = np.nonzero(LEFT)
    tiny[ys[: int(0.009 * n_left)], xs[: int(0.009 * n_left)]] = True
    info = geometrical_mask_info(tiny, "3", anat)
    assert info["mask_component_id"] == "3"
    ll = info["overlap"]["left lung"]
    assert ll["has_overlap"] is False and ll["size"] == 0 and 0 < ll["overlap_ratio"] < 0.01
    big = ellipse(700, 300, 150, 150) & LEFT
    info = geometrical_mask_info(big, "0", anat)
    assert info["overlap"]["left lung"]["has_overlap"]
    assert info["overlap"]["left lung"]["size"] == int(big.sum())
    zones = info["overlap"]["zones"]
    assert zones["left upper zone lung"]["has_overlap"]
    assert all(v["has_overlap"] == (v["overlap_ratio"] >= 0.2) for v in zones.values())
    assert list(info["overlap"]["lung_regions"]) == list(LUNG_REGION_NAMES)
    cardio = build_case_anatomy(LEFT, RIGHT, with_regions=False)
    assert "lung_regions" not in geometrical_mask_info(big, "0", cardio)["overlap"]


def test_best_overlap_promotion():
    group = {"a": {"has_overlap": False, "overlap_ratio": 0.05},
             "b": {"has_overlap": False, "overlap_ratio": 0.15}}
    ensure_best_overlap(group)
    assert group["b"]["has_overlap"] and not group["a"]["has_overlap"]
    zero = {"a": {"has_overlap": False, "overlap_ratio": 0.0}}
    assert not ensure_best_overlap(zero)["a"]["has_overlap"]
    ok = {"a": {"has_overlap": True, "overlap_ratio": 0.3},
          "b": {"has_overlap": False, "overlap_ratio": 0.19}}
    assert not ensure_best_overlap(ok)["b"]["has_overlap"]
    # a small lesion covering < 20 % of every zone still gets its best zone
    anat = build_case_anatomy(LEFT, RIGHT, with_regions=True)
    info = geometrical_mask_info(ellipse(330, 300, 20, 20), "0", anat)
    assert sum(v["has_overlap"] for v in info["overlap"]["zones"].values()) == 1
    assert sum(v["has_overlap"] for v in info["overlap"]["lung_regions"].values()) == 1


def _write_provided(chex, cxas, dicom, size=N, zones=False):
    def save(path, mask):
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.where(mask, 255, 0).astype(np.uint8)).resize(
            (size, size), Image.NEAREST).save(path)
    save(chex / dicom / "right_lung.png", RIGHT)
    save(chex / dicom / "left_lung.png", LEFT)
    save(cxas / dicom / "right lung.png", RIGHT)
    save(cxas / dicom / "left lung.png", LEFT)
    if zones:
        for z in ZONE_NAMES:
            save(cxas / dicom / f"{z}.png", RIGHT)


def test_provided_copies_resized_dedupes_and_resumes(tmp_path):
    chex, cxas = tmp_path / "chex", tmp_path / "cxas"
    _write_provided(chex, cxas, "d1", size=512)
    _write_provided(chex, cxas, "d2")
    out_chex, out_cxas = tmp_path / "out" / "chexmasku_pred", tmp_path / "out" / "cxas_pred"
    kw = dict(chexmask_src=chex, cxas_src=cxas, chexmask_out=out_chex, cxas_out=out_cxas,
              zone_source="chex_vertical_thirds")
    summary = prepare_provided_anatomy(["d1", "d2", "d1"], **kw)
    assert (summary.processed, summary.skipped_done, summary.files_written) == (2, 0, 8)
    with Image.open(out_chex / "d1" / "left_lung.png") as im:
        assert im.size == (N, N) and im.mode == "L"
    copied = read_mask(out_cxas / "d1" / "left lung.png")
    assert (copied == read_mask(chex / "d1" / "left_lung.png", resize=True)).all()
    again = prepare_provided_anatomy(["d1", "d2"], **kw)
    assert (again.processed, again.skipped_done) == (0, 2)


def test_provided_missing_files_are_listed_with_dicom_and_path(tmp_path):
    chex, cxas = tmp_path / "chex", tmp_path / "cxas"
    _write_provided(chex, cxas, "d1")
    (chex / "d1" / "left_lung.png").unlink()
    kw = dict(chexmask_src=chex, cxas_src=cxas, chexmask_out=tmp_path / "o1",
              cxas_out=tmp_path / "o2")
    with pytest.raises(InputError) as exc:
        prepare_provided_anatomy(["d1", "d9"], zone_source="chex_vertical_thirds", **kw)
    msg = str(exc.value)
    assert "dicom d1" in msg and str(chex / "d1" / "left_lung.png") in msg
    assert str(cxas / "d9" / "right lung.png") in msg and "5 anatomy mask file(s)" in msg
    # zone PNGs are needed only for the cxas zone source
    (chex / "d1" / "left_lung.png").write_bytes((chex / "d1" / "right_lung.png").read_bytes())
    prepare_provided_anatomy(["d1"], zone_source="chex_vertical_thirds", **kw)
    with pytest.raises(InputError, match="right upper zone lung"):
        prepare_provided_anatomy(["d1"], zone_source="cxas", **kw)
    with pytest.raises(ConfigError, match="path.cxas_mask_path"):
        prepare_provided_anatomy(["d1"], zone_source="cxas", chexmask_src=chex, cxas_src=None,
                                 chexmask_out=tmp_path / "o1", cxas_out=tmp_path / "o2")


def test_zone_source_errors():
    with pytest.raises(ConfigError, match="zone_mask_source.*chex_vertical_thirds, cxas"):
        check_zone_source("chex_vertical_third")


def test_load_case_anatomy_needs_cxas_zone_dir_only_for_cxas(tmp_path):
    chex, cxas = tmp_path / "chex", tmp_path / "cxas"
    _write_provided(chex, cxas, "d1", zones=True)
    lesion = ellipse(330, 700, 60, 60)
    anat = load_case_anatomy("d1", lesion, with_regions=True, chexmask_dir=chex, cxas_dir=cxas)
    assert anat.lung_regions is not None and anat.right_lung[700, 330]
    with pytest.raises(ConfigError, match="path.cxas_mask_path"):
        load_case_anatomy("d1", lesion, with_regions=True, chexmask_dir=chex, cxas_dir=cxas,
                          zone_source="cxas", cxas_zone_dir=None)
    anat = load_case_anatomy("d1", lesion, with_regions=True, chexmask_dir=chex, cxas_dir=cxas,
                             zone_source="cxas", cxas_zone_dir=cxas)
    # CXAS zones (here: the whole right lung) intersected with the lung union
    assert (anat.zones["left lung base"] == anat.right_lung).all()
    with pytest.raises(InputError) as exc:
        load_case_anatomy("d2", lesion, with_regions=True, chexmask_dir=chex, cxas_dir=cxas)
    assert "dicom d2" in str(exc.value) and str(chex / "d2" / "right_lung.png") in str(exc.value)


def test_provided_anatomy_follows_the_stage00_transform(tmp_path):
    """Provided masks covering the original CXR are letterboxed like the prepared image."""
    from chexpercept import files as cxfiles
    from chexpercept import frame as cxframe
    from chexpercept import images as cximages
    from chexpercept.anatomy.provided import prepare_provided_anatomy

    cxr = tmp_path / "cxr"
    cxr.mkdir()
    t = cxframe.frame_transform(300, 400, "letterbox")
    cxfiles.write_json_atomic(cxframe.transform_sidecar(cxr, "d1"), t.to_json())
    src_chex, src_cxas = tmp_path / "chex", tmp_path / "cxas"
    full = np.ones((1024, 1024), bool)  # the whole (stretched) original image
    for folder, names in ((src_chex, ("right_lung", "left_lung")),
                          (src_cxas, ("right lung", "left lung"))):
        for n in names:
            cximages.write_mask(folder / "d1" / f"{n}.png", full)
    for frame, expect_pad in (("original", True), ("work", False)):
        out = tmp_path / frame
        prepare_provided_anatomy(["d1"], chexmask_src=src_chex, cxas_src=src_cxas,
                                 chexmask_out=out / "c", cxas_out=out / "x",
                                 zone_source="chex_vertical_thirds", cxr_dir=cxr, frame=frame)
        m = cximages.read_mask(out / "c" / "d1" / "left_lung.png")
        assert (not m[:, :t.pad_x].any()) == expect_pad
        assert m[:, t.pad_x:t.pad_x + t.resized_width].all()
