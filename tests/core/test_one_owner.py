"""One owner per rule (docs/architecture.md, "Where each idea lives"): each of these names is
defined in exactly one module of the library, and every other module imports it from there."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: name -> the one module (path relative to the repository) that defines it.
OWNERS = {
    # the change-of-mind words both parser layers read (docs/parsing.md, "Parser rules")
    "CHANGE_OF_MIND_WORDS": "src/chexpercept/evaluation/answer_grammar.py",
    "PATH_STAGES": "src/chexpercept/lesions.py",
    "expected_stages": "src/chexpercept/lesions.py",
    "qa_path_of": "src/chexpercept/schema.py",
    "load_chexpercept_config": "src/chexpercept/config_schema.py",
    "_parse_keyed": "src/chexpercept/schema.py",
    # the one rule for the paths a bundle names (docs/benchmark_format.md, "Paths a bundle names")
    "KEY_ID_PATTERN": "src/chexpercept/layouts.py",
    "key_id_problem": "src/chexpercept/layouts.py",
    "relative_path_problem": "src/chexpercept/layouts.py",
    "ORACLE_SETTINGS": "src/chexpercept/layouts.py",
    "DEFAULT_BENCHMARK_DIR": "src/chexpercept/layouts.py",
    "default_benchmark_dir": "src/chexpercept/layouts.py",
    # the one small-cell rule of every Stage 04 table (docs/metrics.md, "Small cells")
    "MIN_BOOTSTRAP_CASES": "src/chexpercept/analysis/bootstrap.py",
    "has_interval": "src/chexpercept/analysis/bootstrap.py",
    "proportion_interval": "src/chexpercept/analysis/bootstrap.py",
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


def test_every_stage_script_follows_the_one_config_default_rule():
    """``--config`` defaults to the repository's cfg/config.yaml (absolute) or to none."""
    import importlib.util

    from chexpercept.layouts import default_config_path

    defaults = {}
    for script in sorted(ROOT.glob("src/0*_*/0*_*.py")):
        spec = importlib.util.spec_from_file_location(f"_script_{script.stem}", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        parser = module.build_parser()
        action = next((a for a in parser._actions if "--config" in a.option_strings), None)
        if action is not None:
            defaults[str(script.relative_to(ROOT))] = action.default
    assert defaults and set(defaults.values()) <= {None, str(default_config_path())}, defaults
    assert str(default_config_path()) == str(ROOT / "cfg" / "config.yaml")
