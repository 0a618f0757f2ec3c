"""Core: validator and statistics of a benchmark bundle (``chexpercept.json`` + ``chexpercept/``).

The bundle is the Stage 02 -> 03 artifact (docs/benchmark_format.md). Its
checks live in the core, next to the schema, so that Stage 02 (``02_validate_bundle.py`` and
the export) and Stage 03 (``--validate-only`` / ``evaluation.cases.validate_bundle``) run the
same code without importing each other. Checks: schema, every image present, readable and the
size of the case's CXR, option counts equal to the listed options and to the rendered option
images, answer indices in range and consistent with the answer text and the ``true`` option,
point options inside the working frame, no answer-revealing file names (an error for bundles
this code wrote, a warning for the released one, docs/differences.md D25), and path
counts (questions per path; ``sampling_summary.json`` agrees with the JSON), and every path the
bundle names stays inside it (docs/benchmark_format.md, "Paths a bundle names"). Images the one
loader converts before a model sees them (16-bit, palette, alpha, CMYK, EXIF orientation) are
warnings, not errors (docs/images.md, "Image loading"), as is a CXR below the minimum side or
beyond the aspect ratio of a radiograph (docs/images.md, "Image size").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from chexpercept.errors import InputError, SchemaError
from chexpercept.files import read_json
from chexpercept.images import WORK_SIZE
from chexpercept.layouts import BenchmarkLayout, key_id_problem
from chexpercept.lesions import (
    LESIONS,
    PATH_STAGES,
    QA_PATHS,
    expected_stages,
)
from chexpercept.parquet_bundle import is_parquet_bundle, unpack_parquet_bundle
from chexpercept.schema import BenchmarkItem, PointOption, load_benchmark, qa_path_of
from utils.imaging import ImageHeader, inspect_image

logger = logging.getLogger(__name__)

#: Marker our export writes into ``sampling_summary.json``; a bundle carrying it (or any
#: ``option_<i>.png`` name) is held to the strict name rule.
BUNDLE_FORMAT = "chexpercept-option-index-names/1"
#: Our leak-free revision option name (``chexpercept.layouts.option_image_name``).
OWN_OPTION_NAME = re.compile(r"^option_\d+\.png$")
#: File-name words that reveal an answer (the release's ``option_<i>_mask_answer.png``).
LEAK_WORDS = frozenset({"answer", "answers", "fake", "true", "false", "correct", "incorrect",
                        "wrong", "gt", "truth", "distractor"})
#: At most this many coloured points (eight colours; docs/benchmark_format.md, "Option naming").
MAX_POINTS = 8

#: Question names in dialogue order (the Stage 03 turn names, docs/evaluation_protocol.md, "Turn
#: order").
DETECTION = "detection_qa"
CONTOUR_EVAL = "contour_evaluation_qa"
EXPANSION = "contour_revision_qa_expansion"
CONTRACTION = "contour_revision_qa_contraction"
REVISION_RESULT = "contour_revision_qa_revision_result"
ATTRIBUTE_NAMES = ("distribution", "location", "severity/measurement", "comparison")

#: Columns of ``stats.csv`` (each sub-question is one item; docs/paper.md, "Benchmark size").
STATS_COLUMNS = ("lesion", "path", "cases", "cxrs", "qa_s1", "qa_s2", "qa_s3", "qa_s4",
                 "qa_items")
ALL = "all"

_OPTION_LINE = re.compile(r"^\s*\((\d+)\)")


def listed_option_count(question: str) -> int | None:
    """Number of ``(i) ...`` lines after the last ``Options:`` line, or None if there is none."""
    lines = question.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip().lower() == "options:"]
    if not starts:
        return None
    return sum(1 for line in lines[starts[-1] + 1:] if _OPTION_LINE.match(line))


def leaks_answer(name: str) -> bool:
    """Whether a file name contains a word of :data:`LEAK_WORDS` (split on non-alphanumerics)."""
    words = re.split(r"[^a-z0-9]+", Path(name).stem.lower())
    return any(w in LEAK_WORDS for w in words)


def stage_counts(item: BenchmarkItem) -> tuple[int, int, int, int]:
    """QA items of one case per stage (S1, S2, S3, S4) as the paper counts them.

    Detection 1; contour evaluation 1 for positives; revision 1 per expansion / contraction /
    revision-result question of a revision-required case (3); attributes 4 when present
    (LF 1, RF 6 (cardiomegaly 2), RR 9 (cardiomegaly 5); docs/benchmark_format.md, "QA paths").
    """
    path = qa_path_of(item)
    asked = PATH_STAGES[path]  # the one path rule (chexpercept.lesions)
    if 2 not in asked:
        return (1, 0, 0, 0)
    contour = item.contour_qa
    assert contour is not None  # path_of guarantees it
    s3 = 0
    if 3 in asked:
        s3 = sum(1 for q in (contour.contour_revision_qa_expansion,
                             contour.contour_revision_qa_contraction,
                             contour.contour_revision_qa_revision_result) if q is not None)
    s4 = 4 if item.attribute_extraction_qa is not None else 0
    return (1, 1, s3, s4)


def stats_rows(items: Mapping[str, BenchmarkItem]) -> list[dict[str, Any]]:
    """The stats table: cases, CXRs (unique dicom_ids) and QA items per stage.

    Rows: every lesion x path (:data:`chexpercept.lesions.LESIONS` x ``QA_PATHS``, zero rows
    kept), then ``all`` x each path, then ``all`` x ``all``. With 100 cases per lesion and
    path on distinct CXRs this gives 2,100 CXRs and 10,400 items (docs/paper.md, "Benchmark
    size").

    Args:
        items: Validated cases keyed by key_id.

    Returns:
        Rows as dicts with :data:`STATS_COLUMNS`.

    Raises:
        SchemaError: If a key_id's lesion is unknown or a positive lacks ``contour_qa``.
    """
    groups: dict[tuple[str, str], list[str]] = {}
    bad = []
    for key_id, item in items.items():
        lesion = key_id.split("_", 1)[0]
        if lesion not in LESIONS:
            bad.append(f"{key_id}: unknown lesion prefix")
            continue
        try:
            groups.setdefault((lesion, qa_path_of(item)), []).append(key_id)
        except SchemaError as exc:
            bad.append(f"{key_id}: {exc}")
    if bad:
        raise SchemaError("stats: " + "; ".join(bad))

    def row(lesion: str, path: str, keys: Sequence[str]) -> dict[str, Any]:
        per_stage = [0, 0, 0, 0]
        for key_id in keys:
            for i, n in enumerate(stage_counts(items[key_id])):
                per_stage[i] += n
        return {"lesion": lesion, "path": path, "cases": len(keys),
                "cxrs": len({items[k].dicom_id for k in keys}),
                "qa_s1": per_stage[0], "qa_s2": per_stage[1], "qa_s3": per_stage[2],
                "qa_s4": per_stage[3], "qa_items": sum(per_stage)}

    rows = [row(lesion, path, groups.get((lesion, path), []))
            for lesion in LESIONS for path in QA_PATHS]
    rows += [row(ALL, path, [k for lesion in LESIONS for k in groups.get((lesion, path), [])])
             for path in QA_PATHS]
    rows.append(row(ALL, ALL, list(items)))
    return rows


def format_stats_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The stats rows as a fixed-width text table (header + one line per row)."""
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in STATS_COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) if i < 2 else c.rjust(widths[c])
                       for i, c in enumerate(STATS_COLUMNS))]
    for r in rows:
        lines.append("  ".join(str(r[c]).ljust(widths[c]) if i < 2 else
                               str(r[c]).rjust(widths[c]) for i, c in enumerate(STATS_COLUMNS)))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


