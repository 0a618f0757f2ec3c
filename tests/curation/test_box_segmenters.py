"""Stage 00.01 box segmenters: registry, box mapping, sam2-box with a fake and a random SAM2."""

from __future__ import annotations

import numpy as np
import pytest

from chexpercept.config_schema import ChexperceptConfig
from chexpercept.curation.box_segmenters import (
    BoxAnatomySegmenter,
    Sam2BoxSegmenter,
    box_mask,
    box_to_frame,
    create_sam2_box_segmenter,
)
from chexpercept.curation.segmenters import (
    EmptyPredictionError,
    create_segmenter,
    segmenter_names,
)
from chexpercept.errors import ConfigError, InputError
from chexpercept.files import write_json_atomic
from chexpercept.frame import frame_transform
from chexpercept.images import write_png_atomic

ITEM = {"dicom_id": "img", "target": "effusion", "pair_id": "img_positive",
        "boxes": [{"x0": 100.0, "y0": 200.0, "x1": 300.0, "y1": 400.0, "rows": [3]}],
        "box_frame": [1024, 1024]}


def _cfg(tmp_path, **md):
    return ChexperceptConfig.model_validate({"path": {
        "mimic_cxr_path": str(tmp_path / "cxr"), "chexmask_path": str(tmp_path / "anat")},
        "source_data_curation": {"source": "nih-cxr14", "segmenter": "box-anatomy"},
        "mask_deformation": md})


def test_registry_has_the_box_segmenters(tmp_path):
    assert {"box-anatomy", "sam2-box"} <= set(segmenter_names())
    assert isinstance(create_segmenter("box-anatomy", _cfg(tmp_path)), BoxAnatomySegmenter)
    with pytest.raises(ConfigError, match="mask_deformation.sam2_checkpoint"):
        create_segmenter("sam2-box", _cfg(tmp_path))


def test_boxes_follow_the_recorded_transform():
    t = frame_transform(2000, 1000, "letterbox")  # scale 0.512, pad_y 256
    assert box_to_frame((0, 0, 2000, 1000), t) == (0, 256, 1024, 768)
    assert box_to_frame((100, 200, 300, 400), None, (1024, 1024)) == (100, 200, 300, 400)
    assert box_to_frame((-5, -5, 5000, 5000), None) == (0, 0, 1024, 1024)  # clipped
    m = box_mask(ITEM, None)
    assert m.sum() == 200 * 200 and m[200, 100] and not m[400, 300]
    with pytest.raises(InputError, match="no boxes"):
        box_mask({**ITEM, "boxes": []}, None)


def test_box_anatomy_maps_original_frame_masks(tmp_path):
    """A 2000 x 1000 original: anatomy masks at the original size, boxes in original pixels."""
    cxr, anat = tmp_path / "cxr", tmp_path / "anat"
    t = frame_transform(2000, 1000, "letterbox")
    write_json_atomic(cxr / "img.transform.json", t.to_json())
    lung = np.zeros((1000, 2000), np.uint8)
    lung[100:900, 100:900] = 255
    write_png_atomic(anat / "img" / "right_lung.png", lung)
    write_png_atomic(anat / "img" / "left_lung.png", np.zeros((1000, 2000), np.uint8))
    item = {**ITEM, "box_frame": None,
            "boxes": [{"x0": 800.0, "y0": 400.0, "x1": 1200.0, "y1": 600.0}]}
    res = BoxAnatomySegmenter(anat, cxr, smoothing_px=0).segment(
        np.zeros((1024, 1024), np.uint8), "", item=item)
    ys, xs = np.nonzero(res.mask)
    # box x 800..1200 -> frame 409.6..614.4, lung x < 900 -> < 460.8; y 400..600 -> 460.8..563.2
    assert xs.min() == 409 and xs.max() == 460 and ys.min() == 460 and ys.max() == 563


class _FullMask:
    """Fake predictor: every prompt gets the whole image (so clipping to the box shows)."""

    def __init__(self, empty: bool = False):
        self.empty = empty
        self.boxes = []

    def set_image(self, image):
        assert image.shape == (1024, 1024, 3)

    def predict(self, box=None, multimask_output=True, **_):
        self.boxes.append(box.tolist())
        m = np.zeros((1, 1024, 1024), bool) if self.empty else np.ones((1, 1024, 1024), bool)
        return m, np.ones(1), None


def test_sam2_box_prompts_each_box_and_stays_inside(tmp_path):
    pred = _FullMask()
    item = {**ITEM, "boxes": ITEM["boxes"] + [{"x0": 600.0, "y0": 600.0, "x1": 700.0,
                                                 "y1": 650.0}]}
    res = Sam2BoxSegmenter(pred, tmp_path).segment(np.zeros((1024, 1024), np.uint8), "",
                                                   item=item)
    assert pred.boxes == [[100, 200, 300, 400], [600, 600, 700, 650]]
    assert res.mask.sum() == 200 * 200 + 100 * 50
    with pytest.raises(EmptyPredictionError, match="no mask inside"):
        Sam2BoxSegmenter(_FullMask(empty=True), tmp_path).segment(
            np.zeros((1024, 1024), np.uint8), "", item=ITEM)


def test_sam2_box_with_a_random_tiny_sam2(tmp_path):
    """The real SAM2ImagePredictor (random Hiera-T, saved and reloaded) on CPU."""
    pytest.importorskip("sam2")
    torch = pytest.importorskip("torch")
    from sam2.build_sam import build_sam2

    torch.manual_seed(0)
    torch.set_num_threads(2)
    config = "configs/sam2.1/sam2.1_hiera_t.yaml"
    ckpt = tmp_path / "sam2_random_tiny.pt"
    torch.save({"model": build_sam2(config, ckpt_path=None, device="cpu").state_dict()}, ckpt)
    seg = create_sam2_box_segmenter(_cfg(tmp_path, sam2_checkpoint=str(ckpt),
                                         sam2_config=config, device="cpu"))
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (1024, 1024), dtype=np.uint8)
    try:
        res = seg.segment(image, "", item=ITEM)
    except EmptyPredictionError:
        return  # random weights may predict nothing inside the box: a recorded failure
    inside = box_mask(ITEM, None)
    assert res.mask.shape == (1024, 1024) and not (res.mask & ~inside).any()


def test_box_anatomy_refuses_a_mask_of_another_shape_naming_it(tmp_path):
    """A 300 x 700 anatomy mask of a 2000 x 1000 original was stretched; now it is refused."""
    cxr, anat = tmp_path / "cxr", tmp_path / "anat"
    write_json_atomic(cxr / "img.transform.json", frame_transform(2000, 1000, "letterbox")
                      .to_json())
    for name in ("right_lung", "left_lung"):
        write_png_atomic(anat / "img" / f"{name}.png", np.full((700, 300), 255, np.uint8))
    with pytest.raises(InputError, match=r"provided mask .*right_lung\.png is 300x700 pixels, "
                                         r"but its CXR .*img\.png was prepared from a 2000x1000"):
        BoxAnatomySegmenter(anat, cxr, smoothing_px=0).segment(
            np.zeros((1024, 1024), np.uint8), "", item={**ITEM, "box_frame": None})
