"""Core: the working-frame transform (an original CXR <-> the 1024x1024 frame).

Written by Stage 00.00 next to each prepared CXR, read by Stage 00.01 and 01.00 to bring masks
of the original image into the frame and back (docs/curation.md, "Working frame"). A mask
provided with a CXR (MIMIC-ILS lesion masks, provided anatomy masks) comes into the frame
through :func:`provided_mask_to_frame`: the one mask reader, the CXR's EXIF turn, the shape
check, then the transform (docs/images.md, "Masks and images").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from chexpercept.errors import InputError, SchemaError
from chexpercept.files import read_json
from chexpercept.images import WORK_SIZE, read_mask
from utils import imaging

# --------------------------------------------------------------------------------------
# Working-frame transforms (written by Stage 00.00, read by 00.01 and 01.00)
# --------------------------------------------------------------------------------------

#: How an original CXR is brought into the working frame (config
#: ``source_data_curation.prepare_mode``). ``letterbox``: keep the aspect ratio, scale the long
#: side to 1024 and centre with black padding (CheXmask's pad-to-square convention;
#: docs/curation.md, "Working frame"); ``stretch``: plain resize to 1024 x 1024 (the release's
#: flat PNGs).
PREPARE_MODES: tuple[str, ...] = ("letterbox", "stretch")


@dataclass(frozen=True)
class FrameTransform:
    """Affine map from an original CXR (``orig_width`` x ``orig_height`` pixels) to the frame.

    A working-frame pixel ``(x', y')`` comes from the original pixel
    ``((x' - pad_x) / scale_x, (y' - pad_y) / scale_y)``. The resized image occupies
    ``[pad_x, pad_x + resized_width) x [pad_y, pad_y + resized_height)``; the rest is padding
    (value 0).

    Attributes:
        mode: One of :data:`PREPARE_MODES`.
        orig_width: Original width in pixels.
        orig_height: Original height in pixels.
        scale_x: Working-frame pixels per original pixel along x.
        scale_y: Same along y (for ``letterbox`` equal to ``scale_x`` up to the rounding of the
            resized size to whole pixels).
        pad_x: Left padding in working-frame pixels.
        pad_y: Top padding in working-frame pixels.
        resized_width: Width of the resized image inside the frame.
        resized_height: Height of the resized image inside the frame.
        size: Side of the square frame (1024).
        orientation: EXIF orientation (1-8) of the source file, applied by the image loader
            before this transform (``orig_width`` x ``orig_height`` is the upright size); 1 for
            none, and for records written before the field existed (docs/curation.md,
            "Working frame").
    """

    mode: str
    orig_width: int
    orig_height: int
    scale_x: float
    scale_y: float
    pad_x: int
    pad_y: int
    resized_width: int
    resized_height: int
    size: int = WORK_SIZE
    orientation: int = 1

    @property
    def stored_size(self) -> tuple[int, int]:
        """``(width, height)`` of the source file's stored pixel grid (before the EXIF turn)."""
        if self.orientation in (5, 6, 7, 8):
            return self.orig_height, self.orig_width
        return self.orig_width, self.orig_height

    def to_json(self) -> dict[str, Any]:
        """The sidecar / ``transforms.json`` record."""
        return {"mode": self.mode, "orig_width": self.orig_width,
                "orig_height": self.orig_height, "scale_x": self.scale_x,
                "scale_y": self.scale_y, "pad_x": self.pad_x, "pad_y": self.pad_y,
                "resized_width": self.resized_width, "resized_height": self.resized_height,
                "size": self.size, "orientation": self.orientation}

    @classmethod
    def from_json(cls, data: Any, where: str | Path) -> FrameTransform:
        """Parse a record written by :meth:`to_json`.

        Raises:
            SchemaError: Naming ``where`` and the missing or invalid fields.
        """
        fields = ("mode", "orig_width", "orig_height", "scale_x", "scale_y", "pad_x", "pad_y",
                  "resized_width", "resized_height")
        if not isinstance(data, dict):
            raise SchemaError(f"{where}: expected a frame-transform object, found "
                              f"{type(data).__name__}")
        missing = [f for f in fields if f not in data]
        if missing or data.get("mode") not in PREPARE_MODES:
            raise SchemaError(f"{where}: frame transform needs {list(fields)} with mode in "
                              f"{PREPARE_MODES}; missing {missing}, mode {data.get('mode')!r}")
        if data.get("orientation", 1) not in range(1, 9):
            raise SchemaError(f"{where}: orientation must be an EXIF orientation 1-8, found "
                              f"{data['orientation']!r}")
        return cls(mode=str(data["mode"]), orig_width=int(data["orig_width"]),
                   orig_height=int(data["orig_height"]), scale_x=float(data["scale_x"]),
                   scale_y=float(data["scale_y"]), pad_x=int(data["pad_x"]),
                   pad_y=int(data["pad_y"]), resized_width=int(data["resized_width"]),
                   resized_height=int(data["resized_height"]),
                   size=int(data.get("size", WORK_SIZE)),
                   orientation=int(data.get("orientation", 1)))

    def point_to_frame(self, x: float, y: float) -> tuple[float, float]:
        """Original pixel coordinates -> working-frame coordinates."""
        return x * self.scale_x + self.pad_x, y * self.scale_y + self.pad_y

    def point_to_original(self, x: float, y: float) -> tuple[float, float]:
        """Working-frame coordinates -> original pixel coordinates."""
        return (x - self.pad_x) / self.scale_x, (y - self.pad_y) / self.scale_y


