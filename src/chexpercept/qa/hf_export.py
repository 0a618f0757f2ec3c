"""Stage 02.03: write a benchmark bundle as a Hugging Face dataset (parquet shards + dataset card).

Reads a folder bundle (``chexpercept.json``, ``chexpercept/<key_id>/`` and, when present,
``data_sources.json`` and ``sampling_summary.json``); writes ``<out>/data/test-*.parquet`` (one
row per case, every image embedded), ``<out>/README.md`` (the dataset card: licences and data
sources from ``data_sources.json``, counts per lesion and path) and the two JSON sidecars
unchanged. Layout, columns and card: docs/hf_dataset.md. Stage 03 reads the result back with
:func:`chexpercept.parquet_bundle.unpack_parquet_bundle`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chexpercept.bundle import ALL, check_bundle, stats_rows
from chexpercept.errors import InputError
from chexpercept.files import read_json, write_text_atomic
from chexpercept.layouts import BenchmarkLayout, default_benchmark_dir
from chexpercept.lesions import LESIONS, QA_PATHS
from chexpercept.parquet_bundle import (
    CASE_JSON,
    DATA_DIR,
    IMAGE_COLUMNS,
    OPTION_IMAGES,
    PARQUET_FORMAT,
    SIDECAR_FILES,
    SPLIT,
    is_parquet_bundle,
    shard_name,
)
from chexpercept.parquet_columns import CASE_COLUMNS, QUESTION_NAMES, view_columns
from chexpercept.qa.render import case_image_relpaths
from chexpercept.schema import BenchmarkItem, parse_benchmark
from utils.deps import require

logger = logging.getLogger(__name__)

#: Default upper bound of a shard's embedded image bytes, in MiB (one case may exceed it alone).
DEFAULT_MAX_SHARD_MB = 256
#: Cases per parquet row group (a reader holds one row group of images at a time).
ROW_GROUP_CASES = 16
#: The dataset card's file name.
CARD_NAME = "README.md"
#: What the card says when a category's data may not go to a public hub (docs/curation.md,
#: "Licences"); the licence category is read from the bundle's ``data_sources.json``.
NOT_PUBLIC = {
    "restricted": "**This dataset holds restricted data (credentialed access, no "
                  "redistribution). It must not be pushed to a public hub**, nor shared outside "
                  "the data's terms; keep it private to those who hold access.",
    "research-share": "**This dataset may be shared only for non-commercial research under its "
                      "sources' terms. Do not push it to a public hub unless those terms allow "
                      "it.**",
    None: "**The licence of these data is not recorded (the bundle has no data_sources.json). "
          "Treat it as restricted: it must not be pushed to a public hub.**",
}


@dataclass
class HfExportReport:
    """What :func:`export_hf_dataset` wrote.

    Attributes:
        out: The dataset folder.
        cases: Rows written (one per case).
        shards: Parquet shard files, in order.
        images: Images embedded.
        image_bytes: Their total size in bytes.
        category: The bundle's licence category (``data_sources.json``), or None when
            unrecorded.
        stats: The stats rows (:func:`chexpercept.bundle.stats_rows`).
    """

    out: Path
    cases: int = 0
    shards: list[Path] = field(default_factory=list)
    images: int = 0
    image_bytes: int = 0
    category: str | None = None
    stats: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        """The summary line."""
        return (f"exported {self.cases} case(s), {self.images} image(s) "
                f"({self.image_bytes / 2**20:.1f} MiB) in {len(self.shards)} shard(s); "
                f"licence category: {self.category or 'not recorded'}; output: {self.out}")


def features() -> Any:
    """The ``datasets.Features`` of a row (column order as written; docs/hf_dataset.md).

    Raises:
        MissingDependencyError: If ``datasets`` is not installed (names the extra).
    """
    ds = require("datasets", "hf-dataset", "writing the Hugging Face dataset form")
    text, ints = ds.Value("string"), ds.List(ds.Value("int32"))
    cols: dict[str, Any] = dict.fromkeys(CASE_COLUMNS, text)
    for name in QUESTION_NAMES:
        cols.update({f"{name}_question": text, f"{name}_options": ds.List(text),
                     f"{name}_answer": text, f"{name}_answer_index": ints})
    cols.update(dict.fromkeys(IMAGE_COLUMNS, ds.Image()))
    cols[OPTION_IMAGES] = ds.List(ds.Image())
    cols[CASE_JSON] = text
    return ds.Features(cols)


def case_row(key_id: str, raw: Mapping[str, Any], item: BenchmarkItem,
             layout: BenchmarkLayout) -> dict[str, Any]:
    """One dataset row: the case's columns, its question columns and its embedded images.

    Args:
        key_id: The case.
        raw: Its ``chexpercept.json`` value as read (stored unchanged as ``case_json``).
        item: The same value, validated.
        layout: The folder bundle holding its images.

    Returns:
        The row, keyed by column name (see :func:`features`); images as
        ``{"bytes": <file bytes>, "path": <path inside chexpercept/<key_id>/>}``.

    Raises:
        InputError: If an image file is missing (names the file).
        SchemaError: If an image path leaves the bundle (names the key_id and the path;
            :meth:`chexpercept.layouts.BenchmarkLayout.case_file`).
    """
    def image(rel: str) -> dict[str, Any]:
        path = layout.case_file(key_id, rel, field="image")  # the one path rule
        if not path.is_file():
            raise InputError(f"{key_id}: image {path} not found")
        return {"bytes": path.read_bytes(), "path": rel}

    rels = case_image_relpaths(raw)  # detection, contour eval, points, options (in order)
    singles = [image(r) for r in rels[:3]] + [None] * (3 - min(3, len(rels)))
    return {"key_id": key_id, **view_columns(key_id, raw, item),
            **dict(zip(IMAGE_COLUMNS, singles, strict=True)),
            OPTION_IMAGES: [image(r) for r in rels[3:]],
            CASE_JSON: json.dumps(raw, ensure_ascii=False)}


def plan_shards(sizes: Sequence[int], max_bytes: int) -> list[range]:
    """Split cases (in order) into shards of at most ``max_bytes`` image bytes each.

    Args:
        sizes: Image bytes per case, in dataset order.
        max_bytes: Upper bound per shard; a case larger than it gets a shard of its own.

    Returns:
        Consecutive index ranges covering every case (one empty-free range at least when
        ``sizes`` is not empty).
    """
    shards, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > max_bytes:
            shards.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        shards.append(range(start, len(sizes)))
    return shards


def _write_shard(path: Path, rows: Sequence[dict[str, Any]], schema: Any) -> None:
    """Write rows as one parquet file, :data:`ROW_GROUP_CASES` rows per row group.

    No dictionary encoding: the image bytes are unique, and a dictionary of them would only be
    built and dropped.
    """
    pa = require("pyarrow", "hf-dataset", "writing the Hugging Face dataset form")
    pq = require("pyarrow.parquet", "hf-dataset", "writing the Hugging Face dataset form")
    with pq.ParquetWriter(path, schema, use_dictionary=False) as writer:
        for i in range(0, len(rows), ROW_GROUP_CASES):
            writer.write_table(pa.Table.from_pylist(list(rows[i:i + ROW_GROUP_CASES]),
                                                    schema=schema))


def export_hf_dataset(benchmark_dir: str | Path | None, out: str | Path, *,
                      max_shard_mb: float = DEFAULT_MAX_SHARD_MB) -> HfExportReport:
    """Write a folder bundle as a parquet dataset with its card (re-running gives identical bytes).

    The bundle is checked first by the shared validator (:func:`chexpercept.bundle.check_bundle`);
    the dataset is then written into a temporary sibling folder and renamed into place (a
    previous export at ``out`` is replaced only then), so ``out`` never holds a half-written
    shard or a mix of two exports.

    Args:
        benchmark_dir: Folder bundle (``chexpercept.json`` + ``chexpercept/``); None is
            ``<repo>/data/chexpercept``.
        out: The dataset folder to write; must not exist, be empty, or hold an earlier export
            (its card carries :data:`chexpercept.parquet_bundle.PARQUET_FORMAT`).
        max_shard_mb: Upper bound of a shard's image bytes in MiB (default
            :data:`DEFAULT_MAX_SHARD_MB`).

    Returns:
        The report.

    Raises:
        InputError: If ``benchmark_dir`` is not a folder bundle, ``out`` holds something else,
            or ``max_shard_mb`` is not positive.
        SchemaError: If the bundle fails the validator (every problem listed).
        MissingDependencyError: If pyarrow or datasets is missing (names the extra).
    """
    layout = BenchmarkLayout(Path(benchmark_dir or default_benchmark_dir()))
    out = Path(out)
    if not max_shard_mb > 0:
        raise InputError(f"--max-shard-mb must be > 0, got {max_shard_mb}")
    if is_parquet_bundle(layout.root):
        raise InputError(f"{layout.root} is already a parquet dataset; give the folder bundle "
                         f"(chexpercept.json + chexpercept/)")
    if not layout.json_path.is_file():
        raise InputError(f"benchmark JSON not found: {layout.json_path} (--benchmark-dir must "
                         f"hold chexpercept.json and the chexpercept/ image folder)")
    _check_out(out)
    schema = features().arrow_schema
    raw = read_json(layout.json_path)
    items = parse_benchmark(raw, layout.json_path)
    check = check_bundle(layout, items)
    check.log_warnings()
    check.raise_for_problems(" (nothing exported)")
    sources = read_json(layout.data_sources_json) if layout.data_sources_json.is_file() else None
    keys = list(items)
    sizes = [sum(layout.case_file(k, r, field="image").stat().st_size
                 for r in case_image_relpaths(raw[k])) for k in keys]
    shards = plan_shards(sizes, int(max_shard_mb * 2**20))
    report = HfExportReport(out=out, cases=len(keys), image_bytes=sum(sizes),
                            category=(sources or {}).get("category"), stats=stats_rows(items))
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        (tmp / DATA_DIR).mkdir(parents=True)
        for index, shard in enumerate(shards):
            rows = [case_row(keys[i], raw[keys[i]], items[keys[i]], layout) for i in shard]
            report.images += sum(sum(r[c] is not None for c in IMAGE_COLUMNS)
                                 + len(r[OPTION_IMAGES]) for r in rows)
            name = Path(DATA_DIR) / shard_name(index, len(shards))
            _write_shard(tmp / name, rows, schema)
            report.shards.append(out / name)
        for sidecar in SIDECAR_FILES:
            if (layout.root / sidecar).is_file():
                shutil.copyfile(layout.root / sidecar, tmp / sidecar)
        write_text_atomic(tmp / CARD_NAME, dataset_card(report.stats, sources, len(keys)))
        _replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def _check_out(out: Path) -> None:
    """Refuse an ``out`` that exists, is not empty and is not an earlier export."""
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError(f"--out {out} exists and is not a folder")
    card = out / CARD_NAME
    earlier = card.is_file() and PARQUET_FORMAT in card.read_text(encoding="utf-8",
                                                                  errors="replace")
    if any(out.iterdir()) and not earlier:
        raise InputError(f"--out {out} is not empty and holds no earlier export (no {CARD_NAME} "
                         f"with {PARQUET_FORMAT}); give a new or empty folder")


def _replace_dir(tmp: Path, out: Path) -> None:
    """Put ``tmp`` at ``out``; an earlier ``out`` is moved aside first and removed after."""
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def _size_category(cases: int) -> str:
    """The hub's ``size_categories`` value of a dataset of ``cases`` rows."""
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if cases < bound:
            return name
    return "100K<n<1M"


