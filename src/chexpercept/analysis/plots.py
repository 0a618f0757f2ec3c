"""Stage 04: the four all-models plots (``io.PLOT_NAMES``) in ``all_models_oracle_<setting>/``.

Layout, colours and formats follow original_release_spec.md section 6 "Plots" (matplotlib Agg,
dpi 150). An empty bucket (NaN) is drawn as "n/a", never as 0 (defect 31). Figures are built
on ``matplotlib.figure.Figure`` with an Agg canvas (no pyplot global state), written without
the software-version metadata and with a fixed ``svg.hashsalt``, so re-runs are stable; PNG
bytes are not guaranteed identical across matplotlib versions.
"""

from __future__ import annotations

import io as _io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chexpercept import io
from chexpercept.analysis.metrics import REVISION_KEYS, RunMetrics
from chexpercept.lesions import QA_PATHS
from chexpercept.schema import ATTRIBUTE_KEYS

#: Resolution of every plot (spec section 6).
DPI = 150
#: Table colours (spec section 6): E2E rows, oracle rows, header.
E2E_COLOR = "#D6E4F7"
ORACLE_COLOR = "#FAD9D9"
HEADER_COLOR = "#2C3E50"
PATH_TITLES = {"revision_required": "Rev.Required", "revision_free": "Rev.Free",
               "lesion_free": "LesionFree"}
TABLE_COLUMNS = ("Model", "Setting", "Stage1 (Detection)", "Stage2 (ContourEval)",
                 "Stage3 (Revision)", "Stage4 (Attribute)", "Depth")
REVISION_LABELS = ("Expansion", "Contraction", "Rev.Result")
ATTRIBUTE_LABELS = ("Distribution", "Location", "Severity/Meas.", "Comparison")
_RC = {"svg.hashsalt": "chexpercept", "font.size": 9}
_PNG_METADATA = {"Software": None}


def _isnan(value: float) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _save(fig: Any, path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = _io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata=_PNG_METADATA)
    io.write_bytes_atomic(path, buf.getvalue())
    return path


def _stage_accuracy(all_metrics: Sequence[RunMetrics], oracle_setting: str, path: Path) -> Path:
    from matplotlib.figure import Figure

    n_rows = max(1, 2 * len(all_metrics))
    fig = Figure(figsize=(13, 1.2 + 3 * (0.9 + 0.28 * n_rows)))
    axes = fig.subplots(len(QA_PATHS), 1)
    for ax, qa_path in zip(axes, QA_PATHS, strict=True):
        ax.axis("off")
        ax.set_title(PATH_TITLES[qa_path], fontweight="bold", loc="left")
        cells, colours = [], []
        for i, metrics in enumerate(all_metrics):
            for row in metrics.summary:
                if row["path"] != qa_path:
                    continue
                accs = [row[f"acc(stage{k})"] for k in range(1, 5)]
                cells.append([metrics.model, row["setting"],
                              *("n/a" if _isnan(a) else f"{100 * a:.1f}" for a in accs),
                              "n/a" if _isnan(row["depth"]) else f"{row['depth']:.2f}"])
                tint = E2E_COLOR if row["setting"] == "end_to_end" else ORACLE_COLOR
                colours.append([tint if i % 2 == 0 else "white"] * len(TABLE_COLUMNS))
        if not cells:
            ax.text(0.5, 0.5, "n/a", ha="center", va="center")
            continue
        model_w = min(0.4, max(0.14, 0.0075 * max(len(c[0]) for c in cells)))
        other_w = (1.0 - model_w) / (len(TABLE_COLUMNS) - 1)
        table = ax.table(cellText=cells, colLabels=list(TABLE_COLUMNS), cellColours=colours,
                         colWidths=[model_w] + [other_w] * (len(TABLE_COLUMNS) - 1),
                         loc="upper center", cellLoc="center")
        table.auto_set_font_size(False)
        table.set_fontsize(8)
        table.scale(1.0, 1.3)
        for col in range(len(TABLE_COLUMNS)):
            header = table[0, col]
            header.set_facecolor(HEADER_COLOR)
            header.get_text().set_color("white")
            header.get_text().set_fontweight("bold")
    fig.suptitle(f"CheXpercept stage accuracy (%) per path, oracle setting: {oracle_setting}",
                 fontweight="bold")
    fig.tight_layout()
    return _save(fig, path)


