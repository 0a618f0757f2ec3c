"""Synthetic fixtures: a small, deterministic, MIMIC-shaped source dataset for tests and demos.

``make_fixtures(out, seed)`` writes MIMIC-CXR-JPG / MIMIC-CXR report / MIMIC-ILS / CheXmask-U /
CXAS-layout files plus ``answer_key.json`` (recipe: ``data/sample_test/README.md``).
"""

from chexpercept.synth._recipe import REAL_DICOM_ID, RECIPE_VERSION
from chexpercept.synth.fixtures import (
    FixtureBuild,
    FixturePaths,
    default_fixture_dir,
    fixture_is_current,
    make_fixtures,
)

__all__ = [
    "REAL_DICOM_ID",
    "RECIPE_VERSION",
    "FixtureBuild",
    "FixturePaths",
    "default_fixture_dir",
    "fixture_is_current",
    "make_fixtures",
]
