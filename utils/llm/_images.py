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


def image_data_url(path: str | Path) -> str:
    """``data:<mime>;base64,<file bytes>`` for an image file (OpenAI / vLLM ``image_url``).

    Raises:
        ProviderError: If the file is missing, unreadable or not an image format listed in
            :func:`image_mime_type`.
    """
    data = read_image_bytes(path)
    return f"data:{image_mime_type(data, path)};base64,{base64.b64encode(data).decode('ascii')}"


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
