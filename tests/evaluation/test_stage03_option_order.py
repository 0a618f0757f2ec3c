"""Stage 03 ``--option-order`` (docs/evaluation_protocol.md, "Option order")."""

from __future__ import annotations

import json

import pytest
from stage03_bundle import CASES, write_bundle
from stage03_fakes import ScriptedModel, right, wrong
from test_async_runner import AsyncFake

from chexpercept import schema
from chexpercept.analysis.option_order import position_accuracy
from chexpercept.errors import ConfigError, InputError, SchemaError
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.async_runner import run_evaluation_async
from chexpercept.evaluation.cases import TURN_BY_NAME
from chexpercept.evaluation.dialogue import request_id
from chexpercept.evaluation.option_order import (
    apply_option_order,
    reorder_question,
    rotation_order,
    shuffled_order,
)
from chexpercept.evaluation.sharding import merge_parts, select_part, write_merged
from chexpercept.files import read_json, read_jsonl, write_json_atomic
from chexpercept.layouts import all_results_path, eval_part_dir, records_path, run_manifest_path
from utils.llm.base import KVCache, PromptLimits

KEYS = list(CASES)
RR = "effusion_s50000001_positive_0"
RF = "effusion_s50000002_positive_0"
LF = "effusion_s50000003_negative_0"
SINGLE = ("detection_qa", "contour_evaluation_qa", "contour_revision_qa_revision_result",
          "attribute_extraction_qa_distribution", "attribute_extraction_qa_severity/measurement",
          "attribute_extraction_qa_comparison")


@pytest.fixture()
def bundle(tmp_path):
    return load_bundle(write_bundle(tmp_path / "bench"))


def _run(bundle, run_dir, model, **settings):
    kwargs = {"oracle_setting": "implicit", **settings}
    return run_evaluation(bundle, validate_bundle(bundle), model,
                          EvalSettings("scripted", "m", **kwargs), run_dir)


def _results(run_dir):
    path = all_results_path(run_dir)
    data = json.loads(path.read_text(encoding="utf-8"))
    schema.parse_all_results(data, path)
    return data


def _always_1(request):
    return "Answer: 1"


def _walk(block):
    """Every dict nested in ``block``."""
    if isinstance(block, dict):
        yield block
        for value in block.values():
            yield from _walk(value)
    elif isinstance(block, list):
        for value in block:
            yield from _walk(value)


def _positives_bundle(tmp_path, n=24):
    cases = {f"effusion_s5{i:07d}_positive_0": "revision_free" for i in range(1, n + 1)}
    return load_bundle(write_bundle(tmp_path / "pos", cases=cases))


# -- release ---------------------------------------------------------------------------------

def test_release_is_the_default_and_adds_nothing(bundle, tmp_path):
    model = ScriptedModel(right)
    _run(bundle, tmp_path / "default", model)
    _run(bundle, tmp_path / "release", ScriptedModel(right), option_order="release")
    text = all_results_path(tmp_path / "default").read_bytes()
    assert text == all_results_path(tmp_path / "release").read_bytes()
    results = json.loads(text)
    assert not any({"option_order", "circular_correct"} & set(d) for d in _walk(results))
    for rec in read_jsonl(records_path(tmp_path / "default")):
        assert not {"option_order", "displayed_answer", "rotation"} & set(rec)
        assert rec["request_id"] == f"{rec['key_id']}/{rec['turn']}"
    # the questions are sent exactly as the benchmark lists them
    items = {k: v for k, v in bundle.items.items()}
    first = {r.request_id: r for r in model.batches[0]}
    assert first[f"{RR}/detection_qa"].messages[-1].text == items[RR].detection_qa.question
    assert read_json(run_manifest_path(tmp_path / "default"))["option_order"] == "release"


# -- shuffled --------------------------------------------------------------------------------

