"""Core: artifact paths, one function per artifact (nnU-Net habit), with release defaults.

The on-disk layout of every stage (docs/README.md) is defined here, and each folder name's
builder sits next to its parser (:func:`eval_run_dir` / :func:`parse_run_name`). Every CLI can
override its roots. The paths a benchmark bundle names (key_ids, ``relative_path`` fields) are
built and checked by one rule here (:meth:`BenchmarkLayout.case_file`; docs/benchmark_format.md,
"Paths a bundle names").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from chexpercept.errors import SchemaError

# --------------------------------------------------------------------------------------
# Artifact paths (one function per artifact; release defaults; docs/README.md)
# --------------------------------------------------------------------------------------

#: Benchmark folder, relative to the repository root, when none is given (every stage's
#: ``--benchmark-dir`` default; :func:`default_benchmark_dir`).
DEFAULT_BENCHMARK_DIR = "data/chexpercept"
#: File that marks a folder of synthetic stand-in images (``chexpercept.synth.stand_ins``
#: writes it; Stage 00 reads it to record that a source's pixels are synthetic,
#: docs/public_data.md, "Synthetic stand-ins").
SYNTHETIC_PIXELS_MANIFEST = "SYNTHETIC_STAND_INS.json"
#: Oracle settings of Stage 03 (docs/evaluation_protocol.md, "Oracle settings"), in the
#: release's ``--oracle_setting`` order; a run folder is ``oracle_<setting>``.
ORACLE_SETTINGS: tuple[str, ...] = ("explicit", "implicit", "none")

STAGE_DIRS = {
    "00": "src/00_source_data_curation",
    "01": "src/01_mask_deformation",
    "02": "src/02_qa_generation",
    "03": "src/03_eval_vlm_on_chexpercept",
    "04": "src/04_analyze_eval_result",
}


def repo_root() -> Path:
    """The repository root (the folder holding ``pyproject.toml`` above this package)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "src" / "chexpercept").is_dir():
            return parent
    return Path.cwd()


def default_benchmark_dir() -> Path:
    """``<repo>/data/chexpercept`` (:data:`DEFAULT_BENCHMARK_DIR`), absolute."""
    return repo_root() / DEFAULT_BENCHMARK_DIR


def default_config_path() -> Path:
    """The config a stage reads when ``--config`` is not given: ``<repo>/cfg/config.yaml``.

    The one ``--config`` rule of the numbered scripts (docs/building.md, "Configuration"): a script
    that needs a config defaults to this file, wherever it is started from; a script whose
    config is optional (Stage 00.02 and 00.04, Stages 03 and 04) defaults to none. A path
    given on the command line is relative to the working directory, as any path argument.
    """
    return repo_root() / "cfg" / "config.yaml"


def stage_output_dir(stage: str, work_dir: str | Path | None = None) -> Path:
    """Output folder of a stage ("00".."04").

    Args:
        stage: Two-digit stage number.
        work_dir: Config ``path.work_dir``; when set, outputs go to ``<work_dir>/NN_<stage>``,
            otherwise to the release's ``<repo>/src/NN_<stage>/outputs``.
    """
    if work_dir:
        return Path(work_dir) / Path(STAGE_DIRS[stage]).name
    return repo_root() / STAGE_DIRS[stage] / "outputs"


