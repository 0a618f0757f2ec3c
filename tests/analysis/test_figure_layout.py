"""Stage 04 figures lay out for 1 to 20 runs with long names: no text leaves the figure and no
title overlaps other text (checked on the extents matplotlib draws), funnel ticks name the
path's stages, and the PIL stage table is never narrower than its title."""

from __future__ import annotations

import random

import matplotlib.text
import pytest
from PIL import Image

from chexpercept.analysis import analyse_chance, analyse_run_file, discover_runs
from chexpercept.analysis import plots as plots_module
from chexpercept.analysis.plots import (
    TABLE_TITLE_PT,
    _font,
    wrap_label,
    write_plots,
)
from chexpercept.lesions import LESIONS, QA_PATHS

LONG = ("openai_gpt-5.4-2026-03-05-preview-with-a-very-long-suffix_no_thinking",
        "vllm_Qwen--Qwen3.6-27B-Instruct-AWQ_no_thinking", "gemini_gemini-3.1-pro",
        "hf_google--medgemma-27b-it-and-then-some-more-words")


def _runs(tmp_path, builders, n_runs):
    rng = random.Random(n_runs)
    for r in range(n_runs):
        cases = []
        for lesion in LESIONS:
            for path in QA_PATHS:
                for i in range(2):
                    kind = "negative" if path == "lesion_free" else "positive"
                    key = f"{lesion}_s{r}{len(cases)}{i}_{kind}_0"
                    cases.append(builders.make_case(
                        key, path, s1=rng.random() < .7, s2=rng.random() < .6,
                        s3=rng.random() < .5, s4=rng.random() < .5))
        name = f"{LONG[r % len(LONG)]}-{r}" if n_runs > 1 else LONG[0]
        builders.write_run(tmp_path, name, cases)
    runs = discover_runs(tmp_path, "implicit")
    analyses = [analyse_run_file(run, n_boot=20, seed=0) for run in runs]
    return analyses, analyse_chance(None, analyses)


def _overlap(a, b, slack=0.5):
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > slack
            and min(a.y1, b.y1) - max(a.y0, b.y0) > slack)


def _check_figure(fig, drawn, name):
    """Every drawn text inside the figure; titles overlap nothing; unrotated tick labels of
    one axis do not overlap each other."""
    renderer = fig.canvas.get_renderer()
    width, height = fig.canvas.get_width_height(physical=True)
    texts = [t for t in drawn if t.get_figure(root=True) is fig and t.get_text().strip()]
    extents = {id(t): t.get_window_extent(renderer) for t in texts}
    for t in texts:
        bb = extents[id(t)]
        assert bb.x0 >= -1 and bb.y0 >= -1 and bb.x1 <= width + 1 and bb.y1 <= height + 1, \
            f"{name}: text {t.get_text()!r} leaves the figure ({bb} vs {width}x{height})"
    titles = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        titles += [ax.title, ax._left_title, ax._right_title]
    titles = [t for t in titles if id(t) in extents]
    for title in titles:
        for other in texts:
            if other is not title:
                assert not _overlap(extents[id(title)], extents[id(other)]), \
                    f"{name}: title {title.get_text()!r} overlaps {other.get_text()!r}"
    for ax in fig.axes:
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            # axis-aligned boxes of rotated labels overlap even where the glyphs do not
            shown = [t for t in labels if id(t) in extents and t.get_rotation() % 90 == 0]
            for i, a in enumerate(shown):
                for b in shown[i + 1:]:
                    assert not _overlap(extents[id(a)], extents[id(b)], slack=1.0), \
                        f"{name}: tick labels {a.get_text()!r} and {b.get_text()!r} overlap"


@pytest.mark.parametrize("n_runs", [1, 14, 20])
def test_figures_lay_out_for_many_runs_with_long_names(tmp_path, builders, monkeypatch,
                                                       n_runs):
    analyses, chance = _runs(tmp_path / "runs", builders, n_runs)
    drawn: list = []
    original_draw = matplotlib.text.Text.draw

    def recording_draw(self, renderer):
        drawn.append(self)
        return original_draw(self, renderer)

    checked = []
    original_save = plots_module._save

    def checking_save(fig, path, labels=()):
        drawn.clear()
        fig.canvas.draw()
        _check_figure(fig, list(drawn), path.name)
        checked.append(path.name)
        return original_save(fig, path, labels)

    monkeypatch.setattr(matplotlib.text.Text, "draw", recording_draw)
    monkeypatch.setattr(plots_module, "_save", checking_save)
    out = tmp_path / "out"
    written = write_plots([a.metrics for a in analyses], out, "implicit", analyses=analyses,
                          chance=chance)
    assert len(written) == 6 and len(checked) == 5  # the stage table is drawn by PIL
    table = Image.open(written[0])
    title = "CheXpercept stage accuracy (%) per path, oracle setting: implicit"
    assert table.width >= _font(True, TABLE_TITLE_PT).getlength(title)


def test_funnel_ticks_name_the_stages_each_path_asks(tmp_path, builders, monkeypatch):
    analyses, chance = _runs(tmp_path / "runs", builders, 1)
    ticks = {}
    original_save = plots_module._save

    def capture(fig, path, labels=()):
        if path.name == plots_module.FUNNEL_PNG:
            fig.canvas.draw()
            for ax in fig.axes:
                ticks[ax.get_title()] = [t.get_text() for t in ax.get_xticklabels()]
        return original_save(fig, path, labels)

    monkeypatch.setattr(plots_module, "_save", capture)
    write_plots([a.metrics for a in analyses], tmp_path / "out", "none", analyses=analyses,
                chance=chance)
    assert ticks["Rev.Required"] == ["start", "S1", "S2", "S3", "S4"]
    assert ticks["Rev.Free"] == ["start", "S1", "S2", "S4"]  # the third step is stage 4
    assert ticks["LesionFree"] == ["start", "S1"]


def test_wrap_label_breaks_long_names_at_separators():
    assert wrap_label("dummy_baseline") == "dummy_baseline"
    wrapped = wrap_label("openai_gpt-5.4-2026-03-05_no_thinking")
    assert wrapped.replace("\n", "") == "openai_gpt-5.4-2026-03-05_no_thinking"
    assert all(len(line) <= 22 for line in wrapped.split("\n"))
    long = wrap_label("x_" * 60)
    assert len(long.split("\n")) == 3 and long.split("\n")[-1].startswith("\u2026")
