"""Realistic raw replies of the model families Stage 03 meets, with the strict parse expected.

Each row is a ``Reply``; ``test_parser_table.py`` runs them all. ``rule`` names the parser rule
(docs/parsing.md, "Parser rules") or the negative case that the row exercises; the option lists
are the benchmark's question shapes (as at the top of ``test_parsing.py``).
"""

from __future__ import annotations

from typing import NamedTuple

YES_NO = ("Yes", "No")
POINTS = ("red point", "orange point", "yellow point", "None")
MASKS = ("1st mask", "2nd mask", "3rd mask", "4th mask")
ZONES = ("1 zone", "2 zones", "3 zones", "4 zones or more")
SEVERITY = ("Less than 1/3 of the right lung area",
            "1/3 or more but less than 2/3 of the right lung area",
            "2/3 or more of the right lung area")
LOCATION = ("the right costophrenic angle",
            "the intersection of the right lateral lung and the right mid zone lung",
            "the intersection of the left medial lung and the left upper zone lung",
            "None of the above (options 1-3)")
COMPARISON = ("Both lesions are similar in size.",
              "The left lung lesion is larger than the right lung lesion.",
              "The right lung lesion is larger than the left lung lesion.",
              "The lesion is present in only one lung (left or right).")

#: Question kind -> option texts in order.
OPTIONS = {"yes_no": YES_NO, "points": POINTS, "masks": MASKS, "zones": ZONES,
           "severity": SEVERITY, "location": LOCATION, "comparison": COMPARISON}

FAMILIES = ("reasoning-closed", "reasoning-unclosed", "gemma", "qwen", "glm", "internvl",
            "lingshu", "huatuogpt", "llama", "mistral", "api-openai", "api-gemini", "api-claude")

#: Rules added with docs/parsing.md's "Parser rules" revision; each must have rows.
NEW_RULES = frozenset({
    "justify-because", "justify-dash", "justify-period", "justify-colon", "justify-semicolon",
    "justify-bracket", "justify-comma-echo", "hedge-justify", "number-after-separator",
    "other-option-text", "bare-words", "echo", "special-tokens", "next-turn", "prompt-echo",
    "turn-closed", "full-width", "unbalanced-close", "unbalanced-open", "option-text-none-full",
    "option-text-short", "option-text-justify", "none-phrase", "boxed-echo", "boxed-text",
    "boxed-justify", "box-justify", "final-response-heading", "thinking-heading-unclosed",
    "blocked", "quotes",
})
#: Rules of the parser before that revision (rows still exercise them).
OLD_RULES = frozenset({
    "plain", "bare", "reasoning", "markdown", "glm-box", "answer-tag", "multi", "option-text",
    "phrase", "last-wins", "several", "none-combined", "no-answer", "unclosed", "empty",
    "provider-refused", "hedge", "out-of-range", "letter", "refusal", "truncated",
})
#: Negative kinds every family must include, each as a set of rule tags that counts.
NEGATIVE_KINDS = {
    "hedge": frozenset({"hedge", "hedge-justify"}),
    "refusal": frozenset({"refusal"}),
    "out-of-range": frozenset({"out-of-range"}),
    "letter": frozenset({"letter"}),
    "truncated": frozenset({"truncated"}),
}

OK, UNP, TRUNC, REF, BLK = "ok", "unparseable", "truncated", "refused", "blocked"


class Reply(NamedTuple):
    """One raw reply and the parse expected for it."""

    family: str
    kind: str
    multi_select: bool
    finish_reason: str | None
    raw: str
    answer: tuple[int, ...] | None
    status: str
    rule: str
    completion_status: str = "ok"


S, M = False, True  # single choice / multi-select

_THINK = ("The overlay is drawn on a frontal chest radiograph. The effusion blunts the right "
          "costophrenic angle and the meniscus rises to the lower zone. Option 1 would fit if "
          "the contour stopped at the lateral pleura, but it crosses it by about 2 cm.")
_POINTS_THINK = ("The red point sits on the opacity, the orange point is in aerated lung and "
                 "the yellow point is on the meniscus. So points 1 and 3 lie on the lesion.")

