"""Stage 04 plot rendering paths (PIL table, raster-stamped labels) and memory helpers."""

from __future__ import annotations

import numpy as np
from PIL import Image

from chexpercept.analysis import analyse_chance, analyse_run_file, discover_runs
from chexpercept.analysis._memory import release_free_memory
from chexpercept.analysis.plots import (
    CHANCE_COLOR,
    E2E_COLOR,
    HEADER_COLOR,
    ORACLE_COLOR,
    _figure,
    _Label,
    _save,
    _stage_accuracy,
)


def _rgb(hex_colour):
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


def _pixels(path):
    return np.asarray(Image.open(path).convert("RGB"))


def test_stage_table_has_header_tints_and_chance_rows(tmp_path, builders):
    mk = builders.make_case
    builders.write_run(tmp_path, "dummy_baseline", [mk("effusion_s1_positive_0",
                                                       "revision_required")])
    (run,) = discover_runs(tmp_path, "implicit")
    a = analyse_run_file(run, n_boot=0, seed=0)
    path = _stage_accuracy([a.metrics], "implicit", tmp_path / "t.png",
                           analyse_chance(None, [a]))
    colours = {tuple(c) for c in _pixels(path).reshape(-1, 3)}
    for colour in (HEADER_COLOR, E2E_COLOR, ORACLE_COLOR, CHANCE_COLOR):
        assert _rgb(colour) in colours, colour
    assert (0, 0, 0) in colours  # cell text and borders


def test_labels_are_stamped_at_their_data_coordinates(tmp_path):
    def render(labels, name):
        fig = _figure((3, 2))
        ax = fig.subplots()
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 10)
        ax.axis("off")
        made = [_Label(ax, x, y, text, 12) for x, y, text in labels]
        return _pixels(_save(fig, tmp_path / name, made))

    blank = render([], "blank.png")
    marked = render([(2, 8, "88"), (8, 2, "n/a")], "marked.png")
    diff = (blank != marked).any(axis=2)
    height, width = diff.shape
    rows, cols = np.nonzero(diff)
    assert diff.any() and blank.min() == 255  # ink only where the labels are
    # one blob near (20%, 20% from the top), one near (80%, 80%)
    upper = (rows < height / 2) & (cols < width / 2)
    lower = (rows > height / 2) & (cols > width / 2)
    assert upper.any() and lower.any() and (upper | lower).all()
    assert abs(cols[upper].mean() / width - 0.2) < 0.1
    assert abs(rows[lower].mean() / height - 0.8) < 0.1


def test_release_free_memory_is_safe_to_call():
    release_free_memory()
    release_free_memory()
