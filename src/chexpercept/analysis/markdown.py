"""Stage 04: ``report.md`` in ``all_models_oracle_<setting>/``: main tables, plot and viewer links.

Accuracies are shown in percent with their 95% interval (Wilson; depth: bootstrap;
docs/metrics.md, "Bootstrap"; ``(n=k)`` instead for a cell of fewer than
``bootstrap.MIN_BOOTSTRAP_CASES`` cases), ``n/a`` for an empty cell; a non-zero value too
small for its decimals (chance, late stages) with 3 significant digits
(``release_tables.format_number``);
the chance row is the uniform-guess baseline. The full tables are the CSVs it links
(docs/metrics.md, "Output files"). Every string that comes from the runs or the bundle (run
names and labels, providers, model names, key_ids, reasons, judges, paths) passes through
:func:`escape_markdown`, so a run or manifest cannot put HTML, links or table cells into the
report; ordinary names are written unchanged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from chexpercept.analysis.auroc import AUROC_QUESTIONS, MAX_SHARE_WITHOUT_PROBS, auroc_rows
from chexpercept.analysis.bootstrap import (
    MIN_BOOTSTRAP_CASES,
    MIN_STRATUM_CASES,
    CellStats,
    has_interval,
)
from chexpercept.analysis.case_table import REVISION_KEYS, SUB_KEYS, CaseTable
from chexpercept.analysis.detection import detection_rows
from chexpercept.analysis.error_anatomy import ERROR_CLASSES, error_class_rows
from chexpercept.analysis.extended import EXTENDED_CSVS, RunAnalysis
from chexpercept.analysis.judge_report import JUDGE_CSV, agreement_interval
from chexpercept.analysis.release_tables import SETTINGS, format_number
from chexpercept.analysis.runs import RELEASE_ORDER, protocol_text
from chexpercept.files import write_text_atomic
from chexpercept.layouts import ALL_ATTRIBUTE_CSV, ALL_REVISION_CSV, ALL_SUMMARY_CSV
from chexpercept.lesions import LESIONS, QA_PATHS
from chexpercept.schema import STATUSES

REPORT_MD = "report.md"
_STAGE_NAMES = ("S1 detection", "S2 contour eval", "S3 revision", "S4 attributes")
_NEWLINE = re.compile(r"\r\n|[\r\n]")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
#: Markdown specials escaped with a backslash: ``\``, code ticks, emphasis ``*``, link and image
#: brackets, table pipes, and ``_`` unless both its neighbours are letters or digits (an
#: intraword ``_`` never starts emphasis, so ``openai_gpt-4o`` stays as it is).
_SPECIAL = re.compile(r"[\\`*\[\]|]|_(?![^\W_])|(?<![^\W_])_")


def escape_markdown(value: object) -> str:
    """``value`` as Markdown text that renders as itself: no HTML, link, emphasis or cell.

    ``&``, ``<``, ``>`` become HTML entities, the specials of :data:`_SPECIAL` get a backslash,
    and a line break becomes a space (a table row is one line). A string without any of these
    (every ordinary run name, provider, model id or path) is returned unchanged.

    Args:
        value: A string from a run or bundle (anything else: its ``str``).

    Returns:
        The escaped text, for a table cell or running text (not inside a code span).
    """
    text = _NEWLINE.sub(" ", str(value))
    text = re.sub(r"[&<>]", lambda m: _ENTITIES[m.group()], text)
    return _SPECIAL.sub(lambda m: "\\" + m.group(), text)


def _code(value: object) -> str:
    """``value`` as a code span, or as escaped plain text when it needs escaping.

    A code span shows its content verbatim (no entity or backslash is decoded in it), so only a
    string :func:`escape_markdown` leaves unchanged goes into one.
    """
    text = escape_markdown(value)
    return f"`{text}`" if text == str(value) else text


def _interval(text: str, low: float, high: float, n: int, n_boot: int, scale: float,
              digits: int) -> str:
    """``text [low, high]``; ``text (n=k)`` for a cell too small for an interval."""
    if not math.isnan(low):
        return (f"{text} [{format_number(scale * low, digits)}, "
                f"{format_number(scale * high, digits)}]")
    if n_boot and n > 0 and not has_interval(n):
        return f"{text} (n={n})"
    return text


def _pct(cells: CellStats, lesion: str, path: str, metric: str) -> str:
    """A cell in percent with its interval (or its count, docs/metrics.md, "Bootstrap")."""
    value, low, high, n = cells.get(lesion, path, metric)
    if math.isnan(value):
        return "n/a"
    return _interval(format_number(100 * value, 1), low, high, n, cells.n_boot, 100, 1)


def _num(cells: CellStats, lesion: str, path: str, metric: str) -> str:
    """A depth cell with its interval (or its count)."""
    value, low, high, n = cells.get(lesion, path, metric)
    if math.isnan(value):
        return "n/a"
    return _interval(format_number(value, 2), low, high, n, cells.n_boot, 1, 2)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + [""]


def _n_text(counts: Sequence[int]) -> str:
    distinct = sorted(set(counts))
    return "/".join(str(c) for c in distinct)


def _incomplete_warning(analyses: Sequence[RunAnalysis]) -> list[str]:
    """A warning block naming each incomplete run (cases Stage 03 left unfinished), or []."""
    incomplete = [a for a in analyses if a.unfinished]
    if not incomplete:
        return []
    n_missing = sum(len(a.unfinished) for a in incomplete)
    lines = [f"> **Warning: incomplete run(s), {n_missing} case(s) missing.** Some cases got no "
             "answer for a turn (a fault of the network or the server, never an answer of the "
             "model) or were not reached. They are counted as missing: left out of every value "
             "below, not scored as wrong. Re-run Stage 03 with the same command to complete "
             "them.", ">"]
    for a in incomplete:
        key_id, reason = next(iter(a.unfinished.items()))
        total = a.table.n_cases + len(a.unfinished)
        lines.append(f"> - {_code(a.name)}: **{len(a.unfinished)} of {total} case(s) "
                     f"missing** (unfinished), e.g. {_code(key_id)}: "
                     f"{escape_markdown(reason[:200])}")
    return [*lines, ""]


#: Lesion x stage cells listed under "Largest differences" (docs/metrics.md, "Output files").
N_LARGEST_GAPS = 5


def largest_gaps(analyses: Sequence[RunAnalysis], n: int = N_LARGEST_GAPS
                 ) -> tuple[RunAnalysis, RunAnalysis, list[tuple[str, int, float, float]]]:
    """The lesion x stage cells where the best and the worst run differ most.

    Best and worst are the runs with the highest and lowest end-to-end mean depth over all
    cases (ties: the earlier run); a cell is the oracle-passed accuracy of stage k over the
    lesion's cases of every path asking it (the lesion heatmap's cells). Cells either run
    leaves empty are skipped.

    Args:
        analyses: Two or more analysed runs.
        n: Number of cells to return.

    Returns:
        ``(best, worst, cells)``; cells are ``(lesion, stage, best value, worst value)``,
        values in [0, 1], ordered by decreasing ``|best - worst|`` (then lesion, stage order).

    Raises:
        ValueError: If fewer than two runs are given.
    """
    if len(analyses) < 2:
        raise ValueError("largest_gaps needs at least two runs")
    depth = [a.cells.get("all", "all", "depth")[0] for a in analyses]
    order = [d if not math.isnan(d) else -math.inf for d in depth]
    best = analyses[max(range(len(order)), key=lambda i: (order[i], -i))]
    worst = analyses[min(range(len(order)), key=lambda i: (order[i], i))]
    cells = []
    for li, lesion in enumerate(LESIONS):
        for k in range(1, 5):
            b = best.cells.get(lesion, "all", f"oracle:stage{k}")[0]
            w = worst.cells.get(lesion, "all", f"oracle:stage{k}")[0]
            if not (math.isnan(b) or math.isnan(w)):
                cells.append((abs(b - w), li, k, lesion, b, w))
    cells.sort(key=lambda c: (-c[0], c[1], c[2]))
    return best, worst, [(lesion, k, b, w) for _, _, k, lesion, b, w in cells[:n]]


def _gaps_section(analyses: Sequence[RunAnalysis]) -> list[str]:
    runs = [a for a in analyses if a.run is not None]
    if len(runs) < 2:
        return []
    best, worst, cells = largest_gaps(runs)
    lines = ["## Largest differences between the best and the worst run", "",
             f"Best run {_code(best.name)}, worst run {_code(worst.name)} (end-to-end mean "
             "depth over all "
             f"cases); the {N_LARGEST_GAPS} lesion x stage cells (oracle-passed accuracy, every "
             "path asking the stage) where they differ most.", ""]
    body = [[lesion, _STAGE_NAMES[k - 1], _pct(best.cells, lesion, "all", f"oracle:stage{k}"),
             _pct(worst.cells, lesion, "all", f"oracle:stage{k}"), f"{100 * (b - w):+.1f}"]
            for lesion, k, b, w in cells]
    return lines + _table(["lesion", "stage", escape_markdown(best.name),
                           escape_markdown(worst.name), "difference (pp)"], body)


def _hit_rate(table: CaseTable) -> str:
    """The run's prefix-cache hit rate in percent with its token counts, or n/a."""
    if not table.prompt_tokens:
        return "n/a"
    return (f"{100 * table.prefix_cache_hit_rate:.1f} % ({table.cached_prompt_tokens:,} of "
            f"{table.prompt_tokens:,} tokens)")


