"""Stage 00.01: candidate lesion masks for the sampled positives, with review plots and sheets.

Reads ``global_segmentation_info.json`` / ``basic_segmentation_info.json`` (Stage 00.00) and
``path.mimic_cxr_path/<dicom_id>.png``. The candidate mask comes from
``source_data_curation.segmenter``:

- ``provided``: the MIMIC-ILS lesion mask (``path.mimic_ils_seg_mask_path/<seg_mask_path>``,
  mapped into the working frame with the CXR's recorded transform);
- ``rosalia``: ROSALIA (LISA architecture) on a CUDA GPU from local weights
  (``rosalia_weights``, ``rosalia_tokenizer``, ``rosalia_vision_tower``; LISA code from
  ``lisa_path``, default ``src/00_source_data_curation/LISA``), loaded once; the instruction is
  built deterministically from the pair (``Segment the {target}.`` for cardiomegaly or both
  lungs, else ``Segment the {target} in the {A | A and B | A, B, and C}.``). The GPU is the
  first of ``CUDA_VISIBLE_DEVICES``: run one shard per GPU.

Writes under ``rosalia_pred/`` of the Stage 00 output folder, per pair as it goes:

- ``<target>/<pair_id>/pred_img.png`` (copy of the CXR), ``pred_mask.png`` (0/255) and
  ``pred_text.json`` (segmenter, instruction, output text);
- ``plots/<target>/<key_id>.png`` (image | red 33 % overlay; title key_id, location, source);
- ``results[_part<p>].json`` and ``labeling_sheet[_part<p>].csv`` (columns
  ``POSITIVE_PART_SHEET_COLUMNS`` when sharded, ``POSITIVE_SHEET_COLUMNS`` otherwise;
  ``optimal?`` empty);
- ``summary[_part<p>].json``: processed / skipped / failed items, failures with reasons
  (e.g. a pair without a lesion mask).

Items whose image, mask and plot exist are skipped (resume). ``--total-parts`` defaults to 1,
so ``--part 0`` alone processes everything (the release defaulted to 4).

Example (4 GPUs, one shard each)::

    for p in 0 1 2 3; do CUDA_VISIBLE_DEVICES=$p python \
      src/00_source_data_curation/01_generate_rosalia_pred.py --config cfg/config.yaml \
      --part $p --total-parts 4 & done; wait

Or, on a Ray cluster, one command (4 actors, one segmenter load each)::

    python src/00_source_data_curation/01_generate_rosalia_pred.py --config cfg/config.yaml \
      --ray --ray-workers 4
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from chexpercept.config_schema import load_chexpercept_config
from chexpercept.curation import generate_candidate_masks
from chexpercept.layouts import default_config_path
from utils.cli import (
    add_aliased_arg,
    add_allow_failures_arg,
    add_common_args,
    add_config_arg,
    add_output_dir_arg,
    add_ray_worker_args,
    failures_exit_code,
    log_dir_hook,
    progress_hook,
    ray_workers_from_args,
    run_main,
)

logger = logging.getLogger("01_generate_rosalia_pred")



def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, default_config_path())
    add_aliased_arg(
        parser, "max_samples", type=int, default=None,
        help="Positives per lesion, global first then basic (default: "
             "source_data_curation.max_samples_per_lesion).")
    add_output_dir_arg(
        parser, "Stage 00 output folder (default: <path.work_dir>/00_source_data_curation, or "
                "src/00_source_data_curation/outputs).")
    add_allow_failures_arg(parser)
    add_common_args(parser, parts=True)
    add_ray_worker_args(parser, "creates the segmenter once, 1 GPU when the cluster has GPUs")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Generate candidate masks, plots, results and the labeling sheet (one shard or all)."""
    args = build_parser().parse_args(argv)
    ray = ray_workers_from_args(args)
    cfg = load_chexpercept_config(args.config)
    log_name = "01_generate_rosalia_pred" + (f"_part{args.part}" if args.part is not None
                                             else "")
    report = generate_candidate_masks(
        cfg, output_dir=args.output_dir, max_samples=args.max_samples, part=args.part,
        total_parts=args.total_parts, progress=progress_hook("candidates"),
        on_log_dir=log_dir_hook(args, log_name), ray=ray)
    logger.info("%s", report.line())
    failed, total, what = report.failure_counts()
    return failures_exit_code(failed, total, what=what, summary=report.summary_json,
                              allow=args.allow_failures)


def run() -> int:
    """Run the console command ``chexpercept-candidate-masks`` (:func:`main` under ``run_main``)."""
    return run_main(main)