def test_shuffled_is_deterministic_for_a_seed_and_differs_for_another(bundle, tmp_path):
    _run(bundle, tmp_path / "a", ScriptedModel(wrong), option_order="shuffled", seed=7)
    _run(bundle, tmp_path / "b", ScriptedModel(wrong), option_order="shuffled", seed=7)
    _run(bundle, tmp_path / "c", ScriptedModel(wrong), option_order="shuffled", seed=8)
    a = all_results_path(tmp_path / "a").read_bytes()
    assert a == all_results_path(tmp_path / "b").read_bytes()
    orders = lambda run: [d["option_order"] for d in _walk(_results(run))  # noqa: E731
                          if "option_order" in d]
    assert orders(tmp_path / "a") != orders(tmp_path / "c")
    # one permutation per case and question, whatever else is in the run
    cases = {c.key_id: c for c in validate_bundle(bundle)}
    alone = apply_option_order(cases[RR], "shuffled", 7)
    rec = {r["turn"]: r for r in read_jsonl(records_path(tmp_path / "a")) if r["key_id"] == RR}
    for turn in alone.turns:
        assert rec[turn.spec.name]["option_order"] == list(turn.option_order)


def test_always_1_drops_from_perfect_on_positive_detection_under_shuffled(tmp_path):
    bundle = _positives_bundle(tmp_path)
    _run(bundle, tmp_path / "release", ScriptedModel(_always_1))
    _run(bundle, tmp_path / "shuffled", ScriptedModel(_always_1), option_order="shuffled")
    acc = lambda run: sum(r["detection_qa"]["correct"]  # noqa: E731
                          for r in _results(run).values()) / 24
    assert acc(tmp_path / "release") == 1.0
    shuffled = _results(tmp_path / "shuffled")
    # correct exactly where "Yes" (original option 1) was shown first
    for res in shuffled.values():
        det = res["detection_qa"]
        assert det["correct"] is (det["option_order"][0] == 1)
        assert det["ground_truth"] == 1  # ground truths stay in original numbers
    assert 0.2 < acc(tmp_path / "shuffled") < 0.8
    table = position_accuracy(shuffled)  # Stage 04 reads the recorded orders
    det = table[table["question"] == "detection_qa"].set_index("position")["accuracy"]
    assert det.to_dict() == {1: 1.0, 2: 0.0}


@pytest.mark.parametrize("setting", ["implicit", "explicit", "none"])
def test_a_model_answering_the_displayed_truth_scores_perfect(bundle, tmp_path, setting):
    summary = _run(bundle, tmp_path / "run", ScriptedModel(right), option_order="shuffled",
                   oracle_setting=setting)
    results = _results(tmp_path / "run")
    flags = [d["correct"] for d in _walk(results) if "correct" in d]
    assert flags and all(flags) and summary.statuses == {"ok": 33}
    records = read_jsonl(records_path(tmp_path / "run"))
    moved = [r for r in records if r["option_order"] != sorted(r["option_order"])]
    assert moved  # some options were really moved ...
    for rec in records:  # ... and every answer was mapped back to original numbers
        order = rec["option_order"]
        assert sorted(order[d - 1] for d in rec["displayed_answer"]) == rec["answer"]


def test_texts_images_and_answers_move_together(bundle, tmp_path):
    model = ScriptedModel(right)
    _run(bundle, tmp_path / "run", model, option_order="shuffled", seed=3)
    requests = {r.request_id: r for batch in model.batches for r in batch}
    cases = {c.key_id: c for c in validate_bundle(bundle)}
    for key_id, case in cases.items():
        for turn in case.turns:
            order = shuffled_order(3, key_id, turn)
            sent = requests[request_id(key_id, turn.spec.name)]
            last = sent.messages[-1]
            if turn.option_images:  # candidate masks: images move, labels stay
                assert last.images == tuple(turn.images[i - 1] for i in order)
                assert last.text.endswith(turn.question)
                assert sent.meta["option_texts"] == list(turn.option_texts)
            else:
                shown = [turn.option_texts[i - 1] for i in order]
                assert sent.meta["option_texts"] == shown
                tail = last.text.split("Options:\n")[-1].splitlines()
                assert tail == [f"({i}) {t}" for i, t in enumerate(shown, 1)]
            if turn.none_index is not None:  # "None" keeps its place
                assert order[turn.none_index - 1] == turn.none_index