@dataclass(frozen=True)
class CurationLayout:
    """Stage 00 artifact paths under ``out`` (default ``src/00_source_data_curation/outputs``)."""

    out: Path

    def segmentation_info(self, kind: str) -> Path:
        """The three ``*_segmentation_*info.json`` sampling files."""
        names = {"global": "global_segmentation_info.json",
                 "basic": "basic_segmentation_info.json",
                 "negative": "global_segmentation_negative_info.json"}
        return self.out / names[kind]

    @property
    def candidate_root(self) -> Path:
        """Root of candidate (ROSALIA-layout) masks: ``rosalia_pred/``."""
        return self.out / "rosalia_pred"

    def candidate_mask(self, target: str, pair_id: str) -> Path:
        """``rosalia_pred/<target>/<pair_id>/pred_mask.png``."""
        return self.candidate_root / target / pair_id / "pred_mask.png"

    def candidate_text(self, target: str, pair_id: str) -> Path:
        """``rosalia_pred/<target>/<pair_id>/pred_text.json`` (segmenter's text + instruction)."""
        return self.candidate_root / target / pair_id / "pred_text.json"

    def candidate_image(self, target: str, pair_id: str) -> Path:
        """``rosalia_pred/<target>/<pair_id>/pred_img.png``."""
        return self.candidate_root / target / pair_id / "pred_img.png"

    def review_plot(self, target: str, key_id: str) -> Path:
        """``rosalia_pred/plots/<target>/<key_id>.png`` (annotator review figure)."""
        return self.candidate_root / "plots" / target / f"{key_id}.png"

    def candidate_results(self, part: int | None = None) -> Path:
        """``rosalia_pred/results[_part<p>].json``."""
        return self.candidate_root / (f"results_part{part}.json" if part is not None
                                      else "results.json")

    def positive_sheet(self, part: int | None = None) -> Path:
        """``rosalia_pred/labeling_sheet[_part<p>].csv``."""
        return self.candidate_root / (f"labeling_sheet_part{part}.csv" if part is not None
                                      else "labeling_sheet.csv")

    def negative_image(self, lesion: str, key_id: str) -> Path:
        """``negative/<lesion>/<key_id>.png``."""
        return self.out / "negative" / lesion / f"{key_id}.png"

    @property
    def negative_sheet(self) -> Path:
        """``negative/labeling_sheet.csv``."""
        return self.out / "negative" / "labeling_sheet.csv"

    def annotator_dir(self, annotator: str, task: str) -> Path:
        """``distribute/annotator_<X>/<positive|negative>/``."""
        return self.out / "distribute" / f"annotator_{annotator}" / task

    @property
    def sampling_summary(self) -> Path:
        """``sampling_summary.json``: Stage 00.00 counts, dropped pairs and the inputs hash."""
        return self.out / "sampling_summary.json"

    def candidate_summary(self, part: int | None = None) -> Path:
        """``rosalia_pred/summary[_part<p>].json``: Stage 00.01 processed/skipped/failed items."""
        return self.candidate_root / (f"summary_part{part}.json" if part is not None
                                      else "summary.json")

    @property
    def negative_summary(self) -> Path:
        """``negative/summary.json``: Stage 00.03 counts and shortfalls."""
        return self.out / "negative" / "summary.json"

    @property
    def sampled_dicoms(self) -> Path:
        """``sampled_dicoms.csv``: ``dicom_id, source`` of every CXR a public run sampled.

        Written by Stage 00.00 for public sources; the ``--meta-csv`` of Stage 01.00 when the
        anatomy masks of ``box-anatomy`` are made first (docs/curation.md, "Public sources").
        """
        return self.out / "sampled_dicoms.csv"

    @property
    def data_sources(self) -> Path:
        """``data_sources.json``: licence of each source and the source of each CXR.

        Written by Stage 00.00, read by the Stage 02 export (docs/curation.md, "Licences").
        """
        return self.out / "data_sources.json"


