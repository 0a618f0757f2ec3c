"""Stage 01.01 morphological backend: selection rules, points, edits, chain, distractors."""

from __future__ import annotations

import numpy as np
import pytest
from stage01_inputs import LESION_MASKS, ellipse, left_lung, right_lung

from chexpercept.anatomy import build_case_anatomy, build_lungs
from chexpercept.deformation import CaseFailure, DeformationParams, deform_case, optimal_components
from chexpercept.deformation._morph import (
    CONTRACTION,
    EXPANSION,
    MorphStack,
    compose,
    edit_delta,
    level_iterations,
    points_verified,
)
from chexpercept.deformation.morphological import select_anatomies
from chexpercept.deformation.points import collect_points, sample_fake_points
from chexpercept.files import dumps_json
from chexpercept.rng import rng_for
from chexpercept.schema import DeformationCase

PARAMS = DeformationParams()


def _case(lesion, mask, seed=0):
    comps = optimal_components(mask, PARAMS.min_component_size_px)
    lesion_mask = np.zeros_like(mask)
    for c in comps:
        lesion_mask |= c
    left, right = build_lungs(left_lung(), right_lung(), left_lung(), right_lung(), lesion_mask)
    anat = build_case_anatomy(left, right, with_regions=lesion != "cardiomegaly")
    return deform_case(lesion, comps, anat, rng_for(seed, "deformation", lesion), PARAMS), anat


def test_optimal_components_filter_and_order():
    mask = ellipse(300, 300, 20, 20) | ellipse(700, 700, 60, 60) | ellipse(300, 700, 40, 40)
    mask[10:20, 10:20] = True  # 100 px: dropped
    comps = optimal_components(mask, 1000)
    assert [int(c.sum()) for c in comps] == sorted((int(c.sum()) for c in comps), reverse=True)
    assert len(comps) == 3 and comps[0][700, 700] and not any(c[15, 15] for c in comps)


def _overlap(zones, regions, left_ratio=0.1, right_ratio=0.1):
    info = {"overlap": {"left lung": {"overlap_ratio": left_ratio},
                        "right lung": {"overlap_ratio": right_ratio}}}
    overlap = {"zones": {z: {"overlap_ratio": 0.3, "key": "zones"} for z in zones},
               "lung_regions": {r: {"overlap_ratio": v, "key": "lung_regions"}
                                for r, v in regions.items()}}
    return info, overlap


def test_lung_base_admits_only_the_same_side_cpa():
    info, overlap = _overlap(["right lung base"], {"right costophrenic angle": 0.6,
                                                   "left costophrenic angle": 0.6})
    picked = {next(iter(select_anatomies(info, overlap, False, rng_for(s, "t"))))
              for s in range(40)}
    assert picked == {"right costophrenic angle"}


def test_operation_overrides():
    rng = rng_for(0, "ops")
    name = "right medial lung & right mid zone lung"
    for _ in range(20):
        info, ov = _overlap(["right mid zone lung"], {name: 0.8})
        assert select_anatomies(info, ov, False, rng) == {name: (False, "lung_regions")}
        info, ov = _overlap(["right mid zone lung"], {name: 0.3})
        assert select_anatomies(info, ov, False, rng)[name][0]
        info, ov = _overlap(["right mid zone lung"], {name: 0.3}, right_ratio=0.7)
        assert not select_anatomies(info, ov, False, rng)[name][0]
    info, ov = _overlap(["right lung base", "left lung base", "right mid zone lung"], {})
    sizes = {len(select_anatomies(info, ov, True, rng_for(s, "c"))) for s in range(30)}
    assert sizes == {1, 2, 3}


def test_collect_points_rules():
    mask = ellipse(330, 600, 100, 100)
    stack = MorphStack(mask, 32)
    region = np.zeros_like(mask)
    region[:, :330] = True
    for seed in range(10):
        found = collect_points(stack, EXPANSION, region, 2, rng_for(seed, "p"),
                               avoid=[[330, 480]], avoid_dist=50)
        assert found is not None and len(found.widths) == 2
        assert found.widths[0] in (2, 3, 4)
        assert 2 <= found.widths[1] <= max(2, found.widths[0] - 1)
        pts = np.array(found.points)
        assert len(pts) == sum(found.widths)
        assert all(region[y, x] and not mask[y, x] for x, y in pts)
        d1 = pts[: found.widths[0]]
        dists = np.sqrt(((d1[:, None] - d1[None]) ** 2).sum(-1))
        assert (dists[np.triu_indices(len(d1), 1)] >= 30).all()
        assert (np.sqrt(((pts - [330, 480]) ** 2).sum(1)) >= 50).all()
    assert collect_points(stack, CONTRACTION, np.zeros_like(mask), 2, rng_for(0, "p")) is None


@pytest.mark.parametrize("op", [EXPANSION, CONTRACTION])
def test_edit_acceptance_points_inside_or_outside(op):
    mask = ellipse(330, 600, 100, 120)
    stack = MorphStack(mask, 32)
    region = np.ones_like(mask)
    found = collect_points(stack, op, region, 2, rng_for(1, op))
    delta = edit_delta(stack, op, found.points, region, level_iterations(op, 2, 1))
    new = compose(mask, [delta] if op == EXPANSION else [], [delta] if op == CONTRACTION else [],
                  1000)
    exp, cont = (found.points, []) if op == EXPANSION else ([], found.points)
    assert points_verified(new, exp, cont)
    assert not points_verified(mask, exp, cont)  # the unedited mask fails the check
    changed = new ^ mask
    assert changed.sum() >= 0.01 * mask.sum()
    # the edit is local: nothing changes far from the points
    far = np.ones_like(mask)
    for x, y in found.points:
        far[max(0, y - 200):y + 200, max(0, x - 200):x + 200] = False
    assert not (changed & far).any()


