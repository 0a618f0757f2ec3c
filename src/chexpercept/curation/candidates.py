"""Stage 00.01: candidate lesion masks (ROSALIA layout), review plots, results and sheets.

Reads the two positive ``*_segmentation_info.json`` files and the flat CXR PNGs, asks a
:class:`~chexpercept.curation.segmenters.Segmenter` (``provided`` MIMIC-ILS masks or ``rosalia``)
for each pair; writes ``rosalia_pred/<target>/<pair_id>/{pred_img.png, pred_mask.png,
pred_text.json}``, ``rosalia_pred/plots/<target>/<key_id>.png``, ``results[_part<p>].json`` and
``labeling_sheet[_part<p>].csv`` (docs/curation.md, "Candidate masks").
"""

from __future__ import annotations

import io
import logging
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chexpercept.curation.segmenters import (
    ProvidedSegmenter,
    Segmenter,
    provided_mask,  # noqa: F401  (re-exported: it lived here before)
    segmenter_names,
)
from chexpercept.errors import ConfigError, InputError
from chexpercept.files import read_json, write_bytes_atomic, write_json_atomic
from chexpercept.images import WORK_SIZE, read_cxr, write_mask
from chexpercept.layouts import CurationLayout
from chexpercept.lesions import LESIONS, make_key_id

logger = logging.getLogger(__name__)

#: Candidate-mask sources (config ``source_data_curation.segmenter``).
SEGMENTERS = ("provided", "rosalia", "box-anatomy", "sam2-box")
#: Review overlay: red at 33 % alpha (docs/qa_generation.md, "Thresholds"); small plots (dpi 60).
OVERLAY_ALPHA = 0.33
PLOT_DPI = 60
#: Pixels per side of the images drawn in the review plot (downsampled for speed).
PLOT_IMAGE_PX = 512


def build_work_list(global_info: Mapping[str, Sequence[Mapping[str, Any]]],
                    basic_info: Mapping[str, Sequence[Mapping[str, Any]]],
                    max_samples: int) -> list[dict[str, Any]]:
    """Flat, deterministic work list (the release's ``build_work_list``).

    docs/curation.md, "Candidate masks".

    Per lesion (``LESIONS`` order): the first ``min(len(global), max)`` global items, then
    ``basic[:max - n_global]``; each item gets ``target`` and ``segmentation_source``.

    Args:
        global_info: lesion -> global entries.
        basic_info: lesion -> basic entries.
        max_samples: Cap per lesion (``--max-samples``).

    Returns:
        The work items (copies).
    """
    items: list[dict[str, Any]] = []
    for lesion in LESIONS:
        glob = list(global_info.get(lesion, []))[:max_samples]
        basic = list(basic_info.get(lesion, []))[:max(0, max_samples - len(glob))]
        for source, entries in (("global", glob), ("basic", basic)):
            for e in entries:
                items.append({**e, "target": lesion, "segmentation_source": source})
    return items


def shard(items: Sequence[Any], part: int | None, total_parts: int) -> list[Any]:
    """Items of shard ``part`` (release rule: ``chunk = ceil(N / total_parts)``).

    Raises:
        ConfigError: If ``part`` is outside ``[0, total_parts)`` or ``total_parts`` < 1.
    """
    if part is None:
        return list(items)
    if total_parts < 1 or not 0 <= part < total_parts:
        raise ConfigError(f"--part {part} must be in [0, --total-parts {total_parts})")
    chunk = math.ceil(len(items) / total_parts) if items else 0
    return list(items[part * chunk: min((part + 1) * chunk, len(items))])


def location_text(target: str, locations: Sequence[str] | None) -> str:
    """Mapped location of a pair (release ``generate_location_text``, order made stable).

    ``heart`` for cardiomegaly. Otherwise the ``location`` list deduplicated keeping the first
    occurrence (the release used ``set()``, docs/differences.md D1): 0 -> ``right lung and left
    lung``; 1 -> itself; 2 -> ``A and B``; 3+ -> ``A, B, and C``.
    """
    if target == "cardiomegaly":
        return "heart"
    locs = list(dict.fromkeys(locations or []))
    if not locs:
        return "right lung and left lung"
    if len(locs) == 1:
        return locs[0]
    if len(locs) == 2:
        return f"{locs[0]} and {locs[1]}"
    return ", ".join(locs[:-1]) + f", and {locs[-1]}"


