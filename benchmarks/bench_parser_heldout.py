"""The Stage 03 answer parser against a second held-out corpus (``parser_corpus_heldout.py``).

The same measurement as ``bench_parser_corpus.py``, over
``tests/evaluation/parser_corpus_heldout.py`` (replies of ten other model families, written
without looking at the parser's behaviour, each with the option set a careful human reads, or
none where a human would not commit). Per family and in total it prints rows, read as a human
reads, refused though clear, and wrong with status ok (the definitions of
``bench_parser_corpus.outcome``, whose ``evaluate`` it reuses, so each call gets the arguments
Stage 03 passes: ``parser_corpus.call_kwargs``). A measurement: it exits 0 whatever the
figures, and 2 only when the corpus is malformed.

Usage::

    python benchmarks/bench_parser_heldout.py [--tiny] [--show-misses]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS_DIR = HERE.parent / "tests" / "evaluation"  # parser_corpus_heldout and its siblings
for _path in (HERE, CORPUS_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import parser_corpus_heldout as heldout  # noqa: E402
from bench_parser_corpus import (  # noqa: E402
    OUTCOMES,
    READ,
    REFUSED_CLEAR,
    WRONG_OK,
    _pct,
    evaluate,
    tiny,
)


def table(results) -> str:
    """The per-family and total table of outcomes (``bench_parser_corpus.table``'s layout)."""
    families = [f for f in heldout.FAMILIES if any(r.family == f for r, _, _ in results)]
    head = (f"{'family':<18}{'rows':>5}{'clear':>6}{'none':>5}   {'read as human':>14}"
            f"   {'refused though clear':>21}   {'wrong with status ok':>21}")
    lines = [head, "-" * len(head)]

    def line(name, group) -> str:
        n = len(group)
        clear = sum(r.human is not None for r, _, _ in group)
        c = Counter(o for _, _, o in group)
        return (f"{name:<18}{n:>5}{clear:>6}{n - clear:>5}   "
                f"{c[READ]:>6} {_pct(c[READ], n):>7}   "
                f"{c[REFUSED_CLEAR]:>12} {_pct(c[REFUSED_CLEAR], clear):>8}   "
                f"{c[WRONG_OK]:>12} {_pct(c[WRONG_OK], n):>8}")

    for family in families:
        lines.append(line(family, [x for x in results if x[0].family == family]))
    lines.append("-" * len(head))
    lines.append(line("total", results))
    lines.append("(read as human and wrong with status ok: % of rows; refused though clear: "
                 "% of the rows with a clear human answer)")
    return "\n".join(lines)


def misses(results) -> str:
    """Every row not read as a human reads it, with its raw text, parse and detail."""
    blocks = []
    for row, parsed, result in results:
        if result == READ:
            continue
        i = heldout.CORPUS.index(row)
        raw = "\n".join("    | " + line for line in row.raw.splitlines())
        blocks.append(
            f"[{i}] {row.family} / {row.kind} ({'multi' if row.multi_select else 'single'}, "
            f"finish={row.finish_reason}, {row.points_question if row.kind == 'points' else '-'})"
            f" -- {result}\n"
            f"    human: {row.human}   parser: {parsed.status} {parsed.answer}"
            f"   detail: {parsed.detail or '-'}\n"
            f"    note: {row.note or '-'}\n{raw}")
    return "\n\n".join(blocks) if blocks else "no misses"


def main(argv: list[str] | None = None) -> int:
    """Print the table (and the misses with ``--show-misses``); 0, or 2 on a malformed corpus."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true",
                        help="Only the first 2 rows of each family (a smoke run).")
    parser.add_argument("--show-misses", action="store_true",
                        help="Print every row not read as a human reads it, with its raw text, "
                             "the parse and its detail.")
    args = parser.parse_args(argv)
    bad = heldout.problems()
    if bad:
        print("error: malformed corpus (tests/evaluation/parser_corpus_heldout.py):",
              file=sys.stderr)
        for problem in bad:
            print(f"  {problem}", file=sys.stderr)
        return 2
    rows = tiny(heldout.CORPUS) if args.tiny else list(heldout.CORPUS)
    results = evaluate(rows)
    assert {o for _, _, o in results} <= set(OUTCOMES)
    print(f"parser held-out corpus: {len(rows)} replies{' (--tiny)' if args.tiny else ''}")
    print(table(results))
    if args.show_misses:
        print()
        print(misses(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
