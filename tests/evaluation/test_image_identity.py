"""Images are part of a Stage 03 run's identity (issue 29 item 4).

Attack: start a run, stop it partway, overwrite the images of an answered and an unanswered
case, resume. Before, it finished with exit 0 over mixed inputs; now the resume is refused,
naming each key_id and image (docs/evaluation_protocol.md, "Run folder"). Also: the digests are
cached per file (a resume costs stat calls), a corrupt cache is recomputed, an old manifest
without the field still resumes, and the shard merge checks the images the same way.
"""

from __future__ import annotations

import json
import logging
import os
import runpy
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from stage03_bundle import CASES, image_relpaths, load_items, write_bundle
from stage03_fakes import ScriptedModel, right

from chexpercept import image_digests
from chexpercept.errors import ConfigError, InputError
from chexpercept.evaluation import EvalSettings, load_bundle, run_evaluation, validate_bundle
from chexpercept.evaluation.cases import bundle_image_digests, bundle_images
from chexpercept.evaluation.sharding import merge_parts, select_part
from chexpercept.files import read_json, write_json_atomic
from chexpercept.image_digests import (
    IMAGES_SHA_FIELD,
    combined_digest,
    image_digest_cache_path,
    image_digests_path,
)
from chexpercept.layouts import all_results_path, eval_part_dir, records_path, run_manifest_path
from chexpercept.run_store import IDENTITY_FIELDS
from utils.cli import run_main

KEYS = list(CASES)
ANSWERED = KEYS[0]  # effusion RR: in the first, stopped run
UNANSWERED = KEYS[6]  # opacity RR: only in the resumed selection
ANSWERED_IMAGE = "detection_qa/xray.png"
UNANSWERED_IMAGE = "contour_qa/contour_revision_qa/option_2.png"
SCRIPT = Path(__file__).resolve().parents[2] / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CHEXPERCEPT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture()
def bundle(tmp_path):
    return load_bundle(write_bundle(tmp_path / "bench"))


@pytest.fixture()
def hashed(monkeypatch):
    """The files read for their sha256 (each call of ``image_digests._hash_file``)."""
    reads: list[str] = []
    real = image_digests._hash_file

    def counting(path):
        reads.append(path)
        return real(path)

    monkeypatch.setattr(image_digests, "_hash_file", counting)
    return reads


def _run(bundle, run_dir, keys=None, model=None, **settings):
    return run_evaluation(bundle, validate_bundle(bundle, keys), model or ScriptedModel(right),
                          EvalSettings("scripted", "m", oracle_setting="implicit", **settings),
                          run_dir)


def _overwrite(bundle, key_id, rel, value=7):
    """Write other pixels into a case's image, a second later (as a real overwrite is)."""
    path = bundle.layout.images_dir / key_id / rel
    before = path.stat().st_mtime_ns
    Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(path)
    os.utime(path, ns=(before + 10**9, before + 10**9))
    return path


def test_bundle_images_are_every_image_every_case_sends(bundle):
    items = load_items(bundle.layout.root)
    expected = sorted(f"{k}/{rel}" for k, item in items.items() for rel in image_relpaths(k, item))
    files = bundle_images(bundle)
    assert list(files) == expected
    assert all(files[rel] == bundle.layout.images_dir / rel for rel in files)


def test_manifest_and_side_file_record_the_images(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir)
    assert IMAGES_SHA_FIELD in IDENTITY_FIELDS
    manifest = read_json(run_manifest_path(run_dir))
    side = read_json(image_digests_path(run_dir))
    assert set(side["files"]) == set(bundle_images(bundle))
    assert manifest[IMAGES_SHA_FIELD] == side[IMAGES_SHA_FIELD] == combined_digest(side["files"])
    assert manifest[IMAGES_SHA_FIELD] == bundle_image_digests(bundle).sha256
    # the digest is over every case of the bundle, not the selection
    _run(bundle, tmp_path / "few", KEYS[:2])
    assert read_json(run_manifest_path(tmp_path / "few"))[IMAGES_SHA_FIELD] == \
        manifest[IMAGES_SHA_FIELD]


def test_resume_over_changed_images_is_refused_naming_key_id_and_path(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, KEYS[:3])  # stopped partway: 3 of 7 cases
    records = records_path(run_dir).read_bytes()
    _overwrite(bundle, ANSWERED, ANSWERED_IMAGE)
    _overwrite(bundle, UNANSWERED, UNANSWERED_IMAGE)
    model = ScriptedModel(right)
    with pytest.raises(ConfigError) as err:
        _run(bundle, run_dir, model=model)
    message = str(err.value)
    assert f"{ANSWERED}: {ANSWERED_IMAGE} (was sha256 " in message
    assert f"{UNANSWERED}: {UNANSWERED_IMAGE} (was sha256 " in message
    assert "2 benchmark image(s) differ" in message and f"'{IMAGES_SHA_FIELD}'" in message
    assert "\n" not in message
    assert message.index("another --output-path") < message.index("--overwrite")
    assert model.calls == [] and records_path(run_dir).read_bytes() == records
    # a new --output-path runs on the new images
    _run(bundle, tmp_path / "new")
    assert json.loads(all_results_path(tmp_path / "new").read_text())


