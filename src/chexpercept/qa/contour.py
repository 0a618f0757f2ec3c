"""Stage 02: contour QA (stages 2-3) of one case from its ``deformation_results.json`` entry.

Builds ``contour_qa`` of chexpercept.json (docs/qa_generation.md, "Question types"):
the per-component before/after masks, the shared coloured-point options of the expansion and
contraction questions, and the revision-result mask options. Rendering is in
:mod:`chexpercept.qa.render`; this module only decides what is shown and what is correct.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chexpercept.layouts import CONTOUR_EVAL_RELPATH, option_image_name
from chexpercept.qa import _text
from chexpercept.qa._errors import CaseBuildError
from chexpercept.schema import DeformationCase, GeometricalMaskInfo, StepEntry

#: At most this many points (one colour each); docs/qa_generation.md, "Thresholds".
MAX_POINTS = len(_text.POINT_COLORS)
#: Distractor points are kept only this far (pixels) from GT points and from each other;
#: docs/qa_generation.md, "Thresholds".
MIN_FAKE_POINT_DISTANCE_PX = 100.0
#: Distractor mask combinations shown next to the true one (1 true + 3 fakes; release).
NUM_FAKE_COMBINATIONS = 3
#: Guard against a combinatorial blow-up of ``itertools.product`` (not in the release).
MAX_COMBINATIONS = 2_000_000
#: Lesions whose default distractors are the dilated/eroded mask rather than whole lungs
#: (docs/qa_generation.md, "Question types").
HEART_LESIONS = frozenset({"cardiomegaly"})

DEFAULT_PREFIX = "default_"
COMPONENT_PREFIX = "suboptimal_component_"


@dataclass(frozen=True)
class ComponentPlan:
    """What one lesion component shows before and after revision.

    Attributes:
        sid: ``suboptimal_component_<id>``.
        component_id: ``<id>``, the ``mask_component_id`` of its geometrical info.
        steps: Deformation steps, expansion steps first then contraction steps (the order
            Stage 01 applies them, docs/deformation.md, "Sequential QA deformation"); empty if
            not deformed.
        before: Mask stem shown before revision (the final deformed mask, or the
            ``_no_contraction`` stem of an undeformed component).
        after: Mask stem after the correct revision (``optimal_component_<id>``, or the
            ``_no_contraction`` stem).
    """

    sid: str
    component_id: str
    steps: tuple[StepEntry, ...]
    before: str
    after: str

    @property
    def deformed(self) -> bool:
        """Whether the component has at least one deformation step."""
        return bool(self.steps)


def _component_id(sid: str, key_id: str) -> str:
    if not sid.startswith(COMPONENT_PREFIX) or sid == COMPONENT_PREFIX:
        raise CaseBuildError(f"{key_id}: component id '{sid}' is not "
                             f"'{COMPONENT_PREFIX}<id>'")
    return sid[len(COMPONENT_PREFIX):]


def _sid_order(sid: str) -> tuple[int, int, str]:
    tail = sid[len(COMPONENT_PREFIX):] if sid.startswith(COMPONENT_PREFIX) else sid
    return (0, int(tail), "") if tail.isdigit() else (1, 0, tail)


def has_deformation(case: DeformationCase) -> bool:
    """Whether any component of ``case`` has an expansion or contraction step.

    The release forces a case without any step to be revision-free (docs/qa_generation.md,
    "Export and sampling"); :func:`chexpercept.qa.generate.generate_qa` does the same and lists it.
    """
    qdr = case.qa_deformation_results
    if qdr is None:
        return False
    return any(steps for steps in qdr.expansion.values()) or any(
        steps for steps in qdr.contraction.values())


def component_plans(case: DeformationCase, key_id: str) -> list[ComponentPlan]:
    """Before/after mask stems of every component, in component-id order.

    Per component (docs/qa_generation.md, "Question types"): ``before`` is the
    ``before revision`` stem of the last step (the last contraction step if any, else the
    last expansion step) and ``after`` is the ``after revision`` stem of the first step
    (``optimal_component_<id>``). Undeformed components use their ``no_deformation`` stem
    for both.

    Raises:
        CaseBuildError: If ``qa_deformation_results`` is null or empty, a component id is
            malformed, a component is both deformed and undeformed, or a step lacks its
            ``revision_flow`` stems.
    """
    qdr = case.qa_deformation_results
    if qdr is None:
        raise CaseBuildError(f"{key_id}: qa_deformation_results is null (Stage 01 never ran "
                             f"a QA deformation for this case)")
    sids = set(qdr.expansion) | set(qdr.contraction) | set(qdr.no_deformation)
    if not sids:
        raise CaseBuildError(f"{key_id}: qa_deformation_results lists no component")
    plans = []
    for sid in sorted(sids, key=_sid_order):
        cid = _component_id(sid, key_id)
        exp = sorted(qdr.expansion.get(sid, []), key=lambda s: s.exp_idx or 0)
        cont = sorted(qdr.contraction.get(sid, []), key=lambda s: s.cont_idx or 0)
        steps = tuple(exp + cont)
        if steps:
            if qdr.no_deformation.get(sid):
                raise CaseBuildError(f"{key_id}: {sid} has deformation steps and a "
                                     f"no_deformation entry")
            for step in steps:
                missing = [k for k in ("before revision", "after revision")
                           if k not in step.revision_flow]
                if missing:
                    raise CaseBuildError(f"{key_id}: step '{step.mask_path}' of {sid} has no "
                                         f"revision_flow {missing}")
            before = steps[-1].revision_flow["before revision"]
            after = steps[0].revision_flow["after revision"]
        else:
            entries = qdr.no_deformation.get(sid) or []
            if not entries:
                raise CaseBuildError(f"{key_id}: {sid} has no step and no no_deformation entry")
            before = after = entries[0].mask_path
        plans.append(ComponentPlan(sid=sid, component_id=cid, steps=steps, before=before,
                                   after=after))
    return plans


def geometry_by_component(case: DeformationCase, key_id: str) -> dict[str, GeometricalMaskInfo]:
    """``geometrical_mask_infos`` indexed by ``mask_component_id`` (docs/differences.md D15).

    The release indexed the list by the component number, which breaks when component ids
    have gaps.

    Raises:
        CaseBuildError: If two entries share a ``mask_component_id``.
    """
    out: dict[str, GeometricalMaskInfo] = {}
    for info in case.geometrical_mask_infos:
        if info.mask_component_id in out:
            raise CaseBuildError(f"{key_id}: geometrical_mask_infos lists mask_component_id "
                                 f"'{info.mask_component_id}' twice")
        out[info.mask_component_id] = info
    return out


# --------------------------------------------------------------------------------------
# Points (stage 3 a/b)
# --------------------------------------------------------------------------------------


def _far_enough(point: Sequence[int], others: Sequence[Sequence[int]], min_px: float) -> bool:
    return all(math.dist(point, q) >= min_px for q in others)


def point_options(plans: Sequence[ComponentPlan], rng: np.random.Generator, key_id: str
                  ) -> tuple[list[dict[str, Any]], list[int], list[int]]:
    """The shared point options of the expansion and contraction questions.

    GT points are the ``center_point`` of every step: an expansion GT point when the step's
    ``revision`` is ``expansion`` (the step was a contraction), else a contraction GT point.
    Distractors are the steps' ``fake_points_expansion`` + ``fake_points_contraction``, kept
    greedily when >= 100 px from every GT point and every kept distractor; if GT +
    distractors exceed 8, distractors are subsampled at random. All points are shuffled and
    coloured red, orange, ... brown; ``{"point": None, "color": "None"}`` is appended last
    (docs/qa_generation.md, "Question types").

    Args:
        plans: From :func:`component_plans`.
        rng: The case's generator (``rng_for(seed, "qa", key_id)``).
        key_id: For error messages.

    Returns:
        ``(options, expansion_answer, contraction_answer)``: options as
        ``{"point": [x, y], "color": c}`` (pixels, 1024x1024 frame) with the None option
        last; the answers are ascending 1-based option indices (empty if none).

    Raises:
        CaseBuildError: If there are more than 8 GT points (colours would repeat).
    """
    gt = [([int(v) for v in step.center_point], step.revision)
          for plan in plans for step in plan.steps]
    if len(gt) > MAX_POINTS:
        raise CaseBuildError(f"{key_id}: {len(gt)} GT points but only {MAX_POINTS} colours")
    gt_points = [p for p, _ in gt]
    kept: list[list[int]] = []
    for plan in plans:
        for step in plan.steps:
            for point in [*step.fake_points_expansion, *step.fake_points_contraction]:
                point = [int(v) for v in point]
                if _far_enough(point, gt_points + kept, MIN_FAKE_POINT_DISTANCE_PX):
                    kept.append(point)
    room = MAX_POINTS - len(gt)
    if len(kept) > room:
        picked = np.sort(rng.choice(len(kept), size=room, replace=False))
        kept = [kept[int(i)] for i in picked]
    entries = gt + [(p, "fake") for p in kept]
    entries = [entries[int(i)] for i in rng.permutation(len(entries))]
    options: list[dict[str, Any]] = [{"point": p, "color": _text.POINT_COLORS[i]}
                                     for i, (p, _) in enumerate(entries)]
    options.append({"point": None, "color": _text.NONE_OPTION})
    expansion = [i + 1 for i, (_, kind) in enumerate(entries) if kind == "expansion"]
    contraction = [i + 1 for i, (_, kind) in enumerate(entries) if kind == "contraction"]
    return options, expansion, contraction


def _point_qa(stem: str, options: list[dict[str, Any]], answer: list[int]) -> dict[str, Any]:
    texts = [_text.point_option_text(o["color"]) for o in options]
    index = list(answer) if answer else [len(options)]
    return {
        "question": _text.with_options(stem, texts),
        "answer_options": [dict(o) for o in options],
        "answer": ", ".join(texts[i - 1] for i in index),
        "answer_index": index,
    }


# --------------------------------------------------------------------------------------
# Revision-result options (stage 3 c)
# --------------------------------------------------------------------------------------


def _component_side(plan: ComponentPlan, geometry: dict[str, GeometricalMaskInfo],
                    key_id: str) -> str:
    if plan.steps:
        anatomy = plan.steps[0].anatomy
        word = anatomy.split()[0] if anatomy.split() else ""
        if word in ("left", "right"):
            return word
        raise CaseBuildError(f"{key_id}: cannot tell the lung side of {plan.sid} from its "
                             f"anatomy '{anatomy}' (expected 'left ...' or 'right ...')")
    info = geometry.get(plan.component_id)
    if info is None:
        raise CaseBuildError(f"{key_id}: no geometrical_mask_infos entry with "
                             f"mask_component_id '{plan.component_id}' (for {plan.sid}); "
                             f"found {sorted(geometry)}")
    return "left" if info.overlap.left_lung.overlap_ratio > 0 else "right"


def candidate_masks(plans: Sequence[ComponentPlan], lesion: str,
                    geometry: dict[str, GeometricalMaskInfo], key_id: str
                    ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """True and distractor mask stems per component (docs/qa_generation.md, "Question types").

    Distractors of a component are its steps' fake masks, then every step's ``mask_path``
    (partial revisions), then default tokens: ``default_keep``, ``default_dilated``,
    ``default_eroded`` for cardiomegaly; otherwise ``default_keep`` plus
    ``default_<side>_lung_chex`` and ``default_<side>_lung_cxas`` for the first component of
    each lung side (later same-side components get only ``default_keep``). The side is the
    first step's anatomy side, or for an undeformed component the left lung if its left-lung
    ``overlap_ratio`` > 0, else the right lung.

    Returns:
        ``(true_masks, fake_masks)``, both ``{sid: [stem, ...]}`` in component order.

    Raises:
        CaseBuildError: If a lung lesion component's side cannot be determined.
    """
    true_masks: dict[str, list[str]] = {}
    fake_masks: dict[str, list[str]] = {}
    sides_done: set[str] = set()
    for plan in plans:
        fakes = [ref.fake_mask for step in plan.steps for ref in step.fake_masks]
        fakes += [step.mask_path for step in plan.steps]
        if lesion in HEART_LESIONS:
            defaults = ["default_keep", "default_dilated", "default_eroded"]
        else:
            side = _component_side(plan, geometry, key_id)
            if side in sides_done:
                defaults = ["default_keep"]
            else:
                sides_done.add(side)
                defaults = ["default_keep", f"default_{side}_lung_chex",
                            f"default_{side}_lung_cxas"]
        true_masks[plan.sid] = [plan.after]
        fake_masks[plan.sid] = [m for m in dict.fromkeys(fakes + defaults) if m != plan.after]
    return true_masks, fake_masks


def _n_defaults(combo: Sequence[str]) -> int:
    return sum(1 for m in combo if m.startswith(DEFAULT_PREFIX))


def mask_combinations(plans: Sequence[ComponentPlan], true_masks: dict[str, list[str]],
                      fake_masks: dict[str, list[str]], rng: np.random.Generator, key_id: str
                      ) -> tuple[list[str], list[list[str]]]:
    """The true combination and up to 3 distractor combinations of component masks.

    ``itertools.product`` over each component's choices (true first, then distractors): the
    all-true combination is the answer; the others are distractors, except any whose mask set
    equals the before-revision set or the true set, and duplicates (same set). When more
    than 3 remain, they are grouped by their number of ``default_*`` entries and 3 are taken
    from the groups with the fewest defaults, at random within a group (docs/qa_generation.md,
    "Question types"; docs/differences.md D24).

    Returns:
        ``(true_combination, fake_combinations)``; stems in component order, duplicates
        removed.

    Raises:
        CaseBuildError: If the product is too large or no distractor combination exists.
    """
    choices = [[*true_masks[p.sid], *fake_masks[p.sid]] for p in plans]
    total = math.prod(len(c) for c in choices)
    if total > MAX_COMBINATIONS:
        raise CaseBuildError(f"{key_id}: {total} mask combinations (more than "
                             f"{MAX_COMBINATIONS}); too many components or distractors")
    true_combo = list(dict.fromkeys(c[0] for c in choices))
    seen = {frozenset(true_combo), frozenset(p.before for p in plans)}
    groups: dict[int, list[list[str]]] = defaultdict(list)
    for combo in itertools.product(*choices):
        key = frozenset(combo)
        if key in seen:
            continue
        seen.add(key)
        groups[_n_defaults(combo)].append(list(dict.fromkeys(combo)))
    chosen: list[list[str]] = []
    for n in sorted(groups):
        need = NUM_FAKE_COMBINATIONS - len(chosen)
        if need <= 0:
            break
        group = groups[n]
        if len(group) <= need:
            chosen += group
        else:
            picked = np.sort(rng.choice(len(group), size=need, replace=False))
            chosen += [group[int(i)] for i in picked]
    if not chosen:
        raise CaseBuildError(f"{key_id}: no distractor mask combination differs from the true "
                             f"and the before-revision masks")
    return true_combo, chosen


def revision_result_options(true_combo: list[str], fake_combos: list[list[str]],
                            rng: np.random.Generator) -> tuple[list[dict[str, Any]], int]:
    """Shuffle 1 true + the fake combinations into options named ``option_<i>.png``.

    Returns:
        ``(options, answer_index)``: options ``{"type", "masks", "relative_path"}`` (path
        relative to ``contour_qa/contour_revision_qa/``, never revealing the answer) and the
        1-based index of the true option.
    """
    entries = [("true", true_combo)] + [("fake", c) for c in fake_combos]
    entries = [entries[int(i)] for i in rng.permutation(len(entries))]
    options = [{"type": kind, "masks": list(masks), "relative_path": option_image_name(i)}
               for i, (kind, masks) in enumerate(entries, start=1)]
    answer = next(i for i, o in enumerate(options, start=1) if o["type"] == "true")
    return options, answer


# --------------------------------------------------------------------------------------
# contour_qa
# --------------------------------------------------------------------------------------


def build_contour_qa(key_id: str, lesion: str, case: DeformationCase, no_deformation: bool,
                     rng: np.random.Generator) -> dict[str, Any]:
    """``contour_qa`` of a positive case (release schema, docs/benchmark_format.md, "JSON fields").

    Revision-free cases (``no_deformation``) carry ``no_deformation``, the before/after mask
    lists and ``contour_eval_qa`` only: the stage 3 questions and mask combinations are
    neither rendered nor asked for them, so they are omitted (optional in
    :class:`chexpercept.schema.ContourQA`). Revision-required cases carry every field.

    Args:
        key_id: The case.
        lesion: Its lesion.
        case: Its validated ``deformation_results.json`` entry.
        no_deformation: True for a revision-free case.
        rng: The case's generator; draws happen in a fixed order (points, then masks).

    Returns:
        The ``contour_qa`` dict in the release's key order.

    Raises:
        CaseBuildError: See :func:`component_plans`, :func:`point_options`,
            :func:`candidate_masks`, :func:`mask_combinations`; also a revision-required
            case without any deformation step.
    """
    plans = component_plans(case, key_id)
    before = [p.before for p in plans]
    after = [p.after for p in plans]
    answer = "No" if no_deformation else "Yes"
    eval_qa = {
        "question": _text.with_options(_text.contour_eval_stem(lesion), _text.YES_NO),
        "answer_options": list(_text.YES_NO),
        "answer": answer,
        "answer_index": _text.YES_NO.index(answer) + 1,
        "relative_path": CONTOUR_EVAL_RELPATH,
    }
    if no_deformation:
        return {"no_deformation": True, "revision_before_masks": before,
                "revision_after_masks": after, "contour_eval_qa": eval_qa}
    if not any(p.deformed for p in plans):
        raise CaseBuildError(f"{key_id}: revision-required but no component has a "
                             f"deformation step")
    options, exp_answer, cont_answer = point_options(plans, rng, key_id)
    true_masks, fake_masks = candidate_masks(plans, lesion, geometry_by_component(case, key_id),
                                             key_id)
    true_combo, fake_combos = mask_combinations(plans, true_masks, fake_masks, rng, key_id)
    mask_options, mask_answer = revision_result_options(true_combo, fake_combos, rng)
    mask_texts = [_text.mask_option_text(i) for i in range(1, len(mask_options) + 1)]
    return {
        "no_deformation": False,
        "initial_context": _text.initial_context(lesion),
        "revision_before_masks": before,
        "revision_after_masks": after,
        "true_masks": true_masks,
        "fake_masks": fake_masks,
        "true_combination": true_combo,
        "fake_combinations": fake_combos,
        "contour_eval_qa": eval_qa,
        "contour_revision_qa_expansion": _point_qa(_text.expansion_stem(lesion), options,
                                                   exp_answer),
        "contour_revision_qa_contraction": _point_qa(_text.contraction_stem(lesion), options,
                                                     cont_answer),
        "contour_revision_qa_revision_result": {
            "question": _text.with_options(_text.revision_result_stem(lesion), mask_texts),
            "answer_options": mask_options,
            "answer": mask_texts[mask_answer - 1],
            "answer_index": mask_answer,
        },
    }
