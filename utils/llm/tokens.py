"""Rough prompt-token arithmetic for a chat request: text and images, per model family.

Used to warn before a run when a benchmark's longest dialogue cannot fit a model's context
(docs/engines.md, "Token budget"). Exact counts need the model's own processor; these rules are
the published resize arithmetic of each family and err on the high side:

- ``qwen`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL / 3.5 / 3.6, GLM-4.xV, Lingshu, HuatuoGPT-Vision):
  the image is resized to multiples of ``patch_size * merge_size`` pixels with its pixel count
  kept between ``min_pixels`` and ``max_pixels`` ("smart resize"), then one token per
  ``(patch_size * merge_size)^2`` pixels. Parameters come from the model folder's
  ``processor_config.json`` / ``preprocessor_config.json`` when there is one.
- ``fixed``: a constant per image (Gemma 3 / MedGemma: 256 soft tokens; Gemma 4: 280).
- ``internvl``: 448-pixel tiles chosen by aspect ratio (at most 12, plus a thumbnail when more
  than one), 256 tokens per tile.
- ``openai``: the high-detail tile rule (fit in 2048 x 2048, shortest side 768, 170 tokens per
  512-pixel tile plus 85).
- ``gemini``: 258 tokens per 768 x 768 tile (one tile for images up to 384 pixels a side).
- ``generic`` (unknown models): one token per 28 x 28 pixels, an upper bound for the families
  above at their default settings.

Text counts exactly with a local ``tokenizer.json`` (the ``tokenizers`` package), else at
:data:`CHARS_PER_TOKEN` characters per token, plus :data:`TOKENS_PER_MESSAGE` of chat-template
markup per message and :data:`TOKENS_PER_IMAGE_MARKUP` around each image.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from utils.llm._images import bounded_size

__all__ = ["ImageRule", "bounded_size", "context_from_config", "rule_for_model", "text_tokens"]

#: Characters per text token when no tokenizer is at hand (English prose in byte-level BPE
#: vocabularies is ~4; 3 leaves room for numbers and option lists).
CHARS_PER_TOKEN = 3.0
#: Chat-template markup per message (role header and end-of-turn tokens): generous for real
#: vocabularies (ChatML in Qwen's: 5), and enough for the tests' tiny 1,000-token vocabulary,
#: which spells role names in several tokens (measured: 9.4 a message).
TOKENS_PER_MESSAGE = 12
#: Markup around each image's tokens (vision start / end markers), an upper bound.
TOKENS_PER_IMAGE_MARKUP = 2


@dataclass(frozen=True)
class ImageRule:
    """How one model family turns an image into prompt tokens (see the module docstring).

    Attributes:
        kind: ``qwen``, ``fixed``, ``internvl``, ``openai``, ``gemini`` or ``generic``.
        params: The rule's parameters (``qwen``: ``patch_size``, ``merge_size``,
            ``min_pixels``, ``max_pixels``; ``fixed``: ``tokens``).
    """

    kind: str = "generic"
    params: dict[str, Any] = field(default_factory=dict)

    def tokens(self, width: int, height: int) -> int:
        """Prompt tokens of one ``width`` x ``height`` image (pixels) under this rule."""
        w, h = max(int(width), 1), max(int(height), 1)
        p = self.params
        if self.kind == "qwen":
            return _qwen_tokens(w, h, int(p.get("patch_size", 14)), int(p.get("merge_size", 2)),
                                int(p.get("min_pixels", 56 * 56)),
                                int(p.get("max_pixels", 28 * 28 * 16384)))
        if self.kind == "fixed":
            return int(p.get("tokens", 256))
        if self.kind == "internvl":
            return 256 * _internvl_tiles(w, h, int(p.get("max_tiles", 12)))
        if self.kind == "openai":
            return _openai_tokens(w, h)
        if self.kind == "gemini":
            if w <= 384 and h <= 384:
                return 258
            return 258 * math.ceil(w / 768) * math.ceil(h / 768)
        return math.ceil(w / 28) * math.ceil(h / 28)


def _qwen_tokens(w: int, h: int, patch: int, merge: int, min_pixels: int,
                 max_pixels: int) -> int:
    """Tokens after the Qwen2-VL "smart resize" (multiples of ``patch * merge`` pixels)."""
    factor = patch * merge
    h_bar = max(factor, round(h / factor) * factor)
    w_bar = max(factor, round(w / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        h_bar = max(factor, math.floor(h / beta / factor) * factor)
        w_bar = max(factor, math.floor(w / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        h_bar = math.ceil(h * beta / factor) * factor
        w_bar = math.ceil(w * beta / factor) * factor
    return (h_bar // factor) * (w_bar // factor)


def _internvl_tiles(w: int, h: int, max_tiles: int) -> int:
    """448-pixel tiles of InternVL's dynamic preprocessing (plus the thumbnail)."""
    aspect = w / h
    best, best_diff = (1, 1), float("inf")
    for n in range(1, max_tiles + 1):
        for i in range(1, n + 1):
            if n % i:
                continue
            j = n // i
            diff = abs(aspect - i / j)
            if diff < best_diff or (diff == best_diff and w * h > 0.5 * 448 * 448 * i * j):
                best, best_diff = (i, j), diff
    tiles = best[0] * best[1]
    return tiles + 1 if tiles > 1 else 1


