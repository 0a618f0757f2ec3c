"""Stage 02 pipeline: selection, seeded split, outputs, determinism, workers and resume."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import qa_cases
from PIL import Image

from chexpercept.errors import SchemaError
from chexpercept.files import read_json
from chexpercept.layouts import QALayout
from chexpercept.qa import QAInputs, assign_revision_free, generate_qa, review
from chexpercept.schema import QA_LABELING_COLUMNS, load_benchmark, qa_path_of

RATIOS = {"default": 0.5, "cardiomegaly": 0.0}


def _inputs(paths: dict, out: Path, **overrides) -> QAInputs:
    kw = {"positive_annotation_csv": None, "negative_annotation_csv": None, **paths,
          "output_dir": out}
    kw.update(overrides)
    return QAInputs(**kw)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "logs" not in p.parts}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("qa")
    paths = qa_cases.build_inputs(root)
    out = root / "out"
    report = generate_qa(_inputs(paths, out), seed=0, ratios=RATIOS, num_workers=1)
    return root, paths, out, report


def test_outputs_validate_and_follow_sheet_order(built):
    _, _, out, report = built
    layout = QALayout(out)
    items = load_benchmark(layout.qa_results_json)
    assert list(items) == [*qa_cases.POSITIVES, *qa_cases.NEGATIVES]
    assert report.counts == {"built": 5, "reused": 0, "failed": 0, "excluded": 2}
    raw = read_json(layout.qa_results_json)
    text = layout.qa_results_json.read_text(encoding="utf-8")
    assert text == json.dumps(raw, indent=2, ensure_ascii=False) + "\n"
    for key, item in raw.items():
        assert item["pair_id"] == key.split("_", 1)[1]
        assert item["dicom_id"] == {**{k: d for k, (d, _) in qa_cases.POSITIVES.items()},
                                    **qa_cases.NEGATIVES}[key]


def test_paths_and_stages(built):
    _, _, out, _ = built
    raw = read_json(QALayout(out).qa_results_json)
    items = load_benchmark(QALayout(out).qa_results_json)
    paths = {k: qa_path_of(v) for k, v in items.items()}
    eff = [k for k in paths if k.startswith("effusion") and "positive" in k]
    assert sorted(paths[k] for k in eff) == ["revision_free", "revision_required"]
    assert paths["cardiomegaly_s50000003_positive_0"] == "revision_required"
    for key in qa_cases.NEGATIVES:
        assert paths[key] == "lesion_free"
        assert list(raw[key]) == ["detection_qa", "pair_id", "dicom_id"]
    rf = next(k for k in eff if paths[k] == "revision_free")
    assert "contour_revision_qa_expansion" not in raw[rf]["contour_qa"]
    assert raw[rf]["attribute_extraction_qa"] is not None
    card = raw["cardiomegaly_s50000003_positive_0"]
    assert card["attribute_extraction_qa"] is None
    assert card["contour_qa"]["contour_revision_qa_revision_result"]


def test_summary_lists_excluded_and_counts(built):
    _, _, out, _ = built
    summary = read_json(QALayout(out).summary_json)
    excluded = {e["key_id"]: e["reason"] for e in summary["excluded"]}
    assert set(excluded) == {qa_cases.MISSING_KEY, qa_cases.FAILED_KEY}
    assert "qa_deformation_success" in excluded[qa_cases.FAILED_KEY]
    assert summary["per_lesion"]["effusion"] == {"revision_required": 1, "revision_free": 1,
                                                 "lesion_free": 1}
    assert summary["qa_items"] == 9 + 6 + 1 + 5 + 1
    assert summary["failed"] == []
    assert qa_cases.REJECTED_KEY not in json.dumps(summary)


def test_labeling_csv(built):
    _, _, out, _ = built
    with open(QALayout(out).qa_labeling_csv, newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == QA_LABELING_COLUMNS
        rows = list(reader)
    kinds = sorted((r["key_id"], r["qa_type"]) for r in rows)
    raw = read_json(QALayout(out).qa_results_json)
    rr_eff = next(k for k, v in raw.items() if k.startswith("effusion") and v.get("contour_qa")
                  and not v["contour_qa"]["no_deformation"])
    rf_eff = next(k for k, v in raw.items() if k.startswith("effusion") and v.get("contour_qa")
                  and v["contour_qa"]["no_deformation"])
    assert kinds == sorted([(rr_eff, "attribute_extraction"), (rr_eff, "deformation"),
                            (rf_eff, "attribute_extraction"),
                            ("cardiomegaly_s50000003_positive_0", "deformation")])
    for r in rows:
        assert r["plot_name"] == f"{r['key_id']}_{r['qa_type']}_qa.png"


def test_every_labeling_row_names_a_review_figure(built):
    # the release's sheet named figures nobody drew (docs/differences.md D29); ours exist
    _, _, out, _ = built
    layout = QALayout(out)
    with open(layout.qa_labeling_csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(p.name for p in layout.review_dir.iterdir()) == sorted(
        r["plot_name"] for r in rows)
    raw = read_json(layout.qa_results_json)
    for r in rows:
        figure = np.asarray(Image.open(layout.review_dir / r["plot_name"]).convert("RGB"))
        contour = raw[r["key_id"]]["contour_qa"]
        if r["qa_type"] == "attribute_extraction":
            assert figure.shape[1] == 2 * review.PANEL_PX
            continue
        result = contour["contour_revision_qa_revision_result"]
        assert figure.shape[1] == (1 + len(result["answer_options"])) * review.PANEL_PX
        # the true option's panel (panel 0 is the points image) is framed in green
        for i in range(1, 1 + len(result["answer_options"])):
            corner = tuple(figure[2, i * review.PANEL_PX + 2])
            assert (corner == review.TRUE_FRAME_RGB) == (i == result["answer_index"])


def test_review_figures_resume_and_opt_out(built, tmp_path):
    _, paths, out, _ = built
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    before = _tree(copy)
    figure = next(QALayout(copy).review_dir.glob("*_deformation_qa.png"))
    figure.unlink()
    report = generate_qa(_inputs(paths, copy), seed=0, ratios=RATIOS)
    assert (report.counts["built"], report.counts["reused"]) == (1, 4)
    assert _tree(copy) == before
    # resume checks the figures the sheet names, not the list the item file claims
    key = figure.name.removesuffix("_deformation_qa.png")
    item_file = QALayout(copy).item_json(key)
    record = json.loads(item_file.read_text())
    item_file.write_text(json.dumps({**record, "review_figures": []}))
    figure.unlink()
    report = generate_qa(_inputs(paths, copy), seed=0, ratios=RATIOS)
    assert (report.counts["built"], report.counts["reused"]) == (1, 4)
    assert _tree(copy) == before
    # without figures: none drawn, earlier ones removed, everything else unchanged
    report = generate_qa(_inputs(paths, copy), seed=0, ratios=RATIOS, review_figures=False)
    assert report.counts["reused"] == 5
    assert not list(QALayout(copy).review_dir.glob("*.png"))
    assert {k: v for k, v in _tree(copy).items() if "qa_visualizations" not in k} == {
        k: v for k, v in before.items() if "qa_visualizations" not in k}


def test_unwritable_review_folder_fails_the_cases_with_the_path(built, tmp_path):
    _, paths, _, _ = built
    out = tmp_path / "out"
    QALayout(out).review_dir.parent.mkdir(parents=True)
    QALayout(out).review_dir.write_text("a file where the folder should be")
    report = generate_qa(_inputs(paths, out), seed=0, ratios=RATIOS)
    failed = {f["key_id"]: f["reason"] for f in report.summary["failed"]}
    assert report.counts["built"] == 2  # the negatives have no figures
    assert len(failed) == 3
    assert all("cannot write" in r and "qa_visualizations" in r for r in failed.values())
    assert not any(QALayout(out).item_json(k).exists() for k in failed)


def test_two_workers_and_fresh_run_are_byte_identical(built, tmp_path):
    _, paths, out, _ = built
    other = tmp_path / "out2"
    generate_qa(_inputs(paths, other), seed=0, ratios=RATIOS, num_workers=2)
    a, b = _tree(out), _tree(other)
    assert a.keys() == b.keys()
    assert a == b


def test_resume_reuses_items_and_rebuilds_missing(built, tmp_path):
    _, paths, out, _ = built
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    before = _tree(copy)
    report = generate_qa(_inputs(paths, copy), seed=0, ratios=RATIOS)
    assert (report.counts["built"], report.counts["reused"]) == (0, 5)
    assert _tree(copy) == before
    key = "cardiomegaly_s50000003_positive_0"
    (copy / "chexpercept" / key / "contour_qa" / "contour_revision_qa" / "option_2.png").unlink()
    report = generate_qa(_inputs(paths, copy), seed=0, ratios=RATIOS)
    assert (report.counts["built"], report.counts["reused"]) == (1, 4)
    assert _tree(copy) == before


def test_changed_seed_rebuilds_and_stale_folders_are_removed(built, tmp_path):
    _, paths, out, _ = built
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    (copy / "chexpercept" / "edema_s9_positive_0").mkdir()
    report = generate_qa(_inputs(paths, copy), seed=7, ratios=RATIOS)
    assert report.counts["reused"] == 0
    assert not (copy / "chexpercept" / "edema_s9_positive_0").exists()


def test_missing_option_mask_is_listed_as_failed(tmp_path):
    paths = qa_cases.build_inputs(tmp_path)
    key = "cardiomegaly_s50000003_positive_0"
    (paths["deformed_mask_dir"] / key / "optimal_component_0.png").unlink()
    report = generate_qa(_inputs(paths, tmp_path / "out"), seed=0, ratios=RATIOS)
    failed = {f["key_id"]: f["reason"] for f in report.summary["failed"]}
    assert list(failed) == [key] and "optimal_component_0.png" in failed[key]
    assert key not in read_json(QALayout(tmp_path / "out").qa_results_json)
    assert not (tmp_path / "out" / "chexpercept" / key).exists()


def test_case_without_steps_is_forced_revision_free(tmp_path):
    paths = qa_cases.build_inputs(tmp_path)
    data = read_json(paths["deformation_results_json"])
    key = "cardiomegaly_s50000003_positive_0"
    data[key]["qa_deformation_results"] = {
        "expansion": {}, "contraction": {},
        "no_deformation": {"suboptimal_component_0": [{"suboptimal_component_id":
                                                       "suboptimal_component_0",
                                                       "mask_path": "optimal_component_0"}]}}
    paths["deformation_results_json"].write_text(json.dumps(data))
    report = generate_qa(_inputs(paths, tmp_path / "out"), seed=0, ratios=RATIOS)
    assert report.summary["forced_revision_free"] == [key]
    item = read_json(QALayout(tmp_path / "out").qa_results_json)[key]
    assert item["contour_qa"]["no_deformation"] is True


def test_annotation_csv_overrides_selection_only(tmp_path):
    paths = qa_cases.build_inputs(tmp_path)
    ann = tmp_path / "ann.csv"
    qa_cases.write_csv(ann, ["key_id", "optimal"],
                       [{"key_id": "effusion_s50000001_positive_0", "optimal": "y"},
                        {"key_id": "effusion_s50000005_positive_0", "optimal": "n"}])
    report = generate_qa(_inputs(paths, tmp_path / "out", positive_annotation_csv=ann),
                         seed=0, ratios=RATIOS)
    raw = read_json(QALayout(tmp_path / "out").qa_results_json)
    assert list(raw) == ["effusion_s50000001_positive_0", *qa_cases.NEGATIVES]
    assert raw["effusion_s50000001_positive_0"]["dicom_id"] == "dcm_eff1"
    assert report.counts["excluded"] == 0


def test_invalid_optimal_value_is_a_schema_error(tmp_path):
    paths = qa_cases.build_inputs(tmp_path)
    qa_cases.write_csv(paths["negative_labeling_sheet"], ["lesion", "key_id", "dicom_id",
                                                          "optimal?"],
                       [{"lesion": "edema", "key_id": "edema_s1_negative_0", "dicom_id": "d",
                         "optimal?": "maybe"}])
    with pytest.raises(SchemaError, match="maybe"):
        generate_qa(_inputs(paths, tmp_path / "out"), seed=0, ratios=RATIOS)


def _keys(lesion: str, n: int) -> list[str]:
    return [f"{lesion}_s{i:08d}_positive_0" for i in range(n)]


def test_revision_free_split_is_seeded_not_first_n():
    keys = _keys("edema", 20) + _keys("cardiomegaly", 10)
    flags = assign_revision_free(keys, 0, {"default": 0.5, "cardiomegaly": 0.2})
    edema = [k for k in keys if k.startswith("edema")]
    assert sum(flags[k] for k in edema) == 10
    assert sum(flags[k] for k in keys if k.startswith("cardio")) == 2
    assert assign_revision_free(keys, 0, {"default": 0.5, "cardiomegaly": 0.2}) == flags
    firsts = [all(assign_revision_free(edema, s, {"default": 0.5})[k] for k in edema[:10])
              for s in range(5)]
    assert not all(firsts)
    splits = {frozenset(k for k, v in assign_revision_free(edema, s, {}).items() if v)
              for s in range(5)}
    assert len(splits) > 1  # the seed decides (default ratio 0.5 without a config key)


def test_split_ratio_rounding():
    assert sum(assign_revision_free(_keys("edema", 3), 0, {"default": 0.5}).values()) == 2
    assert sum(assign_revision_free(_keys("edema", 3), 0, {"edema": 1.0}).values()) == 3
    assert sum(assign_revision_free(_keys("edema", 3), 0, {"edema": 0.0}).values()) == 0


def test_zero_positive_zones_case_is_listed_as_failed(tmp_path):
    paths = qa_cases.build_inputs(tmp_path)
    data = read_json(paths["deformation_results_json"])
    key = "effusion_s50000001_positive_0"
    for info in data[key]["geometrical_mask_infos"]:
        for region in info["overlap"]["lung_regions"].values():
            region["has_overlap"] = False
    paths["deformation_results_json"].write_text(json.dumps(data))
    report = generate_qa(_inputs(paths, tmp_path / "out"), seed=0, ratios=RATIOS)
    failed = {f["key_id"]: f["reason"] for f in report.summary["failed"]}
    assert list(failed) == [key] and "0 positive zones" in failed[key]
    assert key not in read_json(QALayout(tmp_path / "out").qa_results_json)
