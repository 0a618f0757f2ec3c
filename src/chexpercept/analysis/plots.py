"""Stage 04: the release's four plots (``layouts.PLOT_NAMES``) and two more, in ``all_models_*/``.

Layout, colours and formats follow the original release's plots (dpi 150; docs/metrics.md,
"Output files"). An empty bucket (NaN) is drawn as "n/a", never as 0 (docs/differences.md
D43). Charts are built on ``matplotlib.figure.Figure`` with an Agg canvas (no pyplot global
state). Text-heavy parts are drawn with PIL's FreeType renderer in matplotlib's own DejaVu
Sans, because matplotlib 3.11 lays out and rasterises text glyph by glyph in Python (about
1 ms per string): the stage-accuracy table as a whole (:func:`_stage_accuracy`) and the
in-axes cell and bar labels (:class:`_Label`), stamped onto the rendered raster. PNGs carry
no metadata, so re-runs are byte-stable; bytes are not guaranteed identical across library
versions. Each figure's raster is encoded in place and freed before the next figure is built
(peak memory).
"""

from __future__ import annotations

import functools
import io
import math
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chexpercept.analysis._memory import release_free_memory
from chexpercept.analysis._workers import worker_pool
from chexpercept.analysis.case_table import MAX_DEPTH, REVISION_KEYS
from chexpercept.analysis.extended import RunAnalysis, model_colors
from chexpercept.analysis.release_tables import RunMetrics, format_number
from chexpercept.files import write_bytes_atomic
from chexpercept.layouts import PLOT_NAMES
from chexpercept.lesions import LESIONS, PATH_STAGES, QA_PATHS
from chexpercept.schema import ATTRIBUTE_KEYS

#: Resolution of every plot (the release's).
DPI = 150
#: Table colours (the release's): E2E rows, oracle rows, header.
E2E_COLOR = "#D6E4F7"
ORACLE_COLOR = "#FAD9D9"
HEADER_COLOR = "#2C3E50"
PATH_TITLES = {"revision_required": "Rev.Required", "revision_free": "Rev.Free",
               "lesion_free": "LesionFree"}
TABLE_COLUMNS = ("Model", "Setting", "Stage1 (Detection)", "Stage2 (ContourEval)",
                 "Stage3 (Revision)", "Stage4 (Attribute)", "Depth")
REVISION_LABELS = ("Expansion", "Contraction", "Rev.Result")
ATTRIBUTE_LABELS = ("Distribution", "Location", "Severity/Meas.", "Comparison")
CHANCE_COLOR = "#EEEEEE"
#: Table plot: cell text size, row height and title size in points (like the release's
#: ``table.set_fontsize(8)`` rows).
TABLE_FONT_PT = 8.0
TABLE_ROW_PT = 15.0
TABLE_TITLE_PT = 10.8
#: zlib level of every PNG (1-9): 6, PIL's default, takes about twice as long to encode these
#: flat-colour images for about 10% fewer bytes.
PNG_COMPRESS_LEVEL = 1
#: Plots added to the release's four (same folder).
LESION_HEATMAP_PNG = "plot_lesion_heatmap.png"
FUNNEL_PNG = "plot_e2e_funnel.png"
EXTRA_PLOT_NAMES = (LESION_HEATMAP_PNG, FUNNEL_PNG)
_RC = {"svg.hashsalt": "chexpercept", "font.size": 9}
#: Axes title size in points (matplotlib's ``large`` at font size 9), for wrapping titles.
_TITLE_PT = 10.8
#: Heatmap row labels: characters per line (two lines at most).
HEATMAP_LABEL_CHARS = 28
#: Legend columns of the funnel (below the panels).
FUNNEL_LEGEND_COLUMNS = 4


def _isnan(value: float) -> bool:
    return isinstance(value, float) and math.isnan(value)


#: Run names longer than this many characters are wrapped at ``_ - . /`` (tick labels and
#: legends), at most :data:`LABEL_LINES` lines; the middle of a longer name is elided.
LABEL_CHARS = 22
LABEL_LINES = 3


