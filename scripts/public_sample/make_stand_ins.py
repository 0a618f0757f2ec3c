"""Write SYNTHETIC stand-in images for the CXRs a public-source config samples (public smoke).

Reads the config (``source_data_curation.source``, the sampling settings and ``seed``), draws
the same sample Stage 00.00 will draw from the real annotation tables, and writes one phantom
image per sampled image id, at the size its boxes refer to and with its lesions at their real
boxes, into the source's download folder (``path.nih_cxr14_path``, NIH layout
``images/<id>.png``), plus CheXmask-U / CXAS anatomy masks under ``anatomy/`` and
``SYNTHETIC_STAND_INS.json``. The pixels are synthetic; only ids and box geometry are real.

Example::

    python scripts/public_sample/make_stand_ins.py --config cfg/config_public_sample.yaml
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from chexpercept.config_schema import load_chexpercept_config
from chexpercept.curation.public import plan_public_sample, source_images
from chexpercept.curation.sampling import Selection
from chexpercept.curation.sources import Box, get_adapter
from chexpercept.errors import ConfigError
from chexpercept.synth.stand_ins import write_stand_ins
from utils.cli import add_common_args, add_config_arg, run_main, setup_logging

logger = logging.getLogger("make_stand_ins")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(parser, "cfg/config_public_sample.yaml")
    add_common_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Plan the sample and write its stand-ins."""
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, None, name="make_stand_ins", progress=not args.no_progress)
    cfg = load_chexpercept_config(args.config)
    if list(cfg.source_data_curation.source) != ["nih-cxr14"]:
        raise ConfigError(f"{args.config}: stand-ins are made for source nih-cxr14 only, "
                          f"found {cfg.source_data_curation.source}")
    root = cfg.path.nih_cxr14_path
    if not root:
        raise ConfigError(f"{args.config}: path.nih_cxr14_path must be set")
    _, selection = plan_public_sample(cfg)
    images = source_images(selection)
    cases = {im.dicom_id: [(lesion, (b.x0, b.y0, b.x1, b.y1)) for lesion, b in
                           _lesion_boxes(selection, im.dicom_id)] for im in images}
    rows = {im.dicom_id: im.where for im in images}
    layout = get_adapter("nih-cxr14").image_candidates("{id}")[0]
    manifest = write_stand_ins(Path(root), cases, image_relpath=layout, seed=cfg.seed,
                               source="nih-cxr14", rows=rows)
    logger.info("wrote %d SYNTHETIC stand-in image(s) (real NIH ids and box geometry, "
                "synthetic pixels) into %s; manifest %s", len(cases), root, manifest)
    return 0


def _lesion_boxes(selection: Selection, dicom_id: str) -> Iterator[tuple[str, Box]]:
    """``(lesion, box)`` of every sampled positive on ``dicom_id`` (none for a negative)."""
    for lesion, entries in selection.global_info.items():
        for e in entries:
            if e["dicom_id"] == dicom_id:
                yield from ((lesion, Box.from_json(b)) for b in e["boxes"])


if __name__ == "__main__":
    sys.exit(run_main(main))
