"""Stage 00.01 segmenters: registry, provided backend, ROSALIA pure helpers (no model)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from chexpercept.curation import candidates, segmenters
from chexpercept.curation._rosalia import build_prompt, parse_output_text, sam_input
from chexpercept.curation.segmenters import (
    EmptyPredictionError,
    ProvidedSegmenter,
    Segmenter,
    SegmentResult,
    create_segmenter,
)
from chexpercept.errors import ConfigError
from chexpercept.images import write_mask
from chexpercept.layouts import CurationLayout


def test_instruction_for_bilateral_and_lists():
    for locs in (["right lung", "left lung"], ["left lung", "right lung"], []):
        mapped = candidates.location_text("edema", locs)
        assert candidates.instruction_for("edema", mapped) == "Segment the edema."
    mapped = candidates.location_text("opacity", ["left lung base", "right lung", "left lung base"])
    assert candidates.instruction_for("opacity", mapped) == \
        "Segment the opacity in the left lung base and right lung."


def test_unknown_segmenter_lists_the_choices():
    with pytest.raises(ConfigError, match="'sam'.*'provided', 'rosalia'"):
        create_segmenter("sam", None)


def test_provided_segmenter_reads_the_pair_mask(tmp_path):
    m = np.zeros((512, 512), bool)
    m[10:20, 10:20] = True
    write_mask(tmp_path / "s1" / "m.png", m)
    seg = ProvidedSegmenter(tmp_path, tmp_path / "cxr")
    out = seg.segment(np.zeros((1024, 1024), np.uint8), "Segment the edema.",
                      item={"dicom_id": "d", "seg_mask_path": "s1/m.png", "answer": "[SEG] ok"})
    assert out.text == "[SEG] ok" and out.mask.sum() == 400  # 10x10 at 512 -> 20x20 at 1024


class _Empty(Segmenter):
    name = "empty"

    def segment(self, image, instruction, *, item):
        raise EmptyPredictionError("ROSALIA returned no [SEG] mask (answer: 'No.')")


class _WrongShape(Segmenter):
    name = "wrong"

    def segment(self, image, instruction, *, item):
        return SegmentResult(np.zeros((512, 512), bool), "x")


@pytest.mark.parametrize("seg, reason", [(_Empty(), "no \\[SEG\\] mask"),
                                         (_WrongShape(), "shape \\(512, 512\\)")])
def test_bad_predictions_fail_the_item_with_a_reason(tmp_path, seg, reason):
    cxr = tmp_path / "cxr"
    cxr.mkdir()
    Image.fromarray(np.zeros((1024, 1024), np.uint8)).save(cxr / "d.png")
    layout = CurationLayout(tmp_path / "out")
    item = {"dicom_id": "d", "target": "edema", "pair_id": "s_positive_0", "location": [],
            "segmentation_source": "global"}
    outcome = candidates.process_item(item, layout, cxr_dir=cxr, segmenter=seg)
    assert outcome.status == "failed"
    assert re.search(reason, outcome.reason)
    assert not layout.candidate_mask("edema", "s_positive_0").exists()


def test_process_item_needs_a_created_model_segmenter(tmp_path):
    item = {"dicom_id": "d", "target": "edema", "pair_id": "p", "segmentation_source": "global"}
    with pytest.raises(ConfigError, match="create_segmenter"):
        candidates.process_item(item, CurationLayout(tmp_path), cxr_dir=tmp_path,
                                segmenter="rosalia")
    assert "rosalia" in segmenters.segmenter_names()


def test_rosalia_text_and_sam_input():
    decoded = "<s>A chat. USER: <im_start><image><im_end>\nSegment the edema. ASSISTANT: " \
              "Sure,  it is\n [SEG].</s>"
    assert parse_output_text(decoded) == "Sure, it is [SEG]."
    rgb = np.full((1024, 600, 3), 255, np.uint8)
    x = sam_input(rgb)
    assert x.shape == (3, 1024, 1024) and x.dtype == np.float32
    assert np.isclose(x[0, 0, 0], (255 - 123.675) / 58.395)
    assert (x[:, :, 600:] == 0).all()  # zero padding on the right


class _Conv:
    roles = ("USER", "ASSISTANT")

    def __init__(self):
        self.messages = []

    def copy(self):
        return _Conv()

    def append_message(self, role, text):
        self.messages.append((role, text))

    def get_prompt(self):
        return " ".join(f"{r}: {t}" for r, t in self.messages)


class _ConvLib:
    conv_templates = {"llava_v1": _Conv()}


def test_rosalia_prompt_wraps_the_image_token():
    tokens = {"DEFAULT_IMAGE_TOKEN": "<image>", "DEFAULT_IM_START_TOKEN": "<im_start>",
              "DEFAULT_IM_END_TOKEN": "<im_end>"}
    prompt = build_prompt(_ConvLib, "Segment the edema.", tokens)
    assert prompt == "USER: <im_start><image><im_end>\nSegment the edema. ASSISTANT: "
