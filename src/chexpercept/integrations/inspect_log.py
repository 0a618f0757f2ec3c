"""Stage 03: an inspect_ai eval log of the ``chexpercept`` task -> a Stage 03 run folder.

Reads the log (``.eval`` or ``.json``) that ``inspect eval`` wrote for
:func:`chexpercept.integrations.inspect_task.chexpercept`, takes every sample's replies (its
``TaskState.store`` entry :data:`REPLIES_KEY`) and writes
``<output-path>/inspect_<model>/oracle_<setting>/`` with ``run_manifest.json``,
``records.jsonl``, ``faults.jsonl`` and ``all_results.json`` in the release schema through
Stage 03's own runner and run store (:func:`chexpercept.evaluation.replay.write_recorded_run`;
docs/evaluation_protocol.md, "Run folder"), so Stage 04 and the viewer read it as any run
(docs/integrations.md, "inspect_ai"). The task's ``option_order``, ``seed``, ``samples`` and
``option_probs`` arguments go into the run's identity (``run_manifest.json``) as Stage 03
records its flags of the same names. A sample that errored keeps the turns it answered and is
written ``unfinished`` (Stage 04 counts it as missing, never as wrong).

inspect_ai is imported when a log is read, not with this module.
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chexpercept.errors import InputError, SchemaError
from chexpercept.evaluation.replay import RecordedReply, write_recorded_run
from chexpercept.evaluation.session import RunSummary
from chexpercept.files import file_sha256
from utils.deps import require

logger = logging.getLogger(__name__)

#: ``TaskState.store`` key of a sample's replies (a list of ``RecordedReply.to_json()``).
REPLIES_KEY = "chexpercept_replies"
#: Provider label of a converted run's folder (``inspect_<model>``; docs/integrations.md).
PROVIDER_LABEL = "inspect"
#: Registry name of the task (what ``inspect eval`` records as the log's task).
TASK_NAME = "chexpercept"


@dataclass(frozen=True)
class InspectRun:
    """What a converter needs of an inspect eval log.

    Attributes:
        log_path: The log file.
        model: inspect's model name (``openai-api/local/NAME``, ``openai/gpt-5.4``, ...).
        benchmark_dir: The task's ``benchmark_dir`` argument.
        oracle_setting: The task's ``oracle_setting`` argument.
        option_order: The task's ``option_order`` argument (``release`` when absent).
        samples: The task's ``samples`` argument (K; 1 when absent).
        seed: The task's ``seed`` argument (the run seed; 0 when absent).
        option_probs: The task's ``option_probs`` argument.
        temperature: The task's ``temperature`` argument, or None (inspect's own setting).
        generate_config: inspect's generation flags of the eval (``--temperature``,
            ``--seed``, ``--max-tokens``, ...: the log's ``model_generate_config``, unset ones
            left out).
        key_ids: The samples' key_ids, in log order (each once).
        replies: Every sample's replies, in turn order.
        errors: key_id -> the sample's error, for samples that failed.
    """

    log_path: Path
    model: str
    benchmark_dir: str
    oracle_setting: str
    key_ids: list[str]
    replies: list[RecordedReply]
    errors: dict[str, str]
    option_order: str = "release"
    samples: int = 1
    seed: int = 0
    option_probs: bool = False
    temperature: float | None = None
    generate_config: dict[str, Any] | None = None

    def protocol(self) -> dict[str, Any]:
        """The keyword arguments of :func:`write_recorded_run` that name the run's protocol.

        The option order, seed, K and ``option_probs`` become the manifest's identity fields
        as Stage 03 records them; a ``temperature`` task argument goes to
        ``provider_settings``, where Stage 03's providers record theirs, with inspect's own
        generation flags (``inspect_generate_config``).
        """
        settings: dict[str, Any] = {} if self.temperature is None \
            else {"temperature": self.temperature}
        if self.generate_config:
            settings["inspect_generate_config"] = dict(self.generate_config)
        return {"option_order": self.option_order, "seed": self.seed, "samples": self.samples,
                "option_probs": self.option_probs, "provider_settings": settings}


def _sample_replies(store: Mapping[str, Any], where: str) -> list[RecordedReply]:
    raw = store.get(REPLIES_KEY, [])
    if not isinstance(raw, list):
        raise SchemaError(f"{where}: store entry {REPLIES_KEY!r} is not a list")
    return [RecordedReply.from_json(r, where) for r in raw]


def read_inspect_log(log_path: str | Path) -> InspectRun:
    """Read the replies of a ``chexpercept`` inspect eval log.

    Raises:
        MissingDependencyError: If inspect_ai is not installed (extra ``[inspect]``).
        InputError: If the file is missing, unreadable (truncated, garbled, not an inspect
            log) or is not a log of the ``chexpercept`` task.
        SchemaError: If a sample's replies are malformed, or it ran more than one epoch.
    """
    path = Path(log_path)
    if not path.is_file():
        raise InputError(f"inspect log not found: {path}")
    log_module = require("inspect_ai.log", "inspect", "reading an inspect_ai eval log")
    try:
        log = log_module.read_eval_log(str(path))
    except (ValueError, KeyError, OSError, zipfile.BadZipFile) as exc:
        # a truncated or garbled .eval/.json, or a JSON file that is no inspect log
        # (pydantic's ValidationError is a ValueError)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: not a readable inspect_ai eval log ({first}); truncated, "
                         f"or not written by 'inspect eval'?") from None
    spec = log.eval
    if spec.task.rsplit("/", 1)[-1] != TASK_NAME:
        raise InputError(f"{path}: a log of the task {spec.task!r}, not of {TASK_NAME!r} "
                         f"(src/chexpercept/integrations/inspect_task.py)")
    args = dict(spec.task_args or {})
    if "benchmark_dir" not in args:
        raise InputError(f"{path}: the log has no task argument 'benchmark_dir'")
    key_ids: list[str] = []
    replies: list[RecordedReply] = []
    errors: dict[str, str] = {}
    for sample in log.samples or []:
        key_id = str((sample.metadata or {}).get("key_id", sample.id))
        if sample.epoch != 1:
            raise SchemaError(f"{path}: sample {sample.id} epoch {sample.epoch}: a Stage 03 "
                              f"run asks each case once (run inspect with --epochs 1; for K "
                              f"samples give the task argument samples=K)")
        if key_id not in key_ids:
            key_ids.append(key_id)
        replies += _sample_replies(sample.store or {}, f"{path}, sample {sample.id}")
        if sample.error is not None:
            errors.setdefault(key_id, str(sample.error.message))
    if not key_ids:
        raise InputError(f"{path}: the log holds no sample (status {log.status}; the converter "
                         f"needs the samples: run inspect without --no-log-samples)")
    temperature = args.get("temperature")
    return InspectRun(log_path=path, model=str(spec.model),
                      benchmark_dir=str(args["benchmark_dir"]),
                      oracle_setting=str(args.get("oracle_setting", "implicit")),
                      key_ids=key_ids, replies=replies, errors=errors,
                      option_order=str(args.get("option_order", "release")),
                      samples=int(args.get("samples", 1)), seed=int(args.get("seed", 0)),
                      option_probs=str(args.get("option_probs", False)).lower()
                      in ("true", "1", "yes"),
                      temperature=None if temperature is None else float(temperature),
                      generate_config=spec.model_generate_config.model_dump(
                          mode="json", exclude_none=True))


def convert_inspect_log(log_path: str | Path, output_path: str | Path, *,
                        benchmark_dir: str | Path | None = None,
                        overwrite: bool = False) -> RunSummary:
    """Write the Stage 03 run folder of an inspect eval log (see the module docstring).

    Args:
        log_path: The ``chexpercept`` task's eval log.
        output_path: Root of run folders (``00_eval.py --output-path``); the run goes to
            ``<output_path>/inspect_<model>/oracle_<setting>/`` (``/`` in the model -> ``--``).
        benchmark_dir: The bundle the log answers; None takes the log's ``benchmark_dir``
            task argument (give it when the log was made elsewhere).
        overwrite: Replace an earlier conversion into the same folder (default: resume, which
            refuses a folder written from another log).

    Returns:
        The run summary (``all_results_path``; ``unfinished`` lists the samples that failed).

    Raises:
        MissingDependencyError: If inspect_ai is not installed.
        InputError: See :func:`read_inspect_log`; also a key_id not in the bundle.
        SchemaError: On malformed replies, or replies to questions the bundle does not ask.
        ConfigError: If the run folder holds a run from another source.
    """
    run = read_inspect_log(log_path)
    for key_id, error in run.errors.items():
        logger.warning("%s: sample %s failed in inspect (%s); written as unfinished",
                       run.log_path, key_id, error[:200])
    protocol = run.protocol()
    # the log's bytes, not its name, are the run's identity: another log of the same name is
    # refused by the run folder's identity check (docs/integrations.md, "inspect_ai")
    protocol["provider_settings"] = {**protocol["provider_settings"],
                                     "source_sha256": file_sha256(run.log_path)}
    return write_recorded_run(benchmark_dir or run.benchmark_dir, run.replies,
                              key_ids=run.key_ids, output_path=output_path,
                              provider=PROVIDER_LABEL, model=run.model,
                              oracle_setting=run.oracle_setting,
                              source=f"inspect_ai log {run.log_path.name}", errors=run.errors,
                              overwrite=overwrite, **protocol)