def card_header(sources: Mapping[str, Any] | None, cases: int) -> dict[str, Any]:
    """The card's YAML header (licence, configs/data_files; hub metadata keys).

    ``license`` is ``other`` (the sources' own terms), ``license_name`` the source names and
    ``license_link`` the source's URL when there is one source.
    """
    named = dict((sources or {}).get("sources", {}))
    header: dict[str, Any] = {
        "license": "other",
        "license_name": "-".join(sorted(named)) or "unknown",
    }
    if len(named) == 1 and next(iter(named.values())).get("url"):
        header["license_link"] = next(iter(named.values()))["url"]
    header.update({
        "pretty_name": "CheXpercept benchmark",
        "language": ["en"],
        "task_categories": ["visual-question-answering"],
        "tags": ["medical", "chest-x-ray", "radiology", "lesion-segmentation", "chexpercept"],
        "size_categories": [_size_category(cases)],
        "configs": [{"config_name": "default",
                     "data_files": [{"split": SPLIT, "path": f"{DATA_DIR}/{SPLIT}-*.parquet"}]}],
    })
    return header


def _sources_section(sources: Mapping[str, Any] | None) -> list[str]:
    """The card's "Licence and data sources" lines, from ``data_sources.json``."""
    lines = ["## Licence and data sources", ""]
    category = (sources or {}).get("category")
    warning = NOT_PUBLIC.get(category) if sources is not None else NOT_PUBLIC[None]
    if warning:
        lines += [warning, ""]
    if sources is None:
        return lines
    synthetic = sorted(rec.get("title", name) for name, rec in
                       dict(sources.get("sources", {})).items() if rec.get("pixels") == "synthetic")
    if synthetic:
        lines += [f"**The images of this dataset are SYNTHETIC stand-ins generated by CheXpercept "
                  f"(chexpercept.synth.stand_ins), not radiographs: only the image ids and boxes "
                  f"come from {', '.join(synthetic)}. It is a pipeline test, not a benchmark; do "
                  f"not publish it as one.**", ""]
    lines += [f"Licence category of the whole dataset: `{category}`"
              + (" (mixed sources; the strictest applies)" if sources.get("mixed") else "")
              + ". Each source, as recorded in `data_sources.json` (docs/curation.md, "
              "'Licences', in the CheXpercept repository):", ""]
    for name, rec in sorted(dict(sources.get("sources", {})).items()):
        lines += [f"- **{rec.get('title', name)}** (`{name}`, {rec.get('cases', '?')} case(s), "
                  f"category `{rec.get('category', '?')}`)",
                  f"  - licence: {rec.get('licence', 'not recorded')}",
                  *([f"  - pixels: synthetic ({rec.get('pixels_note', 'stand-ins')})"]
                    if rec.get("pixels") == "synthetic" else []),
                  f"  - what may be shared: {rec.get('share', 'not recorded')}",
                  f"  - cite: {rec.get('citation', 'not recorded')}",
                  f"  - data and terms: {rec.get('url', 'not recorded')}"]
    return [*lines, ""]