def _runs_table(analyses: Sequence[RunAnalysis]) -> list[str]:
    """The runs table; with a ``protocol`` column when a run's protocol is not the default.

    The column (``runs.protocol_text``: option order, samples, temperature, seed, judge, read
    from each run's manifest) is left out when every run is a default run, so such a report
    stays as it was.
    """
    runs = [a for a in analyses if a.run is not None]
    protocol = any(a.run.protocol for a in runs)
    header = ["model", "provider", "model name", "variant", "cases", "missing stage "
              "results (counted wrong)", "unfinished cases (missing, not scored)",
              "prefix-cache hit rate"]
    body = [[*map(escape_markdown, (a.name, a.run.provider, a.run.model_name, a.run.variant)),
             str(a.table.n_cases), str(int(a.table.missing.sum())), str(len(a.unfinished)),
             _hit_rate(a.table)] for a in runs]
    if not protocol:
        return ["Runs (model = `<provider>_<model>[_no_thinking]`):", "",
                *_table(header, body)]
    header.insert(4, "protocol")
    for a, row in zip(runs, body, strict=True):
        row.insert(4, escape_markdown(protocol_text(a.run.protocol)))
    return ["Runs (model = `<provider>_<model>[_no_thinking]`, then `+key=value` for each "
            "identity field of the run's manifest that differs from the defaults; protocol: "
            "option order, samples, temperature, seed, judge, `release` for a default run; "
            "docs/evaluation_protocol.md, \"Run folder\"):", "", *_table(header, body)]