@pytest.mark.parametrize("lesion", ["consolidation", "cardiomegaly", "edema", "effusion"])
def test_case_steps_are_verified_chained_and_schema_valid(lesion):
    case, anat = _case(lesion, LESION_MASKS[lesion]())
    res = case.result
    DeformationCase.model_validate(res)
    assert res["qa_deformation_success"] is True
    qa = res["qa_deformation_results"]
    assert set(qa) == {"expansion", "contraction", "no_deformation"}
    infos = {g["mask_component_id"]: g for g in res["geometrical_mask_infos"]}
    if lesion == "cardiomegaly":
        assert all("lung_regions" not in g["overlap"] for g in infos.values())
    steps = 0
    for sid, org in res["org_deformation_results"]["deformation_results"].items():
        cid = sid.rsplit("_", 1)[1]
        assert org["lesion_overlap"]["zones"] == {
            z: {"overlap_ratio": v["overlap_ratio"], "key": "zones"}
            for z, v in infos[cid]["overlap"]["zones"].items() if v["has_overlap"]}
        optimal = case.masks[f"optimal_component_{cid}"]
        flow = f"optimal_component_{cid}"
        prev = optimal
        entries = qa["expansion"].get(sid, []) + qa["contraction"].get(sid, [])
        for e in entries:
            steps += 1
            op = "contraction" if e["revision"] == "expansion" else "expansion"
            assert e["revision_flow"] == {"before revision": e["mask_path"], "after revision": flow}
            mask = case.masks[e["mask_path"]]
            inside = [mask[y, x] for x, y in e["points"]]
            assert all(inside) if op == "expansion" else not any(inside)
            assert (mask ^ prev).sum() >= max(0.01 * optimal.sum(), 100)
            assert e["center_point"] == [int(v) for v in np.round(np.mean(e["points"], 0))]
            assert e["anatomy"] in org["deformation_result"]["deformation"]
            assert e["points"] == org["deformation_result"]["deformation"][e["anatomy"]]["points"]
            for p in e["fake_points_expansion"]:
                assert not mask[p[1], p[0]]
            for key in ("fake_points_expansion", "fake_points_contraction"):
                fakes = np.array(e[key])
                assert 2 <= len(fakes) <= 5
                assert (np.sqrt(((fakes - e["center_point"]) ** 2).sum(1)) >= 100).all()
            for f in e["fake_masks"]:
                assert f["org_mask"] == e["mask_path"]
                assert f["fake_mask"].startswith(e["mask_path"] + "_fake_")
                fake = case.masks[f["fake_mask"]]
                assert (fake ^ mask).any()
            flow, prev = e["mask_path"], mask
        exp_idx = [e["exp_idx"] for e in qa["expansion"].get(sid, [])]
        assert exp_idx == list(range(1, len(exp_idx) + 1))
    assert steps >= 1


def test_same_seed_same_result_and_fake_points_rule():
    a, _ = _case("consolidation", LESION_MASKS["consolidation"](), seed=3)
    b, _ = _case("consolidation", LESION_MASKS["consolidation"](), seed=3)
    assert dumps_json(a.result) == dumps_json(b.result)
    assert a.masks.keys() == b.masks.keys()
    assert all((a.masks[k] == b.masks[k]).all() for k in a.masks)
    mask = ellipse(330, 600, 100, 120)
    center = [330, 480]
    pts = sample_fake_points(MorphStack(mask, 32), True, np.ones_like(mask), 2, center,
                             [[330, 720]], rng_for(0, "f"))
    assert 2 <= len(pts) <= 5
    arr = np.array(pts)
    assert (np.sqrt(((arr - center) ** 2).sum(1)) >= 100).all()
    assert (np.sqrt(((arr - [330, 720]) ** 2).sum(1)) >= 100).all()


def test_component_indexing_by_id_with_a_component_outside_the_lungs():
    # component 0 (largest) lies between the lungs and touches neither: no deformation
    mask = ellipse(515, 120, 45, 100) | ellipse(330, 600, 50, 50)
    case, _ = _case("consolidation", mask)
    res = case.result
    org = res["org_deformation_results"]["deformation_results"]
    ids = [g["mask_component_id"] for g in res["geometrical_mask_infos"]]
    assert ids == ["0", "1"]
    assert list(org) == ["suboptimal_component_1"]
    info1 = res["geometrical_mask_infos"][1]
    assert org["suboptimal_component_1"]["deformation_result"]["right"] is \
        info1["overlap"]["right lung"]["has_overlap"] is True
    assert res["qa_deformation_success"] is False  # one component skipped (release rule)


def test_case_failures():
    with pytest.raises(CaseFailure) as exc:
        _case("edema", ellipse(330, 600, 10, 10))
    assert exc.value.reason == "empty_mask"
    with pytest.raises(CaseFailure) as exc:
        _case("edema", ellipse(515, 120, 30, 60))
    assert exc.value.reason == "no_lung_overlap"
