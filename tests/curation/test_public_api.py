"""Stage 00 on a public source from Python: nih-cxr14 sampling, preparation, box candidates.

The tables are the real ones shipped with torchxrayvision; the images are SYNTHETIC stand-ins
written at the real box geometry (chexpercept.synth.stand_ins), as the public smoke run does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chexpercept.config_schema import ChexperceptConfig
from chexpercept.curation import (
    generate_candidate_masks,
    prepare_negative_sheet,
    sample_mimic_ils_cases,
)
from chexpercept.curation.public import plan_public_sample, source_images
from chexpercept.curation.sources import Box, installed_tables_dir
from chexpercept.errors import ConfigError, InputError
from chexpercept.files import read_csv_rows, read_json
from chexpercept.layouts import CurationLayout
from chexpercept.synth.stand_ins import WATERMARK, write_stand_ins

pytestmark = pytest.mark.skipif(installed_tables_dir() is None,
                                reason="torchxrayvision (with its data tables) not installed")


def _cfg(tmp: Path, path: dict | None = None, **cur) -> ChexperceptConfig:
    root = tmp / "nih"
    return ChexperceptConfig.model_validate({"seed": 0, "path": {
        "nih_cxr14_path": str(root), "mimic_cxr_path": str(tmp / "cxr"),
        "chexmask_path": str(root / "anatomy" / "chexmasku"), "work_dir": str(tmp / "work"),
        **(path or {})},
        "source_data_curation": {"source": "nih-cxr14", "max_samples_per_lesion": 2,
                                 "samples_per_lesion_negative": 1, "segmenter": "box-anatomy",
                                 **cur}})


def _stand_ins(cfg: ChexperceptConfig) -> Path:
    _, sel = plan_public_sample(cfg)
    cases = {}
    for im in source_images(sel):
        cases[im.dicom_id] = [(les, (b.x0, b.y0, b.x1, b.y1))
                              for les, entries in sel.global_info.items() for e in entries
                              if e["dicom_id"] == im.dicom_id
                              for b in map(Box.from_json, e["boxes"])]
    return write_stand_ins(cfg.path.nih_cxr14_path, cases, seed=cfg.seed)


def test_public_stage00_from_python(tmp_path):
    cfg = _cfg(tmp_path)
    manifest = read_json(_stand_ins(cfg))
    assert manifest["synthetic"] is True and "not a nih-cxr14 image" in manifest["note"]
    assert WATERMARK == "SYNTHETIC STAND-IN"
    layout = CurationLayout(tmp_path / "work" / "00_source_data_curation")

    report = sample_mimic_ils_cases(cfg)
    assert not report.reused and report.prepared.converted == len(report.images) == 15
    summary = read_json(layout.sampling_summary)
    nih = summary["sources"]["nih-cxr14"]
    assert nih["lesions_lacking"] == ["consolidation", "edema"]
    assert nih["licence"]["category"] == "redistributable"
    assert sum(len(d["rows"]) for d in summary["dropped"]) == 262
    sources = read_json(layout.data_sources)
    # the pixels are the stand-ins', so NIH's licence is not claimed for them (issue 29)
    nih_record = sources["sources"]["nih-cxr14"]
    assert nih_record["pixels"] == "synthetic" and "not a nih-cxr14 image" in \
        nih_record["pixels_note"]
    assert nih_record["licence"].startswith("image ids and boxes: released by the NIH")
    assert "pixels: synthetic stand-ins" in nih_record["licence"]
    assert set(sources["dicom_sources"].values()) == {"nih-cxr14"}
    assert len(sources["dicom_sources"]) == 15
    listed = read_csv_rows(layout.sampled_dicoms)
    assert [r["dicom_id"] for r in listed] == sorted(sources["dicom_sources"])
    first_info = layout.segmentation_info("global").read_bytes()
    again = sample_mimic_ils_cases(cfg)
    assert again.reused and again.prepared.converted == 0
    forced = sample_mimic_ils_cases(cfg, force=True)
    assert not forced.reused and layout.segmentation_info("global").read_bytes() == first_info

    cand = generate_candidate_masks(cfg)
    assert cand.failed == [] and cand.processed == 10
    rows = read_csv_rows(cand.sheet)
    assert {r["target"] for r in rows} == {"atelectasis", "cardiomegaly", "effusion",
                                           "opacity", "pneumonia"}
    assert all(r["optimal?"] == "" for r in rows)  # candidates wait for the expert review
    text = read_json(layout.candidate_text(rows[0]["target"], rows[0]["pair_id"]))
    assert text["segmenter"] == "box-anatomy"
    negatives = prepare_negative_sheet(cfg)
    assert len(negatives.outcome.rows) == 5 and set(negatives.outcome.shortfalls) == {
        "consolidation", "edema"}


def test_a_missing_stand_in_fails_stage00_naming_it(tmp_path):
    cfg = _cfg(tmp_path)
    with pytest.raises(InputError, match=r"15 sampled image\(s\) missing"):
        sample_mimic_ils_cases(cfg)


def test_source_lists_that_cannot_be_combined_are_refused(tmp_path):
    for source, match in ((["nih-cxr14", "mimic-ils"], "mimic-ils cannot be combined"),
                          (["nih-cxr14", "rsna-pneumonia"], "patients cannot be kept apart"),
                          (["vindr-cxr", "vindr-cxr"], "listed twice")):
        cfg = _cfg(tmp_path, {"mimic_ils_path": "ils.json"}, source=source)
        with pytest.raises(ConfigError, match=match):
            sample_mimic_ils_cases(cfg)


def test_config_source_keys(tmp_path):
    cfg = _cfg(tmp_path)
    assert cfg.source_data_curation.source == ["nih-cxr14"] and cfg.path.mimic_ils_path is None
    with pytest.raises(ValueError, match="source"):
        _cfg(tmp_path, source="chexpert")
    with pytest.raises(ValueError, match="mimic_ils_path"):  # required again with mimic-ils
        _cfg(tmp_path, source=["mimic-ils"])
    mimic = ChexperceptConfig.model_validate({"path": {"mimic_cxr_path": "x",
                                                       "mimic_ils_path": None}})
    with pytest.raises(ConfigError, match="path.mimic_ils_path must be set"):
        sample_mimic_ils_cases(mimic, output_dir=tmp_path / "o")


@pytest.mark.parametrize("source,key,layout,size", [
    ("vindr-cxr", "vindr_cxr_path", "train/{id}.png", (3200, 2800)),
    ("rsna-pneumonia", "rsna_pneumonia_path", "stage_2_train_images/{id}.png", (1024, 1024))])
def test_other_sources_through_stage00_on_blank_images(tmp_path, source, key, layout, size):
    """Real VinDr-CXR / RSNA rows, blank PNG stand-ins, all-lung anatomy in the working frame."""
    import numpy as np

    from chexpercept.images import write_png_atomic

    anat = tmp_path / "anat"
    cfg = ChexperceptConfig.model_validate({"seed": 0, "path": {
        key: str(tmp_path / "dl"), "mimic_cxr_path": str(tmp_path / "cxr"),
        "work_dir": str(tmp_path / "work")},
        "source_data_curation": {"source": source, "max_samples_per_lesion": 1,
                                 "samples_per_lesion_negative": 1, "segmenter": "box-anatomy",
                                 "box_anatomy_path": str(anat), "box_anatomy_frame": "work"}})
    _, sel = plan_public_sample(cfg)
    full = np.full((1024, 1024), 255, np.uint8)
    for im in source_images(sel):
        write_png_atomic(tmp_path / "dl" / layout.format(id=im.dicom_id),
                         np.full(size[::-1], 90, np.uint8))
        for name in ("right_lung", "left_lung", "heart"):
            write_png_atomic(anat / im.dicom_id / f"{name}.png", full)
    report = sample_mimic_ils_cases(cfg)
    assert report.prepared.converted == len(report.images)
    summary = read_json(CurationLayout(tmp_path / "work" / "00_source_data_curation")
                        .sampling_summary)
    assert summary["sources"][source]["notes"]
    cand = generate_candidate_masks(cfg)
    assert cand.failed == [] and cand.processed == sum(map(len, sel.global_info.values()))


def test_data_sources_and_card_say_synthetic_only_for_synthetic_pixels():
    from chexpercept.curation.public import data_sources_record
    from chexpercept.curation.sources.nih import LICENCE
    from chexpercept.qa.hf_export import dataset_card

    real = data_sources_record([LICENCE], {"00000001_000": "nih-cxr14"})
    fake = data_sources_record([LICENCE], {"00000001_000": "nih-cxr14"},
                               {"nih-cxr14": "SYNTHETIC STAND-INS: ..."})
    assert real["sources"]["nih-cxr14"] == LICENCE.to_json()  # real NIH images: NIH's terms
    assert fake["sources"]["nih-cxr14"]["pixels"] == "synthetic"
    from chexpercept.lesions import LESIONS, QA_PATHS

    stats = [{"lesion": les, "path": path, "cases": 0, "qa_items": 0, "cxrs": 1}
             for les in (*LESIONS, "all") for path in (*QA_PATHS, "all")]

    def card(record):
        bundle = {"category": "redistributable", "mixed": False,
                  "sources": {n: {**r, "cases": 1} for n, r in record["sources"].items()}}
        return dataset_card(stats, bundle, 1)

    assert "SYNTHETIC stand-ins" not in card(real) and "pixels: synthetic" not in card(real)
    text = card(fake)
    assert "**The images of this dataset are SYNTHETIC stand-ins generated by CheXpercept" in text
    assert "only the image ids and boxes come from NIH ChestX-ray14" in text
    assert "  - pixels: synthetic (SYNTHETIC STAND-INS: ...)" in text


def test_synthetic_pixels_note_reads_the_stand_ins_manifest(tmp_path):
    from chexpercept.curation.public import synthetic_pixels_note
    from chexpercept.errors import SchemaError
    from chexpercept.synth.stand_ins import MANIFEST  # the marker the stand-ins write

    assert synthetic_pixels_note(None) is None
    assert synthetic_pixels_note(tmp_path) is None  # a real download folder: no manifest
    (tmp_path / MANIFEST).write_text('{"synthetic": true, "note": "stand-ins"}')
    assert synthetic_pixels_note(tmp_path) == "stand-ins"
    (tmp_path / MANIFEST).write_text('{"synthetic": false}')
    assert synthetic_pixels_note(tmp_path) is None
    (tmp_path / MANIFEST).write_text('[1]')
    with pytest.raises(SchemaError, match=MANIFEST):
        synthetic_pixels_note(tmp_path)