def _openai_tokens(w: int, h: int) -> int:
    """OpenAI's high-detail image tokens (85 + 170 per 512-pixel tile)."""
    scale = min(1.0, 2048 / max(w, h))
    w, h = w * scale, h * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


#: Rules of the registry's model families, by the start of the HF id (lower case).
_FAMILY_RULES: tuple[tuple[str, ImageRule], ...] = (
    ("qwen/", ImageRule("qwen", {"patch_size": 16, "merge_size": 2})),
    ("zai-org/glm", ImageRule("qwen", {"patch_size": 14, "merge_size": 2})),
    ("lingshu", ImageRule("qwen", {"patch_size": 14, "merge_size": 2})),
    ("freedomintelligence/", ImageRule("qwen", {"patch_size": 14, "merge_size": 2})),
    ("opengvlab/internvl", ImageRule("internvl")),
    ("google/gemma-4", ImageRule("fixed", {"tokens": 280})),
    ("google/", ImageRule("fixed", {"tokens": 256})),
)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # absent or unusable: no rule from it
        return None
    return data if isinstance(data, dict) else None


def rule_from_folder(folder: str | Path) -> ImageRule | None:
    """The ``qwen`` rule of a local model folder's image processor, or None.

    Reads ``processor_config.json`` (transformers 5: an ``image_processor`` block) or
    ``preprocessor_config.json``; recognised when it has ``patch_size`` and ``merge_size``.
    ``size.shortest_edge`` / ``size.longest_edge`` (pixel counts in this family) or
    ``min_pixels`` / ``max_pixels`` bound the resize.
    """
    root = Path(folder)
    for name in ("processor_config.json", "preprocessor_config.json"):
        data = _read_json(root / name)
        if data is None:
            continue
        config = data.get("image_processor", data)
        if not isinstance(config, dict) or "patch_size" not in config \
                or "merge_size" not in config:
            continue
        size = config.get("size") if isinstance(config.get("size"), dict) else {}
        params = {"patch_size": config["patch_size"], "merge_size": config["merge_size"]}
        low = config.get("min_pixels") or size.get("shortest_edge")
        high = config.get("max_pixels") or size.get("longest_edge")
        if low:
            params["min_pixels"] = low
        if high:
            params["max_pixels"] = high
        return ImageRule("qwen", params)
    return None


def rule_for_model(model_id: str, folder: str | Path | None = None) -> ImageRule:
    """The image rule for a model: its folder's processor settings, else its family's.

    Args:
        model_id: HF id or API model name (``gpt-*`` -> ``openai``, ``gemini-*`` -> ``gemini``).
        folder: A local model folder, or None.

    Returns:
        The rule (``generic`` when nothing is known).
    """
    if folder is not None and Path(folder).is_dir():
        found = rule_from_folder(folder)
        if found is not None:
            return found
    name = model_id.lower()
    if name.startswith(("gpt-", "o1", "o3", "o4")):
        return ImageRule("openai")
    if name.startswith("gemini"):
        return ImageRule("gemini")
    for prefix, rule in _FAMILY_RULES:
        if name.startswith(prefix):
            return rule
    return ImageRule()


def context_from_config(folder: str | Path) -> int | None:
    """The context length a model folder's ``config.json`` declares (what vLLM defaults to).

    Looks at ``max_position_embeddings`` at the top level and in ``text_config``.
    """
    data = _read_json(Path(folder) / "config.json")
    if data is None:
        return None
    for block in (data.get("text_config"), data):
        if isinstance(block, dict) and isinstance(block.get("max_position_embeddings"), int):
            return int(block["max_position_embeddings"])
    return None


@lru_cache(maxsize=4)
def _tokenizer(path: str) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        return Tokenizer.from_file(path)
    except Exception:  # noqa: BLE001 - a tokenizer we cannot read falls back to the estimate
        return None


def text_tokens(text: str, tokenizer_file: str | Path | None = None) -> int:
    """Tokens of ``text``: exact with a readable ``tokenizer.json``, else estimated."""
    if tokenizer_file is not None:
        tok = _tokenizer(str(tokenizer_file))
        if tok is not None:
            return len(tok.encode(text, add_special_tokens=False).ids)
    return math.ceil(len(text) / CHARS_PER_TOKEN)
