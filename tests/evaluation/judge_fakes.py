"""Scripted model replies and a scripted judge for the judge tests (docs/parsing.md, "Judge model").

The model answers about one turn in three (by request id) in words the parser cannot read ("My
pick is the choice numbered two."; no digit, no declaration: ``unparseable``) and the rest with
``Answer: N``; :class:`FakeJudge` reads the option named in the reply its prompt shows. No local
imports, so the Stage 04 tests can load this file by path.
"""

from __future__ import annotations

import re

from utils.llm.base import FAULT, ChatModel, Completion, TurnRequest, Usage

LABEL = "fake:judge-model"


def right(request: TurnRequest) -> str:
    """The ground truth (in ``meta``, put there by ``stage03_fakes.KnowsAnswers``) as an answer."""
    gt = request.meta["ground_truth"]
    return "Answer: " + (",".join(map(str, gt)) if isinstance(gt, list) else str(gt))


def hedged(request: TurnRequest) -> bool:
    """The turns the model answers in prose, by request id only (about one in three)."""
    return sum(map(ord, request.request_id)) % 3 == 0


WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven")


def in_words(numbers: list[int] | int) -> str:
    """``[2, 4]`` as ``two and four`` (no digit a parser could read)."""
    return " and ".join(WORDS[n] for n in (numbers if isinstance(numbers, list) else [numbers]))


def prose(request: TurnRequest) -> str:
    """The ground truth in words for the hedged turns, ``Answer: N`` for the others."""
    if not hedged(request):
        return right(request)
    return (f"My pick is the choice numbered {in_words(request.meta['ground_truth'])}.\n"
            f"That is my reading of the image.")


class FakeJudge(ChatModel):
    """Reads ``option N`` in the reply part of the judge's prompt; ``Answer: none`` without.

    Attributes:
        seen: Request ids of every judge request.
        fail: Request ids answered with a fault (retries ran out).
    """

    provider = "fake"

    def __init__(self, *, fail: set[str] | None = None) -> None:
        super().__init__("judge-model")
        self.seen: list[str] = []
        self.prompts: list[str] = []
        self.fail = set(fail or ())

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        out = []
        for request in requests:
            self.seen.append(request.request_id)
            prompt = request.messages[-1].text
            self.prompts.append(prompt)
            if request.request_id in self.fail:
                out.append(Completion(text="", status=FAULT, error="HTTP 500 (retries ran out)"))
                continue
            reply = prompt.split("<reply>\n", 1)[1].split("\n</reply>", 1)[0]
            words = re.search(r"numbered ([a-z ]+)\.", reply)
            digits = re.search(r"Answer: ([\d,]+)", reply)
            found = (",".join(str(WORDS.index(w)) for w in words.group(1).split(" and "))
                     if words else digits.group(1) if digits else "none")
            out.append(Completion(text=f"The reply commits to it.\nAnswer: {found}",
                                  usage=Usage(input_tokens=50, output_tokens=8)))
        return out
