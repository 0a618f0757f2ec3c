"""Stage 01.01 ``morphological`` backend: one case's ``deformation_results.json`` value and masks.

Optimal masks, deformation candidates, the sequential QA deformation chain and distractor
masks/points. Follows the release's procedure (docs/deformation.md, "Deformation candidates",
"Sequential QA deformation", "Fake masks and points") with the SAM3 prompt replaced by a
morphological edit confined to the chosen anatomy (see
:func:`chexpercept.deformation._morph.edit_delta`). Produces one value of
``deformation_results.json`` and the masks of ``deformed_masks/<key_id>/`` (docs/deformation.md,
"Outputs") in memory; the caller writes them.

Differences from the release's output, on purpose: the step-4 entries omit
``all_dilated_masks_by_depth``, ``all_eroded_masks_by_depth``, ``first_dilated`` and
``first_eroded`` (full 1024² arrays nobody downstream reads; they made the JSON huge);
``anatomy_depth_levels`` is ``{anatomy: depth}``. The optimal mask is the approved candidate's
components >= ``min_component_size_px`` as drawn (no SAM refinement, no closing). Every step
must change >= max(1 % of the component area, 100 px) relative to the previous mask of its
chain (fake masks: of the step mask), so each edit is visible (docs/differences.md D13, D14,
D19).

Fixes of release defects: a lung-base zone only admits the same side's costophrenic angle
(docs/differences.md D16); every retry starts from the optimal mask and shared state is never
mutated (D17); all randomness comes from one seeded generator (D45).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from chexpercept.anatomy.masks import CaseAnatomy
from chexpercept.anatomy.names import side_of
from chexpercept.anatomy.overlap import geometrical_mask_info, overlapping_anatomy
from chexpercept.deformation._morph import (
    CONTRACTION,
    EXPANSION,
    MorphStack,
    changed_enough,
    compose,
    edit_delta,
    level_iterations,
    opposite,
    points_verified,
)
from chexpercept.deformation.points import collect_points, sample_fake_points
from chexpercept.errors import ChexperceptError

logger = logging.getLogger(__name__)

#: Operation overrides of the anatomy selection (docs/deformation.md, "Deformation candidates").
FORCE_CONTRACTION_REGION_RATIO = 0.75
FORCE_EXPANSION_REGION_RATIO = 0.5
FORCE_CONTRACTION_LUNG_RATIO = 0.7
#: Depth levels: lung lesions 2, cardiomegaly 1 (docs/deformation.md, "Deformation candidates").
LUNG_DEPTH = 2
CARDIO_DEPTH = 1
#: Fake-mask point widths at depth 1 when the depth exceeds 2 (docs/deformation.md, "Fake masks
#: and points").
DEEP_FAKE_WIDTHS = (3, 4, 5)
#: Depth raises allowed while making fake masks (docs/deformation.md, "Fake masks and points").
MAX_FAKE_DEPTH_RAISES = 3

# Failure reasons recorded in deformation_results/summary.json.
REASON_EMPTY_MASK = "empty_mask"
REASON_NO_LUNG_OVERLAP = "no_lung_overlap"
REASON_NO_VALID_DEFORMATION = "no_valid_deformation"


#: Edit step of a model backend: ``(base mask, morphological target, expansion points,
#: contraction points) -> realised mask`` (see :func:`deform_case`).
MaskRealiser = Callable[[np.ndarray, np.ndarray, Sequence[Sequence[int]],
                         Sequence[Sequence[int]]], np.ndarray]


class CaseFailure(ChexperceptError):
    """A case that cannot be deformed; ``reason`` is one of the ``REASON_*`` constants."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class DeformationParams:
    """Parameters of the morphological backend (defaults: the release's; docs/deformation.md).

    Attributes:
        min_component_size_px: Optimal components smaller than this are dropped (1000).
        max_deformation_retries: Attempts of step 4 per component and of the QA chain (10).
        min_point_distance_px: Expansion/contraction points at least this far apart (50).
        kernel_size_px: Elliptical kernel side (32).
        max_regions_per_case: Upper bound of anatomies deformed in the QA chain (3).
        iterations_per_depth: Kernel iterations per depth unit (1).
        fake_min_distance_px: Fake points/masks keep this far from centres and GT points (100).
        fake_masks_per_op: Fake masks made per operation and step (4).
        fake_mask_max_failures: Failed fake-mask tries allowed per operation and step (10).
        min_changed_frac: A step changes at least this fraction of the component area (ours).
        min_changed_px: ... and at least this many pixels (ours).
    """

    min_component_size_px: int = 1000
    max_deformation_retries: int = 10
    min_point_distance_px: int = 50
    kernel_size_px: int = 32
    max_regions_per_case: int = 3
    iterations_per_depth: int = 1
    fake_min_distance_px: int = 100
    fake_masks_per_op: int = 4
    fake_mask_max_failures: int = 10
    min_changed_frac: float = 0.01
    min_changed_px: int = 100

    @classmethod
    def from_config(cls, cfg: Any) -> DeformationParams:
        """Build from ``ChexperceptConfig.mask_deformation``."""
        return cls(min_component_size_px=cfg.min_component_size_px,
                   max_deformation_retries=cfg.max_deformation_retries,
                   min_point_distance_px=cfg.min_point_distance_px,
                   kernel_size_px=cfg.kernel_size_px,
                   max_regions_per_case=cfg.max_regions_per_case)