@dataclass(frozen=True)
class DeformationLayout:
    """Stage 01 artifact paths under ``out`` (default ``src/01_mask_deformation/outputs``)."""

    out: Path

    @property
    def chexmask_dir(self) -> Path:
        """``chexmasku_pred/`` (``<dicom>/{right_lung,left_lung,heart}.png``)."""
        return self.out / "chexmasku_pred"

    @property
    def cxas_dir(self) -> Path:
        """``cxas_pred/`` (``<dicom>/<class name>.png``)."""
        return self.out / "cxas_pred"

    @property
    def deformed_masks_root(self) -> Path:
        """``deformed_masks/`` (holds one ``<key_id>/`` folder per case)."""
        return self.out / "deformed_masks"

    def deformed_mask_dir(self, key_id: str) -> Path:
        """``deformed_masks/<key_id>/``."""
        return self.deformed_masks_root / key_id

    def deformed_mask(self, key_id: str, stem: str) -> Path:
        """``deformed_masks/<key_id>/<stem>.png``."""
        return self.deformed_mask_dir(key_id) / f"{stem}.png"

    @property
    def results_json(self) -> Path:
        """``deformation_results/deformation_results.json``."""
        return self.out / "deformation_results" / "deformation_results.json"

    @property
    def summary_json(self) -> Path:
        """``deformation_results/summary.json`` (counts and failed cases with reasons)."""
        return self.out / "deformation_results" / "summary.json"

    @property
    def anatomy_summary_json(self) -> Path:
        """``anatomy_summary.json`` (01.00: backends, counts and failed dicoms with reasons)."""
        return self.out / "anatomy_summary.json"

    def item_json(self, key_id: str) -> Path:
        """``deformation_results/items/<key_id>.json``, written when a case finishes (resume)."""
        return self.out / "deformation_results" / "items" / f"{key_id}.json"

    @property
    def logs_dir(self) -> Path:
        """``logs/``."""
        return self.out / "logs"


def anatomy_mask_path(anatomy_dir: str | Path, dicom_id: str, name: str) -> Path:
    """``<anatomy_dir>/<dicom_id>/<name>.png`` (CheXmask-U and CXAS output layouts)."""
    return Path(anatomy_dir) / dicom_id / f"{name}.png"


@dataclass(frozen=True)
class QALayout:
    """Stage 02 artifact paths under ``out`` (default ``src/02_qa_generation/outputs``)."""

    out: Path

    @property
    def qa_results_json(self) -> Path:
        """``qa_results/qa_results.json`` (all generated cases, release schema)."""
        return self.out / "qa_results" / "qa_results.json"

    @property
    def qa_labeling_csv(self) -> Path:
        """``qa_results/qa_labeling.csv``."""
        return self.out / "qa_results" / "qa_labeling.csv"

    @property
    def bundle_dir(self) -> Path:
        """``chexpercept/`` (per-key_id image folders)."""
        return self.out / "chexpercept"

    @property
    def summary_json(self) -> Path:
        """``qa_results/summary.json`` (counts and cases that could not be built, with reasons)."""
        return self.out / "qa_results" / "summary.json"

    @property
    def review_dir(self) -> Path:
        """``qa_results/qa_visualizations/`` (the review figures ``qa_labeling.csv`` names)."""
        return self.out / "qa_results" / "qa_visualizations"

    def item_json(self, key_id: str) -> Path:
        """Per-case result (resume): ``qa_results/items/<key_id>.json``."""
        return self.out / "qa_results" / "items" / f"{key_id}.json"

    def case_dir(self, key_id: str) -> Path:
        """``chexpercept/<key_id>/`` (the case's image folder; docs/benchmark_format.md)."""
        return self.bundle_dir / key_id


#: Relative paths inside ``<bundle>/<key_id>/`` (docs/benchmark_format.md, "Image bundle").
DETECTION_IMAGE = "detection_qa/xray.png"
CONTOUR_QA_DIR = "contour_qa"
CONTOUR_EVAL_RELPATH = "contour_eval_qa/xray_with_mask.png"  # relative to contour_qa/
REVISION_DIR = "contour_qa/contour_revision_qa"
POINTS_IMAGE = "xray_with_mask_and_points.png"  # relative to REVISION_DIR


def option_image_name(index: int) -> str:
    """Our revision-option image name: ``option_<i>.png`` (1-based; does not reveal the answer).

    The release's ``option_<i>_mask_{answer|fake}.png`` names leak the answer; readers use each
    option's ``relative_path``, so both spellings are read.
    """
    return f"option_{index}.png"


# --------------------------------------------------------------------------------------
# The one rule for every path a bundle names (docs/benchmark_format.md, "Paths a bundle names")
# --------------------------------------------------------------------------------------

