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
from chexpercept.analysis.extended import RunAnalysis, model_colors
from chexpercept.analysis.metrics import REVISION_KEYS, RunMetrics
from chexpercept.analysis.tables import MAX_DEPTH
from chexpercept.lesions import LESIONS, QA_PATHS
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
CHANCE_COLOR = "#EEEEEE"
#: Plots added to the release's four (same folder).
LESION_HEATMAP_PNG = "plot_lesion_heatmap.png"
FUNNEL_PNG = "plot_e2e_funnel.png"
EXTRA_PLOT_NAMES = (LESION_HEATMAP_PNG, FUNNEL_PNG)
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


def _stage_accuracy(all_metrics: Sequence[RunMetrics], oracle_setting: str, path: Path,
                    chance: RunAnalysis | None = None) -> Path:
    from matplotlib.figure import Figure

    chance_rows = _chance_summary(chance)
    n_rows = max(1, 2 * len(all_metrics) + (2 if chance_rows else 0))
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
        for row in chance_rows:
            if row["path"] != qa_path:
                continue
            accs = [row[f"acc(stage{k})"] for k in range(1, 5)]
            cells.append(["chance (uniform guess)", row["setting"],
                          *("n/a" if _isnan(a) else f"{100 * a:.1f}" for a in accs),
                          "n/a" if _isnan(row["depth"]) else f"{row['depth']:.2f}"])
            colours.append([CHANCE_COLOR] * len(TABLE_COLUMNS))
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
    fig.subplots_adjust(left=0.02, right=0.98, top=0.95, bottom=0.01, hspace=0.15)
    return _save(fig, path)


def _grouped_bars(models: Sequence[str], series: Sequence[Sequence[float]],
                  labels: Sequence[str], title: str, path: Path,
                  bounds: Sequence[Sequence[tuple[float, float]]] | None = None) -> Path:
    """Grouped bars (percent) per model; ``bounds[i][j]`` = (low, high) draws an error bar.

    The last model may be ``chance (uniform guess)``: drawn hatched, without error bars.
    """
    from matplotlib.figure import Figure

    n_models, n_series = len(models), len(labels)
    width = 0.8 / n_series
    fig = Figure(figsize=(max(6.0, 1.6 + 1.4 * n_models * n_series / 3), 5))
    ax = fig.subplots()
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
            text = "n/a" if _isnan(value) else f"{100 * value:.1f}"
            top = bar.get_height()
            if bounds is not None and not _isnan(bounds[i][j][1]):
                top = max(top, 100 * bounds[i][j][1])
            ax.text(bar.get_x() + bar.get_width() / 2, top + 1, text,
                    ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(n_models))
    ax.set_xticklabels(models, rotation=30, ha="right")
    ax.set_ylim(0, 110)
    ax.set_ylabel("Accuracy (%)")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _depth_heatmap(all_metrics: Sequence[RunMetrics], oracle_setting: str, path: Path,
                   chance: RunAnalysis | None = None) -> Path:
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    models = [m.model for m in all_metrics] + (["chance"] if chance is not None else [])
    grid = np.full((len(QA_PATHS), len(models)), np.nan)
    for j, metrics in enumerate(all_metrics):
        for row in metrics.summary:
            if row["setting"] == "end_to_end":
                grid[QA_PATHS.index(row["path"]), j] = row["depth"]
    if chance is not None:
        for i, qa_path in enumerate(QA_PATHS):
            grid[i, -1] = chance.cells.get("all", qa_path, "depth")[0]
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


