"""Stage 03 runs for the viewer tests: the Stage 03 test bundle (7 cases, every path), its
images redrawn at 256 x 256 so screenshots are readable, evaluated by the baselines."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from chexpercept.evaluation.api import evaluate

_BUNDLE = Path(__file__).resolve().parents[1] / "evaluation" / "stage03_bundle.py"


def _bundle_module() -> Any:
    spec = importlib.util.spec_from_file_location("viewer_stage03_bundle", _BUNDLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _redraw(path: Path, seed: int) -> None:
    """A 256 x 256 grey 'radiograph' with a cyan blob whose place depends on the file."""
    yy, xx = np.mgrid[0:256, 0:256]
    grey = (60 + 120 * np.exp(-((xx - 128) ** 2 + (yy - 140) ** 2) / 9000.0)).astype(np.uint8)
    rgb = np.stack([grey] * 3, axis=-1)
    cx, cy = 80 + (seed * 37) % 100, 90 + (seed * 53) % 80
    blob = (xx - cx) ** 2 + (yy - cy) ** 2 < 30 ** 2
    rgb[blob] = (0.5 * rgb[blob] + 0.5 * np.array([0, 220, 220])).astype(np.uint8)
    Image.fromarray(rgb).save(path)


def make_bundle(root: Path) -> Path:
    """Write the 7-case bundle into ``root`` with readable images; return ``root``."""
    bundle = _bundle_module().write_bundle(root)
    for i, png in enumerate(sorted((bundle / "chexpercept").rglob("*.png"))):
        _redraw(png, i)
    return bundle


#: (provider, registry name or plugin, oracle setting) of the runs, A first.
RUNS = (("mixed", "viewer_plugin:MixedModel", "implicit"),
        ("oracle", "oracle", "implicit"),
        ("mixed", "viewer_plugin:MixedModel", "explicit"))


def make_runs(tmp: Path) -> dict[str, Any]:
    """Bundle + runs (:data:`RUNS`): a mixed model and the oracle under implicit, the mixed
    model under explicit.

    Returns:
        ``bench``, ``results`` (output path) and ``runs``: label -> run folder.
    """
    bench = make_bundle(tmp / "bench")
    results = tmp / "03"
    runs = {}
    for provider, spec, setting in RUNS:
        evaluate(bench, provider=spec, output_path=results, oracle_setting=setting, seed=3)
        (name,) = [p.name for p in results.iterdir() if p.name.startswith(provider + "_")]
        runs[f"{name}.oracle_{setting}"] = results / name / f"oracle_{setting}"
    return {"bench": bench, "results": results, "runs": runs}


def load_results(run_dir: Path) -> dict[str, Any]:
    """``all_results.json`` of a run."""
    return json.loads((run_dir / "all_results.json").read_text(encoding="utf-8"))


def load_records(run_dir: Path) -> list[dict[str, Any]]:
    """``records.jsonl`` of a run."""
    return [json.loads(line) for line in
            (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines() if line]