@dataclass
class BundleCheck:
    """Result of :func:`check_bundle`.

    Attributes:
        root: The benchmark folder.
        strict_names: Whether answer-revealing names were errors (our bundle).
        problems: Errors, each ``<key_id>: <what> (<path>)``.
        warnings: Findings that do not stop a run (released-bundle naming, images that
            need conversion, a CXR below the minimum side or beyond the aspect ratio).
        cases: key_ids checked.
        images: Number of distinct images opened.
        conversions: Image file -> why the loader converts it before a model sees it
            (:func:`utils.imaging.needs_conversion`; docs/images.md, "Image loading").
    """

    root: Path
    strict_names: bool
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cases: list[str] = field(default_factory=list)
    images: int = 0
    conversions: dict[Path, str] = field(default_factory=dict)

    def raise_for_problems(self, context: str = "") -> None:
        """Raise one SchemaError listing every problem (nothing if there is none).

        Raises:
            SchemaError: ``<root>: N problem(s) in the benchmark bundle<context>:`` + lines.
        """
        if self.problems:
            raise SchemaError(f"{self.root}: {len(self.problems)} problem(s) in the benchmark "
                              f"bundle{context}:\n  " + "\n  ".join(self.problems))

    def log_warnings(self) -> None:
        """Log the warnings once each, at most 10 lines plus a count."""
        for line in self.warnings[:10]:
            logger.warning("%s", line)
        if len(self.warnings) > 10:
            logger.warning("... and %d more warning(s)", len(self.warnings) - 10)


