"""Stage 02 export: seeded sampling per lesion/path, benchmark layout, links, re-run identity."""

from __future__ import annotations

import copy
import shutil

import pytest
import qa_cases

from chexpercept.errors import InputError
from chexpercept.files import read_json
from chexpercept.layouts import BenchmarkLayout, QALayout
from chexpercept.lesions import LESIONS, QA_PATHS, lesion_from_key_id
from chexpercept.qa import QAInputs, export_benchmark, generate_qa, sample_cases
from chexpercept.schema import load_benchmark, parse_benchmark, qa_path_of

EXTRA_NEG = [f"edema_s6{i:07d}_negative_0" for i in range(10)]


@pytest.fixture(scope="module")
def stage02(tmp_path_factory):
    """Stage 02 outputs plus 10 extra edema negatives (copies of a generated negative)."""
    root = tmp_path_factory.mktemp("export")
    paths = qa_cases.build_inputs(root)
    out = root / "out"
    generate_qa(QAInputs(positive_annotation_csv=None, negative_annotation_csv=None,
                         output_dir=out, **paths),
                seed=0, ratios={"default": 0.5, "cardiomegaly": 0.0})
    layout = QALayout(out)
    raw = read_json(layout.qa_results_json)
    template = "effusion_s50000006_negative_0"
    for key in EXTRA_NEG:
        item = copy.deepcopy(raw[template])
        item["pair_id"] = key.split("_", 1)[1]
        raw[key] = item
        shutil.copytree(layout.case_dir(template), layout.case_dir(key))
    return raw, layout.bundle_dir


PER_PATH = {"lesion_free": 3, "revision_free": 1, "revision_required": 1}


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_sample_counts_order_and_shortfall(stage02):
    raw, _ = stage02
    items = parse_benchmark(raw, "x")
    keys, per_lesion = sample_cases(items, seed=0, per_path=PER_PATH)
    edema = [k for k in keys if k.startswith("edema")]
    assert len(edema) == 3 and set(edema) <= set(EXTRA_NEG)
    assert per_lesion["edema"]["lesion_free"] == {"available": 10, "requested": 3,
                                                  "selected": 3, "shortfall": 0,
                                                  "shared_cxr": 0}
    assert per_lesion["cardiomegaly"]["revision_free"]["shortfall"] == 1
    assert per_lesion["effusion"]["revision_required"]["selected"] == 1
    order = [(LESIONS.index(lesion_from_key_id(k)), QA_PATHS.index(qa_path_of(items[k])), k)
             for k in keys]
    assert order == sorted(order)
    assert len(keys) == 3 + 2 + 3  # edema LF 3; cardiomegaly RR + LF; effusion RR, RF, LF


def test_sampling_is_seeded_and_order_independent(stage02):
    raw, _ = stage02
    items = parse_benchmark(raw, "x")
    reversed_items = dict(reversed(list(items.items())))
    a, _ = sample_cases(items, seed=0, per_path=PER_PATH)
    assert sample_cases(reversed_items, seed=0, per_path=PER_PATH)[0] == a
    draws = {tuple(sample_cases(items, seed=s, per_path=PER_PATH)[0]) for s in range(6)}
    assert len(draws) > 1


def test_export_layout_and_rerun_identity(stage02, tmp_path):
    raw, bundle = stage02
    bench = tmp_path / "bench"
    report = export_benchmark(raw, bundle_dir=bundle, benchmark_dir=bench, seed=0,
                              per_path=PER_PATH)
    layout = BenchmarkLayout(bench)
    items = load_benchmark(layout.json_path)
    assert list(items) == report.selected
    assert sorted(p.name for p in layout.images_dir.iterdir()) == sorted(report.selected)
    for key in report.selected:
        assert _tree(layout.case_dir(key)) == _tree(bundle / key)
        assert layout.detection_image(key).is_file()
    summary = read_json(layout.sampling_summary_json)
    assert summary["cases"] == len(report.selected)
    assert summary["qa_items"] == 3 * 1 + (5 + 1) + (9 + 6 + 1)
    assert {(s["lesion"], s["path"]) for s in summary["shortfalls"]} >= {
        ("cardiomegaly", "revision_free"), ("edema", "revision_required")}
    first = _tree(bench)
    export_benchmark(raw, bundle_dir=bundle, benchmark_dir=bench, seed=0, per_path=PER_PATH)
    assert _tree(bench) == first


def test_stale_case_folders_removed(stage02, tmp_path):
    raw, bundle = stage02
    bench = tmp_path / "bench"
    export_benchmark(raw, bundle_dir=bundle, benchmark_dir=bench, seed=0, per_path=PER_PATH)
    (BenchmarkLayout(bench).images_dir / "opacity_s1_positive_0").mkdir()
    report = export_benchmark(raw, bundle_dir=bundle, benchmark_dir=bench, seed=0,
                              per_path={"lesion_free": 1})
    names = sorted(p.name for p in BenchmarkLayout(bench).images_dir.iterdir())
    assert names == sorted(report.selected)
    assert len(report.selected) == 3  # one lesion-free case per lesion that has one


def test_hardlink_and_copy(stage02, tmp_path):
    raw, bundle = stage02
    per = {"lesion_free": 1}
    linked = export_benchmark(raw, bundle_dir=bundle, benchmark_dir=tmp_path / "a", seed=0,
                              per_path=per, link="hardlink")
    copied = export_benchmark(raw, bundle_dir=bundle, benchmark_dir=tmp_path / "b", seed=0,
                              per_path=per, link="copy")
    key = linked.selected[0]
    src = bundle / key / "detection_qa" / "xray.png"
    a = BenchmarkLayout(tmp_path / "a").detection_image(key)
    b = BenchmarkLayout(tmp_path / "b").detection_image(key)
    assert a.stat().st_ino == src.stat().st_ino and linked.copied_files == 0
    assert b.stat().st_ino != src.stat().st_ino and copied.linked_files == 0
    assert a.read_bytes() == b.read_bytes() == src.read_bytes()


def test_missing_image_is_an_error_before_writing(stage02, tmp_path):
    raw, bundle = stage02
    broken = tmp_path / "bundle"
    shutil.copytree(bundle, broken)
    key = "cardiomegaly_s50000003_positive_0"
    (broken / key / "contour_qa" / "contour_revision_qa" / "option_1.png").unlink()
    with pytest.raises(InputError, match="option_1.png"):
        export_benchmark(raw, bundle_dir=broken, benchmark_dir=tmp_path / "bench", seed=0,
                         per_path=PER_PATH)
    assert not (tmp_path / "bench").exists()
