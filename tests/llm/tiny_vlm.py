"""Build a tiny randomly initialised Qwen2-VL (tokenizer, processor, weights) with no downloads.

Used by ``tests/llm/test_hf_provider.py`` (CPU, transformers provider), the real-engine tests
(``tests/engine/``, vLLM's CPU build) and, loaded by path, ``benchmarks/gpu_stage_batching.py``.
The model's answers are gibberish; it exists to test plumbing (batching, padding, images, usage).

Two sizes:

- ``"test"``: hidden 32, 4 heads (head_dim 8), about 0.1 M parameters; fast on CPU.
- ``"gpu"``: hidden 128, 2 heads (head_dim 64, a size every vLLM attention backend supports),
  32 k-token context, output head scaled x50 so greedy decoding does not flip on bf16 noise
  (batched and one-at-a-time outputs can then be compared); still tiny.
"""

from __future__ import annotations

from pathlib import Path

#: Special tokens of the Qwen2-VL chat format (the processor looks them up by text).
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

#: ChatML template emitting one vision block per image part. It accepts the HF part types
#: (``image``), the OpenAI ones vLLM passes through (``image_url``) and ``image_pil``, and
#: string or list content. ``enable_thinking`` is ignored, as by many real templates.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] in ['image', 'image_url', 'image_pil'] %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: The same with Qwen3's thinking switch: ``enable_thinking=False`` opens the reply with an empty
#: ``<think></think>`` block, as the real Qwen3 templates do (the engine tests see it in the
#: prompt's token count).
THINKING_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}")

_CORPUS = (
    "You are an expert radiologist. Examine the chest X-ray image and answer each question.",
    "Is there any finding suggestive of effusion, cardiomegaly or opacity? Options: Yes No",
    "Which point(s) should the mask be expanded toward? red point, orange point, yellow point.",
    "Answer: 1\nAnswer: 2,3\nThe lesion is present in the right lung, lower zone.",
)

_SIZES = {
    "test": {"hidden": 32, "heads": 4, "kv_heads": 2, "layers": 2, "mrope": [2, 1, 1],
             "vision_dim": 32, "vision_heads": 2, "max_pos": 2048, "vocab": 400,
             "logit_scale": 1.0},
    "gpu": {"hidden": 128, "heads": 2, "kv_heads": 1, "layers": 2, "mrope": [16, 8, 8],
            "vision_dim": 64, "vision_heads": 1, "max_pos": 32768, "vocab": 1000,
            "logit_scale": 50.0},
}


def build_tokenizer(vocab_size: int = 400):
    """A byte-level BPE tokenizer (any text encodes) with the Qwen2-VL special tokens.

    Args:
        vocab_size: BPE vocabulary size before the special tokens.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` (eos ``<|im_end|>``, pad ``<|endoftext|>``).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tk.train_from_iterator(list(_CORPUS) * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>",
                                   additional_special_tokens=list(SPECIAL_TOKENS[1:]))


def build_tiny_qwen2_vl(out_dir: str | Path, *, size: str = "test", seed: int = 0,
                        chat_template: str = CHAT_TEMPLATE) -> Path:
    """Build a random Qwen2-VL and save model, tokenizer and processor to ``out_dir``.

    Args:
        out_dir: Folder to write (created); afterwards loadable with ``AutoProcessor`` /
            ``AutoModelForImageTextToText.from_pretrained(out_dir)`` and by vLLM.
        size: ``"test"`` or ``"gpu"`` (see the module docstring).
        seed: torch seed of the random weights (local generator state only).
        chat_template: The Jinja chat template saved with the processor.

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: For an unknown ``size``.
    """
    import torch
    from transformers import (
        AutoModelForImageTextToText,
        Qwen2VLConfig,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    if size not in _SIZES:
        raise ValueError(f"size must be one of {sorted(_SIZES)}, got {size!r}")
    dims = _SIZES[size]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(dims["vocab"])
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            size={"shortest_edge": 56 * 56, "longest_edge": 112 * 112}),
        tokenizer=tok, video_processor=Qwen2VLVideoProcessor(), chat_template=chat_template)
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tok), "hidden_size": dims["hidden"],
            "intermediate_size": 2 * dims["hidden"], "num_hidden_layers": dims["layers"],
            "num_attention_heads": dims["heads"], "num_key_value_heads": dims["kv_heads"],
            "max_position_embeddings": dims["max_pos"], "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                "mrope_section": dims["mrope"]},
            "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"]},
        vision_config={
            "depth": 1, "embed_dim": dims["vision_dim"], "hidden_size": dims["hidden"],
            "num_heads": dims["vision_heads"], "mlp_ratio": 2, "patch_size": 14,
            "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"])
    devices = ["cuda"] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config)
        with torch.no_grad():  # peaked logits: greedy argmax robust to kernel/batch numerics
            model.get_output_embeddings().weight.mul_(dims["logit_scale"])
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out
