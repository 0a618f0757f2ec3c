"""Stage 02 rendering: overlay colour/alpha, points, option images, default tokens, CXR modes."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import qa_cases
from PIL import Image

from chexpercept.errors import InputError
from chexpercept.images import read_mask
from chexpercept.qa._text import POINT_RGB
from chexpercept.qa.build import CaseTask, process_case
from chexpercept.qa.render import MaskSource, draw_points, overlay_mask

KEY = "effusion_s50000001_positive_0"
CARDIO = "cardiomegaly_s50000003_positive_0"


def _task(tmp_path, key=KEY, kind="lung", no_deformation=False, cxr_mode="RGB", size=1024):
    case, masks = qa_cases.lung_case("dcm") if kind == "lung" else qa_cases.cardio_case("dcm")
    qa_cases.write_masks(tmp_path / "masks", key, masks)
    chex, cxas = qa_cases.write_anatomy(tmp_path, "dcm")
    qa_cases.write_cxr(tmp_path / "cxr" / "dcm.png", cxr_mode, size)
    return CaseTask(key_id=key, dicom_id="dcm", no_deformation=no_deformation,
                    case=qa_cases.validated(case), seed=0, cxr_path=tmp_path / "cxr" / "dcm.png",
                    deformed_mask_dir=tmp_path / "masks" / key, chexmask_dir=chex, cxas_dir=cxas,
                    case_dir=tmp_path / "out" / key, item_path=tmp_path / "items" / f"{key}.json")


def _png(path) -> np.ndarray:
    with Image.open(path) as im:
        assert im.size == (1024, 1024)
        assert im.mode == "RGB"
        return np.asarray(im)


def test_overlay_is_cyan_alpha_half():
    gray = np.full((4, 4), 201, np.uint8)
    mask = np.zeros((4, 4), bool)
    mask[0, 0] = True
    out = overlay_mask(gray, mask)
    # out = img * (1 - 0.5) + (0, 1, 1) * 0.5: R = 100.5, G = B = 100.5 + 127.5 = 228
    assert out[0, 0, 0] in (100, 101)
    assert out[0, 0, 1:].tolist() == [228, 228]
    assert out[1, 1].tolist() == [201, 201, 201]


def test_points_are_coloured_discs_with_white_rim():
    rgb = np.zeros((1024, 1024, 3), np.uint8)
    out = draw_points(rgb, [{"point": [100, 200], "color": "red"},
                            {"point": [400, 400], "color": "blue"},
                            {"point": None, "color": "None"}])
    assert out[200, 100].tolist() == [255, 0, 0]
    assert out[200, 100 + 14].tolist() == [255, 0, 0]
    assert out[200, 100 + 16].tolist() == [255, 255, 255]  # rim 15..17 px
    assert out[200, 100 + 19].tolist() == [0, 0, 0]
    assert out[400, 400].tolist() == [0, 0, 255]
    assert rgb.sum() == 0  # input untouched


def test_revision_required_case_images(tmp_path):
    task = _task(tmp_path)
    outcome = process_case(task)
    assert outcome.status == "built", outcome.reason
    contour = outcome.item["contour_qa"]
    rev = task.case_dir / "contour_qa" / "contour_revision_qa"
    options = contour["contour_revision_qa_revision_result"]["answer_options"]
    files = sorted(p.name for p in rev.iterdir())
    assert files == sorted([f"option_{i}.png" for i in range(1, len(options) + 1)]
                           + ["xray_with_mask_and_points.png"])
    gray = _png(task.case_dir / "detection_qa" / "xray.png")[:, :, 0]
    masks = MaskSource(task.deformed_mask_dir, "dcm", task.chexmask_dir, task.cxas_dir,
                       contour["revision_before_masks"])
    before = masks.union(contour["revision_before_masks"])
    eval_img = _png(task.case_dir / "contour_qa" / "contour_eval_qa" / "xray_with_mask.png")
    assert np.array_equal(eval_img, overlay_mask(gray, before))
    for i, option in enumerate(options, start=1):
        img = _png(rev / f"option_{i}.png")
        assert np.array_equal(img, overlay_mask(gray, masks.union(option["masks"])))
    points = _png(rev / "xray_with_mask_and_points.png")
    for o in contour["contour_revision_qa_expansion"]["answer_options"][:-1]:
        x, y = o["point"]
        assert points[y, x].tolist() == list(POINT_RGB[o["color"]])


def test_revision_free_shows_after_masks_and_no_revision_images(tmp_path):
    task = _task(tmp_path, no_deformation=True)
    outcome = process_case(task)
    assert outcome.status == "built"
    assert not (task.case_dir / "contour_qa" / "contour_revision_qa").exists()
    gray = _png(task.case_dir / "detection_qa" / "xray.png")[:, :, 0]
    after = (read_mask(task.deformed_mask_dir / "optimal_component_0.png")
             | read_mask(task.deformed_mask_dir / "suboptimal_component_2_no_contraction.png"))
    eval_img = _png(task.case_dir / "contour_qa" / "contour_eval_qa" / "xray_with_mask.png")
    assert np.array_equal(eval_img, overlay_mask(gray, after))


def test_default_tokens(tmp_path):
    task = _task(tmp_path)
    before = ["suboptimal_component_0_cont1"]
    src = MaskSource(task.deformed_mask_dir, "dcm", task.chexmask_dir, task.cxas_dir, before)
    b = read_mask(task.deformed_mask_dir / "suboptimal_component_0_cont1.png")
    kernel = np.ones((5, 5), np.uint8)
    assert np.array_equal(src.load("default_keep"), b)
    assert np.array_equal(src.load("default_dilated"),
                          cv2.dilate(b.astype(np.uint8), kernel, iterations=3) > 0)
    assert np.array_equal(src.load("default_eroded"),
                          cv2.erode(b.astype(np.uint8), kernel, iterations=3) > 0)
    assert src.load("default_dilated").sum() > b.sum() > src.load("default_eroded").sum()
    assert np.array_equal(src.load("default_right_lung_chex"), qa_cases.RIGHT_LUNG)
    assert np.array_equal(src.load("default_left_lung_chex"), qa_cases.LEFT_LUNG)
    assert np.array_equal(src.load("default_left_lung_cxas"),
                          qa_cases.LEFT_LUNG & qa_cases.rect(0, 210, 1024, 1024))
    assert not src.load("default_empty").any()


def test_cardiomegaly_case_has_null_attributes(tmp_path):
    task = _task(tmp_path, key=CARDIO, kind="cardio")
    outcome = process_case(task)
    assert outcome.status == "built", outcome.reason
    assert outcome.item["attribute_extraction_qa"] is None
    assert list(outcome.item) == ["detection_qa", "contour_qa", "attribute_extraction_qa",
                                  "pair_id", "dicom_id"]
    assert "heart" not in outcome.item["contour_qa"]["contour_eval_qa"]["question"]


def test_missing_option_mask_fails_whole_case(tmp_path):
    task = _task(tmp_path)
    first = process_case(task)
    fakes = [o for o in first.item["contour_qa"]["contour_revision_qa_revision_result"][
        "answer_options"] if o["type"] == "fake"]
    stem = next(m for o in fakes for m in o["masks"] if not m.startswith("default_")
                and m != "suboptimal_component_2_no_contraction")
    (task.deformed_mask_dir / f"{stem}.png").unlink()
    task.item_path.unlink()  # force a rebuild
    outcome = process_case(task)
    assert outcome.status == "failed"
    assert KEY in outcome.reason and stem in outcome.reason and "option" in outcome.reason
    assert not task.case_dir.exists()  # no partial option list left behind
    assert not task.item_path.exists()


def test_missing_anatomy_mask_is_an_input_error(tmp_path):
    task = _task(tmp_path)
    (task.chexmask_dir / "dcm" / "right_lung.png").unlink()
    src = MaskSource(task.deformed_mask_dir, "dcm", task.chexmask_dir, task.cxas_dir, [])
    with pytest.raises(InputError, match="right_lung.png"):
        src.load("default_right_lung_chex")
    with pytest.raises(InputError, match="unknown default mask token"):
        src.load("default_bogus")


@pytest.mark.parametrize("mode,size", [("RGBA", 1024), ("I;16", 1024), ("L", 1024),
                                       ("RGB", 512)])
def test_cxr_modes_and_sizes(tmp_path, mode, size):
    task = _task(tmp_path, no_deformation=None, cxr_mode=mode, size=size)
    outcome = process_case(task)
    assert outcome.status == "built", outcome.reason
    img = _png(task.case_dir / "detection_qa" / "xray.png")
    assert img.dtype == np.uint8
    assert np.array_equal(img[:, :, 0], img[:, :, 1])


def test_missing_cxr_fails_case(tmp_path):
    task = _task(tmp_path)
    task.cxr_path.unlink()
    outcome = process_case(task)
    assert outcome.status == "failed" and "image not found" in outcome.reason


def test_a_mask_that_does_not_fit_the_cxr_fails_the_case_naming_both_files(tmp_path):
    task = _task(tmp_path, no_deformation=True)
    stem = task.deformed_mask_dir / "optimal_component_0.png"
    small = read_mask(stem)[::2, ::2]  # the same mask at 512 x 512: never resized to fit
    Image.fromarray(np.where(small, 255, 0).astype(np.uint8)).save(stem)
    outcome = process_case(task)
    assert outcome.status == "failed"
    assert str(stem) in outcome.reason and str(task.cxr_path) in outcome.reason
    assert "512x512" in outcome.reason and "1024x1024" in outcome.reason
    with pytest.raises(InputError, match="is 4x4 pixels but the image is 1024x1024"):
        overlay_mask(np.zeros((1024, 1024), np.uint8), np.zeros((4, 4), bool))
