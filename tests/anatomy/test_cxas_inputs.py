"""Stage 01.00 CXAS backend: its batch input is checked where it enters, and the resize to the
model's grid and back keeps mask edges in place (docs/deformation.md, "Anatomy masks")."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
xrv = pytest.importorskip("torchxrayvision")

from chexpercept.anatomy._cxas import (  # noqa: E402
    CXASSegmenter,
    check_cxr_batch,
    to_model_grid,
    to_working_frame,
)
from chexpercept.errors import InputError  # noqa: E402

N = 1024


class BrightIsForeground(torch.nn.Module):
    """Stands in for the CXAS network with the same interface and input handling.

    Like ``UNetResNet50.forward`` it takes [B, 1, H, W] in [-1024, 1024] and resizes a
    non-512 input to 512 itself (``xrv.utils.fix_resolution``); its logits are the input's
    brightness (class 0) and darkness (class 1) at 512 x 512, so a perfect model's masks are
    the bright and the dark pixels.
    """

    targets = ["right lung", "heart"]
    input_resolution = 512

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[int, ...]] = []

    def forward(self, x):
        self.calls.append(tuple(x.shape))
        x = xrv.utils.fix_resolution(x, self.input_resolution, self)
        return torch.cat([x / 128.0, -x / 128.0], dim=1)


def _segmenter():
    return CXASSegmenter(BrightIsForeground(), ["right lung", "heart"])


def _edges(mask: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(mask)
    return int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1


@pytest.mark.parametrize(("image", "found"), [
    (np.linspace(0, 1, N * N, dtype=np.float32).reshape(N, N),
     "shape (1024, 1024), dtype float32, values 0.0..1.0"),  # a [0, 1] float image
    (np.full((N, N), 4095, np.uint16),  # raw 12-bit data
     "shape (1024, 1024), dtype uint16, values 4095..4095"),
    (np.zeros((N, 1000), np.uint8), "shape (1024, 1000), dtype uint8"),  # non-square
    (np.zeros((1020, 1020), np.uint8), "shape (1020, 1020), dtype uint8"),  # not the frame
    (np.zeros((N, N, 3), np.uint8), "shape (1024, 1024, 3), dtype uint8"),  # colour
], ids=["float01", "uint16", "non-square", "1020-square", "rgb"])
def test_cxas_input_is_refused_naming_what_it_got(image, found):
    """Before: a [0, 1] float gave an empty mask, 16-bit a grown one, 1020 px moved edges."""
    seg = _segmenter()
    good = np.zeros((N, N), np.uint8)
    with pytest.raises(InputError) as info:
        seg.segment_batch([good, image])
    message = str(info.value)
    assert "anatomy.backend 'cxas' expects (1024, 1024) uint8" in message
    assert f"image 1: {found}" in message and "image 0" not in message
    assert seg.model.calls == []  # nothing reached the model


def test_cxas_accepts_the_working_frame_and_an_empty_batch():
    seg = _segmenter()
    assert seg.segment_batch([]) == [] and seg.model.calls == []
    scaled = check_cxr_batch([np.tile(np.array([0, 255], np.uint8), (N, N // 2))])
    assert scaled.shape == (1, 1, N, N) and scaled.dtype == np.float32
    assert (scaled.min(), scaled.max()) == (-1024.0, 1024.0)  # xrv.utils.normalize(img, 255)


@pytest.mark.parametrize("edge", [500, 501, 502, 503])
def test_mask_round_trip_through_the_model_grid_keeps_its_edges(edge):
    """Working frame -> 512 x 512 -> working frame, thresholded at 0.5: edges stay put."""
    mask = np.zeros((N, N), np.float32)
    mask[edge - 201:edge, 300:edge + 2] = 1.0
    yy, xx = np.mgrid[:N, :N]
    disc = ((yy - 700.3) ** 2 + (xx - 650.8) ** 2 < 150.0 ** 2).astype(np.float32)
    x = torch.from_numpy(np.stack([mask, disc]))[:, None]
    small = to_model_grid(x)
    assert tuple(small.shape) == (2, 1, 512, 512)
    back = (to_working_frame(small - 0.5) > 0).numpy()[:, 0]
    want = _edges(mask > 0)
    assert all(abs(a - b) <= 1 for a, b in zip(_edges(back[0]), want, strict=True))
    assert (back[1] ^ (disc > 0)).sum() <= 0.01 * disc.sum()


def test_cxas_segmenter_puts_a_perfect_models_edges_where_the_image_has_them():
    image = np.full((N, N), 10, np.uint8)
    image[301:703, 200:901] = 240
    masks = _segmenter().segment(image)
    assert masks["right lung"].shape == (N, N) and masks["right lung"].dtype == bool
    assert all(abs(a - b) <= 1 for a, b in
               zip(_edges(masks["right lung"]), (301, 703, 200, 901), strict=True))
    assert (masks["right lung"] ^ (image > 128)).sum() <= 8  # at most the corners differ
    assert not (masks["right lung"] & masks["heart"]).any()