def test_text_answers_are_read_against_the_displayed_options(tmp_path):
    bundle = _positives_bundle(tmp_path, n=6)
    _run(bundle, tmp_path / "run", ScriptedModel(lambda r: "Answer: Yes"),
         option_order="shuffled")
    results = _results(tmp_path / "run")
    assert all(r["detection_qa"]["correct"] for r in results.values())
    assert {r["detection_qa"]["response"] for r in results.values()} == {"1"}


def test_oracle_texts_follow_the_displayed_order(bundle, tmp_path):
    # implicit: the patched turn reads the displayed ground truth
    model = ScriptedModel(wrong)
    _run(bundle, tmp_path / "implicit", model, option_order="shuffled", seed=5)
    res = _results(tmp_path / "implicit")[RR]
    cases = {c.key_id: c for c in validate_bundle(bundle)}
    det = cases[RR].turn("detection_qa")
    shown_gt = shuffled_order(5, RR, det).index(det.ground_truth) + 1
    assert res["chat_history"][0][2] == f"Answer: {shown_gt}"
    # explicit: the paragraph before Stage 4 names the revision result's displayed ordinal
    model = ScriptedModel(wrong)
    _run(bundle, tmp_path / "explicit", model, option_order="shuffled", seed=5,
         oracle_setting="explicit")
    result = cases[RR].turn("contour_revision_qa_revision_result")
    shown = shuffled_order(5, RR, result).index(result.ground_truth) + 1
    sent = {r.request_id: r for b in model.batches for r in b}
    text = sent[f"{RR}/attribute_extraction_qa_distribution"].messages[-1].text
    ordinal = {1: "1st", 2: "2nd", 3: "3rd", 4: "4th"}[shown]
    assert f"is the {ordinal} mask." in text


def test_shuffled_resume_matches_an_uninterrupted_run(bundle, tmp_path):
    _run(bundle, tmp_path / "ref", ScriptedModel(wrong), option_order="shuffled")
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(bundle, tmp_path / "run", ScriptedModel(wrong, fail_on_call=4),
             option_order="shuffled")
    _run(bundle, tmp_path / "run", ScriptedModel(wrong), option_order="shuffled")
    assert all_results_path(tmp_path / "run").read_bytes() == \
        all_results_path(tmp_path / "ref").read_bytes()


def test_shuffled_parts_merge_to_the_unsharded_run(bundle, tmp_path):
    _run(bundle, tmp_path / "whole", ScriptedModel(wrong), option_order="shuffled", seed=2)
    run_dir = tmp_path / "sharded"
    for part in range(3):
        keys = select_part(KEYS, part, 3)
        run_evaluation(bundle, validate_bundle(bundle, keys), ScriptedModel(wrong),
                       EvalSettings("scripted", "m", part=part, total_parts=3, seed=2,
                                    option_order="shuffled"), eval_part_dir(run_dir, part, 3))
    path = write_merged(run_dir, merge_parts(bundle, run_dir, 3))
    assert path.read_bytes() == all_results_path(tmp_path / "whole").read_bytes()


def test_another_option_order_is_refused_on_resume(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, ScriptedModel(right), option_order="shuffled")
    with pytest.raises(ConfigError, match=r"'option_order' \(run folder has 'shuffled', this "
                                          r"command has 'release'\)"):
        _run(bundle, run_dir, ScriptedModel(right))
    with pytest.raises(ConfigError, match="'option_order'"):
        _run(bundle, run_dir, ScriptedModel(right), option_order="circular")


