"""Stage 02 attribute extraction: distribution, location, severity, comparison rules."""

from __future__ import annotations

import pytest
import qa_cases

from chexpercept.qa import _text
from chexpercept.qa._errors import CaseBuildError
from chexpercept.qa.attributes import (
    build_attribute_qa,
    comparison_index,
    distribution_index,
    region_text_and_zone,
    severity_index,
)
from chexpercept.rng import rng_for
from chexpercept.schema import GeometricalMaskInfo


def _infos(*entries: dict) -> list[GeometricalMaskInfo]:
    return [GeometricalMaskInfo.model_validate(e) for e in entries]


def _qa(infos, seed=0, key="effusion_s1_positive_0"):
    return build_attribute_qa(key, "effusion", infos, rng_for(seed, "qa", key))


def test_region_text_and_zone():
    assert region_text_and_zone("right lateral lung & right lung base", "k") == (
        "the intersection of the right lateral lung and the right lower zone lung",
        "right lower zone lung")
    assert region_text_and_zone("left medial lung & left upper zone lung", "k") == (
        "the intersection of the left medial lung and the left upper zone lung",
        "left upper zone lung")
    assert region_text_and_zone("left costophrenic angle", "k") == (
        "the left costophrenic angle", "left lower zone lung")
    with pytest.raises(CaseBuildError):
        region_text_and_zone("heart", "k")


@pytest.mark.parametrize("n,index", [(1, 1), (2, 2), (3, 3), (4, 4), (6, 4)])
def test_distribution_index(n, index):
    assert distribution_index(n) == index


def test_distribution_zero_zones_is_an_error():
    with pytest.raises(ValueError):
        distribution_index(0)


@pytest.mark.parametrize("ratio,index", [(0.0, 1), (1 / 3 - 1e-9, 1), (1 / 3, 2),
                                         (2 / 3 - 1e-9, 2), (2 / 3, 3), (1.0, 3)])
def test_severity_thresholds(ratio, index):
    assert severity_index(ratio) == index


@pytest.mark.parametrize("left,right,lh,rh,index", [
    (150, 100, True, True, 2),   # exactly 1.5x -> larger
    (149, 100, True, True, 1),
    (100, 150, True, True, 3),
    (100, 149, True, True, 1),
    (100, 100, True, True, 1),
    (500, 0, True, False, 4),    # only one lung
    (0, 0, False, False, 4),
])
def test_comparison_rule(left, right, lh, rh, index):
    assert comparison_index(left, right, lh, rh) == index


def test_distribution_counts_distinct_zones():
    infos = _infos(qa_cases.gmi("0", ["right lateral lung & right lung base",
                                      "right costophrenic angle",  # same zone: right lower
                                      "right medial lung & right mid zone lung"],
                                right=(True, 0.3, 100)))
    dist = _qa(infos)["distribution"]
    assert dist["answer_zones"] == ["right mid zone lung", "right lower zone lung"]
    assert (dist["answer"], dist["answer_index"]) == ("2 zones", 2)
    assert dist["answer_options"] == list(_text.DISTRIBUTION_OPTIONS)


def test_zero_positive_zones_fails_the_case():
    infos = _infos(qa_cases.gmi("0", [], right=(True, 0.3, 100)))
    with pytest.raises(CaseBuildError, match="0 positive zones"):
        _qa(infos)


def test_location_construction_over_seeds():
    positives = ["right lateral lung & right mid zone lung", "right costophrenic angle"]
    infos = _infos(qa_cases.gmi("0", positives, right=(True, 0.2, 100)))
    texts_pos = {region_text_and_zone(p, "k")[0] for p in positives}
    ks = set()
    for seed in range(30):
        loc = _qa(infos, seed)["location"]
        opts = loc["answer_options"]
        assert len(opts) == 4 and opts[-1] == _text.LOCATION_NONE_OPTION
        shown_pos = [i for i, o in enumerate(opts[:3], 1) if o in texts_pos]
        ks.add(len(shown_pos))
        if shown_pos:
            assert loc["answer_index"] == shown_pos
            assert loc["answer_zones"] == [opts[i - 1] for i in shown_pos]
            assert loc["answer"] == ", ".join(opts[i - 1] for i in shown_pos)
        else:
            assert loc["answer_index"] == [4]
            assert loc["answer"] == _text.LOCATION_NONE_OPTION
            assert loc["answer_zones"] == []
    assert ks == {0, 1, 2}  # k ~ U{0..3}, capped by the 2 positives


def test_location_tops_up_with_positives_when_negatives_run_short():
    raw = qa_cases.gmi("0", [], right=(True, 0.2, 100))
    names = list(raw["overlap"]["lung_regions"])
    for name in names[:-1]:  # only one negative region left
        raw["overlap"]["lung_regions"][name]["has_overlap"] = True
    for seed in range(10):
        loc = _qa(_infos(raw), seed)["location"]
        assert len(loc["answer_index"]) >= 2 and 4 not in loc["answer_index"]


def test_severity_lung_follows_location_and_sums_components():
    a = qa_cases.gmi("0", ["right lateral lung & right mid zone lung"], right=(True, 0.2, 10))
    b = qa_cases.gmi("1", ["right medial lung & right lung base"], right=(True, 0.15, 10))
    c = qa_cases.gmi("2", [], left=(False, 0.009, 0))
    for seed in range(10):
        sev = _qa(_infos(a, b, c), seed)["severity/measurement"]
        assert sev["selected_lung"] == "right lung"  # only right overlaps
        assert sev["overlap_ratio"] == pytest.approx(0.35)
        assert sev["answer_index"] == 2
        assert sev["answer"] == "1/3 or more but less than 2/3 of the right lung area"


def test_severity_lung_from_shown_location_side():
    infos = _infos(qa_cases.gmi("0", ["left lateral lung & left mid zone lung",
                                      "right lateral lung & right mid zone lung"],
                                left=(True, 0.7, 50), right=(True, 0.1, 10)))
    for seed in range(20):
        qa = _qa(infos, seed)
        sides = {z.split()[4] if z.startswith("the intersection") else z.split()[1]
                 for z in qa["location"]["answer_zones"]}
        lung = qa["severity/measurement"]["selected_lung"]
        if len(sides) == 1:
            assert lung == f"{sides.pop()} lung"
        expected = 3 if lung == "left lung" else 1
        assert qa["severity/measurement"]["answer_index"] == expected


def test_comparison_fields():
    infos = _infos(qa_cases.gmi("0", ["right costophrenic angle"], right=(True, 0.2, 300)),
                   qa_cases.gmi("1", ["left costophrenic angle"], left=(True, 0.2, 200)))
    comp = _qa(infos)["comparison"]
    assert (comp["left_size"], comp["right_size"]) == (200, 300)
    assert comp["left_has_overlap"] and comp["right_has_overlap"]
    assert comp["answer_index"] == 3 and comp["answer"] == _text.COMPARISON_OPTIONS[2]


def test_comparison_ignores_sizes_without_overlap():
    infos = _infos(qa_cases.gmi("0", ["right costophrenic angle"], right=(True, 0.2, 300),
                                left=(False, 0.001, 999)))
    comp = _qa(infos)["comparison"]
    assert (comp["left_size"], comp["answer_index"]) == (0, 4)
