"""Session-scoped synthetic fixture (built once per test session, shared via the basetemp)."""

from __future__ import annotations

import pytest

from chexpercept.synth import FixturePaths, make_fixtures


@pytest.fixture(scope="session")
def synth_paths(tmp_path_factory: pytest.TempPathFactory) -> FixturePaths:
    # Same folder as tests/curation and tests/scripts use; make_fixtures is a no-op once built.
    return make_fixtures(tmp_path_factory.getbasetemp() / "synth_fixture_seed0", 0).paths
