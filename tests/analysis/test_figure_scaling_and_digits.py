"""Issue 23 item 7: the depth heatmap scaled per path, and chance values never printed as 0."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from chexpercept.analysis import analyse_chance, analyse_run_file, discover_runs, plots
from chexpercept.analysis.api import analyze
from chexpercept.analysis.release_tables import format_cell, format_number

RR, RF, LF = ("effusion_s1_positive_0", "effusion_s2_positive_0", "effusion_s3_negative_0")


@pytest.mark.parametrize(("value", "decimals", "text"), [
    (0.0, 1, "0.0"), (12.34, 1, "12.3"), (1.0, 1, "1.0"), (0.04, 1, "0.04"),
    (0.0976563, 1, "0.0977"), (5.96046e-06, 1, "5.96e-06"), (2.5, 2, "2.50"),
    (0.004, 2, "0.004"), (0.5, 6, "0.500000"), (1.2e-05, 6, "0.000012"),
    (5.96046e-08, 6, "5.96e-08")])
def test_format_number_keeps_small_values_non_zero(value, decimals, text):
    assert format_number(value, decimals) == text


def test_csv_cells_keep_tiny_values_and_empty_nan():
    assert format_cell(1.5e-10) == "1.5e-10" and float(format_cell(1.5e-10)) > 0
    assert format_cell(0.0) == "0.000000" and format_cell(0.25) == "0.250000"
    assert format_cell(float("nan")) is None


def test_depth_heatmap_colours_each_path_as_a_fraction_of_its_maximum(tmp_path, builders,
                                                                      monkeypatch):
    mk = builders.make_case
    builders.write_run(tmp_path, "dummy_baseline", [mk(RR, "revision_required"),
                                                    mk(RF, "revision_free"),
                                                    mk(LF, "lesion_free")])
    (run,) = discover_runs(tmp_path, "implicit")
    a = analyse_run_file(run, n_boot=0, seed=0)
    raw, fraction = plots.depth_grid([a.metrics])
    assert raw[:, 0].tolist() == [4.0, 3.0, 1.0]  # all correct: each path's maximum
    assert fraction[:, 0].tolist() == [1.0, 1.0, 1.0]
    seen = {}

    def capture(fig, path, labels=()):
        seen["fig"], seen["labels"] = fig, [lab.text for lab in labels]
        return path

    monkeypatch.setattr(plots, "_save", capture)
    plots._depth_heatmap([a.metrics], "implicit", tmp_path / "d.png",
                         analyse_chance(None, [a]))
    heat, bar = seen["fig"].axes
    mesh = heat.collections[0]
    assert mesh.get_clim() == (0, 1)
    colours = np.asarray(mesh.get_array())
    assert colours[:, 0].tolist() == [1.0, 1.0, 1.0]  # a perfect lesion-free row is as dark
    assert seen["labels"][::2] == ["4.00", "3.00", "1.00"]  # raw depths printed
    assert bar.get_ylabel() == "fraction of the path's maximum depth"
    assert "coloured per path" in heat.get_title().replace("\n", " ")
    assert [t.get_text() for t in heat.get_yticklabels()][-1].endswith("(max 1)")


def test_tiny_chance_values_are_never_printed_as_zero(tmp_path, builders, bench_builder):
    """RR effusion with 10 contour points: chance of e2e stage 3 is 1/4 * 2**-20 / 4."""
    results = tmp_path / "results"
    builders.write_run(results, "dummy_baseline", [builders.make_case(RR, "revision_required")])
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "chexpercept.json").write_text(
        json.dumps({RR: bench_builder("revision_required", n_points=10)}), encoding="utf-8")
    out = tmp_path / "out"
    analyze(results, "implicit", output_dir=out, benchmark_dir=bench, bootstrap=0,
            viewer=False, jobs=1)
    expected = 0.25 * 2.0 ** -20 / 4
    with (out / "all_models_oracle_implicit" / "stage_accuracy_ci.csv").open() as fh:
        rows = {(r["path"], r["setting"], r["metric"]): r["value"]
                for r in csv.DictReader(fh) if r["model"] == "chance"}
    text = rows[("revision_required", "end_to_end", "acc(stage3)")]
    assert text == "5.96e-08" and float(text) == pytest.approx(expected, rel=1e-3)
    assert float(rows[("revision_required", "end_to_end", "acc(stage4)")]) > 0
    report = (out / "all_models_oracle_implicit" / "report.md").read_text(encoding="utf-8")
    chance_rows = [line for line in report.splitlines()
                   if line.startswith("| chance | end_to_end |")]
    assert "5.96e-06" in chance_rows[0]  # percent, in the revision-required table
    assert "| 0.0 |" not in chance_rows[0]
