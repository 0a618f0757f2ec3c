"""The Hugging Face dataset form of a bundle: 03_export_hf_dataset.py, its card, and Stage 03 on it.

The identity check runs ``00_eval.py`` on the folder bundle and on its parquet export with a
provider whose answers depend on the decoded pixels of every image it is sent
(:class:`ImageHashModel`, loaded as a plugin from this module), so a lost, swapped or re-encoded
image would change the results.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import runpy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from PIL import Image

from chexpercept.curation.sources import MIMIC_LICENCE
from chexpercept.curation.sources.nih import LICENCE as NIH_LICENCE
from chexpercept.errors import InputError, SchemaError
from chexpercept.files import dumps_json
from chexpercept.layouts import all_results_path, run_manifest_path
from chexpercept.parquet_bundle import parquet_files, unpack_parquet_bundle
from chexpercept.qa.hf_export import export_hf_dataset, plan_shards
from utils.cli import run_main
from utils.imaging import load_image
from utils.llm.base import ChatModel, Completion, TurnRequest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parents[2]
EXPORT = ROOT / "src" / "02_qa_generation" / "03_export_hf_dataset.py"
VALIDATE = ROOT / "src" / "02_qa_generation" / "02_validate_bundle.py"
EVAL = ROOT / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"
_spec = importlib.util.spec_from_file_location(
    "stage03_bundle_hf", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
stage03_bundle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage03_bundle)
RR, RF, LF = ("effusion_s50000001_positive_0", "effusion_s50000002_positive_0",
              "effusion_s50000003_negative_0")


class ImageHashModel(ChatModel):
    """Answers with the option picked by a hash of the decoded pixels of every image sent."""

    provider = "imagehash"

    def __init__(self, model: str, **options: Any) -> None:
        super().__init__(model)

    def generate(self, requests: list[TurnRequest]) -> list[Completion]:
        out = []
        for request in requests:
            digest = hashlib.sha256()
            for message in request.messages:
                for path in message.images:
                    image = load_image(path)  # the one loader, as every provider
                    digest.update(image.mode.encode() + image.tobytes())
            choice = digest.digest()[0] % request.meta["num_options"] + 1
            out.append(Completion(text=f"Answer: {choice}", finish_reason="stop"))
        return out


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHEXPERCEPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _bench(root: Path, sources: dict[str, Any] | None = None) -> Path:
    """The Stage 03 test bundle with a distinct image per file, its JSON as our export writes it."""
    bench = stage03_bundle.write_bundle(root)
    data = stage03_bundle.load_items(bench)
    (bench / "chexpercept.json").write_text(dumps_json(data), encoding="utf-8")
    for i, path in enumerate(sorted((bench / "chexpercept").rglob("*.png"))):
        pixels = np.random.default_rng(i).integers(0, 256, (8, 8, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path)
    if sources is not None:
        (bench / "data_sources.json").write_text(json.dumps(sources), encoding="utf-8")
    return bench


def _sources(licence) -> dict[str, Any]:
    return {"category": licence.category, "mixed": False,
            "sources": {licence.source: {**licence.to_json(), "cases": 7}}}


def _export(bench: Path, out: Path, *extra: str) -> int:
    main = runpy.run_path(str(EXPORT), run_name="stage02_export_hf")["main"]
    return run_main(main, ["--benchmark-dir", str(bench), "--out", str(out), "--no-progress",
                           *extra])


def _card(out: Path) -> tuple[dict[str, Any], str]:
    text = (out / "README.md").read_text(encoding="utf-8")
    _, header, body = text.split("---\n", 2)
    return yaml.safe_load(header), body


def test_load_dataset_reads_the_export(tmp_path):
    datasets = pytest.importorskip("datasets")
    bench = _bench(tmp_path / "bench")
    out = tmp_path / "ds"
    assert _export(bench, out) == 0
    assert [p.relative_to(out).as_posix() for p in parquet_files(out)] == [
        "data/test-00000-of-00001.parquet"]
    ds = datasets.load_dataset("parquet", data_dir=str(out), cache_dir=str(tmp_path / "hf"))
    test = ds["test"]
    assert test["key_id"] == list(stage03_bundle.CASES)
    assert isinstance(test.features["detection_image"], datasets.Image)
    rows = {r["key_id"]: r for r in test}
    rr, rf, lf = rows[RR], rows[RF], rows[LF]
    assert (rr["lesion"], rr["qa_path"]) == ("effusion", "revision_required")
    assert rr["contour_revision_qa_expansion_options"] == ["red point", "orange point",
                                                           "yellow point", "None"]
    assert rr["contour_revision_qa_revision_result_options"][:2] == ["1st mask", "2nd mask"]
    assert rr["detection_qa_answer_index"] == [1] and rr["attribute_location_answer_index"] == [4]
    assert len(rr["option_images"]) == 4 and rr["points_image"] is not None
    # a revision-free case is not asked Stage 3; a lesion-free one only detection
    assert rf["contour_revision_qa_expansion_question"] is None and rf["points_image"] is None
    assert lf["contour_eval_image"] is None and lf["option_images"] == []
    assert lf["detection_qa_answer"] == "No"
    # the embedded image is the file, pixel for pixel
    original = Image.open(bench / "chexpercept" / RR / "detection_qa" / "xray.png")
    assert np.array_equal(np.asarray(rr["detection_image"]), np.asarray(original))
    assert json.loads(rr["case_json"]) == stage03_bundle.load_items(bench)[RR]


def test_export_is_deterministic_sharded_and_replaces_only_an_earlier_export(tmp_path):
    bench = _bench(tmp_path / "bench")
    out = tmp_path / "ds"
    assert _export(bench, out, "--max-shard-mb", "0.001") == 0  # ~1 KiB: several shards
    first = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    shards = parquet_files(out)
    assert len(shards) > 1 and shards[-1].name.endswith(f"-of-{len(shards):05d}.parquet")
    keys = [k for s in shards for k in pq.read_table(s, columns=["key_id"])["key_id"].to_pylist()]
    assert keys == list(stage03_bundle.CASES)
    assert _export(bench, out, "--max-shard-mb", "0.001") == 0
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == first
    assert _export(bench, out) == 0  # fewer shards now: none of the old ones is left
    assert len(parquet_files(out)) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ds")]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(InputError, match="holds no earlier export"):
        export_hf_dataset(bench, foreign)
    assert (foreign / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_plan_shards_bounds_bytes_and_keeps_order():
    assert plan_shards([5, 5, 5, 20, 1], 10) == [range(0, 2), range(2, 3), range(3, 4),
                                                 range(4, 5)]
    assert plan_shards([], 10) == []


def test_card_licence_and_public_hub_warning(tmp_path):
    nih = _bench(tmp_path / "nih", _sources(NIH_LICENCE))
    assert _export(nih, tmp_path / "nih_ds") == 0
    header, body = _card(tmp_path / "nih_ds")
    assert header["license"] == "other" and header["license_name"] == "nih-cxr14"
    assert header["license_link"] == NIH_LICENCE.url
    assert header["configs"] == [{"config_name": "default", "data_files": [
        {"split": "test", "path": "data/test-*.parquet"}]}]
    assert NIH_LICENCE.licence in body and NIH_LICENCE.citation in body
    assert "public hub" not in body
    assert "| effusion | 1 | 1 | 1 | 3 | 16 |" in body and "| all | 3 | 2 | 2 | 7 | 33 |" in body
    assert (tmp_path / "nih_ds" / "data_sources.json").is_file()

    mimic = _bench(tmp_path / "mimic", _sources(MIMIC_LICENCE))
    assert _export(mimic, tmp_path / "mimic_ds") == 0
    header, body = _card(tmp_path / "mimic_ds")
    assert header["license_name"] == "mimic-ils"
    assert "**This dataset holds restricted data" in body
    assert "It must not be pushed to a public hub**" in body

    unknown = _bench(tmp_path / "unknown")
    assert _export(unknown, tmp_path / "unknown_ds") == 0
    assert "**The licence of these data is not recorded" in _card(tmp_path / "unknown_ds")[1]


def _eval(bench: Path, out: Path, oracle: str) -> dict[str, Any]:
    main = runpy.run_path(str(EVAL), run_name="stage03_eval_hf")["main"]
    argv = ["--benchmark-dir", str(bench), "--output-path", str(out), "--no-progress",
            "--provider", f"{__name__}:ImageHashModel", "--model", "hash",
            "--oracle_setting", oracle]
    assert run_main(main, argv) == 0
    run_dir = next(out.glob(f"*/oracle_{oracle}"))
    return {"results": all_results_path(run_dir).read_text(encoding="utf-8"),
            "manifest": json.loads(run_manifest_path(run_dir).read_text(encoding="utf-8"))}


@pytest.mark.parametrize("oracle", ["none", "implicit"])
def test_eval_of_the_export_equals_the_folder_bundle(tmp_path, oracle):
    bench = _bench(tmp_path / "bench")
    out = tmp_path / "ds"
    assert _export(bench, out) == 0
    folder = _eval(bench, tmp_path / "run_folder", oracle)
    parquet = _eval(out, tmp_path / "run_parquet", oracle)
    unpacked = unpack_parquet_bundle(out)
    # all_results.json is byte-identical once the image folder's root is named the same;
    # chat histories record where the images were read from (the unpacked copy)
    assert str(unpacked) in parquet["results"]
    assert parquet["results"].replace(str(unpacked), str(bench)) == folder["results"]
    results = json.loads(folder["results"])
    assert {r["detection_qa"]["correct"] for r in results.values()} == {True, False}
    # same benchmark identity (the JSON is rebuilt byte for byte), the parquet folder recorded
    assert parquet["manifest"]["benchmark_json_sha256"] == folder["manifest"][
        "benchmark_json_sha256"]
    assert parquet["manifest"]["benchmark_dir"] == str(out)
    for rel in ("chexpercept.json", f"chexpercept/{RR}/contour_qa/contour_revision_qa/"
                                    "option_3.png"):
        assert (unpacked / rel).read_bytes() == (bench / rel).read_bytes()


def test_eval_of_a_rewritten_dataset_as_push_to_hub_writes_it(tmp_path):
    """``datasets`` re-encodes the shards on push_to_hub; the result still evaluates the same."""
    datasets = pytest.importorskip("datasets")
    bench = _bench(tmp_path / "bench")
    assert _export(bench, tmp_path / "ds") == 0
    test = datasets.load_dataset("parquet", data_dir=str(tmp_path / "ds"),
                                 cache_dir=str(tmp_path / "hf"))["test"]
    hub = tmp_path / "hub"
    test.to_parquet(str(hub / "data" / "test-00000-of-00001.parquet"))
    folder = _eval(bench, tmp_path / "run_folder", "implicit")
    parquet = _eval(hub, tmp_path / "run_hub", "implicit")
    unpacked = unpack_parquet_bundle(hub)
    assert parquet["results"].replace(str(unpacked), str(bench)) == folder["results"]


def test_validate_script_checks_the_parquet_form(tmp_path, capsys):
    bench = _bench(tmp_path / "bench")
    assert _export(bench, tmp_path / "ds") == 0
    main = runpy.run_path(str(VALIDATE), run_name="stage02_validate_hf")["main"]
    assert run_main(main, ["--benchmark-dir", str(tmp_path / "ds"), "--no-progress"]) == 0
    assert "all            all                    7" in capsys.readouterr().out


def _rewrite(src: Path, dst: Path, change) -> Path:
    table = pq.read_table(src)
    dst.mkdir(parents=True, exist_ok=True)
    pq.write_table(change(table), dst / src.name)
    return dst


def _set_column(table, name: str, values: list[Any]):
    index = table.schema.get_field_index(name)
    return table.set_column(index, table.schema.field(name),
                            pa.array(values, type=table.schema.field(name).type))


def test_unpack_refuses_broken_datasets_naming_shard_and_key_id(tmp_path):
    bench = _bench(tmp_path / "bench")
    assert _export(bench, tmp_path / "ds") == 0
    shard = parquet_files(tmp_path / "ds")[0]
    rows = pq.read_table(shard).to_pylist()

    no_json = _rewrite(shard, tmp_path / "no_json", lambda t: t.drop_columns(["case_json"]))
    with pytest.raises(InputError, match=r"test-00000-of-00001\.parquet: missing column\(s\) "
                                         r"\['case_json'\]"):
        unpack_parquet_bundle(no_json)

    escaping = [{**r["detection_image"], "path": "../../x.png"} if i == 1 else r["detection_image"]
                for i, r in enumerate(rows)]
    bad_path = _rewrite(shard, tmp_path / "bad_path",
                        lambda t: _set_column(t, "detection_image", escaping))
    with pytest.raises(InputError, match=f"key_id '{RF}': image path '../../x.png'"):
        unpack_parquet_bundle(bad_path)

    no_bytes = [{**r["detection_image"], "bytes": None} if i == 2 else r["detection_image"]
                for i, r in enumerate(rows)]
    unembedded = _rewrite(shard, tmp_path / "unembedded",
                          lambda t: _set_column(t, "detection_image", no_bytes))
    with pytest.raises(InputError, match=f"key_id '{LF}': image 'detection_qa/xray.png' has no "
                                         f"embedded bytes"):
        unpack_parquet_bundle(unembedded)

    twice = _rewrite(shard, tmp_path / "twice",
                     lambda t: _set_column(t, "key_id", [RR] * len(rows)))
    with pytest.raises(SchemaError, match=f"key_id '{RR}': the key_id appears twice"):
        unpack_parquet_bundle(twice)
    # case JSON nested 200,000 deep: a SchemaError naming the row, not a RecursionError
    deep = _rewrite(shard, tmp_path / "deep",
                    lambda t: _set_column(t, "case_json", ["[" * 200_000] * len(rows)))
    with pytest.raises(SchemaError, match=r"key_id '[^']+', column case_json: not usable JSON: "
                                          r"arrays or objects nested"):
        unpack_parquet_bundle(deep)
    # a shard with the columns but no row: named, not an empty bundle in the cache
    no_rows = _rewrite(shard, tmp_path / "no_rows", lambda t: t.slice(0, 0))
    with pytest.raises(InputError, match=r"no_rows: the parquet shards hold no case \(0 rows\)"):
        unpack_parquet_bundle(no_rows)
    # nothing half-written is left in the cache
    assert not list((tmp_path / "cache").rglob("chexpercept.json"))


def test_unpacked_copy_is_reused_and_follows_the_shards(tmp_path):
    bench = _bench(tmp_path / "bench")
    out = tmp_path / "ds"
    assert _export(bench, out) == 0
    first = unpack_parquet_bundle(out)
    stamp = (first / "chexpercept.json").stat().st_mtime_ns
    assert unpack_parquet_bundle(out) == first
    assert (first / "chexpercept.json").stat().st_mtime_ns == stamp
    shard = parquet_files(out)[0]
    pq.write_table(pq.read_table(shard).slice(0, 3), shard)  # a changed dataset
    second = unpack_parquet_bundle(out)
    assert second != first
    assert list(json.loads((second / "chexpercept.json").read_text(encoding="utf-8"))) == list(
        stage03_bundle.CASES)[:3]
    (out / "data_sources.json").write_text(json.dumps(_sources(MIMIC_LICENCE)), encoding="utf-8")
    third = unpack_parquet_bundle(out)  # a changed sidecar is a changed dataset too
    assert third not in (first, second)
    assert json.loads((third / "data_sources.json").read_text(encoding="utf-8"))[
        "category"] == "restricted"


def test_a_new_process_reuses_the_digest_without_reading_the_shards(tmp_path, monkeypatch):
    # before: every process (each run, part, Stage 04) read every shard again to find its copy
    from chexpercept import parquet_bundle

    bench = _bench(tmp_path / "bench")
    out = tmp_path / "ds"
    assert _export(bench, out) == 0
    first = parquet_bundle.dataset_digest(out)
    monkeypatch.setattr(parquet_bundle, "_DIGESTS", {})  # as in a new process

    def no_read(*args, **kwargs):
        raise AssertionError(f"shard read again: {args[0]}")

    monkeypatch.setattr(parquet_bundle, "open", no_read, raising=False)
    assert parquet_bundle.dataset_digest(out) == first
    monkeypatch.undo()
    monkeypatch.setenv("CHEXPERCEPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(parquet_bundle, "_DIGESTS", {})
    shard = parquet_files(out)[0]
    pq.write_table(pq.read_table(shard).slice(0, 3), shard)  # a changed shard: hashed again
    assert parquet_bundle.dataset_digest(out) != first


def test_export_refuses_a_parquet_input_and_a_missing_bundle(tmp_path, capsys):
    bench = _bench(tmp_path / "bench")
    assert _export(bench, tmp_path / "ds") == 0
    assert _export(tmp_path / "ds", tmp_path / "again") == 2
    assert "already a parquet dataset" in capsys.readouterr().err
    assert _export(tmp_path / "nowhere", tmp_path / "again") == 2
    err = capsys.readouterr().err
    assert "chexpercept.json" in err and "Traceback" not in err


def test_stage04_reads_the_parquet_form_as_the_folder(tmp_path):
    from chexpercept.analysis.api import analyze

    bench = _bench(tmp_path / "bench")
    assert _export(bench, tmp_path / "ds") == 0
    _eval(bench, tmp_path / "runs", "implicit")
    tables = {}
    for name, benchmark in (("folder", bench), ("parquet", tmp_path / "ds")):
        out = tmp_path / f"s04_{name}"
        analyze(tmp_path / "runs", "implicit", output_dir=out, benchmark_dir=benchmark,
                bootstrap=0, viewer=False, jobs=1)
        tables[name] = {p.relative_to(out): p.read_bytes() for p in out.rglob("*.csv")}
    assert tables["parquet"] == tables["folder"]
    chance = [v for k, v in tables["folder"].items() if b"chance" in v]
    assert chance and b"NA" not in chance[0].split(b"\n", 2)[1]


@pytest.mark.parametrize(("column", "change"), [
    ("detection_qa_answer_index", lambda v: [2] if v == [1] else [1]),
    ("detection_qa_question", lambda v: v + " (edited on the hub)"),
    ("contour_eval_qa_options", lambda v: list(reversed(v)) if v else ["Yes", "No"]),
    ("qa_path", lambda v: "revision_free" if v != "revision_free" else "lesion_free"),
])
def test_a_view_column_that_disagrees_with_case_json_is_refused_by_name(tmp_path, column, change):
    # issue 29: the reader read case_json and ignored the columns a hub visitor sees, so a
    # dataset whose columns said one answer and case_json another was read silently
    bench = _bench(tmp_path / "bench")
    assert _export(bench, tmp_path / "ds") == 0
    shard = parquet_files(tmp_path / "ds")[0]
    rows = pq.read_table(shard).to_pylist()
    target = next(i for i, r in enumerate(rows) if r[column] is not None)
    values = [change(r[column]) if i == target else r[column] for i, r in enumerate(rows)]
    edited = _rewrite(shard, tmp_path / "edited", lambda t: _set_column(t, column, values))
    with pytest.raises(SchemaError, match=rf"key_id '{rows[target]['key_id']}': column\(s\) "
                                          rf"disagree with case_json[\s\S]*{column} \(column: "):
        unpack_parquet_bundle(edited)
    assert not list((tmp_path / "cache").rglob("chexpercept.json"))
    untouched = _rewrite(shard, tmp_path / "untouched", lambda t: t)
    assert (unpack_parquet_bundle(untouched) / "chexpercept.json").is_file()