#: A key_id names one folder, ``chexpercept/<key_id>/``: an ASCII letter or digit, then up to
#: 199 ASCII letters, digits, ``_``, ``.`` and ``-``. So it is one path component on every
#: file system (no ``/``, ``\\``, NUL, no ``.`` or ``..``, never absolute) and fits a file
#: name; every released and exported key_id (``<lesion>_<pair_id>``, pair ids of MIMIC-ILS
#: studies and of the public sources' image ids) matches it (docs/benchmark_format.md,
#: "Paths a bundle names").
KEY_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


def key_id_problem(key_id: object) -> str | None:
    """Why ``key_id`` cannot name a case folder (:data:`KEY_ID_PATTERN`), or None if it can."""
    if not isinstance(key_id, str):
        return f"is a {type(key_id).__name__}, not a string"
    if KEY_ID_PATTERN.fullmatch(key_id):
        return None
    return ("is not a safe folder name: a key_id is one path component of ASCII letters, "
            "digits, '_', '.' and '-', starting with a letter or digit, at most 200 "
            "characters (docs/benchmark_format.md, 'Paths a bundle names')")


def relative_path_problem(text: object) -> str | None:
    """Why ``text`` is not a path inside the folder it is relative to, or None if it is.

    A bundle's relative path is POSIX (``/``-separated), relative (no leading ``/``, no drive
    such as ``C:``), and each of its parts is a name other than ``.`` and ``..``, without a
    backslash or a NUL (docs/benchmark_format.md, "Paths a bundle names").
    """
    if not isinstance(text, str):
        return f"is a {type(text).__name__}, not a string"
    why = None
    if not text:
        why = "is empty"
    elif "\0" in text or "\\" in text:
        why = "holds a NUL or a backslash"
    elif text.startswith("/") or re.match(r"[A-Za-z]:", text):
        why = "is absolute (or starts with a drive such as C:)"
    elif any(part in ("", ".", "..") for part in text.split("/")):
        why = "has an empty, '.' or '..' part (it would climb out of its folder)"
    if why is None:
        return None
    return (f"{why}; a bundle names files by a relative path inside the case folder "
            f"(docs/benchmark_format.md, 'Paths a bundle names')")


