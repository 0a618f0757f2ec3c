"""Dialogue construction and the three oracle settings.

See docs/evaluation_protocol.md, "Turn order", "Prompt structure" and "Oracle settings".
"""

from __future__ import annotations

import json

import pytest
from stage03_bundle import write_bundle
from stage03_fakes import ScriptedModel, right, wrong

from chexpercept.evaluation import (
    SYSTEM_PROMPT,
    EvalSettings,
    load_bundle,
    run_evaluation,
    validate_bundle,
)
from chexpercept.evaluation.dialogue import answer_text, colour_phrase
from chexpercept.files import read_jsonl
from chexpercept.layouts import all_results_path, records_path

RR = "effusion_s50000001_positive_0"
RF = "effusion_s50000002_positive_0"
LF = "effusion_s50000003_negative_0"
CARDIO_RR = "cardiomegaly_s50000004_positive_0"
CARDIO_RF = "cardiomegaly_s50000005_positive_0"
OPACITY_RR = "opacity_s50000007_positive_0"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return load_bundle(write_bundle(tmp_path_factory.mktemp("bench") / "bench"))


def _run(bundle, tmp_path, setting, answer):
    model = ScriptedModel(answer)
    cases = validate_bundle(bundle)
    run_dir = tmp_path / setting
    run_evaluation(bundle, cases, model, EvalSettings("scripted", "m", oracle_setting=setting),
                   run_dir)
    results = json.loads(all_results_path(run_dir).read_text(encoding="utf-8"))
    return model, results


def _entry(results, key_id, turn):
    res = results[key_id]
    return res["chat_history"][res["_chat_history_idx"][turn]]


def _requests(model):
    return {r.request_id: r for batch in model.batches for r in batch}


def test_implicit_patches_wrong_turns_with_ground_truth(bundle, tmp_path):
    model, results = _run(bundle, tmp_path, "implicit", wrong)
    raw_wrong = "Looking at the image.\nAnswer: 2"
    # RR: detection, contour eval, expansion, contraction and revision result are patched
    assert _entry(results, RR, "detection_qa")[2:] == ["Answer: 1", raw_wrong]
    assert _entry(results, RR, "contour_evaluation_qa")[2:] == ["Answer: 1", raw_wrong]
    assert _entry(results, RR, "contour_revision_qa_expansion")[2:] == [
        "Answer: 2", "Looking at the points.\nAnswer: 1"]
    assert _entry(results, RR, "contour_revision_qa_contraction")[2:] == [
        "Answer: 1", "Looking at the points.\nAnswer: 2"]
    assert _entry(results, RR, "contour_revision_qa_revision_result")[2:] == [
        "Answer: 2", "Looking at the image.\nAnswer: 3"]
    for turn in ("attribute_extraction_qa_distribution", "attribute_extraction_qa_comparison"):
        assert len(_entry(results, RR, turn)) == 3
    # multi-point ground truth is sorted and comma-joined
    assert _entry(results, OPACITY_RR, "contour_revision_qa_expansion")[2] == "Answer: 2,4"
    assert _entry(results, OPACITY_RR, "contour_revision_qa_contraction")[2] == "Answer: 1,3"
    # RF: contour eval is patched before Stage 4
    assert _entry(results, RF, "contour_evaluation_qa")[2] == "Answer: 2"
    # no later stage asked -> no patch (cardiomegaly RF contour eval, cardiomegaly RR result, LF)
    assert len(_entry(results, CARDIO_RF, "contour_evaluation_qa")) == 3
    assert len(_entry(results, CARDIO_RR, "contour_revision_qa_revision_result")) == 3
    assert len(_entry(results, LF, "detection_qa")) == 3
    # nothing is added to the prompt, and the next request sees the patched history
    assert not any("Ground Truth Provided" in e[0] for r in results.values()
                   for e in r["chat_history"])
    request = _requests(model)[f"{RR}/contour_evaluation_qa"]
    assert [m.text for m in request.messages if m.role == "assistant"] == ["Answer: 1"]
    # the patched turns are recorded in the records of the turn that triggered them
    records = read_jsonl(records_path(tmp_path / "implicit"))
    rec = next(r for r in records if r["request_id"] == f"{RR}/contour_revision_qa_revision_result")
    assert rec["oracle"]["patched"] == ["contour_revision_qa_expansion",
                                        "contour_revision_qa_contraction"]
    assert all(not r[s]["correct"] for r in results.values() for s in ("detection_qa",))


