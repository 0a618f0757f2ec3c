"""One image loader for every path (docs/images.md, "Image loading" and "Masks and images").

Stage 00 (``read_gray`` / ``read_cxr``), the transformers provider (``load_rgb``) and the API /
vLLM providers (``read_bounded`` / ``image_data_url``) must give the same 8-bit pixels for the
same file; files that need no conversion are sent as their own bytes.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from chexpercept import images as cximages
from chexpercept.curation.images import read_gray
from chexpercept.errors import InputError
from chexpercept.evaluation.budget import _image_size
from utils.errors import ProviderError
from utils.imaging import encode_png, image_size, inspect_image, load_image, needs_conversion
from utils.llm import _images


def _decode(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return im.copy()


def _sent(path, *bounds) -> tuple[np.ndarray, str, str]:
    """(pixels, mode, mime) of what an API model receives for ``path``."""
    url = _images.image_data_url(path, *bounds)
    head, payload = url.split(",", 1)
    img = _decode(base64.b64decode(payload))
    return np.asarray(img), img.mode, head.removeprefix("data:").removesuffix(";base64")


def _gradient16(lo: int, hi: int, shape=(48, 64)) -> np.ndarray:
    return np.linspace(lo, hi, shape[0] * shape[1]).reshape(shape).astype(np.uint16)


def _expected(arr: np.ndarray) -> np.ndarray:
    a = arr.astype(np.float64)
    return np.round((a - a.min()) / (a.max() - a.min()) * 255.0).astype(np.uint8)


# -- more than 8 bits -----------------------------------------------------------------------------
def test_16bit_gradient_reaches_every_path_with_the_stage00_pixels(tmp_path):
    arr = _gradient16(1000, 60000)
    path = tmp_path / "cxr16.png"
    Image.fromarray(arr).save(path)
    assert needs_conversion(path) == "16-bit grayscale"
    stage00 = read_gray(path)  # what Stage 00 prepares
    assert np.array_equal(stage00, _expected(arr)) and stage00.min() == 0 and stage00.max() == 255
    rgb = _images.load_rgb(path)  # what a transformers model gets
    assert rgb.mode == "RGB"
    for channel in range(3):
        assert np.array_equal(np.asarray(rgb)[..., channel], stage00)
    pixels, mode, mime = _sent(path)  # what an API / vLLM model gets
    assert (mode, mime) == ("L", "image/png") and np.array_equal(pixels, stage00)
    assert np.array_equal(cximages.read_cxr(path, size=None), stage00)
    assert len(np.unique(pixels)) > 200  # a gradient, not all white


def test_12bit_data_in_16_bits_is_stretched_by_its_range(tmp_path):
    arr = _gradient16(0, 4095)
    path = tmp_path / "cxr12.png"
    Image.fromarray(arr).save(path)
    want = np.round(arr / 4095.0 * 255.0).astype(np.uint8)
    assert np.array_equal(np.asarray(load_image(path)), want)
    assert np.array_equal(np.asarray(_images.load_rgb(path))[..., 0], want)
    assert np.array_equal(_sent(path)[0], want)
    assert np.array_equal(cximages.read_cxr(path, size=None), want)


def test_constant_16bit_image_is_black_without_dividing_by_zero(tmp_path):
    path = tmp_path / "flat.png"
    Image.fromarray(np.full((16, 24), 3000, np.uint16)).save(path)
    with np.errstate(all="raise"):
        assert not np.asarray(load_image(path)).any()
        assert not np.asarray(_images.load_rgb(path)).any()
        assert not _sent(path)[0].any()
        assert not cximages.read_cxr(path, size=None).any()


def test_float_image_rescaled_and_non_finite_values_are_black(tmp_path):
    arr = np.linspace(-1.0, 3.0, 12 * 10, dtype=np.float32).reshape(12, 10)
    arr[0, 0] = np.nan
    path = tmp_path / "f.tiff"
    Image.fromarray(arr, mode="F").save(path)
    assert needs_conversion(path) == "floating-point grayscale"
    out = np.asarray(load_image(path))
    finite = arr.astype(np.float64)
    want = np.round((finite - finite[0, 1]) / (3.0 - finite[0, 1]) * 255.0)
    assert out[0, 0] == 0 and np.array_equal(out.ravel()[1:], want.ravel()[1:].astype(np.uint8))


# -- palette, alpha, colour modes -----------------------------------------------------------------
def test_palette_images_become_rgb_or_l_when_gray(tmp_path):
    idx = np.arange(32, dtype=np.uint8).reshape(4, 8)
    gray = Image.fromarray(idx, mode="P")
    gray.putpalette([c for v in range(256) for c in (255 - v,) * 3])
    gray.save(tmp_path / "gray.png")
    assert needs_conversion(tmp_path / "gray.png") == "palette"
    pixels, mode, mime = _sent(tmp_path / "gray.png")
    assert (mode, mime) == ("L", "image/png") and np.array_equal(pixels, 255 - idx)
    assert np.array_equal(np.asarray(_images.load_rgb(tmp_path / "gray.png"))[..., 1], 255 - idx)
    assert np.array_equal(cximages.read_cxr(tmp_path / "gray.png", size=None), 255 - idx)

    colour = Image.fromarray(idx, mode="P")
    colour.putpalette([c for v in range(256) for c in (v, 2 * v % 256, 100)])
    colour.save(tmp_path / "colour.png", transparency=3)  # index 3 is fully transparent
    assert needs_conversion(tmp_path / "colour.png") == "palette, alpha channel"
    pixels, mode, _ = _sent(tmp_path / "colour.png")
    assert mode == "RGB" and pixels[0, 1].tolist() == [1, 2, 100]
    assert pixels[0, 3].tolist() == [0, 0, 0]  # transparent -> black
    assert np.array_equal(np.asarray(_images.load_rgb(tmp_path / "colour.png")), pixels)


@pytest.mark.parametrize("mode", ["LA", "RGBA"])
def test_alpha_is_flattened_onto_black(tmp_path, mode):
    color = np.full((6, 6, 3 if mode == "RGBA" else 1), 200, np.uint8)
    color[..., 0] = 201
    alpha = np.tile(np.array([0, 51, 128, 200, 254, 255], np.uint8), (6, 1))[..., None]
    Image.fromarray(np.concatenate([color, alpha], axis=2), mode).save(tmp_path / "a.png")
    assert needs_conversion(tmp_path / "a.png") == "alpha channel"
    want = np.round(color.astype(np.float64) * alpha / 255.0).astype(np.uint8)
    want = want[..., 0] if mode == "LA" else want
    pixels, sent_mode, _ = _sent(tmp_path / "a.png")
    assert sent_mode == ("L" if mode == "LA" else "RGB") and np.array_equal(pixels, want)
    rgb = np.asarray(_images.load_rgb(tmp_path / "a.png"))
    assert np.array_equal(rgb if mode == "RGBA" else rgb[..., 0], want)
    luma = np.asarray(Image.fromarray(want).convert("L"))
    assert np.array_equal(cximages.read_cxr(tmp_path / "a.png", size=None), luma)


def test_cmyk_jpeg_is_sent_as_rgb_png(tmp_path):
    path = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (40, 20), (0, 50, 100, 30)).save(path)
    assert needs_conversion(path) == "CMYK"
    with Image.open(path) as im:
        want = np.asarray(im.convert("RGB"))
    pixels, mode, mime = _sent(path)
    assert (mode, mime) == ("RGB", "image/png") and np.array_equal(pixels, want)
    assert np.array_equal(np.asarray(_images.load_rgb(path)), want)


# -- orientation --------------------------------------------------------------------------------
def _rotated_jpeg(path, orientation=6):
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:10, :10] = 250  # bright block in the stored top-left corner
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(arr).save(path, quality=95, exif=exif)
    with Image.open(path) as im:
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


def test_exif_rotated_jpeg_is_upright_on_every_path(tmp_path):
    path = tmp_path / "rot.jpg"
    upright = _rotated_jpeg(path)
    assert upright.shape == (40, 20, 3)
    assert needs_conversion(path) == "EXIF orientation 6"
    assert image_size(path) == (20, 40) == _image_size(path, {})  # the token budget's size
    assert np.array_equal(np.asarray(_images.load_rgb(path)), upright)
    pixels, mode, mime = _sent(path)
    assert (mode, mime) == ("RGB", "image/png") and np.array_equal(pixels, upright)
    gray = np.asarray(Image.fromarray(upright).convert("L"))
    assert np.array_equal(cximages.read_cxr(path, size=None), gray)
    assert _sent(path, 20)[0].shape == (20, 10, 3)  # bounds apply to the upright size


def test_a_tagged_mask_stays_aligned_with_its_tagged_cxr(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 8
    img = np.zeros((20, 40), np.uint8)
    img[:5, 30:] = 255
    Image.fromarray(img).save(tmp_path / "cxr.png", exif=exif)
    Image.fromarray(img).save(tmp_path / "mask.png", exif=exif)
    cxr = cximages.read_cxr(tmp_path / "cxr.png", size=None)
    mask = cximages.read_mask(tmp_path / "mask.png", size=None)
    assert cxr.shape == mask.shape == (40, 20)
    assert np.array_equal(cxr > 0, mask)


# -- files sent as they are ---------------------------------------------------------------------
@pytest.mark.parametrize("name,mode", [("l.png", "L"), ("rgb.png", "RGB"), ("rgb.jpg", "RGB")])
def test_8bit_files_are_sent_as_their_own_bytes(tmp_path, name, mode):
    path = tmp_path / name
    rng = np.random.default_rng(0)
    shape = (30, 50) if mode == "L" else (30, 50, 3)
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(path)
    assert needs_conversion(path) is None
    header = inspect_image(path)
    assert (header.mode, header.size, header.orientation) == (mode, (50, 30), 1)
    raw = path.read_bytes()
    assert _images.read_bounded(path)[0] == raw
    assert _images.read_bounded(path, 1024, 10**6)[0] == raw
    url = _images.image_data_url(path)
    assert base64.b64decode(url.split(",", 1)[1]) == raw
    with Image.open(path) as im:
        assert np.array_equal(np.asarray(load_image(path)), np.asarray(im))


def test_converted_png_is_deterministic_and_carries_no_metadata(tmp_path):
    _rotated_jpeg(tmp_path / "rot.jpg")
    first = encode_png(load_image(tmp_path / "rot.jpg"))
    assert first == encode_png(load_image(tmp_path / "rot.jpg"))
    with Image.open(io.BytesIO(first)) as im:
        assert "exif" not in im.info and im.getexif().get(0x0112) is None


def test_loader_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.png"
    with pytest.raises(ProviderError, match="missing.png"):
        _images.load_rgb(missing)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    for call in (_images.load_rgb, _images.image_data_url):
        with pytest.raises(ProviderError, match="broken.png"):
            call(broken)
    with pytest.raises(InputError, match="cannot read image .*broken.png"):
        cximages.read_cxr(broken)
    with pytest.raises(InputError, match="image not found"):
        load_image(missing)


# -- masks and images ---------------------------------------------------------------------------
def test_a_mask_of_another_size_is_an_error_unless_a_resize_is_asked_for(tmp_path):
    mask = np.zeros((512, 512), bool)
    mask[100:200, 100:200] = True
    cximages.write_mask(tmp_path / "m.png", mask)
    with pytest.raises(InputError, match=r"m\.png is 512x512 pixels, expected 1024x1024"):
        cximages.read_mask(tmp_path / "m.png")
    stretched = cximages.read_mask(tmp_path / "m.png", resize=True)
    assert stretched.shape == (1024, 1024) and stretched[300, 300] and not stretched[500, 500]
    with pytest.raises(InputError) as err:
        cximages.check_mask_shape(mask, tmp_path / "m.png", (1024, 1024), tmp_path / "cxr.png")
    assert "m.png" in str(err.value) and "cxr.png" in str(err.value)
    cximages.check_mask_shape(mask, tmp_path / "m.png", (512, 512), tmp_path / "cxr.png")