@dataclass(frozen=True)
class BenchmarkLayout:
    """The exported/released benchmark: ``<root>/chexpercept.json`` + ``<root>/chexpercept/``.

    Every file of a case is built by :meth:`case_file`, the one rule for the paths a bundle
    names (docs/benchmark_format.md, "Paths a bundle names"): the key_id is a safe name
    (:func:`key_id_problem`), each relative path stays inside the case folder
    (:func:`relative_path_problem`), and the file, symbolic links resolved, lies inside the
    resolved image folder ``chexpercept/``.
    """

    root: Path

    @property
    def json_path(self) -> Path:
        """``chexpercept.json``."""
        return self.root / "chexpercept.json"

    @property
    def images_dir(self) -> Path:
        """``chexpercept/``."""
        return self.root / "chexpercept"

    @property
    def sampling_summary_json(self) -> Path:
        """``sampling_summary.json`` (cases available/selected per lesion and path, shortfalls)."""
        return self.root / "sampling_summary.json"

    @property
    def data_sources_json(self) -> Path:
        """``data_sources.json``: licence, citation and case count of each source exported.

        docs/curation.md, "Licences".
        """
        return self.root / "data_sources.json"

    @property
    def stats_csv(self) -> Path:
        """``stats.csv`` (cases, CXRs and QA items per lesion, path and stage)."""
        return self.root / "stats.csv"

    def case_dir(self, key_id: str) -> Path:
        """``chexpercept/<key_id>/``.

        Raises:
            SchemaError: If ``key_id`` is not a safe folder name (:func:`key_id_problem`;
                names the key_id and ``chexpercept.json``).
        """
        problem = key_id_problem(key_id)
        if problem is not None:
            raise SchemaError(f"key_id {key_id!r} {problem} ({self.json_path})")
        return self.images_dir / key_id

    def case_file(self, key_id: str, *relative: str, field: str) -> Path:
        """``chexpercept/<key_id>/<relative...>``: the one way to a file a bundle names.

        Nothing is opened; the path is resolved (symbolic links followed, as far as it exists)
        to check where it leads.

        Args:
            key_id: The case.
            relative: Relative paths, joined in order (e.g. ``contour_qa`` and a question's
                ``relative_path``); each must pass :func:`relative_path_problem`.
            field: What names the file, for the message (e.g.
                ``contour_qa.contour_eval_qa.relative_path``).

        Returns:
            The path as built under :attr:`images_dir` (not resolved).

        Raises:
            SchemaError: Naming the key_id, the field, the path and ``chexpercept.json``, if
                the key_id is not a safe name, a relative path is absolute or climbs (``..``),
                or the file resolves outside the resolved :attr:`images_dir` (a symbolic link
                leaving the bundle).
        """
        case = self.case_dir(key_id)
        for part in relative:
            problem = relative_path_problem(part)
            if problem is not None:
                raise SchemaError(f"{key_id}: {field} {part!r} {problem} ({self.json_path})")
        path = case.joinpath(*PurePosixPath(*relative).parts)
        try:
            resolved, inside = path.resolve(), self.images_dir.resolve()
        except (OSError, RuntimeError) as exc:  # a symbolic-link loop (RuntimeError in 3.11)
            raise SchemaError(f"{key_id}: {field}: {path} cannot be resolved ({exc}) "
                              f"({self.json_path})") from None
        if not resolved.is_relative_to(inside):
            raise SchemaError(f"{key_id}: {field}: {path} resolves to {resolved}, outside the "
                              f"bundle's image folder {inside} (a symbolic link out of the "
                              f"bundle; docs/benchmark_format.md, 'Paths a bundle names') "
                              f"({self.json_path})")
        return path

    def detection_image(self, key_id: str) -> Path:
        """``chexpercept/<key_id>/detection_qa/xray.png`` (:meth:`case_file`'s checks)."""
        return self.case_file(key_id, DETECTION_IMAGE, field="detection_qa image")

    def contour_eval_image(self, key_id: str, relative_path: str = CONTOUR_EVAL_RELPATH) -> Path:
        """``chexpercept/<key_id>/contour_qa/<relative_path>`` (:meth:`case_file`'s checks)."""
        return self.case_file(key_id, CONTOUR_QA_DIR, relative_path,
                              field="contour_qa.contour_eval_qa.relative_path")

    def points_image(self, key_id: str) -> Path:
        """``chexpercept/<key_id>/contour_qa/contour_revision_qa/xray_with_mask_and_points.png``."""
        return self.case_file(key_id, REVISION_DIR, POINTS_IMAGE,
                              field="contour_revision_qa_expansion image")

    def option_image(self, key_id: str, relative_path: str, index: int | None = None) -> Path:
        """``chexpercept/<key_id>/contour_qa/contour_revision_qa/<relative_path>``.

        ``index`` (0-based, the option's place in ``answer_options``) is named in a message
        (:meth:`case_file`'s checks).
        """
        which = f"[{index}]" if index is not None else ""
        return self.case_file(
            key_id, REVISION_DIR, relative_path,
            field=f"contour_qa.contour_revision_qa_revision_result.answer_options{which}"
                  f".relative_path")


#: Environment variable naming the cache root (default ``~/.cache/chexpercept``).
CACHE_DIR_ENV = "CHEXPERCEPT_CACHE_DIR"


def cache_root() -> Path:
    """``$CHEXPERCEPT_CACHE_DIR``, or ``~/.cache/chexpercept`` when it is unset or empty."""
    value = os.environ.get(CACHE_DIR_ENV, "")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "chexpercept"