_BILATERAL = {"left lung and right lung", "right lung and left lung"}


def instruction_for(target: str, mapped_location: str) -> str:
    """ROSALIA instruction: no location for cardiomegaly / bilateral.

    docs/curation.md, "Candidate masks".

    ``Segment the {target}.`` when the target is cardiomegaly or the mapped location is both
    lungs (``right lung and left lung`` in either order, also the text of an empty location
    list); else ``Segment the {target} in the {mapped_location}.`` with the
    :func:`location_text` of the pair (``A``, ``A and B``, ``A, B, and C``; first occurrence
    order), so the same pair always gets the same instruction.
    """
    if target == "cardiomegaly" or mapped_location in _BILATERAL:
        return f"Segment the {target}."
    return f"Segment the {target} in the {mapped_location}."


def key_id_of(item: Mapping[str, Any]) -> str:
    """``<target>_<pair_id>``."""
    return make_key_id(item["target"], item["pair_id"])


def result_entry(item: Mapping[str, Any], layout: CurationLayout) -> dict[str, Any]:
    """The ``results.json`` record of one item (release fields).

    docs/curation.md, "Candidate masks".

    ``output_text`` is the segmenter's text saved in ``pred_text.json`` (the pair's ``answer``
    when that file is absent, e.g. outputs of an older run).
    """
    mapped = location_text(item["target"], item.get("location"))
    text_path = layout.candidate_text(item["target"], item["pair_id"])
    text = read_json(text_path)["output_text"] if text_path.is_file() else None
    return {"dicom_id": item["dicom_id"], "target": item["target"],
            "pred_mask_path": str(layout.candidate_mask(item["target"], item["pair_id"])
                                  .resolve()),
            "output_text": str(text if text is not None else (item.get("answer") or "[SEG]")),
            "mapped_location": mapped,
            "instruction": instruction_for(item["target"], mapped),
            "segmentation_source": item["segmentation_source"]}


def sheet_row(item: Mapping[str, Any], layout: CurationLayout) -> dict[str, str]:
    """The labeling-sheet row of one item (``optimal?`` empty, ``plot_path`` absolute)."""
    key_id = key_id_of(item)
    return {"key_id": key_id, "dicom_id": item["dicom_id"], "target": item["target"],
            "pair_id": item["pair_id"],
            "mapped_location": location_text(item["target"], item.get("location")),
            "segmentation_source": item["segmentation_source"], "optimal?": "",
            "plot_path": str(layout.review_plot(item["target"], key_id).resolve())}


def check_segmenter(name: str) -> None:
    """Fail early for an unknown ``source_data_curation.segmenter``.

    Raises:
        ConfigError: For a name that is not registered (listing the valid ones).
    """
    if name not in segmenter_names():
        raise ConfigError(f"source_data_curation.segmenter {name!r}: expected one of "
                          f"{segmenter_names()}")


