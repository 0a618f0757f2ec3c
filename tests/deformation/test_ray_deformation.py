"""Stage 01.01 on a local Ray cluster: 2 Ray workers write a one-worker run's bytes, and resume.

One cluster for the module (``tests/ray_cluster.py``); the fixtures are those of
``test_pipeline.py`` (three cases, morphological backend).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest
from ray_cluster import plugin_pythonpath, require_ray, start_cluster
from stage01_inputs import deformation_tasks

from chexpercept.deformation import (
    DeformationSettings,
    run_deformation,
)
from chexpercept.layouts import DeformationLayout
from utils.cli import run_main
from utils.errors import MissingDependencyError
from utils.ray_pool import ActorLost, ActorPool, RayWorkers

require_ray()

SRC = Path(__file__).resolve().parents[2] / "src"

CASES = {"s50000001_positive_0": "consolidation", "s50000002_positive_0": "cardiomegaly",
         "s50000003_positive_0": "effusion", "s50000004_positive_0": "effusion"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with start_cluster(tmp_path_factory.mktemp("ray")) as address:
        yield address


def _setup(root, out_name):
    return deformation_tasks(root, CASES, out_name)


def _snapshot(out):
    """Every file the run wrote (results, summary, items, masks) except the summary's path."""
    layout = DeformationLayout(out)
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
             if p.is_file() and p != layout.summary_json}
    summary = layout.summary_json.read_text(encoding="utf-8").replace(str(out), "<out>")
    return files, summary


def test_two_ray_workers_write_the_bytes_of_one_worker_and_resume(cluster, tmp_path):
    tasks, settings = _setup(tmp_path, "one")
    one = run_deformation(tasks, settings, num_workers=1)
    assert one.processed == len(CASES) and not one.failed
    ray_settings = DeformationSettings(**{**settings.__dict__, "out_dir": str(tmp_path / "ray")})
    workers = RayWorkers(workers=2, cpus_per_worker=0.5)
    on_ray = run_deformation(tasks, ray_settings, ray=workers)
    assert on_ray.to_json() | {"output": ""} == one.to_json() | {"output": ""}
    assert _snapshot(tmp_path / "one") == _snapshot(tmp_path / "ray")
    # resume: a re-run on Ray skips every finished case and rewrites the same bytes
    again = run_deformation(tasks, ray_settings, ray=workers)
    assert again.skipped_done == len(CASES) and again.processed == 0
    assert _snapshot(tmp_path / "ray")[0] == _snapshot(tmp_path / "one")[0]


@pytest.mark.parametrize("script", ["01_mask_deformation/01_deform_mask.py",
                                    "00_source_data_curation/01_generate_rosalia_pred.py"])
def test_ray_worker_flags_need_ray_and_name_the_install_line(script, monkeypatch, capsys):
    main = runpy.run_path(str(SRC / script), run_name="stage_cli")["main"]
    assert run_main(main, ["--ray-workers", "2"]) == 2
    assert "--ray-workers / --gpus-per-worker need --ray" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(MissingDependencyError, match=r'pip install -e "\.\[ray\]"'):
        main(["--ray", "--ray-workers", "2"])


def test_map_ordered_restarts_a_dead_worker_and_keeps_the_item_order(cluster, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv("PYTHONPATH", plugin_pythonpath(Path(__file__).resolve().parents[1]))
    from ray_cluster import FlakyWorker

    marker = tmp_path / "died"
    pool = ActorPool(FlakyWorker, (5, str(marker)), size=2, label="worker", num_cpus=0.5)
    try:
        out = list(pool.map_ordered("run", range(10)))
    finally:
        pool.close()
    assert marker.is_file() and sum(pool.restarts) == 1
    assert [v for v, _ in out] == [2 * i for i in range(10)]
    pool = ActorPool(FlakyWorker, (3,), size=2, label="worker", num_cpus=0.5, max_restarts=1)
    try:
        with pytest.raises(ActorLost, match=r"worker \d on node .* died 2 time\(s\)"):
            list(pool.map_ordered("run", range(6)))
    finally:
        pool.close()