def test_resume_over_unchanged_images_works_and_reads_no_image(bundle, tmp_path, hashed):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, KEYS[:3])
    assert len(hashed) == len(bundle_images(bundle))  # one read per file, on the first run
    hashed.clear()
    model = ScriptedModel(right)
    summary = _run(bundle, run_dir, model=model)
    assert hashed == []  # the cache answered: stat calls only
    assert summary.cases_finished == len(KEYS) and model.calls
    assert not any(f"{k}/" in i for call in model.calls for i in call for k in KEYS[:3])


def test_an_unchanged_file_is_read_once_and_a_changed_one_again(bundle, hashed):
    first = bundle_image_digests(bundle)
    assert len(hashed) == len(first.files)
    hashed.clear()
    assert bundle_image_digests(bundle) == first and hashed == []
    path = _overwrite(bundle, ANSWERED, ANSWERED_IMAGE)
    again = bundle_image_digests(bundle)
    assert hashed == [os.path.abspath(path)]
    assert again.sha256 != first.sha256
    assert {k for k in first.files if first.files[k] != again.files[k]} == \
        {f"{ANSWERED}/{ANSWERED_IMAGE}"}


@pytest.mark.parametrize("garbage", [b"{not json", b"[1, 2]", b'{"format": "other/9"}',
                                     b'{"format": "chexpercept-image-digest-cache/1", "files": '
                                     b'{"/x": [1, 2, 3, 4, "' + b"0" * 64 + b'"], "/y": 5}}',
                                     b"\xff\xfe"])
def test_a_corrupt_cache_is_recomputed_never_an_error(bundle, tmp_path, hashed, garbage):
    reference = bundle_image_digests(bundle)
    hashed.clear()
    image_digest_cache_path().write_bytes(garbage)
    assert bundle_image_digests(bundle) == reference
    assert len(hashed) == len(reference.files)
    cache = read_json(image_digest_cache_path())  # rewritten as a valid cache
    assert cache["format"] == image_digests.CACHE_FORMAT
    assert len(cache["files"]) >= len(reference.files)


def test_a_cache_entry_with_a_wrong_digest_for_a_changed_stat_is_not_used(bundle, hashed):
    reference = bundle_image_digests(bundle)
    cache = read_json(image_digest_cache_path())
    for entry in cache["files"].values():  # a stale sha256 under another mtime
        entry[1] -= 1
        entry[4] = "0" * 64
    write_json_atomic(image_digest_cache_path(), cache)
    hashed.clear()
    assert bundle_image_digests(bundle) == reference and len(hashed) == len(reference.files)


def test_the_cache_is_bounded(bundle, monkeypatch):
    monkeypatch.setattr(image_digests, "MAX_CACHE_ENTRIES", 5)
    image_digests._write_cache(image_digest_cache_path(),
                               {f"/old/{i}": [1, 2, 3, 4, "a" * 64] for i in range(4)})
    bundle_image_digests(bundle)
    files = read_json(image_digest_cache_path())["files"]
    assert len(files) == 5 and not any(k.startswith("/old/") for k in files)
    monkeypatch.setattr(image_digests, "MAX_CACHE_BYTES", 10)
    assert image_digests._read_cache(image_digest_cache_path()) == {}


def test_an_unwritable_cache_is_a_warning(bundle, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder", encoding="utf-8")
    monkeypatch.setenv("CHEXPERCEPT_CACHE_DIR", str(blocker / "cache"))
    with caplog.at_level(logging.WARNING):
        digests = bundle_image_digests(bundle)
    assert len(digests.files) == len(bundle_images(bundle))
    assert "not remembered" in caplog.text


def test_a_missing_image_counts_as_missing(bundle):
    reference = bundle_image_digests(bundle)
    (bundle.layout.images_dir / UNANSWERED / UNANSWERED_IMAGE).unlink()
    digests = bundle_image_digests(bundle)
    assert digests.files[f"{UNANSWERED}/{UNANSWERED_IMAGE}"] is None
    assert digests.sha256 != reference.sha256


def test_a_manifest_without_the_field_still_resumes(bundle, tmp_path, caplog):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, KEYS[:3])
    manifest = read_json(run_manifest_path(run_dir))
    del manifest[IMAGES_SHA_FIELD]  # written before images were part of the identity
    write_json_atomic(run_manifest_path(run_dir), manifest)
    image_digests_path(run_dir).unlink()
    _overwrite(bundle, UNANSWERED, UNANSWERED_IMAGE)
    with caplog.at_level(logging.WARNING):
        summary = _run(bundle, run_dir)
    assert summary.cases_finished == len(KEYS)
    assert f"no '{IMAGES_SHA_FIELD}'" in caplog.text
    assert IMAGES_SHA_FIELD not in read_json(run_manifest_path(run_dir))  # left as it was


