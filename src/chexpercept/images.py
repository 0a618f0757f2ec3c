"""Core: image and mask files in the 1024x1024 working frame (PNG writing, CXR and mask reading).

Decoding goes through :func:`utils.imaging.load_image`, the one loader of every path that shows
an image to a model, draws on it or checks it (docs/images.md, "Image loading"); a mask whose
size differs from its image is an error, never resized away (docs/images.md, "Masks and
images").
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from chexpercept.errors import InputError
from chexpercept.files import write_bytes_atomic
from utils import imaging

#: Side of the square working frame in pixels (docs/curation.md, "Working frame").
WORK_SIZE = 1024

# --------------------------------------------------------------------------------------
# Images and masks
# --------------------------------------------------------------------------------------


def png_bytes(array: np.ndarray, *, compress_level: int | None = None) -> bytes:
    """Encode a uint8 (H, W) or (H, W, 3) array as PNG bytes (deterministic, no metadata).

    ``compress_level`` (zlib 0-9) trades size for speed; None keeps PIL's default (6).
    """
    buf = io.BytesIO()
    extra = {} if compress_level is None else {"compress_level": compress_level}
    Image.fromarray(np.ascontiguousarray(array)).save(buf, format="PNG", optimize=False, **extra)
    return buf.getvalue()


def write_png_atomic(path: str | Path, array: np.ndarray, *,
                     compress_level: int | None = None) -> None:
    """Write a uint8 (H, W) or (H, W, 3) array as a PNG atomically (see :func:`png_bytes`)."""
    if array.dtype != np.uint8:
        raise TypeError(f"write_png_atomic({path}): expected uint8, got {array.dtype}")
    write_bytes_atomic(path, png_bytes(array, compress_level=compress_level))


def write_mask(path: str | Path, mask: np.ndarray) -> None:
    """Write a boolean mask as an 8-bit L PNG with values 0/255 (docs/deformation.md, "Outputs").

    Args:
        path: Destination PNG.
        mask: (H, W) bool (or anything where nonzero means foreground).
    """
    write_png_atomic(path, np.where(np.asarray(mask) > 0, 255, 0).astype(np.uint8))


def read_mask(path: str | Path, *, size: int | None = WORK_SIZE,
              resize: bool = False) -> np.ndarray:
    """Read a mask PNG as a boolean array in the working frame.

    Multi-channel masks (e.g. ROSALIA's 3-channel output) use channel 0. Foreground is any
    value > 0 (as the release, which reads masks as L and compares > 0). An EXIF orientation tag is
    applied as for images (:func:`utils.imaging.orientation`), so a mask and its CXR stay
    aligned. A mask of another size is an error unless ``resize`` is set: only a mask that
    covers its whole image and has no recorded frame transform may be stretched to the frame
    (docs/images.md, "Masks and images").

    Args:
        path: The PNG file.
        size: Expected side in pixels (default 1024); None keeps the file's size.
        resize: Stretch a mask of another size to ``size`` x ``size`` (nearest neighbour)
            instead of raising.

    Returns:
        (size, size) bool, or (H, W) bool when ``size`` is None.

    Raises:
        InputError: If the file is missing or cannot be decoded, or (without ``resize``) is
            not ``size`` x ``size`` (names the file and both sizes).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"mask not found: {path}")
    try:
        with Image.open(path) as im:
            turn = imaging.orientation(im)
            im.load()
            if im.mode not in ("L", "1", "P", "I", "I;16"):
                im = im.getchannel(0)
            elif im.mode != "L":
                im = im.convert("L")
            im = imaging.upright(im, turn)
            if size is not None and im.size != (size, size):
                if not resize:
                    raise InputError(
                        f"mask {path} is {im.width}x{im.height} pixels, expected {size}x{size} "
                        f"(the working frame); masks are never resized to fit (docs/images.md, "
                        f"'Masks and images'): write the mask in its image's frame")
                im = im.resize((size, size), Image.NEAREST)
            arr = np.asarray(im)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read mask {path}: {exc}") from None
    return arr > 0


def check_mask_shape(mask: np.ndarray, mask_path: str | Path, image_shape: Sequence[int],
                     image_path: str | Path | None) -> None:
    """Raise unless a mask has the shape of the image it is drawn on or compared with.

    A mismatch is never resized away (docs/images.md, "Masks and images").

    Args:
        mask: (h, w) bool, as read from ``mask_path``.
        mask_path: The mask file (named in the error).
        image_shape: (H, W) of the image as the caller holds it.
        image_path: The image file (named in the error); None names the working frame.

    Raises:
        InputError: Naming both files and both sizes.
    """
    h, w = np.shape(mask)[:2]
    big_h, big_w = (int(v) for v in image_shape[:2])
    if (h, w) == (big_h, big_w):
        return
    image = f"its image {image_path}" if image_path is not None else "its image"
    raise InputError(f"mask {mask_path} is {w}x{h} pixels but {image} is {big_w}x{big_h} "
                     f"(as read into the working frame); masks are never resized to fit "
                     f"(docs/images.md, 'Masks and images'): regenerate the mask in the image's "
                     f"frame")


def read_cxr(path: str | Path, *, size: int | None = WORK_SIZE) -> np.ndarray:
    """Read a CXR image as 8-bit grayscale in the working frame.

    Decoded by :func:`utils.imaging.load_image`, the loader every model path uses
    (docs/images.md, "Image loading"): EXIF orientation applied, 16-bit / float rescaled by
    their min..max, palette resolved, alpha flattened onto black; colour is then converted to
    luminance (ITU-R 601-2, Pillow's ``L``). Images of another size are resized with bilinear
    interpolation (aspect ratio is not kept: MIMIC-ILS masks are square, see
    data/sample_test/README.md).

    Args:
        path: PNG or JPG file.
        size: Output side in pixels (default 1024); None keeps the file's (upright) size.

    Returns:
        (size, size) uint8, or (H, W) uint8 when ``size`` is None.

    Raises:
        InputError: If the file is missing or cannot be decoded.
    """
    im = imaging.load_image(Path(path))
    if im.mode != "L":
        im = im.convert("L")
    if size is not None and im.size != (size, size):
        im = im.resize((size, size), Image.BILINEAR)
    return np.asarray(im).copy()