@dataclass
class CaseDeformation:
    """Result of one case.

    Attributes:
        result: The ``deformation_results.json`` value (without ``dicom_id``), JSON-ready.
        masks: File stem -> (1024, 1024) bool mask for ``deformed_masks/<key_id>/``.
    """

    result: dict[str, Any]
    masks: dict[str, np.ndarray] = field(default_factory=dict)


def optimal_components(mask: np.ndarray, min_component_px: int) -> list[np.ndarray]:
    """Components of the candidate mask with >= ``min_component_px`` pixels, largest first.

    4-connected as scipy ``label`` (release ``component_filtering``; docs/deformation.md, "Grid
    points"); ties keep
    label order. No SAM refinement and no closing: the approved mask is used as drawn.

    Args:
        mask: (H, W) bool candidate mask.
        min_component_px: Size threshold in pixels (config ``min_component_size_px``).

    Returns:
        (H, W) bool component masks.
    """
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=4)
    areas = stats[1:, cv2.CC_STAT_AREA]
    order = sorted((i for i in range(n - 1) if areas[i] >= min_component_px),
                   key=lambda i: (-int(areas[i]), i))
    return [labels == (i + 1) for i in order]


# --------------------------------------------------------------------------------------
# Step 4: anatomy/operation selection and deformation candidates
# --------------------------------------------------------------------------------------


def select_anatomies(
    info: Mapping[str, Any], overlap: Mapping[str, Mapping[str, Any]], is_cardio: bool,
    rng: np.random.Generator, max_regions: int = 3,
) -> dict[str, tuple[bool, str]]:
    """Choose the anatomies to deform and their operation.

    docs/deformation.md, "Deformation candidates".

    Lung lesions: for each overlapping zone, the candidates are overlapping lung regions whose
    name contains the zone name, plus, for a ``lung base`` zone, the same side's costophrenic
    angle (the release admitted either side, docs/differences.md D16). Each candidate gets a
    random operation, forced to contraction if the region ratio >= 0.75, to expansion if <= 0.5,
    and to contraction if its lung's ratio >= 0.7; one candidate per zone is picked uniformly.
    Cardiomegaly: 1..``max_regions`` random overlapping zones, random operation each.

    Args:
        info: The component's ``geometrical_mask_infos`` entry.
        overlap: Its ``lesion_overlap`` (:func:`overlapping_anatomy`).
        is_cardio: Whether the lesion is cardiomegaly.
        rng: The case's generator.
        max_regions: Upper bound of zones for cardiomegaly (release: 3).

    Returns:
        ``{anatomy: (is_expansion, group key)}`` in selection order.
    """
    selection: dict[str, tuple[bool, str]] = {}
    zones = list(overlap["zones"])
    if is_cardio:
        if not zones:
            return selection
        k = min(int(rng.integers(1, max_regions + 1)), len(zones))
        for i in rng.choice(len(zones), size=k, replace=False):
            selection[zones[int(i)]] = (bool(rng.integers(2)), "zones")
        return selection
    regions = overlap["lung_regions"]
    lungs = info["overlap"]
    for zone in zones:
        cands = [r for r in regions if zone in r]
        if zone.endswith("lung base"):
            cands += [r for r in regions
                      if r.endswith("costophrenic angle") and side_of(r) == side_of(zone)]
        if not cands:
            continue
        ops = []
        for name in cands:
            expand = bool(rng.integers(2))
            ratio = regions[name]["overlap_ratio"]
            if ratio >= FORCE_CONTRACTION_REGION_RATIO:
                expand = False
            if ratio <= FORCE_EXPANSION_REGION_RATIO:
                expand = True
            if lungs[f"{side_of(name)} lung"]["overlap_ratio"] >= FORCE_CONTRACTION_LUNG_RATIO:
                expand = False
            ops.append(expand)
        j = int(rng.integers(len(cands)))
        selection[cands[j]] = (ops[j], "lung_regions")
    return selection