def wrap_label(name: str, width: int = LABEL_CHARS, max_lines: int = LABEL_LINES) -> str:
    """A run name wrapped onto lines of at most ``width`` characters (about), for plots.

    Breaks after ``_``, ``-``, ``.`` or ``/`` where it can, inside a word where it must; a
    name needing more than ``max_lines`` lines keeps its first ``max_lines - 1`` lines and
    its end, joined by an ellipsis (the full names are in the CSVs and report.md).

    Args:
        name: The label.
        width: Characters per line.
        max_lines: Lines at most (at least 1).

    Returns:
        The label with line breaks (unchanged when it fits on one line).
    """
    if len(name) <= width:
        return name
    tokens = re.findall(r"[^_\-./]*[_\-./]?", name)
    lines, line = [], ""
    for token in (t for t in tokens if t):
        while len(token) > width:  # a word longer than a line: hard split
            if line:
                lines.append(line)
                line = ""
            lines.append(token[:width])
            token = token[width:]
        if len(line) + len(token) > width:
            lines.append(line)
            line = ""
        line += token
    if line:
        lines.append(line)
    if len(lines) > max_lines:
        tail = name[-(width - 1):]
        lines = [*lines[:max_lines - 1], "\u2026" + tail]
    return "\n".join(lines)


def wrap_title(title: str, width_in: float, size_pt: float) -> str:
    """``title`` wrapped to fit ``width_in`` inches at ``size_pt``.

    DejaVu Sans averages about 0.6 em per character, bold included; 0.62 leaves a margin.
    """
    chars = max(20, int(width_in * 72 / (0.62 * size_pt)))
    return "\n".join(textwrap.wrap(title, chars)) if len(title) > chars else title


def _write_png(image: Any, path: Path) -> Path:
    """Encode a PIL image as PNG (no metadata, so re-runs give the same bytes) atomically."""
    buf = io.BytesIO()
    image.save(buf, format="png", compress_level=PNG_COMPRESS_LEVEL)
    write_bytes_atomic(path, buf.getvalue())
    return path


@dataclass(frozen=True)
class _Label:
    """A short annotation drawn onto the figure's raster after matplotlib renders it.

    Cell values of heatmaps and bar labels (hundreds per figure) cost about 1 ms each as
    matplotlib ``Text`` artists; rendered once per distinct string by PIL in the same font
    and alpha-blended into the raster (:func:`_stamp`) they cost a tenth of that. Labels
    take no part in the layout, so only in-axes annotations are drawn this way.

    Attributes:
        ax: The axes whose data coordinates ``x``/``y`` are.
        x: Anchor x in data coordinates.
        y: Anchor y in data coordinates.
        text: The label.
        size_pt: Font size in points.
        color: Any colour PIL accepts (``#rrggbb``, ``white`` ...).
        anchor: PIL anchor: ``mm`` centred (``ha=va="center"``), ``md`` centred above
            (``ha="center", va="bottom"``).
    """

    ax: Any
    x: float
    y: float
    text: str
    size_pt: float = 8.0
    color: str = "black"
    anchor: str = "mm"


