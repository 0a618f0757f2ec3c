"""Stage 01.01: deform the approved candidate masks into suboptimal masks with distractors.

Reads the Stage 00 positive labeling sheet (accepted rows: ``optimal?`` = y/yes/1/true), each
case's candidate mask ``rosalia_pred/<target>/<pair_id>/pred_mask.png``, the Stage 01.00 anatomy
masks (``chexmasku_pred/``, ``cxas_pred/``; CXAS zones from ``path.cxas_mask_path`` only when
``mask_deformation.zone_mask_source`` is ``cxas``) and checks that the CXR exists. Writes
``deformed_masks/<key_id>/*.png``, ``deformation_results/items/<key_id>.json`` per finished case
(re-runs skip them), then ``deformation_results/deformation_results.json`` (sheet order) and
``deformation_results/summary.json`` (counts, failed cases with reasons). Backends:
``morphological`` (CPU, no weights); ``sam2`` (``mask_deformation.sam2_checkpoint`` +
``sam2_config``; SAM refinement of the optimal mask and SAM-realised edits) and ``sam3``
(``sam3_checkpoint`` + ``sam3_bpe_path``, GPU environment). Each worker process loads the model
once; with ``mask_deformation.device: cuda`` and several GPUs visible, worker i uses
``cuda:(i % n)``. ``--ray [ADDRESS] --ray-workers N`` runs the cases on N Ray actors instead
(one model load each; same outputs and resume).

Example::

    python src/01_mask_deformation/01_deform_mask.py --config cfg/config_sample_test.yaml \
        --num-workers 2
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from chexpercept.config_schema import load_chexpercept_config
from chexpercept.deformation import DEFAULT_NUM_WORKERS, deform_masks
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

logger = logging.getLogger("01_deform_mask")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (release flag spellings, kebab-case aliases)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, default_config_path())
    add_aliased_arg(
        parser, "positive_sheet", default=None,
        help="Positive labeling sheet with the optimal? column (default: the Stage 00 "
             "rosalia_pred/labeling_sheet.csv).")
    add_aliased_arg(
        parser, "candidate_dir", default=None,
        help="Root of <target>/<pair_id>/pred_mask.png candidate masks (default: the Stage 00 "
             "rosalia_pred/).")
    add_aliased_arg(
        parser, "chexmask_dir", default=None,
        help="CheXmask-U masks <dicom>/{left,right}_lung.png (default: the Stage 01 "
             "chexmasku_pred/).")
    add_aliased_arg(
        parser, "cxas_dir", default=None,
        help="CXAS masks <dicom>/{left,right} lung.png (default: the Stage 01 cxas_pred/).")
    add_aliased_arg(
        parser, "cxas_zone_dir", default=None,
        help="CXAS zone masks <dicom>/<zone>.png, read only when zone_mask_source is cxas "
             "(default: path.cxas_mask_path).")
    add_output_dir_arg(
        parser, "Stage 01 output folder (default: <path.work_dir>/01_mask_deformation or "
                "src/01_mask_deformation/outputs).")
    add_allow_failures_arg(parser)
    add_common_args(parser, workers=DEFAULT_NUM_WORKERS, seed=True)
    add_ray_worker_args(parser, "loads the backend's model once")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Deform every accepted case; write masks, per-case items, the results JSON and a summary."""
    args = build_parser().parse_args(argv)
    ray = ray_workers_from_args(args)
    cfg = load_chexpercept_config(args.config)
    run = deform_masks(
        cfg, positive_sheet=args.positive_sheet, candidate_dir=args.candidate_dir,
        chexmask_dir=args.chexmask_dir, cxas_dir=args.cxas_dir,
        cxas_zone_dir=args.cxas_zone_dir, output_dir=args.output_dir, seed=args.seed,
        num_workers=args.num_workers, progress=progress_hook("deformation"),
        on_log_dir=log_dir_hook(args, "01_deform_mask"), ray=ray)
    logger.info("%s", run.line())
    if run.unexpected_failure:
        return 1
    failed, total, what = run.failure_counts()
    return failures_exit_code(failed, total, what=what, summary=run.summary_json,
                              allow=args.allow_failures)


def run() -> int:
    """Run the console command ``chexpercept-deform-masks`` (:func:`main` under ``run_main``)."""
    return run_main(main)
