"""Stage 00.00 public sources: adapters from public box tables to Stage 00 entries.

``source_data_curation.source`` names one (or a list) of :data:`SOURCES`; ``mimic-ils`` is the
credentialed MIMIC path (:mod:`chexpercept.curation.sampling`), the others are adapters here
(:class:`~chexpercept.curation.sources.base.SourceAdapter`; docs/curation.md, "Public sources").
"""

from __future__ import annotations

from chexpercept.curation.sources.base import (
    LICENCE_CATEGORIES,
    Box,
    Finding,
    NegativeImage,
    SourceAdapter,
    SourceLicence,
    SourceRecords,
    installed_tables_dir,
)
from chexpercept.curation.sources.nih import NihCxr14
from chexpercept.curation.sources.rsna import RsnaPneumonia
from chexpercept.curation.sources.vindr import VindrCxr, merge_reader_boxes
from chexpercept.errors import ConfigError

#: The MIMIC-ILS source (credentialed; not an adapter: sampled from the MIMIC-ILS JSON).
MIMIC_ILS = "mimic-ils"
MIMIC_LICENCE = SourceLicence(
    source=MIMIC_ILS, title="MIMIC-CXR-JPG + MIMIC-ILS",
    licence="PhysioNet Credentialed Health Data License 1.5.0 (credentialed access, data use "
            "agreement; no redistribution)",
    category="restricted",
    citation="Johnson AEW, et al. MIMIC-CXR-JPG, a large publicly available database of "
             "labeled chest radiographs. arXiv:1901.07042 (2019); and the MIMIC-ILS release.",
    url="https://physionet.org/content/mimic-cxr-jpg/",
    share="nothing built from it may be passed on outside PhysioNet's terms")

_ADAPTERS: dict[str, type[SourceAdapter]] = {
    NihCxr14.name: NihCxr14, RsnaPneumonia.name: RsnaPneumonia, VindrCxr.name: VindrCxr}
#: Every ``source_data_curation.source`` value.
SOURCES = (MIMIC_ILS, *_ADAPTERS)
#: Public sources (adapters).
PUBLIC_SOURCES = tuple(_ADAPTERS)


def get_adapter(name: str) -> SourceAdapter:
    """The adapter of a public source.

    Raises:
        ConfigError: For an unknown name (listing the valid ones).
    """
    if name not in _ADAPTERS:
        raise ConfigError(f"source_data_curation.source {name!r}: expected one of "
                          f"{', '.join(SOURCES)}")
    return _ADAPTERS[name]()


def licence_of(name: str) -> SourceLicence:
    """The licence record of any source (``mimic-ils`` included)."""
    return MIMIC_LICENCE if name == MIMIC_ILS else get_adapter(name).licence


__all__ = [
    "LICENCE_CATEGORIES",
    "MIMIC_ILS",
    "MIMIC_LICENCE",
    "PUBLIC_SOURCES",
    "SOURCES",
    "Box",
    "Finding",
    "NegativeImage",
    "NihCxr14",
    "RsnaPneumonia",
    "SourceAdapter",
    "SourceLicence",
    "SourceRecords",
    "VindrCxr",
    "get_adapter",
    "installed_tables_dir",
    "licence_of",
    "merge_reader_boxes",
]
