"""Error anatomy (issue 23 item 4): confusion tables and named error classes on hand-built
records whose every class is known, and a Stage 04 run that writes the CSVs, the report
section and the viewer's error-class bits."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chexpercept.analysis.bootstrap import wilson_cc_interval
from chexpercept.analysis.error_anatomy import (
    COMPARISON_Q,
    CONTRACTION_Q,
    DISTRIBUTION_Q,
    ERROR_CLASSES,
    EXPANSION_Q,
    LOCATION_Q,
    NO_ANSWER,
    REVISION_RESULT_Q,
    WRONG_MASK_IOU_UNKNOWN,
    CaseFacts,
    analyse_errors,
    case_answers,
    case_errors,
    class_bits,
    confusion_rows,
    error_class_rows,
    load_error_facts,
    mask_iou,
    mask_ious,
    option_side,
    resolve_mask_ious,
)

RR = "effusion_s1_positive_0"
RF = "edema_s2_positive_0"
LF = "effusion_s1_negative_0"
LOCATION_OPTIONS = ["the intersection of the right hilum and the right lower zone lung",
                    "the left costophrenic angle",
                    "the intersection of the left hilum and the left mid zone lung",
                    "None of the above (options 1-3)"]


def _sub(gt, reply, status="ok"):
    return gt, reply, status


def _record(key_id, qa_path, *, s1=("1", 1), s2=("1", 1), rev=None, attr=None):
    """A Stage 03 record: s1/s2 ``(reply, gt)``; rev/attr ``{sub: (gt, reply, status)}``."""
    rec = {"key_id": key_id, "qa_path": qa_path,
           "detection_qa": {"response": s1[0], "ground_truth": s1[1],
                            "correct": s1[0] == str(s1[1]), "status": "ok"},
           "contour_evaluation_qa": {}, "contour_revision_qa": {}, "attribute_extraction_qa": {}}
    if qa_path == "lesion_free":
        return rec
    rec["contour_evaluation_qa"] = {"responses": s2[0], "ground_truth": s2[1],
                                    "correct": s2[0] == str(s2[1]), "status": "ok"}
    for section, subs in (("contour_revision_qa", rev), ("attribute_extraction_qa", attr)):
        if not subs:
            continue
        block = {"ground_truth": {k: v[0] for k, v in subs.items()},
                 "responses": {k: v[1] if v[2] == "ok" else "" for k, v in subs.items()}}
        for k, (gt, reply, status) in subs.items():
            want = ",".join(map(str, gt)) if isinstance(gt, list) else str(gt)
            block[k] = {"correct": status == "ok" and reply == want, "status": status}
        block["correct"] = all(block[k]["correct"] for k in subs)
        rec[section] = block
    return rec


def _facts(**kw):
    base = {"lesion_sides": frozenset({"right"}),
            "location_sides": tuple(option_side(t) for t in LOCATION_OPTIONS[:3]) + (None,),
            "point_none": 4, "mask_images": ()}
    return CaseFacts(**{**base, **kw})


def _pairs(errors):
    return set(errors.errors), set(errors.eligible)


def test_option_side_reads_the_zone_at_the_end():
    assert [option_side(t) for t in LOCATION_OPTIONS] == ["right", "left", "left", None]


def test_answers_read_whole_or_not_at_all():
    rec = _record(RR, "revision_required",
                  rev={"expansion": _sub([1, 3], "1,3"), "contraction": _sub([4], "x"),
                       "revision_result": _sub(2, "", "refused")})
    answers = {a.question: a for a in case_answers(rec)}
    assert answers[EXPANSION_Q].chosen == (1, 3) and answers[EXPANSION_Q].true == (1, 3)
    assert answers[CONTRACTION_Q].chosen is None  # "x" names no option
    assert answers[REVISION_RESULT_Q].chosen is None  # refused: no answer, never dropped
    assert list(answers) == ["detection_qa", "contour_evaluation_qa", EXPANSION_Q,
                             CONTRACTION_Q, REVISION_RESULT_Q]


@pytest.mark.parametrize(("chosen", "swap"), [("2,3", True), ("2", True), ("1,2", False),
                                              ("1", False), ("4", False), ("", False)])
def test_location_laterality_swap(chosen, swap):
    rec = _record(RF, "revision_free", attr={"location": _sub([1], chosen)})
    errors, eligible = _pairs(case_errors(case_answers(rec), _facts()))
    assert eligible == {(LOCATION_Q, "laterality_swap")}
    assert ((LOCATION_Q, "laterality_swap") in errors) is swap


def test_location_swap_needs_a_one_sided_lesion_and_a_contralateral_option():
    rec = _record(RF, "revision_free", attr={"location": _sub([1], "2")})
    both = _facts(lesion_sides=frozenset({"left", "right"}))
    assert case_errors(case_answers(rec), both).eligible == []
    same_side = _facts(location_sides=("right", "right", "right", None))
    assert case_errors(case_answers(rec), same_side).eligible == []
    assert case_errors(case_answers(rec), None).eligible == []  # no benchmark facts


@pytest.mark.parametrize(("gt", "chosen", "eligible", "swap"),
                         [(2, "3", True, True), (3, "2", True, True), (2, "4", True, False),
                          (2, "2", True, False), (1, "2", False, False), (4, "3", False, False)])
def test_comparison_laterality_swap(gt, chosen, eligible, swap):
    rec = _record(RF, "revision_free", attr={"comparison": _sub(gt, chosen)})
    errors, elig = _pairs(case_errors(case_answers(rec), None))
    assert ((COMPARISON_Q, "laterality_swap") in elig) is eligible
    assert ((COMPARISON_Q, "laterality_swap") in errors) is swap


@pytest.mark.parametrize(("gt", "chosen", "cls"),
                         [(1, "2", "zone_count_off_by_one"), (3, "2", "zone_count_off_by_one"),
                          (1, "3", "zone_count_off_by_two_or_more"),
                          (4, "1", "zone_count_off_by_two_or_more"),
                          (2, "2", None), (2, "", None)])
def test_zone_count_off_by_one_or_more(gt, chosen, cls):
    rec = _record(RF, "revision_free", attr={"distribution": _sub(gt, chosen)})
    errors, eligible = _pairs(case_errors(case_answers(rec), None))
    assert eligible == {(DISTRIBUTION_Q, "zone_count_off_by_one"),
                        (DISTRIBUTION_Q, "zone_count_off_by_two_or_more")}
    assert errors == ({(DISTRIBUTION_Q, cls)} if cls else set())


def test_expansion_contraction_confusion():
    # expansion points {1}, contraction points {2, 3}; "None" is option 4
    rec = _record(RR, "revision_required",
                  rev={"expansion": _sub([1], "1,2"), "contraction": _sub([2, 3], "3")})
    errors, eligible = _pairs(case_errors(case_answers(rec), _facts()))
    assert eligible == {(EXPANSION_Q, "expansion_contraction_confusion"),
                        (CONTRACTION_Q, "expansion_contraction_confusion")}
    assert errors == {(EXPANSION_Q, "expansion_contraction_confusion")}
    swapped = _record(RR, "revision_required",
                      rev={"expansion": _sub([1], "2,3"), "contraction": _sub([2, 3], "1")})
    assert len(case_errors(case_answers(swapped), _facts()).errors) == 2


def test_no_confusion_possible_when_the_other_question_is_none():
    # contraction truth is "None" (option 4): marking 4 as expansion is no confusion
    rec = _record(RR, "revision_required",
                  rev={"expansion": _sub([1], "4"), "contraction": _sub([4], "1")})
    errors, eligible = _pairs(case_errors(case_answers(rec), _facts()))
    assert eligible == {(CONTRACTION_Q, "expansion_contraction_confusion")}
    assert errors == {(CONTRACTION_Q, "expansion_contraction_confusion")}
    assert case_errors(case_answers(rec), None).eligible == []  # "None" unknown: not counted


def _overlay(path: Path, mask: np.ndarray) -> None:
    """A grey CXR with ``mask`` in cyan at 50 % opacity, as Stage 02 draws option images."""
    grey = np.full(mask.shape, 90, dtype=np.float64)
    rgb = np.stack([grey] * 3, axis=-1) / 255.0
    rgb[mask] = rgb[mask] * 0.5 + np.array([0.0, 1.0, 1.0]) * 0.5
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.rint(rgb * 255).astype(np.uint8)).save(path)


def _square(x0, y0, w, h, size=64):
    m = np.zeros((size, size), dtype=bool)
    m[y0:y0 + h, x0:x0 + w] = True
    return m


def _mask_options(root: Path) -> tuple[str, ...]:
    """Option 1: the true 20 x 20 square; 2: shifted 1 px (IoU 380/420 = 0.905); 3: shifted
    4 px (IoU 320/480 = 0.667); 4: elsewhere (IoU 0)."""
    masks = [_square(10, 10, 20, 20), _square(11, 10, 20, 20), _square(14, 10, 20, 20),
             _square(40, 40, 10, 10)]
    paths = []
    for i, m in enumerate(masks, start=1):
        _overlay(root / f"o{i}.png", m)
        paths.append(str(root / f"o{i}.png"))
    return tuple(paths)


@pytest.mark.parametrize(("chosen", "cls"), [("2", "wrong_mask_iou_ge_0.90"),
                                             ("3", "wrong_mask_iou_0.50_0.70"),
                                             ("4", "wrong_mask_iou_lt_0.50"),
                                             ("1", None), ("", None)])
def test_wrong_revised_mask_binned_by_iou(tmp_path, chosen, cls):
    facts = _facts(mask_images=_mask_options(tmp_path))
    assert mask_iou(facts.mask_images[1], facts.mask_images[0]) == pytest.approx(380 / 420)
    rec = _record(RR, "revision_required", rev={"revision_result": _sub(1, chosen)})
    errors, eligible = _pairs(case_errors(case_answers(rec), facts))
    assert {c for _, c in eligible} == {c for c, qs in ERROR_CLASSES.items()
                                        if REVISION_RESULT_Q in qs}
    assert errors == ({(REVISION_RESULT_Q, cls)} if cls else set())


def test_wrong_revised_mask_iou_unknown_without_images(tmp_path):
    facts = _facts(mask_images=tuple(str(tmp_path / f"missing{i}.png") for i in range(4)))
    rec = _record(RR, "revision_required", rev={"revision_result": _sub(1, "2")})
    assert case_errors(case_answers(rec), facts).errors == [(REVISION_RESULT_Q,
                                                             WRONG_MASK_IOU_UNKNOWN)]
    # an option image without any overlay pixel: no mask to compare, never IoU 1
    blank = _mask_options(tmp_path / "blank")
    _overlay(Path(blank[1]), np.zeros((64, 64), dtype=bool))
    assert mask_iou(blank[1], blank[0]) is None
    assert case_errors(case_answers(rec), _facts(mask_images=blank)).errors == [
        (REVISION_RESULT_Q, WRONG_MASK_IOU_UNKNOWN)]
    assert case_errors(case_answers(rec), None).errors == [(REVISION_RESULT_Q,
                                                            WRONG_MASK_IOU_UNKNOWN)]


def test_wrong_masks_are_measured_once_for_all_runs(tmp_path, caplog):
    facts = {RR: _facts(mask_images=_mask_options(tmp_path / "a")),
             RF: _facts(mask_images=(*_mask_options(tmp_path / "b")[:3],
                                     str(tmp_path / "missing.png")))}
    runs = [{RR: _record(RR, "revision_required", rev={"revision_result": _sub(1, c1)}),
             RF: _record(RF, "revision_required", rev={"revision_result": _sub(1, c2)})}
            for c1, c2 in (("2", "4"), ("2", "3"), ("4", "1"))]
    anatomies = [analyse_errors(r, list(r), facts, measure=False) for r in runs]
    assert anatomies[0].pending == {RR: (facts[RR].mask_images[1], facts[RR].mask_images[0]),
                                    RF: (facts[RF].mask_images[3], facts[RF].mask_images[0])}
    assert RR not in anatomies[0].case_classes  # its bin is still open
    with caplog.at_level("WARNING"):
        resolve_mask_ious(anatomies, jobs=2)
    assert [r.message for r in caplog.records].count(next(
        r.message for r in caplog.records if "unknown" in r.message)) == 1  # one warning
    # two runs chose the missing image: one distinct pair, measured (and warned about) once
    assert "1 distinct chosen wrong revised mask(s)" in caplog.text
    assert "missing.png" in caplog.text
    assert [a.case_classes for a in anatomies] == [
        {RR: {"wrong_mask_iou_ge_0.90"}, RF: {WRONG_MASK_IOU_UNKNOWN}},
        {RR: {"wrong_mask_iou_ge_0.90"}, RF: {"wrong_mask_iou_0.50_0.70"}},
        {RR: {"wrong_mask_iou_lt_0.50"}}]
    assert all(not a.pending for a in anatomies)
    # the same counts as measuring each run on its own, in this process
    for r, a in zip(runs, anatomies, strict=True):
        assert analyse_errors(r, list(r), facts).classes == a.classes
    pairs = [p for r in runs for p in analyse_errors(r, list(r), facts,
                                                     measure=False).pending.values()]
    assert mask_ious(pairs, jobs=2) == mask_ious(pairs, jobs=1)


def test_tables_pool_lesions_keep_no_answer_and_give_wilson_intervals():
    records = {
        RR: _record(RR, "revision_required", attr={"comparison": _sub(2, "3"),
                                                     "distribution": _sub(1, "2")}),
        RF: _record(RF, "revision_free", s1=("", 1),
                    attr={"comparison": _sub(3, "3"), "distribution": _sub(2, "", "unparseable")}),
        LF: _record(LF, "lesion_free", s1=("1", 2)),
        "effusion_s9_positive_0": {"key_id": "x", "unfinished": {"reason": "fault"}},
    }
    anatomy = analyse_errors(records, [RR, RF, LF], None)
    rows = confusion_rows(anatomy)
    det = [(r["lesion"], r["true"], r["chosen"], r["n"]) for r in rows
           if r["question"] == "detection_qa"]
    assert det == [("edema", "1", NO_ANSWER, 1),  # lesions in LESIONS order, then pooled
                   ("effusion", "1", "1", 1), ("effusion", "2", "1", 1),
                   ("all", "1", "1", 1), ("all", "1", NO_ANSWER, 1), ("all", "2", "1", 1)]
    assert anatomy.unreadable == 1  # the empty reply stored with status ok (warned once)
    dist = [(r["lesion"], r["true"], r["chosen"]) for r in rows
            if r["question"] == DISTRIBUTION_Q and r["lesion"] == "all"]
    assert dist == [("all", "1", "2"), ("all", "2", NO_ANSWER)]
    classes = {(r["lesion"], r["question"], r["error_class"]): r
               for r in error_class_rows(anatomy)}
    swap = classes[("all", COMPARISON_Q, "laterality_swap")]
    assert (swap["k"], swap["n_cases"]) == (1, 2)
    # 1/2: fewer than 10 cases, so no interval (docs "Small cells"; bootstrap.has_interval)
    assert swap["value"] == 0.5 and np.isnan(swap["ci_low"]) and np.isnan(swap["ci_high"])
    one = classes[("all", DISTRIBUTION_Q, "zone_count_off_by_one")]
    assert (one["k"], one["n_cases"]) == (1, 2)  # the unparsed answer is asked, not an error
    assert ("effusion", COMPARISON_Q, "laterality_swap") in classes
    # a class no case could show is still written pooled, with an NA rate
    loc = classes[("all", LOCATION_Q, "laterality_swap")]
    assert loc["n_cases"] == 0 and np.isnan(loc["value"])
    assert anatomy.case_classes == {RR: {"laterality_swap", "zone_count_off_by_one"}}
    assert class_bits(anatomy.case_classes[RR]) == 0b11


def _bench(root: Path) -> Path:
    """chexpercept.json with the RR effusion case (location on the right, masks drawn)."""
    from tests.analysis.conftest import make_item

    item = make_item("revision_required", "effusion")
    attrs = item["attribute_extraction_qa"]
    attrs["distribution"]["answer_zones"] = ["right lower zone lung"]
    attrs["location"]["answer_options"] = LOCATION_OPTIONS
    attrs["location"]["answer"] = LOCATION_OPTIONS[0]
    # the answer keys of _record's RR case (Stage 04 recomputes correctness against them)
    item["contour_qa"]["contour_revision_qa_contraction"]["answer_index"] = [2]
    attrs["comparison"]["answer_index"] = 4
    attrs["comparison"]["answer"] = attrs["comparison"]["answer_options"][3]
    rel = ("contour_qa", "contour_revision_qa")
    _mask_options(root / "bench" / "chexpercept" / RR / Path(*rel))
    items = {RR: item, LF: make_item("lesion_free", "effusion")}
    (root / "bench" / "chexpercept").mkdir(parents=True, exist_ok=True)
    (root / "bench" / "chexpercept.json").write_text(json.dumps(items), encoding="utf-8")
    return root / "bench"


def test_stage04_run_writes_error_csvs_report_section_and_viewer_bits(tmp_path):
    from chexpercept.analysis.api import analyze
    from tests.analysis.conftest import write_run

    bench = _bench(tmp_path)
    facts = load_error_facts(bench)
    assert facts[RR].lesion_sides == frozenset({"right"}) and facts[RR].point_none == 4
    rec = _record(RR, "revision_required",
                  rev={"expansion": _sub([1], "2"), "contraction": _sub([2], "2"),
                       "revision_result": _sub(1, "2")},
                  attr={"distribution": _sub(1, "1"), "location": _sub([1], "2,3"),
                        "severity/measurement": _sub(1, "1"), "comparison": _sub(4, "4")})
    lf = _record(LF, "lesion_free", s1=("", 2))
    lf["detection_qa"]["status"] = "refused"
    write_run(tmp_path / "results", "dummy_baseline", [rec, lf])
    result = analyze(tmp_path / "results", "implicit", output_dir=tmp_path / "out",
                     benchmark_dir=bench, bootstrap=0, jobs=1)
    out = result.out_dir
    with (out / "error_classes.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[0]["model"] == "dummy_baseline" and "chance" not in {r["model"] for r in rows}
    got = {(r["question"], r["error_class"]): (r["k"], r["n_cases"]) for r in rows
           if r["lesion"] == "all"}
    assert got[(LOCATION_Q, "laterality_swap")] == ("1", "1")
    assert got[(EXPANSION_Q, "expansion_contraction_confusion")] == ("1", "1")
    assert got[(CONTRACTION_Q, "expansion_contraction_confusion")] == ("0", "1")
    assert got[(REVISION_RESULT_Q, "wrong_mask_iou_ge_0.90")] == ("1", "1")
    assert got[(DISTRIBUTION_Q, "zone_count_off_by_one")] == ("0", "1")
    assert got[(COMPARISON_Q, "laterality_swap")] == ("0", "0")
    with (out / "error_confusion.csv").open(newline="") as fh:
        conf = list(csv.DictReader(fh))
    detection = [(r["true"], r["chosen"], r["n"]) for r in conf
                 if r["lesion"] == "all" and r["question"] == "detection_qa"]
    assert detection == [("1", "1", "1"), ("2", NO_ANSWER, "1")]  # the refusal: own column
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Error anatomy" in report
    assert "n/a: no scored case of the run could make that error" in report
    # 1/1: no interval, its count instead (docs "Small cells")
    assert re.search(r"\| laterality_swap \| attribute_extraction_qa_location \| 100\.0 "
                     r"\(1/1\) \|", report)
    assert "(error_classes.csv)" in report and "(error_confusion.csv)" in report
    index = (out / "viewer" / "data" / "index.js").read_text(encoding="utf-8")
    data = json.loads(index.split("=", 1)[1].strip().rstrip(";"))
    assert data["error_classes"] == list(ERROR_CLASSES)
    bits = dict(zip(data["keys"], data["results"][0]["errors"], strict=True))
    assert bits[LF] == 0
    assert bits[RR] == class_bits({"laterality_swap", "expansion_contraction_confusion",
                                   "wrong_mask_iou_ge_0.90"})


def test_error_class_rows_of_ten_cases_or_more_get_the_wilson_interval():
    """The small-cell rule: n < 10 gives empty ci columns, n >= 10 the Wilson interval."""
    from chexpercept.analysis.error_anatomy import _class_row

    small = _class_row("all", DISTRIBUTION_Q, "zone_count_off_by_one", 1, 9)
    assert np.isnan(small["ci_low"]) and np.isnan(small["ci_high"]) and small["n_cases"] == 9
    big = _class_row("all", DISTRIBUTION_Q, "zone_count_off_by_one", 1, 10)
    low, high = wilson_cc_interval(np.array([1]), np.array([10]))
    assert (big["ci_low"], big["ci_high"]) == (low[0], high[0])
