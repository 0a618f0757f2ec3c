"""The Stage 00 config the curation tests run on the synthetic MIMIC fixtures (``synth_paths``)."""

from __future__ import annotations

from pathlib import Path

from chexpercept.config_schema import ChexperceptConfig


def fixture_config(tmp: Path, fx) -> ChexperceptConfig:
    """A config reading the fixtures ``fx`` and writing under ``tmp`` (2 positives, 1 negative
    per lesion, seed 0)."""
    return ChexperceptConfig.model_validate({"seed": 0, "path": {
        "mimic_cxr_jpg_path": str(fx.jpg_root), "mimic_cxr_path": str(tmp / "mimic_cxr"),
        "mimic_meta_path": str(fx.metadata_csv), "mimic_report_path": str(fx.report_root),
        "mimic_ils_path": str(fx.mimic_ils_json),
        "mimic_ils_seg_mask_path": str(fx.lesion_mask_root), "work_dir": str(tmp / "work")},
        "source_data_curation": {"max_samples_per_lesion": 2, "samples_per_lesion_negative": 1}})
