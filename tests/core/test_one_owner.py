"""One owner per rule (issue 22): each of these names is
defined in exactly one module of the library, and every other module imports it from there."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: name -> the one module (path relative to the repository) that defines it.
OWNERS = {
    "PATH_STAGES": "src/chexpercept/lesions.py",
    "expected_stages": "src/chexpercept/lesions.py",
    "qa_path_of": "src/chexpercept/schema.py",
    "load_chexpercept_config": "src/chexpercept/config_schema.py",
    "_parse_keyed": "src/chexpercept/schema.py",
}


def _definitions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted([*ROOT.glob("src/**/*.py"), *ROOT.glob("utils/**/*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            for name in names:
                if name in OWNERS:
                    found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_each_rule_is_defined_once_by_its_owner():
    found = _definitions()
    assert {name: found.get(name) for name in OWNERS} == {n: [p] for n, p in OWNERS.items()}