def frame_transform(width: int, height: int, mode: str = "letterbox",
                    size: int = WORK_SIZE) -> FrameTransform:
    """The transform that brings a ``width`` x ``height`` image into the ``size`` frame.

    Args:
        width: Original width in pixels (> 0).
        height: Original height in pixels (> 0).
        mode: ``letterbox`` (scale ``size / max(width, height)``, centred, padding split as
            ``(size - resized) // 2`` before) or ``stretch`` (independent x/y scales, no padding).
        size: Frame side (1024).

    Raises:
        ValueError: For an unknown mode or a non-positive size.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if mode == "stretch":
        return FrameTransform(mode, width, height, size / width, size / height, 0, 0, size, size,
                              size)
    if mode != "letterbox":
        raise ValueError(f"unknown prepare mode {mode!r}; expected one of {PREPARE_MODES}")
    scale = size / max(width, height)
    rw = min(size, max(1, round(width * scale)))
    rh = min(size, max(1, round(height * scale)))
    return FrameTransform(mode, width, height, rw / width, rh / height, (size - rw) // 2,
                          (size - rh) // 2, rw, rh, size)


def _into_frame(image: Image.Image, t: FrameTransform, resample: int) -> np.ndarray:
    small = np.asarray(image.resize((t.resized_width, t.resized_height), resample))
    canvas = np.zeros((t.size, t.size), dtype=small.dtype)
    canvas[t.pad_y:t.pad_y + t.resized_height, t.pad_x:t.pad_x + t.resized_width] = small
    return canvas


def image_to_frame(image: np.ndarray, t: FrameTransform) -> np.ndarray:
    """Resize (bilinear) and pad an original 8-bit CXR into the working frame.

    Args:
        image: (orig_height, orig_width) uint8.
        t: Its transform.

    Returns:
        (1024, 1024) uint8; padding is 0.
    """
    return _into_frame(Image.fromarray(np.ascontiguousarray(image)), t, Image.BILINEAR)


def mask_to_frame(mask: np.ndarray, t: FrameTransform) -> np.ndarray:
    """Map a mask that covers the whole ORIGINAL image into the working frame (nearest).

    The mask may have any size: the original's (H, W), or a square (e.g. MIMIC-ILS 512 x 512,
    or a 1024 x 1024 mask computed on the image stretched to a square). Either way it is read
    as the original image resized to the mask's shape, so the map is "resize to the original
    H x W, then the transform"; both steps are affine, so they are done as one nearest resize
    to ``(resized_width, resized_height)`` plus padding (one resampling instead of two).

    Args:
        mask: (h, w) bool covering the original image.
        t: The image's transform.

    Returns:
        (1024, 1024) bool; padding is False.
    """
    im = Image.fromarray(np.asarray(mask, dtype=bool).astype(np.uint8) * 255)
    return _into_frame(im, t, Image.NEAREST) > 0


def mask_to_original(mask: np.ndarray, t: FrameTransform) -> np.ndarray:
    """Inverse of :func:`mask_to_frame`: crop the padding and resize (nearest) to the original.

    Args:
        mask: (1024, 1024) bool in the working frame.
        t: The image's transform.

    Returns:
        (orig_height, orig_width) bool.
    """
    crop = np.asarray(mask, dtype=bool)[t.pad_y:t.pad_y + t.resized_height,
                                        t.pad_x:t.pad_x + t.resized_width]
    im = Image.fromarray(crop.astype(np.uint8) * 255).resize((t.orig_width, t.orig_height),
                                                             Image.NEAREST)
    return np.asarray(im) > 0


def prepared_png(cxr_dir: str | Path, dicom_id: str) -> Path:
    """``<mimic_cxr_path>/<dicom_id>.png`` (release flat layout)."""
    return Path(cxr_dir) / f"{dicom_id}.png"


def transform_sidecar(cxr_dir: str | Path, dicom_id: str) -> Path:
    """``<mimic_cxr_path>/<dicom_id>.transform.json``: a prepared PNG's transform."""
    return Path(cxr_dir) / f"{dicom_id}.transform.json"


