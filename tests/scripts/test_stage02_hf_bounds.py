"""A parquet benchmark's rows and images are bounded before they are unpacked (issue 29, item 6).

docs/hf_dataset.md, "Size bounds": an image above ``max_image_bytes``, a row above
``max_row_bytes`` (checked as it is read, before anything of it is written) and a row group
whose metadata already says it holds more than ``max_row_bytes`` a row (refused before its
values are read) are one InputError naming the shard, the row and the key_id; the cache keeps
no partial copy. The bounds are made small here instead of feeding the test real gigabytes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from PIL import Image, PngImagePlugin

from chexpercept.errors import InputError
from chexpercept.parquet_bundle import (
    MAX_IMAGE_BYTES,
    MAX_ROW_BYTES,
    SizeBounds,
    parquet_files,
    unpack_parquet_bundle,
)
from chexpercept.qa.hf_export import export_hf_dataset

pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "stage03_bundle_hf_bounds", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
stage03_bundle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage03_bundle)
RF = "effusion_s50000002_positive_0"  # the second case, row 1 of the shard
PAD = 200_000  # bytes of a text chunk that make RF's CXR the one oversize image


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHEXPERCEPT_CACHE_DIR", str(tmp_path / "cache"))


def _dataset(tmp_path: Path) -> Path:
    """The Stage 03 test bundle as a parquet dataset, RF's CXR padded to over 200 kB."""
    bench = stage03_bundle.write_bundle(tmp_path / "bench")
    xray = bench / "chexpercept" / RF / "detection_qa" / "xray.png"
    info = PngImagePlugin.PngInfo()
    info.add_text("padding", "x" * PAD)  # tEXt, stored as is: same pixels, more bytes
    Image.open(xray).copy().save(xray, pnginfo=info)
    out = tmp_path / "ds"
    export_hf_dataset(bench, out)
    return out


def test_the_default_bounds_hold_a_real_bundle_and_are_documented(tmp_path):
    assert SizeBounds() == SizeBounds(MAX_IMAGE_BYTES, MAX_ROW_BYTES)
    assert MAX_IMAGE_BYTES == 64 * 2**20 and MAX_ROW_BYTES == 512 * 2**20
    docs = (ROOT / "docs" / "hf_dataset.md").read_text(encoding="utf-8")
    assert "## Size bounds" in docs and "64 MiB" in docs and "512 MiB" in docs
    unpacked = unpack_parquet_bundle(_dataset(tmp_path))  # the padded image fits the defaults
    assert (unpacked / "chexpercept" / RF / "detection_qa" / "xray.png").stat().st_size > PAD


def test_an_oversize_image_is_one_error_naming_shard_row_and_key_id(tmp_path):
    dataset = _dataset(tmp_path)
    with pytest.raises(InputError) as caught:
        unpack_parquet_bundle(dataset, SizeBounds(max_image_bytes=100_000))
    message = str(caught.value)
    assert message.startswith(f"{parquet_files(dataset)[0]}, row 1, key_id '{RF}': image "
                              f"'detection_qa/xray.png' is ")
    assert "more than the 100000 bytes an image may hold (docs/hf_dataset.md, 'Size bounds')" \
        in message
    assert not list((tmp_path / "cache").rglob("chexpercept.json"))
    assert not list((tmp_path / "cache").rglob("*.png"))  # no partial copy, no temp folder
    assert [p.name for p in (tmp_path / "cache" / "parquet_bundles").iterdir()] == \
        ["digests.json"]


def test_an_oversize_row_is_refused_as_it_is_read(tmp_path):
    dataset = _dataset(tmp_path)  # one row group of 7 rows: within 7 x 100 kB, RF's row is not
    with pytest.raises(InputError, match=rf"row 1, key_id '{RF}': the row holds \d+ bytes "
                                         rf"\(case_json and images\), more than the 100000 bytes "
                                         rf"a row may hold"):
        unpack_parquet_bundle(dataset, SizeBounds(max_row_bytes=100_000))
    assert not list((tmp_path / "cache").rglob("*.png"))


def test_a_row_group_above_the_bound_is_refused_from_the_metadata(tmp_path, monkeypatch):
    dataset = _dataset(tmp_path)
    shard = parquet_files(dataset)[0]
    pq.write_table(pq.read_table(shard), shard, row_group_size=1)  # one row a group
    asked = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        asked.append(kwargs.get("row_groups"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    with pytest.raises(InputError) as caught:
        unpack_parquet_bundle(dataset, SizeBounds(max_row_bytes=100_000))
    message = str(caught.value)
    assert message.startswith(f"{shard}, row 1, key_id '{RF}': row group 1 holds ")
    assert "more than the 100000 bytes a row may hold x 1 row(s)" in message
    assert "its values were not read" in message
    assert asked == [[0]]  # RF's row group was never read
    assert not list((tmp_path / "cache").rglob("*.png"))
