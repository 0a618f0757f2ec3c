"""Stage 00.01 segmenter ``rosalia``: ROSALIA (LISA architecture) candidate masks on a CUDA GPU.

Follows LISA's ``chat.py`` as the release's ``use_rosalia.py`` did (docs/curation.md,
"Candidate masks"): ``LISAForCausalLM`` from the ``setup.sh`` clone of LISA
(``source_data_curation.lisa_path``, default ``src/00_source_data_curation/LISA``), imported only
when the backend is created through :func:`utils.deps.import_from_checkout`; local weights
``rosalia_weights`` (``checkone/ROSALIA-7B-v1``), tokenizer ``rosalia_tokenizer``
(``xinlai/LISA-7B-v1``: slow, right padding, max length 512, pad = unk), vision tower
``rosalia_vision_tower`` (``openai/clip-vit-large-patch14``); nothing is downloaded. bf16 on
``cuda`` (LISA hard-codes ``.cuda()``); the GPU is the first one of ``CUDA_VISIBLE_DEVICES``.

Per pair: the prepared CXR (1024 x 1024 working frame) as RGB; the ``llava_v1`` prompt
``<im_start><image><im_end>`` + newline + instruction; the CLIP branch via
``CLIPImageProcessor``, the
SAM branch via ``ResizeLongestSide(1024)``, pixel mean/std normalisation and zero padding to
1024 x 1024; ``model.evaluate(..., max_new_tokens)``; mask = first ``[SEG]`` mask logits > 0.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from chexpercept.curation.segmenters import EmptyPredictionError, Segmenter, SegmentResult
from chexpercept.errors import ConfigError
from chexpercept.layouts import repo_root
from utils.deps import import_from_checkout, require

if TYPE_CHECKING:
    from chexpercept.config_schema import ChexperceptConfig, CurationConfig

logger = logging.getLogger(__name__)

_FEATURE = "source_data_curation.segmenter 'rosalia'"
#: SAM pixel statistics (RGB, 0-255) and input side (LISA chat.py; SAM ViT-H).
SAM_PIXEL_MEAN = (123.675, 116.28, 103.53)
SAM_PIXEL_STD = (58.395, 57.12, 57.375)
SAM_IMAGE_SIZE = 1024
#: Tokenizer settings of the release (docs/curation.md, "Candidate masks").
MODEL_MAX_LENGTH = 512
CONV_TEMPLATE = "llava_v1"
LISA_MODULES = ("model.LISA", "model.llava.conversation", "model.llava.mm_utils",
                "model.segment_anything.utils.transforms", "utils.utils")


def default_lisa_path() -> Path:
    """``src/00_source_data_curation/LISA`` (where ``setup.sh`` clones LISA)."""
    return repo_root() / "src" / "00_source_data_curation" / "LISA"


def parse_output_text(decoded: str) -> str:
    """The answer part of a decoded LISA output: after ``ASSISTANT:``, before ``</s>``.

    Newlines are dropped and double spaces collapsed (chat.py), e.g.
    ``"... ASSISTANT: Sure, [SEG].</s>"`` -> ``"Sure, [SEG]."``.
    """
    text = decoded.split("ASSISTANT:", 1)[-1].split("</s>", 1)[0]
    text = text.replace("\n", "")
    while "  " in text:
        text = text.replace("  ", " ")
    return text.strip()


def build_prompt(conversation_lib: ModuleType, instruction: str, tokens: Mapping[str, str],
                 use_mm_start_end: bool = True) -> str:
    """The ``llava_v1`` prompt: user = image token + newline + instruction, empty assistant.

    Args:
        conversation_lib: LISA's ``model.llava.conversation``.
        instruction: E.g. ``Segment the edema in the left lung base.``.
        tokens: ``DEFAULT_IMAGE_TOKEN``, ``DEFAULT_IM_START_TOKEN``, ``DEFAULT_IM_END_TOKEN``.
        use_mm_start_end: Wrap the image token in im_start / im_end (release: yes).
    """
    conv = conversation_lib.conv_templates[CONV_TEMPLATE].copy()
    conv.messages = []
    image_token = tokens["DEFAULT_IMAGE_TOKEN"]
    prompt = image_token + "\n" + instruction
    if use_mm_start_end:
        prompt = prompt.replace(image_token, tokens["DEFAULT_IM_START_TOKEN"] + image_token
                                + tokens["DEFAULT_IM_END_TOKEN"])
    conv.append_message(conv.roles[0], prompt)
    conv.append_message(conv.roles[1], "")
    return conv.get_prompt()


def sam_input(resized_rgb: np.ndarray) -> np.ndarray:
    """SAM branch input: normalise with :data:`SAM_PIXEL_MEAN` / :data:`SAM_PIXEL_STD` and pad.

    Args:
        resized_rgb: (h, w, 3) uint8 after ``ResizeLongestSide(1024)`` (long side 1024).

    Returns:
        (3, 1024, 1024) float32, zero padding at the bottom / right (chat.py ``preprocess``).
    """
    x = (resized_rgb.astype(np.float32) - np.array(SAM_PIXEL_MEAN, np.float32)) \
        / np.array(SAM_PIXEL_STD, np.float32)
    out = np.zeros((3, SAM_IMAGE_SIZE, SAM_IMAGE_SIZE), np.float32)
    h, w = x.shape[:2]
    out[:, :h, :w] = x.transpose(2, 0, 1)
    return out


class RosaliaSegmenter(Segmenter):
    """ROSALIA on one pair at a time (the loaded LISA model, tokenizer and processors)."""

    name = "rosalia"

    def __init__(self, model: Any, tokenizer: Any, clip_processor: Any, lisa: dict[str, ModuleType],
                 *, device: str = "cuda", max_new_tokens: int = 512) -> None:
        """Wrap a loaded model (see :func:`load_rosalia`)."""
        self.model = model
        self.tokenizer = tokenizer
        self.clip_processor = clip_processor
        self.lisa = lisa
        self.device = device
        self.max_new_tokens = max_new_tokens
        consts = lisa["utils.utils"]
        self.tokens = {k: getattr(consts, k) for k in
                       ("DEFAULT_IMAGE_TOKEN", "DEFAULT_IM_START_TOKEN", "DEFAULT_IM_END_TOKEN")}
        self.image_token_index = consts.IMAGE_TOKEN_INDEX
        self.resize = lisa["model.segment_anything.utils.transforms"].ResizeLongestSide(
            SAM_IMAGE_SIZE)

    def segment(self, image: np.ndarray, instruction: str, *,
                item: Mapping[str, Any]) -> SegmentResult:
        """Run ROSALIA on a (1024, 1024) uint8 CXR; the first ``[SEG]`` mask, logits > 0.

        Raises:
            EmptyPredictionError: If the answer has no ``[SEG]`` mask (the item fails).
        """
        import torch

        rgb = np.repeat(np.asarray(image, np.uint8)[..., None], 3, axis=2)
        dtype = torch.bfloat16
        clip = self.clip_processor.preprocess(rgb, return_tensors="pt")["pixel_values"][0]
        image_clip = clip.unsqueeze(0).to(self.device, dtype)
        resized = self.resize.apply_image(rgb)
        image_sam = torch.from_numpy(sam_input(resized)).unsqueeze(0).to(self.device, dtype)
        prompt = build_prompt(self.lisa["model.llava.conversation"], instruction, self.tokens)
        input_ids = self.lisa["model.llava.mm_utils"].tokenizer_image_token(
            prompt, self.tokenizer, return_tensors="pt").unsqueeze(0).to(self.device)
        with torch.inference_mode():
            output_ids, pred_masks = self.model.evaluate(
                image_clip, image_sam, input_ids, [resized.shape[:2]], [rgb.shape[:2]],
                max_new_tokens=self.max_new_tokens, tokenizer=self.tokenizer)
        ids = output_ids[0][output_ids[0] != self.image_token_index]
        text = parse_output_text(self.tokenizer.decode(ids, skip_special_tokens=False))
        if not len(pred_masks) or pred_masks[0].shape[0] == 0:
            raise EmptyPredictionError(f"ROSALIA returned no [SEG] mask (answer: {text!r})")
        mask = (pred_masks[0][0] > 0).cpu().numpy()
        return SegmentResult(mask, text)


def _check_paths(cur: CurationConfig) -> dict[str, Path]:
    problems, paths = [], {}
    wanted = {"rosalia_weights": cur.rosalia_weights,
              "rosalia_tokenizer": cur.rosalia_tokenizer or cur.rosalia_weights,
              "rosalia_vision_tower": cur.rosalia_vision_tower}
    hints = {"rosalia_weights": "a local copy of checkone/ROSALIA-7B-v1",
             "rosalia_tokenizer": "a local copy of xinlai/LISA-7B-v1",
             "rosalia_vision_tower": "a local copy of openai/clip-vit-large-patch14"}
    for key, value in wanted.items():
        if not value:
            problems.append(f"source_data_curation.{key} is not set ({hints[key]})")
        elif not Path(value).expanduser().exists():
            problems.append(f"source_data_curation.{key} {value} does not exist")
        else:
            paths[key] = Path(value).expanduser()
    if problems:
        raise ConfigError(f"{_FEATURE} needs local weights (nothing is downloaded): "
                          + "; ".join(problems))
    return paths


def load_rosalia(cur: CurationConfig) -> RosaliaSegmenter:
    """Load ROSALIA from local folders onto the GPU (bf16).

    Args:
        cur: ``source_data_curation`` (``rosalia_*`` keys, ``lisa_path``).

    Returns:
        The segmenter.

    Raises:
        ConfigError: Naming each missing weights key / path, or when no CUDA GPU is visible.
        MissingDependencyError: If torch / transformers or the LISA checkout are missing.
    """
    paths = _check_paths(cur)
    torch = require("torch", "rosalia", _FEATURE)
    transformers = require("transformers", "rosalia", _FEATURE)
    if not torch.cuda.is_available():
        raise ConfigError(f"{_FEATURE} needs a CUDA GPU (LISA hard-codes .cuda()); choose it "
                          "with CUDA_VISIBLE_DEVICES, or use segmenter: provided")
    lisa = import_from_checkout(
        Path(cur.lisa_path).expanduser() if cur.lisa_path else default_lisa_path(), LISA_MODULES,
        feature=_FEATURE, fix="run `bash setup.sh` (clones LISA) or set "
                              "source_data_curation.lisa_path to a LISA checkout")
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        str(paths["rosalia_tokenizer"]), model_max_length=MODEL_MAX_LENGTH,
        padding_side="right", use_fast=False, local_files_only=True)
    tokenizer.pad_token = tokenizer.unk_token
    seg_token_idx = tokenizer("[SEG]", add_special_tokens=False).input_ids[0]
    vision_tower = str(paths["rosalia_vision_tower"])
    model = lisa["model.LISA"].LISAForCausalLM.from_pretrained(
        str(paths["rosalia_weights"]), low_cpu_mem_usage=True, vision_tower=vision_tower,
        seg_token_idx=seg_token_idx, torch_dtype=torch.bfloat16, local_files_only=True)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.bos_token_id = tokenizer.bos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.get_model().initialize_vision_modules(model.get_model().config)
    tower = model.get_model().get_vision_tower()
    tower.to(dtype=torch.bfloat16)
    model = model.bfloat16().cuda()
    tower.to(device="cuda")
    model.eval()
    clip = transformers.CLIPImageProcessor.from_pretrained(vision_tower, local_files_only=True)
    logger.info("ROSALIA loaded from %s (tokenizer %s, vision tower %s)",
                paths["rosalia_weights"], paths["rosalia_tokenizer"], vision_tower)
    return RosaliaSegmenter(model, tokenizer, clip, lisa, device="cuda",
                            max_new_tokens=cur.rosalia_max_new_tokens)


def create_rosalia_segmenter(cfg: ChexperceptConfig) -> RosaliaSegmenter:
    """Registry factory."""
    return load_rosalia(cfg.source_data_curation)
