"""Benchmark reading, turn plans per path, up-front bundle validation."""

from __future__ import annotations

import json

import pytest
from stage03_bundle import CASES, LF, RF, RR, load_items, write_bundle

from chexpercept.errors import InputError, SchemaError
from chexpercept.evaluation import load_bundle, select_key_ids, validate_bundle
from chexpercept.evaluation.cases import listed_option_count, ordinal

ALL9 = ["detection_qa", "contour_evaluation_qa", "contour_revision_qa_expansion",
        "contour_revision_qa_contraction", "contour_revision_qa_revision_result",
        "attribute_extraction_qa_distribution", "attribute_extraction_qa_location",
        "attribute_extraction_qa_severity/measurement", "attribute_extraction_qa_comparison"]
EXPECTED_TURNS = {
    "effusion_s50000001_positive_0": ALL9,
    "effusion_s50000002_positive_0": ALL9[:2] + ALL9[5:],
    "effusion_s50000003_negative_0": ALL9[:1],
    "cardiomegaly_s50000004_positive_0": ALL9[:5],
    "cardiomegaly_s50000005_positive_0": ALL9[:2],
    "cardiomegaly_s50000006_negative_2": ALL9[:1],
    "opacity_s50000007_positive_0": ALL9,
}


@pytest.fixture()
def bundle_dir(tmp_path):
    return write_bundle(tmp_path / "bench")


def test_turn_sequence_per_path(bundle_dir):
    bundle = load_bundle(bundle_dir)
    cases = validate_bundle(bundle)
    assert [c.key_id for c in cases] == list(CASES)
    for case in cases:
        assert case.qa_path == CASES[case.key_id]
        assert [t.spec.name for t in case.turns] == EXPECTED_TURNS[case.key_id]
    lengths = {c.key_id: len(c.turns) for c in cases}
    assert lengths["effusion_s50000001_positive_0"] == 9  # RR
    assert lengths["effusion_s50000002_positive_0"] == 6  # RF
    assert lengths["effusion_s50000003_negative_0"] == 1  # LF
    assert lengths["cardiomegaly_s50000004_positive_0"] == 5  # cardiomegaly RR
    assert lengths["cardiomegaly_s50000005_positive_0"] == 2  # cardiomegaly RF


def test_turn_images_and_ground_truth(bundle_dir):
    case = validate_bundle(load_bundle(bundle_dir), ["effusion_s50000001_positive_0"])[0]
    by_name = {t.spec.name: t for t in case.turns}
    root = bundle_dir / "chexpercept" / case.key_id
    assert by_name["detection_qa"].images == (root / "detection_qa/xray.png",)
    assert by_name["contour_evaluation_qa"].images == (
        root / "contour_qa/contour_eval_qa/xray_with_mask.png",)
    expansion = by_name["contour_revision_qa_expansion"]
    assert expansion.images == (root / "contour_qa/contour_revision_qa/"
                                "xray_with_mask_and_points.png",)
    assert expansion.preamble and expansion.multi_select and expansion.none_index == 4
    assert expansion.option_texts == ("red point", "orange point", "yellow point", "None")
    assert by_name["contour_revision_qa_contraction"].images == ()
    result = by_name["contour_revision_qa_revision_result"]
    assert result.images == tuple(root / f"contour_qa/contour_revision_qa/option_{i}.png"
                                  for i in range(1, 5))
    assert result.option_texts == ("1st mask", "2nd mask", "3rd mask", "4th mask")
    assert by_name["attribute_extraction_qa_location"].multi_select
    assert not by_name["attribute_extraction_qa_distribution"].multi_select
    assert all(by_name[n].images == () for n in ALL9[5:])


def test_release_option_names_are_read(tmp_path):
    bundle_dir = write_bundle(tmp_path / "bench", release_names=True)
    case = validate_bundle(load_bundle(bundle_dir), ["effusion_s50000001_positive_0"])[0]
    result = case.turn("contour_revision_qa_revision_result")
    names = [p.name for p in result.images]
    assert names == ["option_1_mask_fake.png", "option_2_mask_answer.png",
                     "option_3_mask_fake.png", "option_4_mask_fake.png"]
    assert all(p.is_file() for p in result.images)


def test_revision_fields_present_or_absent_on_revision_free_cases(tmp_path):
    bundle_dir = write_bundle(tmp_path / "bench")
    data = load_items(bundle_dir)
    rf = "effusion_s50000002_positive_0"
    contour = data[rf]["contour_qa"]
    revision_keys = ("contour_revision_qa_expansion", "contour_revision_qa_contraction",
                     "contour_revision_qa_revision_result")
    for key in revision_keys:  # the release writes them for revision-free cases too
        contour[key] = data["effusion_s50000001_positive_0"]["contour_qa"][key]
    (bundle_dir / "chexpercept.json").write_text(json.dumps(data), encoding="utf-8")
    case = validate_bundle(load_bundle(bundle_dir), [rf])[0]  # their images are not needed
    assert len(case.turns) == 6
    for key in (*revision_keys, "initial_context"):
        contour.pop(key)
    (bundle_dir / "chexpercept.json").write_text(json.dumps(data), encoding="utf-8")
    case = validate_bundle(load_bundle(bundle_dir), [rf])[0]
    assert len(case.turns) == 6