def test_a_manifest_from_before_the_field_resumes_as_release(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, ScriptedModel(right))
    manifest = read_json(run_manifest_path(run_dir))
    del manifest["option_order"]
    write_json_atomic(run_manifest_path(run_dir), manifest)
    model = ScriptedModel(right)
    _run(bundle, run_dir, model)  # nothing left to ask, nothing refused
    assert model.calls == []
    with pytest.raises(ConfigError, match=r"'option_order' \(run folder has 'release'"):
        _run(bundle, run_dir, ScriptedModel(right), option_order="shuffled")


def test_unknown_option_order_is_refused(bundle, tmp_path):
    with pytest.raises(ConfigError, match="--option-order must be one of"):
        _run(bundle, tmp_path / "run", ScriptedModel(right), option_order="reversed")


def test_a_question_without_its_option_lines_cannot_be_reordered():
    assert reorder_question("Q?\n\nOptions:\n(1) a\n(2) b", (2, 1), "k/t") == \
        "Q?\n\nOptions:\n(1) b\n(2) a"
    with pytest.raises(SchemaError, match="k/t: cannot reorder"):
        reorder_question("Q? (1) a (2) b", (2, 1), "k/t")


# -- circular --------------------------------------------------------------------------------

def test_rotations_cover_every_position():
    for n in (2, 3, 4):
        rotations = [rotation_order(n, k) for k in range(n)]
        assert rotations[0] == tuple(range(1, n + 1))
        for position in range(n):
            assert sorted(r[position] for r in rotations) == list(range(1, n + 1))


def test_circular_asks_every_rotation_as_its_own_dialogue(bundle, tmp_path):
    model = ScriptedModel(right)
    summary = _run(bundle, tmp_path / "run", model, option_order="circular")
    ids = [i for call in model.calls for i in call]
    assert f"{LF}@r1/detection_qa" in ids and f"{LF}/detection_qa" in ids
    assert [f"{RR}@r{k}/contour_revision_qa_revision_result" for k in (1, 2, 3)] == \
        [i for i in ids if i.startswith(f"{RR}@") and "revision_result" in i]
    assert not any("@r" in i and "expansion" in i for i in ids)  # multi-select: not rotated
    requests = {r.request_id: r for b in model.batches for r in b}
    plain = requests[f"{RR}/contour_revision_qa_revision_result"]
    rotated = requests[f"{RR}@r1/contour_revision_qa_revision_result"]
    # the same conversation up to the question, then the question with its images rotated
    assert rotated.messages[:-1] == plain.messages[:-1]
    assert rotated.messages[-1].images == plain.messages[-1].images[1:] + \
        plain.messages[-1].images[:1]
    later = requests[f"{RR}/attribute_extraction_qa_distribution"]
    assert len(later.messages) == len(plain.messages) + 2  # rotations never enter the history
    results = _results(tmp_path / "run")
    assert all(d["circular_correct"] for d in _walk(results) if "circular_correct" in d)
    res = results[RR]
    assert res["_chat_history_idx"] == {n: i for i, n in enumerate(
        t.spec.name for t in validate_bundle(bundle)[0].turns)}
    assert "circular_correct" in res["detection_qa"]
    assert "circular_correct" in res["contour_revision_qa"]["revision_result"]
    assert "circular_correct" not in res["contour_revision_qa"]["expansion"]
    # 33 plain turns + one rotation per extra option of each single-choice question
    assert summary.turns_requested > 33 and summary.cases_finished == 7


def test_circular_correct_needs_every_rotation(tmp_path):
    bundle = _positives_bundle(tmp_path, n=4)
    _run(bundle, tmp_path / "run", ScriptedModel(_always_1), option_order="circular")
    results = _results(tmp_path / "run")
    for res in results.values():
        det = res["detection_qa"]
        assert det["correct"] is True  # the plain (release) answer drives the dialogue
        assert det["circular_correct"] is False  # the rotation put "Yes" second
        assert "option_order" not in det
    table = position_accuracy(results)
    det = table[table["question"] == "detection_qa"].iloc[0]
    assert det["accuracy"] == 1.0 and det["circular_accuracy"] == 0.0
    records = read_jsonl(records_path(tmp_path / "run"))
    rot = [r for r in records if r["turn"] == "detection_qa@r1"]
    assert len(rot) == 4 and all(r["option_order"] == [2, 1] and r["rotation"] == 1
                                 and r["answer"] == [2] and not r["correct"] for r in rot)


