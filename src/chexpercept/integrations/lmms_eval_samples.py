"""Stage 03: the samples file of an lmms-eval ``chexpercept_*`` run -> a Stage 03 run folder.

Reads the ``<date>_samples_chexpercept_<setting>.jsonl`` that ``lmms-eval --log_samples`` writes
for the tasks of ``lmms_eval_tasks/chexpercept/``, takes every sample's replies (its
``chexpercept_case`` value, :func:`chexpercept.integrations.lmms_eval_task.process_results`)
and writes ``<output-path>/lmms_<model>/oracle_<setting>/`` with ``run_manifest.json``,
``records.jsonl``, ``faults.jsonl`` and ``all_results.json`` in the release schema through
Stage 03's own runner and run store (:func:`chexpercept.evaluation.replay.write_recorded_run`;
docs/evaluation_protocol.md, "Run folder"), so Stage 04 and the viewer read it as any run
(docs/integrations.md, "lmms-eval"). A case stopped by an empty round keeps the turns it
answered and is written ``unfinished`` (Stage 04 counts it as missing, never as wrong).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chexpercept.errors import InputError, SchemaError
from chexpercept.evaluation.dialogue import request_id
from chexpercept.evaluation.replay import RecordedReply, write_recorded_run
from chexpercept.evaluation.session import RunSummary
from chexpercept.files import file_sha256, loads_json

logger = logging.getLogger(__name__)

#: The sample field holding a case's replies (the task's ``chexpercept_case`` metric).
CASE_KEY = "chexpercept_case"
#: Provider label of a converted run's folder (``lmms_<model>``; docs/integrations.md).
PROVIDER_LABEL = "lmms"
#: Why a converted case stopped early (an empty round; docs/integrations.md, "lmms-eval").
EMPTY_ROUND = "an empty reply in lmms-eval (no answer; the case stopped there)"


@dataclass(frozen=True)
class LmmsRun:
    """What a converter needs of an lmms-eval samples file.

    Attributes:
        samples_path: The file.
        benchmark_dir: The bundle the task read (``$CHEXPERCEPT_BENCHMARK_DIR`` of the run).
        oracle_setting: The task's oracle setting.
        key_ids: The samples' key_ids, in file order.
        replies: Every sample's replies, in turn order.
        errors: key_id -> why the case stopped early, for unfinished cases.
    """

    samples_path: Path
    benchmark_dir: str
    oracle_setting: str
    key_ids: list[str]
    replies: list[RecordedReply]
    errors: dict[str, str]


def _case_replies(case: dict[str, Any], where: str) -> list[RecordedReply]:
    try:
        key_id = str(case["key_id"])
        for name, turn in case["turns"].items():
            if not isinstance(turn["raw"], str):  # str(None) would be scored as a reply 'None'
                raise TypeError(f"turn {name!r}: raw reply {turn['raw']!r} is not a string")
        return [RecordedReply(request_id(key_id, name), turn["raw"],
                              user_text=turn.get("user_text"))
                for name, turn in case["turns"].items()]
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise SchemaError(f"{where}: malformed {CASE_KEY!r} ({exc!r})") from exc


def _single(values: set[str], what: str, path: Path) -> str:
    if len(values) != 1:
        raise SchemaError(f"{path}: the samples disagree on {what} ({sorted(values)}); convert "
                          f"one task's samples file at a time")
    return next(iter(values))


def read_lmms_samples(samples_path: str | Path) -> LmmsRun:
    """Read the replies of a ``chexpercept_*`` lmms-eval samples file.

    Raises:
        InputError: If the file is missing or holds no sample.
        SchemaError: If a line is not JSON or lacks ``chexpercept_case`` (not a samples file
            of these tasks), a case is malformed (a raw reply that is not a string among them),
            a key_id appears twice, or the samples come from several settings or bundles.
    """
    path = Path(samples_path)
    if not path.is_file():
        raise InputError(f"lmms-eval samples file not found: {path}")
    key_ids: list[str] = []
    replies: list[RecordedReply] = []
    errors: dict[str, str] = {}
    settings: set[str] = set()
    bundles: set[str] = set()
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}, line {line_no}"
            sample = loads_json(line, where)
            case = sample.get(CASE_KEY) if isinstance(sample, dict) else None
            if not isinstance(case, dict):
                raise SchemaError(f"{where}: no {CASE_KEY!r} field: not a samples file of the "
                                  f"chexpercept_* lmms-eval tasks (lmms-eval --log_samples)")
            missing = [f for f in ("key_id", "oracle_setting", "benchmark_dir")
                       if not isinstance(case.get(f), str) or not case.get(f)]
            if missing:
                raise SchemaError(f"{where}: {CASE_KEY!r} lacks {', '.join(missing)} (a string "
                                  f"each); not written by the chexpercept_* lmms-eval tasks")
            key_id = case["key_id"]
            if key_id in seen:  # lmms-eval logs each doc once; two lines would race to score
                raise SchemaError(f"{where}: key_id {key_id!r} again (first on line "
                                  f"{seen[key_id]}); convert one run's samples file")
            seen[key_id] = line_no
            key_ids.append(key_id)
            replies += _case_replies(case, where)
            settings.add(case["oracle_setting"])
            bundles.add(case["benchmark_dir"])
            if not case.get("finished", False):
                errors[key_id] = EMPTY_ROUND
    if not key_ids:
        raise InputError(f"{path}: no sample in the file")
    return LmmsRun(samples_path=path, benchmark_dir=_single(bundles, "the bundle", path),
                   oracle_setting=_single(settings, "the oracle setting", path),
                   key_ids=key_ids, replies=replies, errors=errors)


def convert_lmms_samples(samples_path: str | Path, output_path: str | Path, *, model: str,
                         benchmark_dir: str | Path | None = None,
                         overwrite: bool = False) -> RunSummary:
    """Write the Stage 03 run folder of an lmms-eval samples file (see the module docstring).

    Args:
        samples_path: The ``chexpercept_*`` task's samples file (``--log_samples``).
        model: The model's name for the run folder, pricing and ``token_usage.model_id`` (the
            samples file does not record it).
        output_path: Root of run folders (``00_eval.py --output-path``); the run goes to
            ``<output_path>/lmms_<model>/oracle_<setting>/`` (``/`` in the model -> ``--``).
        benchmark_dir: The bundle the samples answer; None takes the one recorded in them
            (give it when the run was made elsewhere).
        overwrite: Replace an earlier conversion into the same folder.

    Returns:
        The run summary (``all_results_path``; ``unfinished`` lists the cases stopped early).

    Raises:
        InputError: See :func:`read_lmms_samples`; also a key_id not in the bundle.
        SchemaError: On malformed samples, or replies to questions the bundle does not ask.
        ConfigError: If the run folder holds a run from another source.
    """
    run = read_lmms_samples(samples_path)
    for key_id in run.errors:
        logger.warning("%s: case %s stopped at an empty reply; written as unfinished",
                       run.samples_path, key_id)
    return write_recorded_run(benchmark_dir or run.benchmark_dir, run.replies,
                              key_ids=run.key_ids, output_path=output_path,
                              provider=PROVIDER_LABEL, model=model,
                              oracle_setting=run.oracle_setting,
                              source=f"lmms-eval samples {run.samples_path.name}",
                              errors=run.errors, overwrite=overwrite,
                              # the file's bytes, not its name, are the run's identity
                              provider_settings={"source_sha256": file_sha256(run.samples_path)})
