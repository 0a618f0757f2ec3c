"""Lazy optional imports with an actionable error."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from utils.errors import MissingDependencyError


def require(package: str, extra: str, feature: str) -> ModuleType:
    """Import an optional package or explain how to install it.

    Args:
        package: Importable module name, e.g. ``"openai"`` or ``"google.genai"``.
        extra: The ``chexpercept`` extra that provides it, e.g. ``"openai"``.
        feature: What needs it, for the message, e.g. ``"the openai provider"``.

    Returns:
        The imported module.

    Raises:
        MissingDependencyError: If the import fails; the message holds the exact
            ``pip install "chexpercept[extra]"`` line.
    """
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature} needs the Python package '{package}', which is not installed "
            f"({exc}). Install it with: pip install -e \".[{extra}]\""
        ) from exc


def _top_level_names(root: Path) -> set[str]:
    names = set()
    for entry in root.iterdir():
        if entry.is_dir() and not entry.name.startswith((".", "__")):
            names.add(entry.name)
        elif entry.suffix == ".py":
            names.add(entry.stem)
    return names


def import_from_checkout(root: str | Path, modules: Sequence[str], *, feature: str,
                         fix: str) -> dict[str, ModuleType]:
    """Import ``modules`` from a third-party source checkout without polluting the interpreter.

    Research checkouts (LISA, CheXmask-U's HybridGNet) import their own top-level packages by
    bare names such as ``utils`` and ``models``, which would clash with this project's ``utils``
    package. For the duration of the import only, ``root`` is put first on ``sys.path`` and
    every ``sys.modules`` entry whose top-level name is also a top-level name in ``root`` is set
    aside; afterwards the checkout's modules are dropped from ``sys.modules`` (the returned
    module keeps references to what it imported) and the set-aside entries and ``sys.path`` are
    restored. Imports the checkout performs later, inside its functions, by bare name are not
    covered. All ``modules`` are imported in one go, so they share the checkout's modules.

    Args:
        root: The checkout folder holding the top-level packages (e.g. ``.../HybridGNet``).
        modules: Dotted module names inside ``root`` (e.g. ``models.HybridGNet2IGSC``).
        feature: What needs it, for the message (e.g. ``"anatomy.backend 'chexmask-u'"``).
        fix: How to get the checkout or where to point the config (for the message).

    Returns:
        ``{name: module}`` for every name of ``modules``.

    Raises:
        MissingDependencyError: If ``root`` is not a folder, or an import fails (the message
            names the missing package when it is a ``ModuleNotFoundError``).
    """
    base = Path(root).expanduser().resolve()
    if not base.is_dir():
        raise MissingDependencyError(f"{feature} needs the source checkout {base}, which does "
                                     f"not exist; {fix}")
    shadowed = _top_level_names(base)

    def _ours(name: str) -> bool:
        return name.split(".", 1)[0] in shadowed

    saved = {k: v for k, v in sys.modules.items() if _ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(base))
    for name in sorted(shadowed):
        folder = base / name
        if folder.is_dir() and not (folder / "__init__.py").is_file():
            # A folder without __init__.py would lose to a regular package of the same name
            # further down sys.path (e.g. ours), so bind it as a namespace package explicitly.
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(folder)]
            sys.modules[name] = importlib.util.module_from_spec(spec)
    module = ""
    try:
        out = {}
        for module in modules:
            out[module] = importlib.import_module(module)
        return out
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        hint = (f"the package '{missing}' is missing (pip install it in this environment)"
                if isinstance(exc, ModuleNotFoundError) and missing and not _ours(missing)
                else f"the checkout has no importable '{module}' ({exc}); {fix}")
        raise MissingDependencyError(f"{feature}: importing {module} from {base} failed: "
                                     f"{hint}") from exc
    finally:
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
        try:
            sys.path.remove(str(base))
        except ValueError:
            pass