def test_circular_resume_and_async_runner_match_the_sync_run(bundle, tmp_path):
    _run(bundle, tmp_path / "ref", ScriptedModel(wrong), option_order="circular")
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(bundle, tmp_path / "run", ScriptedModel(wrong, fail_on_call=6),
             option_order="circular")
    model = ScriptedModel(wrong)
    _run(bundle, tmp_path / "run", model, option_order="circular")
    reference = all_results_path(tmp_path / "ref").read_bytes()
    assert all_results_path(tmp_path / "run").read_bytes() == reference
    run_evaluation_async(bundle, validate_bundle(bundle), AsyncFake(wrong),
                         EvalSettings("scripted", "m", option_order="circular"),
                         tmp_path / "async", concurrency=3)
    assert all_results_path(tmp_path / "async").read_bytes() == reference


class _CachedModel(ScriptedModel):
    """The scripted double with an engine's KV cache: the sync runner's rolling window."""

    def kv_cache(self):
        return KVCache(blocks=2, block_tokens=16, window_tokens=32)  # one dialogue at a time

    def prompt_limits(self):
        return PromptLimits(max_new_tokens=8)


def test_circular_in_the_kv_window_matches_the_plain_sync_run(bundle, tmp_path):
    _run(bundle, tmp_path / "plain", ScriptedModel(wrong), option_order="circular")
    model = _CachedModel(wrong)
    _run(bundle, tmp_path / "window", model, option_order="circular")
    assert all(len(call) == 1 for call in model.calls)  # the window really was used
    assert all_results_path(tmp_path / "window").read_bytes() == \
        all_results_path(tmp_path / "plain").read_bytes()


def test_circular_turns_keep_their_question_index(bundle):
    case = validate_bundle(bundle)[0]
    turns = apply_option_order(case, "circular", 0).turns
    for turn in turns:
        if turn.rotation_of is not None:
            assert turn.spec.index == TURN_BY_NAME[turn.rotation_of].index
            assert turn.option_order == rotation_order(turn.num_options, turn.rotation)


def test_circular_parts_merge_to_the_unsharded_run(bundle, tmp_path):
    _run(bundle, tmp_path / "whole", ScriptedModel(wrong), option_order="circular")
    run_dir = tmp_path / "sharded"
    for part in range(3):
        keys = select_part(KEYS, part, 3)
        run_evaluation(bundle, validate_bundle(bundle, keys), ScriptedModel(wrong),
                       EvalSettings("scripted", "m", part=part, total_parts=3,
                                    option_order="circular"), eval_part_dir(run_dir, part, 3))
    path = write_merged(run_dir, merge_parts(bundle, run_dir, 3))
    assert path.read_bytes() == all_results_path(tmp_path / "whole").read_bytes()


def test_a_circular_part_missing_a_rotation_is_named_by_the_merge(bundle, tmp_path):
    run_dir = tmp_path / "sharded"
    for part in range(2):
        keys = select_part(KEYS, part, 2)
        run_evaluation(bundle, validate_bundle(bundle, keys), ScriptedModel(wrong),
                       EvalSettings("scripted", "m", part=part, total_parts=2,
                                    option_order="circular"), eval_part_dir(run_dir, part, 2))
    part = next(p for p in range(2) if RR in select_part(KEYS, p, 2))
    records = records_path(eval_part_dir(run_dir, part, 2))
    kept = [line for line in records.read_text(encoding="utf-8").splitlines()
            if not (RR in line and '"detection_qa@r1"' in line)]
    records.write_text("\n".join(kept) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"{RR} lacks detection_qa@r1"):
        merge_parts(bundle, run_dir, 2)


