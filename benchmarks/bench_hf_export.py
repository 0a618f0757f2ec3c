"""Benchmark of the Hugging Face dataset form (docs/hf_dataset.md) on a synthetic bundle.

Writes, in a temporary folder, a bundle of ``--cases`` cases (the Stage 03 test bundle's seven
cases repeated, every image one of 16 1024 x 1024 RGB PNGs of a smooth gradient plus noise, about
1 MiB each), then times ``export_hf_dataset`` (the parquet shards and the card), the
first ``unpack_parquet_bundle`` (what Stage 03 does once per dataset), a second one in the same
process (memoised digest) and one as a new process finds it (the digest of every shard, then the
cached copy), and ``load_bundle`` + ``validate_bundle`` of the unpacked copy, and
prints sizes. No assertion on timings. ``--tiny``: a smoke run of seconds (the seven cases
once, two distinct images; making the 16 images alone takes about 8 s on 2 cores).

Usage::

    python benchmarks/bench_hf_export.py [--cases 70] [--max-shard-mb 256] [--keep DIR]
    python benchmarks/bench_hf_export.py --tiny
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from chexpercept import parquet_bundle
from chexpercept.evaluation.cases import load_bundle, validate_bundle
from chexpercept.files import dumps_json
from chexpercept.parquet_bundle import parquet_files, unpack_parquet_bundle
from chexpercept.qa.hf_export import export_hf_dataset

ROOT = Path(__file__).resolve().parents[1]


def _fixture():
    spec = importlib.util.spec_from_file_location(
        "stage03_bundle", ROOT / "tests" / "evaluation" / "stage03_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _image(seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:1024, 0:1024]
    base = (np.sin(x / 97 + seed) + np.cos(y / 131)) * 50 + 128
    noise = rng.normal(0, 6, (1024, 1024))
    gray = np.clip(base + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(np.stack([gray] * 3, axis=-1))


def build(root: Path, cases: int, distinct: int = 16) -> Path:
    """A bundle of ``cases`` cases (the test bundle's seven, renamed) with 1024 px images.

    Every image is one of ``distinct`` different PNGs.
    """
    fixture = _fixture()
    names = list(fixture.CASES)
    chosen = {}
    for i in range(cases):
        key = names[i % len(names)]
        lesion, rest = key.split("_", 1)
        study, kind, k = rest.split("_")
        chosen[f"{lesion}_s{60000000 + i}_{kind}_{k}"] = fixture.CASES[key]
    bench = fixture.write_bundle(root, cases=chosen)
    (bench / "chexpercept.json").write_text(
        dumps_json(json.loads((bench / "chexpercept.json").read_text(encoding="utf-8"))),
        encoding="utf-8")
    encoded = {}
    for i, path in enumerate(sorted((bench / "chexpercept").rglob("*.png"))):
        seed = i % distinct  # each distinct image encoded once
        if seed not in encoded:
            buf = io.BytesIO()
            _image(seed).save(buf, format="PNG")
            encoded[seed] = buf.getvalue()
        path.write_bytes(encoded[seed])
    return bench


def _size_mb(paths) -> float:
    return sum(p.stat().st_size for p in paths) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=70, help="cases (default: %(default)s)")
    parser.add_argument("--max-shard-mb", type=float, default=256,
                        help="shard bound in MiB (default: %(default)s)")
    parser.add_argument("--keep", type=Path, default=None, help="work here and keep it")
    parser.add_argument("--tiny", action="store_true",
                        help="a smoke run of seconds: 7 cases, 2 distinct images; overrides "
                             "--cases (default: off)")
    args = parser.parse_args(argv)
    distinct = 16
    if args.tiny:
        args.cases, distinct = 7, 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_hf_export_"))
    os.environ["CHEXPERCEPT_CACHE_DIR"] = str(work / "cache")
    t0 = time.perf_counter()
    bench = build(work / "bench", args.cases, distinct)
    print(f"bundle: {args.cases} cases, {_size_mb(bench.rglob('*.png')):.1f} MiB of PNGs "
          f"(built in {time.perf_counter() - t0:.1f} s)")
    t0 = time.perf_counter()
    report = export_hf_dataset(bench, work / "ds", max_shard_mb=args.max_shard_mb)
    print(f"export:         {time.perf_counter() - t0:6.2f} s  ({report.line()})")
    print(f"  parquet: {_size_mb(parquet_files(work / 'ds')):.1f} MiB in "
          f"{len(report.shards)} shard(s)")
    t0 = time.perf_counter()
    unpacked = unpack_parquet_bundle(work / "ds")
    print(f"unpack (first): {time.perf_counter() - t0:6.2f} s")
    t0 = time.perf_counter()
    unpack_parquet_bundle(work / "ds")
    print(f"unpack (again): {time.perf_counter() - t0:6.2f} s  (same process: memoised digest)")
    parquet_bundle._DIGESTS.clear()  # as a new process finds it: the digest, then the copy
    t0 = time.perf_counter()
    unpack_parquet_bundle(work / "ds")
    print(f"unpack (cached copy, new process): {time.perf_counter() - t0:6.2f} s")
    t0 = time.perf_counter()
    bundle = load_bundle(unpacked)
    validate_bundle(bundle)
    print(f"load+validate:  {time.perf_counter() - t0:6.2f} s  (the folder path, for scale)")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
