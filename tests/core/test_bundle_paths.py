"""Every path a bundle names stays inside the bundle (docs/benchmark_format.md, "Paths a bundle
names"; issue 29 item 2).

Each attack names a marker file outside the bundle: a ``relative_path`` that is absolute, one
that climbs (``../``), a symbolic link inside the image folder pointing out, a key_id holding
``/..``. Each is refused, naming the key_id and the field, with one ``error:`` line and exit 2,
by the validator (``02_validate_bundle.py`` and ``00_eval.py --validate-only``), by Stage 03
(``00_eval.py`` with the ``dummy`` provider, and with the ``openai`` provider against a loopback
server: no request is sent), by Stage 04 (``--viewer-copy-images``, and the linked viewer) and
by the parquet reader; the marker's bytes and their base64 are in no request and no output
file. The control: the same marker placed inside the bundle is sent (so the scan would see it),
and the untouched bundle validates.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from chexpercept.errors import InputError, SchemaError
from chexpercept.layouts import (
    KEY_ID_PATTERN,
    BenchmarkLayout,
    key_id_problem,
    relative_path_problem,
)
from utils.cli import run_main

ROOT = Path(__file__).resolve().parents[2]
VALIDATE = ROOT / "src" / "02_qa_generation" / "02_validate_bundle.py"
EVAL = ROOT / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"
ANALYZE = ROOT / "src" / "04_analyze_eval_result" / "01_analyze_model_performance.py"
EXPORT_HF = ROOT / "src" / "02_qa_generation" / "03_export_hf_dataset.py"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


stage03_bundle = _load("stage03_bundle_for_paths", ROOT / "tests" / "evaluation" /
                       "stage03_bundle.py")
loopback = _load("loopback_for_paths", ROOT / "tests" / "llm" / "loopback.py")
RR, RF, LF = ("effusion_s50000001_positive_0", "effusion_s50000002_positive_0",
              "effusion_s50000003_negative_0")
#: The key_id attack: the lesion-free case's key, climbing from chexpercept/ to tmp/outside/.
CLIMBING_KEY = f"{LF}/../../../outside"
ATTACKS = ("absolute", "climb", "symlink", "key_id")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("CHEXPERCEPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def _marker(path: Path) -> bytes:
    """An 8x8 RGB PNG of random pixels (the bundle's own images are flat grey) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(29).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path.read_bytes()


def _secrets(data: bytes) -> list[bytes]:
    """What an outside file's bytes look like in a request or an output: raw, or base64."""
    return [data, base64.b64encode(data)]


def _bundle(tmp: Path) -> tuple[Path, bytes]:
    """The Stage 03 test bundle at ``tmp/bench`` and the marker outside it (``tmp/outside``)."""
    bench = stage03_bundle.write_bundle(tmp / "bench")
    marker = _marker(tmp / "outside" / "secret.png")
    assert _marker(tmp / "outside" / "detection_qa" / "xray.png") == marker
    return bench, marker


def attack(bench: Path, name: str) -> tuple[str, ...]:
    """Make ``bench`` name the marker outside it; return what the refusal must name."""
    data = stage03_bundle.load_items(bench)
    outside = bench.parent / "outside" / "secret.png"
    if name == "absolute":
        data[RF]["contour_qa"]["contour_eval_qa"]["relative_path"] = str(outside)
        expect: tuple[str, ...] = (RF, "contour_eval_qa.relative_path", "absolute")
    elif name == "climb":  # from contour_qa/contour_revision_qa/ up to tmp/
        options = data[RR]["contour_qa"]["contour_revision_qa_revision_result"]["answer_options"]
        options[1]["relative_path"] = "../../../../../outside/secret.png"
        expect = (RR, "relative_path", "'..'")
    elif name == "symlink":
        image = bench / "chexpercept" / LF / "detection_qa" / "xray.png"
        image.unlink()
        image.symlink_to(outside)
        expect = (LF, "detection_qa", "resolves to", str(outside.resolve()))
    else:  # the pair_id follows the key_id, as the validator checks
        data = {CLIMBING_KEY if k == LF else k: v for k, v in data.items()}
        data[CLIMBING_KEY]["pair_id"] = CLIMBING_KEY.split("_", 1)[1]
        expect = (f"key_id {CLIMBING_KEY!r}", "not a safe folder name")
    (bench / "chexpercept.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    return expect


def _error(capsys) -> str:
    """stderr of a refused run from its one ``error:`` line on (the problems it lists follow;
    logged warnings come before it)."""
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1, err
    assert "Traceback" not in err
    return err[err.index("error:"):]


def _no_secret_under(folder: Path, marker: bytes) -> None:
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            content = path.read_bytes()
            assert not any(s in content for s in _secrets(marker)), path


# -- the rule itself ------------------------------------------------------------------------


@pytest.mark.parametrize("key_id", [
    "cardiomegaly_s50000001_positive_0",  # MIMIC-ILS (docs/benchmark_format.md, "Files")
    "effusion_s50000003_negative_2",
    "atelectasis_00000013_005_positive",  # NIH ChestX-ray14 image index
    "pneumonia_0004cfab-14fd-4e49-80ba-63a80b6bddd6_positive",  # RSNA patient id
    "opacity_9a5094b2563a1ef3ff50dc5c7ff71345_negative",  # VinDr image id
])
def test_released_and_public_key_ids_are_safe_names(key_id):
    assert key_id_problem(key_id) is None
    assert KEY_ID_PATTERN.fullmatch(key_id)


@pytest.mark.parametrize("key_id", [
    f"{LF}/..", f"{LF}/x", "..", ".", "/etc", f"{LF}\\..", f"{LF}\0", f"{LF}\n", "",
    "-rf", ".hidden", "a" * 201, 7,
])
def test_unsafe_key_ids_are_refused(key_id):
    assert key_id_problem(key_id) is not None
    with pytest.raises(SchemaError, match="not a safe folder name|not a string"):
        BenchmarkLayout(Path("bench")).case_dir(key_id)


@pytest.mark.parametrize("relative", [
    "/etc/passwd", "../x.png", "a/../../x.png", "a//b.png", "./a.png", "a\\..\\b.png",
    "C:/x.png", "a\0.png", "",
])
def test_paths_outside_the_case_folder_are_refused(relative):
    assert relative_path_problem(relative) is not None
    with pytest.raises(SchemaError, match=f"{RR}: contour_qa"):
        BenchmarkLayout(Path("bench")).contour_eval_image(RR, relative)


def test_a_link_inside_the_bundle_and_a_linked_image_folder_are_fine(tmp_path):
    bench, _ = _bundle(tmp_path)
    layout = BenchmarkLayout(bench)
    other = layout.detection_image(RF)
    mine = layout.detection_image(LF)
    mine.unlink()
    mine.symlink_to(other)  # a case may share another case's file
    assert layout.detection_image(LF) == mine
    moved = tmp_path / "big_disk" / "chexpercept"  # the image folder on another disk
    moved.parent.mkdir()
    layout.images_dir.rename(moved)
    layout.images_dir.symlink_to(moved)
    assert layout.detection_image(RF).resolve() == moved / RF / "detection_qa" / "xray.png"


# -- the validator --------------------------------------------------------------------------


def test_the_sample_bundle_still_validates(tmp_path, capsys):
    bench, _ = _bundle(tmp_path)
    main = runpy.run_path(str(VALIDATE), run_name="validate_paths")["main"]
    assert run_main(main, ["--benchmark-dir", str(bench), "--no-progress"]) == 0
    assert "all            all                    7" in capsys.readouterr().out


@pytest.mark.parametrize("name", ATTACKS)
def test_the_validator_refuses(tmp_path, capsys, name):
    bench, _ = _bundle(tmp_path)
    expect = attack(bench, name)
    main = runpy.run_path(str(VALIDATE), run_name="validate_paths")["main"]
    assert run_main(main, ["--benchmark-dir", str(bench), "--no-progress"]) == 2
    err = _error(capsys)
    assert all(e in err for e in expect), err
    eval_main = runpy.run_path(str(EVAL), run_name="eval_paths")["main"]
    assert run_main(eval_main, ["--benchmark-dir", str(bench), "--validate-only",
                                "--provider", "dummy", "--no-progress"]) == 2
    err = _error(capsys)
    assert all(e in err for e in expect), err


# -- Stage 03 --------------------------------------------------------------------------------


def _stage03(bench: Path, out: Path, provider: str, server: Any = None) -> int:
    main = runpy.run_path(str(EVAL), run_name="eval_paths")["main"]
    argv = ["--benchmark-dir", str(bench), "--output-path", str(out), "--provider", provider,
            "--oracle_setting", "none", "--no-progress"]
    if server is not None:
        argv += ["--model", "loopback-vlm", "--base-url", server.base_url, "--max-retries", "0"]
    return run_main(main, argv)


def test_control_a_marker_inside_the_bundle_is_sent(tmp_path):
    """The scan sees what a provider sends: the marker as a case's own image is in a request."""
    bench, marker = _bundle(tmp_path)
    (bench / "chexpercept" / LF / "detection_qa" / "xray.png").write_bytes(marker)
    with loopback.LoopbackServer(models=["loopback-vlm"]) as server:
        assert _stage03(bench, tmp_path / "out", "openai", server) == 0
        raws = [seen.raw for seen in server.chat_requests()]
    assert any(base64.b64encode(marker) in raw for raw in raws)


@pytest.mark.parametrize("name", ATTACKS)
@pytest.mark.parametrize("provider", ["dummy", "openai"])
def test_stage03_refuses_and_sends_nothing(tmp_path, capsys, name, provider):
    bench, marker = _bundle(tmp_path)
    expect = attack(bench, name)
    out = tmp_path / "out"
    with loopback.LoopbackServer(models=["loopback-vlm"]) as server:
        code = _stage03(bench, out, provider, server if provider == "openai" else None)
        raws = [seen.raw for seen in server.chat_requests()]
    assert code == 2
    err = _error(capsys)
    assert all(e in err for e in expect), err
    assert raws == []  # refused before the first request
    _no_secret_under(out, marker)


# -- Stage 04 --------------------------------------------------------------------------------


def _run_naming_the_marker(tmp: Path, name: str) -> tuple[Path, tuple[str, ...]]:
    """A dummy run of the untouched bundle, then its chat_history (or the bundle) attacked as a
    run of an unchecked bundle would hold it; returns the results folder and what to name."""
    bench, _ = _bundle(tmp)
    results = tmp / "results"
    assert _stage03(bench, results, "dummy") == 0
    (path,) = results.rglob("all_results.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    outside = tmp / "outside" / "secret.png"
    case = f"{bench}/chexpercept"
    if name == "absolute":
        entry = data[RF]["chat_history"][data[RF]["_chat_history_idx"]["contour_evaluation_qa"]]
        entry[1] = [str(outside)]
        expect: tuple[str, ...] = (RF, str(outside))
    elif name == "climb":
        index = data[RR]["_chat_history_idx"]["contour_revision_qa_revision_result"]
        entry = data[RR]["chat_history"][index]
        entry[1][1] = (f"{case}/{RR}/contour_qa/contour_revision_qa/"
                       f"../../../../../outside/secret.png")
        expect = (RR, "'..'")
    elif name == "symlink":
        image = bench / "chexpercept" / LF / "detection_qa" / "xray.png"
        image.unlink()
        image.symlink_to(outside)
        expect = (LF, "resolves to", str(outside.resolve()))
    else:
        entry = data.pop(LF)
        entry["key_id"] = CLIMBING_KEY
        entry["chat_history"][0][1] = [f"{case}/{CLIMBING_KEY}/detection_qa/xray.png"]
        data[CLIMBING_KEY] = entry
        expect = (f"key_id {CLIMBING_KEY!r}", "not a safe folder name")
    path.write_text(json.dumps(data), encoding="utf-8")
    return results, expect


def _flat_or_marker(path: Path) -> bool:
    """Whether a viewer copy shows the marker (random pixels) rather than a flat bundle image."""
    with Image.open(path) as im:
        return float(np.asarray(im.convert("L"), dtype=np.float32).std()) > 20


@pytest.mark.parametrize("name", ATTACKS)
def test_stage04_viewer_copy_refuses(tmp_path, capsys, name):
    results, expect = _run_naming_the_marker(tmp_path, name)
    out = tmp_path / "stage04"
    main = runpy.run_path(str(ANALYZE), run_name="analyze_paths")["main"]
    assert run_main(main, ["--results-dir", str(results), "--oracle_setting", "none",
                           "--output-dir", str(out), "--benchmark-dir", str(tmp_path / "bench"),
                           "--viewer-copy-images", "64", "--bootstrap", "0", "--jobs", "1",
                           "--no-progress"]) == 2
    err = _error(capsys)
    assert all(e in err for e in expect), err
    marker = (tmp_path / "outside" / "secret.png").read_bytes()
    _no_secret_under(out, marker)
    copies = list(out.rglob("viewer/images/*.jpg"))
    assert not any(_flat_or_marker(p) for p in copies)


def test_stage04_linked_viewer_refuses_too(tmp_path, capsys):
    """Without copies the viewer would link the outside file from the folder made to share."""
    results, expect = _run_naming_the_marker(tmp_path, "absolute")
    out = tmp_path / "stage04"
    main = runpy.run_path(str(ANALYZE), run_name="analyze_paths")["main"]
    assert run_main(main, ["--results-dir", str(results), "--oracle_setting", "none",
                           "--output-dir", str(out), "--bootstrap", "0", "--jobs", "1",
                           "--no-progress"]) == 2
    err = _error(capsys)
    assert all(e in err for e in expect), err
    assert not any("secret.png" in p.read_text(encoding="utf-8", errors="replace")
                   for p in out.rglob("*.js"))


def test_stage04_error_classes_refuse_a_link_out_of_the_bundle(tmp_path, capsys):
    """The revised-mask error class reads option images: a link out is refused, not read."""
    bench, marker = _bundle(tmp_path)
    results = tmp_path / "results"
    assert _stage03(bench, results, "dummy") == 0
    option = bench / "chexpercept" / RR / "contour_qa" / "contour_revision_qa" / "option_3.png"
    option.unlink()
    option.symlink_to(tmp_path / "outside" / "secret.png")
    main = runpy.run_path(str(ANALYZE), run_name="analyze_paths")["main"]
    assert run_main(main, ["--results-dir", str(results), "--oracle_setting", "none",
                           "--output-dir", str(tmp_path / "stage04"), "--no-viewer",
                           "--benchmark-dir", str(bench), "--bootstrap", "0", "--jobs", "1",
                           "--no-progress"]) == 2
    err = _error(capsys)
    assert RR in err and "answer_options[2].relative_path" in err and "resolves to" in err


# -- the parquet reader ------------------------------------------------------------------------


def _parquet(tmp: Path) -> tuple[Path, Any, list[dict[str, Any]]]:
    pq = pytest.importorskip("pyarrow.parquet")
    pytest.importorskip("datasets")
    from chexpercept.parquet_bundle import parquet_files

    bench, _ = _bundle(tmp)
    main = runpy.run_path(str(EXPORT_HF), run_name="export_hf_paths")["main"]
    assert run_main(main, ["--benchmark-dir", str(bench), "--out", str(tmp / "ds"),
                           "--no-progress"]) == 0
    (shard,) = parquet_files(tmp / "ds")
    return shard, pq, pq.read_table(shard).to_pylist()


def _rewritten(shard: Path, pq: Any, rows: list[dict[str, Any]], dest: Path) -> Path:
    import pyarrow as pa

    dest.mkdir(parents=True)
    table = pq.read_table(shard)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), dest / shard.name)
    return dest


# A symbolic link cannot be carried by a parquet dataset: the images are embedded bytes, which
# the reader writes as plain files (the image-path column's climb: test_stage02_hf_export.py).
@pytest.mark.parametrize("name", ["absolute", "climb", "key_id"])
def test_the_parquet_reader_refuses(tmp_path, capsys, name):
    from chexpercept.parquet_bundle import unpack_parquet_bundle

    shard, pq, rows = _parquet(tmp_path)
    outside = str(tmp_path / "outside" / "secret.png")
    by_key = {r["key_id"]: r for r in rows}
    if name == "absolute":
        case = json.loads(by_key[RF]["case_json"])
        case["contour_qa"]["contour_eval_qa"]["relative_path"] = outside
        by_key[RF]["case_json"] = json.dumps(case)
        error, expect = SchemaError, (RF, "case_json.contour_qa.contour_eval_qa.relative_path",
                                      "absolute")
    elif name == "climb":
        case = json.loads(by_key[RR]["case_json"])
        options = case["contour_qa"]["contour_revision_qa_revision_result"]["answer_options"]
        options[1]["relative_path"] = "../../../../../outside/secret.png"
        by_key[RR]["case_json"] = json.dumps(case)
        error, expect = SchemaError, (RR, "answer_options[1].relative_path", "'..'")
    else:
        by_key[LF]["key_id"] = CLIMBING_KEY
        error, expect = InputError, (CLIMBING_KEY, "column key_id", "not a safe folder name")
    dataset = _rewritten(shard, pq, rows, tmp_path / "attacked")
    with pytest.raises(error) as refused:
        unpack_parquet_bundle(dataset)
    assert shard.name in str(refused.value) and all(e in str(refused.value) for e in expect)
    main = runpy.run_path(str(VALIDATE), run_name="validate_paths")["main"]
    assert run_main(main, ["--benchmark-dir", str(dataset), "--no-progress"]) == 2
    err = _error(capsys)
    assert all(e in err for e in expect), err
    assert not list((tmp_path / "cache").rglob("chexpercept.json"))  # nothing unpacked
    assert os.path.exists(outside)
