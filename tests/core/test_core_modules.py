import json
import re

import numpy as np
import pytest
from PIL import Image

from chexpercept.errors import InputError, SchemaError
from chexpercept.files import (
    append_jsonl,
    atomic_path,
    loads_json,
    read_json,
    read_jsonl,
    write_csv_atomic,
    write_json_atomic,
)
from chexpercept.images import png_bytes, read_cxr, read_mask, write_mask
from chexpercept.layouts import eval_run_dir
from chexpercept.lesions import (
    LESIONS,
    has_attribute_stage,
    lesion_from_key_id,
    make_key_id,
    pair_id_from_key_id,
    validate_lesion,
)
from chexpercept.provenance import redact_secrets
from chexpercept.rng import rng_for
from chexpercept.schema import accepted_key_ids, parse_optimal


def test_lesion_order_and_key_ids():
    assert LESIONS[0] == "cardiomegaly" and len(LESIONS) == 7
    key = make_key_id("cardiomegaly", "s50000002_negative_2")
    assert key == "cardiomegaly_s50000002_negative_2"
    assert lesion_from_key_id(key) == "cardiomegaly"
    assert pair_id_from_key_id(key) == "s50000002_negative_2"
    assert not has_attribute_stage("cardiomegaly") and has_attribute_stage("effusion")


def test_unknown_lesion_names_place_and_suggests():
    with pytest.raises(InputError, match=r"sheet\.csv row 3: unknown lesion 'efusion'.*'effusion'"):
        validate_lesion("efusion", where="sheet.csv row 3")


@pytest.mark.parametrize("value,expected", [
    ("y", True), ("YES", True), (" 1 ", True), ("true", True),
    ("n", False), ("No", False), ("0", False), ("FALSE", False),
    ("", None), ("  ", None), (None, None),
])
def test_parse_optimal_strict(value, expected):
    assert parse_optimal(value) is expected


def test_parse_optimal_rejects_other_values():
    with pytest.raises(ValueError):
        parse_optimal("maybe")