def test_a_lost_side_file_still_refuses_by_the_field(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, KEYS[:3])
    image_digests_path(run_dir).unlink()
    _overwrite(bundle, ANSWERED, ANSWERED_IMAGE)
    with pytest.raises(ConfigError, match=rf"field\(s\) differ: '{IMAGES_SHA_FIELD}'"):
        _run(bundle, run_dir)


def test_a_lost_side_file_of_an_unchanged_run_is_written_again(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, KEYS[:3])
    side = image_digests_path(run_dir).read_bytes()
    image_digests_path(run_dir).unlink()
    _run(bundle, run_dir)
    assert image_digests_path(run_dir).read_bytes() == side


def test_overwrite_starts_afresh_on_the_new_images(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir, KEYS[:3])
    _overwrite(bundle, ANSWERED, ANSWERED_IMAGE)
    run_evaluation(bundle, validate_bundle(bundle), ScriptedModel(right),
                   EvalSettings("scripted", "m", oracle_setting="implicit"), run_dir,
                   overwrite=True)
    assert read_json(image_digests_path(run_dir))["files"] == bundle_image_digests(bundle).files


def test_outputs_other_than_the_manifest_do_not_carry_the_images(bundle, tmp_path):
    run_dir = tmp_path / "run"
    _run(bundle, run_dir)
    names = sorted(p.name for p in run_dir.iterdir())
    assert names == ["all_results.json", "image_digests.json", "records.jsonl",
                     "run_manifest.json"]
    for name in ("all_results.json", "records.jsonl"):
        assert IMAGES_SHA_FIELD not in (run_dir / name).read_text(encoding="utf-8")


def _run_part(bundle, run_dir, part, total):
    keys = select_part(KEYS, part, total)
    return run_evaluation(bundle, validate_bundle(bundle, keys), ScriptedModel(right),
                          EvalSettings("scripted", "m", part=part, total_parts=total),
                          eval_part_dir(run_dir, part, total))


def test_merge_refuses_parts_run_on_other_images_by_name(bundle, tmp_path):
    run_dir = tmp_path / "sharded"
    for part in range(2):
        _run_part(bundle, run_dir, part, 2)
    merged = merge_parts(bundle, run_dir, 2)
    assert merged.manifest[IMAGES_SHA_FIELD] == bundle_image_digests(bundle).sha256
    _overwrite(bundle, ANSWERED, ANSWERED_IMAGE)
    with pytest.raises(InputError) as err:
        merge_parts(bundle, run_dir, 2)
    message = str(err.value)
    assert f"{ANSWERED}: {ANSWERED_IMAGE} (was sha256 " in message
    assert "part 0 ran on other images" in message and "part 1 ran on other images" in message


def test_merge_refuses_parts_that_disagree_on_the_images(bundle, tmp_path):
    run_dir = tmp_path / "sharded"
    _run_part(bundle, run_dir, 0, 2)
    _overwrite(bundle, ANSWERED, ANSWERED_IMAGE)
    _run_part(bundle, run_dir, 1, 2)
    with pytest.raises(InputError, match=rf"part 1 was run with other settings than part 0: "
                                         rf"'{IMAGES_SHA_FIELD}'"):
        merge_parts(bundle, run_dir, 2)


def test_the_cli_refuses_the_attack_with_one_line(tmp_path, capsys):
    bench = write_bundle(tmp_path / "bench")
    out = tmp_path / "out"
    argv = ["--benchmark-dir", str(bench), "--output-path", str(out), "--provider", "random",
            "--oracle_setting", "implicit", "--no-progress"]
    main = runpy.run_path(str(SCRIPT), run_name="stage03_eval")["main"]
    assert run_main(main, [*argv, "--limit", "3"]) == 0
    bundle = load_bundle(bench)
    _overwrite(bundle, ANSWERED, ANSWERED_IMAGE)
    _overwrite(bundle, UNANSWERED, UNANSWERED_IMAGE)
    capsys.readouterr()
    assert run_main(main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # logged warnings come first
    assert err.startswith("error: ")
    assert f"{ANSWERED}: {ANSWERED_IMAGE}" in err and f"{UNANSWERED}: {UNANSWERED_IMAGE}" in err
    assert err.index("another --output-path") < err.index("--overwrite")
