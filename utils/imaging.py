"""Image decoding shared by every stage: an image file -> one fully loaded 8-bit L or RGB image.

Every path that shows an image to a model, draws on it or checks it decodes through
:func:`load_image`, so a file gives the same 8-bit pixels everywhere: the CXR Stage 00 prepares
is the CXR a model sees (docs/images.md, "Image loading"). Nothing here is about chest X-rays;
``chexpercept.images`` and the providers in ``utils.llm`` build on it.

The rules, applied in this order:

1. Orientation: an EXIF orientation tag (2-8) is applied, so the image is upright as viewers
   show it. Only metadata read before the pixel data counts (JPEG/WebP EXIF, PNG ``eXIf`` or
   XMP placed before ``IDAT``, TIFF tags), so a header read gives the same answer as a full
   decode.
2. More than 8 bits of gray (``I;16``, ``I;16B``, ``I``, ``F``; 12-bit data stored in 16) is
   rescaled by the data's own range: ``round((v - min) / (max - min) * 255)``. A constant image
   becomes all 0; non-finite float values become 0.
3. Palette images become RGB, or L when every colour they use is gray.
4. Alpha (``LA``, ``RGBA``, ``PA``, or a ``tRNS`` transparent colour) is flattened onto black:
   ``round(c * a / 255)``.
5. CMYK, YCbCr and other colour modes become RGB (Pillow's conversion, no colour management);
   1-bit images become L (0/255).
"""

from __future__ import annotations

import contextlib
import io
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from utils.errors import InputError

#: An image file on disk, or the encoded bytes of one.
ImageSource = str | Path | bytes

#: Modes :func:`load_image` returns.
OUTPUT_MODES = ("L", "RGB")
#: Pillow's 16-bit grayscale modes.
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
#: Grayscale modes with more than 8 bits per pixel (rescaled by their range, rule 2).
HIGH_BIT_MODES = (*SIXTEEN_BIT_MODES, "I", "F")
#: Modes with an alpha channel (flattened onto black, rule 4).
ALPHA_MODES = ("LA", "La", "PA", "RGBA", "RGBa")
#: Modes whose ``tRNS`` transparent colour is honoured (flattened like alpha).
_KEYED_MODES = ("1", "L", "RGB", "P")
#: Modes whose conversion is named after the mode in :func:`needs_conversion`.
_NAMED_MODES = ("CMYK", "YCbCr")

_ORIENTATION_TAG = 0x0112
#: EXIF orientation -> the transpose that makes the image upright (as ``ImageOps.exif_transpose``).
_UPRIGHT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_XMP_ORIENTATION = re.compile(rb'tiff:Orientation(?:="|>)([0-9])')
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: Pillow's decode errors (a truncated or corrupt file, an unsupported mode conversion).
_DECODE_ERRORS = (OSError, ValueError, SyntaxError, UnidentifiedImageError,
                  Image.DecompressionBombError)


@dataclass(frozen=True)
class ImageHeader:
    """What a header read tells about an image file (no pixel data decoded).

    Attributes:
        format: Pillow's format name (``PNG``, ``JPEG``, ...), or None.
        mode: The file's Pillow mode (``L``, ``I;16``, ``P``, ...).
        size: ``(width, height)`` in pixels as :func:`load_image` returns it (orientation
            applied, so orientations 5-8 swap the stored sides).
        orientation: EXIF orientation 1-8 (1: none or upright).
        reason: Why :func:`load_image` changes the file's pixels (see :func:`needs_conversion`),
            or None when the file is already 8-bit L/RGB and upright.
    """

    format: str | None
    mode: str
    size: tuple[int, int]
    orientation: int
    reason: str | None


def _label(source: ImageSource, name: str | Path | None) -> str:
    if name is not None:
        return str(name)
    return "<image bytes>" if isinstance(source, bytes) else str(source)


@contextlib.contextmanager
def _opened(source: ImageSource, name: str | Path | None) -> Iterator[Image.Image]:
    """Open ``source`` with Pillow; every decode error inside the block becomes InputError."""
    label = _label(source, name)
    if not isinstance(source, bytes) and not Path(source).is_file():
        raise InputError(f"image not found: {label}")
    try:
        with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as im:
            yield im
    except _DECODE_ERRORS as exc:
        raise InputError(f"cannot read image {label}: {exc}") from exc


