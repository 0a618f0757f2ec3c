"""Module boundaries (as the import contracts in pyproject.toml) checked on the source.

Plus: heavy packages are imported lazily.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "src" / "chexpercept"
CORE = {"lesions", "schema", "io", "errors", "rng", "files", "images", "frame", "provenance",
        "layouts", "callbacks"}
STAGES = {"curation", "anatomy", "deformation", "qa", "evaluation", "analysis", "synth"}
# integrations (inspect_ai) sit on top of Stage 03 (pyproject.toml's import contracts)
ALLOWED_STAGE_IMPORTS = {"deformation": {"anatomy"}, "qa": {"anatomy"},
                         "integrations": {"evaluation"}}
HEAVY = ("torch", "vllm", "transformers", "sam2", "sam3", "openai", "google.genai")


def _imports(path: Path, top_level_only: bool = False) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else ast.walk(tree)
    names = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _lib_files():
    return sorted(LIB.rglob("*.py"))


def test_utils_never_imports_chexpercept():
    bad = [f"{p.relative_to(ROOT)}: {m}" for p in sorted((ROOT / "utils").rglob("*.py"))
           for m in _imports(p) if m.split(".")[0] == "chexpercept"]
    assert bad == []


def test_stage_subpackages_import_only_core_and_allowed_stages():
    bad = []
    for path in _lib_files():
        rel = path.relative_to(LIB).parts
        own = rel[0] if len(rel) > 1 else None
        for mod in _imports(path):
            parts = mod.split(".")
            if parts[0] != "chexpercept" or len(parts) < 2:
                continue
            target = parts[1]
            if own is None:  # a core module
                if target in STAGES:
                    bad.append(f"core {path.name} imports stage {mod}")
            elif target in STAGES and target != own and target not in ALLOWED_STAGE_IMPORTS.get(own, set()):
                bad.append(f"{own}/{path.name} imports {mod}")
    assert bad == []


def test_only_evaluation_uses_llm_providers_and_no_library_uses_argparse():
    bad = []
    for path in _lib_files():
        rel = path.relative_to(LIB).parts
        for mod in _imports(path):
            if mod == "argparse":
                bad.append(f"{path.relative_to(ROOT)} imports argparse")
            if mod.startswith("utils.llm") and rel[0] != "evaluation":
                bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert bad == []


def test_no_heavy_import_at_module_top():
    files = _lib_files() + sorted((ROOT / "utils").rglob("*.py"))
    bad = [f"{p.relative_to(ROOT)}: {m}" for p in files for m in _imports(p, top_level_only=True)
           if m.startswith(HEAVY)]
    assert bad == []


def test_no_other_module_named_utils():
    offenders = [p for p in ROOT.rglob("utils*") if p.name in ("utils", "utils.py")
                 and p != ROOT / "utils" and ".venv" not in p.parts and "site-packages" not in p.parts]
    assert offenders == []


def test_importing_everything_loads_no_heavy_package():
    code = (
        "import importlib, pkgutil, sys\n"
        "import chexpercept, utils, utils.llm\n"
        "for pkg in (chexpercept, utils):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        f"heavy = [m for m in sys.modules if m.split('.')[0] in {('torch', 'vllm', 'transformers', 'sam2', 'sam3', 'openai')!r} or m.startswith('google.genai')]\n"
        "print(heavy)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr


def _scripts() -> list[Path]:
    """The numbered scripts and the command-line modules they are shims over."""
    return sorted([*(ROOT / "src").glob("[0-9][0-9]_*/[0-9][0-9]_*.py"),
                   *(ROOT / "src" / "chexpercept_cli").glob("[a-z]*.py")])


def test_numbered_scripts_import_only_the_library_api_and_utils_never_each_other():
    """A script imports public library modules and utils, and never loads another script.

    Nothing private, and no import by name or path, runpy or importlib (naming another script
    in a help text is fine).
    """
    scripts = _scripts()
    assert len(scripts) >= 12
    bad = []
    for path in scripts:
        rel = path.relative_to(ROOT)
        for mod in _imports(path):
            top = mod.split(".")[0]
            if top in ("chexpercept", "utils") and any(p.startswith("_") for p in mod.split(".")):
                bad.append(f"{rel} imports the private module {mod}")
            if top[:1].isdigit() or top == "src":
                bad.append(f"{rel} imports the script {mod}")
        text = path.read_text(encoding="utf-8")
        for word in ("runpy", "spec_from_file_location", "import_module"):
            if word in text:
                bad.append(f"{rel} uses {word}")
    assert bad == []