# -- command line ----------------------------------------------------------------------------

def _cli(tmp_path, *extra):
    import runpy
    from pathlib import Path

    from utils.cli import run_main

    script = Path(__file__).resolve().parents[2] / "src" / "03_eval_vlm_on_chexpercept" / \
        "00_eval.py"
    main = runpy.run_path(str(script), run_name="stage03_eval")["main"]
    bench = tmp_path / "bench"
    if not bench.exists():
        write_bundle(bench)
    return run_main(main, ["--benchmark-dir", str(bench), "--output-path",
                           str(tmp_path / "out"), "--no-progress", *extra])


def test_cli_flag_runs_records_and_refuses(tmp_path, capsys):
    assert _cli(tmp_path, "--provider", "oracle", "--option-order", "shuffled", "--seed",
                "4") == 0
    # the option order and the seed are in the folder's name (docs/evaluation_protocol.md,
    # "Run folder"), so the release run of the same model goes beside it, not into it
    run_dir = tmp_path / "out" / "oracle_baseline+order=shuffled+seed=4" / "oracle_implicit"
    results = _results(run_dir)
    assert all(d["correct"] for d in _walk(results) if "correct" in d)
    assert all("option_order" in r["detection_qa"] for r in results.values())
    assert read_json(run_manifest_path(run_dir))["option_order"] == "shuffled"
    assert _cli(tmp_path, "--provider", "oracle", "--seed", "4") == 0
    release_dir = tmp_path / "out" / "oracle_baseline" / "oracle_implicit"
    assert read_json(run_manifest_path(release_dir))["option_order"] == "release"
    assert read_json(run_manifest_path(run_dir))["option_order"] == "shuffled"
    # a folder renamed by hand still has its identity: the manifest refuses the other order
    release_dir.parent.rename(tmp_path / "out" / "renamed")
    run_dir.parent.rename(tmp_path / "out" / "oracle_baseline")
    capsys.readouterr()
    assert _cli(tmp_path, "--provider", "oracle", "--seed", "4") == 2
    assert "'option_order' (run folder has 'shuffled', this command has 'release')" in \
        capsys.readouterr().err
    assert _cli(tmp_path, "--provider", "oracle", "--option-order", "circular", "--part", "0",
                "--total-parts", "2") == 0  # a part of a circular run
    part_dir = (tmp_path / "out" / "oracle_baseline+order=circular" / "oracle_implicit"
                / "part_0_of_2")
    assert all("circular_correct" in r["detection_qa"] for r in _results(part_dir).values())


def test_option_probs_under_shuffled_are_keyed_by_original_options(tmp_path):
    # the model answers the displayed truth with p = 0.8 on its token and 0.2 on the other
    import math

    from utils.llm.base import Completion, Usage

    def answer(request):
        gt = request.meta["ground_truth"]
        other = 2 if gt == 1 else 1
        steps = [("Answer:", {"Answer:": -0.01}),
                 (f" {gt}", {f" {gt}": math.log(0.8), f" {other}": math.log(0.2)})]
        return Completion(text=f"Answer: {gt}", finish_reason="stop", top_logprobs=steps,
                          usage=Usage(input_tokens=10, output_tokens=3))

    bundle = _positives_bundle(tmp_path, n=8)
    _run(bundle, tmp_path / "run", ScriptedModel(answer), option_order="shuffled",
         option_probs=True)
    results = _results(tmp_path / "run")
    orders = set()
    for res in results.values():
        det = res["detection_qa"]
        orders.add(tuple(det["option_order"]))
        assert det["correct"] and det["option_probs"]["status"] == "ok"
        # "Yes" (original 1, the truth) gets 0.8 wherever it was shown
        assert det["option_probs"]["probs"] == pytest.approx({"1": 0.8, "2": 0.2})
    assert orders == {(1, 2), (2, 1)}
