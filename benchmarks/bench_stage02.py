"""Benchmark of Stage 02 (QA generation and rendering, export, validation) on the sample fixtures.

Needs a finished ``bash sample_test.sh`` work dir (Stage 00/01 outputs of the generated fixtures;
default ``outputs/sample_test``). For each worker count it runs
``chexpercept.qa.generate_qa`` from scratch into a temporary folder (no resume) and prints cases
per second, and once more on the first count without the review figures (side by side: what
drawing them costs); then it times the export (sampling, hard links, stats.csv) with the shared
bundle validation, and the validation alone. No assertion on timings.

``--tiny`` needs no work dir: a smoke run of seconds on the Stage 02 tests' hand-built inputs
(``tests/qa/qa_cases.py``: three positive and two negative cases), one worker, one run.

Usage::

    python benchmarks/bench_stage02.py [--work-dir outputs/sample_test] [--workers 1 2]
    python benchmarks/bench_stage02.py --tiny
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

from chexpercept.bundle import validate_benchmark_dir
from chexpercept.config_schema import load_chexpercept_config
from chexpercept.files import read_json
from chexpercept.layouts import CurationLayout, DeformationLayout, QALayout, repo_root
from chexpercept.qa import QAInputs, export_benchmark, generate_qa


def _sample_test_inputs(work: Path, cfg) -> dict[str, Path | None] | None:
    """The QAInputs fields (less ``output_dir``) of a finished sample_test.sh work dir."""
    s00, s01 = CurationLayout(work / "00_source_data_curation"), DeformationLayout(
        work / "01_mask_deformation")
    if not s01.results_json.is_file():
        return None
    return {"deformation_results_json": s01.results_json,
            "positive_labeling_sheet": s00.positive_sheet(),
            "negative_labeling_sheet": s00.negative_sheet, "positive_annotation_csv": None,
            "negative_annotation_csv": None, "deformed_mask_dir": s01.deformed_masks_root,
            "chexmask_dir": Path(cfg.path.chexmask_path or s01.chexmask_dir),
            "cxas_dir": Path(cfg.path.cxas_mask_path or s01.cxas_dir),
            "cxr_dir": Path(cfg.path.mimic_cxr_path)}


def _tiny_inputs(root: Path) -> dict[str, Path | None]:
    """The QAInputs fields (less ``output_dir``) of the Stage 02 tests' hand-built inputs."""
    spec = importlib.util.spec_from_file_location(
        "stage02_qa_cases", repo_root() / "tests" / "qa" / "qa_cases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    paths = module.build_inputs(root)
    return {"deformation_results_json": paths["deformation_results_json"],
            "positive_labeling_sheet": paths["positive_labeling_sheet"],
            "negative_labeling_sheet": paths["negative_labeling_sheet"],
            "positive_annotation_csv": None, "negative_annotation_csv": None,
            "deformed_mask_dir": paths["deformed_mask_dir"],
            "chexmask_dir": paths["chexmask_dir"], "cxas_dir": paths["cxas_dir"],
            "cxr_dir": paths["cxr_dir"]}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=repo_root() / "outputs" / "sample_test",
                        help="Finished sample_test.sh work dir (default: outputs/sample_test).")
    parser.add_argument("--config", type=Path,
                        default=repo_root() / "cfg" / "config_sample_test.yaml",
                        help="Config (default: cfg/config_sample_test.yaml).")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="Worker counts to time (default: 1 2).")
    parser.add_argument("--repeats", type=int, default=3, help="Runs per count (default: 3).")
    parser.add_argument("--tiny", action="store_true",
                        help="A smoke run of seconds on the Stage 02 tests' hand-built inputs "
                             "(--work-dir is not read), one worker, one run; overrides "
                             "--workers and --repeats (default: off).")
    args = parser.parse_args(argv)
    work = args.work_dir.resolve()
    os.environ["CHEXPERCEPT_WORK_DIR"] = str(work)
    cfg = load_chexpercept_config(args.config)
    with tempfile.TemporaryDirectory() as tmp:
        if args.tiny:
            args.workers, args.repeats = [1], 1
            fields = _tiny_inputs(Path(tmp) / "inputs")
            print(f"Stage 02 on tests/qa/qa_cases.py's inputs ({os.cpu_count()} CPU(s))")
        else:
            fields = _sample_test_inputs(work, cfg)
            if fields is None:
                print(f"no Stage 01 results in {work}; run `bash sample_test.sh` first (or "
                      f"use --tiny)", file=sys.stderr)
                return 2
            print(f"Stage 02 on {work} ({os.cpu_count()} CPU(s))")
        last_out = None
        runs = [(w, True) for w in args.workers] + [(args.workers[0], False)]
        for workers, figures in runs:
            rates = []
            for r in range(args.repeats):
                out = Path(tmp) / f"w{workers}_{r}_{int(figures)}"
                inputs = QAInputs(**fields, output_dir=out)
                t0 = time.perf_counter()
                report = generate_qa(inputs, seed=cfg.seed,
                                     ratios=cfg.qa_generation.no_deformation_ratio,
                                     num_workers=workers, review_figures=figures)
                dt = time.perf_counter() - t0
                n = report.counts["built"]
                rates.append(n / dt)
                last_out = out
            rates.sort()
            print(f"generate_qa  workers={workers}{'' if figures else ', no review figures'}: "
                  f"{n} cases, median {rates[len(rates) // 2]:.2f} cases/s (min {rates[0]:.2f}, "
                  f"max {rates[-1]:.2f}; {args.repeats} runs)")
        assert last_out is not None
        layout = QALayout(last_out)
        raw = read_json(layout.qa_results_json)
        t0 = time.perf_counter()
        exp = export_benchmark(raw, bundle_dir=layout.bundle_dir, benchmark_dir=Path(tmp) / "b",
                               seed=cfg.seed, per_path=cfg.qa_generation.sampling.per_path(),
                               distinct_cxrs=cfg.qa_generation.sampling.distinct_cxrs)
        dt_export = time.perf_counter() - t0
        t0 = time.perf_counter()
        check, _ = validate_benchmark_dir(Path(tmp) / "b")
        dt_val = time.perf_counter() - t0
        print(f"export+validate: {len(exp.selected)} cases in {dt_export:.3f} s "
              f"({len(exp.selected) / dt_export:.1f} cases/s)")
        print(f"validate alone:  {len(check.cases)} cases, {check.images} images in "
              f"{dt_val:.3f} s ({len(check.cases) / dt_val:.1f} cases/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