def orientation(image: Image.Image) -> int:
    """The EXIF orientation (1-8) of an opened image; 1 when absent, invalid or unreadable.

    Call it before ``image.load()``: for PNG only chunks before the pixel data count (Pillow
    adds a trailing ``eXIf`` on load; it is ignored here, so header reads and decodes agree).
    """
    value = None
    raw = image.info.get("exif")
    try:
        if raw:
            exif = Image.Exif()
            exif.load(raw)
            value = exif.get(_ORIENTATION_TAG)
        elif hasattr(image, "tag_v2"):  # TIFF keeps its orientation among its own tags
            value = image.tag_v2.get(_ORIENTATION_TAG)
    except (OSError, ValueError, SyntaxError, struct.error):
        value = None
    if value is None:
        xmp = image.info.get("XML:com.adobe.xmp") or image.info.get("xmp")
        if xmp:
            match = _XMP_ORIENTATION.search(xmp.encode() if isinstance(xmp, str) else xmp)
            value = int(match[1]) if match else None
    return value if isinstance(value, int) and value in _UPRIGHT else 1


def upright(image: Image.Image, orientation: int) -> Image.Image:
    """``image`` transposed so that a file tagged with ``orientation`` is shown upright.

    Args:
        image: A loaded image (any mode).
        orientation: EXIF orientation 1-8 (from :func:`orientation`); 1 returns ``image``.

    Returns:
        The transposed image (``image`` itself for orientation 1).
    """
    method = _UPRIGHT.get(orientation)
    return image if method is None else image.transpose(method)


def _png_bit_depth(head: bytes) -> tuple[int, int] | None:
    """(bit depth, colour type) from a PNG's IHDR, or None if ``head`` is not a PNG."""
    if len(head) < 26 or not head.startswith(_PNG_SIGNATURE) or head[12:16] != b"IHDR":
        return None
    return head[24], head[25]


def _reasons(im: Image.Image, head: bytes, turn: int) -> list[str]:
    """Why :func:`load_image` changes an opened file (empty: it is 8-bit L/RGB and upright)."""
    mode, reasons = im.mode, []
    png = _png_bit_depth(head)
    if mode in SIXTEEN_BIT_MODES or (mode == "I" and im.format == "PNG"):
        reasons.append("16-bit grayscale")
    elif mode == "I":
        reasons.append("32-bit integer grayscale")
    elif mode == "F":
        reasons.append("floating-point grayscale")
    elif png is not None and png[0] == 16:  # Pillow keeps the high byte of each sample
        reasons.append("16-bit grayscale" if png[1] == 4 else "16-bit colour")
    elif mode == "1":
        reasons.append("1-bit")
    if mode in ("P", "PA"):
        reasons.append("palette")
    if mode in ALPHA_MODES or (mode in _KEYED_MODES and "transparency" in im.info):
        reasons.append("alpha channel")
    if mode in _NAMED_MODES:
        reasons.append(mode)
    elif mode not in HIGH_BIT_MODES + ALPHA_MODES + _KEYED_MODES:
        reasons.append(f"{mode} colour mode")
    if turn != 1:
        reasons.append(f"EXIF orientation {turn}")
    return reasons


def inspect_image(source: ImageSource, *, name: str | Path | None = None) -> ImageHeader:
    """Read an image file's header (cheap: no pixel data is decoded).

    Args:
        source: The file, or its encoded bytes.
        name: What error messages call the image (default: the path, or ``<image bytes>``).

    Returns:
        Its :class:`ImageHeader`.

    Raises:
        InputError: If the file is missing or is not an image Pillow can open (names it).
    """
    with _opened(source, name) as im:
        if isinstance(source, bytes):
            head = source[:32]
        else:
            with open(source, "rb") as fh:
                head = fh.read(32)
        turn = orientation(im)
        reasons = _reasons(im, head, turn)
        width, height = im.size
        kind, mode = im.format, im.mode
    size = (height, width) if turn in (5, 6, 7, 8) else (width, height)
    return ImageHeader(kind, mode, size, turn, ", ".join(reasons) or None)


def needs_conversion(source: ImageSource) -> str | None:
    """Why :func:`load_image` would change a file's pixels, or None when it would not.

    Args:
        source: The file, or its encoded bytes.

    Returns:
        Comma-separated reasons in rule order, e.g. ``"16-bit grayscale"``, ``"palette"``,
        ``"palette, alpha channel"``, ``"alpha channel"``, ``"CMYK"``, ``"1-bit"``,
        ``"EXIF orientation 6"``; None when the file is 8-bit L or RGB without an orientation
        to apply (such a file is sent to API models as its own bytes).

    Raises:
        InputError: If the file is missing or is not an image.
    """
    return inspect_image(source).reason


