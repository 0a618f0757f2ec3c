"""Sharding by key_id (--part/--total-parts) and merging the parts' results."""

from __future__ import annotations

import json

import pytest
from stage03_bundle import CASES, write_bundle
from stage03_fakes import ScriptedModel, right, wrong

from chexpercept.errors import ConfigError, InputError
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.sharding import (
    check_part,
    merge_parts,
    part_of,
    select_part,
    write_merged,
)
from chexpercept.files import read_json, write_json_atomic
from chexpercept.layouts import all_results_path, eval_part_dir, run_manifest_path

KEYS = list(CASES)


@pytest.fixture()
def bundle(tmp_path):
    return load_bundle(write_bundle(tmp_path / "bench"))


def _mixed(request):
    """Right for some turns, wrong for others (so implicit-oracle patches happen)."""
    return right(request) if sum(map(ord, request.request_id)) % 3 else wrong(request)


def _run_part(bundle, run_dir, part, total, *, model=None, key_ids=None, **settings):
    keys = select_part(KEYS if key_ids is None else key_ids, part, total)
    target = run_dir if part is None else eval_part_dir(run_dir, part, total)
    return run_evaluation(bundle, validate_bundle(bundle, keys), model or ScriptedModel(_mixed),
                          EvalSettings("scripted", "m", part=part, total_parts=total,
                                       save_every=1, **settings), target)


def test_part_of_is_a_pinned_hash_of_the_key_id():
    # blake2b-64(key_id) mod n: changing it would reshuffle every sharded run in progress
    assert [part_of(k, 2) for k in KEYS] == [0, 1, 0, 1, 0, 1, 0]
    assert [part_of(k, 4) for k in KEYS] == [2, 3, 0, 1, 0, 3, 0]
    assert part_of(KEYS[0], 1) == 0


def test_parts_partition_the_cases_independent_of_order_and_limit():
    keys = [f"effusion_s{50_000_000 + i}_positive_0" for i in range(1000)]
    parts = [select_part(keys, p, 4) for p in range(4)]
    assert sorted(k for part in parts for k in part) == sorted(keys)
    assert all(200 <= len(part) <= 300 for part in parts), [len(p) for p in parts]
    assert select_part(list(reversed(keys)), 1, 4) == list(reversed(parts[1]))
    assert select_part(keys[:100], 1, 4) == [k for k in parts[1] if k in keys[:100]]
    assert select_part(keys, None, 1) == keys


@pytest.mark.parametrize(("part", "total", "message"), [
    (2, 2, "--part must be in 0..1"), (-1, 2, "--part must be in 0..1"),
    (None, 3, "needs --part"), (0, 0, "--total-parts must be >= 1")])
def test_bad_part_flags_are_refused(part, total, message):
    with pytest.raises(ConfigError, match=message):
        check_part(part, total)


def test_merged_parts_equal_an_unsharded_run(bundle, tmp_path):
    whole = tmp_path / "whole"
    _run_part(bundle, whole, None, 1)
    run_dir = tmp_path / "sharded"
    summaries = [_run_part(bundle, run_dir, p, 3) for p in range(3)]
    assert sum(s.cases_selected for s in summaries) == len(KEYS)
    manifest = read_json(run_manifest_path(eval_part_dir(run_dir, 2, 3)))
    assert manifest["sharding"] == {"part": 2, "total_parts": 3}

    merged = merge_parts(bundle, run_dir, 3)
    assert merged.cases_per_part == [4, 2, 1]
    path = write_merged(run_dir, merged)
    assert path.read_bytes() == all_results_path(whole).read_bytes()
    assert list(json.loads(path.read_text(encoding="utf-8"))) == KEYS
    manifest = read_json(run_manifest_path(run_dir))
    assert manifest["sharding"] == {"total_parts": 3, "merged": True}
    assert [p["part"] for p in manifest["parts"]] == [0, 1, 2]
    assert manifest["provider"] == "scripted" and manifest["oracle_setting"] == "implicit"
    # merging again is allowed (same output); an unsharded run into the merged folder is not
    write_merged(run_dir, merge_parts(bundle, run_dir, 3))
    with pytest.raises(ConfigError, match="'sharding'"):
        _run_part(bundle, run_dir, None, 1)


def test_merge_refuses_a_missing_part(bundle, tmp_path):
    run_dir = tmp_path / "run"
    for part in (0, 2):
        _run_part(bundle, run_dir, part, 3)
    with pytest.raises(InputError, match=r"part 1 of 3 is missing.*--part 1 --total-parts 3"):
        merge_parts(bundle, run_dir, 3)
    assert not all_results_path(run_dir).exists()


