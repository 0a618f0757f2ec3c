"""The shared bundle validator (chexpercept.bundle) on deliberately broken bundles.

Each test copies a bundle exported from the hand-built Stage 02 cases, breaks one thing and
checks that the validator names the key_id, the defect and the file. Stage 03's
``validate_bundle`` must reject the same bundles (it calls the shared validator).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import qa_cases
from PIL import Image

from chexpercept.bundle import check_bundle, leaks_answer, validate_benchmark_dir
from chexpercept.errors import SchemaError
from chexpercept.evaluation import load_bundle, validate_bundle
from chexpercept.files import read_json
from chexpercept.layouts import BenchmarkLayout, QALayout
from chexpercept.qa import QAInputs, export_benchmark, generate_qa
from chexpercept.schema import load_benchmark

RR = "effusion_s50000001_positive_0"
CARDIO_RR = "cardiomegaly_s50000003_positive_0"
OTHER_RR = "effusion_s50000005_positive_0"
NEG = "effusion_s50000006_negative_0"
REV = "contour_qa/contour_revision_qa"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle")
    paths = qa_cases.build_inputs(root)
    out = root / "out"
    generate_qa(QAInputs(positive_annotation_csv=None, negative_annotation_csv=None,
                         output_dir=out, **paths),
                seed=0, ratios={"default": 0.0})
    bench = root / "bench"
    export_benchmark(read_json(QALayout(out).qa_results_json), bundle_dir=QALayout(out).bundle_dir,
                     benchmark_dir=bench, seed=0, per_path=dict.fromkeys(
                         ("lesion_free", "revision_free", "revision_required"), 10),
                     link="copy")
    return bench


@pytest.fixture()
def bench(exported, tmp_path):
    dst = tmp_path / "bench"
    shutil.copytree(exported, dst)
    return dst


def _data(bench):
    return json.loads((bench / "chexpercept.json").read_text(encoding="utf-8"))


def _save(bench, data):
    (bench / "chexpercept.json").write_text(json.dumps(data, indent=2), encoding="utf-8")


def _problems(bench, **kw):
    with pytest.raises(SchemaError) as info:
        validate_benchmark_dir(bench, **kw)
    return str(info.value)


def test_clean_export_is_valid_and_strict(exported):
    check, items = validate_benchmark_dir(exported)
    assert check.strict_names and check.problems == [] and check.warnings == []
    assert set(check.cases) == set(items) and RR in items and CARDIO_RR in items
    assert check.images == sum(1 for p in (exported / "chexpercept").rglob("*.png"))


def test_schema_problem_names_key_and_field(bench):
    data = _data(bench)
    del data[RR]["detection_qa"]["answer"]
    _save(bench, data)
    msg = _problems(bench)
    assert f"{RR}: detection_qa.answer" in msg


def test_missing_and_unreadable_images(bench):
    option = bench / "chexpercept" / RR / REV / "option_2.png"
    option.unlink()
    cxr = bench / "chexpercept" / NEG / "detection_qa" / "xray.png"
    cxr.write_bytes(b"garbage")
    msg = _problems(bench)
    assert f"{RR}: contour_revision_qa_revision_result image missing ({option})" in msg
    assert f"{NEG}: detection_qa image cannot be opened" in msg and str(cxr) in msg


def test_image_size_must_match_the_cxr(bench):
    option = bench / "chexpercept" / RR / REV / "option_1.png"
    Image.fromarray(np.zeros((512, 512, 3), np.uint8)).save(option)
    msg = _problems(bench)
    assert (f"{RR}: contour_revision_qa_revision_result image is 512x512 but the CXR is "
            f"1024x1024 ({option})") in msg


def test_option_count_must_equal_rendered_images_and_listed_options(bench):
    data = _data(bench)
    result = data[RR]["contour_qa"]["contour_revision_qa_revision_result"]
    result["answer_options"][-1]["relative_path"] = "option_1.png"
    n = len(result["answer_options"])
    data[CARDIO_RR]["contour_qa"]["contour_revision_qa_revision_result"]["answer_options"].pop()
    _save(bench, data)
    msg = _problems(bench)
    assert f"{RR}: contour_revision_qa_revision_result has {n} options but {n - 1} distinct " \
           f"option images" in msg
    assert f"{CARDIO_RR}: contour_revision_qa_revision_result: question lists" in msg


def test_answer_index_range_text_and_true_option(bench):
    data = _data(bench)
    data[RR]["attribute_extraction_qa"]["comparison"]["answer_index"] = 5
    severity = data[RR]["attribute_extraction_qa"]["severity/measurement"]
    severity["answer_index"] = severity["answer_index"] % 3 + 1  # text left as it was
    result = data[CARDIO_RR]["contour_qa"]["contour_revision_qa_revision_result"]
    result["answer_index"] = result["answer_index"] % len(result["answer_options"]) + 1
    _save(bench, data)
    msg = _problems(bench)
    assert f"{RR}: attribute_extraction_qa_comparison: answer_index 5 out of range 1..4" in msg
    assert f"{RR}: attribute_extraction_qa_severity/measurement: answer '" in msg
    assert f"{CARDIO_RR}: contour_revision_qa_revision_result: answer_index " \
           f"{result['answer_index']} but the 'true' option is" in msg


def test_point_options_inside_frame_none_last_and_shared(bench):
    data = _data(bench)
    contour = data[RR]["contour_qa"]
    contour["contour_revision_qa_expansion"]["answer_options"][0]["point"] = [1100, 20]
    con = data[CARDIO_RR]["contour_qa"]["contour_revision_qa_contraction"]
    con["answer_options"] = con["answer_options"][::-1]
    _save(bench, data)
    msg = _problems(bench)
    assert f"{RR}: contour_revision_qa_expansion: option 1" in msg
    assert "point [1100, 20] is outside the 1024x1024 image frame" in msg
    assert f"{RR}: contour_revision_qa_contraction: options differ" in msg
    assert f"{CARDIO_RR}: contour_revision_qa_contraction: the last option must be" in msg


def _rename_to_release(bench, data, key):
    for i, option in enumerate(
            data[key]["contour_qa"]["contour_revision_qa_revision_result"]["answer_options"], 1):
        name = f"option_{i}_mask_{'answer' if option['type'] == 'true' else 'fake'}.png"
        folder = bench / "chexpercept" / key / REV
        (folder / option["relative_path"]).rename(folder / name)
        option["relative_path"] = name


def test_revealing_names_error_for_ours_warning_for_release(bench):
    data = _data(bench)
    _rename_to_release(bench, data, RR)
    _save(bench, data)
    msg = _problems(bench)  # our marker in sampling_summary.json -> strict
    assert f"{RR}: file name 'option_1_mask_" in msg and "reveals the answer" in msg
    # the released bundle: no marker and only release names -> warnings, valid
    for key in (CARDIO_RR, OTHER_RR):
        _rename_to_release(bench, data, key)
    _save(bench, data)
    (bench / "sampling_summary.json").unlink()
    check, _ = validate_benchmark_dir(bench)
    assert not check.strict_names and check.problems == []
    assert sum("reveals the answer" in w for w in check.warnings) == 12
    assert "reveals the answer" in _problems(bench, strict_names=True)


def test_stray_leaking_file_in_case_folder(bench):
    stray = bench / "chexpercept" / NEG / "detection_qa" / "gt_mask.png"
    shutil.copyfile(bench / "chexpercept" / NEG / "detection_qa" / "xray.png", stray)
    assert f"{NEG}: file name 'gt_mask.png' reveals the answer ({stray})" in _problems(bench)


def test_path_counts(bench):
    data = _data(bench)
    data[RR]["attribute_extraction_qa"] = None
    data[CARDIO_RR]["attribute_extraction_qa"] = data[OTHER_RR]["attribute_extraction_qa"]
    data[NEG]["pair_id"] = "s1_negative_0"
    del data["cardiomegaly_s50000002_negative_2"]
    _save(bench, data)
    msg = _problems(bench)
    assert f"{RR}: positive effusion case has no attribute_extraction_qa" in msg
    assert f"{CARDIO_RR}: attribute_extraction_qa must be null for cardiomegaly" in msg
    assert f"{NEG}: pair_id 's1_negative_0' does not match the key_id" in msg
    assert "sampling_summary.json: cardiomegaly/lesion_free selected 1 but chexpercept.json " \
           "has 0" in msg


def test_revision_required_needs_its_questions(bench):
    data = _data(bench)
    del data[RR]["contour_qa"]["contour_revision_qa_contraction"]
    _save(bench, data)
    assert f"{RR}: revision-required case lacks contour_qa field(s) " \
           f"['contour_revision_qa_contraction']" in _problems(bench)


def test_every_problem_collected_once(bench):
    (bench / "chexpercept" / RR / REV / "option_1.png").unlink()
    data = _data(bench)
    data[NEG]["detection_qa"]["answer_index"] = 3
    _save(bench, data)
    msg = _problems(bench)
    assert "2 problem(s)" in msg and RR in msg and NEG in msg


def test_stage03_uses_the_shared_validator(bench):
    data = _data(bench)
    _rename_to_release(bench, data, RR)
    _save(bench, data)
    with pytest.raises(SchemaError, match="reveals the answer"):
        validate_bundle(load_bundle(bench))
    layout = BenchmarkLayout(bench)
    assert check_bundle(layout, load_benchmark(layout.json_path), [NEG]).problems == []


def test_leak_words():
    assert leaks_answer("option_2_mask_answer.png") and leaks_answer("option_1_mask_fake.png")
    assert leaks_answer("True-Mask.png") and leaks_answer("gt.png")
    assert not leaks_answer("option_3.png") and not leaks_answer("xray_with_mask_and_points.png")


def test_images_that_need_conversion_are_reported_not_failed(bench):
    cxr = bench / "chexpercept" / NEG / "detection_qa" / "xray.png"
    with Image.open(cxr) as im:
        gray = np.asarray(im.convert("L")).astype(np.uint16)
    Image.fromarray(gray * 257).save(cxr)  # the same CXR as a 16-bit PNG
    layout = BenchmarkLayout(bench)
    check = check_bundle(layout, load_benchmark(layout.json_path))
    assert check.problems == []
    assert check.conversions == {cxr: "16-bit grayscale"}
    lines = [w for w in check.warnings if "needs conversion" in w]
    assert len(lines) == 1 and NEG in lines[0] and "16-bit grayscale" in lines[0]
    assert str(cxr) in lines[0]
    validate_benchmark_dir(bench)  # still valid


def test_a_cxr_below_the_minimum_side_or_too_elongated_is_a_warning(bench):
    """A 332 x 27 "CXR" is named (key_id, size, file); the 1024 x 1024 phantoms are not."""
    tiny = bench / "chexpercept" / NEG / "detection_qa" / "xray.png"
    Image.fromarray(np.full((27, 332, 3), 90, np.uint8)).save(tiny)
    layout = BenchmarkLayout(bench)
    check = check_bundle(layout, load_benchmark(layout.json_path))
    assert check.problems == []
    sized = [w for w in check.warnings if "Image size" in w]
    assert len(sized) == 2 and all(w.startswith(f"{NEG}: detection_qa image is 332x27 pixels")
                                   and str(tiny) in w for w in sized)
    assert "below the 512 px minimum" in sized[0] and "aspect ratio of 12.3:1" in sized[1]
    validate_benchmark_dir(bench)  # a warning, not an error

    Image.fromarray(np.full((520, 1200, 3), 90, np.uint8)).save(tiny)  # wide, not small
    check = check_bundle(layout, load_benchmark(layout.json_path))
    sized = [w for w in check.warnings if "Image size" in w]
    assert len(sized) == 1 and "aspect ratio of 2.3:1" in sized[0]
    Image.fromarray(np.full((640, 512, 3), 90, np.uint8)).save(tiny)  # small but usable
    check = check_bundle(layout, load_benchmark(layout.json_path))
    assert not [w for w in check.warnings if "Image size" in w]
