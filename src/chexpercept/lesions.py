"""Core: the seven lesions, key_id grammar, and lesion-specific question wording flags.

Reference: docs/benchmark_format.md, "Files" (lesion order, identifiers).
"""

from __future__ import annotations

import difflib

from chexpercept.errors import InputError

#: The seven lesions in the order the release uses everywhere (docs/benchmark_format.md, "Files").
LESIONS: tuple[str, ...] = (
    "cardiomegaly",
    "consolidation",
    "edema",
    "atelectasis",
    "pneumonia",
    "opacity",
    "effusion",
)

#: Lesions asked about directly in detection ("is any <lesion> visible"); the other five are
#: asked about as "a finding suggestive of <lesion>" (docs/qa_generation.md, "Question types").
DIRECT_DETECTION_LESIONS: frozenset[str] = frozenset({"opacity", "consolidation"})

#: Lesions with no Stage 4 (attribute extraction); docs/benchmark_format.md, "Cardiomegaly".
NO_ATTRIBUTE_LESIONS: frozenset[str] = frozenset({"cardiomegaly"})

QA_PATHS: tuple[str, ...] = ("revision_required", "revision_free", "lesion_free")

#: Stages each path asks, in dialogue order (docs/benchmark_format.md, "QA paths"): detection
#: (1), contour evaluation (2), contour revision (3), attribute extraction (4).
PATH_STAGES: dict[str, tuple[int, ...]] = {
    "revision_required": (1, 2, 3, 4),
    "revision_free": (1, 2, 4),
    "lesion_free": (1,),
}


def expected_stages(qa_path: str, lesion: str) -> tuple[int, ...]:
    """Stages a case of ``qa_path`` and ``lesion`` is asked, in order: the one rule.

    RR = 1-4, RF = 1, 2, 4, LF = 1; cardiomegaly has no stage 4 (docs/benchmark_format.md,
    "QA paths" and "Cardiomegaly"). Stage 03 plans its turns, Stage 04 scores and the bundle
    check counts questions by it.

    Args:
        qa_path: One of :data:`QA_PATHS`.
        lesion: One of :data:`LESIONS`.

    Returns:
        Stage numbers in dialogue order.

    Raises:
        InputError: If ``qa_path`` is unknown.
    """
    if qa_path not in PATH_STAGES:
        raise InputError(f"unknown qa_path '{qa_path}'; expected one of {', '.join(QA_PATHS)}")
    stages = PATH_STAGES[qa_path]
    if lesion in NO_ATTRIBUTE_LESIONS:
        stages = tuple(s for s in stages if s != 4)
    return stages


def validate_lesion(name: str, *, where: str = "") -> str:
    """Return ``name`` if it is one of :data:`LESIONS`.

    Args:
        name: A lesion name (case-sensitive, lower case).
        where: Where it was read (file, key_id or config key), for the message.

    Raises:
        InputError: Naming ``where``, the bad value, the valid names and a close match.
    """
    if name in LESIONS:
        return name
    hint = difflib.get_close_matches(str(name), LESIONS, n=1)
    near = f" (did you mean '{hint[0]}'?)" if hint else ""
    loc = f"{where}: " if where else ""
    raise InputError(
        f"{loc}unknown lesion '{name}'{near}; expected one of {', '.join(LESIONS)}"
    )


def make_key_id(lesion: str, pair_id: str) -> str:
    """Build ``key_id = <lesion>_<pair_id>`` (e.g. ``cardiomegaly_s50000001_positive_0``)."""
    return f"{validate_lesion(lesion)}_{pair_id}"


def lesion_from_key_id(key_id: str) -> str:
    """Lesion of a key_id (the text before the first underscore).

    Raises:
        InputError: If the prefix is not a lesion.
    """
    return validate_lesion(key_id.split("_", 1)[0], where=f"key_id '{key_id}'")


def pair_id_from_key_id(key_id: str) -> str:
    """MIMIC-ILS pair id of a key_id (everything after the first underscore).

    Raises:
        InputError: If the key_id has no underscore.
    """
    if "_" not in key_id:
        raise InputError(f"malformed key_id '{key_id}': expected <lesion>_<pair_id>")
    return key_id.split("_", 1)[1]


_PAIR_TYPES = ("positive", "negative")


def pair_type_from_key_id(key_id: str) -> str | None:
    """MIMIC-ILS pair type (``"positive"`` or ``"negative"``) named by a key_id's pair id.

    A MIMIC-ILS pair id is ``<study_id>_<positive|negative>_<k>`` (docs/benchmark_format.md,
    "Files"): the type is its second-to-last underscore field when the last one is a
    non-negative integer. A public-source pair id is ``<image_id>_<positive|negative>``
    (docs/curation.md, "Public sources"): the type is its last field.

    Returns:
        ``"positive"``, ``"negative"``, or None when the key_id has no pair id or its pair
        id carries no such token (e.g. a synthetic key_id).
    """
    parts = key_id.partition("_")[2].rsplit("_", 2)
    if len(parts) >= 2 and parts[-1] in _PAIR_TYPES:
        return parts[-1]
    if len(parts) == 3 and parts[1] in _PAIR_TYPES and parts[2].isdigit():
        return parts[1]
    return None


def has_attribute_stage(lesion: str) -> bool:
    """Whether cases of ``lesion`` get Stage 4 (False for cardiomegaly)."""
    return validate_lesion(lesion) not in NO_ATTRIBUTE_LESIONS
