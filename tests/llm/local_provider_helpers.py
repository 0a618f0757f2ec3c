"""Shared helpers of the local-provider tests (vLLM stub, tiny transformers VLM)."""

from __future__ import annotations

import importlib.util
import json
import runpy
from pathlib import Path
from types import ModuleType

import numpy as np
from PIL import Image

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
EVAL_SCRIPT = ROOT / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"


def load_by_path(name: str, path: Path) -> ModuleType:
    """Import a module from a file (no sys.path change)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stage03_bundle = load_by_path("_llm_stage03_bundle", TESTS / "evaluation" / "stage03_bundle.py")


def write_marked_bundle(root: Path) -> dict[str, int]:
    """The Stage 03 test bundle, each case's images filled with its own grey level.

    Returns:
        key_id -> grey level (20, 40, ...), so a fake model can tell which case it sees.
    """
    stage03_bundle.write_bundle(root)
    items = stage03_bundle.load_items(root)
    marks = {}
    for i, (key_id, item) in enumerate(items.items()):
        marks[key_id] = 20 * (i + 1)
        pixels = np.full((8, 8, 3), marks[key_id], dtype=np.uint8)
        for rel in stage03_bundle.image_relpaths(key_id, item):
            Image.fromarray(pixels).save(root / "chexpercept" / key_id / rel)
    return marks


def turns_per_case(root: Path) -> dict[str, int]:
    """Planned turns of every case of a bundle."""
    from chexpercept.evaluation import load_bundle, validate_bundle

    bundle = load_bundle(root)
    return {c.key_id: len(c.turns) for c in validate_bundle(bundle)}


def run_eval_cli(argv: list[str]) -> int:
    """``00_eval.py main(argv)`` in-process."""
    return runpy.run_path(str(EVAL_SCRIPT), run_name="eval_under_test")["main"](argv)


def read_records(run_dir: Path) -> list[dict]:
    """``records.jsonl`` of a run folder."""
    lines = (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line]


def read_manifest(run_dir: Path) -> dict:
    """``run_manifest.json`` of a run folder."""
    return json.loads((run_dir / "run_manifest.json").read_text(encoding="utf-8"))
