"""Stage 00 steps called from Python (chexpercept.curation.api), without the CLIs."""

from __future__ import annotations

from pathlib import Path

import pytest
from stage00_config import fixture_config

from chexpercept.curation import (
    distribute_labeling,
    generate_candidate_masks,
    merge_candidate_parts,
    prepare_negative_sheet,
    sample_mimic_ils_cases,
)
from chexpercept.errors import ConfigError, InputError
from chexpercept.files import read_csv_rows, read_json
from chexpercept.layouts import CurationLayout

_cfg = fixture_config


def test_stage00_steps_from_python(tmp_path, synth_paths):
    cfg = _cfg(tmp_path, synth_paths)
    out = tmp_path / "work" / "00_source_data_curation"
    layout = CurationLayout(out)
    log_dirs: list[Path] = []

    first = sample_mimic_ils_cases(cfg, on_log_dir=log_dirs.append)
    assert log_dirs == [out] and not first.reused and first.prepared.converted == len(first.images)
    assert (out / "run_meta.json").is_file() and str(out) in first.line()
    again = sample_mimic_ils_cases(cfg, skip_prepare=True)
    assert again.reused and again.images == first.images and again.prepared is None

    totals = []
    for part in (0, 1):
        report = generate_candidate_masks(cfg, part=part, total_parts=2)
        assert report.failed == [] and report.sheet == layout.positive_sheet(part)
        assert read_json(report.summary_json) == report.to_json()
        assert report.failure_counts() == (0, report.items, "pair(s)")
        totals.append(report.items)
    merged = merge_candidate_parts(layout.candidate_root, total_parts=2)
    assert merged.written and merged.rows == sum(totals)
    assert merged.line().endswith(f"({layout.candidate_root})")
    assert not merge_candidate_parts(layout.candidate_root, total_parts=2).written  # kept

    negatives = prepare_negative_sheet(cfg, samples_per_lesion=1)
    assert read_json(negatives.summary_json) == negatives.to_json()
    assert len(read_csv_rows(negatives.sheet)) == len(negatives.outcome.rows) == 7

    dealt = distribute_labeling(cfg, num_annotators=2)
    assert not dealt.merged and sum(dealt.counts["positive"].values()) == merged.rows
    assert dealt.lines()[-1].endswith(str(out / "distribute"))
    with pytest.raises(InputError, match="not reviewed"):  # nobody has reviewed yet
        distribute_labeling(cfg, num_annotators=2, merge=True)


def test_stage00_steps_check_their_settings(tmp_path, synth_paths):
    cfg = _cfg(tmp_path, synth_paths)
    with pytest.raises(ConfigError, match=r"--num-annotators must be in \[1, 26\], got 27"):
        distribute_labeling(cfg, num_annotators=27)
    with pytest.raises(InputError, match="run 00_sample_mimic_ils_case.py first"):
        generate_candidate_masks(cfg)
    bad = cfg.model_copy(update={"path": cfg.path.model_copy(
        update={"mimic_ils_path": str(tmp_path / "absent.json")})})
    with pytest.raises(InputError, match=r"path.mimic_ils_path in cfg/x.yaml"):
        sample_mimic_ils_cases(bad, config_path="cfg/x.yaml")