def transforms_index(cxr_dir: str | Path) -> Path:
    """``<mimic_cxr_path>/transforms.json``: ``{dicom_id: transform}`` of the last preparation."""
    return Path(cxr_dir) / "transforms.json"


def read_frame_transform(cxr_dir: str | Path, dicom_id: str) -> FrameTransform | None:
    """The recorded transform of a prepared CXR, or None if none was recorded.

    None means the PNG was not made by Stage 00 (e.g. a release-style flat folder filled by
    hand); callers then treat masks as covering the 1024 x 1024 image (plain resize).

    Raises:
        SchemaError: If the sidecar exists but is malformed.
    """
    path = transform_sidecar(cxr_dir, dicom_id)
    if not path.is_file():
        return None
    return FrameTransform.from_json(read_json(path), path)


def _plain_scale(mask_wh: tuple[int, int], grid_wh: tuple[int, int]) -> bool:
    """Whether a ``mask_wh`` (w, h) mask is the ``grid_wh`` grid scaled evenly (to whole pixels)."""
    (mw, mh), (gw, gh) = mask_wh, grid_wh
    return abs(mw * gh - mh * gw) <= (gw + gh) / 2


def orient_provided_mask(mask: np.ndarray, t: FrameTransform, mask_path: str | Path,
                         image_path: str | Path | None = None) -> np.ndarray:
    """A provided mask brought into the upright grid of its CXR (before the frame transform).

    The image loader turns a source with an EXIF orientation upright; a mask file without its
    own tag is taken to be in the source's STORED pixel grid (how a mask exported from the
    pixel array is stored) and gets the same turn, including the ambiguous square case
    (docs/curation.md, "Working frame"). Accepted shapes: square (MIMIC-ILS: the image
    stretched to a square), or the stored or upright grid at any even scale; a non-square mask
    with the upright grid's aspect ratio only is already upright and is not turned.

    Args:
        mask: (h, w) bool, as read from ``mask_path`` (its own EXIF tag, if any, applied).
        t: The CXR's transform (``orig_width`` x ``orig_height``: upright size; its
            ``orientation``).
        mask_path: The mask file (named in the error; its own tag is checked).
        image_path: The CXR file (named in the error).

    Returns:
        (h', w') bool in the upright grid (transposed for orientations 5-8).

    Raises:
        InputError: If the shape fits neither grid, naming both files and all sizes.
    """
    h, w = mask.shape
    stored, upright = t.stored_size, (t.orig_width, t.orig_height)
    own_tag = imaging.inspect_image(mask_path).orientation != 1  # read_mask turned it upright
    if t.orientation != 1 and not own_tag and (w == h or _plain_scale((w, h), stored)):
        turned = imaging.upright(Image.fromarray(mask.astype(np.uint8) * 255), t.orientation)
        return np.asarray(turned) > 0
    if w == h or _plain_scale((w, h), upright):
        return mask
    source = (f"a {stored[0]}x{stored[1]} stored image shown {upright[0]}x{upright[1]} upright "
              f"(EXIF orientation {t.orientation})" if t.orientation != 1
              else f"a {upright[0]}x{upright[1]} image")
    raise InputError(f"provided mask {mask_path} is {w}x{h} pixels, but its CXR "
                     f"{image_path or '(working frame)'} was prepared from {source}: a provided "
                     f"mask must be square (MIMIC-ILS) or have the image's aspect ratio "
                     f"(docs/curation.md, 'Working frame'); regenerate it on the image's grid")


#: The transform of a mask drawn in the working frame itself (``anatomy.provided_frame: work``):
#: any square is that frame at an even scale; any other shape is refused.
WORK_FRAME = frame_transform(WORK_SIZE, WORK_SIZE, "stretch")


def provided_mask_to_frame(mask_path: str | Path, t: FrameTransform,
                           image_path: str | Path | None = None) -> np.ndarray:
    """A mask provided with its CXR, covering the whole original image, in the working frame.

    Read with the one mask reader (:func:`chexpercept.images.read_mask`: its own EXIF tag
    applied), turned like its CXR when it is in the source's stored grid and checked for shape
    (:func:`orient_provided_mask`), then mapped like the image (:func:`mask_to_frame`). Used for
    MIMIC-ILS lesion masks (Stage 00.01) and provided anatomy masks (Stage 01.00, the
    box-anatomy segmenter); docs/images.md, "Masks and images".

    Args:
        mask_path: The mask PNG.
        t: The CXR's transform (:data:`WORK_FRAME` for a mask drawn in the working frame).
        image_path: The CXR file, named in the error (None: the working frame).

    Returns:
        (1024, 1024) bool.

    Raises:
        InputError: If the mask is missing or unreadable, or its shape fits neither the stored
            nor the upright grid of its CXR (naming both files and the sizes).
    """
    mask = orient_provided_mask(read_mask(mask_path, size=None), t, mask_path, image_path)
    return mask_to_frame(mask, t)
