"""Stage 03: sequential multi-turn VLM evaluation on the CheXpercept benchmark.

Reads ``chexpercept.json`` + the image bundle, asks each case's turns through a
``utils.llm`` provider (batched ``generate`` calls over many cases), parses answers strictly,
scores them all-or-nothing and writes ``records.jsonl``, ``run_manifest.json`` and
``all_results.json`` (docs/evaluation_protocol.md, "Run folder").
"""

from chexpercept.evaluation.cases import (
    TURNS,
    Bundle,
    EvalCase,
    load_bundle,
    select_key_ids,
    validate_bundle,
)
from chexpercept.evaluation.dialogue import ORACLE_SETTINGS, SYSTEM_PROMPT
from chexpercept.evaluation.parsing import ParsedAnswer, parse_answer
from chexpercept.evaluation.runner import run_evaluation
from chexpercept.evaluation.session import EvalSettings, RunSummary

__all__ = [
    "ORACLE_SETTINGS",
    "SYSTEM_PROMPT",
    "TURNS",
    "Bundle",
    "EvalCase",
    "EvalSettings",
    "ParsedAnswer",
    "RunSummary",
    "load_bundle",
    "parse_answer",
    "run_evaluation",
    "select_key_ids",
    "validate_bundle",
]