def render_report(analyses: Sequence[RunAnalysis], chance: RunAnalysis, *, oracle_setting: str,
                  n_boot: int, seed: int, benchmark_note: str, plots: Sequence[Path],
                  viewer: Path | None = None) -> str:
    """The text of ``report.md``.

    Args:
        analyses: The analysed runs, in run order.
        chance: The uniform-guess baseline.
        oracle_setting: Stage 03 oracle setting of the runs.
        n_boot: Bootstrap resamples (0: no intervals).
        seed: Bootstrap seed.
        benchmark_note: Where the chance values came from (or why they are NA).
        plots: Plot files to link (same folder).
        viewer: The case viewer's ``index.html`` (linked relative to the report), or None.

    Returns:
        Markdown text.
    """
    everyone = [*analyses, chance]
    lines = [f"# CheXpercept analysis, Stage 03 oracle setting {_code(oracle_setting)}", ""]
    lines += _incomplete_warning(analyses)
    if viewer is not None:
        lines += [f"Case viewer: [{viewer.parent.name}/{viewer.name}]"
                  f"({viewer.parent.name}/{viewer.name}) (open it in a browser from the file "
                  "system: every dialogue with its images, filters, two runs side by side; "
                  "docs/viewer.md).", ""]
    lines += ["Figures: " + ", ".join(f"[{p.stem}]({p.name})" for p in plots), ""] if plots \
        else []
    lines += _runs_table(analyses)
    lines += ["Prefix-cache hit rate: the share of the prompt tokens the engine found in its "
              "prefix cache (the cached prompt tokens the provider reports, vLLM's or an API's, "
              "over prompt tokens, all calls of the scored "
              "cases; n/a where the provider reports none; docs/design.md, \"KV cache at "
              "scale\").", ""]
    ci = (f"95% intervals: Wilson score for accuracies; for depth a bootstrap of {n_boot} "
          f"resamples of cases within each lesion x path stratum, or of the cell's cases "
          f"together where a stratum has fewer than {MIN_STRATUM_CASES} (seed {seed}); "
          f"`(n=k)`: fewer than {MIN_BOOTSTRAP_CASES} cases, no interval" if n_boot
          else "no intervals (--bootstrap 0)")
    lines += [f"Values in percent, {ci}. `chance` = uniform guessing "
              f"({escape_markdown(benchmark_note)}). "
              "`end_to_end`: the stage and every earlier stage correct; `oracle_passed`: the "
              "stage on its own. Depth: stages answered correctly from stage 1 (max 4 / 3 / 1 "
              "on revision-required / revision-free / lesion-free).", ""]

    lines += ["## Stage accuracy per path", ""]
    for path in QA_PATHS:
        n = [a.cells.get("all", path, "depth")[3] for a in analyses]
        lines += [f"### {path} (cases per run: {_n_text(n)})", ""]
        body = []
        for a in everyone:
            for setting in SETTINGS:
                kind = "e2e" if setting == "end_to_end" else "oracle"
                cells = [_pct(a.cells, "all", path, f"{kind}:stage{k}") for k in range(1, 5)]
                body.append([escape_markdown(a.name), setting, *cells,
                             _num(a.cells, "all", path, "depth")])
        lines += _table(["model", "setting", *_STAGE_NAMES, "depth"], body)

    lines += ["## Sub-question accuracy (oracle view)", "",
              "Contour revision on revision-required cases; attributes on revision-required + "
              "revision-free cases (no attributes for cardiomegaly).", ""]
    body = []
    for a in everyone:
        body.append([escape_markdown(a.name), *(_pct(a.cells, "all",
                                    "revision_required" if k in REVISION_KEYS else "all",
                                    f"sub:{k}") for k in SUB_KEYS)])
    lines += _table(["model", *SUB_KEYS], body)

    lines += ["## End-to-end mean depth by lesion, revision-required path (max 4)", ""]
    lines += _table(["model", *LESIONS],
                    [[escape_markdown(a.name), *(_num(a.cells, le, "revision_required", "depth")
                                for le in LESIONS)] for a in everyone])

    lines += _gaps_section(analyses)

    lines += ["## Answer status and missing stage results", "",
              "Share of answered questions per status over all stages (n/a: the results carry "
              "no status keys, e.g. release files); missing = expected stage results absent, "
              "counted wrong. Per stage: `stage_status.csv`.", ""]
    body = []
    for a in analyses:
        counts = a.table.status.sum(axis=(0, 1))
        total = int(counts.sum())
        rates = [(f"{100 * c / total:.1f}" if a.table.has_status and total else "n/a")
                 for c in counts.tolist()]
        body.append([escape_markdown(a.name), str(int(a.table.missing.sum())), *rates])
    lines += _table(["model", "missing", *STATUSES], body)

    lines += detection_section(everyone)
    lines += option_position_section(analyses)
    lines += error_anatomy_section(analyses)
    lines += auroc_section(analyses)
    lines += sampling_section(analyses)
    lines += judge_section(analyses)

    lines += ["## Plots", ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots] + [""]
    lines += ["## Tables", ""]
    judge_csv = (JUDGE_CSV,) if any(a.judge is not None for a in analyses) else ()
    lines += [f"- [{name}]({name})" for name in (ALL_SUMMARY_CSV, ALL_REVISION_CSV,
                                                  ALL_ATTRIBUTE_CSV, *EXTENDED_CSVS,
                                                  *judge_csv)]
    return "\n".join(lines) + "\n"


