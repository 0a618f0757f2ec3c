"""Stage 04: find Stage 03 runs (``<results-dir>/<run>/oracle_<setting>/all_results.json``).

Stage 04 reads nothing but these files and the run's ``run_manifest.json`` (the import contracts
in pyproject.toml); the folder name is built by :func:`chexpercept.layouts.eval_run_dir` and
parsed by :func:`chexpercept.layouts.parse_run_name`. Each file is read and validated
by :func:`chexpercept.analysis.case_table.read_case_table`. A run's label (:func:`run_label`)
is its folder name plus every identity field of its manifest that differs from the defaults
(docs/evaluation_protocol.md, "Run folder"), so two runs of one model under two protocols
never share a name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chexpercept.errors import InputError, SchemaError
from chexpercept.layouts import (
    NO_THINKING_SUFFIX,
    ORACLE_SETTINGS,
    all_results_path,
    parse_run_name,
    protocol_suffix,
    split_run_protocol,
)
from chexpercept.run_store import (
    IDENTITY_DEFAULTS,
    JUDGE_FIELD,
    PROVIDER_DECODING_FIELD,
    SAMPLING_FIELD,
    RunStore,
)

logger = logging.getLogger(__name__)

#: Run-folder suffix of a ``--no-thinking`` Stage 03 run (docs/evaluation_protocol.md,
#: "Run folder").
NO_THINKING = "no_thinking"
#: Option order of a run whose manifest has none (the release's; ``run_store.IDENTITY_DEFAULTS``).
RELEASE_ORDER: str = IDENTITY_DEFAULTS["option_order"]
#: Seed of a default run (the shipped configs' ``seed: 0``).
DEFAULT_SEED = 0
#: Provider temperature of a default run whose manifest does not say (written before
#: ``provider_decoding``): 0, greedy (docs/evaluation_protocol.md, "Providers").
DEFAULT_TEMPERATURE = 0.0
#: ``provider_decoding.sampling`` of a provider whose answers are drawn from the run seed at any
#: temperature (``ChatModel.sampling``; the ``random`` baseline).
SEEDED_SAMPLING = "seeded"
#: Label keys (:func:`protocol_fields`), in label order.
PROTOCOL_KEYS = ("order", "samples", "temperature", "seed", "judge", "option_probs", "ablation")
#: Characters a label keeps; others (``/`` and ``:`` of a judge's ``provider:model``) become ``-``
#: so the label can name a file (``02_compare_runs.py``).
_UNSAFE = re.compile(r"[^A-Za-z0-9._,-]")


@dataclass(frozen=True)
class RunRef:
    """One Stage 03 run found on disk.

    Attributes:
        name: The run folder name ``<provider>_<model>[_no_thinking]``; used as the ``model``
            column so equal aliases under different providers stay apart
            (docs/differences.md D43).
        provider: Text before the first underscore of ``name`` (the release's split).
        model: Text after it (``""`` when ``name`` has no underscore).
        oracle_setting: ``explicit`` / ``implicit`` / ``none``.
        run_dir: ``<results-dir>/<name>/oracle_<setting>/`` (per-model CSVs go here).
        protocol: ``(key, value)`` of every identity field of the run's manifest that differs
            from the defaults (:func:`protocol_fields`); empty for a default run or one without
            a manifest.
    """

    name: str
    provider: str
    model: str
    oracle_setting: str
    run_dir: Path
    protocol: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """:attr:`name`, plus the protocol of a non-default run (:func:`run_label`)."""
        return run_label(self.name, self.protocol)

    @property
    def option_order(self) -> str:
        """``release`` / ``shuffled`` / ``circular``: the run's option order (its manifest's)."""
        return dict(self.protocol).get("order", RELEASE_ORDER)

    @property
    def variant(self) -> str:
        """``no_thinking`` for a ``--no-thinking`` run (folder suffix), else ``default``."""
        return NO_THINKING if self.model.endswith(NO_THINKING_SUFFIX) else "default"

    @property
    def model_name(self) -> str:
        """The model id without the variant suffix (``qwen3.6-27b`` for ``..._no_thinking``)."""
        return self.model.removesuffix(NO_THINKING_SUFFIX)

    @property
    def all_results(self) -> Path:
        """``<run_dir>/all_results.json``."""
        return all_results_path(self.run_dir)


def _temperature(settings: Any) -> float | None:
    """The first ``temperature`` anywhere in a manifest's ``provider_settings``, else None."""
    if isinstance(settings, Mapping):
        value = settings.get("temperature")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        settings = list(settings.values())
    if isinstance(settings, list):
        for item in settings:
            found = _temperature(item)
            if found is not None:
                return found
    return None


