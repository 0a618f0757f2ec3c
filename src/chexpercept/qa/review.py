"""Stage 02: the review figures that ``qa_labeling.csv`` names, one PNG per sheet row.

The release's sheet names ``<key_id>_attribute_extraction_qa.png`` (and, never written there,
``<key_id>_deformation_qa.png``) for annotators to check each case, but the script that drew
them (``_internal``) was never released, so every ``plot_name`` pointed at nothing
(docs/differences.md D29). We draw them into ``qa_results/qa_visualizations/``
(the folder the release's docstring names) from the images and answers of the case itself:

- ``attribute_extraction``: the CXR with the true lesion mask (``revision_after_masks``) in cyan,
  beside the answer of each attribute question with its zones, lung and overlap ratio;
- ``deformation``: the before-revision mask with the expansion/contraction points, then every
  revision-result option with the true one framed in green, above the three answers.

Panels are :data:`PANEL_PX` square (the 1024 px images halved with area interpolation) and text
is drawn with OpenCV's Hershey font without anti-aliasing, so the bytes are deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np

from chexpercept.layouts import POINTS_IMAGE, REVISION_DIR
from chexpercept.lesions import has_attribute_stage, lesion_from_key_id
from chexpercept.qa.render import MaskSource, overlay_mask

#: Side of every image panel in pixels (half the 1024 working frame).
PANEL_PX = 512
#: Text: Hershey simplex at this scale, line height and wrap width (characters).
FONT = cv2.FONT_HERSHEY_SIMPLEX
FONT_SCALE = 0.5
LINE_PX = 20
WRAP_CHARS = 58
#: Frame drawn around the true revision option (RGB) and its width in pixels.
TRUE_FRAME_RGB = (0, 200, 0)
FRAME_PX = 6
#: Attribute questions in the order of chexpercept.json (docs/benchmark_format.md, "JSON fields").
ATTRIBUTE_KEYS = ("distribution", "location", "severity/measurement", "comparison")


def review_plot_name(key_id: str, qa_type: str) -> str:
    """``<key_id>_<qa_type>_qa.png``, the sheet's ``plot_name`` (docs/qa_generation.md)."""
    return f"{key_id}_{qa_type}_qa.png"


def _panel(rgb: np.ndarray, caption: Sequence[str]) -> np.ndarray:
    """(PANEL_PX + caption rows, PANEL_PX, 3) uint8: ``rgb`` halved, caption lines underneath.

    Caption lines are wrapped at :data:`WRAP_CHARS` (mask names are long and differ only at
    the end, so they are never cut), after ``_`` and ``+`` as well as spaces.
    """
    small = cv2.resize(np.ascontiguousarray(rgb), (PANEL_PX, PANEL_PX),
                       interpolation=cv2.INTER_AREA)
    return np.vstack([small, _text_block(caption, PANEL_PX)])


def _wrap(line: str, chars: int) -> list[str]:
    """``line`` cut into rows of at most ``chars`` characters, after spaces, ``_`` or ``+``.

    Continuation rows are indented by four spaces; a piece longer than a row is cut hard.
    """
    rows: list[str] = []
    current = ""
    for piece in re.split(r"(?<=[ _+])", line):
        while len(piece) > chars - 4:
            if current:
                rows.append(current)
                current = ""
            rows.append(piece[:chars - 4])
            piece = piece[chars - 4:]
        limit = chars if not rows else chars - 4
        if current and len(current) + len(piece) > limit:
            rows.append(current)
            current = ""
        current += piece
    rows.append(current)
    return [rows[0].rstrip()] + ["    " + r.strip() for r in rows[1:] if r.strip()]


def _text_block(lines: Sequence[str], width: int, height: int | None = None) -> np.ndarray:
    """White (H, width, 3) uint8 block with ``lines`` wrapped to fit ``width``."""
    chars = max(int(WRAP_CHARS * width / PANEL_PX), 20)
    wrapped: list[str] = []
    for line in lines:
        wrapped += _wrap(line, chars)
    rows = max(height or 0, (len(wrapped) + 1) * LINE_PX)
    out = np.full((rows, width, 3), 255, np.uint8)
    for i, line in enumerate(wrapped):
        cv2.putText(out, line, (8, (i + 1) * LINE_PX), FONT, FONT_SCALE, (0, 0, 0), 1,
                    cv2.LINE_8)
    return out


def _answer_lines(name: str, qa: Mapping[str, Any]) -> list[str]:
    lines = [f"{name}: {qa.get('answer')} (option {qa.get('answer_index')})"]
    if qa.get("answer_zones"):
        lines.append("  zones: " + "; ".join(map(str, qa["answer_zones"])))
    if "overlap_ratio" in qa:
        lines.append(f"  {qa.get('selected_lung')}: overlap ratio {qa['overlap_ratio']:.3f}")
    if "left_size" in qa:
        lines.append(f"  lesion pixels: left {qa['left_size']}, right {qa['right_size']}")
    return lines