def _judge_pct(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else format_number(100 * value, 1)


def judge_section(analyses: Sequence[RunAnalysis]) -> list[str]:
    """The "Judge model" section: both readings, judged shares, audit agreement.

    Nothing when no run was made with a judge (docs/metrics.md, "Strict and judged
    readings").
    """
    runs = [(a.name, a.judge) for a in analyses if a.judge is not None]
    if not runs:
        return []
    headline = {s.headline for _, s in runs}
    which = "judged" if headline == {"judged"} else "strict"
    lines = ["## Judge model", "",
             "Runs made with `--judge` (docs/parsing.md, \"Judge model\"): a reply the parser "
             "could not read was read by a judge model, and a seeded share of the replies the "
             "parser did read was read by it too, to measure how often the two agree. "
             f"The tables above use the **{which}** reading "
             + ("(`--judged`: a judged question is scored by the judge's answer). "
                if which == "judged" else
                "(a judged question counts as unparseable, so wrong, as in a run without a "
                "judge; `--judged` scores it by the judge's answer instead). ")
             + "Both readings, in percent, `strict / judged` (docs/metrics.md, \"Strict and "
               "judged readings\"):", ""]
    header = ["model", "judge", "path", "setting", "stage 1", "stage 2", "stage 3", "stage 4",
              "depth"]
    body = []
    for name, s in runs:
        strict, judged = s.readings["strict"], s.readings["judged"]
        for a, b in zip(strict.summary, judged.summary, strict=True):
            cells = [f"{_judge_pct(a[f'acc(stage{k})'])} / {_judge_pct(b[f'acc(stage{k})'])}"
                     for k in range(1, 5)]
            depth = (f"{format_number(a['depth'], 2)} / {format_number(b['depth'], 2)}"
                     if not math.isnan(a["depth"]) else "n/a")
            body.append([escape_markdown(name), escape_markdown(s.judge), a["path"],
                         a["setting"], *cells, depth])
    lines += _table(header, body)
    lines += ["Share of judged questions (the parser could not read the reply, the judge read "
              "an option), per stage, over the scored cases:", ""]
    body = []
    for name, s in runs:
        cells = [_share(k, n) for k, n in s.judged]
        total = (sum(k for k, _ in s.judged), sum(n for _, n in s.judged))
        body.append([escape_markdown(name), escape_markdown(s.judge), *cells, _share(*total)])
    lines += _table(["model", "judge", "stage 1", "stage 2", "stage 3", "stage 4", "all"], body)
    lines += ["Agreement of the judge with the parser on the audited replies (both read them; "
              "`--judge-audit-rate`), with the Wilson 95 % interval:", ""]
    body = []
    for name, s in runs:
        value, low, high = agreement_interval(s.agreed, s.audited)
        interval = "" if math.isnan(value) else f" [{_judge_pct(low)}, {_judge_pct(high)}]"
        body.append([escape_markdown(name), escape_markdown(s.judge), str(s.audited),
                     str(s.agreed), _judge_pct(value) + interval])
    lines += _table(["model", "judge", "audited", "agree", "agreement %"], body)
    return lines


def _share(k: int, n: int) -> str:
    return f"{k} of {n} ({_judge_pct(k / n if n else math.nan)} %)"


def detection_section(analyses: Sequence[RunAnalysis]) -> list[str]:
    """Report section: pooled Stage 1 detection metrics per run, chance last.

    Definitions: docs/metrics.md, "Detection metrics"; per lesion in ``detection_metrics.csv``.
    """
    lines = ["## Detection: sensitivity and specificity (pooled over lesions)", "",
             "Positives: lesion-present cases, negatives: lesion-free cases; a failed or "
             "unparsed answer counts as wrong. Percent with the 95% Wilson interval (balanced "
             "accuracy: MOVER from the two Wilson intervals; chance: expected value). Per "
             "lesion: `detection_metrics.csv`.", ""]
    names = ("sensitivity", "specificity", "balanced_accuracy", "ppv", "npv")
    body = []
    for a in analyses:
        rows = {r["metric"]: r for r in detection_rows(a.table, chance=a.run is None)
                if r["lesion"] == "all"}
        cells = []
        for m in names:
            r = rows.get(m)
            if r is None or math.isnan(r["value"]):
                cells.append("n/a")
            elif math.isnan(r["ci_low"]):  # chance row, or too few cases ("Small cells")
                small = a.run is not None and not has_interval(r["n_cases"])
                cells.append(format_number(100 * r["value"], 1)
                             + (f" (n={r['n_cases']})" if small else ""))
            else:
                cells.append(f"{format_number(100 * r['value'], 1)} "
                             f"[{format_number(100 * r['ci_low'], 1)}, "
                             f"{format_number(100 * r['ci_high'], 1)}]")
        body.append([escape_markdown(a.name), *cells])
    return lines + _table(["model", "sensitivity", "specificity", "balanced acc.", "PPV",
                           "NPV"], body)


def error_anatomy_section(analyses: Sequence[RunAnalysis]) -> list[str]:
    """Report section: each run's named error classes, pooled over lesions.

    One row per class and question it applies to, one column per run: the rate in percent
    with its 95 % Wilson interval and ``k/n`` (errors / questions on which the class could
    occur). Definitions: docs/metrics.md, "Error anatomy"; per lesion in
    ``error_classes.csv``, the confusion tables in ``error_confusion.csv``.
    """
    runs = [a for a in analyses if a.errors is not None]
    if not runs:
        return []
    lines = ["## Error anatomy", "",
             "How the runs fail: named error classes, pooled over lesions, in percent of the "
             "questions on which the class can occur, with the 95% Wilson interval and "
             "k/n. Definitions: docs/metrics.md, \"Error anatomy\". Per lesion: "
             "`error_classes.csv`; chosen vs true option per question: `error_confusion.csv`. "
             "n/a: no scored case of the run could make that error (e.g. a comparison "
             "laterality swap needs a case whose true answer is left or right larger).",
             ""]
    cells = {a.name: {(r["question"], r["error_class"]): r
                      for r in error_class_rows(a.errors) if r["lesion"] == "all"}
             for a in runs}
    body = []
    for name, questions in ERROR_CLASSES.items():
        for q in questions:
            row = [name, q]
            for a in runs:
                r = cells[a.name].get((q, name))
                if r is None or not r["n_cases"]:
                    row.append("n/a")
                elif math.isnan(r["ci_low"]):  # too few cases (docs/metrics.md, "Small cells")
                    row.append(f"{format_number(100 * r['value'], 1)} "
                               f"({r['k']}/{r['n_cases']})")
                else:
                    row.append(f"{format_number(100 * r['value'], 1)} "
                               f"[{format_number(100 * r['ci_low'], 1)}, "
                               f"{format_number(100 * r['ci_high'], 1)}] "
                               f"({r['k']}/{r['n_cases']})")
            body.append(row)
    return lines + _table(["error class", "question", *(escape_markdown(a.name) for a in runs)],
                          body)
def auroc_section(analyses: Sequence[RunAnalysis]) -> list[str]:
    """Report section: pooled AUROC of detection and contour evaluation per run.

    Runs made without ``--option-probs`` are named in one line, never given a value
    (docs/metrics.md, "Option probabilities and AUROC"; per lesion in ``auroc.csv``).
    """
    lines = ["## AUROC from option probabilities (pooled over lesions)", "",
             "Score: the probability of \"Yes\" at the answer token (runs made with "
             "`--option-probs`). Detection: positive = lesion present; contour evaluation: "
             "positive = the contour needs a major revision. AUROC with its 95% score-type "
             "interval (Newcombe 2006; docs/metrics.md); `without probs`: answered questions "
             "without usable probabilities (no parsed answer, none returned), left out, never "
             "scored 0; `[worst, best]`: the AUROC had every such turn been scored worst / "
             f"best; a cell with more than {MAX_SHARE_WITHOUT_PROBS:.0%} of its turns without "
             "probabilities is refused an AUROC (docs/metrics.md, \"Missing probabilities\"). "
             "Per lesion: "
             "`auroc.csv`.", ""]
    body, absent, refused = [], [], []
    for a in analyses:
        if a.option_scores is None:
            absent.append(escape_markdown(a.name))
            continue
        pooled = {r["question"]: r for r in auroc_rows(a.option_scores)
                  if r["lesion"] == "all"}
        cells = []
        for question in AUROC_QUESTIONS:
            r = pooled.get(question)
            if r is None:
                cells += ["n/a", "0/0", "0"]
                continue
            if r.get("note", "").startswith("refused"):
                refused.append(f"{escape_markdown(a.name)} {question}")
            if math.isnan(r["auroc"]):
                value = "n/a"
            elif math.isnan(r["ci_low"]):
                value = f"{r['auroc']:.3f}"
            else:
                value = f"{r['auroc']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
            if not math.isnan(r.get("auroc_worst", math.nan)):
                value += f" ([{r['auroc_worst']:.3f}, {r['auroc_best']:.3f}])"
            without = f"{r['n_without_probs']} ({r['share_without_probs']:.0%})"
            cells += [value, f"{r['n_positive']}/{r['n_negative']}", without]
        body.append([escape_markdown(a.name), *cells])
    if body:
        lines += _table(["model", "detection AUROC", "pos/neg", "without probs",
                         "contour evaluation AUROC", "pos/neg", "without probs"], body)
    if refused:
        lines += [f"Refused an AUROC (too many turns without probabilities; pooled cells, "
                  f"per lesion in `auroc.csv`'s `note`): {', '.join(refused)}.", ""]
    if absent:
        lines += [f"No AUROC for {', '.join(absent)}: run without `--option-probs` (no "
                  f"option probabilities recorded).", ""]
    return lines


#: Questions of the report's option-position section (the rest: the CSVs): the yes/no
#: questions, whose correct option is always 1 on the paths that say "Yes" under the release order.
OPTION_REPORT_QUESTIONS = ("detection_qa", "contour_evaluation_qa")


#: What the correct option's position is under each ``--option-order``
#: (docs/evaluation_protocol.md, "Option order").
_ORDER_MEANING = {
    RELEASE_ORDER: "the correct option's position is the ground truth (\"Yes\" is option 1), "
                   "so always-1 scores 100 on positive detection",
    "shuffled": "each question's options are shown in an order drawn from the run's seed, so "
                "the correct option's position is that draw's",
    "circular": "each question is asked once per rotation of its options, so the correct "
                "option takes every position in turn",
}


def _order_text(runs: Sequence[RunAnalysis]) -> str:
    """The option-position section's sentence on the runs' own option orders.

    One order: ``Under the <order> order ...;``; several: one clause per order naming its runs.
    The text of a report whose runs all used the release order is the one it always had.
    """
    orders: dict[str, list[str]] = {}
    for a in runs:
        orders.setdefault(a.run.option_order, []).append(_code(a.name))
    meaning = {k: _ORDER_MEANING.get(k, "the options are shown in the run's own order")
               for k in orders}
    if len(orders) == 1:
        (order,) = orders
        return f"Under the {escape_markdown(order)} order {meaning[order]};"
    text = "; ".join(f"under the {escape_markdown(k)} order ({', '.join(names)}) {meaning[k]}"
                     for k, names in orders.items())
    return text[0].upper() + text[1:] + ";"


def option_position_section(analyses: Sequence[RunAnalysis]) -> list[str]:
    """Report section: yes/no accuracy by the correct option's position, and always-k.

    One row per run, question (:data:`OPTION_REPORT_QUESTIONS`) and QA path; every
    single-choice question in ``option_position_accuracy.csv`` and ``always_k_baselines.csv``
    (docs/metrics.md, "Option order"). No section when no run has the tables.
    """
    runs = [a for a in analyses if a.option_order is not None and a.option_order.positions]
    if not runs:
        return []
    circular = any(not math.isnan(r["circular_accuracy"])
                   for a in runs for r in a.option_order.positions)
    lines = ["## Option position", "",
             "Accuracy by the displayed position of the correct option (percent, `n` questions) "
             "and the always-k baselines: the accuracy of always answering option k, from the "
             f"ground truths alone. {_order_text(runs)} a score close to its always-k "
             "baseline may be position preference. Yes/no questions here; every single-choice "
             "question in `option_position_accuracy.csv` and `always_k_baselines.csv`.", ""]
    if circular:
        lines += ["Circular accuracy (`--option-order circular` runs): the share of the same "
                  "questions answered correctly under every rotation of their options "
                  "(`circular_correct`), by the correct option's position in the run's own "
                  "order.", ""]
    body = []
    for a in runs:
        by_cell: dict[tuple[str, str], list[str]] = {}
        for r in a.option_order.positions:
            by_cell.setdefault((r["question"], r["path"]), []).append(
                f"{r['position']}: {format_number(100 * r['accuracy'], 1)} (n={r['n']})")
        always: dict[tuple[str, str], list[str]] = {}
        for r in a.option_order.baselines:
            always.setdefault((r["question"], r["path"]), []).append(
                f"{r['k']}: {format_number(100 * r['accuracy'], 1)}")
        circ: dict[tuple[str, str], list[str]] = {}
        for r in a.option_order.positions:
            if not math.isnan(r["circular_accuracy"]):
                circ.setdefault((r["question"], r["path"]), []).append(
                    f"{r['position']}: {format_number(100 * r['circular_accuracy'], 1)}")
        for question in OPTION_REPORT_QUESTIONS:
            for path in QA_PATHS:
                if (question, path) not in by_cell:
                    continue
                row = [escape_markdown(a.name), question, path,
                       "; ".join(by_cell[(question, path)]),
                       ", ".join(always.get((question, path), []))]
                if circular:
                    row.append("; ".join(circ.get((question, path), [])) or "n/a")
                body.append(row)
    header = ["model", "question", "path", "accuracy by position of the correct option",
              "always-k accuracy (k: value)"]
    return lines + _table(header + (["circular accuracy by position"] if circular else []),
                          body)


def sampling_section(analyses: Sequence[RunAnalysis]) -> list[str]:
    """Report section: sampling variance of the ``--samples K`` runs (none: no section).

    All cases (path ``all``): per stage, end-to-end accuracy mean over samples with the
    between-sample SD and the cluster-bootstrap interval, and the share of cases whose K
    samples all agree; definitions in docs/metrics.md, "Sampling variance"; per path, the
    oracle-passed rows and the pairwise agreement in ``sampling_variance.csv``.
    """
    runs = [a for a in analyses if a.sampling]
    if not runs:
        return []
    lines = ["## Sampling variance (`--samples K` runs)", "",
             "All cases, end-to-end. Accuracy: mean over cases and samples in percent, "
             "between-sample SD in points, 95% cluster-bootstrap interval (cases resampled "
             "with their K samples). Agree: share of cases whose K samples give the same "
             "answer to the stage. Per path, oracle-passed and pairwise agreement: "
             "`sampling_variance.csv`.", ""]

    def cell(r: dict | None, sd: bool) -> str:
        if r is None or math.isnan(r["value"]):
            return "n/a"
        text = format_number(100 * r["value"], 1)
        if sd:
            text += f" ± {format_number(100 * r['sd_between_samples'], 1)}"
        if math.isnan(r["ci_low"]):
            return f"{text} (n={r['n_cases']})"
        return (f"{text} [{format_number(100 * r['ci_low'], 1)}, "
                f"{format_number(100 * r['ci_high'], 1)}]")

    body = []
    for a in runs:
        rows = {r["metric"]: r for r in a.sampling if r["path"] == "all"}
        body.append([escape_markdown(a.name), escape_markdown(a.sampling[0]["samples"]),
                     *(cell(rows.get(f"e2e:stage{s}"), True) for s in range(1, 5)),
                     *(cell(rows.get(f"agree_all:stage{s}"), False) for s in range(1, 5))])
    return lines + _table(["model", "K", *(f"stage {s} acc." for s in range(1, 5)),
                           *(f"stage {s} agree" for s in range(1, 5))], body)


def write_report(out_dir: str | Path, text: str) -> Path:
    """Write ``report.md`` atomically into ``out_dir``.

    Args:
        out_dir: ``layouts.all_models_dir(output_dir, oracle_setting)``.
        text: :func:`render_report` of the runs.

    Returns:
        The path written.
    """
    path = Path(out_dir) / REPORT_MD
    write_text_atomic(path, text)
    return path