def _lesion_heatmap(analyses: Sequence[RunAnalysis], oracle_setting: str, path: Path) -> Path:
    """Oracle-passed accuracy per stage: models (rows) x lesions (columns), one panel per stage."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    names = [a.name for a in analyses]
    cmap = colormaps["viridis"].with_extremes(bad="#DDDDDD")
    fig = Figure(figsize=(4 * 4.2, 1.8 + 0.32 * len(names)))
    axes = fig.subplots(1, 4, sharey=True)
    image = None
    for k, ax in enumerate(axes, start=1):
        grid = np.array([[a.cells.get(le, "all", f"oracle:stage{k}")[0] for le in LESIONS]
                         for a in analyses]) * 100
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=100,
                          aspect="auto")
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                v = grid[i, j]
                ax.text(j, i, "n/a" if np.isnan(v) else f"{v:.0f}", ha="center", va="center",
                        fontsize=7, color="white" if not np.isnan(v) and v < 50 else "black")
        ax.set_title(f"Stage {k} ({TABLE_COLUMNS[1 + k].split('(')[1].rstrip(')')})")
        ax.set_xticks(range(len(LESIONS)))
        ax.set_xticklabels(LESIONS, rotation=40, ha="right")
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names)
    fig.suptitle(f"Oracle-passed accuracy (%) by lesion, all paths asking the stage "
                 f"(oracle setting: {oracle_setting})", fontweight="bold")
    fig.colorbar(image, ax=list(axes), label="accuracy (%)", fraction=0.02)
    return _save(fig, path)


def _funnel(analyses: Sequence[RunAnalysis], oracle_setting: str, path: Path) -> Path:
    """Share of cases still end-to-end correct after each stage, one panel per path."""
    from matplotlib.figure import Figure

    colors = model_colors([a.name for a in analyses])
    fig = Figure(figsize=(14, 4.8))
    axes = fig.subplots(1, len(QA_PATHS), sharey=True)
    for ax, qa_path in zip(axes, QA_PATHS, strict=True):
        levels = list(range(0, MAX_DEPTH[qa_path] + 1))
        for a in analyses:
            cells = [a.cells.get("all", qa_path, f"reach:{k}") for k in levels[1:]]
            ys = [100.0] + [100 * c[0] for c in cells]
            if all(_isnan(y) for y in ys[1:]):
                continue
            chance = a.run is None
            low = [0.0] + [0.0 if _isnan(c[1]) else 100 * c[0] - 100 * c[1] for c in cells]
            high = [0.0] + [0.0 if _isnan(c[2]) else 100 * c[2] - 100 * c[0] for c in cells]
            ax.errorbar(levels, ys, yerr=[low, high], color=colors[a.name],
                        linestyle="--" if chance else "-", marker="o", markersize=3,
                        linewidth=1.2, capsize=2, label="chance (uniform guess)" if chance
                        else a.name)
        ax.set_xticks(levels)
        ax.set_xticklabels(["start", *(f"S{k}" for k in levels[1:])])
        ax.set_xlabel("after stage (cardiomegaly: last level = bonus)")
        ax.set_title(PATH_TITLES[qa_path])
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("cases still correct end-to-end (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=7, frameon=False)
    fig.suptitle(f"End-to-end funnel (oracle setting: {oracle_setting})", fontweight="bold")
    fig.tight_layout(rect=(0, 0, 0.8, 0.95))
    return _save(fig, path)


def _bounds(analysis: RunAnalysis, keys: Sequence[str], paths: Sequence[str]
            ) -> list[tuple[float, float]]:
    return [analysis.cells.get("all", p, f"sub:{k}")[1:3] for k, p in zip(keys, paths,
                                                                          strict=True)]


def write_plots(all_metrics: Sequence[RunMetrics], out_dir: str | Path, oracle_setting: str,
                *, analyses: Sequence[RunAnalysis] | None = None,
                chance: RunAnalysis | None = None) -> list[Path]:
    """Draw the four release plots for the runs into ``out_dir`` (plus two with ``analyses``).

    ``plot_stage_accuracy.png`` (one table per path; rows model x setting), the grouped bars
    ``plot_contour_revision_detail.png`` (RR: expansion/contraction/revision result) and
    ``plot_attribute_extraction_detail.png`` (RR+RF: the four attributes), and
    ``plot_depth_heatmap.png`` (end-to-end mean depth, paths x models, YlGn, vmin 0).
    With ``analyses`` (same runs, same order) the bars get 95% bootstrap error bars and, with
    ``chance``, every plot a chance row/group; ``plot_lesion_heatmap.png`` (oracle-passed
    accuracy per stage, models x lesions) and ``plot_e2e_funnel.png`` (share of cases still
    end-to-end correct after each stage, per path, one colour per model) are added.

    Args:
        all_metrics: Metrics of every run, in run order (at least one).
        out_dir: ``io.all_models_dir(output_dir, oracle_setting)``.
        oracle_setting: Stage 03 oracle setting (shown in titles).
        analyses: The runs' :class:`RunAnalysis` (CIs, per-lesion cells), optional.
        chance: The chance baseline, optional.

    Returns:
        The PNG paths: ``io.PLOT_NAMES`` order, then :data:`EXTRA_PLOT_NAMES` with analyses.
    """
    import matplotlib

    out_dir = Path(out_dir)
    names = dict(zip(("stage", "revision", "attribute", "depth"), io.PLOT_NAMES, strict=True))
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
    with matplotlib.rc_context(_RC):
        paths = [
            _stage_accuracy(all_metrics, oracle_setting, out_dir / names["stage"], chance),
            _grouped_bars(models, rev, REVISION_LABELS,
                          f"Contour revision detail, revision-required "
                          f"(oracle setting: {oracle_setting})",
                          out_dir / names["revision"], rev_bounds),
            _grouped_bars(models, att, ATTRIBUTE_LABELS,
                          f"Attribute extraction detail, revision-required + revision-free "
                          f"(oracle setting: {oracle_setting})",
                          out_dir / names["attribute"], att_bounds),
            _depth_heatmap(all_metrics, oracle_setting, out_dir / names["depth"], chance),
        ]
        if analyses is not None:
            everyone = [*analyses, *([chance] if chance is not None else [])]
            paths.append(_lesion_heatmap(everyone, oracle_setting, out_dir / LESION_HEATMAP_PNG))
            paths.append(_funnel(everyone, oracle_setting, out_dir / FUNNEL_PNG))
    return paths