def _counts_section(stats: Sequence[Mapping[str, Any]]) -> list[str]:
    """The card's counts: cases per lesion and QA path, QA items, distinct CXRs."""
    by = {(r["lesion"], r["path"]): r for r in stats}
    head = ["lesion", *QA_PATHS, "all", "QA items"]
    lines = ["## Counts", "", "Cases per lesion and QA path (docs/benchmark_format.md, "
             "'QA paths'):", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for lesion in (*LESIONS, ALL):
        cells = [by[(lesion, p)]["cases"] for p in QA_PATHS]
        if lesion != ALL and not sum(cells):
            continue
        items = sum(by[(lesion, p)]["qa_items"] for p in QA_PATHS)
        lines.append("| " + " | ".join(str(c) for c in (lesion, *cells, sum(cells), items))
                     + " |")
    return [*lines, "", f"Distinct CXRs: {by[(ALL, ALL)]['cxrs']}.", ""]


def dataset_card(stats: Sequence[Mapping[str, Any]], sources: Mapping[str, Any] | None,
                 cases: int) -> str:
    """The dataset card ``README.md``: YAML header, licence and sources, counts, columns, use.

    Args:
        stats: :func:`chexpercept.bundle.stats_rows` of the cases.
        sources: The bundle's ``data_sources.json``, or None when it has none (the card then
            says the licence is unknown and not to push it publicly).
        cases: Number of rows.

    Returns:
        The card's text (deterministic: no dates, no paths).
    """
    header = yaml.safe_dump(card_header(sources, cases), sort_keys=False, allow_unicode=True)
    body = [
        "# CheXpercept benchmark (Hugging Face dataset form)", "",
        f"<!-- format: {PARQUET_FORMAT} -->", "",
        "A CheXpercept benchmark bundle as one parquet row per case, every image embedded. "
        "The questions are asked in one dialogue, stage by stage, as far as the case's QA "
        "path goes; evaluate it with the CheXpercept repository's Stage 03, which reads this "
        "folder directly:", "",
        "```bash",
        "python src/03_eval_vlm_on_chexpercept/00_eval.py --benchmark-dir <this folder> \\",
        "    --provider <provider> --model <model> --output-path outputs/03",
        "```", "",
        *_sources_section(sources),
        *_counts_section(stats),
        "## Columns", "",
        "`key_id`, `lesion`, `qa_path`, `pair_id`, `dicom_id`, `data_source`, "
        "`initial_context`; for each question (`" + "`, `".join(QUESTION_NAMES) + "`): "
        "`<question>_question`, `_options` (option texts as the question lists them), "
        "`_answer`, `_answer_index` (1-based; null when the case's path does not ask it); "
        "images `detection_image`, `contour_eval_image`, `points_image`, `option_images`; "
        "`case_json`, the case exactly as in `chexpercept.json` (what Stage 03 reads). "
        "Details: docs/hf_dataset.md in the CheXpercept repository.", "",
    ]
    return f"---\n{header}---\n\n" + "\n".join(body)


__all__ = [
    "CARD_NAME",
    "DEFAULT_MAX_SHARD_MB",
    "QUESTION_NAMES",
    "HfExportReport",
    "case_row",
    "dataset_card",
    "export_hf_dataset",
    "features",
    "plan_shards",
]