def _grouped_bars(models: Sequence[str], series: Sequence[Sequence[float]],
                  labels: Sequence[str], title: str, path: Path) -> Path:
    from matplotlib.figure import Figure

    n_models, n_series = len(models), len(labels)
    width = 0.8 / n_series
    fig = Figure(figsize=(max(6.0, 1.6 + 1.4 * n_models * n_series / 3), 5))
    ax = fig.subplots()
    for j, label in enumerate(labels):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(n_models)]
        values = [series[i][j] for i in range(n_models)]
        heights = [0.0 if _isnan(v) else 100 * v for v in values]
        bars = ax.bar(xs, heights, width=width, label=label)
        for bar, value in zip(bars, values, strict=True):
            text = "n/a" if _isnan(value) else f"{100 * value:.1f}"
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() + 1, text,
                    ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(n_models))
    ax.set_xticklabels(models, rotation=30, ha="right")
    ax.set_ylim(0, 110)
    ax.set_ylabel("Accuracy (%)")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _depth_heatmap(all_metrics: Sequence[RunMetrics], oracle_setting: str, path: Path) -> Path:
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    models = [m.model for m in all_metrics]
    grid = np.full((len(QA_PATHS), len(models)), np.nan)
    for j, metrics in enumerate(all_metrics):
        for row in metrics.summary:
            if row["setting"] == "end_to_end":
                grid[QA_PATHS.index(row["path"]), j] = row["depth"]
    cmap = colormaps["YlGn"].with_extremes(bad="#DDDDDD")
    vmax = float(np.nanmax(grid)) if np.isfinite(grid).any() else 1.0
    fig = Figure(figsize=(max(5.0, 2.5 + 1.1 * len(models)), 3.6))
    ax = fig.subplots()
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=max(vmax, 1e-9),
                      aspect="auto")
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            value = grid[i, j]
            ax.text(j, i, "n/a" if np.isnan(value) else f"{value:.2f}", ha="center",
                    va="center", fontsize=8)
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(models, rotation=30, ha="right")
    ax.set_yticks(range(len(QA_PATHS)))
    ax.set_yticklabels([PATH_TITLES[p] for p in QA_PATHS])
    ax.set_title(f"End-to-end mean depth (oracle setting: {oracle_setting})")
    fig.colorbar(image, ax=ax, label="mean depth (stages)")
    fig.tight_layout()
    return _save(fig, path)


def write_plots(all_metrics: Sequence[RunMetrics], out_dir: str | Path,
                oracle_setting: str) -> list[Path]:
    """Draw the four release plots for the runs into ``out_dir``.

    ``plot_stage_accuracy.png`` (one table per path; rows model x setting), the grouped bars
    ``plot_contour_revision_detail.png`` (RR: expansion/contraction/revision result) and
    ``plot_attribute_extraction_detail.png`` (RR+RF: the four attributes), and
    ``plot_depth_heatmap.png`` (end-to-end mean depth, paths x models, YlGn, vmin 0).

    Args:
        all_metrics: Metrics of every run, in run order (at least one).
        out_dir: ``io.all_models_dir(output_dir, oracle_setting)``.
        oracle_setting: Stage 03 oracle setting (shown in titles).

    Returns:
        The four PNG paths, in ``io.PLOT_NAMES`` order.
    """
    import matplotlib

    out_dir = Path(out_dir)
    names = dict(zip(("stage", "revision", "attribute", "depth"), io.PLOT_NAMES, strict=True))
    models = [m.model for m in all_metrics]
    with matplotlib.rc_context(_RC):
        return [
            _stage_accuracy(all_metrics, oracle_setting, out_dir / names["stage"]),
            _grouped_bars(models, [[m.revision_detail[0][f"acc({k})"] for k in REVISION_KEYS]
                                   for m in all_metrics], REVISION_LABELS,
                          f"Contour revision detail, revision-required "
                          f"(oracle setting: {oracle_setting})",
                          out_dir / names["revision"]),
            _grouped_bars(models, [[m.attribute_detail[0][f"acc({k})"] for k in ATTRIBUTE_KEYS]
                                   for m in all_metrics], ATTRIBUTE_LABELS,
                          f"Attribute extraction detail, revision-required + revision-free "
                          f"(oracle setting: {oracle_setting})",
                          out_dir / names["attribute"]),
            _depth_heatmap(all_metrics, oracle_setting, out_dir / names["depth"]),
        ]