@dataclass
class _Recorded:
    """One anatomy's recorded deformation of a component (step 4)."""

    operation: str
    points: list[list[int]]
    widths: list[int]
    depth: int
    key: str
    delta: np.ndarray


@dataclass
class _Component:
    cid: str
    mask: np.ndarray
    stack: MorphStack
    info: dict[str, Any]
    overlap: dict[str, dict[str, Any]]
    recorded: dict[str, _Recorded] = field(default_factory=dict)
    step4: dict[str, Any] | None = None
    step4_mask: np.ndarray | None = None


class _CaseRunner:
    """Runs steps 4-5 and the distractors of one case (state is local to one case)."""

    def __init__(self, lesion: str, anatomy: CaseAnatomy, rng: np.random.Generator,
                 params: DeformationParams, realise: MaskRealiser | None = None) -> None:
        self.realise = realise
        self.is_cardio = lesion == "cardiomegaly"
        self.anatomy = anatomy
        self.rng = rng
        self.p = params
        self.depth = CARDIO_DEPTH if self.is_cardio else LUNG_DEPTH
        self.lung_union = anatomy.lung_union
        self.fake_point_area = (np.ones_like(self.lung_union) if self.is_cardio
                                else self.lung_union)

    def region(self, name: str, key: str) -> np.ndarray:
        group = self.anatomy.zones if key == "zones" else self.anatomy.lung_regions
        return group[name]  # type: ignore[index]

    # ---- step 4 ----------------------------------------------------------------------

    def deform_component(self, comp: _Component) -> None:
        """Find one verified deformation of ``comp`` (release ``deform_mask``); sets ``step4``."""
        if not comp.overlap["zones"] and not comp.overlap["lung_regions"]:
            return
        for attempt in range(self.p.max_deformation_retries):
            selection = select_anatomies(comp.info, comp.overlap, self.is_cardio, self.rng,
                                         self.p.max_regions_per_case)
            recorded: dict[str, _Recorded] = {}
            for name, (expand, key) in selection.items():
                op = EXPANSION if expand else CONTRACTION
                opposite_pts = [pt for r in recorded.values() if r.operation != op
                                for pt in r.points]
                region = self.region(name, key)
                found = collect_points(comp.stack, op, region, self.depth, self.rng,
                                       iterations_per_depth=self.p.iterations_per_depth,
                                       avoid=opposite_pts, avoid_dist=self.p.min_point_distance_px)
                if found is None:
                    continue
                iters = level_iterations(op, self.depth, self.p.iterations_per_depth)
                delta = edit_delta(comp.stack, op, found.points, region, iters)
                recorded[name] = _Recorded(op, found.points, found.widths, self.depth, key, delta)
            if not recorded:
                continue
            new = self._apply(comp, list(recorded.values()))
            exp_pts = [pt for r in recorded.values() if r.operation == EXPANSION for pt in r.points]
            cont_pts = [pt for r in recorded.values() if r.operation == CONTRACTION
                        for pt in r.points]
            if not (points_verified(new, exp_pts, cont_pts)
                    and changed_enough(new, comp.mask, self.p.min_changed_frac,
                                       self.p.min_changed_px)):
                continue
            comp.recorded = recorded
            first = next(iter(recorded))
            lungs = comp.info["overlap"]
            comp.step4 = {
                "deformation_result": {
                    "left": lungs["left lung"]["has_overlap"],
                    "right": lungs["right lung"]["has_overlap"],
                    "deformation": {n: {"operation": r.operation, "points": r.points}
                                    for n, r in recorded.items()},
                },
                "anatomy_depth_width_levels": {n: r.widths for n, r in recorded.items()},
                "deformation_success": True,
                "retry_count": attempt,
                "lesion_overlap": comp.overlap,
                "anatomy_operations": {n: r.operation == EXPANSION for n, r in recorded.items()},
                "anatomy_width_levels": {},
                "anatomy_depth_levels": {n: r.depth for n, r in recorded.items()},
                "first_key": recorded[first].key,
                "first_anatomy": first,
            }
            comp.step4_mask = new
            return
        logger.debug("component %s: no verified deformation after %d attempts", comp.cid,
                     self.p.max_deformation_retries)

    def _apply(self, comp: _Component, recs: Sequence[_Recorded]) -> np.ndarray:
        adds = [r.delta for r in recs if r.operation == EXPANSION]
        removes = [r.delta for r in recs if r.operation == CONTRACTION]
        target = compose(comp.mask, adds, removes, self.p.min_component_size_px)
        if self.realise is None:
            return target
        exp_pts = [pt for r in recs if r.operation == EXPANSION for pt in r.points]
        cont_pts = [pt for r in recs if r.operation == CONTRACTION for pt in r.points]
        return self.realise(comp.mask, target, exp_pts, cont_pts)

    # ---- step 5 ----------------------------------------------------------------------

    def qa_chain(self, comps: Sequence[_Component], possible: Sequence[str]
                 ) -> tuple[dict[str, Any] | None, bool, dict[str, np.ndarray]]:
        """Sequential QA deformation (release ``deform_mask_for_qa_sequential``)."""
        qa: dict[str, Any] | None = None
        masks: dict[str, np.ndarray] = {}
        success = False
        for _ in range(self.p.max_deformation_retries):
            n_sel = int(self.rng.integers(1, self.p.max_regions_per_case + 1))
            k = min(n_sel, len(possible))
            picks = self.rng.choice(len(possible), size=k, replace=False)
            selected = list(dict.fromkeys(possible[int(i)] for i in picks))
            qa = {EXPANSION: {}, CONTRACTION: {}, "no_deformation": {}}
            masks = {}
            outcomes: list[bool] = []
            skipped = 0
            for comp in comps:
                if comp.step4 is None:
                    skipped += 1
                    continue
                outcomes.extend(self._component_chain(comp, selected, qa, masks))
            if outcomes and all(outcomes):
                success = skipped == 0
                break
        return qa, success, masks

    def _component_chain(self, comp: _Component, selected: list[str], qa: dict[str, Any],
                         masks: dict[str, np.ndarray]) -> list[bool]:
        sid = f"suboptimal_component_{comp.cid}"
        names = list(comp.recorded)
        names = [names[int(i)] for i in self.rng.permutation(len(names))]
        targets = {op: [n for n in names if comp.recorded[n].operation == op and n in selected]
                   for op in (EXPANSION, CONTRACTION)}
        chain_points = {op: [pt for n in targets[op] for pt in comp.recorded[n].points]
                        for op in (EXPANSION, CONTRACTION)}
        flow = f"optimal_component_{comp.cid}"
        prev_mask = comp.mask
        applied: list[_Recorded] = []
        outcomes: list[bool] = []
        for op in (EXPANSION, CONTRACTION):
            if not targets[op]:
                masks[f"{sid}_no_{op}"] = comp.mask
                outcomes.append(True)
                continue
            for k, name in enumerate(targets[op]):
                rec = comp.recorded[name]
                trial = [*applied, rec]
                new = self._apply(comp, trial)
                exp_pts = [pt for r in trial if r.operation == EXPANSION for pt in r.points]
                cont_pts = [pt for r in trial if r.operation == CONTRACTION for pt in r.points]
                if not (points_verified(new, exp_pts, cont_pts)
                        and changed_enough(new, prev_mask, self.p.min_changed_frac,
                                           self.p.min_changed_px)):
                    outcomes.append(False)
                    break
                stem = f"{sid}_{'exp' if op == EXPANSION else 'cont'}{k + 1}"
                masks[stem] = new
                center = np.round(np.mean(np.asarray(rec.points, np.float64), axis=0))
                center_point = [int(center[0]), int(center[1])]
                fakes = self._distractors(new, stem, op, center_point, chain_points, masks)
                entry: dict[str, Any] = {"suboptimal_component_id": sid}
                entry["exp_idx" if op == EXPANSION else "cont_idx"] = k + 1
                entry.update({
                    "anatomy": name,
                    "points": rec.points,
                    "mask_path": stem,
                    "center_point": center_point,
                    "fake_masks": fakes["fake_masks"],
                    "fake_points_expansion": fakes["fake_points_expansion"],
                    "fake_points_contraction": fakes["fake_points_contraction"],
                    "revision": opposite(op),
                    "revision_flow": {"before revision": stem, "after revision": flow},
                })
                qa[op].setdefault(sid, []).append(entry)
                flow, prev_mask = stem, new
                applied.append(rec)
                selected.remove(name)
                outcomes.append(True)
        if not targets[EXPANSION] and not targets[CONTRACTION]:
            qa["no_deformation"][sid] = [{"suboptimal_component_id": sid,
                                          "mask_path": f"{sid}_no_contraction"}]
        return outcomes

    # ---- distractors (docs/deformation.md, "Fake masks and points") ------------------

    def _distractors(self, step_mask: np.ndarray, stem: str, op: str, center: list[int],
                     chain_points: Mapping[str, list[list[int]]],
                     masks: dict[str, np.ndarray]) -> dict[str, Any]:
        stack = MorphStack(step_mask, self.p.kernel_size_px)
        all_points = chain_points[EXPANSION] + chain_points[CONTRACTION]
        out: dict[str, Any] = {"fake_masks": []}
        for fake_op in (opposite(op), op):
            fake_mask_points: list[list[int]] = []  # per call, as generate_fake_masks2
            outside = fake_op == CONTRACTION  # 'contraction' -> dilated contour (release)
            avoid = chain_points[CONTRACTION] if outside else chain_points[EXPANSION]
            pts = sample_fake_points(stack, outside, self.fake_point_area, self.depth, center,
                                     avoid, self.rng,
                                     iterations_per_depth=self.p.iterations_per_depth,
                                     min_dist=self.p.fake_min_distance_px)
            out["fake_points_expansion" if outside else "fake_points_contraction"] = pts
            for n, fake in enumerate(self._fake_masks(stack, fake_op, all_points,
                                                      fake_mask_points), start=1):
                fake_stem = f"{stem}_fake_{fake_op}_{n}"
                masks[fake_stem] = fake
                out["fake_masks"].append({"org_mask": stem, "fake_mask": fake_stem})
        return {"fake_masks": out["fake_masks"],
                "fake_points_expansion": out["fake_points_expansion"],
                "fake_points_contraction": out["fake_points_contraction"]}

    def _fake_masks(self, stack: MorphStack, op: str, deformation_points: list[list[int]],
                    fake_points: list[list[int]]) -> list[np.ndarray]:
        """Up to 4 verified edits of the step mask at other places (release fake masks)."""
        made: list[np.ndarray] = []
        failures = raises = 0
        while len(made) < self.p.fake_masks_per_op and failures < self.p.fake_mask_max_failures:
            depth = self.depth + raises
            widths = DEEP_FAKE_WIDTHS if depth > 2 else (2, 3, 4)
            found = collect_points(stack, op, self.lung_union, depth, self.rng,
                                   iterations_per_depth=self.p.iterations_per_depth,
                                   avoid=deformation_points + fake_points,
                                   avoid_dist=self.p.fake_min_distance_px,
                                   first_widths=widths, attempts=1)
            ok = False
            if found is not None:
                delta = edit_delta(stack, op, found.points, self.lung_union,
                                   level_iterations(op, depth, self.p.iterations_per_depth))
                new = compose(stack.mask, [delta] if op == EXPANSION else [],
                              [delta] if op == CONTRACTION else [], self.p.min_component_size_px)
                exp_pts = found.points if op == EXPANSION else []
                cont_pts = found.points if op == CONTRACTION else []
                if self.realise is not None:
                    new = self.realise(stack.mask, new, exp_pts, cont_pts)
                ok = (points_verified(new, exp_pts, cont_pts)
                      and changed_enough(new, stack.mask, self.p.min_changed_frac,
                                         self.p.min_changed_px))
            if ok:
                made.append(new)
                fake_points.extend(found.points)  # type: ignore[union-attr]
                raises = 0
            else:
                failures += 1
                raises = min(raises + 1, MAX_FAKE_DEPTH_RAISES)
        return made