def test_merge_refuses_incomplete_parts_naming_key_ids_and_turns(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run_part(bundle, run_dir, 0, 2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run_part(bundle, run_dir, 1, 2, model=ScriptedModel(_mixed, fail_on_call=2))
    with pytest.raises(InputError) as err:
        merge_parts(bundle, run_dir, 2)
    message = str(err.value)
    # part 1: effusion RF (6 turns) answered 2, cardiomegaly LF done after 1 call
    assert "2 case(s) are incomplete" in message
    assert ("part 1: effusion_s50000002_positive_0 lacks contour_revision_qa_expansion"
            not in message)  # an RF case has no revision turns
    assert "part 1: effusion_s50000002_positive_0 lacks attribute_extraction_qa_distribution" \
        in message
    assert "part 1: cardiomegaly_s50000004_positive_0 lacks contour_revision_qa_expansion" \
        in message
    # re-running the part finishes it; the merge then succeeds
    _run_part(bundle, run_dir, 1, 2)
    assert len(merge_parts(bundle, run_dir, 2).all_results) == len(KEYS)


def test_merge_refuses_parts_run_with_other_settings(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run_part(bundle, run_dir, 0, 2)
    _run_part(bundle, run_dir, 1, 2, seed=7, oracle_setting="none")
    with pytest.raises(InputError, match=r"part 1 was run with other settings than part 0: "
                                         r"'oracle_setting'.*'seed' \(part 0: 0, part 1: 7\)"):
        merge_parts(bundle, run_dir, 2)


def test_merge_refuses_a_part_folder_of_another_split(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run_part(bundle, run_dir, 0, 2)
    _run_part(bundle, run_dir, 1, 2)
    manifest_path = run_manifest_path(eval_part_dir(run_dir, 1, 2))
    manifest = read_json(manifest_path)
    manifest["sharding"] = {"part": 0, "total_parts": 2}
    write_json_atomic(manifest_path, manifest)
    with pytest.raises(InputError, match=r"holds sharding \{'part': 0, 'total_parts': 2\}, "
                                         r"expected \{'part': 1, 'total_parts': 2\}"):
        merge_parts(bundle, run_dir, 2)


def test_a_part_folder_is_not_resumed_as_another_part(bundle, tmp_path):
    run_dir = tmp_path / "run"
    part_dir = eval_part_dir(run_dir, 0, 2)
    _run_part(bundle, run_dir, 0, 2)
    with pytest.raises(ConfigError, match="'sharding'"):
        run_evaluation(bundle, validate_bundle(bundle, select_part(KEYS, 0, 3)),
                       ScriptedModel(_mixed), EvalSettings("scripted", "m", part=0,
                                                           total_parts=3), part_dir)


def test_stale_part_results_are_named_and_rebuilt_by_rerunning_the_part(bundle, tmp_path):
    """A kill after the last record but before the last all_results rewrite."""
    run_dir = tmp_path / "run"
    for part in range(2):
        _run_part(bundle, run_dir, part, 2)
    stale = all_results_path(eval_part_dir(run_dir, 1, 2))
    write_json_atomic(stale, {})
    with pytest.raises(InputError, match=r"lacks 3 finished case\(s\).*re-run the part"):
        merge_parts(bundle, run_dir, 2)
    model = ScriptedModel(_mixed)
    _run_part(bundle, run_dir, 1, 2, model=model)
    assert model.calls == []
    assert len(merge_parts(bundle, run_dir, 2).all_results) == len(KEYS)


def test_merge_with_a_limit_needs_only_the_selected_cases(bundle, tmp_path):
    run_dir = tmp_path / "run"
    selected = KEYS[:4]
    for part in range(2):
        _run_part(bundle, run_dir, part, 2, key_ids=selected)
    with pytest.raises(InputError, match="incomplete"):
        merge_parts(bundle, run_dir, 2)
    merged = merge_parts(bundle, run_dir, 2, selected)
    assert list(merged.all_results) == selected


def test_merge_refuses_to_overwrite_an_unsharded_run(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run_part(bundle, run_dir, None, 1)
    for part in range(2):
        _run_part(bundle, run_dir, part, 2)
    with pytest.raises(ConfigError, match="holds an unsharded run"):
        merge_parts(bundle, run_dir, 2)
