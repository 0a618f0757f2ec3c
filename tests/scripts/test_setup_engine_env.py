"""scripts/setup_engine_env.sh refuses to start on a disk that cannot hold the engine venv.

The engine venv needs several GB while pip installs torch's CUDA wheels; a CI run once failed
half-way with pip's ``No space left on device``. The script checks the free space first and
stops with one line that says what it needs, before it creates anything.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_short_disk_is_refused_with_one_line_before_anything_is_created(tmp_path):
    venv = tmp_path / "engine-venv"
    env = dict(os.environ, CHEXPERCEPT_ENGINE_MIN_FREE_GB="100000000")
    done = subprocess.run(["bash", "scripts/setup_engine_env.sh", "--venv", str(venv)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "MB free" in lines[0] and "CHEXPERCEPT_ENGINE_MIN_FREE_GB" in lines[0]
    assert not venv.exists() and not Path(f"{venv}.pip.log").exists()


def test_pip_cache_is_off_for_the_engine_venv():
    # A second copy of the CUDA wheels in pip's cache is what filled the CI disk.
    text = (ROOT / "scripts" / "setup_engine_env.sh").read_text()
    assert "PIP_NO_CACHE_DIR=1" in text
