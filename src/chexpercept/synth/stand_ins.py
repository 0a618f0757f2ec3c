"""Synthetic stand-ins for public-source CXRs: phantom images placed at real box geometry.

The public smoke run (``scripts/public_sample_test.sh``) exercises the source adapters on real
annotation rows without any download: each sampled image id gets a SYNTHETIC phantom image at
the size the boxes refer to (NIH ChestX-ray14 PNGs are 1024 x 1024), with a soft density inside
each lesion box and the words "SYNTHETIC STAND-IN" burnt into the pixels, plus CheXmask-U / CXAS
anatomy masks. The ids are real image names because the geometry comes from real rows; the
pixels are not those images (docs/curation.md, "Public sources").
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from chexpercept.files import write_bytes_atomic, write_json_atomic, write_text_atomic
from chexpercept.layouts import SYNTHETIC_PIXELS_MANIFEST
from chexpercept.rng import rng_for
from chexpercept.synth._anatomy import anatomy_masks
from chexpercept.synth._phantom import Grid, random_phantom, render

#: Marker text burnt into every stand-in image.
WATERMARK = "SYNTHETIC STAND-IN"
#: Lesion density added inside a box (fraction of full white), and its blur (fraction of width).
BOX_DENSITY = 0.22
BOX_BLUR = 0.01
#: The manifest that marks the folder as synthetic (``layouts.SYNTHETIC_PIXELS_MANIFEST``).
MANIFEST = SYNTHETIC_PIXELS_MANIFEST
#: Pixels by which the stand-in lung masks overlap the heart border.
HEART_OVERLAP_PX = 6

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class StandIn:
    """One synthetic stand-in.

    Attributes:
        image: (H, W) uint8 phantom radiograph with the watermark.
        chexmask: CheXmask-U files (``right_lung``, ``left_lung``, ``heart``), (H, W) bool.
        cxas: CXAS-layout classes, (H, W) bool.
    """

    image: np.ndarray
    chexmask: dict[str, np.ndarray]
    cxas: dict[str, np.ndarray]


def _inscribed(g: Grid, box: Box, width: int, height: int) -> np.ndarray:
    x0, y0, x1, y1 = box
    cx, cy = (x0 + x1) / 2 / width, (y0 + y1) / 2 / height
    rx, ry = max((x1 - x0) / 2 / width, 1e-3), max((y1 - y0) / 2 / height, 1e-3)
    return ((g.u - cx) / rx) ** 2 + ((g.v - cy) / ry) ** 2 <= 1.0


def render_stand_in(image_id: str, width: int, height: int,
                    findings: Sequence[tuple[str, Box]], *, seed: int = 0) -> StandIn:
    """A phantom CXR whose lesions sit at the given boxes (original pixels).

    Cardiomegaly boxes set the heart ellipse (inscribed in the box); every other box adds a
    blurred density in its inscribed ellipse, and that ellipse joins the lung on its side (the
    patient's right lung is on the image left), so the box always meets a lung.

    Args:
        image_id: The image id (seeds the phantom's jitter and texture).
        width: Image width in pixels.
        height: Image height in pixels.
        findings: ``(lesion, (x0, y0, x1, y1))`` per box.
        seed: Config seed.

    Returns:
        The image and anatomy masks, all (height, width).
    """
    rng = rng_for(seed, "synth", "stand-in", image_id)
    lesions = [les for les, _ in findings]
    ph = random_phantom(rng, cardiomegaly="cardiomegaly" in lesions)
    for les, (x0, y0, x1, y1) in findings:
        if les == "cardiomegaly":
            ph = replace(ph, heart=((x0 + x1) / 2 / width, (y0 + y1) / 2 / height,
                                    (x1 - x0) / 2 / width, (y1 - y0) / 2 / height))
    g = Grid.of(width, height)
    image = render(ph, [], width, height, rng).astype(np.float32) / 255.0
    right, left = ph.lung("right").mask(g), ph.lung("left").mask(g)
    heart = ph.heart_mask(g)
    density = np.zeros((height, width), np.float32)
    for les, box in findings:
        if les == "cardiomegaly":
            continue
        ell = _inscribed(g, box, width, height)
        if (box[0] + box[2]) / 2 < width / 2:
            right = right | ell
        else:
            left = left | ell
        heart = heart & ~ell
        density += cv2.GaussianBlur(ell.astype(np.float32), (0, 0), BOX_BLUR * width)
    image = np.clip(image + BOX_DENSITY * np.minimum(density, 1.0), 0, 1)
    image = np.round(image * 255).astype(np.uint8)
    scale = width / 1024
    for k, (text, y) in enumerate(((WATERMARK, 0.05), ("not a patient image", 0.09),
                                   (image_id, 0.97))):
        cv2.putText(image, text, (int(0.03 * width), int(y * height)), cv2.FONT_HERSHEY_SIMPLEX,
                    (1.1 if k == 0 else 0.7) * scale, 255, max(1, int(2 * scale)), cv2.LINE_AA)
    chexmask, cxas = anatomy_masks(right, left, heart)
    # Model-made masks (CheXmask-U) overlap the heart border by a few pixels; so do these, so
    # that the heart (the cardiomegaly candidate) touches the lungs as on real masks.
    core = cv2.erode(heart.astype(np.uint8), np.ones((2 * HEART_OVERLAP_PX + 1,) * 2,
                                                     np.uint8)).astype(bool)
    chexmask["right_lung"], chexmask["left_lung"] = right & ~core, left & ~core
    return StandIn(image=image, chexmask=chexmask, cxas=cxas)


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(buf, format="PNG")
    return buf.getvalue()


def write_stand_ins(out: str | Path, cases: Mapping[str, Sequence[tuple[str, Box]]], *,
                    image_relpath: str = "images/{id}.png", size: tuple[int, int] = (1024, 1024),
                    seed: int = 0, source: str = "nih-cxr14",
                    rows: Mapping[str, Any] | None = None) -> Path:
    """Write stand-ins in the source's download layout plus anatomy masks and a manifest.

    Writes ``<out>/<image_relpath>`` per image, ``<out>/anatomy/chexmasku/<id>/*.png`` and
    ``<out>/anatomy/cxas/<id>/*.png`` (1-bit PNGs), ``<out>/SYNTHETIC_STAND_INS.json`` and
    ``<out>/README.txt`` saying that the pixels are synthetic.

    Args:
        out: Folder (the "download folder" of the smoke config).
        cases: image id -> ``(lesion, box)`` list (empty for a no-finding negative).
        image_relpath: Layout of the images (``{id}`` is replaced).
        size: ``(width, height)`` of every image (the frame the boxes refer to).
        seed: Config seed.
        source: The source the ids and boxes come from.
        rows: image id -> the table rows behind it (recorded in the manifest).

    Returns:
        The manifest path.
    """
    out = Path(out)
    width, height = size
    for image_id in sorted(cases):
        s = render_stand_in(image_id, width, height, cases[image_id], seed=seed)
        write_bytes_atomic(out / image_relpath.format(id=image_id), _png(s.image))
        for name, m in s.chexmask.items():
            write_bytes_atomic(out / "anatomy" / "chexmasku" / image_id / f"{name}.png", _png(m))
        for name, m in s.cxas.items():
            write_bytes_atomic(out / "anatomy" / "cxas" / image_id / f"{name}.png", _png(m))
    note = (f"SYNTHETIC STAND-INS: every image here is a generated phantom, not a {source} "
            f"image. The file names are real {source} image ids and the lesions sit at the "
            f"boxes of real rows of its annotation table, so the adapters run on real "
            f"annotation geometry; the pixels are synthetic.")
    write_text_atomic(out / "README.txt", note + "\n")
    manifest = out / MANIFEST
    write_json_atomic(manifest, {
        "synthetic": True, "note": note, "source": source, "seed": seed,
        "size": [width, height], "generator": "chexpercept.synth.stand_ins",
        "images": {i: {"findings": [[les, [round(v, 3) for v in box]] for les, box in cases[i]],
                       "rows": (rows or {}).get(i)} for i in sorted(cases)}})
    return manifest


__all__ = ["MANIFEST", "WATERMARK", "StandIn", "render_stand_in", "write_stand_ins"]
