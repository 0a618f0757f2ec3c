"""API credentials for the API providers: environment variables first, then ``api_keys.yaml``.

The key file (``api_info/api_keys.yaml`` at the repository root, or ``--api-keys``) is read only
when the chosen provider needs a value that the environment does not give, and only the
provider's own block is ``${VAR}``-expanded, so an unset variable in another provider's block
does not matter (unlike the release, whose key file was required for every provider and opened
relative to the working directory: docs/differences.md D33). Values never reach a log, record or
manifest: messages name the environment variable and the YAML key, never the value, and
:func:`redact` scrubs provider error texts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from utils.config import expand_vars, read_yaml
from utils.errors import ConfigError
from utils.llm.settings import hide_credentials

#: Default key file: ``api_info/api_keys.yaml`` next to the installed ``utils`` package.
DEFAULT_API_KEYS_PATH = Path(__file__).resolve().parents[2] / "api_info" / "api_keys.yaml"

#: A URL inside a text (up to white space, a quote or an angle bracket).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_KEY_LIKE = re.compile(r"(sk-[A-Za-z0-9_\-*]{6,}|AIza[A-Za-z0-9_\-]{10,}|Bearer\s+\S+)")


class ApiKeys:
    """Lazy view of the key file.

    Args:
        path: The YAML file; None uses :data:`DEFAULT_API_KEYS_PATH`. A missing file is only an
            error when a value is actually needed from it.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else DEFAULT_API_KEYS_PATH
        self._raw: dict[str, Any] | None = None

    def section(self, name: str) -> dict[str, Any]:
        """The expanded block ``name`` of the file ({} when the file or block is absent).

        Raises:
            ConfigError: If the file is not valid YAML, the block is not a mapping, or a
                ``${VAR}`` without default is unset inside this block.
        """
        if self._raw is None:
            self._raw = read_yaml(self.path) if self.path.is_file() else {}
        block = self._raw.get(name)
        if block is None:
            return {}
        if not isinstance(block, dict):
            raise ConfigError(f"{self.path}: '{name}' must be a mapping, found "
                              f"{type(block).__name__}")
        return expand_vars(block, {}, where=name)

    def get(self, section: str, key: str) -> str | None:
        """``section.key`` from the file as a non-empty string, else None."""
        value = self.section(section).get(key)
        if value is None or str(value).strip() == "":
            return None
        return str(value).strip()


def resolve(env: Mapping[str, str], env_vars: Iterable[str], keys: ApiKeys, section: str,
            key: str, *, what: str, required: bool = True) -> str | None:
    """A credential or setting: the first set environment variable, else ``section.key``.

    Args:
        env: The environment (``os.environ``).
        env_vars: Variables tried in order (e.g. ``("GEMINI_API_KEY", "GOOGLE_API_KEY")``).
        keys: The key file view.
        section: YAML block (``openai``, ``azure``, ``gemini``).
        key: Key inside the block (``api_key``, ``endpoint``, ...).
        what: What needs it, for the message (e.g. ``"the azure provider"``).
        required: Raise when nothing is found (else return None).

    Returns:
        The value, or None when not required and not found.

    Raises:
        ConfigError: If required and neither source has it; names every variable and the
            YAML key (never a value).
    """
    env_vars = tuple(env_vars)
    for var in env_vars:
        value = env.get(var, "").strip()
        if value:
            return value
    value = keys.get(section, key)
    if value is None and required:
        names = " or ".join(env_vars) if env_vars else "(no environment variable)"
        raise ConfigError(f"{what} needs '{section}.{key}': set {names} in the environment, "
                          f"or '{section}.{key}' in {keys.path} (--api-keys; template: "
                          f"api_info/api_keys_example.yaml)")
    return value


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with the given secret values and anything key-shaped replaced by ``<redacted>``.

    Every URL in it is shown as :func:`~utils.llm.settings.hide_credentials` shows it
    (``user:password@`` and query-string credentials as ``***``): an SDK's error may quote the
    request's URL.
    """
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    text = _URL.sub(lambda m: hide_credentials(m.group(0)), text)
    return _KEY_LIKE.sub("<redacted>", text)