def test_implicit_patches_only_the_wrong_one(bundle, tmp_path):
    def half(request):
        return wrong(request) if request.request_id.endswith("_contraction") else right(request)

    _, results = _run(bundle, tmp_path, "implicit", half)
    assert len(_entry(results, RR, "contour_revision_qa_expansion")) == 3
    assert _entry(results, RR, "contour_revision_qa_contraction")[2] == "Answer: 1"
    assert len(_entry(results, RR, "detection_qa")) == 3


def test_explicit_texts(bundle, tmp_path):
    model, results = _run(bundle, tmp_path, "explicit", wrong)
    assert not any(len(e) > 3 for r in results.values() for e in r["chat_history"])
    requests = _requests(model)
    items = bundle.items

    def text(key_id, turn):
        return _entry(results, key_id, turn)[0]

    ev = text(RR, "contour_evaluation_qa")
    assert ev.startswith("Ground Truth Provided: Effusion is definitively present")
    assert "absolute fact" in ev and "disregard your previous answer" in ev
    assert ev.endswith("\n\n" + items[RR].contour_qa.contour_eval_qa.question)
    exp = text(RR, "contour_revision_qa_expansion")
    assert exp.startswith("Ground Truth Provided: The mask shown for effusion definitively "
                          "needs revision.")
    assert exp.endswith("\n\n" + items[RR].contour_qa.initial_context + "\n\n"
                        + items[RR].contour_qa.contour_revision_qa_expansion.question)
    res = text(RR, "contour_revision_qa_revision_result")
    assert "The mask needs revision by expansion at the orange point." in res
    assert "The mask needs revision by contraction at the red point." in res
    res = text(OPACITY_RR, "contour_revision_qa_revision_result")
    assert "by expansion at the orange and green points." in res
    assert "by contraction at the red and yellow points." in res
    res = text(CARDIO_RR, "contour_revision_qa_revision_result")
    assert "The mask does not need any revision by expansion." in res
    assert "by contraction at the red and orange points." in res
    assert "is the 2nd mask." in text(RR, "attribute_extraction_qa_distribution")
    assert "is the 1st mask." in text(OPACITY_RR, "attribute_extraction_qa_distribution")
    assert "definitively does not need revision" in text(RF, "attribute_extraction_qa_distribution")
    for turn in ("contour_revision_qa_contraction", "attribute_extraction_qa_location",
                 "attribute_extraction_qa_severity/measurement",
                 "attribute_extraction_qa_comparison"):
        assert "Ground Truth" not in text(RR, turn)
    # the text sent is the text stored
    assert requests[f"{RR}/contour_evaluation_qa"].messages[-1].text == ev


def test_no_injection_when_previous_step_right_or_setting_none(bundle, tmp_path):
    for setting, answer in (("explicit", right), ("none", wrong)):
        _, results = _run(bundle, tmp_path, setting, answer)
        for res in results.values():
            for entry in res["chat_history"]:
                assert len(entry) == 3
                assert "Ground Truth Provided" not in entry[0]


def test_whole_history_with_images_is_resent(bundle, tmp_path):
    model, results = _run(bundle, tmp_path, "none", wrong)
    last = _requests(model)[f"{RR}/attribute_extraction_qa_comparison"]
    assert last.messages[0].role == "system" and last.messages[0].text == SYSTEM_PROMPT
    roles = [m.role for m in last.messages[1:]]
    assert roles == ["user", "assistant"] * 8 + ["user"]
    assert sum(len(m.images) for m in last.messages) == 7  # 1 + 1 + 1 + 4 images
    history = results[RR]["chat_history"]
    replayed = [m.text for m in last.messages if m.role == "assistant"]
    assert replayed == [e[2] for e in history[:8]]  # raw text, reasoning included
    assert [list(map(str, m.images)) for m in last.messages[1::2]][:8] == [e[1] for e in
                                                                          history[:8]]


def test_helpers():
    assert colour_phrase(["red"]) == "red point"
    assert colour_phrase(["red", "blue"]) == "red and blue points"
    assert colour_phrase(["red", "blue", "green"]) == "red, blue, and green points"
    assert answer_text(2) == "Answer: 2"
    assert answer_text((5, 2)) == "Answer: 2,5"
