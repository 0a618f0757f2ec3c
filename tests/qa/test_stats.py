"""Benchmark composition: revision-free/required split, seeded sampling, the stats table.

A synthetic qa_results (JSON only) with, per lesion, 130 negatives and 260 positives of which
180 are deformable, CXRs shared across lesions, reproduces the paper's totals with the default
config (ratio 0.5, 100/100/100, distinct CXRs): 10,400 QA items on 2,100 CXRs
(docs/paper.md, "Benchmark size").
"""

from __future__ import annotations

import pytest
from synthetic_items import LF, RF, RR, item

from chexpercept.bundle import STATS_COLUMNS, format_stats_table, stats_rows
from chexpercept.config_schema import BenchmarkSamplingConfig, QAGenerationConfig
from chexpercept.lesions import LESIONS
from chexpercept.qa import assign_revision_free, sample_cases
from chexpercept.schema import parse_benchmark

N_NEG, N_POS, N_DEFORMABLE, N_SHARED = 130, 260, 180, 25


def _positives(lesion: str) -> list[str]:
    return [f"{lesion}_s{i:08d}_positive_0" for i in range(N_POS)]


def _dicom(lesion_index: int, kind: str, i: int) -> str:
    """The first N_SHARED negatives of a lesion reuse CXRs of the next lesion's positives."""
    if kind == "negative" and i < N_SHARED:
        return f"dcm_{(lesion_index + 1) % len(LESIONS)}_positive_{i}"
    return f"dcm_{lesion_index}_{kind}_{i}"


def _qa_results(seed: int = 0) -> tuple[dict, set[str]]:
    ratios = QAGenerationConfig().no_deformation_ratio
    positives = [k for lesion in LESIONS for k in _positives(lesion)]
    deformable = {k for k in positives if int(k.split("_s")[1][:8]) < N_DEFORMABLE}
    flags = assign_revision_free(positives, seed, ratios, eligible=deformable)
    raw = {}
    for li, lesion in enumerate(LESIONS):
        for i in range(N_POS):
            key = f"{lesion}_s{i:08d}_positive_0"
            raw[key] = item(key, RF if flags[key] else RR, _dicom(li, "positive", i))
        for i in range(N_NEG):
            key = f"{lesion}_s{i:08d}_negative_0"
            raw[key] = item(key, LF, _dicom(li, "negative", i))
    return raw, deformable


@pytest.fixture(scope="module")
def sampled():
    raw, deformable = _qa_results()
    items = parse_benchmark(raw, "synthetic qa_results")
    sampling = BenchmarkSamplingConfig()
    keys, per_lesion = sample_cases(items, seed=0, per_path=sampling.per_path(),
                                    distinct_cxrs=sampling.distinct_cxrs)
    return items, deformable, keys, per_lesion


def test_defaults_reproduce_paper_totals(sampled):
    items, _, keys, per_lesion = sampled
    rows = stats_rows({k: items[k] for k in keys})
    total = rows[-1]
    assert (total["lesion"], total["path"]) == ("all", "all")
    assert total["cases"] == 2100 and total["cxrs"] == 2100 and total["qa_items"] == 10_400
    assert (total["qa_s1"], total["qa_s2"], total["qa_s3"], total["qa_s4"]) == (
        2100, 1400, 2100, 4800)
    by = {(r["lesion"], r["path"]): r for r in rows}
    for lesion in LESIONS:
        lung = lesion != "cardiomegaly"
        assert by[(lesion, RR)]["qa_items"] == (900 if lung else 500)
        assert by[(lesion, RF)]["qa_items"] == (600 if lung else 200)
        assert by[(lesion, LF)]["qa_items"] == 100
        assert {by[(lesion, p)]["cases"] for p in (RR, RF, LF)} == {100}
        assert all(v["shortfall"] == 0 for v in per_lesion[lesion].values())
    assert [by[("all", p)]["cxrs"] for p in (RR, RF, LF)] == [700, 700, 700]
    assert [by[("all", p)]["qa_items"] for p in (RR, RF, LF)] == [5900, 3800, 700]
    assert sum(v[LF]["shared_cxr"] for v in per_lesion.values()) > 0


def test_without_distinct_cxrs_shared_images_are_counted_once(sampled):
    items, _, _, _ = sampled
    keys, _ = sample_cases(items, seed=0, per_path=BenchmarkSamplingConfig().per_path())
    rows = stats_rows({k: items[k] for k in keys})
    assert rows[-1]["cases"] == 2100 and rows[-1]["cxrs"] < 2100


def test_revision_required_drawn_among_deformable_revision_free_among_the_rest(sampled):
    items, deformable, keys, _ = sampled
    rr = [k for k in keys if items[k].contour_qa and not items[k].contour_qa.no_deformation]
    rf = [k for k in keys if items[k].contour_qa and items[k].contour_qa.no_deformation]
    assert len(rr) == len(rf) == 700
    assert set(rr) <= deformable
    # revision-free cases come from both the deformable and the non-deformable positives
    assert set(rf) & deformable and set(rf) - deformable


def test_split_rule_with_eligibility():
    keys = [f"edema_s{i:08d}_positive_0" for i in range(10)]
    eligible = set(keys[:3])
    flags = assign_revision_free(keys, 0, {"default": 0.5}, eligible=eligible)
    required = {k for k, free in flags.items() if not free}
    assert required == eligible  # wants 5, only 3 can be revision-required
    flags = assign_revision_free(keys, 0, {"default": 0.8}, eligible=set(keys[:6]))
    required = {k for k, free in flags.items() if not free}
    assert len(required) == 2 and required <= set(keys[:6])
    draws = {frozenset(k for k, v in assign_revision_free(keys, s, {}, eligible=set(keys[:6]))
                       .items() if not v) for s in range(6)}
    assert len(draws) > 1 and all(d <= set(keys[:6]) for d in draws)


def test_stats_table_shape_and_text():
    raw = {"cardiomegaly_s1_positive_0": item("cardiomegaly_s1_positive_0", RR, "d1"),
           "cardiomegaly_s2_positive_0": item("cardiomegaly_s2_positive_0", RF, "d1"),
           "effusion_s3_negative_0": item("effusion_s3_negative_0", LF, "d2")}
    rows = stats_rows(parse_benchmark(raw, "x"))
    assert len(rows) == len(LESIONS) * 3 + 3 + 1
    assert all(tuple(r) == STATS_COLUMNS for r in rows)
    by = {(r["lesion"], r["path"]): r for r in rows}
    assert by[("cardiomegaly", RR)] | {} == {"lesion": "cardiomegaly", "path": RR, "cases": 1,
                                            "cxrs": 1, "qa_s1": 1, "qa_s2": 1, "qa_s3": 3,
                                            "qa_s4": 0, "qa_items": 5}
    assert by[("all", "all")]["cases"] == 3 and by[("all", "all")]["cxrs"] == 2
    assert by[("all", "all")]["qa_items"] == 5 + 2 + 1
    text = format_stats_table(rows).splitlines()
    assert text[0].split() == list(STATS_COLUMNS)
    assert text[-1].split() == ["all", "all", "3", "2", "3", "2", "3", "0", "8"]
