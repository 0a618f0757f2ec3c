"""Test configuration: opt-in markers for slow, GPU and paid-API tests."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", help="run tests marked slow")
    parser.addoption("--rungpu", action="store_true", help="run tests marked gpu (needs CUDA)")
    parser.addoption("--runapi", action="store_true", help="run tests marked api (paid calls)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, option in (("slow", "--runslow"), ("gpu", "--rungpu"), ("api", "--runapi")):
        if config.getoption(option):
            continue
        skip = pytest.mark.skip(reason=f"opt in with {option}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