def test_accepted_key_ids_collects_every_bad_row():
    rows = [{"key_id": "a", "optimal?": "y"}, {"key_id": "b", "optimal?": "n"},
            {"key_id": "c", "optimal?": ""}, {"key_id": "d", "optimal?": "ok"},
            {"key_id": "e", "optimal?": "?"}]
    with pytest.raises(SchemaError) as exc:
        accepted_key_ids(rows, "sheet.csv")
    msg = str(exc.value)
    assert "sheet.csv" in msg and "row 4 (key_id d)" in msg and "row 5 (key_id e)" in msg
    assert accepted_key_ids(rows[:3], "s.csv") == ["a"]


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "out.json"
    write_json_atomic(target, {"a": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash")
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_jsonl_ignores_truncated_last_line_only(tmp_path):
    p = tmp_path / "r.jsonl"
    append_jsonl(p, {"a": np.int64(1)})
    with open(p, "a") as fh:
        fh.write('{"a": 2')
    assert read_jsonl(p) == [{"a": 1}]
    p.write_text('{"a": 1\n{"a": 2}\n')
    with pytest.raises(SchemaError, match="line 1"):
        read_jsonl(p)


#: Text the JSON parser cannot hold, and what the error says (issue 29, item 3).
HOSTILE_JSON = [
    (b"[" * 200_000, "nested inside one another"),
    (b'{"a":' * 200_000, "nested inside one another"),
    (b'{"n": ' + b"9" * 5000 + b"}", "not usable JSON: Exceeds the limit"),
    (b'{"a": "\xff\xfe"}', "not UTF-8"),
    (b'{"a": ', "not valid JSON (line 1, column 7)"),
]


@pytest.mark.parametrize(("data", "says"), HOSTILE_JSON)
def test_json_the_parser_cannot_hold_is_a_schema_error_naming_the_file(tmp_path, data, says):
    """Was: RecursionError / ValueError / UnicodeDecodeError tracebacks (exit 1)."""
    path = tmp_path / "chexpercept.json"
    path.write_bytes(data)
    with pytest.raises(SchemaError, match=f"^{re.escape(str(path))}: .*{re.escape(says)}"):
        read_json(path)
    lines = tmp_path / "records.jsonl"
    lines.write_bytes(data + b"\n" + b'{"a": 1}\n')
    with pytest.raises(SchemaError, match=f"^{re.escape(str(lines))}"):
        read_jsonl(lines)
    if b"\xff" not in data:
        with pytest.raises(SchemaError, match=f"^shard 0, key_id 'x': .*{re.escape(says)}"):
            loads_json(data.decode(), "shard 0, key_id 'x'")


def test_read_mask_uses_channel0_and_resizes_only_when_asked(tmp_path):
    rgb = np.zeros((512, 512, 3), np.uint8)
    rgb[100:200, 100:200, 0] = 255
    rgb[300:400, 300:400, 1] = 255  # other channel: ignored
    Image.fromarray(rgb).save(tmp_path / "m.png")
    m = read_mask(tmp_path / "m.png", resize=True)
    assert m.shape == (1024, 1024) and m.dtype == bool
    assert m[300, 300] and not m[700, 700]
    with pytest.raises(InputError, match="is 512x512 pixels, expected 1024x1024"):
        read_mask(tmp_path / "m.png")  # a mask that does not fit is never resized silently


def test_read_cxr_handles_16bit_and_rgb(tmp_path):
    arr16 = (np.arange(64 * 64, dtype=np.uint16).reshape(64, 64) * 4)
    Image.fromarray(arr16).save(tmp_path / "a.png")
    a = read_cxr(tmp_path / "a.png")
    assert a.dtype == np.uint8 and a.shape == (1024, 1024) and a.max() == 255
    Image.fromarray(np.full((10, 20, 3), 128, np.uint8)).save(tmp_path / "b.png")
    assert read_cxr(tmp_path / "b.png", size=None).shape == (10, 20)
    with pytest.raises(InputError, match="image not found"):
        read_cxr(tmp_path / "missing.png")


def test_write_mask_roundtrip_and_png_determinism(tmp_path):
    m = np.zeros((1024, 1024), bool)
    m[10:20, 30:40] = True
    write_mask(tmp_path / "m.png", m)
    assert (read_mask(tmp_path / "m.png") == m).all()
    assert png_bytes(m.astype(np.uint8) * 255) == (tmp_path / "m.png").read_bytes()


def test_rng_for_is_stable_and_label_dependent():
    a = rng_for(0, "qa", "k1").integers(0, 1 << 30, 5)
    b = rng_for(0, "qa", "k1").integers(0, 1 << 30, 5)
    c = rng_for(0, "qa", "k2").integers(0, 1 << 30, 5)
    assert (a == b).all() and not (a == c).all()


def test_eval_run_dir_layout(tmp_path):
    d = eval_run_dir(tmp_path, "opensource", "Qwen/Qwen3.6-27B", "none", no_thinking=True)
    assert d == tmp_path / "opensource_Qwen--Qwen3.6-27B_no_thinking" / "oracle_none"


def test_run_folder_names_carry_the_protocol_and_parse_back(tmp_path):
    # issue 29: a second mode of one model needed its own --output-path; now its folder does
    from chexpercept.evaluation.api import run_folder, run_name_protocol
    from chexpercept.layouts import parse_run_name, split_run_protocol

    assert run_name_protocol("release", 1, 5) == ()  # a greedy release run: seed changes nothing
    assert run_name_protocol("shuffled", 3, 5) == (("order", "shuffled"), ("samples", "3"),
                                                   ("seed", "5"))
    assert run_name_protocol("circular", 1, 0) == (("order", "circular"),)
    names = {run_folder(tmp_path, "random", "baseline", "none", option_order=o, samples=k,
                        seed=s).parent.name
             for o in ("release", "shuffled", "circular") for k in (1, 2) for s in (0, 4)}
    assert "random_baseline" in names and "random_baseline+order=shuffled+samples=2+seed=4" in names
    # release: one name at K = 1 (the seed is unused), two at K = 2; four each for the others
    assert len(names) == 1 + 2 + 4 + 4
    for name in names:
        assert parse_run_name(name) == ("random", "baseline", False)
    d = eval_run_dir(tmp_path, "opensource", "org/m+v2", "none", no_thinking=True,
                     protocol=(("order", "shuffled"),))
    assert d.parent.name == "opensource_org--m+v2_no_thinking+order=shuffled"
    assert parse_run_name(d.parent.name) == ("opensource", "org--m+v2", True)
    assert split_run_protocol("openai_m+v2") == ("openai_m+v2", "")  # '+' in a model id stays
    with pytest.raises(SchemaError, match="in that order"):
        eval_run_dir(tmp_path, "p", "m", "none", protocol=(("seed", "1"), ("order", "shuffled")))
    with pytest.raises(SchemaError, match="letters, digits"):
        eval_run_dir(tmp_path, "p", "m", "none", protocol=(("order", "../x"),))


def test_csv_writer_rejects_unknown_columns(tmp_path):
    with pytest.raises(SchemaError, match="not in the columns"):
        write_csv_atomic(tmp_path / "x.csv", [{"a": 1, "b": 2}], ["a"])
    write_csv_atomic(tmp_path / "x.csv", [{"a": 1}], ["a", "optimal?"])
    assert (tmp_path / "x.csv").read_text() == "a,optimal?\n1,\n"


def test_secret_names_are_redacted_but_token_counts_are_not():
    settings = {"api_key": "sk-123", "hf_token": "hf_abc", "nested": [{"clientSecret": "x"}],
                "params": {"max_completion_tokens": 8192, "max_tokens": 64,
                           "reasoning_effort": "medium"},
                "output_tokens_per_call": 300, "key_id": "effusion_s1_positive_0",
                "api_keys": "api_info/api_keys.yaml", "empty_key": ""}
    out = redact_secrets(settings)
    assert out["api_key"] == out["hf_token"] == out["nested"][0]["clientSecret"] == "<redacted>"
    # a manifest must keep the sampling settings it records (max_completion_tokens was hidden)
    assert out["params"] == settings["params"]
    for kept in ("output_tokens_per_call", "key_id", "api_keys", "empty_key"):
        assert out[kept] == settings[kept]


def test_read_json_pauses_the_collector_and_restores_its_state(tmp_path, monkeypatch):
    import gc

    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"a": [1, 2]}')
    bad.write_text('{"a": ')
    seen = []
    real_loads = json.loads
    monkeypatch.setattr(json, "loads", lambda text: (seen.append(gc.isenabled()),
                                                     real_loads(text))[1])
    assert read_json(good) == {"a": [1, 2]} and seen == [False] and gc.isenabled()
    with pytest.raises(SchemaError, match="bad.json"):
        read_json(bad)
    assert gc.isenabled()
    gc.disable()
    try:
        read_json(good)
        assert not gc.isenabled()  # a caller's disabled collector stays disabled
    finally:
        gc.enable()
