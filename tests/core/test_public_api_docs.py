"""The public names (docs/python_api.md, "Public names"; docs/architecture.md, "What may import
what"): the page lists exactly what each package ``__init__`` re-exports, the entry points it
names in the ``api`` modules exist, and no library module imports through a package ``__init__``.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "python_api.md"
#: The packages whose ``__init__`` re-exports public names (docs/python_api.md lists each).
REEXPORTING = ("chexpercept.curation", "chexpercept.anatomy", "chexpercept.deformation",
               "chexpercept.qa", "chexpercept.evaluation", "chexpercept.analysis",
               "chexpercept.synth", "utils.llm")
#: The entry points the page names in modules that their package does not re-export.
API_MODULE_NAMES = {
    "chexpercept.evaluation.api": ("evaluate", "select_cases", "cost_table"),
    "chexpercept.analysis.api": ("analyze", "compare_runs", "AnalysisResult", "ComparisonResult"),
}


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def listed_names() -> dict[str, list[str]]:
    """``package -> names`` from the page's "Public names" bullets, in the order printed."""
    section = _section(PAGE.read_text(encoding="utf-8"), "Public names")
    listed = {}
    for bullet in re.split(r"\n- ", section)[1:]:
        package, _, names = bullet.partition(":")
        listed[package.strip("` ")] = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", names)
    return listed


def test_the_page_lists_every_reexporting_package():
    assert sorted(listed_names()) == sorted(REEXPORTING)


@pytest.mark.parametrize("package", REEXPORTING)
def test_the_page_lists_exactly_the_packages_all(package):
    module = importlib.import_module(package)
    assert listed_names()[package] == list(module.__all__), (
        f"docs/python_api.md, 'Public names': the bullet of {package} differs from its __all__")
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.__all__ names {name}, which it lacks"


def test_integrations_reexports_nothing():
    assert importlib.import_module("chexpercept.integrations").__all__ == []


@pytest.mark.parametrize("module_name", list(API_MODULE_NAMES))
def test_the_api_module_entry_points_the_page_names_exist(module_name):
    module = importlib.import_module(module_name)
    section = _section(PAGE.read_text(encoding="utf-8"), "Public names")
    for name in API_MODULE_NAMES[module_name]:
        assert f"`{name}`" in section and callable(getattr(module, name, None)), name


def _reexported_names() -> dict[str, set[str]]:
    return {package: set(importlib.import_module(package).__all__) for package in REEXPORTING}


def test_library_modules_import_from_the_defining_module_not_a_package_init():
    reexported = _reexported_names()
    through_init = []
    for root in (ROOT / "src" / "chexpercept", ROOT / "utils"):
        for path in sorted(root.rglob("*.py")):
            if path.name == "__init__.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module in reexported:
                    names = {alias.name for alias in node.names} & reexported[node.module]
                    if names:
                        through_init.append(f"{path.relative_to(ROOT)}:{node.lineno} "
                                            f"{node.module} {sorted(names)}")
    assert through_init == [], "import these names from the module that defines them"
