"""Stage 00.00: sample MIMIC-ILS cases per lesion and prepare their CXRs.

Reads ``path.mimic_ils_path`` (splits ``source_data_curation.ils_splits``, default ``train``),
optionally ``path.mimic_meta_path`` (only ``source_data_curation.positive_views`` views are kept,
default PA/AP) and ``path.mimic_split_meta_path`` (only ``mimic_cxr_splits`` kept, when set) and,
for image preparation, ``path.mimic_cxr_jpg_path``. Writes into the Stage 00 output folder
(``<path.work_dir>/00_source_data_curation`` or ``src/00_source_data_curation/outputs``):

- ``global_segmentation_info.json``, ``basic_segmentation_info.json``,
  ``global_segmentation_negative_info.json`` (release names and shape ``{lesion: [entry]}``);
- ``sampling_summary.json`` (counts, dropped pairs with reasons, inputs hash), ``run_meta.json``;
- ``path.mimic_cxr_path/<dicom_id>.png``: 8-bit gray 1024 x 1024 copies of every sampled
  dicom's JPG (``source_data_curation.prepare_mode``: ``letterbox`` (default, aspect kept,
  black padding) or ``stretch``), each with ``<dicom_id>.transform.json`` (original size,
  scales, padding) and the index ``transforms.json``; skipped with ``--skip-prepare``; PNGs
  already prepared in the same mode are kept.

Sampling is seeded (``rng_for(seed, "curation", lesion)``): up to
``max_samples_per_lesion`` positives (global first, then basic) and
``samples_per_lesion_negative`` negatives per lesion, negatives disjoint from every sampled
positive by dicom_id and by study_id, and across lesions. Outputs are reused only when the
inputs, seed and settings
are unchanged (hash in ``sampling_summary.json``).

Example::

    python src/00_source_data_curation/00_sample_mimic_ils_case.py --config cfg/config.yaml
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from chexpercept import io
from chexpercept.curation import sampling
from chexpercept.curation.images import prepare_images, prepared_png
from chexpercept.errors import ConfigError, InputError
from chexpercept.lesions import LESIONS
from chexpercept.schema import load_chexpercept_config
from utils.cli import add_common_args, add_config_arg, progress, run_main, setup_logging

logger = logging.getLogger("00_sample_mimic_ils_case")

DEFAULT_CONFIG = str(io.repo_root() / "cfg" / "config.yaml")
#: Bump when the sampling rule changes, so old outputs are not reused.
SAMPLING_VERSION = "2"


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, DEFAULT_CONFIG)
    parser.add_argument(
        "--output-dir", "--output_dir", dest="output_dir", default=None,
        help="Stage 00 output folder (default: <path.work_dir>/00_source_data_curation, or "
             "src/00_source_data_curation/outputs when path.work_dir is unset).")
    parser.add_argument(
        "--skip-prepare", "--skip_prepare", dest="skip_prepare", action="store_true",
        help="Do not convert the sampled JPGs into path.mimic_cxr_path (default: off).")
    parser.add_argument(
        "--force", action="store_true",
        help="Resample even if the inputs, seed and settings are unchanged (default: off).")
    add_common_args(parser, seed=True)
    return parser


def _load_selection(layout: io.CurationLayout) -> sampling.SourcePool:
    return sampling.SourcePool(*(io.read_json(layout.segmentation_info(kind))
                                 for kind in ("global", "basic", "negative")))


def main(argv: Sequence[str] | None = None) -> int:
    """Sample, write the three segmentation-info JSONs, and prepare the CXR PNGs."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config)
    seed = cfg.seed if args.seed is None else args.seed
    cur = cfg.source_data_curation
    out = Path(args.output_dir) if args.output_dir else io.stage_output_dir("00",
                                                                            cfg.path.work_dir)
    layout = io.CurationLayout(out)
    setup_logging(args.log_level, out, name="00_sample_mimic_ils_case",
                  progress=not args.no_progress)

    params = {"sampling_version": SAMPLING_VERSION, "seed": seed,
              "max_samples_per_lesion": cur.max_samples_per_lesion,
              "samples_per_lesion_negative": cur.samples_per_lesion_negative,
              "positive_views": cur.positive_views if cfg.path.mimic_meta_path else None,
              "mimic_report_path": cfg.path.mimic_report_path,
              "ils_splits": list(cur.ils_splits),
              "mimic_cxr_splits": (list(cur.mimic_cxr_splits) if cur.mimic_cxr_splits
                                   else None)}
    if cur.mimic_cxr_splits and not cfg.path.mimic_split_meta_path:
        raise ConfigError(f"source_data_curation.mimic_cxr_splits is set, so "
                          f"path.mimic_split_meta_path (MIMIC-CXR-JPG split.csv) must be set "
                          f"in {args.config}")
    if not Path(cfg.path.mimic_ils_path).is_file():
        raise InputError(f"MIMIC-ILS file not found: {cfg.path.mimic_ils_path} "
                         f"(config path.mimic_ils_path in {args.config})")
    split_csv = cfg.path.mimic_split_meta_path if cur.mimic_cxr_splits else None
    digest = sampling.inputs_hash([cfg.path.mimic_ils_path, cfg.path.mimic_meta_path,
                                   split_csv], params)
    outputs = [layout.segmentation_info(k) for k in ("global", "basic", "negative")]
    previous = (io.read_json(layout.sampling_summary) if layout.sampling_summary.is_file()
                else {})
    if (not args.force and all(p.is_file() for p in outputs)
            and previous.get("inputs_hash") == digest):
        logger.info("sampling outputs in %s are current (same inputs, seed and settings); "
                    "reusing them", out)
        selection = _load_selection(layout)
    else:
        train = sampling.load_splits(cfg.path.mimic_ils_path, cur.ils_splits)
        pool = sampling.bucket_pairs(train, source=cfg.path.mimic_ils_path,
                                     report_root=cfg.path.mimic_report_path)
        dropped: list[dict[str, str]] = []
        if cfg.path.mimic_meta_path:
            views = sampling.read_view_positions(cfg.path.mimic_meta_path)
            pool, dropped = sampling.filter_views(pool, views, cur.positive_views)
        if split_csv:
            pool, by_split = sampling.filter_splits(pool, sampling.read_split_map(split_csv),
                                                    cur.mimic_cxr_splits)
            dropped += by_split
        for d in dropped:
            logger.info("dropped %s (dicom %s): %s", d["key_id"], d["dicom_id"], d["reason"])
        selection = sampling.sample_pool(pool, seed=seed,
                                         max_positive=cur.max_samples_per_lesion,
                                         negatives_per_lesion=cur.samples_per_lesion_negative)
        for kind, bucket in (("global", selection.global_info), ("basic", selection.basic_info),
                             ("negative", selection.negative_info)):
            io.write_json_atomic(layout.segmentation_info(kind), bucket, indent=4)
        io.write_json_atomic(layout.sampling_summary, {
            "inputs_hash": digest, "params": params, "pool": pool.counts(),
            "selected": selection.counts(), "dropped": dropped,
            "shortfalls": selection.shortfalls})
    for lesion in LESIONS:
        logger.info("%-13s global %4d  basic %4d  negative %4d", lesion,
                    len(selection.global_info[lesion]), len(selection.basic_info[lesion]),
                    len(selection.negative_info[lesion]))

    images = sampling.selected_dicoms(selection)
    if args.skip_prepare:
        logger.info("image preparation skipped (--skip-prepare)")
    elif cfg.path.mimic_cxr_jpg_path:
        summary = prepare_images(images, cfg.path.mimic_cxr_jpg_path, cfg.path.mimic_cxr_path,
                                 mode=cur.prepare_mode,
                                 iterate=lambda xs: progress(xs, total=len(xs),
                                                             desc="prepare CXRs"))
        logger.info("CXR PNGs in %s (%s): %d converted, %d already there; transforms in %s",
                    cfg.path.mimic_cxr_path, cur.prepare_mode, summary.converted,
                    summary.skipped, io.transforms_index(cfg.path.mimic_cxr_path))
    else:
        missing = [f"{d}: {prepared_png(cfg.path.mimic_cxr_path, d)}" for d in images
                   if not prepared_png(cfg.path.mimic_cxr_path, d).is_file()]
        if missing:
            raise InputError(f"path.mimic_cxr_jpg_path is unset and {len(missing)} sampled CXR "
                             f"PNG(s) are missing from path.mimic_cxr_path:\n  "
                             + "\n  ".join(missing))
        logger.info("path.mimic_cxr_jpg_path unset; all %d sampled CXR PNGs already in %s",
                    len(images), cfg.path.mimic_cxr_path)
    io.write_run_meta(out, stage="00.00", config=cfg, seeds={"curation": seed},
                      repo_root=io.repo_root())
    logger.info("done: %d positive, %d negative entries, %d dicoms; outputs in %s",
                sum(len(v) for v in selection.global_info.values())
                + sum(len(v) for v in selection.basic_info.values()),
                sum(len(v) for v in selection.negative_info.values()), len(images), out)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
