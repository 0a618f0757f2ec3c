"""Test configuration: opt-in markers for slow, GPU, paid-API and real-engine tests.

``engine`` tests need vLLM's CPU build: they run in the engine venv
(``bash scripts/setup_engine_env.sh``, then ``.venv-engine/bin/python -m pytest -m engine
--runengine``; ``bash scripts/run_tests.sh`` does both suites).
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", help="run tests marked slow")
    parser.addoption("--rungpu", action="store_true", help="run tests marked gpu (needs CUDA)")
    parser.addoption("--runapi", action="store_true", help="run tests marked api (paid calls)")
    parser.addoption("--runengine", action="store_true",
                     help="run tests marked engine (real vLLM on CPU; the engine venv)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, option in (("slow", "--runslow"), ("gpu", "--rungpu"), ("api", "--runapi"),
                           ("engine", "--runengine")):
        if config.getoption(option):
            continue
        skip = pytest.mark.skip(reason=f"opt in with {option}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