def unpacked_bundle_dir(dataset_digest: str) -> Path:
    """``<cache>/parquet_bundles/<first 16 hex of the digest>/``: a parquet benchmark as a folder.

    Written by :func:`chexpercept.parquet_bundle.unpack_parquet_bundle`; the digest covers every
    shard's bytes (docs/hf_dataset.md, "Reading it back").
    """
    return cache_root() / "parquet_bundles" / dataset_digest[:16]


def parquet_digest_index_path() -> Path:
    """``<cache>/parquet_bundles/digests.json``: parquet datasets' digests across processes.

    Written by :func:`chexpercept.parquet_bundle.dataset_digest` (docs/hf_dataset.md).
    """
    return cache_root() / "parquet_bundles" / "digests.json"


def eval_run_dir(output_path: str | Path, provider: str, model: str, oracle_setting: str,
                 *, no_thinking: bool = False,
                 protocol: tuple[tuple[str, str], ...] = ()) -> Path:
    """``<output-path>/<provider>_<model>[_no_thinking][+key=value...]/oracle_<setting>/``.

    docs/evaluation_protocol.md, "Run folder". ``/`` in a model id (HF ids, local paths) is
    replaced by ``--`` so the run stays one folder.

    Args:
        output_path: Stage 03's ``--output-path``.
        provider: The provider's label (``utils.llm.registry.provider_label``).
        model: The model id.
        oracle_setting: One of :data:`ORACLE_SETTINGS`.
        no_thinking: A ``--no-thinking`` run (:data:`NO_THINKING_SUFFIX`).
        protocol: The run's protocol suffixes (``(("order", "shuffled"), ("seed", "3"))``), in
            :data:`RUN_NAME_PROTOCOL_KEYS` order, from
            :func:`chexpercept.evaluation.api.run_name_protocol`; empty for a default run, whose
            folder name is the release's.

    Raises:
        SchemaError: For a key not in :data:`RUN_NAME_PROTOCOL_KEYS` or a value that is not a
            plain token (letters, digits, ``.``, ``,``, ``_``, ``-``).
    """
    keys = [k for k, _ in protocol]
    if keys != [k for k in RUN_NAME_PROTOCOL_KEYS if k in keys]:
        raise SchemaError(f"run folder protocol keys {keys}: expected some of "
                          f"{', '.join(RUN_NAME_PROTOCOL_KEYS)}, in that order, once each")
    safe_model = model.strip("/").replace("/", "--")
    name = f"{provider}_{safe_model}" + (NO_THINKING_SUFFIX if no_thinking else "")
    return Path(output_path) / (name + protocol_suffix(protocol)) / f"oracle_{oracle_setting}"


#: Suffix of a ``--no-thinking`` run's folder name.
NO_THINKING_SUFFIX = "_no_thinking"
#: Keys of the ``+key=value`` suffixes a run folder's name may carry, in this order
#: (docs/evaluation_protocol.md, "Run folder"): the option order, the sample count K and the
#: seed, where they differ from a default run.
RUN_NAME_PROTOCOL_KEYS: tuple[str, ...] = ("order", "samples", "seed")
_PROTOCOL_VALUE = re.compile(r"[A-Za-z0-9._,-]+")
_PROTOCOL_TAIL = re.compile(r"(?:\+(?:" + "|".join(RUN_NAME_PROTOCOL_KEYS)
                            + r")=[A-Za-z0-9._,-]+)+$")


def protocol_suffix(protocol: tuple[tuple[str, str], ...]) -> str:
    """``+order=shuffled+seed=3``: the ``+key=value`` text of a run's protocol (``""`` if none).

    The one writer of this syntax: run folder names (:func:`eval_run_dir`) and Stage 04's run
    labels (:func:`chexpercept.analysis.runs.run_label`) use it.

    Raises:
        SchemaError: For a key or a value that is not a plain token (letters, digits, ``.``,
            ``,``, ``_``, ``-``).
    """
    parts = []
    for key, value in protocol:
        text = str(value)
        if not _PROTOCOL_VALUE.fullmatch(str(key)) or not _PROTOCOL_VALUE.fullmatch(text):
            raise SchemaError(f"run protocol {key}={text!r}: a key and a value are letters, "
                              "digits, '.', '_' or '-'")
        parts.append(f"+{key}={text}")
    return "".join(parts)


