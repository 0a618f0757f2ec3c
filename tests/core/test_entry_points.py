"""The console commands (``[project.scripts]``) run the same code as the numbered scripts."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
BIN = Path(sys.executable).parent


def _numbered_script(module: str) -> Path:
    """The numbered script that is a shim over ``chexpercept_cli.<module>``."""
    hits = [p for p in ROOT.glob("src/[0-9][0-9]_*/[0-9][0-9]_*.py")
            if f"from chexpercept_cli.{module} import build_parser, main" in p.read_text()]
    assert len(hits) == 1, (module, hits)
    return hits[0]


def test_every_numbered_script_has_a_console_command():
    modules = {target.split(":")[0].split(".")[1] for target in SCRIPTS.values()}
    scripts = sorted(ROOT.glob("src/[0-9][0-9]_*/[0-9][0-9]_*.py"))
    assert len(scripts) == len(SCRIPTS) == len(modules) >= 16
    for module in modules:
        _numbered_script(module)
    for command in ("chexpercept-eval", "chexpercept-analyze", "chexpercept-view",
                    "chexpercept-validate"):  # the names issue 22 asks for
        assert command in SCRIPTS


@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_command_and_numbered_script_print_the_same_help(command):
    module, func = SCRIPTS[command].split(":")
    assert callable(getattr(importlib.import_module(module), func))
    installed = BIN / command
    if not installed.exists():
        pytest.fail(f"{installed} is missing: re-install the package (bash setup.sh)")
    via_command = subprocess.run([str(installed), "--help"], capture_output=True, text=True,
                                 timeout=120)
    via_script = subprocess.run([sys.executable, str(_numbered_script(module.split(".")[1])),
                                 "--help"], capture_output=True, text=True, timeout=120)
    assert via_command.returncode == via_script.returncode == 0, via_command.stderr
    # the usage block names the program (and wraps by its length); the rest is the same parser
    assert via_command.stdout.split("\n\n", 1)[1] == via_script.stdout.split("\n\n", 1)[1]
