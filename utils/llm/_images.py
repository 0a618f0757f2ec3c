"""Stage 03 provider helpers: benchmark image files -> base64 data URLs or PIL images.

Every provider gets the pixels of the one loader, :func:`utils.imaging.load_image`
(docs/images.md, "Image loading"). A file that needs no conversion is sent as its own bytes (no
re-encoding), so the model sees exactly the pixels of the bundle; the MIME type comes from the
file's magic bytes, not its name. Other files are sent as the loader's PNG.
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


def read_bounded(path: str | Path, max_side: int | None = None,
                 max_pixels: int | None = None) -> tuple[bytes, str]:
    """The image's bytes and MIME type: the file itself, or the loader's pixels as PNG.

    A file that needs no conversion (:func:`utils.imaging.needs_conversion`: 8-bit L or RGB,
    upright) and is within the bounds (or without any) is sent as its own bytes, so the model
    sees the bundle's pixels exactly and the request stays byte-identical. Any other file is
    decoded by :func:`utils.imaging.load_image` (16-bit rescaled, palette, alpha, CMYK and EXIF
    orientation resolved; docs/images.md, "Image loading"), resized with Lanczos when over a
    bound (aspect ratio kept; the bound applies to the upright size), and sent as PNG.

    Raises:
        ProviderError: If the file cannot be read or is not an image (names the path).
    """
    from PIL import Image

    from utils.errors import InputError
    from utils.imaging import encode_png, inspect_image, load_image

    data = read_image_bytes(path)
    mime = image_mime_type(data, path)
    try:
        header = inspect_image(data, name=path)
        size = bounded_size(*header.size, max_side, max_pixels)
        if header.reason is None and size == header.size:
            return data, mime
        image = load_image(data, name=path)
        if image.size != size:
            image = image.resize(size, Image.Resampling.LANCZOS)
        return encode_png(image), "image/png"
    except InputError as exc:
        raise ProviderError(str(exc)) from exc  # "cannot read image <path>: <why>"


def image_data_url(path: str | Path, max_side: int | None = None,
                   max_pixels: int | None = None) -> str:
    """``data:<mime>;base64,<bytes>`` for an image file (OpenAI / vLLM ``image_url``).

    The bytes are :func:`read_bounded`'s: the file itself, or its converted pixels as PNG.

    Args:
        path: The image file.
        max_side: Longest side sent in pixels (None: no bound).
        max_pixels: Most pixels sent (None: no bound).

    Raises:
        ProviderError: If the file is missing, unreadable or not an image format listed in
            :func:`image_mime_type`.
    """
    data, mime = read_bounded(path, max_side, max_pixels)
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def image_data_url_json(path: str | Path, max_side: int | None = None,
                        max_pixels: int | None = None) -> bytes:
    """:func:`image_data_url` as a JSON string literal: UTF-8 bytes, quotes included.

    A base64 data URL is ASCII without quotes, backslashes or control characters, so quoting
    it is its JSON encoding; built from the base64 bytes in one copy (``json.dumps`` of the
    URL scanned it again, ~4 ms per 800 KB image; benchmarks/bench_vllm_server.py).

    Raises:
        ProviderError: As :func:`image_data_url`.
    """
    data, mime = read_bounded(path, max_side, max_pixels)
    return b"".join((b'"data:', mime.encode("ascii"), b";base64,", base64.b64encode(data),
                     b'"'))


def load_rgb(path: str | Path) -> Image.Image:
    """The image as a fully loaded RGB PIL image (transformers provider).

    Decoded by :func:`utils.imaging.load_image` (docs/images.md, "Image loading"), so it has
    the pixels the API providers send; grayscale is then repeated into three channels.

    Raises:
        ProviderError: If the file is missing or not a readable image (names the path).
    """
    from utils.errors import InputError
    from utils.imaging import load_image

    try:
        image = load_image(path)
    except InputError as exc:
        raise ProviderError(str(exc)) from exc  # names the path
    return image if image.mode == "RGB" else image.convert("RGB")
