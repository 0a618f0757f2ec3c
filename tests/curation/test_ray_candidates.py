"""Stage 00.01 on a local Ray cluster: 2 Ray workers write what one process writes, and resume.

The ``provided`` segmenter (MIMIC-ILS masks; no model) stands in for ROSALIA: the Ray path is
the same (each actor creates the segmenter once and processes whole items).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ray_cluster import require_ray, start_cluster
from stage00_config import fixture_config

from chexpercept.curation import generate_candidate_masks, sample_mimic_ils_cases
from chexpercept.layouts import CurationLayout
from utils.ray_pool import RayWorkers

require_ray()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with start_cluster(tmp_path_factory.mktemp("ray")) as address:
        yield address


_cfg = fixture_config


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "run_meta.json" and "logs" not in p.parts
            and not p.name.startswith("summary")}


def test_two_ray_workers_write_the_bytes_of_one_process_and_resume(cluster, tmp_path,
                                                                   synth_paths):
    cfg = _cfg(tmp_path, synth_paths)
    sample_mimic_ils_cases(cfg)
    out = tmp_path / "work" / "00_source_data_curation"
    one = generate_candidate_masks(cfg, output_dir=out)
    one_files = _snapshot(CurationLayout(out).candidate_root)
    workers = RayWorkers(workers=2, cpus_per_worker=0.5)
    shutil.rmtree(CurationLayout(out).candidate_root)
    on_ray = generate_candidate_masks(cfg, output_dir=out, ray=workers)
    assert on_ray.processed == one.processed > 0 and not on_ray.failed
    assert on_ray.to_json() == one.to_json()
    assert _snapshot(CurationLayout(out).candidate_root) == one_files
    again = generate_candidate_masks(cfg, output_dir=out, ray=workers)  # resume: all skipped
    assert again.skipped == one.items and again.processed == 0
    assert _snapshot(CurationLayout(out).candidate_root) == one_files
