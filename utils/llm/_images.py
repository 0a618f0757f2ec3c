"""Stage 03 provider helpers: benchmark image files -> base64 data URLs or PIL images.

The file bytes are sent as they are (no re-encoding), so the model sees exactly the pixels of the
released bundle; the MIME type comes from the file's magic bytes, not its name.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING

from utils.errors import ProviderError

if TYPE_CHECKING:
    from PIL import Image

_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
          (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"))


def image_mime_type(data: bytes, path: str | Path = "<bytes>") -> str:
    """MIME type of encoded image bytes (PNG, JPEG, GIF or WebP).

    Raises:
        ProviderError: If the bytes are none of these formats (names ``path``).
    """
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    raise ProviderError(f"{path}: not a PNG, JPEG, GIF or WebP image (first bytes {data[:8]!r})")


def read_image_bytes(path: str | Path) -> bytes:
    """The file's bytes.

    Raises:
        ProviderError: If the file cannot be read (names the path).
    """
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ProviderError(f"{path}: cannot read image ({exc})") from exc


def bounded_size(width: int, height: int, max_side: int | None,
                 max_pixels: int | None) -> tuple[int, int]:
    """The size an image is sent at under ``--max-image-side`` / ``--max-image-pixels``.

    Args:
        width: The image's width in pixels.
        height: The image's height in pixels.
        max_side: Longest side allowed in pixels, or None.
        max_pixels: Most pixels (width x height) allowed, or None.

    Returns:
        ``(width, height)`` unchanged when within both bounds, else scaled down (aspect ratio
        kept, each side rounded down, at least 1).
    """
    scale = 1.0
    if max_side and max(width, height) > max_side:
        scale = max_side / max(width, height)
    if max_pixels and width * height * scale * scale > max_pixels:
        scale = (max_pixels / (width * height)) ** 0.5
    if scale >= 1.0:
        return width, height
    return max(1, int(width * scale)), max(1, int(height * scale))


#: Pillow modes a PNG can store as they are (others are converted to RGB when downscaled).
_PNG_MODES = ("1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA")


def read_bounded(path: str | Path, max_side: int | None = None,
                 max_pixels: int | None = None) -> tuple[bytes, str]:
    """The image's bytes and MIME type, downscaled when over a bound.

    Within the bounds (or without any) the file's own bytes are returned, so the model sees
    the bundle's pixels exactly. Over a bound the image is resized (Pillow: Lanczos for
    grayscale and colour, nearest neighbour for palette and 1-bit images; the mode is kept,
    so grayscale stays grayscale; CMYK and other modes PNG cannot hold become RGB) and sent as
    PNG.

    Raises:
        ProviderError: If the file cannot be read or is not an image.
    """
    data = read_image_bytes(path)
    mime = image_mime_type(data, path)
    if not max_side and not max_pixels:
        return data, mime
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            size = bounded_size(img.width, img.height, max_side, max_pixels)
            if size == (img.width, img.height):
                return data, mime
            if img.mode not in _PNG_MODES:  # CMYK, YCbCr, ...: PNG cannot hold them
                img = img.convert("RGB")
            resized = img.resize(size, Image.Resampling.LANCZOS)
        out = io.BytesIO()
        resized.save(out, format="PNG")
    except (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise ProviderError(f"{path}: cannot downscale the image ({exc})") from exc
    return out.getvalue(), "image/png"


def image_data_url(path: str | Path, max_side: int | None = None,
                   max_pixels: int | None = None) -> str:
    """``data:<mime>;base64,<bytes>`` for an image file (OpenAI / vLLM ``image_url``).

    Args:
        path: The image file.
        max_side: Longest side sent in pixels (None: the file as it is).
        max_pixels: Most pixels sent (None: the file as it is).

    Raises:
        ProviderError: If the file is missing, unreadable or not an image format listed in
            :func:`image_mime_type`.
    """
    data, mime = read_bounded(path, max_side, max_pixels)
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def load_rgb(path: str | Path) -> Image.Image:
    """The image as a fully loaded RGB PIL image (grayscale and RGBA are converted).

    Raises:
        ProviderError: If the file is missing or not a readable image.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except (OSError, UnidentifiedImageError) as exc:
        raise ProviderError(f"{path}: cannot open image ({exc})") from exc
