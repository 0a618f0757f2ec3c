"""Benchmark of the Stage 03 answer parser (``chexpercept.evaluation.parsing.parse_answer``).

Builds a deterministic, realistic mix of raw model outputs (short ``Answer: N`` lines, free-text
reasoning, ``<think>`` blocks of 0.5-4 kB, Gemma ``<unused94>`` thoughts, ``\\boxed{}``, GLM
boxes, markdown emphasis and headings, several ``Answer:`` lines, option-text answers,
multi-select lists, unclosed or cut-off reasoning, refusals and garbage without a declaration)
over the benchmark's real question shapes (yes/no, points, masks, zones, severity, location,
comparison), then parses all of them repeatedly on one core and prints responses per second,
the ratio to the target (50,000/s; docs/design.md, "Throughput targets", floor 10,000/s) and
the status mix. No assertion on timings.

Usage::

    python benchmarks/bench_parser.py [--n 20000] [--repeats 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

from chexpercept.evaluation.parsing import parse_answer
from chexpercept.rng import rng_for

TARGET_PER_S = 50_000

YES_NO = ["Yes", "No"]
POINTS = ["red point", "orange point", "yellow point", "green point", "None"]
MASKS = ["1st mask", "2nd mask", "3rd mask", "4th mask"]
ZONES = ["1 zone", "2 zones", "3 zones", "4 zones or more"]
SEVERITY = ["Less than 1/3 of the right lung area",
            "1/3 or more but less than 2/3 of the right lung area",
            "2/3 or more of the right lung area"]
LOCATION = ["the right costophrenic angle",
            "the intersection of the right lateral lung and the right mid zone lung",
            "the intersection of the left medial lung and the left upper zone lung",
            "None of the above (options 1-3)"]
COMPARISON = ["Both lesions are similar in size.",
              "The left lung lesion is larger than the right lung lesion.",
              "The right lung lesion is larger than the left lung lesion.",
              "The lesion is present in only one lung (left or right)."]
#: (options, multi_select) of each question shape, weighted as in a revision-required dialogue.
QUESTIONS = [(YES_NO, False), (YES_NO, False), (POINTS, True), (POINTS, True), (MASKS, False),
             (ZONES, False), (LOCATION, True), (SEVERITY, False), (COMPARISON, False)]

SENTENCES = [
    "The chest radiograph shows a blunted right costophrenic angle.",
    "The overlaid mask extends beyond the opacity at the lung base by about 2 cm.",
    "Looking at the red and yellow points, the contour misses part of the lesion.",
    "The cardiac silhouette measures 16.5 cm against a thoracic width of 28 cm.",
    "Option 3 would include the hilum, which is not part of the finding.",
    "There are 2 zones involved, possibly 3 if the upper zone haze is real.",
    "Comparing the masks, the 2nd one follows the meniscus sign most closely.",
    "I considered answer 1 first, but the lateral border argues against it.",
    "No pneumothorax is seen; the lung markings extend to the periphery.",
    "The lesion occupies less than a third of the right hemithorax.",
]


def _reasoning(rng, min_chars: int, max_chars: int) -> str:
    target = int(rng.integers(min_chars, max_chars))
    parts: list[str] = []
    size = 0
    while size < target:
        sentence = SENTENCES[int(rng.integers(len(SENTENCES)))]
        if rng.random() < 0.15:
            sentence += "\n"
        parts.append(sentence)
        size += len(sentence) + 1
    return " ".join(parts)


def _answer(rng, options: list[str], multi: bool, *, text: bool = False) -> str:
    n = len(options)
    if multi and rng.random() < 0.5:
        k = int(rng.integers(1, min(3, n - 1) + 1))
        picks = sorted({int(x) for x in rng.integers(1, n, size=k)})
        return ", ".join(options[i - 1] for i in picks) if text else ", ".join(map(str, picks))
    pick = int(rng.integers(1, n + 1))
    return options[pick - 1] if text else str(pick)


def make_mix(n: int, seed: int = 0) -> list[tuple[str, list[str], bool, str]]:
    """``n`` (raw, options, multi_select, finish_reason) tuples in a fixed, realistic mix."""
    rng = rng_for(seed, "bench_parser", "mix")
    kinds = ["short", "reasoning", "think", "gemma", "boxed", "glm", "markdown", "several",
             "option_text", "bare", "phrase", "garbage", "unclosed", "cut_off", "refusal"]
    weights = [18, 16, 14, 4, 7, 3, 7, 6, 8, 5, 3, 4, 2, 2, 1]
    probs = [w / sum(weights) for w in weights]
    out = []
    for _ in range(n):
        options, multi = QUESTIONS[int(rng.integers(len(QUESTIONS)))]
        kind = kinds[int(rng.choice(len(kinds), p=probs))]
        ans = _answer(rng, options, multi)
        finish = "stop"
        if kind == "short":
            raw = f"Answer: {ans}"
        elif kind == "reasoning":
            raw = f"{_reasoning(rng, 200, 1500)}\n\nAnswer: {ans}"
        elif kind == "think":
            raw = (f"<think>\n{_reasoning(rng, 500, 4000)}\nSo Answer: "
                   f"{_answer(rng, options, multi)}\n</think>\n\nAnswer: {ans}")
        elif kind == "gemma":
            raw = f"<unused94>thought\n{_reasoning(rng, 500, 3000)}<unused95>Answer: {ans}"
        elif kind == "boxed":
            raw = f"{_reasoning(rng, 100, 800)}\n\nThe final answer is $\\boxed{{{ans}}}$"
        elif kind == "glm":
            raw = (f"<think>{_reasoning(rng, 300, 2000)}</think><answer>"
                   f"<|begin_of_box|>{ans}<|end_of_box|></answer>")
        elif kind == "markdown":
            raw = (f"### Analysis\n{_reasoning(rng, 100, 600)}\n\n**Final Answer:** "
                   f"**{ans}**")
        elif kind == "several":
            raw = (f"Answer: {_answer(rng, options, multi)}\n{_reasoning(rng, 100, 600)}\n"
                   f"On reflection,\nAnswer: {ans}")
        elif kind == "option_text":
            raw = f"{_reasoning(rng, 0, 400)}\nAnswer: {_answer(rng, options, multi, text=True)}"
        elif kind == "bare":
            raw = ans
        elif kind == "phrase":
            raw = f"{_reasoning(rng, 100, 500)} Therefore the answer is ({ans})."
        elif kind == "garbage":
            raw = _reasoning(rng, 50, 1200)
        elif kind == "unclosed":
            raw = f"<think>{_reasoning(rng, 500, 4000)}"
        elif kind == "cut_off":
            raw, finish = _reasoning(rng, 1000, 4000), "length"
        else:
            raw = "I'm sorry, but I can't provide a medical interpretation of this image."
        out.append((raw, options, multi, finish))
    return out


def _none_index(options: list[str], multi: bool) -> int | None:
    if not multi:
        return None
    return next((i for i, t in enumerate(options, 1) if t.lower().startswith("none")), None)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000,
                        help="Responses in the mix (default: %(default)s).")
    parser.add_argument("--repeats", type=int, default=5,
                        help="Timed passes over the mix; the best is reported "
                             "(default: %(default)s).")
    parser.add_argument("--seed", type=int, default=0, help="Mix seed (default: %(default)s).")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    mix = make_mix(args.n, args.seed)
    calls = [(raw, {"num_options": len(opts), "multi_select": multi, "option_texts": opts,
                    "none_index": _none_index(opts, multi), "finish_reason": finish})
             for raw, opts, multi, finish in mix]
    statuses = Counter(parse_answer(raw, **kw).status for raw, kw in calls)  # warm-up
    best_cpu = best_wall = float("inf")
    for _ in range(args.repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        for raw, kw in calls:
            parse_answer(raw, **kw)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    # CPU time of this (single-threaded) process: robust to other load on the machine.
    rate = len(calls) / best_cpu
    mean_chars = sum(len(raw) for raw, _ in calls) / len(calls)
    print(f"parser: {len(calls)} responses (mean {mean_chars:.0f} chars), best of "
          f"{args.repeats}: {best_cpu:.3f} s CPU ({best_wall:.3f} s wall) on one core")
    print(f"parser: {rate:,.0f} responses/s; target {TARGET_PER_S:,}/s; ratio "
          f"{rate / TARGET_PER_S:.2f}")
    print("statuses: " + ", ".join(f"{k}={v}" for k, v in sorted(statuses.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
