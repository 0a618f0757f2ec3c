"""Stage 03: read the benchmark bundle (``chexpercept.json`` + ``chexpercept/<key_id>/`` images).

The bundle is read exactly as released (docs/benchmark_format.md, "Files", "JSON fields" and
"Image bundle"): option images are located through each option's ``relative_path``, so the
release's ``option_<i>_mask_{answer|fake}.png`` and our ``option_<i>.png`` both work. Each case
becomes an :class:`EvalCase`: its ground-truth path (docs/benchmark_format.md, "QA paths") and
the turns it is asked (docs/evaluation_protocol.md, "Turn order"), with the images every turn
shows. :func:`validate_bundle` checks everything a run needs before the first request, so a
case is never asked with fewer images than its question lists (the release sent what it had;
docs/differences.md D35).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chexpercept import schema
from chexpercept.bundle import check_bundle, none_index, ordinal, point_text
from chexpercept.bundle import listed_option_count as listed_option_count  # re-exported
from chexpercept.errors import InputError, SchemaError
from chexpercept.image_digests import ImageDigests, digest_files
from chexpercept.layouts import BenchmarkLayout
from chexpercept.lesions import QA_PATHS, expected_stages
from chexpercept.parquet_bundle import is_parquet_bundle, unpack_parquet_bundle

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnSpec:
    """One of the nine dialogue turns (docs/evaluation_protocol.md, "Turn order").

    Attributes:
        index: Turn index 0..8 (dialogue order; the runner batches by it).
        name: Key in ``all_results.json``'s ``_chat_history_idx`` and in ``records.jsonl``.
        section: The ``all_results.json`` section holding the result.
        sub: Sub-question key inside the section (None for Stages 1 and 2).
    """

    index: int
    name: str
    section: str
    sub: str | None = None


#: The nine turns in dialogue order (docs/evaluation_protocol.md, "Turn order").
TURNS: tuple[TurnSpec, ...] = (
    TurnSpec(0, "detection_qa", "detection_qa"),
    TurnSpec(1, "contour_evaluation_qa", "contour_evaluation_qa"),
    TurnSpec(2, "contour_revision_qa_expansion", "contour_revision_qa", "expansion"),
    TurnSpec(3, "contour_revision_qa_contraction", "contour_revision_qa", "contraction"),
    TurnSpec(4, "contour_revision_qa_revision_result", "contour_revision_qa", "revision_result"),
    *(TurnSpec(5 + i, f"attribute_extraction_qa_{key}", "attribute_extraction_qa", key)
      for i, key in enumerate(schema.ATTRIBUTE_KEYS)),
)
TURN_BY_NAME: dict[str, TurnSpec] = {t.name: t for t in TURNS}
NUM_TURNS = len(TURNS)


@dataclass(frozen=True)
class PlannedTurn:
    """One question of one case, ready to be asked.

    Attributes:
        spec: Which turn.
        question: Question text from the JSON (options included), without oracle text.
        images: Images attached to this turn, in order (paths built from the benchmark dir).
        ground_truth: 1-based option index; for multi-select the indices as stored in the JSON.
        option_texts: Option labels as the question lists them ("Yes", "red point", "None",
            "2nd mask", ...), used for exact text answers.
        multi_select: Whether the answer is a set (scored by set equality).
        none_index: 1-based index of the "None" option of a multi-select question, else None.
        preamble: Text placed before the question (the revision ``initial_context``), or None.
        option_images: Whether ``images`` are the options themselves, one per option in
            option order (the revision result's candidate masks), so a new option order
            permutes the images and leaves the positional labels ("1st mask") in place.
        option_order: None in the release order; else displayed position i (0-based) shows
            ORIGINAL option ``option_order[i]`` (1-based) and ``question``, ``option_texts``,
            ``images`` and ``none_index`` are as displayed, while ``ground_truth`` stays in
            original numbers (docs/evaluation_protocol.md, "Option order").
        rotation: ``k`` for the k-th rotation of a single-choice question asked under
            ``--option-order circular`` (its own dialogue branch), 0 for every asked turn.
        rotation_of: The turn name this rotation repeats (None unless ``rotation``).
    """

    spec: TurnSpec
    question: str
    images: tuple[Path, ...]
    ground_truth: int | tuple[int, ...]
    option_texts: tuple[str, ...]
    multi_select: bool = False
    none_index: int | None = None
    preamble: str | None = None
    option_images: bool = False
    option_order: tuple[int, ...] | None = None
    rotation: int = 0
    rotation_of: str | None = None

    @property
    def num_options(self) -> int:
        """Number of answer options."""
        return len(self.option_texts)

    def displayed(self, original: int) -> int:
        """The displayed 1-based position of ORIGINAL option ``original``."""
        return original if self.option_order is None else self.option_order.index(original) + 1

    def original(self, displayed: int) -> int:
        """The ORIGINAL 1-based option shown at displayed position ``displayed``."""
        return displayed if self.option_order is None else self.option_order[displayed - 1]

    @property
    def displayed_ground_truth(self) -> int | tuple[int, ...]:
        """The ground truth in displayed numbers (sorted for multi-select)."""
        gt = self.ground_truth
        if isinstance(gt, tuple):
            return tuple(sorted(self.displayed(i) for i in gt))
        return self.displayed(gt)

    @property
    def original_option_texts(self) -> tuple[str, ...]:
        """``option_texts`` in ORIGINAL option order."""
        if self.option_order is None or self.option_images:
            return self.option_texts
        return tuple(self.option_texts[self.displayed(i) - 1]
                     for i in range(1, self.num_options + 1))


@dataclass(frozen=True)
class EvalCase:
    """One benchmark case: its path and the turns it is asked, in order.

    Attributes:
        key_id: ``<lesion>_<pair_id>``.
        lesion: The target lesion.
        qa_path: ``lesion_free``, ``revision_free`` or ``revision_required`` (from ground truth).
        turns: Planned turns in dialogue order (LF 1, RF 6, RR 9; cardiomegaly RF 2, RR 5).
        item: The validated benchmark entry (oracle texts read point colours from it).
    """

    key_id: str
    lesion: str
    qa_path: str
    turns: tuple[PlannedTurn, ...]
    item: schema.BenchmarkItem

    def turn(self, name: str) -> PlannedTurn | None:
        """The planned turn called ``name``, or None if this case's path has no such turn."""
        for planned in self.turns:
            if planned.spec.name == name:
                return planned
        return None


@dataclass(frozen=True)
class Bundle:
    """A loaded benchmark: layout, validated items (JSON order) and the JSON's sha256.

    Attributes:
        layout: Where ``chexpercept.json`` and the images are read from (for a parquet
            benchmark, its unpacked copy in the cache).
        items: The validated cases, in JSON order.
        json_sha256: sha256 of the ``chexpercept.json`` read (the run's benchmark identity).
        source_dir: The ``--benchmark-dir`` given (the parquet dataset folder, or the folder
            bundle itself); recorded as the run manifest's ``benchmark_dir``.
    """

    layout: BenchmarkLayout
    items: dict[str, schema.BenchmarkItem]
    json_sha256: str
    source_dir: Path | None = None


def load_bundle(benchmark_dir: str | Path) -> Bundle:
    """Read ``<benchmark_dir>/chexpercept.json`` with :func:`chexpercept.schema.load_benchmark`.

    A parquet dataset folder (Stage 02's ``03_export_hf_dataset.py``, or its copy from a hub)
    is first unpacked into its folder form by
    :func:`chexpercept.parquet_bundle.unpack_parquet_bundle` (docs/hf_dataset.md, "Reading it
    back"); everything after that is the folder bundle's path.

    Args:
        benchmark_dir: Folder holding ``chexpercept.json`` and ``chexpercept/``, or a parquet
            dataset folder.

    Returns:
        The bundle; items keep the JSON's key order.

    Raises:
        InputError: If ``chexpercept.json`` or the ``chexpercept/`` image folder is missing,
            or a parquet dataset cannot be unpacked (names the shard and key_id).
        SchemaError: If the JSON does not match the schema (every bad key_id listed).
        MissingDependencyError: For a parquet dataset without pyarrow installed.
    """
    source = Path(benchmark_dir)
    root = unpack_parquet_bundle(source) if is_parquet_bundle(source) else source
    layout = BenchmarkLayout(root)
    if not layout.json_path.is_file():
        raise InputError(f"benchmark JSON not found: {layout.json_path} (--benchmark-dir must "
                         f"hold chexpercept.json and the chexpercept/ image folder)")
    if not layout.images_dir.is_dir():
        raise InputError(f"benchmark image folder not found: {layout.images_dir}")
    items = schema.load_benchmark(layout.json_path)
    digest = hashlib.sha256(layout.json_path.read_bytes()).hexdigest()
    return Bundle(layout=layout, items=items, json_sha256=digest, source_dir=source)


def select_key_ids(bundle: Bundle, *, limit: int | None = None,
                   per_path_limit: int | None = None) -> list[str]:
    """Cases to evaluate, in JSON order (docs/evaluation_protocol.md, "Turn order").

    Args:
        bundle: The loaded benchmark.
        limit: Keep the first ``limit`` cases; None keeps all.
        per_path_limit: Keep the first N cases of each path; overrides ``limit``.

    Returns:
        Selected key_ids in JSON order.

    Raises:
        SchemaError: If a positive case has no ``contour_qa``.
    """
    keys = list(bundle.items)
    if per_path_limit is not None:
        counts = dict.fromkeys(QA_PATHS, 0)
        out = []
        for key_id in keys:
            path = schema.qa_path_of(bundle.items[key_id], key_id)
            if counts[path] < per_path_limit:
                counts[path] += 1
                out.append(key_id)
        return out
    return keys if limit is None else keys[:limit]


def plan_case(key_id: str, item: schema.BenchmarkItem, layout: BenchmarkLayout) -> EvalCase:
    """Build the turns a case is asked (docs/evaluation_protocol.md, "Turn order").

    No file is opened. The stages come from the one path rule
    (:func:`chexpercept.lesions.expected_stages`): detection (all); contour evaluation (RF,
    RR); expansion, contraction and revision result (RR); the four attribute questions (RF,
    RR, not for cardiomegaly, whose ``attribute_extraction_qa`` is null). Every image path is
    built by the bundle's one path rule
    (:meth:`chexpercept.layouts.BenchmarkLayout.case_file`), so no request ever names a file
    outside the bundle (docs/benchmark_format.md, "Paths a bundle names").

    Raises:
        SchemaError: Naming the key_id and every question missing for its path; or naming the
            key_id, field and path of an image path the bundle may not name (an unsafe
            key_id, an absolute or climbing ``relative_path``, a symbolic link out of the
            bundle).
    """
    lesion = key_id.split("_", 1)[0]
    path = schema.qa_path_of(item, key_id)
    asked = expected_stages(path, lesion)  # the one path rule (chexpercept.lesions)
    turns: list[PlannedTurn] = []
    det = item.detection_qa
    turns.append(PlannedTurn(TURNS[0], det.question, (layout.detection_image(key_id),),
                             det.answer_index, tuple(det.answer_options)))
    if 2 not in asked:
        return EvalCase(key_id, lesion, path, tuple(turns), item)
    contour = item.contour_qa
    assert contour is not None  # guaranteed by qa_path_of
    ev = contour.contour_eval_qa
    turns.append(PlannedTurn(TURNS[1], ev.question,
                             (layout.contour_eval_image(key_id, ev.relative_path),),
                             ev.answer_index, tuple(ev.answer_options)))
    if 3 in asked:
        missing = [name for name in ("contour_revision_qa_expansion",
                                     "contour_revision_qa_contraction",
                                     "contour_revision_qa_revision_result", "initial_context")
                   if getattr(contour, name) is None]
        if missing:
            raise SchemaError(f"{key_id}: revision-required case lacks contour_qa field(s) "
                              f"{missing}")
        exp, con = contour.contour_revision_qa_expansion, contour.contour_revision_qa_contraction
        res = contour.contour_revision_qa_revision_result
        assert exp is not None and con is not None and res is not None
        for spec, qa, images, preamble in (
            (TURNS[2], exp, (layout.points_image(key_id),), contour.initial_context),
            (TURNS[3], con, (), None),
        ):
            texts = tuple(point_text(o) for o in qa.answer_options)
            turns.append(PlannedTurn(spec, qa.question, images, tuple(qa.answer_index), texts,
                                     multi_select=True, none_index=none_index(texts),
                                     preamble=preamble))
        turns.append(PlannedTurn(
            TURNS[4], res.question,
            tuple(layout.option_image(key_id, o.relative_path, i)
                  for i, o in enumerate(res.answer_options)),
            res.answer_index,
            tuple(f"{ordinal(i)} mask" for i in range(1, len(res.answer_options) + 1)),
            option_images=True))
    if 4 in asked:
        attrs = item.attribute_extraction_qa
        if attrs is None:  # validate_bundle names it first (chexpercept.bundle)
            raise SchemaError(f"{key_id}: positive {lesion} case has no attribute_extraction_qa")
        questions = {"distribution": attrs.distribution, "location": attrs.location,
                     "severity/measurement": attrs.severity_measurement,
                     "comparison": attrs.comparison}
        for spec in TURNS[5:]:
            qa = questions[spec.sub]
            texts = tuple(qa.answer_options)
            multi = spec.sub in schema.MULTI_SELECT
            gt = tuple(qa.answer_index) if multi else qa.answer_index
            turns.append(PlannedTurn(spec, qa.question, (), gt, texts, multi_select=multi,
                                     none_index=none_index(texts) if multi else None))
    return EvalCase(key_id, lesion, path, tuple(turns), item)


def validate_bundle(bundle: Bundle, key_ids: Sequence[str] | None = None) -> list[EvalCase]:
    """Check up front everything the selected cases need, and plan them.

    The checks are the shared bundle validator's (:func:`chexpercept.bundle.check_bundle`,
    also run by Stage 02): questions per path, images present, readable and the CXR's size,
    option counts, answer indices, point options, answer-revealing names (an error for our
    bundles, a warning for the released one). Warnings are logged.

    Args:
        bundle: The loaded benchmark.
        key_ids: Cases to check, in order; None checks every case.

    Returns:
        The planned cases, in the order of ``key_ids``.

    Raises:
        SchemaError: Once, listing every problem as ``<key_id>: <what> (<path>)``.
    """
    keys = list(bundle.items) if key_ids is None else list(key_ids)
    check = check_bundle(bundle.layout, bundle.items, key_ids)
    check.log_warnings()
    check.raise_for_problems(" (no case was run)")
    cases = [plan_case(key_id, bundle.items[key_id], bundle.layout) for key_id in keys]
    logger.info("benchmark bundle OK: %d case(s), %d image(s) checked", len(cases), check.images)
    return cases


def plan_cases(bundle: Bundle, key_ids: Sequence[str]) -> list[EvalCase]:
    """Plan cases without opening images (for cases already finished in an earlier run).

    Raises:
        SchemaError: Listing every case that cannot be planned.
    """
    cases, problems = [], []
    for key_id in key_ids:
        try:
            cases.append(plan_case(key_id, bundle.items[key_id], bundle.layout))
        except SchemaError as exc:
            problems.append(str(exc))
    if problems:
        raise SchemaError("cannot plan case(s):\n  " + "\n  ".join(problems))
    return cases


def bundle_images(bundle: Bundle) -> dict[str, Path]:
    """Every image file the bundle's cases send, by path relative to its ``chexpercept/`` folder.

    All cases of the JSON, not a selection, so a run stopped under ``--limit`` and resumed on
    more cases, and every part of a sharded run, have one image identity (docs/
    evaluation_protocol.md, "Run folder"). The images are :func:`plan_case`'s (the one path
    rule); a case that cannot be planned sends nothing and is left out (the validator refuses
    it when it is selected). No file is opened.

    Returns:
        ``<key_id>/<path in the case folder>`` (``/``-separated) -> the file, sorted.
    """
    images_dir = bundle.layout.images_dir
    out: dict[str, Path] = {}
    for key_id, item in bundle.items.items():
        try:
            case = plan_case(key_id, item, bundle.layout)
        except SchemaError as exc:
            logger.debug("image digests: %s is left out (%s)", key_id, exc)
            continue
        for turn in case.turns:
            for image in turn.images:
                out[image.relative_to(images_dir).as_posix()] = image
    return dict(sorted(out.items()))


def bundle_image_digests(bundle: Bundle) -> ImageDigests:
    """The sha256 of every image the bundle sends (:func:`bundle_images`), cached per file.

    The manifest's ``benchmark_images_sha256`` (:func:`chexpercept.image_digests.digest_files`:
    one streaming read per new or changed file, one ``stat`` per file otherwise).
    """
    return digest_files(bundle_images(bundle))
