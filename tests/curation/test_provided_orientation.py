"""Stage 00 provided masks and EXIF orientation: a mask in the source's stored pixel grid follows
the turn the image loader applies to its CXR, or is refused naming both files
(docs/curation.md, "Working frame")."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from chexpercept.curation import images
from chexpercept.curation.segmenters import ProvidedSegmenter
from chexpercept.errors import InputError, SchemaError
from chexpercept.frame import FrameTransform, read_frame_transform, transform_sidecar
from chexpercept.images import read_cxr, write_mask

_ORIENTATION_TAG = 0x0112
#: The phantom's stored grid: width x height (landscape, so a 90-degree turn changes the shape).
STORED_W, STORED_H = 300, 200


def _exif(orientation: int) -> Image.Exif:
    exif = Image.Exif()
    exif[_ORIENTATION_TAG] = orientation
    return exif


def _region(w: int = STORED_W, h: int = STORED_H) -> np.ndarray:
    """The true region in the stored grid: a block near the top-left corner."""
    region = np.zeros((h, w), bool)
    region[h // 10:h // 10 + h * 3 // 10, w // 15:w // 15 + w // 3] = True
    return region


def _phantom(tmp_path, orientation: int, w: int = STORED_W, h: int = STORED_H):
    """A JPG whose stored pixels show the region bright, tagged with ``orientation``.

    Returns the CXR folder after Stage 00.00 preparation and the prepared PNG's true region
    (the bright block as the loader showed it, in the working frame).
    """
    root = tmp_path / "jpg"
    (root / "files").mkdir(parents=True)
    stored = np.where(_region(w, h), 230, 20).astype(np.uint8)
    Image.fromarray(stored).save(root / "files" / "d.jpg", quality=95, exif=_exif(orientation))
    cxr = tmp_path / "cxr"
    images.prepare_images({"d": "files/d.jpg"}, root, cxr)
    truth = np.asarray(Image.open(cxr / "d.png")) > 128
    return cxr, truth


def _write_mask(tmp_path, mask: np.ndarray) -> dict:
    write_mask(tmp_path / "ils" / "m.png", mask)
    return {"dicom_id": "d", "seg_mask_path": "m.png", "answer": "[SEG]"}


def _segment(tmp_path, cxr, item) -> np.ndarray:
    seg = ProvidedSegmenter(tmp_path / "ils", cxr)
    return seg.segment(np.zeros((1024, 1024), np.uint8), "Segment it.", item=item).mask


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def test_prepare_records_the_source_orientation(tmp_path):
    cxr, truth = _phantom(tmp_path, 6)
    t = read_frame_transform(cxr, "d")
    assert t.orientation == 6 and (t.orig_width, t.orig_height) == (STORED_H, STORED_W)
    assert t.stored_size == (STORED_W, STORED_H)
    assert FrameTransform.from_json(t.to_json(), "x") == t
    # A record from before orientations were recorded is prepared again (not trusted as 1).
    sidecar = transform_sidecar(cxr, "d")
    old = json.loads(sidecar.read_text())
    del old["orientation"]
    sidecar.write_text(json.dumps(old))
    summary = images.prepare_images({"d": "files/d.jpg"}, tmp_path / "jpg", cxr)
    assert summary.converted == 1 and "orientation" in json.loads(sidecar.read_text())
    with pytest.raises(SchemaError, match="orientation must be an EXIF orientation 1-8"):
        FrameTransform.from_json({**t.to_json(), "orientation": 9}, "x.transform.json")


@pytest.mark.parametrize("orientation", [6, 8, 3])
@pytest.mark.parametrize("square", [False, True], ids=["stored-size", "mimic-ils-square"])
def test_a_mask_in_the_stored_grid_follows_the_exif_turn(tmp_path, orientation, square):
    """Before: the stored-grid mask was stretched onto the upright image (IoU 0)."""
    cxr, truth = _phantom(tmp_path, orientation)
    mask = _region()
    if square:  # MIMIC-ILS style: the stored image stretched to a 512 x 512 square
        mask = np.asarray(Image.fromarray(mask).resize((512, 512), Image.NEAREST))
    out = _segment(tmp_path, cxr, _write_mask(tmp_path, mask))
    assert _iou(out, truth) > 0.95


def test_a_square_image_takes_the_square_mask_in_its_stored_grid(tmp_path):
    """The ambiguous case (both grids square): the mask gets the pixels' turn (documented)."""
    cxr, truth = _phantom(tmp_path, 8, 256, 256)
    out = _segment(tmp_path, cxr, _write_mask(tmp_path, _region(256, 256)))
    assert _iou(out, truth) > 0.95


def test_a_mask_with_the_upright_shape_is_not_turned_again(tmp_path):
    cxr, truth = _phantom(tmp_path, 6)
    upright = np.asarray(Image.fromarray(_region()).transpose(Image.Transpose.ROTATE_270))
    assert upright.shape == (STORED_W, STORED_H)
    out = _segment(tmp_path, cxr, _write_mask(tmp_path, upright))
    assert _iou(out, truth) > 0.95


def test_a_mask_with_its_own_tag_is_read_upright_and_not_turned_again(tmp_path):
    cxr, truth = _phantom(tmp_path, 6)
    path = tmp_path / "ils" / "m.png"
    path.parent.mkdir()
    Image.fromarray(_region().astype(np.uint8) * 255).save(path, exif=_exif(6))
    out = _segment(tmp_path, cxr, {"dicom_id": "d", "seg_mask_path": "m.png"})
    assert _iou(out, truth) > 0.95


@pytest.mark.parametrize("orientation", [6, 1])
def test_a_mask_that_fits_neither_grid_is_refused_naming_both_files(tmp_path, orientation):
    cxr, _ = _phantom(tmp_path, orientation)
    item = _write_mask(tmp_path, np.ones((300, 100), bool))  # 100 x 300: neither 3:2 nor 2:3
    with pytest.raises(InputError) as info:
        _segment(tmp_path, cxr, item)
    message = str(info.value)
    assert str(tmp_path / "ils" / "m.png") in message and str(cxr / "d.png") in message
    assert "is 100x300 pixels" in message
    if orientation == 6:
        assert "a 300x200 stored image shown 200x300 upright (EXIF orientation 6)" in message
    else:
        assert "a 300x200 image" in message


def test_a_flat_folder_png_with_a_tag_turns_its_mask_too(tmp_path):
    """No transform record (a hand-filled release-style folder): the PNG's own tag counts."""
    cxr = tmp_path / "cxr"
    cxr.mkdir()
    region = _region(256, 256)
    Image.fromarray(np.where(region, 230, 20).astype(np.uint8)).save(cxr / "d.png",
                                                                     exif=_exif(8))
    truth = read_cxr(cxr / "d.png") > 128
    out = _segment(tmp_path, cxr, _write_mask(tmp_path, region))
    assert _iou(out, truth) > 0.95