def test_validate_collects_every_problem_with_key_id_and_path(tmp_path):
    bundle_dir = write_bundle(tmp_path / "bench")
    rr = "effusion_s50000001_positive_0"
    option = bundle_dir / "chexpercept" / rr / "contour_qa/contour_revision_qa/option_3.png"
    option.unlink()
    points = (bundle_dir / "chexpercept" / "opacity_s50000007_positive_0" /
              "contour_qa/contour_revision_qa/xray_with_mask_and_points.png")
    points.write_bytes(b"not a png")
    data = load_items(bundle_dir)
    data["effusion_s50000002_positive_0"]["attribute_extraction_qa"]["distribution"][
        "answer_index"] = 7
    data["cardiomegaly_s50000004_positive_0"]["contour_qa"][
        "contour_revision_qa_expansion"]["answer_index"] = [1, 4]  # None with another option
    (bundle_dir / "chexpercept.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SchemaError) as info:
        validate_bundle(load_bundle(bundle_dir))
    msg = str(info.value)
    assert f"{rr}: contour_revision_qa_revision_result image missing ({option})" in msg
    assert "opacity_s50000007_positive_0: contour_revision_qa_expansion image cannot be " \
           "opened" in msg and str(points) in msg
    assert "effusion_s50000002_positive_0: attribute_extraction_qa_distribution: " \
           "answer_index 7 out of range 1..4" in msg
    assert "cardiomegaly_s50000004_positive_0: contour_revision_qa_expansion: answer_index " \
           "[1, 4] mixes the None option" in msg
    assert "4 problem(s)" in msg


def test_option_count_must_match_listed_options_and_images(tmp_path):
    bundle_dir = write_bundle(tmp_path / "bench")
    data = load_items(bundle_dir)
    rr = "effusion_s50000001_positive_0"
    result = data[rr]["contour_qa"]["contour_revision_qa_revision_result"]
    result["answer_options"][3]["relative_path"] = "option_1.png"  # two options, one image
    (bundle_dir / "chexpercept.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SchemaError, match=f"{rr}: contour_revision_qa_revision_result has 4 "
                                          f"options but 3 distinct option images"):
        validate_bundle(load_bundle(bundle_dir), [rr])
    result["answer_options"].pop()  # question still lists 4 masks
    (bundle_dir / "chexpercept.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SchemaError, match="question lists 4 options but answer_options has 3"):
        validate_bundle(load_bundle(bundle_dir), [rr])


def test_missing_benchmark_files(tmp_path):
    with pytest.raises(InputError, match="chexpercept.json"):
        load_bundle(tmp_path)
    (tmp_path / "chexpercept.json").write_text("{}", encoding="utf-8")
    with pytest.raises(InputError, match="image folder"):
        load_bundle(tmp_path)


def test_selection_limit_and_per_path_limit(bundle_dir):
    bundle = load_bundle(bundle_dir)
    assert select_key_ids(bundle, limit=2) == list(CASES)[:2]
    per_path = select_key_ids(bundle, limit=1, per_path_limit=1)
    assert [CASES[k] for k in per_path] == [RR, RF, LF]
    assert select_key_ids(bundle, per_path_limit=2) == [
        k for k in CASES if k != "opacity_s50000007_positive_0"]


def test_helpers():
    assert [ordinal(i) for i in (1, 2, 3, 4, 11, 12, 13, 21, 22)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd"]
    assert listed_option_count("Q?\n\nOptions:\n(1) Yes\n(2) No") == 2
    assert listed_option_count("Q without a list") is None


def test_a_case_whose_attribute_block_disagrees_with_the_path_rule_is_refused(tmp_path):
    """Stage 4 is asked by the one path rule (chexpercept.lesions.expected_stages): an
    effusion case without its attribute block, or a cardiomegaly case carrying one, is named,
    never planned with a guessed set of turns."""
    bundle_dir = write_bundle(tmp_path / "bench")
    data = load_items(bundle_dir)
    rf, cardio = "effusion_s50000002_positive_0", "cardiomegaly_s50000004_positive_0"
    data[cardio]["attribute_extraction_qa"] = data[rf]["attribute_extraction_qa"]
    data[rf]["attribute_extraction_qa"] = None
    (bundle_dir / "chexpercept.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SchemaError) as err:
        validate_bundle(load_bundle(bundle_dir), [rf, cardio])
    assert f"{rf}: positive effusion case has no attribute_extraction_qa" in str(err.value)
    assert f"{cardio}: attribute_extraction_qa must be null for cardiomegaly" in str(err.value)
