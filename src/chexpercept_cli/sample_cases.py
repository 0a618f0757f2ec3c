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

With ``source_data_curation.source`` naming public sources (``nih-cxr14``, ``rsna-pneumonia``,
``vindr-cxr``) the same files come from their box tables and download folders instead, plus
``data_sources.json`` (licences; docs/curation.md, "Public sources").

Example::

    python src/00_source_data_curation/00_sample_mimic_ils_case.py --config cfg/config.yaml
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from chexpercept.config_schema import load_chexpercept_config
from chexpercept.curation import sample_mimic_ils_cases
from chexpercept.layouts import default_config_path
from utils.cli import (
    add_aliased_arg,
    add_common_args,
    add_config_arg,
    add_output_dir_arg,
    log_dir_hook,
    progress_hook,
    run_main,
)

logger = logging.getLogger("00_sample_mimic_ils_case")



def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, default_config_path())
    add_output_dir_arg(
        parser, "Stage 00 output folder (default: <path.work_dir>/00_source_data_curation, or "
                "src/00_source_data_curation/outputs when path.work_dir is unset).")
    add_aliased_arg(
        parser, "skip_prepare", action="store_true",
        help="Do not convert the sampled JPGs into path.mimic_cxr_path (default: off).")
    parser.add_argument(
        "--force", action="store_true",
        help="Resample even if the inputs, seed and settings are unchanged (default: off).")
    add_common_args(parser, seed=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Sample, write the three segmentation-info JSONs, and prepare the CXR PNGs."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config)
    report = sample_mimic_ils_cases(
        cfg, config_path=args.config, output_dir=args.output_dir, seed=args.seed,
        skip_prepare=args.skip_prepare, force=args.force,
        progress=progress_hook("prepare CXRs"),
        on_log_dir=log_dir_hook(args, "00_sample_mimic_ils_case"))
    logger.info("%s", report.line())
    return 0


def run() -> int:
    """Run the console command ``chexpercept-sample-cases`` (:func:`main` under ``run_main``)."""
    return run_main(main)
