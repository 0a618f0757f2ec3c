"""chexpercept.curation.sampling and candidates helpers on small hand-made MIMIC-ILS data."""

from __future__ import annotations

import pytest

from chexpercept.curation import candidates, sampling
from chexpercept.errors import ConfigError, InputError
from chexpercept.lesions import LESIONS


def _pair(study, kind, k, target, ptype="global", location=("right lung",)):
    return {"pair_id": f"{study}_{kind}_{k}", "instruction": "x", "answer": "[SEG]",
            "type": ptype, "target": target, "location": list(location), "seg": kind == "positive",
            "seg_mask_path": f"{study}/{study}_{target}_0.png" if kind == "positive" else None}


def _study(n, positives=(), negatives=()):
    sid = f"sT{n:03d}"
    pos = [_pair(sid, "positive", k, t, ty, loc) for k, (t, ty, loc) in enumerate(positives)]
    neg = [_pair(sid, "negative", k, t, ty) for k, (t, ty) in enumerate(negatives)]
    return sid, {"subject_id": f"pT{n:03d}", "dicom_id": f"d{n:03d}",
                 "image_path": f"files/pT0/pT{n:03d}/{sid}/d{n:03d}.jpg", "section_name": "f",
                 "section_content": "1. x", "instruction_answer_pairs": {
                     "positive_pairs": pos, "negative_pairs": neg}}


def _train():
    studies = [
        _study(1, [("edema", "global", ["right lung"]), ("edema", "basic", ["left lung"]),
                   ("opacity", "basic", ["left lung base", "right lung", "left lung base"]),
                   ("opacity", "basic", ["heart"])],
               [("effusion", "global"), ("cardiomegaly", "basic")]),
        _study(2, [("cardiomegaly", "global", ["heart"])], [("edema", "global")]),
    ]
    # Many negative-only studies for every lesion, to make seeded draws meaningful.
    for n in range(3, 40):
        studies.append(_study(n, [], [(LESIONS[n % 7], "global"), (LESIONS[(n + 3) % 7],
                                                                   "global")]))
    # Many global positives for consolidation.
    for n in range(40, 52):
        studies.append(_study(n, [("consolidation", "global", ["right lung base"])]))
    return dict(studies)


def test_bucketing_rules_and_location_field():
    pool = sampling.bucket_pairs(_train(), source="mem", report_root="/r")
    assert [e["pair_id"] for e in pool.global_info["edema"]] == ["sT001_positive_0"]
    assert pool.basic_info["edema"] == []  # a global edema pair exists in that study
    opacity = pool.basic_info["opacity"]
    assert [e["pair_id"] for e in opacity] == ["sT001_positive_2"]  # first basic only
    assert opacity[0]["location"] == ["left lung base", "right lung", "left lung base"]
    assert opacity[0]["report_path"] == "/r/pT0/pT001/sT001.txt"
    assert {"study_id", "dicom_id", "image_path"} <= set(opacity[0])
    # Non-global negatives are ignored.
    assert all(e["type"] == "global" for es in pool.negative_info.values() for e in es)
    assert not any(e["study_id"] == "sT001" for e in pool.negative_info["cardiomegaly"])


def test_unknown_target_names_study_and_pair():
    train = _train()
    train["sT001"]["instruction_answer_pairs"]["positive_pairs"][0]["target"] = "pneumothorax"
    train["sT002"]["instruction_answer_pairs"]["negative_pairs"][0]["target"] = "Edema"
    with pytest.raises(InputError) as exc:
        sampling.bucket_pairs(train, source="ils.json")
    msg = str(exc.value)
    assert "sT001" in msg and "sT001_positive_0" in msg and "pneumothorax" in msg
    assert "sT002_negative_0" in msg  # all problems collected, reported once


def test_sampling_is_seeded_and_disjoint():
    pool = sampling.bucket_pairs(_train(), source="mem")
    a = sampling.sample_pool(pool, seed=0, max_positive=5, negatives_per_lesion=3)
    b = sampling.sample_pool(pool, seed=0, max_positive=5, negatives_per_lesion=3)
    c = sampling.sample_pool(pool, seed=7, max_positive=5, negatives_per_lesion=3)
    ids = lambda s: {k: [e["pair_id"] for e in v]  # noqa: E731
                     for k, v in {**s.global_info, **{f"n{k}": v for k, v in
                                                      s.negative_info.items()}}.items()}
    assert ids(a) == ids(b)
    assert ids(a) != ids(c)
    assert len(a.global_info["consolidation"]) == 5  # capped, drawn from 12
    assert len(pool.global_info["consolidation"]) == 12
    assert a.basic_info["opacity"]  # basic fills in when there are no global pairs
    pos = {e["dicom_id"] for b_ in (a.global_info, a.basic_info) for es in b_.values()
           for e in es}
    neg = [e["dicom_id"] for es in a.negative_info.values() for e in es]
    assert len(neg) == len(set(neg)) and not (set(neg) & pos)
    assert all(len(a.negative_info[les]) == 3 for les in LESIONS)


def test_view_filter_records_drops():
    pool = sampling.bucket_pairs(_train(), source="mem")
    views = {f"d{n:03d}": "PA" for n in range(1, 52)}
    views["d002"] = "LATERAL"
    del views["d040"]
    kept, dropped = sampling.filter_views(pool, views, ["PA", "AP"])
    assert not kept.global_info["cardiomegaly"]
    reasons = {d["dicom_id"]: d["reason"] for d in dropped}
    assert "LATERAL" in reasons["d002"] and reasons["d040"] == "dicom not in metadata"


def test_location_text_and_instruction():
    assert candidates.location_text("cardiomegaly", ["whatever"]) == "heart"
    assert candidates.location_text("edema", []) == "right lung and left lung"
    assert candidates.location_text("edema", ["b", "a", "b"]) == "b and a"
    assert candidates.location_text("edema", ["c", "a", "b"]) == "c, a, and b"
    assert candidates.instruction_for("edema", "right lung and left lung") == "Segment the edema."
    assert candidates.instruction_for("edema", "left lung base") == \
        "Segment the edema in the left lung base."


def test_work_list_and_shards():
    g = {"edema": [{"pair_id": f"g{i}"} for i in range(3)]}
    b = {"edema": [{"pair_id": f"b{i}"} for i in range(3)]}
    items = candidates.build_work_list(g, b, 4)
    assert [(i["pair_id"], i["segmentation_source"]) for i in items] == [
        ("g0", "global"), ("g1", "global"), ("g2", "global"), ("b0", "basic")]
    parts = [candidates.shard(list(range(10)), p, 3) for p in range(3)]
    assert parts == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(ConfigError):
        candidates.shard([1], 3, 3)
    candidates.check_segmenter("rosalia")  # registered (loads only when created)
    with pytest.raises(ConfigError, match="'sam'.*provided.*rosalia"):
        candidates.check_segmenter("sam")
