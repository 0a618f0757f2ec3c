"""Stage 02 export: licences travel with the cases; redistributable + restricted is refused.

docs/curation.md, "Licences".
"""

from __future__ import annotations

import pytest
import qa_cases

from chexpercept.errors import InputError
from chexpercept.files import read_json
from chexpercept.layouts import BenchmarkLayout, QALayout
from chexpercept.qa import QAInputs, export_benchmark, generate_qa

PER_PATH = {"lesion_free": 2, "revision_free": 1, "revision_required": 1}
NIH = {"source": "nih-cxr14", "title": "NIH ChestX-ray14", "licence": "unrestricted",
       "category": "redistributable", "citation": "Wang et al. CVPR 2017", "url": "u",
       "share": "s"}
VINDR = {**NIH, "source": "vindr-cxr", "title": "VinDr-CXR", "category": "restricted",
         "citation": "Nguyen et al. Sci Data 2022"}


@pytest.fixture(scope="module")
def stage02(tmp_path_factory):
    root = tmp_path_factory.mktemp("licences")
    paths = qa_cases.build_inputs(root)
    out = root / "out"
    generate_qa(QAInputs(positive_annotation_csv=None, negative_annotation_csv=None,
                         output_dir=out, **paths), seed=0, ratios={"default": 0.5})
    layout = QALayout(out)
    return read_json(layout.qa_results_json), layout.bundle_dir


def _sources(raw, split: bool):
    dicoms = sorted({item["dicom_id"] for item in raw.values()})
    return {"sources": {"nih-cxr14": NIH, "vindr-cxr": VINDR},
            "dicom_sources": {d: ("vindr-cxr" if split and i % 2 else "nih-cxr14")
                              for i, d in enumerate(dicoms)}}


def test_each_case_carries_its_source_and_the_bundle_its_licences(stage02, tmp_path):
    raw, bundle = stage02
    report = export_benchmark(raw, bundle_dir=bundle, benchmark_dir=tmp_path, seed=0,
                              per_path=PER_PATH, data_sources=_sources(raw, split=False))
    layout = BenchmarkLayout(tmp_path)
    bench = read_json(layout.json_path)
    assert {item["data_source"] for item in bench.values()} == {"nih-cxr14"}
    record = read_json(layout.data_sources_json)
    assert record["category"] == "redistributable" and record["mixed"] is False
    assert record["sources"]["nih-cxr14"]["cases"] == len(bench)
    assert record["sources"]["nih-cxr14"]["citation"] == "Wang et al. CVPR 2017"
    assert report.summary["data_sources"]["cases"] == {"nih-cxr14": len(bench)}


def test_mixing_redistributable_and_restricted_is_refused_unless_allowed(stage02, tmp_path):
    raw, bundle = stage02
    sources = _sources(raw, split=True)
    with pytest.raises(InputError, match=r"mix a redistributable source with a restricted one "
                                         r"\(nih-cxr14: redistributable; vindr-cxr: restricted\)"
                                         r".*--allow-mixed-licences"):
        export_benchmark(raw, bundle_dir=bundle, benchmark_dir=tmp_path / "a", seed=0,
                         per_path=PER_PATH, data_sources=sources)
    assert not BenchmarkLayout(tmp_path / "a").json_path.exists()  # nothing written
    export_benchmark(raw, bundle_dir=bundle, benchmark_dir=tmp_path / "b", seed=0,
                     per_path=PER_PATH, data_sources=sources, allow_mixed_licences=True)
    record = read_json(BenchmarkLayout(tmp_path / "b").data_sources_json)
    assert record["mixed"] is True and record["category"] == "restricted"
    assert set(record["sources"]) == {"nih-cxr14", "vindr-cxr"}


def test_research_share_mixes_with_either(stage02, tmp_path):
    raw, bundle = stage02
    sources = _sources(raw, split=True)
    sources["sources"]["vindr-cxr"] = {**VINDR, "category": "research-share"}
    export_benchmark(raw, bundle_dir=bundle, benchmark_dir=tmp_path, seed=0, per_path=PER_PATH,
                     data_sources=sources)
    assert read_json(BenchmarkLayout(tmp_path).data_sources_json)["category"] == \
        "research-share"


def test_a_case_without_a_recorded_source_is_named(stage02, tmp_path):
    raw, bundle = stage02
    sources = _sources(raw, split=False)
    sources["dicom_sources"] = {}
    with pytest.raises(InputError, match="have no recorded source"):
        export_benchmark(raw, bundle_dir=bundle, benchmark_dir=tmp_path, seed=0,
                         per_path=PER_PATH, data_sources=sources)


def test_without_a_record_the_items_are_unchanged(stage02, tmp_path):
    raw, bundle = stage02
    export_benchmark(raw, bundle_dir=bundle, benchmark_dir=tmp_path, seed=0, per_path=PER_PATH)
    bench = read_json(BenchmarkLayout(tmp_path).json_path)
    assert all(bench[k] == raw[k] for k in bench)
    assert not BenchmarkLayout(tmp_path).data_sources_json.exists()