REPLIES: list[Reply] = [
    # --- reasoning-closed: DeepSeek-R1 / Qwen3 thinking, reasoning ends with </think> ---
    Reply("reasoning-closed", "points", M, "stop",
          f"<think>\n{_POINTS_THINK}\n</think>\n\nAnswer: 1, 3", (1, 3), OK, "reasoning"),
    Reply("reasoning-closed", "yes_no", S, "stop",
          f"{_THINK}\n</think>\n\nAnswer: 2 because the mask spills beyond the lateral "
          "pleural edge.", (2,), OK, "justify-because"),
    Reply("reasoning-closed", "masks", S, "stop",
          f"<think>\n{_THINK} Answer: 3 maybe?\n</think>\n\nAnswer: 2 - the second mask "
          "follows the meniscus", (2,), OK, "justify-dash"),
    Reply("reasoning-closed", "zones", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\nAnswer: 3. the lesion reaches the upper zone",
          (3,), OK, "justify-period"),
    Reply("reasoning-closed", "yes_no", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\n**Answer: 2 (No)**<|im_end|>", (2,), OK, "echo"),
    Reply("reasoning-closed", "masks", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\nAnswer: 2 or 3", None, UNP, "hedge"),
    Reply("reasoning-closed", "masks", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\nAnswer: 5", None, UNP, "out-of-range"),
    Reply("reasoning-closed", "yes_no", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\nAnswer: B", None, UNP, "letter"),
    Reply("reasoning-closed", "yes_no", S, "stop",
          "<think>\nThe user asks for a reading of a radiograph.\n</think>\n\nI'm sorry, but I "
          "can't provide a diagnostic interpretation of this radiograph.", None, REF,
          "refusal"),
    Reply("reasoning-closed", "yes_no", S, "length",
          f"<think>\n{_THINK}\n</think>\n\nAfter weighing the overlay against the lesion edge",
          None, TRUNC, "truncated"),
    Reply("reasoning-closed", "zones", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\nThe final answer is $\\boxed{{2: 2 zones}}$",
          (2,), OK, "boxed-echo"),
    Reply("reasoning-closed", "yes_no", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\n$\\boxed{{\\text{{2}}}}$", (2,), OK, "boxed-text"),
    Reply("reasoning-closed", "location", M, "stop",
          f"<think>\n{_THINK}\n</think>\n\nAnswer: None of the above (options 1-3)",
          (4,), OK, "option-text-none-full"),
    Reply("reasoning-closed", "yes_no", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\nAnswer: 2 the mask is too large", None, UNP,
          "bare-words"),
    Reply("reasoning-closed", "yes_no", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\nAnswer: 1 - No", None, UNP, "other-option-text"),
    Reply("reasoning-closed", "comparison", S, "stop",
          f"<think>\n{_THINK} Answer: 1?\n</think>\n\nAnswer: 3: The right lung lesion is "
          "larger than the left lung lesion.", (3,), OK, "echo"),
    Reply("reasoning-closed", "yes_no", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\nAnswer：２（No）", (2,), OK, "full-width"),
    Reply("reasoning-closed", "yes_no", S, "stop",
          "<think>\n\n</think>\n\nAnswer: 1<|im_end|>", (1,), OK, "special-tokens"),

    # --- reasoning-unclosed: cut off inside <think>, or the opener sits in the template ---
    Reply("reasoning-unclosed", "yes_no", S, "length",
          f"<think>\n{_THINK} The overlay covers the right base but the lateral", None, TRUNC,
          "truncated"),
    Reply("reasoning-unclosed", "yes_no", S, "stop",
          f"<think>\n{_THINK} So the answer is 1.", None, UNP, "unclosed"),
    Reply("reasoning-unclosed", "yes_no", S, "length",
          f"<think>\n{_THINK} Answer: 2 seems right since the contour<|im_end|>", None, UNP,
          "turn-closed"),
    Reply("reasoning-unclosed", "points", M, "length",
          "<unused94>thought\nThe red and yellow points both", None, TRUNC, "truncated"),
    Reply("reasoning-unclosed", "yes_no", S, "length",
          "Okay, so I need to decide whether the mask matches. Answer: 2, but", None, TRUNC,
          "truncated"),
    Reply("reasoning-unclosed", "yes_no", S, "stop",
          f"Okay, {_THINK}\n\nAnswer: 2 because it crosses the pleura", (2,), OK,
          "justify-because"),
    Reply("reasoning-unclosed", "masks", S, "stop",
          "Alright, comparing the four masks, the 2nd and 3rd both hug the meniscus.\n\n"
          "Answer: 2 or 3", None, UNP, "hedge"),
    Reply("reasoning-unclosed", "zones", S, "stop",
          "Hmm, the lesion spans the lower and middle zones.\n\nAnswer: 5", None, UNP,
          "out-of-range"),
    Reply("reasoning-unclosed", "yes_no", S, "stop",
          "Let me think about which option fits.\n\nAnswer: (B)", None, UNP, "letter"),
    Reply("reasoning-unclosed", "yes_no", S, "stop",
          "Okay, the user wants a reading of this radiograph. I'm sorry, but I can't provide "
          "medical interpretations.", None, REF, "refusal"),
    Reply("reasoning-unclosed", "yes_no", S, "length",
          "<think>\nHmm, option (2) No seems right, but wait", None, TRUNC, "truncated"),
    Reply("reasoning-unclosed", "points", M, "stop",
          f"<think>\n{_POINTS_THINK} So 1, 3", None, UNP, "unclosed"),
    Reply("reasoning-unclosed", "yes_no", S, "stop",
          f"<think>\n{_THINK}<|im_end|>\n<|im_start|>user\nAnswer: 1", None, UNP, "unclosed"),
    Reply("reasoning-unclosed", "yes_no", S, "length",
          f"<think>\n{_THINK}\n</think", None, TRUNC, "truncated"),
    Reply("reasoning-unclosed", "masks", S, "stop",
          "Wait, the 3rd mask includes the hilum, so the final answer is 2. the 3rd mask is "
          "too wide", (2,), OK, "justify-period"),
    Reply("reasoning-unclosed", "yes_no", S, "stop",
          f"<think>\n{_THINK} Answer: １", None, UNP, "unclosed"),
    Reply("reasoning-unclosed", "zones", S, "stop",
          "Okay. Counting the zones the opacity touches: lower and middle.\n\nAnswer: 2 - 3",
          None, UNP, "number-after-separator"),

    # --- gemma: Gemma 3 / MedGemma, <unused94>thought..<unused95>, <end_of_turn> ---
    Reply("gemma", "yes_no", S, "stop", "Answer: 2<end_of_turn>", (2,), OK, "special-tokens"),
    Reply("gemma", "points", M, "stop",
          f"<unused94>thought\n{_POINTS_THINK}<unused95>Answer: 1, 3<end_of_turn>", (1, 3), OK,
          "reasoning"),
    Reply("gemma", "masks", S, "stop",
          "<start_of_turn>model\nAnswer: 3 - 3rd mask<end_of_turn>\n<eos>", (3,), OK, "echo"),
    Reply("gemma", "yes_no", S, "stop",
          "**Answer:** 2\n\n**Explanation:** The contour extends beyond the lesion at the "
          "lateral costophrenic angle.<end_of_turn>", (2,), OK, "markdown"),
    Reply("gemma", "yes_no", S, "stop",
          "Answer: 2<end_of_turn>\n<start_of_turn>user\nAre you sure? Answer: 1<end_of_turn>",
          (2,), OK, "next-turn"),
    Reply("gemma", "zones", S, "length",
          "<unused94>thought\nThe lesion spans the lower zone and reaches", None, TRUNC,
          "truncated"),
    Reply("gemma", "zones", S, "stop", "Answer: 2 or 3<end_of_turn>", None, UNP, "hedge"),
    Reply("gemma", "zones", S, "stop", "Answer: 6<end_of_turn>", None, UNP, "out-of-range"),
    Reply("gemma", "yes_no", S, "stop", "Answer: (B)<end_of_turn>", None, UNP, "letter"),
    Reply("gemma", "yes_no", S, "stop",
          "I am unable to provide a medical diagnosis from this image.<end_of_turn>", None, REF,
          "refusal"),
    Reply("gemma", "yes_no", S, "stop",
          "Answer: 2 (the contour extends beyond the lesion)<end_of_turn>", (2,), OK,
          "justify-bracket"),
    Reply("gemma", "yes_no", S, "stop",
          f"<unused94>thought\n{_THINK}<unused95>The answer is 1 because the mask follows the "
          "border.<end_of_turn>", (1,), OK, "justify-because"),
    Reply("gemma", "location", M, "stop", "Answer: None of the above<end_of_turn>", (4,), OK,
          "option-text-short"),
    Reply("gemma", "yes_no", S, "stop", "Answer: 2\n<eos>", (2,), OK, "special-tokens"),
    Reply("gemma", "yes_no", S, "stop",
          "Answer: 1 - the overlay covers it<end_of_turn>", (1,), OK, "justify-dash"),
    Reply("gemma", "yes_no", S, "stop", "The mask covers the effusion well.<end_of_turn>",
          None, UNP, "no-answer"),
    Reply("gemma", "yes_no", S, "stop",
          f"<unused94>thought\n{_THINK} Answer: 2<unused95><end_of_turn>", None, UNP, "empty"),
    Reply("gemma", "points", M, "stop", "Answer: None of the above<end_of_turn>", (4,), OK,
          "none-phrase"),

    # --- qwen: Qwen2.5-VL / Qwen3-VL, ChatML <|im_end|> ---
    Reply("qwen", "yes_no", S, "stop", "Answer: 2<|im_end|>", (2,), OK, "special-tokens"),
    Reply("qwen", "yes_no", S, "stop",
          "Answer: 2<|im_end|>\n<|im_start|>user\nAnswer: 1<|im_end|>", (2,), OK, "next-turn"),
    Reply("qwen", "yes_no", S, "stop", "<|im_start|>assistant\nAnswer: 1<|im_end|>", (1,), OK,
          "special-tokens"),
    Reply("qwen", "yes_no", S, "stop", "Answer：２<|im_end|>", (2,), OK, "full-width"),
    Reply("qwen", "points", M, "stop", "Answer: 1、3<|im_end|>", (1, 3), OK, "full-width"),
    Reply("qwen", "yes_no", S, "stop", "(2) No<|im_end|>", (2,), OK, "echo"),
    Reply("qwen", "yes_no", S, "stop", "Answer: 2)<|im_end|>", (2,), OK, "unbalanced-close"),
    Reply("qwen", "yes_no", S, "stop", "Answer: (2<|im_end|>", None, UNP, "unbalanced-open"),
    Reply("qwen", "points", M, "stop", "Answer: 2/4<|im_end|>", None, UNP, "hedge"),
    Reply("qwen", "yes_no", S, "stop", "Answer: 0<|im_end|>", None, UNP, "out-of-range"),
    Reply("qwen", "yes_no", S, "stop", "Answer: A<|im_end|>", None, UNP, "letter"),
    Reply("qwen", "yes_no", S, "stop", "I'm sorry, I cannot assist with that request.<|im_end|>",
          None, REF, "refusal"),
    Reply("qwen", "yes_no", S, "length", "The overlay appears to extend along the lateral",
          None, TRUNC, "truncated"),
    Reply("qwen", "zones", S, "stop", "Answer: 2 - 2 zones<|im_end|>", (2,), OK, "echo"),
    Reply("qwen", "yes_no", S, "stop", "Answer: 2 zones<|im_end|>", None, UNP, "bare-words"),
    Reply("qwen", "comparison", S, "stop",
          f"<think>\n{_THINK}\n</think>\n\nAnswer: 3 because the right lung lesion is "
          "bigger<|im_end|>", (3,), OK, "justify-because"),
    Reply("qwen", "yes_no", S, "stop", "Answer: 2<|endoftext|>", (2,), OK, "special-tokens"),
    Reply("qwen", "yes_no", S, "length",
          "The mask covers the effusion.<|im_end|>\n<|im_start|>user\nNow look at the", None,
          UNP, "turn-closed"),

    # --- glm: GLM-4.5V / GLM-4.1V-Thinking, <answer> and <|begin_of_box|> ---
    Reply("glm", "yes_no", S, "stop",
          f"<think>{_THINK}</think><answer><|begin_of_box|>2<|end_of_box|></answer>", (2,), OK,
          "glm-box"),
    Reply("glm", "yes_no", S, "stop",
          f"<think>{_THINK}</think><answer>The mask covers the lesion. <|begin_of_box|>1"
          "<|end_of_box|></answer><|user|>", (1,), OK, "special-tokens"),
    Reply("glm", "masks", S, "stop",
          f"[gMASK]<sop><|assistant|>\n<think>{_THINK}</think><answer><|begin_of_box|>3"
          "<|end_of_box|></answer>", (3,), OK, "special-tokens"),
    Reply("glm", "yes_no", S, "stop",
          f"<think>{_THINK}</think><answer>2 - the mask spills past the pleura</answer>", (2,),
          OK, "justify-dash"),
    Reply("glm", "yes_no", S, "stop",
          f"<think>{_THINK}</think><answer><|begin_of_box|>(2) No<|end_of_box|></answer>"
          "<|endoftext|>", (2,), OK, "echo"),
    Reply("glm", "zones", S, "stop",
          f"<think>{_THINK}</think><answer><|begin_of_box|>2 or 3<|end_of_box|></answer>",
          None, UNP, "hedge"),
    Reply("glm", "zones", S, "stop",
          f"<think>{_THINK}</think><answer><|begin_of_box|>5<|end_of_box|></answer>", None, UNP,
          "out-of-range"),
    Reply("glm", "yes_no", S, "stop",
          f"<think>{_THINK}</think><answer><|begin_of_box|>B<|end_of_box|></answer>", None, UNP,
          "letter"),
    Reply("glm", "yes_no", S, "stop",
          "<think>The user asks me to read a radiograph.</think><answer>I'm sorry, I can't help "
          "with this medical image.</answer>", None, REF, "refusal"),
    Reply("glm", "zones", S, "length", "<think>The lesion spans the lower", None, TRUNC,
          "truncated"),
    Reply("glm", "points", M, "stop",
          f"<think>{_POINTS_THINK}</think><answer><|begin_of_box|>1, 3<|end_of_box|></answer>",
          (1, 3), OK, "multi"),
    Reply("glm", "location", M, "stop",
          f"<think>{_THINK}</think><answer><|begin_of_box|>None of the above (options 1-3)"
          "<|end_of_box|></answer>", (4,), OK, "option-text-none-full"),
    Reply("glm", "yes_no", S, "stop",
          f"<think>{_THINK}</think><answer>答案：<|begin_of_box|>２<|end_of_box|></answer>",
          (2,), OK, "full-width"),
    Reply("glm", "yes_no", S, "stop",
          f"<think>{_THINK}</think><answer><|begin_of_box|>2<|end_of_box|> because the contour "
          "extends beyond the lesion</answer>", (2,), OK, "box-justify"),
    Reply("glm", "masks", S, "stop",
          f"<think>{_THINK}</think><answer><|begin_of_box|>2nd mask<|end_of_box|></answer>"
          "<|user|>", (2,), OK, "option-text"),
    Reply("glm", "yes_no", S, "stop",
          f"<think>{_THINK}</think><answer>The overlay misses the costophrenic angle.</answer>",
          None, UNP, "no-answer"),
    Reply("glm", "yes_no", S, "stop",
          f"<think>{_THINK}</think><answer><|begin_of_box|>2]<|end_of_box|></answer>", (2,), OK,
          "unbalanced-close"),

    # --- internvl: InternVL 2.5 / 3 / 3.5, ChatML <|im_end|> ---
    Reply("internvl", "yes_no", S, "stop", "Answer: 2<|im_end|>", (2,), OK, "special-tokens"),
    Reply("internvl", "yes_no", S, "stop", "2<|im_end|>", (2,), OK, "bare"),
    Reply("internvl", "yes_no", S, "stop", "The answer is (1) Yes.<|im_end|>", (1,), OK,
          "echo"),
    Reply("internvl", "yes_no", S, "stop", "Answer: 1. Yes<|im_end|>", (1,), OK, "echo"),
    Reply("internvl", "masks", S, "stop", "[3] 3rd mask<|im_end|>", (3,), OK, "echo"),
    Reply("internvl", "yes_no", S, "stop",
          "Answer: 2: the mask overshoots the lesion<|im_end|>", (2,), OK, "justify-colon"),
    Reply("internvl", "points", M, "stop",
          f"<think>\n{_THINK}\n</think>\n\nAnswer: 4<|im_end|>", (4,), OK, "reasoning"),
    Reply("internvl", "yes_no", S, "stop", "Answer: 1 or 2<|im_end|>", None, UNP, "hedge"),
    Reply("internvl", "masks", S, "stop", "Answer: 9<|im_end|>", None, UNP, "out-of-range"),
    Reply("internvl", "masks", S, "stop", "Answer: C<|im_end|>", None, UNP, "letter"),
    Reply("internvl", "yes_no", S, "stop",
          "Sorry, as an AI I cannot provide medical advice.<|im_end|>", None, REF, "refusal"),
    Reply("internvl", "yes_no", S, "length", "The mask seems to extend", None, TRUNC,
          "truncated"),
    Reply("internvl", "points", M, "stop", "Answer: 1 and 3<|im_end|>", (1, 3), OK, "multi"),
    Reply("internvl", "zones", S, "stop", "Answer: 2, 3<|im_end|>", None, UNP, "several"),
    Reply("internvl", "zones", S, "stop", "Answer: 3 (3 zones)<|im_end|>", (3,), OK, "echo"),
    Reply("internvl", "zones", S, "stop", "Answer: 2 zones involved<|im_end|>", None, UNP,
          "bare-words"),
    Reply("internvl", "yes_no", S, "stop",
          "Answer: 2\n<|im_end|>\n<|im_start|>assistant\nAnswer: 1", (2,), OK, "next-turn"),

    # --- lingshu: Lingshu-7B/32B (Qwen2.5-VL based), medical phrasing ---
    Reply("lingshu", "yes_no", S, "stop", "Answer: 2<|im_end|>", (2,), OK, "special-tokens"),
    Reply("lingshu", "yes_no", S, "stop",
          "The mask extends beyond the lesion boundary at the lateral costophrenic angle.\n"
          "Answer: 1<|im_end|>", (1,), OK, "plain"),
    Reply("lingshu", "comparison", S, "stop",
          "Answer: 3. The right lung lesion is larger than the left lung lesion.<|im_end|>",
          (3,), OK, "echo"),
    Reply("lingshu", "severity", S, "stop",
          "Answer: 1 - Less than 1/3 of the right lung area<|im_end|>", (1,), OK, "echo"),
    Reply("lingshu", "severity", S, "stop",
          "Answer: Less than 1/3 of the right lung area, since the opacity is confined to the "
          "base.<|im_end|>", (1,), OK, "option-text-justify"),
    Reply("lingshu", "severity", S, "stop",
          "Answer: 1/3 or more but less than 2/3 of the right lung area<|im_end|>", (2,), OK,
          "option-text"),
    Reply("lingshu", "severity", S, "stop", "Answer: between 1 and 2<|im_end|>", None, UNP,
          "hedge"),
    Reply("lingshu", "severity", S, "stop", "Answer: 4<|im_end|>", None, UNP, "out-of-range"),
    Reply("lingshu", "yes_no", S, "stop", "Answer: b<|im_end|>", None, UNP, "letter"),
    Reply("lingshu", "yes_no", S, "stop",
          "I cannot determine this from the image provided.<|im_end|>", None, REF, "refusal"),
    Reply("lingshu", "severity", S, "length",
          "Based on the radiograph, the opacity occupies", None, TRUNC, "truncated"),
    Reply("lingshu", "yes_no", S, "stop",
          "Answer: 2; the contour crosses the fissure<|im_end|>", (2,), OK, "justify-semicolon"),
    Reply("lingshu", "location", M, "stop", "Answer: the right costophrenic angle<|im_end|>",
          (1,), OK, "option-text"),
    Reply("lingshu", "location", M, "stop", "Answer: 1, 4<|im_end|>", None, UNP,
          "none-combined"),
    Reply("lingshu", "location", M, "stop", "Answer: None<|im_end|>", (4,), OK, "option-text"),
    Reply("lingshu", "comparison", S, "stop",
          "Answer: The lesion is present in only one lung<|im_end|>", (4,), OK,
          "option-text-short"),
    Reply("lingshu", "yes_no", S, "stop", "Answer: 2 (Yes)<|im_end|>", None, UNP,
          "other-option-text"),

    # --- huatuogpt: HuatuoGPT-Vision, "## Thinking" / "## Final Response" ---
    Reply("huatuogpt", "points", M, "stop",
          f"## Thinking\n\n{_POINTS_THINK}\n\n## Final Response\n\nAnswer: 1, 3", (1, 3), OK,
          "final-response-heading"),
    Reply("huatuogpt", "yes_no", S, "stop",
          f"## Thinking\n\n{_THINK}\n\n## Final Response\n\n2", (2,), OK,
          "final-response-heading"),
    Reply("huatuogpt", "yes_no", S, "stop",
          f"## Thinking\n\n{_THINK} Answer: 1?\n\n## Final Response\n\nThe answer is 2 because "
          "the mask overshoots.", (2,), OK, "final-response-heading"),
    Reply("huatuogpt", "yes_no", S, "stop",
          f"## Thinking\n\n{_THINK} So the answer is 1", None, UNP,
          "thinking-heading-unclosed"),
    Reply("huatuogpt", "yes_no", S, "length",
          f"## Thinking\n\n{_THINK} So the answer", None, TRUNC, "truncated"),
    Reply("huatuogpt", "yes_no", S, "stop", "## Final Response\n\n(2) No", (2,), OK, "echo"),
    Reply("huatuogpt", "masks", S, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\n2 or 3", None, UNP, "hedge"),
    Reply("huatuogpt", "masks", S, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\nAnswer: 7", None, UNP, "out-of-range"),
    Reply("huatuogpt", "masks", S, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\nAnswer: D", None, UNP, "letter"),
    Reply("huatuogpt", "yes_no", S, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\nI'm sorry, but I can't provide a "
          "diagnosis from this image.", None, REF, "refusal"),
    Reply("huatuogpt", "yes_no", S, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\n\n2 - the contour extends beyond the "
          "lesion", (2,), OK, "justify-dash"),
    Reply("huatuogpt", "masks", S, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\n\nThe 2nd mask follows the effusion "
          "best.\n\nAnswer: 2", (2,), OK, "final-response-heading"),
    Reply("huatuogpt", "location", M, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\n\nNone of the above (options 1-3)",
          (4,), OK, "option-text-none-full"),
    Reply("huatuogpt", "yes_no", S, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\n\nThe overlay covers the lesion, so the "
          "first option applies.", None, UNP, "no-answer"),
    Reply("huatuogpt", "yes_no", S, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\n\nAnswer: 2 zones", None, UNP,
          "bare-words"),
    Reply("huatuogpt", "masks", S, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\n\nAnswer：（３）", (3,), OK, "full-width"),
    Reply("huatuogpt", "yes_no", S, "stop",
          f"## Thinking\n{_THINK}\n## Final Response\n\n**Answer: 1 (Yes)**", (1,), OK, "echo"),

    # --- llama: Llama 3.x / 4, <|eot_id|> and header tokens ---
    Reply("llama", "yes_no", S, "stop", "Answer: 2<|eot_id|>", (2,), OK, "special-tokens"),
    Reply("llama", "yes_no", S, "stop",
          "<|start_header_id|>assistant<|end_header_id|>\n\nAnswer: 1<|eot_id|>", (1,), OK,
          "special-tokens"),
    Reply("llama", "yes_no", S, "stop",
          "Answer: 2<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAre you sure?"
          "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nAnswer: 1<|eot_id|>",
          (2,), OK, "next-turn"),
    Reply("llama", "points", M, "stop",
          "Answer: 1 - red point, 3 - yellow point<|eot_id|>", (1, 3), OK, "echo"),
    Reply("llama", "yes_no", S, "stop",
          "The answer is 2 because the mask extends past the lesion.<|eot_id|>", (2,), OK,
          "justify-because"),
    Reply("llama", "yes_no", S, "stop", "Answer: 2<|end_of_text|>", (2,), OK, "special-tokens"),
    Reply("llama", "masks", S, "stop", "Answer: 2 or maybe 3<|eot_id|>", None, UNP, "hedge"),
    Reply("llama", "points", M, "stop", "Answer: 5<|eot_id|>", None, UNP, "out-of-range"),
    Reply("llama", "yes_no", S, "stop", "Answer: A) Yes<|eot_id|>", None, UNP, "letter"),
    Reply("llama", "yes_no", S, "stop",
          "I can't provide medical interpretations of X-ray images.<|eot_id|>", None, REF,
          "refusal"),
    Reply("llama", "yes_no", S, "length",
          "To determine whether the mask covers the lesion, let's", None, TRUNC, "truncated"),
    Reply("llama", "yes_no", S, "stop", "Answer: 2 (No)<|eot_id|>", (2,), OK, "echo"),
    Reply("llama", "masks", S, "stop",
          "**Answer:** 3 - the third mask hugs the opacity<|eot_id|>", (3,), OK,
          "justify-dash"),
    Reply("llama", "masks", S, "stop", "Answer: 2 3<|eot_id|>", None, UNP, "bare-words"),
    Reply("llama", "zones", S, "stop",
          "<|begin_of_text|><|start_header_id|>assistant<|end_header_id|>\n\nAnswer: 4"
          "<|eot_id|>", (4,), OK, "special-tokens"),
    Reply("llama", "yes_no", S, "stop", "Answer: 1<|eom_id|>", (1,), OK, "special-tokens"),
    Reply("llama", "yes_no", S, "stop", "Answer: 1 - No<|eot_id|>", None, UNP,
          "other-option-text"),

    # --- mistral: Mistral / Pixtral, </s> and [INST] .. [/INST] ---
    Reply("mistral", "yes_no", S, "stop", "Answer: 2</s>", (2,), OK, "special-tokens"),
    Reply("mistral", "yes_no", S, "stop", " Answer: 1</s>", (1,), OK, "special-tokens"),
    Reply("mistral", "yes_no", S, "stop",
          "<s> [INST] Does the mask cover the lesion? End with 'Answer: 1'. [/INST] Answer: 2"
          "</s>", (2,), OK, "prompt-echo"),
    Reply("mistral", "yes_no", S, "stop",
          "Answer: 2</s>[INST] Are you sure? [/INST] Answer: 1</s>", (2,), OK, "next-turn"),
    Reply("mistral", "zones", S, "stop", "Answer: 3 - 3 zones</s>", (3,), OK, "echo"),
    Reply("mistral", "points", M, "stop",
          "Answer: 1 (red point), 3 (yellow point)</s>", (1, 3), OK, "echo"),
    Reply("mistral", "zones", S, "stop", "Answer: 2-3</s>", None, UNP, "hedge"),
    Reply("mistral", "yes_no", S, "stop", "Answer: 11</s>", None, UNP, "out-of-range"),
    Reply("mistral", "yes_no", S, "stop", "Answer: (A)</s>", None, UNP, "letter"),
    Reply("mistral", "yes_no", S, "stop",
          "I'm sorry, but I am not able to interpret medical images.</s>", None, REF,
          "refusal"),
    Reply("mistral", "yes_no", S, "length", "The overlay seems to", None, TRUNC, "truncated"),
    Reply("mistral", "yes_no", S, "stop",
          "Answer: 2 – the overlay covers only part of the base</s>", (2,), OK, "justify-dash"),
    Reply("mistral", "yes_no", S, "stop", 'Answer: "2"</s>', (2,), OK, "quotes"),
    Reply("mistral", "yes_no", S, "stop",
          "Answer: 1. the mask hugs the lesion border</s>", (1,), OK, "justify-period"),
    Reply("mistral", "yes_no", S, "stop",
          "Answer: No - the mask extends beyond the lesion</s>", (2,), OK,
          "option-text-justify"),
    Reply("mistral", "yes_no", S, "stop", "Answer: 2 and the mask is too large</s>", None, UNP,
          "bare-words"),
    Reply("mistral", "yes_no", S, "stop", "Answer: 2 [/INST]", (2,), OK, "special-tokens"),

    # --- api-openai: GPT-4o / GPT-5 style, markdown bold ---
    Reply("api-openai", "yes_no", S, "stop", "**Answer: 2**", (2,), OK, "markdown"),
    Reply("api-openai", "yes_no", S, "stop",
          "**Answer:** 2 (No)\n\n**Reasoning:** The mask extends beyond the lesion at the "
          "lateral pleura.", (2,), OK, "echo"),
    Reply("api-openai", "yes_no", S, "stop",
          "The overlay extends past the lesion margin laterally.\n\n**Answer: 2** — the "
          "contour extends beyond the lesion.", (2,), OK, "justify-dash"),
    Reply("api-openai", "points", M, "stop", "**Final answer:** 1, 3", (1, 3), OK, "multi"),
    Reply("api-openai", "yes_no", S, "stop",
          "**Answer:** 2 because the mask includes the hilum.", (2,), OK, "justify-because"),
    Reply("api-openai", "zones", S, "stop", "Answer: **2 or 3**", None, UNP, "hedge"),
    Reply("api-openai", "zones", S, "stop", "**Answer:** 5", None, UNP, "out-of-range"),
    Reply("api-openai", "yes_no", S, "stop", "**Answer:** B", None, UNP, "letter"),
    Reply("api-openai", "yes_no", S, "stop", "I'm sorry, but I can't help with that.", None,
          REF, "refusal"),
    Reply("api-openai", "yes_no", S, "length",
          "Let me analyse the image step by step.\n\n1. **Lesion location:** the opacity lies",
          None, TRUNC, "truncated"),
    Reply("api-openai", "comparison", S, "stop",
          "**Answer:** 3. The right lung lesion is larger than the left lung lesion.", (3,), OK,
          "echo"),
    Reply("api-openai", "location", M, "stop", "**Answer:** None of the above (options 1-3)",
          (4,), OK, "option-text-none-full"),
    Reply("api-openai", "yes_no", S, "stop",
          "**Answer:** 2 (the contour extends beyond the lesion)", (2,), OK, "justify-bracket"),
    Reply("api-openai", "yes_no", S, "stop", "**Answer:** 2: No", (2,), OK, "echo"),
    Reply("api-openai", "yes_no", S, "stop", "Answer: $\\boxed{2}$ — the mask overshoots",
          (2,), OK, "boxed-justify"),
    Reply("api-openai", "zones", S, "stop", "**Answer:** Option 2 – 2 zones", (2,), OK, "echo"),
    Reply("api-openai", "zones", S, "stop", "**Answer:** between 2 and 3 zones", None, UNP,
          "hedge"),
    Reply("api-openai", "yes_no", S, "stop", "", None, REF, "provider-refused", "refused"),

    # --- api-gemini: Gemini 2.5 style ---
    Reply("api-gemini", "yes_no", S, "STOP",
          "**Answer:** 2\n\n**Explanation:** The mask covers aerated lung lateral to the "
          "effusion.", (2,), OK, "markdown"),
    Reply("api-gemini", "points", M, "STOP",
          "Answer: 1, 3\n\nThe red and yellow points lie on the opacity.", (1, 3), OK, "multi"),
    Reply("api-gemini", "yes_no", S, "STOP", "The answer is **(2) No**.", (2,), OK, "echo"),
    Reply("api-gemini", "yes_no", S, "STOP",
          "Answer: 2 - The contour extends well beyond the lesion border.", (2,), OK,
          "justify-dash"),
    Reply("api-gemini", "yes_no", S, "SAFETY", "", None, BLK, "blocked", "blocked"),
    Reply("api-gemini", "yes_no", S, "SAFETY", "Answer: 1", None, BLK, "blocked", "blocked"),
    Reply("api-gemini", "zones", S, "STOP", "**Answer:** 2/3", None, UNP, "hedge"),
    Reply("api-gemini", "yes_no", S, "STOP", "**Answer:** 0", None, UNP, "out-of-range"),
    Reply("api-gemini", "masks", S, "STOP", "**Answer:** (c)", None, UNP, "letter"),
    Reply("api-gemini", "yes_no", S, "STOP",
          "I cannot provide a medical diagnosis. Please consult a radiologist.", None, REF,
          "refusal"),
    Reply("api-gemini", "yes_no", S, "MAX_TOKENS",
          "Here's a breakdown of the image:\n\n*   **Lesion:** A", None, TRUNC, "truncated"),
    Reply("api-gemini", "points", M, "STOP",
          "**Answer:** 1, 3 (the red and yellow points lie on the opacity)", (1, 3), OK,
          "justify-bracket"),
    Reply("api-gemini", "severity", S, "STOP",
          "**Answer:** 1/3 or more but less than 2/3 of the right lung area.", (2,), OK,
          "option-text"),
    Reply("api-gemini", "masks", S, "STOP",
          "**Answer:** 3\n\n**Reasoning:**\n*   Option 1 misses the base.\n*   Option 3 follows "
          "the meniscus.", (3,), OK, "plain"),
    Reply("api-gemini", "zones", S, "STOP", "**Answer:** 2 zones", (2,), OK, "option-text"),
    Reply("api-gemini", "yes_no", S, "STOP",
          "**Answer:** Yes (the overlay follows the lesion contour)", (1,), OK,
          "option-text-justify"),
    Reply("api-gemini", "zones", S, "STOP", "**Answer:** 1 – 1 zone", (1,), OK, "echo"),

    # --- api-claude: Claude style ---
    Reply("api-claude", "yes_no", S, "end_turn",
          "Looking at the image, the mask extends beyond the effusion laterally.\n\nAnswer: 2",
          (2,), OK, "plain"),
    Reply("api-claude", "yes_no", S, "end_turn",
          "Answer: 2 (No)\n\nThe mask covers aerated lung lateral to the effusion.", (2,), OK,
          "echo"),
    Reply("api-claude", "yes_no", S, "end_turn",
          "Answer: 1 - the overlay covers the whole effusion", (1,), OK, "justify-dash"),
    Reply("api-claude", "masks", S, "end_turn",
          "Answer: 3\n\nThe 3rd mask follows the meniscus most closely.", (3,), OK, "plain"),
    Reply("api-claude", "yes_no", S, "end_turn",
          "Answer: 2, because the contour crosses into the mediastinum.", (2,), OK,
          "justify-because"),
    Reply("api-claude", "masks", S, "end_turn", "Answer: either 1 or 2", None, UNP, "hedge"),
    Reply("api-claude", "zones", S, "end_turn", "Answer: 8", None, UNP, "out-of-range"),
    Reply("api-claude", "yes_no", S, "end_turn", "Answer: B", None, UNP, "letter"),
    Reply("api-claude", "yes_no", S, "end_turn",
          "I'm not able to provide a diagnostic interpretation of this radiograph.", None, REF,
          "refusal"),
    Reply("api-claude", "yes_no", S, "max_tokens",
          "Looking at this chest X-ray, I need to carefully assess", None, TRUNC, "truncated"),
    Reply("api-claude", "points", M, "end_turn",
          "Answer: 1, 3\n\nBoth the red and yellow points fall on the opacity.", (1, 3), OK,
          "multi"),
    Reply("api-claude", "yes_no", S, "end_turn",
          "Answer: 2 — the mask extends past the lesion's lateral margin", (2,), OK,
          "justify-dash"),
    Reply("api-claude", "location", M, "end_turn", "Answer: 4 (None of the above)", (4,), OK,
          "echo"),
    Reply("api-claude", "comparison", S, "end_turn",
          "Answer: The left lung lesion is larger than the right lung lesion.", (2,), OK,
          "option-text"),
    Reply("api-claude", "masks", S, "end_turn", "Answer: 2 - or possibly 3", None, UNP,
          "hedge-justify"),
    Reply("api-claude", "yes_no", S, "end_turn",
          "Answer: (2) No, the mask extends beyond the lesion.", (2,), OK,
          "justify-comma-echo"),
    Reply("api-claude", "points", M, "end_turn", "Answer: 1 3", None, UNP, "bare-words"),
    Reply("api-claude", "masks", S, "end_turn", "Answer: 2 (maybe 3)", None, UNP,
          "hedge-justify"),
]
