"""Stage 02 question text, detection/contour answers, point options and revision-result masks."""

from __future__ import annotations

import copy
import math
import re

import pytest
import qa_cases

from chexpercept.qa import _text
from chexpercept.qa._errors import CaseBuildError
from chexpercept.qa.build import detection_qa
from chexpercept.qa.contour import (
    build_contour_qa,
    candidate_masks,
    component_plans,
    geometry_by_component,
    mask_combinations,
)
from chexpercept.rng import rng_for

OPTIONS_BLOCK = re.compile(r"\n\nOptions:\n(\(\d+\) [^\n]+\n)*\(\d+\) [^\n]+$")


def _options_in_text(question: str) -> list[str]:
    assert OPTIONS_BLOCK.search(question), question
    block = question.split("\n\nOptions:\n", 1)[1].split("\n")
    out = []
    for i, line in enumerate(block, start=1):
        assert line.startswith(f"({i}) ")
        out.append(line[len(f"({i}) "):])
    return out


def _lung_qa(seed: int = 0, no_deformation: bool = False, case: dict | None = None) -> dict:
    raw = case or qa_cases.lung_case("d")[0]
    key = "effusion_s1_positive_0"
    return build_contour_qa(key, "effusion", qa_cases.validated(raw), no_deformation,
                            rng_for(seed, "qa", key))


def test_with_options_format():
    text = _text.with_options("Stem?", ["Yes", "No"])
    assert text == "Stem?\n\nOptions:\n(1) Yes\n(2) No"


@pytest.mark.parametrize("lesion,direct", [("opacity", True), ("consolidation", True),
                                           ("effusion", False), ("cardiomegaly", False),
                                           ("edema", False), ("atelectasis", False),
                                           ("pneumonia", False)])
def test_detection_wording_and_answers(lesion, direct):
    pos, neg = detection_qa(lesion, True), detection_qa(lesion, False)
    assert ("suggestive of" not in pos["question"]) == direct
    assert lesion in pos["question"]
    assert _options_in_text(pos["question"]) == ["Yes", "No"]
    assert (pos["answer"], pos["answer_index"]) == ("Yes", 1)
    assert (neg["answer"], neg["answer_index"]) == ("No", 2)


def test_contour_eval_answers_and_heart_note():
    rr, rf = _lung_qa(), _lung_qa(no_deformation=True)
    assert (rr["contour_eval_qa"]["answer"], rr["contour_eval_qa"]["answer_index"]) == ("Yes", 1)
    assert (rf["contour_eval_qa"]["answer"], rf["contour_eval_qa"]["answer_index"]) == ("No", 2)
    assert "heart" in rr["contour_eval_qa"]["question"]
    assert "heart" in rr["initial_context"]
    assert _text.contour_eval_stem("cardiomegaly").count("heart") == 0
    assert rr["contour_eval_qa"]["relative_path"] == "contour_eval_qa/xray_with_mask.png"


def test_every_question_ends_with_options_block():
    qa = _lung_qa()
    for key in ("contour_eval_qa", "contour_revision_qa_expansion",
                "contour_revision_qa_contraction", "contour_revision_qa_revision_result"):
        texts = _options_in_text(qa[key]["question"])
        assert len(texts) == len(qa[key]["answer_options"])


def test_revision_free_omits_revision_questions():
    qa = _lung_qa(no_deformation=True)
    assert list(qa) == ["no_deformation", "revision_before_masks", "revision_after_masks",
                        "contour_eval_qa"]
    assert qa["revision_after_masks"] == ["optimal_component_0",
                                          "suboptimal_component_2_no_contraction"]


def test_component_plans_before_after_and_gap_ids():
    plans = component_plans(qa_cases.validated(qa_cases.lung_case("d")[0]), "k")
    assert [p.sid for p in plans] == ["suboptimal_component_0", "suboptimal_component_2"]
    assert plans[0].before == "suboptimal_component_0_cont1"  # last contraction step
    assert plans[0].after == "optimal_component_0"  # first expansion step's after
    assert plans[1].before == plans[1].after == "suboptimal_component_2_no_contraction"


def test_point_options_gt_by_revision_op_and_none_last():
    qa = _lung_qa()
    exp, cont = qa["contour_revision_qa_expansion"], qa["contour_revision_qa_contraction"]
    options = exp["answer_options"]
    assert options == cont["answer_options"]
    assert options[-1] == {"point": None, "color": "None"}
    by_point = {tuple(o["point"]): i for i, o in enumerate(options, 1) if o["point"]}
    # the contraction step (centre 330,640) needs expansion; the expansion step needs contraction
    assert exp["answer_index"] == [by_point[(330, 640)]]
    assert cont["answer_index"] == [by_point[(200, 520)]]
    assert exp["answer"] == f"{options[by_point[(330, 640)] - 1]['color']} point"
    assert _options_in_text(exp["question"])[-1] == "None"
    colors = [o["color"] for o in options[:-1]]
    assert colors == list(_text.POINT_COLORS[:len(colors)])


def test_fake_points_kept_only_100px_apart():
    qa = _lung_qa()
    points = [o["point"] for o in qa["contour_revision_qa_expansion"]["answer_options"]
              if o["point"]]
    # (205,530) is 11 px from a GT point and (350,480) 85 px from a kept fake: both dropped;
    # (250,700) is exactly 100 px from GT (330,640): kept
    assert sorted(map(tuple, points)) == [(200, 520), (250, 700), (330, 640), (380, 400)]
    for i, p in enumerate(points):
        for q in points[i + 1:]:
            assert math.dist(p, q) >= 100