def split_run_protocol(name: str) -> tuple[str, str]:
    """``("<provider>_<model>[_no_thinking]", "+order=shuffled...")``: a run folder name's parts.

    Only trailing ``+key=value`` suffixes with a key of :data:`RUN_NAME_PROTOCOL_KEYS` are split
    off, so a model id that holds ``+`` keeps it.
    """
    tail = _PROTOCOL_TAIL.search(name)
    return (name[:tail.start()], tail.group(0)) if tail else (name, "")


def parse_run_name(name: str) -> tuple[str, str, bool]:
    """``<provider>_<model>[_no_thinking][+key=value...]`` (from :func:`eval_run_dir`) -> parts.

    Returns:
        ``(provider, model as in the folder name ("--" for "/"), no_thinking)``; the protocol
        suffixes (:func:`split_run_protocol`) are not part of any.
    """
    name, _ = split_run_protocol(name)
    no_thinking = name.endswith(NO_THINKING_SUFFIX)
    if no_thinking:
        name = name[:-len(NO_THINKING_SUFFIX)]
    provider, _, model = name.partition("_")
    return provider, model, no_thinking


def eval_part_dir(run_dir: str | Path, part: int, total_parts: int) -> Path:
    """``<run_dir>/part_<part>_of_<total_parts>/``: one shard of a Stage 03 run.

    Each part has its own records, manifest and ``all_results.json``; ``01_merge_parts.py``
    combines them into ``run_dir``.
    """
    return Path(run_dir) / f"part_{part}_of_{total_parts}"


def all_results_path(run_dir: str | Path) -> Path:
    """``<run_dir>/all_results.json``."""
    return Path(run_dir) / "all_results.json"


def sample_results_path(run_dir: str | Path, sample: int) -> Path:
    """``<run_dir>/all_results_sample_<k>.json``: sample k >= 1 of a ``--samples K`` run.

    Release-shaped like ``all_results.json``, which holds sample 0 (docs/evaluation_protocol.md,
    "Sampling").
    """
    return Path(run_dir) / f"all_results_sample_{int(sample)}.json"


def records_path(run_dir: str | Path) -> Path:
    """``<run_dir>/records.jsonl``: one line per finished case/turn (resume log)."""
    return Path(run_dir) / "records.jsonl"


def faults_path(run_dir: str | Path) -> Path:
    """``<run_dir>/faults.jsonl``: one line per turn that got no answer (a fault, never scored)."""
    return Path(run_dir) / "faults.jsonl"


def run_manifest_path(run_dir: str | Path) -> Path:
    """``<run_dir>/run_manifest.json``: what a Stage 03 run is (resume refuses a mismatch)."""
    return Path(run_dir) / "run_manifest.json"


#: Stage 04 per-model CSV names (docs/metrics.md, "Output files"), next to ``all_results.json``.
MODEL_SUMMARY_CSV = "model_performance_summary.csv"
MODEL_REVISION_CSV = "model_performance_detail_contour_revision.csv"
MODEL_ATTRIBUTE_CSV = "model_performance_detail_attribute_extraction.csv"
#: Stage 04 all-models CSV names, in ``all_models_oracle_<setting>/``.
ALL_SUMMARY_CSV = "all_models_summary.csv"
ALL_REVISION_CSV = "all_models_contour_revision_detail.csv"
ALL_ATTRIBUTE_CSV = "all_models_attribute_extraction_detail.csv"
PLOT_NAMES = ("plot_stage_accuracy.png", "plot_contour_revision_detail.png",
              "plot_attribute_extraction_detail.png", "plot_depth_heatmap.png")


def all_models_dir(out_root: str | Path, oracle_setting: str) -> Path:
    """``<out_root>/all_models_oracle_<setting>/`` (default out_root: Stage 04's folder)."""
    return Path(out_root) / f"all_models_oracle_{oracle_setting}"