def image_size(source: ImageSource) -> tuple[int, int]:
    """``(width, height)`` in pixels of the image as :func:`load_image` returns it (header read).

    Raises:
        InputError: If the file is missing or is not an image.
    """
    return inspect_image(source).size


def _rescale(im: Image.Image) -> Image.Image:
    """Rule 2: >8-bit gray -> L by the data's own min..max (constant: 0; non-finite: 0)."""
    arr = np.asarray(im, dtype=np.float64)
    finite = np.isfinite(arr)
    if finite.all():
        lo, hi = float(arr.min()), float(arr.max())
    elif finite.any():
        lo, hi = float(arr[finite].min()), float(arr[finite].max())
    else:
        lo = hi = 0.0
    if hi <= lo:
        return Image.fromarray(np.zeros(arr.shape, np.uint8))
    scaled = (arr - lo) / (hi - lo) * 255.0
    if not finite.all():
        scaled[~finite] = 0.0
    return Image.fromarray(np.round(scaled).astype(np.uint8))


def _flatten(im: Image.Image) -> Image.Image:
    """Rule 4: an LA / RGBA image onto black, ``round(c * a / 255)`` -> L / RGB."""
    arr = np.asarray(im, dtype=np.uint32)
    out = (arr[..., :-1] * arr[..., -1:] + 127) // 255  # exact rounding: c * a / 255 never ties
    out = out.astype(np.uint8)
    return Image.fromarray(out[..., 0] if out.shape[-1] == 1 else out)


def _gray_if_gray(im: Image.Image) -> Image.Image:
    """Rule 3: an RGB image whose three channels are equal -> L (same values)."""
    arr = np.asarray(im)
    if (arr[..., 0] == arr[..., 1]).all() and (arr[..., 1] == arr[..., 2]).all():
        return Image.fromarray(np.ascontiguousarray(arr[..., 0]))
    return im


def _to_8bit(im: Image.Image) -> Image.Image:
    """Rules 2-5 on a loaded image: a new 8-bit L or RGB image (not tied to the file)."""
    mode = im.mode
    keyed = mode in _KEYED_MODES and "transparency" in im.info
    if mode in HIGH_BIT_MODES:
        return _rescale(im)
    if mode in OUTPUT_MODES and not keyed:
        return im.copy()
    if mode in ("P", "PA"):
        rgb = _flatten(im.convert("RGBA")) if mode == "PA" or keyed else im.convert("RGB")
        return _gray_if_gray(rgb)
    if mode in ("1", "L", "LA", "La"):
        return _flatten(im.convert("LA")) if mode != "1" or keyed else im.convert("L")
    if mode in ("RGB", "RGBA", "RGBa"):
        return _flatten(im.convert("RGBA"))
    return im.convert("RGB")  # CMYK, YCbCr, RGBX, HSV, ...: ValueError if Pillow cannot


def load_image(source: ImageSource, *, name: str | Path | None = None) -> Image.Image:
    """Decode an image file into a fully loaded 8-bit ``L`` or ``RGB`` image.

    The rules of the module docstring apply, in order (docs/images.md, "Image loading").
    Animated files give their first frame. The result carries no metadata (``info`` is empty).

    Args:
        source: The file, or its encoded bytes.
        name: What error messages call the image (default: the path, or ``<image bytes>``).

    Returns:
        A PIL image of mode ``L`` or ``RGB``, independent of the file.

    Raises:
        InputError: If the file is missing, cannot be decoded, or has a mode Pillow cannot
            convert to RGB (names the file).
    """
    with _opened(source, name) as im:
        turn = orientation(im)  # before load: a trailing PNG eXIf is ignored (see orientation)
        im.load()
        out = _to_8bit(im)
    out = upright(out, turn)
    out.info = {}
    return out


def encode_png(image: Image.Image) -> bytes:
    """PNG bytes of an image (deterministic: zlib level 6, no metadata written).

    Args:
        image: Usually the result of :func:`load_image`; its ``info`` (ICC profile,
            transparency, EXIF) is not written.

    Returns:
        The encoded PNG.
    """
    if image.info:
        image = image.copy()
        image.info = {}
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=False)
    return buf.getvalue()


__all__ = [
    "ALPHA_MODES",
    "HIGH_BIT_MODES",
    "OUTPUT_MODES",
    "SIXTEEN_BIT_MODES",
    "ImageHeader",
    "ImageSource",
    "encode_png",
    "image_size",
    "inspect_image",
    "load_image",
    "needs_conversion",
    "orientation",
    "upright",
]
