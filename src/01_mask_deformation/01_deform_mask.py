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
``cuda:(i % n)``.

Example::

    python src/01_mask_deformation/01_deform_mask.py --config cfg/config_sample_test.yaml \
        --num-workers 2
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from chexpercept import io
from chexpercept.anatomy.names import ZONE_SOURCE_CXAS
from chexpercept.anatomy.provided import check_zone_source
from chexpercept.deformation import (
    DeformationParams,
    DeformationSettings,
    build_tasks,
    check_backend,
    run_deformation,
)
from chexpercept.errors import ConfigError
from chexpercept.schema import POSITIVE_SHEET_COLUMNS, accepted_key_ids, load_chexpercept_config
from utils.cli import (
    add_allow_failures_arg,
    add_common_args,
    add_config_arg,
    failures_exit_code,
    progress,
    run_main,
    setup_logging,
)

logger = logging.getLogger("01_deform_mask")

_SHEET_REQUIRED = ("key_id", "dicom_id", "target", "pair_id")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (release flag spellings, kebab-case aliases)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, "cfg/config.yaml")
    parser.add_argument(
        "--positive-sheet", "--positive_sheet", dest="positive_sheet", default=None,
        help="Positive labeling sheet with the optimal? column (default: the Stage 00 "
             "rosalia_pred/labeling_sheet.csv).")
    parser.add_argument(
        "--candidate-dir", "--candidate_dir", dest="candidate_dir", default=None,
        help="Root of <target>/<pair_id>/pred_mask.png candidate masks (default: the Stage 00 "
             "rosalia_pred/).")
    parser.add_argument(
        "--chexmask-dir", "--chexmask_dir", dest="chexmask_dir", default=None,
        help="CheXmask-U masks <dicom>/{left,right}_lung.png (default: the Stage 01 "
             "chexmasku_pred/).")
    parser.add_argument(
        "--cxas-dir", "--cxas_dir", dest="cxas_dir", default=None,
        help="CXAS masks <dicom>/{left,right} lung.png (default: the Stage 01 cxas_pred/).")
    parser.add_argument(
        "--cxas-zone-dir", "--cxas_zone_dir", dest="cxas_zone_dir", default=None,
        help="CXAS zone masks <dicom>/<zone>.png, read only when zone_mask_source is cxas "
             "(default: path.cxas_mask_path).")
    parser.add_argument(
        "--output-dir", "--output_dir", dest="output_dir", default=None,
        help="Stage 01 output folder (default: <path.work_dir>/01_mask_deformation or "
             "src/01_mask_deformation/outputs).")
    add_allow_failures_arg(parser)
    add_common_args(parser, workers=8, seed=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Deform every accepted case; write masks, per-case items, the results JSON and a summary."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config)
    if args.num_workers < 1:
        raise ConfigError(f"--num-workers must be >= 1, got {args.num_workers}")
    md = cfg.mask_deformation
    sam = check_backend(md.backend, md)
    zone_source = check_zone_source(md.zone_mask_source)
    cxas_zone_dir = args.cxas_zone_dir or cfg.path.cxas_mask_path
    if zone_source == ZONE_SOURCE_CXAS and not cxas_zone_dir:
        raise ConfigError("mask_deformation.zone_mask_source is 'cxas', so path.cxas_mask_path "
                          "(CXAS zone masks <dicom>/<zone>.png) must be set in the config or "
                          "--cxas-zone-dir given")
    seed = cfg.seed if args.seed is None else args.seed
    out01 = (Path(args.output_dir) if args.output_dir
             else io.stage_output_dir("01", cfg.path.work_dir))
    layout = io.DeformationLayout(out01)
    setup_logging(args.log_level, layout.logs_dir, name="01_deform_mask",
                  progress=not args.no_progress)
    if md.save_visualization:
        logger.warning("mask_deformation.save_visualization is not supported by the "
                       "morphological backend; no debug figures are written")

    stage00 = io.CurationLayout(io.stage_output_dir("00", cfg.path.work_dir))
    sheet = Path(args.positive_sheet) if args.positive_sheet else stage00.positive_sheet()
    rows = io.read_csv_rows(sheet, required=_SHEET_REQUIRED)
    accepted = accepted_key_ids(rows, sheet)
    extra = sorted(set(rows[0]) - set(POSITIVE_SHEET_COLUMNS)) if rows else []
    if extra:
        logger.info("%s: extra column(s) ignored: %s", sheet, extra)
    tasks = build_tasks(rows, accepted, sheet_path=sheet,
                        candidate_root=args.candidate_dir or stage00.candidate_root,
                        cxr_dir=cfg.path.mimic_cxr_path)
    settings = DeformationSettings(
        out_dir=str(out01), seed=seed, params=DeformationParams.from_config(md),
        chexmask_dir=str(args.chexmask_dir or layout.chexmask_dir),
        cxas_dir=str(args.cxas_dir or layout.cxas_dir), zone_source=zone_source,
        cxas_zone_dir=str(cxas_zone_dir) if cxas_zone_dir else None, sam=sam)
    logger.info("deforming %d accepted case(s) of %d row(s) in %s (backend %s, %d worker(s))",
                len(tasks), len(rows), sheet, md.backend, args.num_workers)
    summary = run_deformation(
        tasks, settings, num_workers=args.num_workers,
        progress=lambda it, total: progress(it, total=total, desc="deformation"))
    io.write_run_meta(layout.results_json.parent, stage="01.01", config=cfg,
                      seeds={"seed": seed}, repo_root=io.repo_root(),
                      extra={"positive_sheet": str(sheet), "num_workers": args.num_workers})
    logger.info("summary: %s; summary file %s", summary.line(), layout.summary_json)
    if "unexpected_error" in summary.failed:
        return 1
    return failures_exit_code(sum(len(v) for v in summary.failed.values()), len(tasks),
                              what="case(s)", summary=layout.summary_json,
                              allow=args.allow_failures)


if __name__ == "__main__":
    sys.exit(run_main(main))
