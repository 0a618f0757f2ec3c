"""Benchmark of Stage 01.01 (mask deformation): cases per minute and SAM2 per-image cost on CPU.

1. ``morphological`` backend on the sample-test fixtures: builds the synthetic fixtures
   (``chexpercept.synth.make_fixtures``), runs Stage 00.00/00.01 and 01.00 once into a
   temporary folder (all positives accepted), then runs 01.01 from scratch with 1 and with 2
   worker processes and prints cases per minute for each (same outputs by construction).
2. ``sam2`` per-image cost: a randomly initialised SAM 2.1 Hiera-T (no weights needed) on CPU:
   build time, ``set_image`` per 1024x1024 image and ``predict`` per prompt (median of
   ``--repeats``). Skipped when sam2/torch are missing.

``--tiny`` is a smoke run of seconds: the two hand-built cases of the Stage 01 tests
(``tests/deformation/stage01_inputs.py``) instead of the fixtures, one worker, no sam2 (its one
1024 x 1024 ``set_image`` alone takes about 10 s on 2 cores).

No assertion on timings. Usage::

    python benchmarks/bench_stage01.py [--workers 1 2] [--repeats 3] [--no-sam2] [--keep DIR]
    python benchmarks/bench_stage01.py --tiny
"""

from __future__ import annotations

import argparse
import importlib.util
import runpy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from chexpercept.files import read_csv_rows, read_json, write_csv_atomic
from chexpercept.layouts import CurationLayout, DeformationLayout, repo_root
from chexpercept.synth import make_fixtures

REPO = repo_root()


def _script(rel: str):
    return runpy.run_path(str(REPO / "src" / rel), run_name="bench")["main"]


def _config(root: Path, fx) -> Path:
    cfg = {"seed": 0, "path": {
        "mimic_cxr_jpg_path": str(fx.jpg_root), "mimic_cxr_path": str(root / "cxr_1024"),
        "mimic_meta_path": str(fx.metadata_csv), "mimic_report_path": str(fx.report_root),
        "mimic_ils_path": str(fx.mimic_ils_json),
        "mimic_ils_seg_mask_path": str(fx.lesion_mask_root),
        "chexmask_path": str(fx.chexmask_dir), "cxas_mask_path": str(fx.cxas_dir),
        "work_dir": str(root / "work")},
        "source_data_curation": {"samples_per_lesion_negative": 2}}
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _fixture_inputs(root: Path) -> tuple[Path, int]:
    """Stage 00 on the sample-test fixtures, every positive accepted; (config, cases)."""
    fx = make_fixtures(root / "fixtures", 0).paths
    cfg = _config(root, fx)
    common = ["--config", str(cfg), "--no-progress", "--log-level", "WARNING"]
    assert _script("00_source_data_curation/00_sample_mimic_ils_case.py")(common) == 0
    assert _script("00_source_data_curation/01_generate_rosalia_pred.py")(common) == 0
    sheet = CurationLayout(root / "work" / "00_source_data_curation").positive_sheet()
    rows = read_csv_rows(sheet)
    for r in rows:
        r["optimal?"] = "y"
    write_csv_atomic(sheet, rows, list(rows[0]))
    return cfg, len(rows)


def _tiny_inputs(root: Path) -> tuple[Path, int]:
    """The Stage 01 tests' two hand-built cases (Stage 00 outputs and config); (config, cases)."""
    spec = importlib.util.spec_from_file_location(
        "stage01_inputs", REPO / "tests" / "deformation" / "stage01_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    paths = module.write_inputs(root, stage01_anatomy=False)
    return paths["config"], len(read_csv_rows(paths["sheet"]))


def bench_morphological(root: Path, workers: list[int], tiny: bool = False) -> None:
    """Cases per minute of 01.01 (morphological) for each worker count.

    On the sample-test fixtures, or with ``tiny`` on the Stage 01 tests' two cases.
    """
    cfg, n_cases = (_tiny_inputs if tiny else _fixture_inputs)(root)
    common = ["--config", str(cfg), "--no-progress", "--log-level", "WARNING"]
    assert _script("01_mask_deformation/00_generate_anatomy_mask.py")(common) == 0
    anatomy = DeformationLayout(root / "work" / "01_mask_deformation")
    for n in workers:
        out = root / f"deform_w{n}"
        t0 = time.perf_counter()
        _script("01_mask_deformation/01_deform_mask.py")(
            [*common, "--num-workers", str(n), "--output-dir", str(out),
             "--chexmask-dir", str(anatomy.chexmask_dir), "--cxas-dir", str(anatomy.cxas_dir)])
        dt = time.perf_counter() - t0
        summary = read_json(DeformationLayout(out).summary_json)
        print(f"morphological, {n} worker(s): {n_cases} cases in {dt:.1f} s = "
              f"{n_cases / dt * 60:.1f} cases/min (processed {summary['processed']}, "
              f"failed {summary['failed_count']})")


def bench_sam2(repeats: int) -> None:
    """Per-image cost of a random SAM 2.1 Hiera-T on CPU."""
    try:
        import numpy as np
        import torch
        from sam2.build_sam import build_sam2
        from sam2.sam2_image_predictor import SAM2ImagePredictor
    except ImportError as exc:
        print(f"sam2 skipped: {exc}")
        return
    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = build_sam2("configs/sam2.1/sam2.1_hiera_t.yaml", ckpt_path=None, device="cpu")
    build = time.perf_counter() - t0
    pred = SAM2ImagePredictor(model)
    img = np.repeat((np.random.default_rng(0).random((1024, 1024, 1)) * 255).astype(np.uint8),
                    3, axis=2)
    embed, predict = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pred.set_image(img)
        embed.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        pred.predict(point_coords=np.array([[500, 500], [600, 620]], np.float32),
                     point_labels=np.array([1, 0]), mask_input=np.zeros((1, 256, 256), np.float32),
                     multimask_output=True)
        predict.append(time.perf_counter() - t0)
    print(f"sam2 tiny (random) on CPU, {torch.get_num_threads()} thread(s): build {build:.1f} s, "
          f"set_image {statistics.median(embed):.2f} s/image, predict "
          f"{statistics.median(predict):.3f} s/prompt (median of {repeats})")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="Worker counts for the morphological run (default: 1 2).")
    parser.add_argument("--repeats", type=int, default=3,
                        help="sam2 timing repeats (default: 3).")
    parser.add_argument("--no-sam2", action="store_true", help="Skip the sam2 timing.")
    parser.add_argument("--keep", default=None, help="Work folder to keep (default: a temp dir).")
    parser.add_argument("--tiny", action="store_true",
                        help="A smoke run of seconds: the Stage 01 tests' two hand-built cases, "
                             "one worker, no sam2; overrides --workers and --no-sam2 "
                             "(default: off).")
    args = parser.parse_args(argv)
    if args.tiny:
        args.workers, args.no_sam2 = [1], True
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        bench_morphological(root, args.workers, tiny=args.tiny)
    if not args.no_sam2:
        bench_sam2(args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