def attribute_review(key_id: str, item: Mapping[str, Any], cxr_gray: np.ndarray,
                     masks: MaskSource) -> np.ndarray:
    """Review figure of a case's attribute questions.

    Args:
        key_id: The case (drawn as the title).
        item: Its chexpercept.json value with a non-null ``attribute_extraction_qa``.
        cxr_gray: (1024, 1024) uint8 CXR.
        masks: Mask loader of the case.

    Returns:
        (H, 2 * PANEL_PX, 3) uint8 RGB.

    Raises:
        InputError: If a mask file of ``revision_after_masks`` is missing.
    """
    contour = item["contour_qa"]
    truth = overlay_mask(cxr_gray, masks.union(contour["revision_after_masks"]))
    left = _panel(truth, ["true lesion mask (revision_after_masks)"])
    lines = [key_id, ""]
    for name in ATTRIBUTE_KEYS:
        qa = item["attribute_extraction_qa"].get(name)
        if qa is not None:
            lines += _answer_lines(name, qa)
    right = _text_block(lines, PANEL_PX, left.shape[0])
    left = np.vstack([left, np.full((right.shape[0] - left.shape[0], PANEL_PX, 3), 255,
                                    np.uint8)])
    return np.hstack([left, right])


def deformation_review(key_id: str, item: Mapping[str, Any],
                       images: Mapping[str, np.ndarray]) -> np.ndarray:
    """Review figure of a revision-required case's contour-revision questions.

    Args:
        key_id: The case (drawn as the title).
        item: Its chexpercept.json value (revision-required).
        images: The case's rendered bundle images keyed by relative path
            (:func:`chexpercept.qa.render.render_case`).

    Returns:
        (H, (1 + n_options) * PANEL_PX, 3) uint8 RGB.
    """
    contour = item["contour_qa"]
    result = contour["contour_revision_qa_revision_result"]
    panels = [_panel(images[f"{REVISION_DIR}/{POINTS_IMAGE}"],
                     ["before revision + candidate points"])]
    for i, option in enumerate(result["answer_options"], start=1):
        panel = _panel(images[f"{REVISION_DIR}/{option['relative_path']}"],
                       [f"option {i}: {option['type']}", " + ".join(option["masks"])])
        if i == result["answer_index"]:
            cv2.rectangle(panel, (0, 0), (PANEL_PX - 1, PANEL_PX - 1), TRUE_FRAME_RGB,
                          FRAME_PX, cv2.LINE_8)
        panels.append(panel)
    height = max(p.shape[0] for p in panels)
    row = np.hstack([np.vstack([p, np.full((height - p.shape[0], PANEL_PX, 3), 255, np.uint8)])
                     for p in panels])
    lines = [key_id,
             f"expansion: {contour['contour_revision_qa_expansion']['answer']}",
             f"contraction: {contour['contour_revision_qa_contraction']['answer']}",
             "points named in neither answer are distractors",
             f"revision result: {result['answer']} (option {result['answer_index']}, framed)"]
    return np.vstack([row, _text_block(lines, row.shape[1])])


def review_types(key_id: str, item: Mapping[str, Any]) -> list[str]:
    """The ``qa_type`` of every review figure of a case, in ``qa_labeling.csv`` order.

    ``attribute_extraction`` for a positive case of a lesion with attribute questions,
    ``deformation`` for a revision-required case; none for negatives (docs/qa_generation.md,
    "Rendering").
    """
    contour = item.get("contour_qa")
    if not contour:
        return []
    types = []
    if has_attribute_stage(lesion_from_key_id(key_id)):
        types.append("attribute_extraction")
    if not contour.get("no_deformation"):
        types.append("deformation")
    return types


def review_names(key_id: str, item: Mapping[str, Any]) -> list[str]:
    """The ``plot_name`` of every review figure of a case (see :func:`review_types`)."""
    return [review_plot_name(key_id, qa_type) for qa_type in review_types(key_id, item)]


def review_figures(key_id: str, item: Mapping[str, Any], cxr_gray: np.ndarray,
                   masks: MaskSource, images: Mapping[str, np.ndarray]
                   ) -> dict[str, np.ndarray]:
    """Every review figure of a case, keyed by the sheet's ``plot_name``.

    The figures of :func:`review_types`, in that order.

    Raises:
        InputError: If a mask file is missing.
    """
    return {review_plot_name(key_id, qa_type): (
        deformation_review(key_id, item, images) if qa_type == "deformation"
        else attribute_review(key_id, item, cxr_gray, masks))
        for qa_type in review_types(key_id, item)}
