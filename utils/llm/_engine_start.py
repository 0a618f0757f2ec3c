"""Stage 03 offline providers: an engine that cannot start, as one error naming the fix.

The offline providers (``opensource``/vLLM, ``transformers``) build their engine before the
first request (:meth:`utils.llm.base.ChatModel.start`). Any exception while building or loading
it (a config check, out of memory, missing weights, a CUDA or driver error) becomes one
:class:`~utils.errors.EngineStartError`: the run stops before its folder gets a manifest or a
record, with one line naming the cause and the flag that fixes it (docs/engines.md, "Faults").
Each provider lists the messages of its engine it recognises (:class:`StartRule`); an
unrecognised one is quoted (its first line) with a pointer to the engine's own output.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from utils.errors import EngineStartError

logger = logging.getLogger(__name__)

#: Longest cause quoted in the message (characters); the full text is logged at DEBUG level.
MAX_CAUSE_CHARS = 300


@dataclass(frozen=True)
class StartRule:
    """One recognised engine-start failure.

    Attributes:
        pattern: Searched (case-sensitive) in each line of the exception's text, its type name
            and those of its causes (``__cause__`` / ``__context__``).
        fix: The flag(s) or setting that fix it, for the message.
    """

    pattern: re.Pattern[str]
    fix: str


#: Shared rules: out of memory, and a CUDA setup that does not work (no flag of ours fixes it).
CUDA_SETUP_FIX = ("the machine's CUDA setup (driver, CUDA_VISIBLE_DEVICES; check nvidia-smi), "
                  "not a flag of this script")
OUT_OF_MEMORY = re.compile(r"OutOfMemoryError|out of memory|MemoryError")
CUDA_SETUP = re.compile(r"CUDA driver|CUDA error|NVIDIA driver|no CUDA-capable device|"
                        r"cudaGetDeviceCount|CUDA initialization|libcuda|NCCL error|"
                        r"driver version is insufficient")
#: Messages of a model or weights that cannot be found (vLLM, transformers, huggingface_hub).
MISSING_MODEL = re.compile(
    r"Invalid repository ID or local directory|Cannot find any model weights|"
    r"No model weights found|is not a local folder and is not a valid model identifier|"
    r"does not appear to have (a )?file(s)? named|RepositoryNotFoundError|"
    r"LocalEntryNotFoundError|GatedRepoError|EntryNotFoundError|No such file or directory|"
    r"couldn't connect to 'https://huggingface.co'|Can't load (the )?(config|tokenizer|"
    r"processor)|Error no file named")
MODEL_FIX = "--model (a registered alias or HF id) or --model-path (a local folder with " \
    "config.json and the weights)"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during (each once)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _lines(exc: BaseException) -> list[tuple[str, BaseException]]:
    """(line, the exception it is from): each exception's type name, then its text's lines."""
    lines = []
    for item in _chain(exc):
        lines.append((type(item).__name__, item))
        lines += [(line.strip(), item) for line in str(item).splitlines() if line.strip()]
    return lines


def _sentence(line: str, start: int, end: int) -> str:
    """The sentence of ``line`` around ``line[start:end]`` (pydantic decorations removed)."""
    begin = line.rfind(". ", 0, start)
    begin = 0 if begin < 0 else begin + 2
    stop = line.find(". ", end)
    text = line[begin:] if stop < 0 else line[begin:stop + 1]
    text = re.sub(r"^Value error, ", "", text)
    return re.sub(r"\s*\[type=.*$", "", text).strip()


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc`` that says something (not pydantic's 'N validation error')."""
    for line in (ln.strip() for ln in str(exc).splitlines()):
        if line and not re.fullmatch(r"\d+ validation errors? for \w+", line):
            return _sentence(line, 0, 0) if line.startswith("Value error, ") else line
    return ""


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_CAUSE_CHARS else text[:MAX_CAUSE_CHARS - 3] + "..."


def start_error(engine: str, exc: BaseException, rules: Sequence[StartRule], *,
                fallback_fix: str) -> EngineStartError:
    """The :class:`EngineStartError` of an exception raised while ``engine`` was starting.

    The first rule whose pattern occurs in the exception chain gives the fix, and the sentence
    it occurs in is the cause; without a match, the exception's first line is the cause and
    ``fallback_fix`` the fix. The whole exception (traceback included) is logged at DEBUG.

    Args:
        engine: The engine, for the message (e.g. ``"the vLLM engine of <model>"``).
        exc: What the engine raised.
        rules: The provider's rules, most specific first.
        fallback_fix: The fix named when no rule matches.

    Returns:
        The error to raise (``raise start_error(...) from exc``).
    """
    logger.debug("%s could not start", engine, exc_info=exc)
    cause, fix = "", fallback_fix
    for rule in rules:
        found = next(((line, item, m) for line, item in _lines(exc)
                      if (m := rule.pattern.search(line))), None)
        if found is not None:
            line, item, match = found
            fix = rule.fix
            text = _first_line(item) if line == type(item).__name__ else \
                _sentence(line, match.start(), match.end())
            cause = f"{type(item).__name__}: {text}" if text else type(item).__name__
            break
    if not cause:
        text = _first_line(exc)
        cause = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    cause = _clip(cause).rstrip(".")
    return EngineStartError(f"{engine} could not start ({cause}); nothing was asked or "
                            f"recorded. Fix: {fix}", fix=fix)