def test_point_none_answer_when_no_gt_of_that_kind():
    case = qa_cases.lung_case("d")[0]
    case["qa_deformation_results"]["contraction"] = {}
    qa = _lung_qa(case=case)
    n = len(qa["contour_revision_qa_expansion"]["answer_options"])
    assert qa["contour_revision_qa_expansion"]["answer_index"] == [n]
    assert qa["contour_revision_qa_expansion"]["answer"] == "None"


def test_points_capped_at_eight_and_shuffled_by_seed():
    case = qa_cases.lung_case("d")[0]
    step = case["qa_deformation_results"]["expansion"]["suboptimal_component_0"][0]
    step["fake_points_expansion"] = [[x, y] for x in range(100, 1000, 150)
                                     for y in range(100, 1000, 150)]
    orders = set()
    for seed in range(6):
        options = _lung_qa(seed, case=copy.deepcopy(case))["contour_revision_qa_expansion"][
            "answer_options"]
        assert len(options) == 9  # 8 points + None
        assert {o["color"] for o in options[:-1]} == set(_text.POINT_COLORS)
        pts = [tuple(o["point"]) for o in options[:-1]]
        assert (200, 520) in pts and (330, 640) in pts  # GT always kept
        orders.add(tuple(pts))
    assert len(orders) > 1


def test_more_than_eight_gt_points_fails():
    case = qa_cases.lung_case("d")[0]
    steps = case["qa_deformation_results"]["expansion"]["suboptimal_component_0"]
    steps += [copy.deepcopy(steps[0]) for _ in range(8)]
    with pytest.raises(CaseBuildError, match="GT points"):
        _lung_qa(case=case)


def test_revision_result_options_and_answer():
    qa = _lung_qa()
    result = qa["contour_revision_qa_revision_result"]
    options = result["answer_options"]
    assert 2 <= len(options) <= 4
    assert [o["relative_path"] for o in options] == [f"option_{i}.png"
                                                     for i in range(1, len(options) + 1)]
    assert [o["type"] for o in options].count("true") == 1
    true_i = result["answer_index"]
    assert options[true_i - 1]["type"] == "true"
    assert options[true_i - 1]["masks"] == qa["true_combination"]
    assert result["answer"] == _text.mask_option_text(true_i)
    assert _options_in_text(result["question"]) == [_text.mask_option_text(i)
                                                   for i in range(1, len(options) + 1)]
    before = set(qa["revision_before_masks"])
    fakes = [set(o["masks"]) for o in options if o["type"] == "fake"]
    assert before not in fakes and set(qa["true_combination"]) not in fakes
    assert len({frozenset(f) for f in fakes}) == len(fakes)


def test_fake_combinations_prefer_fewest_defaults():
    qa = _lung_qa()
    # component 0 has 5 non-default distractors, so 3 zero-default combos exist
    for combo in qa["fake_combinations"]:
        assert not any(m.startswith("default_") for m in combo)


def test_combination_excludes_before_set_and_samples_within_group():
    case = qa_cases.validated(qa_cases.lung_case("d")[0])
    plans = component_plans(case, "k")
    true_m = {"suboptimal_component_0": ["optimal_component_0"], "suboptimal_component_2": ["n"]}
    fake_m = {"suboptimal_component_0": ["suboptimal_component_0_cont1", "default_keep"],
              "suboptimal_component_2": []}
    plans = [plans[0], plans[1].__class__(sid=plans[1].sid, component_id="2", steps=(),
                                          before="n", after="n")]
    true_combo, fakes = mask_combinations(plans, true_m, fake_m, rng_for(0, "t"), "k")
    assert true_combo == ["optimal_component_0", "n"]
    assert fakes == [["default_keep", "n"]]  # [cont1, n] equals the before set


def test_default_distractors_per_side_and_gmi_indexed_by_component_id():
    case = qa_cases.validated(qa_cases.lung_case("d")[0])
    plans = component_plans(case, "k")
    geometry = geometry_by_component(case, "k")
    _, fake = candidate_masks(plans, "effusion", geometry, "k")
    assert fake["suboptimal_component_0"][-3:] == ["default_keep", "default_right_lung_chex",
                                                    "default_right_lung_cxas"]
    # component 2 (listed first, id gap) is found by mask_component_id: left lung
    assert fake["suboptimal_component_2"] == ["default_keep", "default_left_lung_chex",
                                              "default_left_lung_cxas"]


def test_second_component_of_same_side_gets_only_keep():
    raw = qa_cases.lung_case("d")[0]
    raw["geometrical_mask_infos"][0]["overlap"]["left lung"]["overlap_ratio"] = 0.0  # -> right
    case = qa_cases.validated(raw)
    _, fake = candidate_masks(component_plans(case, "k"), "effusion",
                              geometry_by_component(case, "k"), "k")
    assert fake["suboptimal_component_2"] == ["default_keep"]


def test_missing_geometry_for_undeformed_component_fails():
    raw = qa_cases.lung_case("d")[0]
    raw["geometrical_mask_infos"] = raw["geometrical_mask_infos"][1:]
    with pytest.raises(CaseBuildError, match="mask_component_id '2'"):
        _lung_qa(case=raw)


def test_cardiomegaly_defaults():
    case = qa_cases.validated(qa_cases.cardio_case("d")[0])
    _, fake = candidate_masks(component_plans(case, "k"), "cardiomegaly",
                              geometry_by_component(case, "k"), "k")
    assert fake["suboptimal_component_0"][-3:] == ["default_keep", "default_dilated",
                                                    "default_eroded"]


def test_same_seed_same_qa_other_seed_differs():
    assert _lung_qa(3) == _lung_qa(3)
    assert any(_lung_qa(3) != _lung_qa(s) for s in range(4, 10))
