"""Stage 01.00 provided anatomy masks come into the frame by the CXR's rule (issue 29, D1).

A provided anatomy mask was mapped with the Stage 00 transform without the CXR's EXIF turn and
without a shape check, so a 300 x 700 mask of a 2000 x 2500 radiograph was silently stretched
(docs/images.md, "Masks and images": a shape mismatch is an error, never a silent resize).
Now it goes through ``chexpercept.frame.provided_mask_to_frame``, as MIMIC-ILS lesion masks do.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from chexpercept.anatomy.provided import prepare_provided_anatomy
from chexpercept.errors import InputError
from chexpercept.files import write_json_atomic
from chexpercept.frame import frame_transform, transform_sidecar
from chexpercept.images import read_mask, write_mask

NAMES = {"chex": ("right_lung", "left_lung"), "cxas": ("right lung", "left lung")}


def _provided(tmp_path, mask: np.ndarray):
    for folder, names in NAMES.items():
        for name in names:
            write_mask(tmp_path / folder / "d1" / f"{name}.png", mask)


def _run(tmp_path, frame="original"):
    return prepare_provided_anatomy(
        ["d1"], chexmask_src=tmp_path / "chex", cxas_src=tmp_path / "cxas",
        chexmask_out=tmp_path / "out" / "c", cxas_out=tmp_path / "out" / "x",
        zone_source="chex_vertical_thirds", cxr_dir=tmp_path / "cxr", frame=frame)


def _transform(tmp_path, t):
    write_json_atomic(transform_sidecar(tmp_path / "cxr", "d1"), t.to_json())


@pytest.mark.parametrize("frame", ["original", "work"])
def test_a_mask_of_another_shape_is_refused_naming_it(tmp_path, frame):
    _transform(tmp_path, frame_transform(2000, 2500, "letterbox"))
    _provided(tmp_path, np.ones((700, 300), bool))  # 300 x 700: neither square nor 4:5
    with pytest.raises(InputError) as caught:
        _run(tmp_path, frame)
    message = str(caught.value)
    assert f"provided mask {tmp_path / 'chex' / 'd1' / 'right_lung.png'} is 300x700 pixels" \
        in message
    if frame == "original":
        assert f"its CXR {tmp_path / 'cxr' / 'd1.png'} was prepared from a 2000x2500 image" \
            in message
    assert not (tmp_path / "out" / "c" / "d1" / "right_lung.png").exists()


def test_the_image_s_aspect_ratio_and_squares_still_map(tmp_path):
    t = frame_transform(2000, 2500, "letterbox")
    _transform(tmp_path, t)
    _provided(tmp_path, np.ones((500, 400), bool))  # the original at a fifth of its size
    _run(tmp_path)
    m = read_mask(tmp_path / "out" / "c" / "d1" / "left_lung.png")
    assert m[:, t.pad_x:t.pad_x + t.resized_width].all() and not m[:, :t.pad_x].any()


def test_an_untagged_mask_in_the_stored_grid_gets_the_cxr_s_exif_turn(tmp_path):
    # a source stored 800 x 1000 (w x h) with EXIF orientation 6: shown 1000 x 800 upright
    t = replace(frame_transform(1000, 800, "stretch"), orientation=6)
    _transform(tmp_path, t)
    stored = np.zeros((1000, 800), bool)
    stored[:200, :200] = True  # the stored grid's top-left corner ...
    _provided(tmp_path, stored)
    _run(tmp_path)
    m = read_mask(tmp_path / "out" / "c" / "d1" / "right_lung.png")
    ys, xs = np.nonzero(m)  # ... is the upright image's top-right corner (90 degrees clockwise)
    assert ys.min() == 0 and xs.max() == 1023 and xs.min() > 512 and ys.max() < 512
