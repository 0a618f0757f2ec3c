"""Stage 03 token budget: does every dialogue fit the model's context and image limit?

Checked before the first request (and, for the offline engine, before it loads), so a run never
stops half way on a dialogue the model cannot take (docs/engines.md, "Token budget"). A case's
heaviest request is its last turn: the system prompt, every earlier question with its images
and answer, and the last question. Earlier answers are taken as ``Answer: N`` lines; a model
that writes long replies adds those to every later turn.

For each path the case with the most images and the longest text is measured: exactly where the
provider can count (``ChatModel.count_prompt_tokens``: vLLM's server), else with the rules of
:mod:`utils.llm.tokens`. The request also reserves the output-token cap (``--max-new-tokens``),
which counts against the same context.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chexpercept.errors import ConfigError, InputError
from chexpercept.evaluation.cases import EvalCase
from chexpercept.evaluation.dialogue import Dialogue, TurnOutcome, answer_text
from chexpercept.evaluation.parsing import ParsedAnswer
from utils.imaging import image_size
from utils.llm.base import ChatModel, PromptLimits, TurnRequest
from utils.llm.tokens import (
    TOKENS_PER_IMAGE_MARKUP,
    TOKENS_PER_MESSAGE,
    ImageRule,
    bounded_size,
    text_tokens,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DialogueBudget:
    """The heaviest request of one case.

    Attributes:
        key_id: The case.
        qa_path: Its path.
        images: Images the request carries.
        prompt_tokens: Prompt tokens (exact when ``exact``, else estimated).
        exact: Whether the provider counted them.
        new_tokens: Output tokens the request reserves (0 when uncapped).
    """

    key_id: str
    qa_path: str
    images: int
    prompt_tokens: int
    exact: bool
    new_tokens: int

    @property
    def total_tokens(self) -> int:
        """Prompt plus reserved output tokens (what must fit the context)."""
        return self.prompt_tokens + self.new_tokens


def last_request(case: EvalCase) -> TurnRequest:
    """The request of ``case``'s last turn, every earlier answer being its ground truth."""
    dialogue = Dialogue(case, "none")
    while True:
        prepared = dialogue.prepare()
        if dialogue.case.turns[-1] is prepared.turn:
            return prepared.request
        raw = answer_text(prepared.turn.ground_truth)
        dialogue.commit(prepared, TurnOutcome(raw, ParsedAnswer(None, "ok"), True))


def _image_size(path: Path, cache: dict[Path, tuple[int, int]]) -> tuple[int, int]:
    """The upright size the model is shown (EXIF orientation applied; docs/images.md)."""
    if path not in cache:
        try:
            cache[path] = image_size(path)
        except InputError as exc:
            raise ConfigError(f"{path}: cannot read the image's size ({exc})") from None
    return cache[path]


def estimate_prompt_tokens(request: TurnRequest, limits: PromptLimits,
                           sizes: dict[Path, tuple[int, int]] | None = None) -> int:
    """Estimated prompt tokens of ``request`` under ``limits``' image rule and tokenizer.

    Args:
        request: The request.
        limits: Supplies ``image_rule`` (None: generic), ``tokenizer_file`` and the
            ``image_bounds`` images are downscaled to before sending.
        sizes: Cache of image sizes by path (filled as images are read).

    Returns:
        Text tokens (exact with a tokenizer file) + :data:`TOKENS_PER_MESSAGE` per message +
        the image rule's tokens and :data:`TOKENS_PER_IMAGE_MARKUP` per image.

    Raises:
        ConfigError: If an image cannot be read (names the file).
    """
    rule = limits.image_rule if isinstance(limits.image_rule, ImageRule) else ImageRule()
    cache = {} if sizes is None else sizes
    total = 0
    for message in request.messages:
        total += text_tokens(message.text, limits.tokenizer_file) + TOKENS_PER_MESSAGE
        for path in message.images:
            width, height = bounded_size(*_image_size(Path(path), cache), *limits.image_bounds)
            total += rule.tokens(width, height) + TOKENS_PER_IMAGE_MARKUP
    return total