def _figure(figsize: tuple[float, float]) -> Any:
    """A ``Figure`` of ``figsize`` inches at :data:`DPI` with its Agg canvas attached.

    Attached up front so that ``tight_layout`` measures text with the very renderer that
    :func:`_save` then draws with (otherwise it allocates a second full-size raster, which
    the measured texts keep alive).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path, labels: Sequence[_Label] = ()) -> Path:
    """Render ``fig`` (made by :func:`_figure`), stamp ``labels`` and write an RGBA PNG.

    The PNG is encoded straight from the renderer's buffer (no copy), which is released right
    after, so only one figure's raster is alive at a time.
    """
    import numpy as np
    from PIL import Image

    canvas = fig.canvas
    canvas.draw()
    width, height = canvas.get_width_height(physical=True)
    buffer = canvas.buffer_rgba()
    if labels:
        rgba = np.asarray(buffer)  # (height, width, 4) uint8 view of the raster
        for label in labels:
            x, y = label.ax.transData.transform((label.x, label.y))
            _stamp(rgba, label, x, height - y)
        del rgba
    out = _write_png(Image.frombuffer("RGBA", (width, height), buffer, "raw", "RGBA", 0, 1),
                     path)
    del buffer
    # Free the raster now rather than at a later gc pass: the canvas and every drawn text
    # hold the renderer; clearing the figure also breaks the artists' reference cycles.
    canvas.renderer = None
    fig.clear()
    release_free_memory()
    return out


@functools.lru_cache(maxsize=4096)
def _label_mask(text: str, size_pt: float, anchor: str) -> tuple[Any, int, int]:
    """Coverage of ``text`` rendered by PIL: ((h, w) float32 in [0, 1], left, top offsets).

    Offsets are in pixels from the anchor point (PIL's ``anchor`` semantics).
    """
    import numpy as np
    from PIL import Image, ImageDraw

    font = _font(False, size_pt)
    left, top, right, bottom = font.getbbox(text, anchor=anchor)
    mask = Image.new("L", (max(right - left, 1), max(bottom - top, 1)), 0)
    ImageDraw.Draw(mask).text((-left, -top), text, fill=255, font=font, anchor=anchor)
    return np.asarray(mask, dtype=np.float32)[:, :, None] / 255.0, left, top


def _stamp(rgba: Any, label: _Label, x: float, y: float) -> None:
    """Alpha-blend ``label``'s text onto the (H, W, 4) uint8 raster at pixel (x, y), y down."""
    from PIL import ImageColor

    mask, left, top = _label_mask(label.text, label.size_pt, label.anchor)
    x0, y0 = round(x) + left, round(y) + top
    h, w = mask.shape[:2]
    ya, yb, xa, xb = max(y0, 0), min(y0 + h, rgba.shape[0]), max(x0, 0), min(x0 + w, rgba.shape[1])
    if ya >= yb or xa >= xb:
        return
    cover = mask[ya - y0:yb - y0, xa - x0:xb - x0]
    region = rgba[ya:yb, xa:xb, :3]
    ink = ImageColor.getrgb(label.color)[:3]
    region[...] = (region * (1.0 - cover) + cover * ink + 0.5).astype(rgba.dtype)


def _chance_summary(chance: RunAnalysis | None) -> list[dict[str, Any]]:
    """Release-style summary rows (path x setting) of the chance baseline."""
    if chance is None:
        return []
    rows = []
    for qa_path in QA_PATHS:
        for setting, kind in (("end_to_end", "e2e"), ("oracle_passed", "oracle")):
            row = {"path": qa_path, "setting": setting,
                   "depth": chance.cells.get("all", qa_path, "depth")[0]}
            for k in range(1, 5):
                row[f"acc(stage{k})"] = chance.cells.get("all", qa_path, f"{kind}:stage{k}")[0]
            rows.append(row)
    return rows


def _table_rows(all_metrics: Sequence[RunMetrics], chance_rows: Sequence[dict[str, Any]],
                qa_path: str) -> list[tuple[list[str], str]]:
    """``(cell texts, background colour)`` of one path's table, models then chance."""
    out = []
    for i, metrics in enumerate(all_metrics):
        for row in metrics.summary:
            if row["path"] == qa_path:
                tint = E2E_COLOR if row["setting"] == "end_to_end" else ORACLE_COLOR
                out.append((_row_texts(metrics.model, row), tint if i % 2 == 0 else "white"))
    for row in chance_rows:
        if row["path"] == qa_path:
            out.append((_row_texts("chance (uniform guess)", row), CHANCE_COLOR))
    return out


def _row_texts(model: str, row: dict[str, Any]) -> list[str]:
    accs = [row[f"acc(stage{k})"] for k in range(1, 5)]
    return [model, row["setting"],
            *("n/a" if _isnan(a) else format_number(100 * a, 1) for a in accs),
            "n/a" if _isnan(row["depth"]) else format_number(row["depth"], 2)]


@functools.cache
def _font(bold: bool, size_pt: float) -> Any:
    """The DejaVu Sans bundled with matplotlib (the other plots' font), sized for :data:`DPI`."""
    import matplotlib
    from PIL import ImageFont

    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    # BASIC layout (kerning, no complex-script shaping) is all plot labels need; the raqm
    # engine would load HarfBuzz and FriBiDi, about 15 MiB resident.
    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name),
                              size_pt * DPI / 72, layout_engine=ImageFont.Layout.BASIC)