def deform_case(
    lesion: str, components: Sequence[np.ndarray], anatomy: CaseAnatomy,
    rng: np.random.Generator, params: DeformationParams, realise: MaskRealiser | None = None,
) -> CaseDeformation:
    """Run steps 3-5 of 01.01 on one case with the morphological backend.

    Model backends (``sam2``/``sam3``) reuse this whole procedure (selection, point collection,
    verification, retries, QA chain, fakes) and swap only the edit step through ``realise``:
    the morphological result becomes the perturbed mask input of a SAM prediction.

    Args:
        lesion: The case's lesion (``cardiomegaly`` uses zones only, depth 1).
        components: (1024, 1024) bool optimal components, largest first
            (:func:`optimal_components`); ``mask_component_id`` = list index.
        anatomy: The case's anatomy (lungs already OR-ed with the lesion).
        rng: The case's generator (``rng_for(seed, "deformation", key_id)``).
        params: Backend parameters.
        realise: Optional edit step ``(base, target, expansion_points, contraction_points) ->
            new mask`` (all (1024, 1024) bool; points [x, y]); None keeps the morphological
            target. It must not keep state between calls that changes its results.

    Returns:
        The case's result and masks (``optimal_*``, ``suboptimal_component_<i>``, QA steps,
        ``_no_<op>`` and fakes).

    Raises:
        CaseFailure: ``no_lung_overlap`` if no component overlaps a zone,
            ``no_valid_deformation`` if no component got a verified deformation.
    """
    if not components:
        raise CaseFailure(REASON_EMPTY_MASK, "no mask component reaches the minimum size")
    runner = _CaseRunner(lesion, anatomy, rng, params, realise)
    masks: dict[str, np.ndarray] = {}
    comps: list[_Component] = []
    for i, mask in enumerate(components):
        cid = str(i)
        info = geometrical_mask_info(mask, cid, anatomy)
        comps.append(_Component(cid, mask, MorphStack(mask, params.kernel_size_px), info,
                                overlapping_anatomy(info)))
        masks[f"optimal_component_{cid}"] = mask
    masks["optimal_combined_mask"] = np.logical_or.reduce(list(components))
    if not any(c.overlap["zones"] for c in comps):
        raise CaseFailure(REASON_NO_LUNG_OVERLAP,
                          "no mask component covers any lung zone (lesion outside both lungs)")
    possible: list[str] = []
    org: dict[str, Any] = {}
    for comp in comps:
        runner.deform_component(comp)
        if comp.step4 is not None:
            sid = f"suboptimal_component_{comp.cid}"
            org[sid] = comp.step4
            masks[sid] = comp.step4_mask
            possible.extend(comp.recorded)
    if not org:
        raise CaseFailure(REASON_NO_VALID_DEFORMATION,
                          f"no component got a verified deformation after "
                          f"{params.max_deformation_retries} attempts")
    qa, success, qa_masks = runner.qa_chain(comps, possible)
    masks.update(qa_masks)
    result = {
        "org_deformation_results": {"possible_deformation_anatomy": possible,
                                    "deformation_results": org},
        "qa_deformation_results": qa,
        "geometrical_mask_infos": [c.info for c in comps],
        "qa_deformation_success": success,
    }
    return CaseDeformation(result=result, masks=masks)


__all__ = [
    "CaseDeformation",
    "CaseFailure",
    "DeformationParams",
    "MaskRealiser",
    "deform_case",
    "optimal_components",
    "select_anatomies",
]
