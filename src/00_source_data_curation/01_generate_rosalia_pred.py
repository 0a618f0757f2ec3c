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
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from chexpercept import io
from chexpercept.curation import candidates
from chexpercept.curation.segmenters import create_segmenter
from chexpercept.errors import InputError
from chexpercept.schema import (
    POSITIVE_PART_SHEET_COLUMNS,
    POSITIVE_SHEET_COLUMNS,
    load_chexpercept_config,
)
from utils.cli import (
    add_allow_failures_arg,
    add_common_args,
    add_config_arg,
    failures_exit_code,
    progress,
    run_main,
    setup_logging,
)

logger = logging.getLogger("01_generate_rosalia_pred")

DEFAULT_CONFIG = str(io.repo_root() / "cfg" / "config.yaml")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, DEFAULT_CONFIG)
    parser.add_argument(
        "--max-samples", "--max_samples", dest="max_samples", type=int, default=None,
        help="Positives per lesion, global first then basic (default: "
             "source_data_curation.max_samples_per_lesion).")
    parser.add_argument(
        "--output-dir", "--output_dir", dest="output_dir", default=None,
        help="Stage 00 output folder (default: <path.work_dir>/00_source_data_curation, or "
             "src/00_source_data_curation/outputs).")
    add_allow_failures_arg(parser)
    add_common_args(parser, parts=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Generate candidate masks, plots, results and the labeling sheet (one shard or all)."""
    args = build_parser().parse_args(argv)
    cfg = load_chexpercept_config(args.config)
    cur = cfg.source_data_curation
    candidates.check_segmenter(cur.segmenter)
    out = Path(args.output_dir) if args.output_dir else io.stage_output_dir("00",
                                                                            cfg.path.work_dir)
    layout = io.CurationLayout(out)
    suffix = f"_part{args.part}" if args.part is not None else ""
    setup_logging(args.log_level, layout.candidate_root,
                  name=f"01_generate_rosalia_pred{suffix}", progress=not args.no_progress)
    info = {}
    for kind in ("global", "basic"):
        path = layout.segmentation_info(kind)
        if not path.is_file():
            raise InputError(f"{path} not found; run 00_sample_mimic_ils_case.py first")
        info[kind] = io.read_json(path)
    max_samples = args.max_samples if args.max_samples is not None else cur.max_samples_per_lesion
    work = candidates.build_work_list(info["global"], info["basic"], max_samples)
    items = candidates.shard(work, args.part, args.total_parts)
    todo = [it for it in items if not candidates.item_done(it, layout)]
    # Load the model only when there is work (a finished shard re-runs without a GPU).
    segmenter = create_segmenter(cur.segmenter, cfg) if todo else None
    logger.info("%d work item(s)%s of %d", len(items),
                f" in part {args.part}/{args.total_parts}" if args.part is not None else "",
                len(work))

    results: dict[str, list[dict]] = {}
    rows: list[dict[str, str]] = []
    outcomes = []
    for item in progress(items, total=len(items), desc="candidates"):
        outcome = candidates.process_item(item, layout, cxr_dir=cfg.path.mimic_cxr_path,
                                          seg_mask_root=cfg.path.mimic_ils_seg_mask_path,
                                          segmenter=segmenter or cur.segmenter)
        outcomes.append(outcome)
        if outcome.status == "failed":
            logger.warning("%s failed: %s", outcome.key_id, outcome.reason)
            continue
        results.setdefault(item["pair_id"], []).append(candidates.result_entry(item, layout))
        rows.append(candidates.sheet_row(item, layout))
    columns = POSITIVE_PART_SHEET_COLUMNS if args.part is not None else POSITIVE_SHEET_COLUMNS
    io.write_json_atomic(layout.candidate_results(args.part), results, indent=4)
    io.write_csv_atomic(layout.positive_sheet(args.part), rows, columns)
    counts = Counter(o.status for o in outcomes)
    failed = [{"key_id": o.key_id, "reason": o.reason} for o in outcomes if o.status == "failed"]
    io.write_json_atomic(layout.candidate_summary(args.part), {
        "segmenter": cur.segmenter, "items": len(items), "processed": counts["processed"],
        "skipped": counts["skipped"], "failed": failed})
    io.write_run_meta(layout.candidate_root, stage=f"00.01{suffix}", config=cfg,
                      seeds={}, repo_root=io.repo_root())
    reasons = Counter(o.reason for o in outcomes if o.status == "failed")
    logger.info("done: processed %d, skipped %d (already done), failed %d %s; sheet %s",
                counts["processed"], counts["skipped"], counts["failed"], dict(reasons),
                layout.positive_sheet(args.part))
    return failures_exit_code(counts["failed"], len(items), what="pair(s)",
                              summary=layout.candidate_summary(args.part),
                              allow=args.allow_failures)


if __name__ == "__main__":
    sys.exit(run_main(main))