def _stage_accuracy(all_metrics: Sequence[RunMetrics], oracle_setting: str, path: Path,
                    chance: RunAnalysis | None = None) -> Path:
    """One table per path (rows model x setting), drawn directly with PIL.

    A table is text and flat cells, and matplotlib 3.11 rasterises text glyph by glyph in
    Python (about 1 ms per cell, most of the analysis's plotting time at 14 models), so the
    cells are drawn with PIL's FreeType renderer in the same font, colours and layout rules
    (the release's): about ten times faster and one RGB buffer instead of Agg's RGBA plus
    copies.
    """
    from PIL import Image, ImageDraw

    px = DPI / 72  # pixels per point
    cell_font, head_font = _font(False, TABLE_FONT_PT), _font(True, TABLE_FONT_PT)
    title_font = _font(True, TABLE_TITLE_PT)
    chance_rows = _chance_summary(chance)
    tables = [(qa_path, _table_rows(all_metrics, chance_rows, qa_path)) for qa_path in QA_PATHS]
    pad, row_h, margin = round(8 * px), round(TABLE_ROW_PT * px), round(12 * px)
    texts = [list(TABLE_COLUMNS)] + [c for _, rows in tables for c, _ in rows]
    widths = [max(cell_font.getlength(t[j]) for t in texts[1:]) if len(texts) > 1 else 0.0
              for j in range(len(TABLE_COLUMNS))]
    widths = [round(max(w, head_font.getlength(h)) + 2 * pad)
              for w, h in zip(widths, TABLE_COLUMNS, strict=True)]
    suptitle = f"CheXpercept stage accuracy (%) per path, oracle setting: {oracle_setting}"
    table_w = max(sum(widths), math.ceil(title_font.getlength(suptitle)))  # title never cut
    title_h, gap = round(TABLE_TITLE_PT * px * 2.2), round(TABLE_ROW_PT * px)
    height = margin + title_h + sum(title_h + row_h * (1 + max(len(rows), 1)) + gap
                                    for _, rows in tables) + margin
    image = Image.new("RGB", (table_w + 2 * margin, height), "white")
    draw = ImageDraw.Draw(image)
    draw.text(((table_w + 2 * margin) / 2, margin + title_h / 2), suptitle, fill="black",
              font=title_font, anchor="mm")
    y = margin + title_h
    for qa_path, rows in tables:
        draw.text((margin, y + title_h * 0.75), PATH_TITLES[qa_path], fill="black",
                  font=title_font, anchor="ls")
        y += title_h
        if not rows:
            draw.text((margin + table_w / 2, y + row_h), "n/a", fill="black", font=cell_font,
                      anchor="mm")
            y += 2 * row_h + gap
            continue
        lines = [(list(TABLE_COLUMNS), HEADER_COLOR, head_font, "white"),
                 *((cells, colour, cell_font, "black") for cells, colour in rows)]
        for cells, colour, font, ink in lines:
            x = margin
            for text, w in zip(cells, widths, strict=True):
                draw.rectangle((x, y, x + w, y + row_h), fill=colour, outline="black")
                draw.text((x + w / 2, y + row_h / 2), text, fill=ink, font=font, anchor="mm")
                x += w
            y += row_h
        y += gap
    out = _write_png(image, path)
    del image, draw
    release_free_memory()
    return out