def _text(value: Any) -> str:
    """A manifest value as label text (``0.7``, ``5``, ``openai-gpt-5.4``)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return _UNSAFE.sub("-", str(value))


def protocol_fields(manifest: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """The identity fields of a run manifest that differ from a default run's, as label text.

    In :data:`PROTOCOL_KEYS` order: ``order`` (``option_order`` other than ``release``),
    ``samples`` (K of a ``--samples K`` run, K > 1), ``temperature`` (a provider temperature
    other than the provider's default, which the manifest's ``provider_decoding`` records:
    Gemini 3's is 1.0; a manifest without the field: :data:`DEFAULT_TEMPERATURE`), ``seed``
    (other than 0, where it changes the answers: a shuffled or circular order, K > 1, a
    temperature above 0, or a provider whose ``provider_decoding.sampling`` is
    :data:`SEEDED_SAMPLING`; a greedy run's seed changes nothing), ``judge``
    (the judge's ``PROVIDER:MODEL``), ``option_probs`` (``--option-probs``) and ``ablation`` (a
    manifest's ``ablation`` field, where one is recorded). The other identity fields name the
    model, bundle, prompt or code (folder name, ``benchmark_json_sha256``, ``protocol_version``,
    ``system_prompt_sha256``) or a part (``sharding``), not the protocol.

    Args:
        manifest: The run's ``run_manifest.json`` (docs/evaluation_protocol.md, "Run folder"),
            or None (a run without one, e.g. a release file: the defaults).

    Returns:
        ``((key, value), ...)``; empty for a default run.
    """
    if not manifest:
        return ()
    out: dict[str, Any] = {}
    order = manifest.get("option_order", RELEASE_ORDER)
    if order != RELEASE_ORDER:
        out["order"] = order
    sampling = manifest.get(SAMPLING_FIELD)
    if isinstance(sampling, Mapping) and int(sampling.get("samples", 1)) > 1:
        out["samples"] = sampling["samples"]
    temperature = _temperature(manifest.get("provider_settings"))
    decoding = manifest.get(PROVIDER_DECODING_FIELD)
    decoding = decoding if isinstance(decoding, Mapping) else {}
    default = decoding.get("default_temperature", DEFAULT_TEMPERATURE)
    if temperature is not None and temperature != default:
        out["temperature"] = temperature
    seed = manifest.get("seed", DEFAULT_SEED)
    seeded = ("order" in out or "samples" in out or (temperature or 0.0) > 0
              or decoding.get("sampling") == SEEDED_SAMPLING)
    if seed is not None and seed != DEFAULT_SEED and seeded:
        out["seed"] = seed
    judge = manifest.get(JUDGE_FIELD)
    if judge:
        out["judge"] = judge.get("model") if isinstance(judge, Mapping) else judge
    if manifest.get("option_probs"):
        out["option_probs"] = "yes"
    if manifest.get("ablation"):
        out["ablation"] = manifest["ablation"]
    return tuple((k, _text(v)) for k, v in out.items())


def run_label(name: str, protocol: tuple[tuple[str, str], ...]) -> str:
    """``<name>`` for a default run, else ``<name>+order=shuffled+seed=3`` (``+key=value`` each).

    The protocol comes from the manifest (the truth), so a folder name's own protocol suffixes
    (``layouts.split_run_protocol``) are replaced by it, never written twice.

    Args:
        name: The run folder name ``<provider>_<model>[_no_thinking][+key=value...]``.
        protocol: :func:`protocol_fields` of its manifest.

    Returns:
        The label; file-name safe when ``name`` is.
    """
    base, _ = split_run_protocol(name)
    return base + protocol_suffix(protocol)


def protocol_text(protocol: tuple[tuple[str, str], ...]) -> str:
    """``order=shuffled, seed=3`` (``release`` for a default run): the report's protocol cell."""
    return ", ".join(f"{k}={v}" for k, v in protocol) or RELEASE_ORDER


def read_protocol(run_dir: Path) -> tuple[tuple[str, str], ...]:
    """:func:`protocol_fields` of ``<run_dir>/run_manifest.json`` (none: a default run).

    Raises:
        SchemaError: If the manifest is not valid JSON or not a JSON object (names the file).
    """
    store = RunStore(run_dir)
    manifest = store.read_manifest()
    if manifest is not None and not isinstance(manifest, Mapping):
        raise SchemaError(f"{store.manifest_path}: the run manifest is not a JSON object; "
                         "rerun Stage 03 or remove the file")
    return protocol_fields(manifest)


def _split(name: str) -> tuple[str, str]:
    """``(provider, model with its variant suffix)`` of a run folder name (``parse_run_name``)."""
    provider, model, no_thinking = parse_run_name(name)
    return provider, model + (NO_THINKING_SUFFIX if no_thinking else "")


def discover_runs(results_dir: str | Path, oracle_setting: str, *, provider: str | None = None,
                  model: str | None = None) -> list[RunRef]:
    """Runs under ``results_dir`` that have ``oracle_<setting>/all_results.json``.

    Runs are returned in sorted folder order (the release's order). ``provider`` keeps
    runs whose folder starts with ``<provider>_``; ``model`` keeps runs whose folder is
    ``<provider>_<model>`` (``/`` in ``model`` written as ``--``, as Stage 03 names folders;
    give ``<model>_no_thinking`` for a no-thinking run).

    Args:
        results_dir: Stage 03 output folder (``--output-path`` of ``00_eval.py``).
        oracle_setting: One of :data:`ORACLE_SETTINGS`.
        provider: Optional provider filter (exact).
        model: Optional model filter (exact).

    Returns:
        Matching runs; never empty.

    Raises:
        InputError: If ``results_dir`` is not a folder, the setting is unknown, or no run
            matches (the message names the folder, setting, filters and the runs present).
    """
    results_dir = Path(results_dir)
    if oracle_setting not in ORACLE_SETTINGS:
        raise InputError(f"unknown oracle setting '{oracle_setting}'; expected one of "
                         f"{', '.join(ORACLE_SETTINGS)}")
    if not results_dir.is_dir():
        raise InputError(f"results folder not found: {results_dir} (pass --results-dir, the "
                         f"--output-path of src/03_eval_vlm_on_chexpercept/00_eval.py)")
    safe_model = model.strip("/").replace("/", "--") if model else None
    runs: list[RunRef] = []
    for entry in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        run_dir = entry / f"oracle_{oracle_setting}"
        prov, mod = _split(entry.name)
        if provider is not None and prov != provider:
            continue
        if safe_model is not None and mod != safe_model:
            continue
        if not all_results_path(run_dir).is_file():
            logger.debug("skipping %s: no oracle_%s/all_results.json", entry, oracle_setting)
            continue
        runs.append(RunRef(name=entry.name, provider=prov, model=mod,
                           oracle_setting=oracle_setting, run_dir=run_dir,
                           protocol=read_protocol(run_dir)))
    if not runs:
        filters = ", ".join(f"{k}={v}" for k, v in (("provider", provider), ("model", model))
                            if v is not None)
        have = _available(results_dir)
        raise InputError(
            f"no run with oracle_{oracle_setting}/all_results.json in {results_dir}"
            + (f" matching {filters}" if filters else "")
            + (f"; runs present: {'; '.join(have)}" if have else "; the folder holds no runs")
        )
    return runs


def run_from_dir(path: str | Path) -> RunRef:
    """The run stored in ``path``: an ``oracle_<setting>/`` folder or its ``all_results.json``.

    Args:
        path: ``<results-dir>/<provider>_<model>[_no_thinking]/oracle_<setting>``, or the
            ``all_results.json`` in it.

    Returns:
        The run (name from the parent folder, setting from ``oracle_<setting>``).

    Raises:
        InputError: If there is no ``all_results.json`` there or the folder is not named
            ``oracle_<setting>`` with a known setting.
    """
    path = Path(path)
    run_dir = path.parent if path.name == "all_results.json" else path
    if not all_results_path(run_dir).is_file():
        raise InputError(f"no all_results.json in {run_dir} (pass a Stage 03 run folder "
                         f"<results-dir>/<provider>_<model>/oracle_<setting>/)")
    setting = run_dir.name.removeprefix("oracle_")
    if not run_dir.name.startswith("oracle_") or setting not in ORACLE_SETTINGS:
        raise InputError(f"{run_dir}: expected a folder named oracle_<setting> with setting in "
                         f"{', '.join(ORACLE_SETTINGS)}")
    name = run_dir.resolve().parent.name
    provider, model = _split(name)
    return RunRef(name=name, provider=provider, model=model, oracle_setting=setting,
                  run_dir=run_dir, protocol=read_protocol(run_dir))


def _available(results_dir: Path) -> list[str]:
    """``<run> (oracle settings)`` for every run folder holding any all_results.json."""
    out = []
    for entry in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        settings = sorted(f.parent.name.removeprefix("oracle_")
                          for f in entry.glob("oracle_*/all_results.json"))
        if settings:
            out.append(f"{entry.name} ({', '.join(settings)})")
    return out
