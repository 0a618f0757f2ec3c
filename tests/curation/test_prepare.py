"""Stage 00 readers: frame transforms, letterbox preparation, splits, disjoint negatives."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from chexpercept.curation import candidates, images, sampling
from chexpercept.errors import SchemaError
from chexpercept.frame import (
    frame_transform,
    mask_to_frame,
    mask_to_original,
    read_frame_transform,
    transforms_index,
)
from chexpercept.images import write_mask
from chexpercept.lesions import LESIONS


def test_letterbox_transform_numbers_and_inverse():
    t = frame_transform(1400, 1700, "letterbox")
    assert (t.resized_width, t.resized_height, t.pad_x, t.pad_y) == (843, 1024, 90, 0)
    assert abs(t.scale_x - t.scale_y) < 1e-3
    s = frame_transform(1400, 1700, "stretch")
    assert (s.pad_x, s.pad_y, s.resized_width) == (0, 0, 1024)
    assert s.scale_x != s.scale_y
    # Point maps are inverse of each other.
    x, y = t.point_to_frame(700.0, 850.0)
    assert np.allclose(t.point_to_original(x, y), (700.0, 850.0))
    # A square (MIMIC-ILS-style, stretched) mask and an original-size mask of the same region
    # land at the same working-frame place; mask_to_original inverts mask_to_frame.
    orig = np.zeros((1700, 1400), bool)
    orig[400:900, 200:600] = True
    square = np.asarray(Image.fromarray(orig.astype(np.uint8) * 255)
                        .resize((512, 512), Image.NEAREST)) > 0
    a, b = mask_to_frame(orig, t), mask_to_frame(square, t)
    assert (a ^ b).sum() < 0.02 * a.sum()
    ys, xs = np.nonzero(a)
    assert abs(xs.min() - t.point_to_frame(200, 0)[0]) <= 1
    assert abs(ys.min() - t.point_to_frame(0, 400)[1]) <= 1
    assert not a[:, :t.pad_x].any()  # padding stays empty
    back = mask_to_original(a, t)
    assert back.shape == orig.shape and (back ^ orig).sum() < 0.02 * orig.sum()
    with pytest.raises(ValueError):
        frame_transform(10, 10, "crop")


def _jpg_tree(tmp_path, size=(300, 400)):
    root = tmp_path / "jpg"
    (root / "files").mkdir(parents=True)
    arr = np.full((size[1], size[0]), 200, np.uint8)
    Image.fromarray(arr).save(root / "files" / "a.jpg")
    return root


def test_prepare_letterbox_records_transform_and_pads(tmp_path):
    root = _jpg_tree(tmp_path)
    out = tmp_path / "png"
    summary = images.prepare_images({"dA": "files/a.jpg"}, root, out)
    assert summary.converted == 1
    img = np.asarray(Image.open(out / "dA.png"))
    t = read_frame_transform(out, "dA")
    assert t is not None and t.mode == "letterbox" and (t.orig_width, t.orig_height) == (300, 400)
    assert t.pad_x == 128 and t.resized_width == 768
    assert img[:, :t.pad_x - 1].max() == 0 and img[:, -(t.pad_x - 1):].max() == 0  # black bars
    assert img[512, 512] > 150  # image content in the middle
    index = json.loads(transforms_index(out).read_text())
    assert index == {"dA": t.to_json()}
    # Same mode: reused. Other mode: converted again (a stale frame is never kept).
    assert images.prepare_images({"dA": "files/a.jpg"}, root, out).skipped == 1
    again = images.prepare_images({"dA": "files/a.jpg"}, root, out, mode="stretch")
    assert again.converted == 1 and read_frame_transform(out, "dA").mode == "stretch"
    assert np.asarray(Image.open(out / "dA.png"))[:, :10].min() > 150


def test_provided_mask_follows_the_image_transform(tmp_path):
    """The MIMIC-ILS square mask is resized to the original size, then letterboxed."""
    t = frame_transform(300, 400, "letterbox")
    sq = np.zeros((512, 512), bool)
    sq[:, :256] = True  # left half of the original image
    (tmp_path / "s").mkdir()
    write_mask(tmp_path / "s" / "m.png", sq)
    item = {"seg_mask_path": "s/m.png"}
    m = candidates.provided_mask(item, tmp_path, t)
    cols = np.nonzero(m.any(axis=0))[0]
    assert cols.min() == t.pad_x and abs(cols.max() - (t.pad_x + t.resized_width // 2 - 1)) <= 1
    plain = candidates.provided_mask(item, tmp_path, None)  # no transform: plain resize
    assert np.nonzero(plain.any(axis=0))[0].min() == 0


def _entry(lesion, pair, dicom, study):
    return {"pair_id": pair, "target": lesion, "type": "global", "dicom_id": dicom,
            "study_id": study, "image_path": f"files/{dicom}.jpg"}


def test_negatives_disjoint_by_study_and_dicom():
    empty = {les: [] for les in LESIONS}
    pool = sampling.SourcePool({**empty, "edema": [_entry("edema", "p0", "d0", "s0")]},
                               dict(empty), dict(empty))
    pool.negative_info["effusion"] = [_entry("effusion", "n0", "d1", "s0"),   # positive study
                                      _entry("effusion", "n1", "d0", "s9"),   # positive dicom
                                      _entry("effusion", "n2", "d2", "s2")]
    sel = sampling.sample_pool(pool, seed=0, max_positive=5, negatives_per_lesion=3)
    assert [e["pair_id"] for e in sel.negative_info["effusion"]] == ["n2"]
    assert "effusion" in sel.shortfalls and "studies" in sel.shortfalls["effusion"]


def test_load_splits_and_split_filter(tmp_path):
    study = {"subject_id": "p1", "dicom_id": "d1", "image_path": "x.jpg",
             "instruction_answer_pairs": {"positive_pairs": [], "negative_pairs": []}}
    path = tmp_path / "ils.json"
    path.write_text(json.dumps({"train": {"s1": study}, "val": {"s2": {**study, "dicom_id": "d2"}},
                                "test": {"s1": study}}))
    assert list(sampling.load_splits(path)) == ["s1"]
    assert list(sampling.load_splits(path, ["train", "val"])) == ["s1", "s2"]
    with pytest.raises(SchemaError, match="more than one split"):
        sampling.load_splits(path, ["train", "test"])
    path.write_text(json.dumps({"train": {"s1": study}}))
    with pytest.raises(SchemaError, match="'val' missing"):
        sampling.load_splits(path, ["val"])
    empty = {les: [] for les in LESIONS}
    pool = sampling.SourcePool({**empty, "edema": [_entry("edema", "p0", "d0", "s0"),
                                                   _entry("edema", "p1", "d1", "s1")]},
                               dict(empty), dict(empty))
    kept, dropped = sampling.filter_splits(pool, {"d0": "train", "d1": "test"}, ["train"])
    assert [e["pair_id"] for e in kept.global_info["edema"]] == ["p0"]
    assert dropped == [{"key_id": "edema_p1", "dicom_id": "d1",
                        "reason": "split 'test' not in ['train']"}]