def review_plot_png(image: np.ndarray, mask: np.ndarray, title: str) -> bytes:
    """Two-panel review figure: the CXR, and the CXR with the mask in red at 33 % alpha.

    Args:
        image: (H, W) uint8 CXR.
        mask: (H, W) bool candidate mask.
        title: Figure title (key_id, mapped location, segmentation source).

    Returns:
        PNG bytes (matplotlib Agg, dpi 60).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image

    small = np.asarray(Image.fromarray(image).resize((PLOT_IMAGE_PX, PLOT_IMAGE_PX),
                                                     Image.BILINEAR))
    small_mask = np.asarray(Image.fromarray(mask.astype(np.uint8) * 255)
                            .resize((PLOT_IMAGE_PX, PLOT_IMAGE_PX), Image.NEAREST)) > 0
    rgb = np.repeat(small[..., None], 3, axis=2).astype(np.float32)
    red = np.array([255.0, 0.0, 0.0], dtype=np.float32)
    over = rgb.copy()
    over[small_mask] = (1 - OVERLAY_ALPHA) * rgb[small_mask] + OVERLAY_ALPHA * red
    fig = Figure(figsize=(10, 5.4), dpi=PLOT_DPI)
    FigureCanvasAgg(fig)
    for k, (panel, name) in enumerate(((rgb, "image"), (over, "candidate mask"))):
        ax = fig.add_subplot(1, 2, k + 1)
        ax.imshow(panel.astype(np.uint8))
        ax.set_title(name)
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PLOT_DPI, metadata={"Software": None})
    return buf.getvalue()


@dataclass(frozen=True)
class ItemOutcome:
    """What happened to one work item.

    Attributes:
        key_id: The item's key_id.
        status: ``processed``, ``skipped`` (outputs already there) or ``failed``.
        reason: Why it failed (empty otherwise).
    """

    key_id: str
    status: str
    reason: str = ""


def item_done(item: Mapping[str, Any], layout: CurationLayout) -> bool:
    """Whether all three per-item files of ``item`` exist (resume)."""
    target, pair_id = item["target"], item["pair_id"]
    return all(p.is_file() for p in (layout.candidate_image(target, pair_id),
                                     layout.candidate_mask(target, pair_id),
                                     layout.review_plot(target, key_id_of(item))))


def process_item(item: Mapping[str, Any], layout: CurationLayout, *, cxr_dir: str | Path,
                 seg_mask_root: str | Path | None = None,
                 segmenter: str | Segmenter = "provided") -> ItemOutcome:
    """Write the candidate image, mask, text and review plot of one item (skipped if done).

    The plot is written last, so an item interrupted half-way is redone on resume.

    Args:
        item: A work item from :func:`build_work_list`.
        layout: Stage 00 layout.
        cxr_dir: ``path.mimic_cxr_path`` (flat ``<dicom_id>.png``).
        seg_mask_root: ``path.mimic_ils_seg_mask_path`` (the ``provided`` segmenter).
        segmenter: A :class:`Segmenter`, or ``"provided"`` (built from the two paths).

    Returns:
        The outcome; a missing mask or CXR, or an empty prediction, is ``failed`` with its
        reason, not an exception.

    Raises:
        ConfigError: For a segmenter name other than ``provided`` (create it first).
    """
    key_id = key_id_of(item)
    if item_done(item, layout):
        return ItemOutcome(key_id, "skipped")
    if isinstance(segmenter, str):
        if segmenter != "provided":
            check_segmenter(segmenter)
            raise ConfigError(f"segmenter {segmenter!r} must be created with "
                              "chexpercept.curation.segmenters.create_segmenter first")
        segmenter = ProvidedSegmenter(seg_mask_root, cxr_dir)
    src = Path(cxr_dir) / f"{item['dicom_id']}.png"
    target, pair_id = item["target"], item["pair_id"]
    mapped = location_text(target, item.get("location"))
    instruction = instruction_for(target, mapped)
    try:
        image = read_cxr(src)
        result = segmenter.segment(image, instruction, item=item)
    except InputError as exc:
        return ItemOutcome(key_id, "failed", str(exc))
    mask = np.asarray(result.mask)
    if mask.shape != (WORK_SIZE, WORK_SIZE):
        return ItemOutcome(key_id, "failed", f"segmenter {segmenter.name!r} returned a mask of "
                                             f"shape {mask.shape}, expected (1024, 1024)")
    mask = mask.astype(bool)
    dst = layout.candidate_image(target, pair_id)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)
    write_mask(layout.candidate_mask(target, pair_id), mask)
    write_json_atomic(layout.candidate_text(target, pair_id),
                      {"segmenter": segmenter.name, "instruction": instruction,
                       "output_text": result.text})
    title = f"{key_id} | {mapped} | {item['segmentation_source']}"
    write_bytes_atomic(layout.review_plot(target, key_id), review_plot_png(image, mask, title))
    return ItemOutcome(key_id, "processed")
