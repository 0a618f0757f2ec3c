"""YAML config loading with ``${VAR}`` expansion and pydantic validation.

Errors name the file and the dotted key (``mask_deformation.backend``), say what was expected
and what was found, and suggest close matches for misspelt keys.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from utils.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def expand_vars(value: Any, variables: Mapping[str, str], *, where: str = "") -> Any:
    """Expand ``${NAME}`` and ``${NAME:-default}`` in every string of a YAML tree.

    Lookup order: ``variables`` (e.g. ``ROOT``), then the process environment, then the
    inline default.

    Args:
        value: A parsed YAML value (dict, list, str, number, bool or None).
        variables: Extra variables that take precedence over the environment.
        where: Dotted key of ``value``, used in error messages.

    Returns:
        A copy of ``value`` with every placeholder replaced.

    Raises:
        ConfigError: If a placeholder has no value and no default.
    """
    if isinstance(value, dict):
        return {
            k: expand_vars(v, variables, where=f"{where}.{k}" if where else str(k))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [expand_vars(v, variables, where=f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value
    return _expand_str(value, variables, where)


def _expand_str(text: str, variables: Mapping[str, str], where: str) -> str:
    """Expand placeholders in one string; defaults may themselves hold placeholders."""
    out: list[str] = []
    i = 0
    while i < len(text):
        start = text.find("${", i)
        if start < 0:
            out.append(text[i:])
            break
        out.append(text[i:start])
        depth, j = 1, start + 2
        while j < len(text) and depth:
            if text.startswith("${", j):
                depth += 1
                j += 2
                continue
            if text[j] == "}":
                depth -= 1
            j += 1
        if depth:
            raise ConfigError(f"config key '{where}': unclosed '${{' in {text!r}")
        body = text[start + 2 : j - 1]
        name, sep, default = body.partition(":-")
        if not _NAME.fullmatch(name):
            raise ConfigError(f"config key '{where}': bad variable name {name!r} in {text!r}")
        if name in variables:
            out.append(str(variables[name]))
        elif name in os.environ:
            out.append(os.environ[name])
        elif sep:
            out.append(_expand_str(default, variables, where))
        else:
            raise ConfigError(
                f"config key '{where}' uses ${{{name}}}, but {name} is not set; "
                f"export {name}=... or write ${{{name}:-default}}"
            )
        i = j
    return "".join(out)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping from disk.

    Raises:
        ConfigError: If the file is missing, is not valid YAML, or is not a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, "
                          f"found {type(data).__name__}")
    return data


def _known_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names (aliases included) of the sub-model found at ``loc`` (for suggestions)."""
    current: Any = model
    for part in loc[:-1]:
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        ann = fields[part].annotation
        current = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if current is None:
            return []
    fields = getattr(current, "model_fields", {})
    return [f.alias or name for name, f in fields.items()]


def format_validation_error(exc: ValidationError, model: type[BaseModel], source: str) -> str:
    """Turn a pydantic ValidationError into lines naming the file and each dotted key."""
    lines = [f"{source}: invalid config ({exc.error_count()} problem(s)):"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = ".".join(str(p) for p in loc)
        if err["type"] == "extra_forbidden":
            hint = difflib.get_close_matches(str(loc[-1]), _known_keys(model, loc), n=3)
            extra = f"; did you mean {', '.join(hint)}?" if hint else ""
            lines.append(f"  - unknown key '{key}'{extra}")
        elif err["type"] == "missing":
            lines.append(f"  - missing required key '{key}'")
        else:
            lines.append(f"  - '{key}': {err['msg']} (found {err.get('input')!r})")
    return "\n".join(lines)


def validate(data: Mapping[str, Any], model: type[M], *, source: str) -> M:
    """Validate a mapping into ``model``; all problems are reported at once.

    Raises:
        ConfigError: Listing every missing, unknown or invalid key with ``source``.
    """
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model, source)) from None


def load_config(
    path: str | Path, model: type[M], *, variables: Mapping[str, str] | None = None
) -> M:
    """Load, expand and validate a YAML config file.

    Args:
        path: The YAML file.
        model: The pydantic model to validate into (unknown keys must be forbidden there).
        variables: Extra ``${NAME}`` values, e.g. ``{"ROOT": "/repo"}``.

    Returns:
        The validated model instance.

    Raises:
        ConfigError: On a missing file, bad YAML, unset variable, or invalid key.
    """
    raw = read_yaml(path)
    expanded = expand_vars(raw, dict(variables or {}))
    return validate(expanded, model, source=str(path))