def _grouped_bars(models: Sequence[str], series: Sequence[Sequence[float]],
                  labels: Sequence[str], title: str, path: Path,
                  bounds: Sequence[Sequence[tuple[float, float]]] | None = None) -> Path:
    """Grouped bars (percent) per model; ``bounds[i][j]`` = (low, high) draws an error bar.

    The last model may be ``chance (uniform guess)``: drawn hatched, without error bars.
    """
    n_models, n_series = len(models), len(labels)
    width = 0.8 / n_series
    fig = _figure((max(7.5, 1.6 + 0.9 * n_models * n_series / 3), 5 + _tick_room(models)))
    ax = fig.subplots()
    cell_labels: list[_Label] = []
    for j, label in enumerate(labels):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(n_models)]
        values = [series[i][j] for i in range(n_models)]
        heights = [0.0 if _isnan(v) else 100 * v for v in values]
        bars = ax.bar(xs, heights, width=width, label=label, color=f"C{j}")
        for i, bar in enumerate(bars):
            if models[i].startswith("chance"):
                bar.set_hatch("//")
                bar.set_alpha(0.5)
        if bounds is not None:
            lows = [bounds[i][j][0] for i in range(n_models)]
            highs = [bounds[i][j][1] for i in range(n_models)]
            keep = [i for i in range(n_models)
                    if not (_isnan(values[i]) or _isnan(lows[i]) or _isnan(highs[i]))]
            if keep:
                ax.errorbar([xs[i] for i in keep], [heights[i] for i in keep],
                            yerr=[[heights[i] - 100 * lows[i] for i in keep],
                                  [100 * highs[i] - heights[i] for i in keep]],
                            fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
        for i, (bar, value) in enumerate(zip(bars, values, strict=True)):
            text = "n/a" if _isnan(value) else format_number(100 * value, 1)
            top = bar.get_height()
            if bounds is not None and not _isnan(bounds[i][j][1]):
                top = max(top, 100 * bounds[i][j][1])
            cell_labels.append(_Label(ax, bar.get_x() + bar.get_width() / 2, top + 1, text,
                                      6, anchor="md"))
    ax.set_xticks(range(n_models))
    _model_ticks(ax, models)
    ax.set_ylim(0, 110)
    ax.set_ylabel("Accuracy (%)")
    ax.set_title("\n".join(wrap_title(line, fig.get_figwidth() - 1.2, _TITLE_PT)
                           for line in title.split("\n")))
    # outside the axes: never over a bar or its label
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return _save(fig, path, cell_labels)


def _tick_room(models: Sequence[str]) -> float:
    """Extra figure height (inches) for vertical, wrapped run names (:func:`_model_ticks`)."""
    return 1.3 if any(len(m) > LABEL_CHARS for m in models) else 0.0


def _model_ticks(ax: Any, models: Sequence[str]) -> None:
    """Run names as x tick labels of ``ax`` (ticks already set).

    At 30 degrees when every name is short, else wrapped (:func:`wrap_label`) and vertical,
    so that multi-line names never run into each other.
    """
    if all(len(m) <= LABEL_CHARS for m in models):
        ax.set_xticklabels(models, rotation=30, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticklabels([wrap_label(m) for m in models], rotation=90, ha="center",
                           va="top", multialignment="right")


def _heatmap(ax: Any, grid: Any, cmap: Any, vmin: float, vmax: float) -> Any:
    """Cells of ``grid`` (rows top to bottom) as one QuadMesh; NaN cells get the bad colour.

    A mesh of flat quads, unlike ``imshow``, needs no resampling of the image to the output
    resolution (which allocates float buffers of the figure's size).
    """
    import numpy as np

    mesh = ax.pcolormesh(np.ma.masked_invalid(grid), cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xlim(0, grid.shape[1])
    ax.set_ylim(grid.shape[0], 0)
    return mesh


def _percent_label(v: float) -> str:
    """A lesion-heatmap cell: whole percent, a non-zero value under 0.5 % with 3 digits."""
    if math.isnan(v):
        return "n/a"
    return f"{v:.0f}" if v == 0 or abs(v) >= 0.5 else format_number(v, 1)


def depth_grid(all_metrics: Sequence[RunMetrics], chance: RunAnalysis | None = None) -> Any:
    """End-to-end mean depth, paths (rows, ``QA_PATHS`` order) x models (chance last).

    Returns:
        ``(raw, fraction)``: (n_paths, n_models) float64 arrays, the mean depth in stages and
        the same divided by the path's maximum depth (``case_table.MAX_DEPTH``: 4 / 3 / 1 on
        revision-required / revision-free / lesion-free; docs/metrics.md, "Depth"), so each
        row is on [0, 1]; NaN where empty.
    """
    import numpy as np

    n_models = len(all_metrics) + (chance is not None)
    raw = np.full((len(QA_PATHS), n_models), np.nan)
    for j, metrics in enumerate(all_metrics):
        for row in metrics.summary:
            if row["setting"] == "end_to_end":
                raw[QA_PATHS.index(row["path"]), j] = row["depth"]
    if chance is not None:
        for i, qa_path in enumerate(QA_PATHS):
            raw[i, -1] = chance.cells.get("all", qa_path, "depth")[0]
    max_depth = np.array([MAX_DEPTH[p] for p in QA_PATHS], dtype=np.float64)
    return raw, raw / max_depth[:, None]


def _depth_heatmap(all_metrics: Sequence[RunMetrics], oracle_setting: str, path: Path,
                   chance: RunAnalysis | None = None) -> Path:
    """Mean depth per path and model, coloured as a fraction of the path's maximum depth.

    Each row is scaled by its path's maximum depth (:func:`depth_grid`), so a perfect
    lesion-free score (depth 1 of 1) is as dark as a perfect revision-required one (4 of 4);
    the cells print the raw mean depth (a tiny chance value with 3 significant digits).
    """
    import numpy as np
    from matplotlib import colormaps

    models = [m.model for m in all_metrics] + (["chance"] if chance is not None else [])
    raw, fraction = depth_grid(all_metrics, chance)
    cmap = colormaps["YlGn"].with_extremes(bad="#DDDDDD")
    fig = _figure((max(5.0, 2.5 + 1.1 * len(models)), 3.6 + _tick_room(models)))
    ax = fig.subplots()
    image = _heatmap(ax, fraction, cmap, 0, 1)
    cell_labels = [_Label(ax, j + 0.5, i + 0.5, "n/a" if np.isnan(v) else format_number(v, 2),
                          color="white" if not np.isnan(f) and f > 0.6 else "black")
                   for i, (row, frow) in enumerate(zip(raw.tolist(), fraction.tolist(),
                                                       strict=True))
                   for j, (v, f) in enumerate(zip(row, frow, strict=True))]
    ax.set_xticks([j + 0.5 for j in range(len(models))])
    _model_ticks(ax, models)
    ax.set_yticks([i + 0.5 for i in range(len(QA_PATHS))])
    ax.set_yticklabels([f"{PATH_TITLES[p]} (max {MAX_DEPTH[p]})" for p in QA_PATHS])
    ax.set_title(wrap_title(f"End-to-end mean depth, coloured per path (oracle setting: "
                            f"{oracle_setting})", fig.get_figwidth() - 2.5, _TITLE_PT))
    fig.colorbar(image, ax=ax, label="fraction of the path's maximum depth")
    fig.tight_layout()
    return _save(fig, path, cell_labels)


def _lesion_heatmap(analyses: Sequence[RunAnalysis], oracle_setting: str, path: Path) -> Path:
    """Oracle-passed accuracy per stage: models (rows) x lesions (columns), one panel per stage."""
    import numpy as np
    from matplotlib import colormaps

    names = [wrap_label(a.name, HEATMAP_LABEL_CHARS, 2) for a in analyses]
    cmap = colormaps["viridis"].with_extremes(bad="#DDDDDD")
    # rows tall enough for two-line names; room below for the rotated lesion names
    fig = _figure((4 * 4.2, 2.9 + 0.34 * len(names)))
    fig.set_layout_engine("constrained")
    axes = fig.subplots(1, 4, sharey=True)
    image = None
    cell_labels: list[_Label] = []
    for k, ax in enumerate(axes, start=1):
        grid = np.array([[a.cells.get(le, "all", f"oracle:stage{k}")[0] for le in LESIONS]
                         for a in analyses]) * 100
        image = _heatmap(ax, grid, cmap, 0, 100)
        cell_labels += [_Label(ax, j + 0.5, i + 0.5, _percent_label(v), 7,
                               "white" if not np.isnan(v) and v < 50 else "black")
                        for i, row in enumerate(grid.tolist()) for j, v in enumerate(row)]
        ax.set_title(f"Stage {k} ({TABLE_COLUMNS[1 + k].split('(')[1].rstrip(')')})")
        ax.set_xticks([j + 0.5 for j in range(len(LESIONS))])
        ax.set_xticklabels(LESIONS, rotation=40, ha="right", rotation_mode="anchor")
        ax.tick_params(axis="y", length=0)
    # the y axis is shared: set its ticks once (labels show on the first panel only)
    axes[0].set_yticks([i + 0.5 for i in range(len(names))])
    axes[0].set_yticklabels(names)
    fig.suptitle(f"Oracle-passed accuracy (%) by lesion, all paths asking the stage "
                 f"(oracle setting: {oracle_setting})", fontweight="bold")
    fig.colorbar(image, ax=list(axes), label="accuracy (%)", fraction=0.02)
    return _save(fig, path, cell_labels)  # labels are placed after the layout ran (draw)


def _funnel(analyses: Sequence[RunAnalysis], oracle_setting: str, path: Path) -> Path:
    """Share of cases still end-to-end correct after each stage, one panel per path."""
    colors = model_colors([a.name for a in analyses])
    ncol = min(len(analyses), FUNNEL_LEGEND_COLUMNS)
    legend_rows = math.ceil(len(analyses) / max(ncol, 1))
    fig = _figure((14, 4.8 + 0.36 * legend_rows))
    fig.set_layout_engine("constrained")
    axes = fig.subplots(1, len(QA_PATHS), sharey=True)
    for ax, qa_path in zip(axes, QA_PATHS, strict=True):
        levels = list(range(0, MAX_DEPTH[qa_path] + 1))
        for a in analyses:
            cells = [a.cells.get("all", qa_path, f"reach:{k}") for k in levels[1:]]
            ys = [100.0] + [100 * c[0] for c in cells]
            if all(_isnan(y) for y in ys[1:]):
                continue
            chance = a.run is None
            ax.plot(levels, ys, color=colors[a.name], linestyle="--" if chance else "-",
                    marker="o", markersize=3, linewidth=1.2,
                    label="chance (uniform guess)" if chance else wrap_label(a.name, 36, 2))
            # 95% intervals as plain vertical segments: one collection per model, where
            # errorbar() would add a line, two cap markers and a collection per call
            bars = [(k, 100 * c[1], 100 * c[2]) for k, c in zip(levels[1:], cells, strict=True)
                    if not (_isnan(c[1]) or _isnan(c[2]))]
            if bars:
                ax.vlines(*zip(*bars, strict=True), color=colors[a.name], linewidth=0.9)
        ax.set_xticks(levels)
        # level k = the path's k-th stage (revision-free: 1, 2, 4; docs/metrics.md, "Depth")
        ax.set_xticklabels(["start", *(f"S{s}" for s in PATH_STAGES[qa_path])])
        ax.set_xlabel("after stage (cardiomegaly: last level = bonus)")
        ax.set_title(PATH_TITLES[qa_path])
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("cases still correct end-to-end (%)")
    handles, labels = {}, {}
    for ax in axes:  # a run drawn in any panel (a path it has no cases of is skipped)
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
            labels.setdefault(label, label)
    if handles:
        fig.legend(list(handles.values()), list(labels.values()), loc="outside lower center",
                   ncol=min(len(handles), FUNNEL_LEGEND_COLUMNS), fontsize=7, frameon=False)
    fig.suptitle(f"End-to-end funnel (oracle setting: {oracle_setting})", fontweight="bold")
    return _save(fig, path)


def _bounds(analysis: RunAnalysis, keys: Sequence[str], paths: Sequence[str]
            ) -> list[tuple[float, float]]:
    return [analysis.cells.get("all", p, f"sub:{k}")[1:3] for k, p in zip(keys, paths,
                                                                          strict=True)]


def write_plots(all_metrics: Sequence[RunMetrics], out_dir: str | Path, oracle_setting: str,
                *, analyses: Sequence[RunAnalysis] | None = None,
                chance: RunAnalysis | None = None, jobs: int = 1) -> list[Path]:
    """Draw the four release plots for the runs into ``out_dir`` (plus two with ``analyses``).

    ``plot_stage_accuracy.png`` (one table per path; rows model x setting), the grouped bars
    ``plot_contour_revision_detail.png`` (RR: expansion/contraction/revision result) and
    ``plot_attribute_extraction_detail.png`` (RR+RF: the four attributes), and
    ``plot_depth_heatmap.png`` (end-to-end mean depth, paths x models, YlGn, each path's row
    coloured as the fraction of its maximum depth, 0 to 1, the raw depth printed).
    With ``analyses`` (same runs, same order) the bars get 95% bootstrap error bars and, with
    ``chance``, every plot a chance row/group; ``plot_lesion_heatmap.png`` (oracle-passed
    accuracy per stage, models x lesions) and ``plot_e2e_funnel.png`` (share of cases still
    end-to-end correct after each stage, per path, one colour per model) are added.

    Args:
        all_metrics: Metrics of every run, in run order (at least one).
        out_dir: ``layouts.all_models_dir(output_dir, oracle_setting)``.
        oracle_setting: Stage 03 oracle setting (shown in titles).
        analyses: The runs' :class:`RunAnalysis` (CIs, per-lesion cells, and the run labels
            every figure names the runs by), optional.
        chance: The chance baseline, optional.
        jobs: Worker processes drawing the figures (each figure is drawn whole by one; the
            files are byte-identical for any value).

    Returns:
        The PNG paths: ``layouts.PLOT_NAMES`` order, then :data:`EXTRA_PLOT_NAMES` with analyses.
    """
    out_dir = Path(out_dir)
    if analyses is not None:  # runs are named by their label (docs/metrics.md, "Run labels")
        all_metrics = [m if m.model == a.name else replace(m, model=a.name)
                       for m, a in zip(all_metrics, analyses, strict=True)]
    names = dict(zip(("stage", "revision", "attribute", "depth"), PLOT_NAMES, strict=True))
    models = [m.model for m in all_metrics]
    rev = [[m.revision_detail[0][f"acc({k})"] for k in REVISION_KEYS] for m in all_metrics]
    att = [[m.attribute_detail[0][f"acc({k})"] for k in ATTRIBUTE_KEYS] for m in all_metrics]
    rev_paths = ["revision_required"] * len(REVISION_KEYS)
    att_paths = ["all"] * len(ATTRIBUTE_KEYS)
    rev_bounds = att_bounds = None
    if analyses is not None:
        rev_bounds = [_bounds(a, REVISION_KEYS, rev_paths) for a in analyses]
        att_bounds = [_bounds(a, ATTRIBUTE_KEYS, att_paths) for a in analyses]
    if chance is not None:
        models = [*models, "chance (uniform guess)"]
        rev.append([chance.cells.get("all", p, f"sub:{k}")[0]
                    for k, p in zip(REVISION_KEYS, rev_paths, strict=True)])
        att.append([chance.cells.get("all", p, f"sub:{k}")[0]
                    for k, p in zip(ATTRIBUTE_KEYS, att_paths, strict=True)])
        nan = (math.nan, math.nan)
        if rev_bounds is not None:
            rev_bounds.append([nan] * len(REVISION_KEYS))
            att_bounds.append([nan] * len(ATTRIBUTE_KEYS))
    figures: list[tuple[str, tuple[Any, ...]]] = [
        ("stage", (all_metrics, oracle_setting, out_dir / names["stage"], chance)),
        ("bars", (models, rev, REVISION_LABELS,
                  f"Contour revision detail, revision-required\n"
                  f"(oracle setting: {oracle_setting})", out_dir / names["revision"],
                  rev_bounds)),
        ("bars", (models, att, ATTRIBUTE_LABELS,
                  f"Attribute extraction detail, revision-required + revision-free\n"
                  f"(oracle setting: {oracle_setting})", out_dir / names["attribute"],
                  att_bounds)),
        ("depth", (all_metrics, oracle_setting, out_dir / names["depth"], chance)),
    ]
    if analyses is not None:
        everyone = [*analyses, *([chance] if chance is not None else [])]
        figures.append(("lesion", (everyone, oracle_setting, out_dir / LESION_HEATMAP_PNG)))
        figures.append(("funnel", (everyone, oracle_setting, out_dir / FUNNEL_PNG)))
    if jobs <= 1:
        return [_draw(figure) for figure in figures]
    with worker_pool(min(jobs, len(figures))) as pool:
        return list(pool.map(_draw, figures))


#: Figure kind -> the function that draws and writes it (:func:`_draw`).
_DRAWERS = {"stage": _stage_accuracy, "bars": _grouped_bars, "depth": _depth_heatmap,
            "lesion": _lesion_heatmap, "funnel": _funnel}


def _draw(figure: tuple[str, tuple[Any, ...]]) -> Path:
    """Draw one figure of :func:`write_plots` (in this process or a worker) and write it."""
    import matplotlib

    kind, args = figure
    with matplotlib.rc_context(_RC):
        return _DRAWERS[kind](*args)