def _candidates(cases: Sequence[EvalCase]) -> list[EvalCase]:
    """Per path, the case whose last request has the most images, then the longest text."""
    best: dict[str, tuple[tuple[int, int], EvalCase]] = {}
    for case in cases:
        images = sum(len(t.images) for t in case.turns)
        chars = sum(len(t.question) + len(t.preamble or "") for t in case.turns)
        key = (images, chars)
        if case.qa_path not in best or key > best[case.qa_path][0]:
            best[case.qa_path] = (key, case)
    return [case for _, case in best.values()]


def dialogue_budgets(cases: Sequence[EvalCase], model: ChatModel,
                     limits: PromptLimits) -> list[DialogueBudget]:
    """The heaviest request of the heaviest case of each path, heaviest first.

    Args:
        cases: The planned cases of the run.
        model: Asked for exact counts first (:meth:`ChatModel.count_prompt_tokens`).
        limits: The model's limits (rule, tokenizer, output cap).

    Returns:
        One budget per path present, sorted by ``total_tokens``, largest first.
    """
    sizes: dict[Path, tuple[int, int]] = {}
    out = []
    for case in _candidates(cases):
        request = last_request(case)
        exact = model.count_prompt_tokens(request)
        prompt = exact if exact is not None else estimate_prompt_tokens(request, limits, sizes)
        out.append(DialogueBudget(case.key_id, case.qa_path,
                                  sum(len(m.images) for m in request.messages), int(prompt),
                                  exact is not None, int(limits.max_new_tokens or 0)))
    return sorted(out, key=lambda b: b.total_tokens, reverse=True)


def check_budget(cases: Sequence[EvalCase], model: ChatModel,
                 limits: PromptLimits | None = None) -> list[DialogueBudget]:
    """Check every dialogue against the model's image limit and context; log the budget.

    Args:
        cases: The planned cases of the run.
        model: The provider (``prompt_limits`` and ``count_prompt_tokens`` are used; the
            engine is not loaded).
        limits: Overrides ``model.prompt_limits()`` (tests).

    Returns:
        The budgets of :func:`dialogue_budgets` (empty when there is nothing to check: no
        cases, or a provider that reports no limits at all, such as the baselines).

    Raises:
        ConfigError: If a case carries more images than the model accepts per prompt, if the
            output-token cap alone fills the context, or if an exactly counted request does
            not fit; the message names the key_id, the counts and the flag to change.
    """
    limits = limits or model.prompt_limits()
    if not cases or limits == PromptLimits():  # nothing known (the baselines): nothing to check
        return []
    if limits.max_images is not None:
        worst = max(cases, key=lambda c: sum(len(t.images) for t in c.turns))
        count = sum(len(t.images) for t in worst.turns)
        if count > limits.max_images:
            raise ConfigError(
                f"{worst.key_id}: its last turn carries {count} images but the model accepts "
                f"{limits.max_images} per prompt (limit_mm_per_prompt); every revision-required "
                f"dialogue needs 7, so raise the model's image limit")
    context, new = limits.context_tokens, limits.max_new_tokens or 0
    flag = limits.context_flag or "the context length"
    if context is not None and new >= context:
        raise ConfigError(
            f"each request asks for {new} new tokens (--max-new-tokens) but the model's "
            f"context is {context} tokens ({limits.context_source or 'its setting'}), which "
            f"leaves no room for the prompt: lower --max-new-tokens or raise {flag}")
    budgets = dialogue_budgets(cases, model, limits)
    if not budgets:
        return budgets
    worst_budget = budgets[0]
    how = "counted by the server" if worst_budget.exact else "estimated"
    logger.info("token budget: heaviest dialogue %s (%s, %d images): %d prompt tokens (%s) + "
                "%d new tokens, context %s", worst_budget.key_id, worst_budget.qa_path,
                worst_budget.images, worst_budget.prompt_tokens, how, new,
                context if context is not None else "unknown")
    if context is not None and worst_budget.total_tokens > context:
        message = (f"{worst_budget.key_id} ({worst_budget.qa_path}): its last turn needs "
                   f"{worst_budget.prompt_tokens} prompt tokens ({how}) + {new} new tokens = "
                   f"{worst_budget.total_tokens}, more than the model's context of {context} "
                   f"tokens: lower --max-new-tokens, bound the images (--max-image-side, API "
                   f"providers) or raise {flag}")
        if worst_budget.exact:
            raise ConfigError(message)
        logger.warning("token budget: %s (an estimate: docs/engines.md, 'Token budget')",
                       message)
    return budgets