@dataclass(frozen=True)
class _Question:
    name: str
    question: str
    option_texts: tuple[str, ...]
    answer: str
    answer_index: int | tuple[int, ...]
    multi: bool
    images: tuple[Path, ...]


def point_text(option: PointOption) -> str:
    """Option text of a point option: ``"<colour> point"``, or ``"None"``."""
    return "None" if option.point is None or option.color == "None" else f"{option.color} point"


def none_index(texts: Sequence[str]) -> int | None:
    """1-based index of the "None ..." option of a multi-select question, if any."""
    for i, text in enumerate(texts, start=1):
        if text.strip().lower().startswith("none"):
            return i
    return None


def ordinal(n: int) -> str:
    """English ordinal of a positive int: 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _images(problems: list[str], build: Callable[..., Path], *args: Any) -> tuple[Path, ...]:
    """``(build(*args),)``, or ``()`` with the refusal in ``problems`` (a path out of the bundle).

    ``build`` is a :class:`~chexpercept.layouts.BenchmarkLayout` image method, the one rule for
    the paths a bundle names (docs/benchmark_format.md, "Paths a bundle names").
    """
    try:
        return (build(*args),)
    except SchemaError as exc:
        problems.append(str(exc))
        return ()


def _questions(key_id: str, item: BenchmarkItem, layout: BenchmarkLayout,
               problems: list[str]) -> list[_Question]:
    """The questions a case is asked for its path, with their images (docs/benchmark_format.md).

    An image path the bundle may not name (:meth:`chexpercept.layouts.BenchmarkLayout.case_file`)
    goes to ``problems`` and is left out of its question's images.
    """
    det = item.detection_qa
    out = [_Question(DETECTION, det.question, tuple(det.answer_options), det.answer,
                     det.answer_index, False,
                     _images(problems, layout.detection_image, key_id))]
    path = qa_path_of(item)
    if path == "lesion_free":
        return out
    contour = item.contour_qa
    assert contour is not None
    ev = contour.contour_eval_qa
    out.append(_Question(CONTOUR_EVAL, ev.question, tuple(ev.answer_options), ev.answer,
                         ev.answer_index, False,
                         _images(problems, layout.contour_eval_image, key_id, ev.relative_path)))
    if path == "revision_required":
        missing = [name for name in (EXPANSION, CONTRACTION, REVISION_RESULT, "initial_context")
                   if getattr(contour, name) is None]
        if missing:
            problems.append(f"{key_id}: revision-required case lacks contour_qa field(s) "
                            f"{missing}")
        else:
            exp = contour.contour_revision_qa_expansion
            con = contour.contour_revision_qa_contraction
            res = contour.contour_revision_qa_revision_result
            assert exp is not None and con is not None and res is not None
            for name, qa, images in ((EXPANSION, exp,
                                      _images(problems, layout.points_image, key_id)),
                                     (CONTRACTION, con, ())):
                out.append(_Question(name, qa.question,
                                     tuple(point_text(o) for o in qa.answer_options),
                                     qa.answer, tuple(qa.answer_index), True, images))
            out.append(_Question(
                REVISION_RESULT, res.question,
                tuple(f"{ordinal(i)} mask" for i in range(1, len(res.answer_options) + 1)),
                res.answer, res.answer_index, False,
                tuple(p for i, o in enumerate(res.answer_options)
                      for p in _images(problems, layout.option_image, key_id, o.relative_path,
                                       i))))
    attrs = item.attribute_extraction_qa
    if attrs is not None:
        by_name = {"distribution": attrs.distribution, "location": attrs.location,
                   "severity/measurement": attrs.severity_measurement,
                   "comparison": attrs.comparison}
        for sub in ATTRIBUTE_NAMES:
            qa = by_name[sub]
            multi = sub == "location"
            gt = tuple(qa.answer_index) if multi else qa.answer_index
            out.append(_Question(f"attribute_extraction_qa_{sub}", qa.question,
                                 tuple(qa.answer_options), qa.answer, gt, multi, ()))
    return out


def _answer_problems(q: _Question) -> tuple[list[str], str | None]:
    """(index problems, answer-text mismatch or None) of one question."""
    problems: list[str] = []
    n = len(q.option_texts)
    if n < 1:
        return [f"{q.name}: no answer options"], None
    indices = list(q.answer_index) if isinstance(q.answer_index, tuple) else [q.answer_index]
    if [i for i in indices if not 1 <= i <= n]:
        shown = indices if q.multi else q.answer_index
        problems.append(f"{q.name}: answer_index {shown} out of range 1..{n}")
    if q.multi:
        none = none_index(q.option_texts)
        if not indices:
            problems.append(f"{q.name}: empty answer_index")
        if len(set(indices)) != len(indices):
            problems.append(f"{q.name}: repeated answer_index {indices}")
        if none in indices and len(indices) > 1:
            problems.append(f"{q.name}: answer_index {indices} mixes the None option with "
                            f"others")
    listed = listed_option_count(q.question)
    if listed is not None and listed != n:
        problems.append(f"{q.name}: question lists {listed} options but answer_options has {n}")
    if problems or not indices:
        return problems, None
    expected = [q.option_texts[i - 1] for i in indices]
    given = [t.strip() for t in q.answer.split(", ")] if q.multi else [q.answer.strip()]
    if sorted(given) != sorted(expected) and q.answer.strip() != ", ".join(expected):
        return problems, (f"{q.name}: answer '{q.answer}' does not match answer_index "
                          f"{list(indices) if q.multi else q.answer_index} "
                          f"({', '.join(expected)})")
    return problems, None


def _structure_problems(key_id: str, item: BenchmarkItem) -> list[str]:
    """Path consistency, point options and revision-result options of one case."""
    problems: list[str] = []
    lesion = key_id.split("_", 1)[0]
    pair_id = key_id.split("_", 1)[1] if "_" in key_id else ""
    if item.pair_id != pair_id:
        problems.append(f"{key_id}: pair_id '{item.pair_id}' does not match the key_id "
                        f"(expected '{pair_id}')")
    path = qa_path_of(item)
    asked = expected_stages(path, lesion)  # the one path rule (chexpercept.lesions)
    if 2 not in asked:
        return problems
    wants_attrs = 4 in asked
    if wants_attrs and item.attribute_extraction_qa is None:
        problems.append(f"{key_id}: positive {lesion} case has no attribute_extraction_qa "
                        f"(every lung-lesion positive is asked Stage 4)")
    if not wants_attrs and item.attribute_extraction_qa is not None:
        problems.append(f"{key_id}: attribute_extraction_qa must be null for {lesion}")
    contour = item.contour_qa
    assert contour is not None
    if 3 not in asked:
        return problems
    exp, con = contour.contour_revision_qa_expansion, contour.contour_revision_qa_contraction
    res = contour.contour_revision_qa_revision_result
    for name, qa in ((EXPANSION, exp), (CONTRACTION, con)):
        if qa is None:
            continue
        options = qa.answer_options
        if not options or options[-1].point is not None or options[-1].color != "None":
            problems.append(f"{key_id}: {name}: the last option must be "
                            f"{{'point': null, 'color': 'None'}}")
        points = list(options[:-1])
        if len(points) > MAX_POINTS:
            problems.append(f"{key_id}: {name}: {len(points)} points (at most {MAX_POINTS})")
        colors = [o.color for o in points]
        if len(set(colors)) != len(colors):
            problems.append(f"{key_id}: {name}: repeated point colours {colors}")
        for i, o in enumerate(points, start=1):
            if o.point is None or len(o.point) != 2:
                problems.append(f"{key_id}: {name}: option {i} ({o.color}) has no [x, y] point")
            elif not (0 <= o.point[0] < WORK_SIZE and 0 <= o.point[1] < WORK_SIZE):
                problems.append(f"{key_id}: {name}: option {i} ({o.color}) point {o.point} is "
                                f"outside the {WORK_SIZE}x{WORK_SIZE} image frame")
    if exp is not None and con is not None and [o.model_dump() for o in exp.answer_options] != \
            [o.model_dump() for o in con.answer_options]:
        problems.append(f"{key_id}: {CONTRACTION}: options differ from {EXPANSION}'s (both "
                        f"questions share one point list)")
    if res is not None:
        n = len(res.answer_options)
        if n < 2:
            problems.append(f"{key_id}: {REVISION_RESULT}: {n} option(s); at least 2 needed")
        true_at = [i for i, o in enumerate(res.answer_options, start=1) if o.type == "true"]
        if len(true_at) != 1:
            problems.append(f"{key_id}: {REVISION_RESULT}: {len(true_at)} option(s) of type "
                            f"'true'; exactly 1 expected")
        elif 1 <= res.answer_index <= n and true_at[0] != res.answer_index:
            problems.append(f"{key_id}: {REVISION_RESULT}: answer_index {res.answer_index} but "
                            f"the 'true' option is {true_at[0]}")
        distinct = {o.relative_path for o in res.answer_options}
        if len(distinct) != n:
            problems.append(f"{key_id}: {REVISION_RESULT} has {n} options but {len(distinct)} "
                            f"distinct option images")
    return problems


#: Image formats every provider can send (OpenAI-compatible servers, Gemini, vLLM data URLs).
SENDABLE_FORMATS = ("PNG", "JPEG", "GIF", "WEBP")
#: A CXR whose shorter side is below this many pixels is a warning: half the 1024 x 1024
#: working frame, below which the frame's point markers, edits and lung zones shrink to a few
#: pixels (docs/images.md, "Image size").
MIN_IMAGE_SIDE_PX = 512
#: A CXR whose longer side is more than this many times its shorter side is a warning: no
#: radiographic detector format is beyond 4:3 (docs/images.md, "Image size").
MAX_ASPECT_RATIO = 2.0


def _image_info(path: Path) -> tuple[str | None, ImageHeader | None]:
    """(problem, header) of one image file; the header is None when there is a problem.

    A problem is a missing file, a file that is not an image, an image too large for Pillow's
    decompression-bomb guard, or a format outside :data:`SENDABLE_FORMATS`. The header's size
    is the upright size a model is shown, and its ``reason`` says why the loader converts the
    file (docs/images.md, "Image loading").
    """
    if not path.is_file():
        return "missing", None
    try:
        with Image.open(path) as im:
            kind = im.format
            im.verify()
        header = inspect_image(path)
    except Image.DecompressionBombError as exc:
        return f"is too large to open safely ({exc})", None
    except (OSError, ValueError, SyntaxError) as exc:
        return f"cannot be opened as an image ({exc})", None
    except InputError as exc:
        return f"cannot be opened as an image ({exc.__cause__ or exc})", None
    if kind not in SENDABLE_FORMATS:
        return (f"is a {kind} image; models are sent {', '.join(SENDABLE_FORMATS)} only "
                f"(convert it, e.g. to PNG)"), None
    return None, header


def is_own_bundle(layout: BenchmarkLayout, items: Mapping[str, BenchmarkItem]) -> bool:
    """Whether this code wrote the bundle.

    True when ``sampling_summary.json`` carries :data:`BUNDLE_FORMAT` or any revision option is
    named ``option_<i>.png``.
    """
    summary = _read_summary(layout)
    if summary is not None and summary.get("bundle_format") == BUNDLE_FORMAT:
        return True
    for item in items.values():
        res = item.contour_qa.contour_revision_qa_revision_result if item.contour_qa else None
        if res is not None and any(OWN_OPTION_NAME.match(o.relative_path)
                                   for o in res.answer_options):
            return True
    return False


def _read_summary(layout: BenchmarkLayout) -> dict[str, Any] | None:
    if not layout.sampling_summary_json.is_file():
        return None
    try:
        data = read_json(layout.sampling_summary_json)
    except (InputError, SchemaError):
        return None
    return data if isinstance(data, dict) else None


def _summary_problems(layout: BenchmarkLayout, items: Mapping[str, BenchmarkItem]
                      ) -> list[str]:
    """Per lesion/path counts of ``sampling_summary.json`` against the JSON (path counts)."""
    summary = _read_summary(layout)
    if summary is None or not isinstance(summary.get("per_lesion"), dict):
        return []
    counts: dict[tuple[str, str], int] = {}
    for key_id, item in items.items():
        try:
            key = (key_id.split("_", 1)[0], qa_path_of(item))
        except SchemaError:
            continue
        counts[key] = counts.get(key, 0) + 1
    problems = []
    for lesion, paths in summary["per_lesion"].items():
        for path, entry in (paths or {}).items():
            want = entry.get("selected") if isinstance(entry, dict) else None
            have = counts.get((lesion, path), 0)
            if want is not None and want != have:
                problems.append(f"{layout.sampling_summary_json.name}: {lesion}/{path} "
                                f"selected {want} but {layout.json_path.name} has {have}")
    return problems


def check_bundle(layout: BenchmarkLayout, items: Mapping[str, BenchmarkItem],
                 key_ids: Iterable[str] | None = None, *, strict_names: bool | None = None
                 ) -> BundleCheck:
    """Check the selected cases of a loaded bundle; collect every problem, raise nothing.

    Per case: the key_id is a safe folder name and every image path it names stays inside
    the bundle, symbolic links resolved (:meth:`chexpercept.layouts.BenchmarkLayout.case_file`;
    docs/benchmark_format.md, "Paths a bundle names"); lesion prefix and ``pair_id``; the
    questions its path needs (revision-required:
    the three revision questions and ``initial_context``; lung-lesion positives: Stage 4;
    cardiomegaly: no Stage 4); every image of every question exists, opens (PIL ``verify``)
    and has the size of the case's CXR (``detection_qa/xray.png``; docs/benchmark_format.md,
    "Image bundle"); revision-result options have distinct images, one per option,
    exactly one ``true`` option and ``answer_index`` on it; every question lists as many
    ``(i)`` options as ``answer_options``; every ``answer_index`` is in range (multi-select:
    non-empty, no repeats, "None" only alone); the ``answer`` text agrees with the index;
    point options: <= 8 points with distinct colours inside the 1024x1024 frame, "None" last,
    one list shared by expansion and contraction (docs/benchmark_format.md, "Option naming");
    no file of the case folder has an answer-revealing name (:data:`LEAK_WORDS`). For the whole
    bundle (when ``key_ids`` is None): ``sampling_summary.json`` counts agree with the JSON.

    Errors vs warnings: answer-revealing names and answer-text mismatches are errors for our
    bundles (``strict_names``; auto-detected by :func:`is_own_bundle` when None) and
    warnings for the released bundle; a CXR that is not 1024x1024 is only logged (debug),
    unless its shorter side is below :data:`MIN_IMAGE_SIDE_PX` or its aspect ratio above
    :data:`MAX_ASPECT_RATIO`, each a warning naming the key_id, file and size
    (docs/images.md, "Image size"); an
    image the loader converts before a model sees it (16-bit, palette, alpha, CMYK, EXIF
    orientation; :func:`utils.imaging.needs_conversion`) is a warning, once per file, and is
    listed in ``BundleCheck.conversions`` (docs/images.md, "Image loading"). Sizes are the
    upright sizes a model is shown.

    Args:
        layout: The bundle's paths.
        items: Its validated cases (JSON order).
        key_ids: Cases to check, in order; None checks every case.
        strict_names: Force the strict (True) or released (False) rule; None detects it.

    Returns:
        The check (call :meth:`BundleCheck.raise_for_problems` to fail on problems).
    """
    strict = is_own_bundle(layout, items) if strict_names is None else strict_names
    keys = list(items) if key_ids is None else list(key_ids)
    check = BundleCheck(root=layout.root, strict_names=strict)
    opened: dict[Path, tuple[str | None, ImageHeader | None]] = {}
    odd_sizes: list[str] = []
    for key_id in keys:
        item = items.get(key_id)
        if item is None:
            check.problems.append(f"{key_id}: not in {layout.json_path}")
            continue
        unsafe = key_id_problem(key_id)
        if unsafe is not None:
            check.problems.append(f"key_id {key_id!r} {unsafe}")
            continue
        if key_id.split("_", 1)[0] not in LESIONS:
            check.problems.append(f"{key_id}: key_id does not start with a lesion name "
                                  f"({', '.join(LESIONS)})")
            continue
        try:
            questions = _questions(key_id, item, layout, check.problems)
        except SchemaError as exc:
            check.problems.append(f"{key_id}: {exc}")
            continue
        check.cases.append(key_id)
        check.problems.extend(_structure_problems(key_id, item))
        cxr_size: tuple[int, int] | None = None
        for q in questions:
            index_problems, mismatch = _answer_problems(q)
            check.problems.extend(f"{key_id}: {p}" for p in index_problems)
            if mismatch:
                (check.problems if strict else check.warnings).append(f"{key_id}: {mismatch}")
            for image in q.images:
                if image not in opened:
                    opened[image] = _image_info(image)
                    _note_conversion(check, key_id, q.name, image, opened[image][1])
                problem, header = opened[image]
                if problem is not None or header is None:
                    check.problems.append(f"{key_id}: {q.name} image {problem} ({image})")
                    continue
                size = header.size
                if q.name == DETECTION:
                    cxr_size = size
                    if size != (WORK_SIZE, WORK_SIZE):
                        odd_sizes.append(f"{key_id} {size[0]}x{size[1]}")
                        check.warnings.extend(_size_warnings(key_id, image, size))
                elif cxr_size is not None and size != cxr_size:
                    check.problems.append(f"{key_id}: {q.name} image is {size[0]}x{size[1]} but "
                                          f"the CXR is {cxr_size[0]}x{cxr_size[1]} ({image})")
        check.problems.extend(_name_problems(key_id, item, layout, strict, check.warnings))
    if key_ids is None:
        check.problems.extend(_summary_problems(layout, items))
    if odd_sizes:  # legal (images only need the CXR's size); noted for debugging
        logger.debug("%d case(s) have a CXR that is not %dx%d (point coordinates are in that "
                     "frame): %s", len(odd_sizes), WORK_SIZE, WORK_SIZE, ", ".join(odd_sizes[:5]))
    check.images = len(opened)
    return check


def _size_warnings(key_id: str, image: Path, size: tuple[int, int]) -> list[str]:
    """Warnings for a CXR too small or too elongated to be a usable chest X-ray.

    Args:
        key_id: The case.
        image: Its ``detection_qa`` CXR file.
        size: ``(width, height)`` in pixels, upright (as a model is shown it).

    Returns:
        One line per finding: the shorter side below :data:`MIN_IMAGE_SIDE_PX`, the aspect
        ratio above :data:`MAX_ASPECT_RATIO` (docs/images.md, "Image size"); none for a usual CXR.
    """
    width, height = size
    short, long = min(size), max(size)
    where = f"{key_id}: {DETECTION} image is {width}x{height} pixels"
    lines = []
    if short < MIN_IMAGE_SIDE_PX:
        lines.append(f"{where}, its shorter side below the {MIN_IMAGE_SIDE_PX} px minimum of a "
                     f"CXR (docs/images.md, 'Image size'): a thumbnail, a crop or the wrong "
                     f"file? ({image})")
    if short > 0 and long / short > MAX_ASPECT_RATIO:
        lines.append(f"{where}, an aspect ratio of {long / short:.1f}:1, beyond the "
                     f"{MAX_ASPECT_RATIO:g}:1 of any radiograph (docs/images.md, 'Image size'): "
                     f"a strip, a crop or the wrong file? ({image})")
    return lines


def _note_conversion(check: BundleCheck, key_id: str, question: str, image: Path,
                     header: ImageHeader | None) -> None:
    """Warn once per file that the loader converts it (16-bit, palette, alpha, CMYK, EXIF)."""
    if header is None or header.reason is None:
        return
    check.conversions[image] = header.reason
    check.warnings.append(f"{key_id}: {question} image needs conversion ({header.reason}); "
                          f"models are sent the loader's 8-bit PNG (docs/images.md, 'Image "
                          f"loading') ({image})")


def _name_problems(key_id: str, item: BenchmarkItem, layout: BenchmarkLayout, strict: bool,
                   warnings: list[str]) -> list[str]:
    """Answer-revealing names among the option paths and the files of the case folder."""
    paths: list[Path] = []
    contour = item.contour_qa
    res = contour.contour_revision_qa_revision_result if contour else None
    if res is not None and contour is not None and not contour.no_deformation:
        ignored: list[str] = []  # a path out of the bundle is refused by _questions
        paths += [p for i, o in enumerate(res.answer_options)
                  for p in _images(ignored, layout.option_image, key_id, o.relative_path, i)]
    case_dir = layout.case_dir(key_id)
    if case_dir.is_dir():
        paths += sorted(p for p in case_dir.rglob("*") if p.is_file())
    problems = []
    for path in dict.fromkeys(paths):
        if leaks_answer(path.name):
            line = f"{key_id}: file name '{path.name}' reveals the answer ({path})"
            (problems if strict else warnings).append(line)
    return problems


def validate_benchmark_dir(root: str | Path, key_ids: Iterable[str] | None = None, *,
                           strict_names: bool | None = None) -> tuple[BundleCheck,
                                                                      dict[str, BenchmarkItem]]:
    """Load ``<root>/chexpercept.json`` (schema) and run :func:`check_bundle`; raise on problems.

    A parquet dataset folder (docs/hf_dataset.md) is checked in its unpacked folder form
    (:func:`chexpercept.parquet_bundle.unpack_parquet_bundle`).

    Args:
        root: Folder with ``chexpercept.json`` and ``chexpercept/``, or a parquet dataset
            folder.
        key_ids: Cases to check; None checks all (and the sampling summary counts).
        strict_names: See :func:`check_bundle`.

    Returns:
        ``(check, items)``; warnings are in ``check.warnings`` (not logged here).

    Raises:
        InputError: If ``chexpercept.json`` or ``chexpercept/`` is missing, or a parquet
            dataset cannot be unpacked.
        SchemaError: Once, listing every schema problem, or every bundle problem.
    """
    if is_parquet_bundle(root):
        root = unpack_parquet_bundle(root)
    layout = BenchmarkLayout(Path(root))
    if not layout.json_path.is_file():
        raise InputError(f"benchmark JSON not found: {layout.json_path} (the benchmark folder "
                         f"must hold chexpercept.json and the chexpercept/ image folder)")
    if not layout.images_dir.is_dir():
        raise InputError(f"benchmark image folder not found: {layout.images_dir}")
    items = load_benchmark(layout.json_path)
    check = check_bundle(layout, items, key_ids, strict_names=strict_names)
    check.raise_for_problems()
    return check, items
