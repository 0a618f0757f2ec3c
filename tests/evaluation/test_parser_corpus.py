"""The answer parser against a held-out corpus of replies read as a careful human reads them.

``parser_corpus.py`` holds the replies and the human reading of each;
``benchmarks/bench_parser_corpus.py`` prints the same comparison as a table
(``--show-misses`` lists the rows that the parser does not read as the human does).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from parser_corpus import CORPUS, FAMILIES, MULTI_SELECT_KINDS, call_kwargs, none_index, problems
from parser_replies import OPTIONS

from chexpercept.evaluation.parsing import parse_answer

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_parser_corpus.py"

#: At most this share of the rows with a clear human answer may be refused.
MAX_REFUSED_CLEAR = 0.02


def _parses():
    return [(i, row, parse_answer(row.raw, **call_kwargs(row))) for i, row in enumerate(CORPUS)]


def _describe(i, row, parsed) -> str:
    raw = row.raw if len(row.raw) <= 160 else row.raw[:70] + " ... " + row.raw[-80:]
    return (f"[{i}] {row.family}/{row.kind}: human {row.human}, parser {parsed.status} "
            f"{parsed.answer} ({parsed.detail or '-'}): {raw!r}")


def test_corpus_well_formed():
    assert problems() == []
    assert len(CORPUS) >= 170
    per_family = Counter(row.family for row in CORPUS)
    assert set(per_family) == set(FAMILIES)
    assert min(per_family.values()) >= 15, per_family
    for row in CORPUS:
        assert row.kind in OPTIONS
        assert row.multi_select == (row.kind in MULTI_SELECT_KINDS)
        if row.human is None:
            continue
        n = len(OPTIONS[row.kind])
        assert row.human == tuple(sorted(set(row.human))) and row.human
        assert all(1 <= k <= n for k in row.human)
        if not row.multi_select:
            assert len(row.human) == 1
        none = none_index(row.kind)
        assert none is None or none not in row.human or row.human == (none,)
    # every family spreads over the question kinds, and the corpus holds both readings
    for family in FAMILIES:
        assert len({row.kind for row in CORPUS if row.family == family}) >= 5, family
    share_none = sum(row.human is None for row in CORPUS) / len(CORPUS)
    assert 0.2 <= share_none <= 0.35, share_none


def test_none_index_of_the_kinds():
    assert none_index("points") == 4
    assert none_index("location") == 4
    assert none_index("yes_no") is None and none_index("masks") is None


def test_corpus_no_wrong_ok():
    """No reply gets status ok with an answer the human does not read (or with none at all)."""
    wrong = [_describe(i, row, p) for i, row, p in _parses()
             if p.status == "ok" and p.answer != row.human]
    if wrong:
        pytest.fail(f"{len(wrong)} rows wrong with status ok:\n" + "\n".join(wrong))


def test_corpus_refused_though_clear():
    """At most 2 % of the replies with a clear human answer are refused."""
    clear = [(i, row, p) for i, row, p in _parses() if row.human is not None]
    refused = [_describe(i, row, p) for i, row, p in clear if p.status != "ok"]
    if len(refused) > MAX_REFUSED_CLEAR * len(clear):
        pytest.fail(f"{len(refused)} of {len(clear)} clear rows refused (at most "
                    f"{MAX_REFUSED_CLEAR:.0%}):\n" + "\n".join(refused))


def test_benchmark_tiny_runs():
    done = subprocess.run([sys.executable, str(BENCH), "--tiny", "--show-misses"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "total" in done.stdout
    assert f"{2 * len(FAMILIES)} replies" in done.stdout
