"""How closely the Stage 03 answer parser reads replies as a careful human reader does.

Runs ``chexpercept.evaluation.parsing.parse_answer`` over a corpus of raw replies, each with
the option set a careful human reads (or none where a human would not commit):
``--corpus main`` (``tests/evaluation/parser_corpus.py``, nine model families) or
``--corpus heldout`` (``tests/evaluation/parser_corpus_heldout.py``, ten other families, written
by another author), and prints, per family and in total:

- rows;
- read as a human reads: status ``ok`` with the human's answer, or a status other than ``ok``
  where the human commits to nothing;
- refused though clear: the human reads an answer, the parser returns a status other than ``ok``;
- wrong with status ok: status ``ok`` with another answer than the human's, including ``ok``
  where the human commits to nothing (the costly error: it scores a guess the model never made).

Each call gets ``num_options`` and ``option_texts`` of the row's question kind, ``none_index``
(the option whose text starts with "None" on multi-select kinds, else None) and the row's
finish reason. This is a measurement: it exits 0 whatever the figures, and 2 only when the
corpus itself is malformed.

Usage::

    python benchmarks/bench_parser_corpus.py [--corpus main|heldout] [--tiny] [--show-misses]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from chexpercept.evaluation.parsing import ParsedAnswer, parse_answer

ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = ROOT / "tests" / "evaluation"
if str(CORPUS_DIR) not in sys.path:  # parser_corpus imports its sibling parser_replies
    sys.path.insert(0, str(CORPUS_DIR))

import parser_corpus  # noqa: E402  (needs the path above)
import parser_corpus_heldout  # noqa: E402
from parser_corpus import CorpusReply  # noqa: E402

#: ``--corpus`` name -> the corpus module (CORPUS, FAMILIES, problems()).
CORPORA = {"main": parser_corpus, "heldout": parser_corpus_heldout}

READ, REFUSED_CLEAR, WRONG_OK = "read", "refused though clear", "wrong with status ok"
OUTCOMES = (READ, REFUSED_CLEAR, WRONG_OK)


def outcome(row: CorpusReply, parsed: ParsedAnswer) -> str:
    """How the parse of ``row`` compares with the human reading (one of ``OUTCOMES``)."""
    if parsed.status == "ok":
        return READ if row.human is not None and parsed.answer == row.human else WRONG_OK
    return READ if row.human is None else REFUSED_CLEAR


def evaluate(rows: list[CorpusReply]) -> list[tuple[CorpusReply, ParsedAnswer, str]]:
    """Parse every row; ``(row, parse, outcome)`` in corpus order."""
    out = []
    for row in rows:
        parsed = parse_answer(row.raw, **parser_corpus.call_kwargs(row))
        out.append((row, parsed, outcome(row, parsed)))
    return out


def tiny(rows: list[CorpusReply], per_family: int = 2) -> list[CorpusReply]:
    """The first ``per_family`` rows of each family."""
    taken: Counter[str] = Counter()
    out = []
    for row in rows:
        if taken[row.family] < per_family:
            taken[row.family] += 1
            out.append(row)
    return out


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:5.1f}%" if n else "    -"


def table(results: list[tuple[CorpusReply, ParsedAnswer, str]],
          families: tuple[str, ...] = parser_corpus.FAMILIES) -> str:
    """The per-family and total table of outcomes (``families`` in table order)."""
    families = tuple(f for f in families if any(r.family == f for r, _, _ in results))
    head = (f"{'family':<18}{'rows':>5}{'clear':>6}{'none':>5}   {'read as human':>14}"
            f"   {'refused though clear':>21}   {'wrong with status ok':>21}")
    lines = [head, "-" * len(head)]

    def line(name: str, group: list[tuple[CorpusReply, ParsedAnswer, str]]) -> str:
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


def misses(results: list[tuple[CorpusReply, ParsedAnswer, str]],
           corpus: list[CorpusReply] = parser_corpus.CORPUS) -> str:
    """Every row not read as a human reads it, with its raw text, parse and detail."""
    blocks = []
    for row, parsed, result in results:
        if result == READ:
            continue
        i = corpus.index(row)  # the row's index in the corpus
        raw = "\n".join("    | " + line for line in row.raw.splitlines())
        question = f", {row.points_question}" if row.kind == "points" else ""
        blocks.append(
            f"[{i}] {row.family} / {row.kind} ({'multi' if row.multi_select else 'single'}, "
            f"finish={row.finish_reason}{question}) -- {result}\n"
            f"    human: {row.human}   parser: {parsed.status} {parsed.answer}"
            f"   detail: {parsed.detail or '-'}\n"
            f"    note: {row.note or '-'}\n{raw}")
    return "\n\n".join(blocks) if blocks else "no misses"


def main(argv: list[str] | None = None) -> int:
    """Print the table (and the misses with ``--show-misses``); 0, or 2 on a malformed corpus."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=tuple(CORPORA), default="main",
                        help="Which corpus of tests/evaluation/ (default: %(default)s).")
    parser.add_argument("--tiny", action="store_true",
                        help="Only the first 2 rows of each family (a smoke run for the tests).")
    parser.add_argument("--show-misses", action="store_true",
                        help="Print every row not read as a human reads it, with its raw text, "
                             "the parse and its detail.")
    args = parser.parse_args(argv)
    module = CORPORA[args.corpus]
    bad = module.problems()
    if bad:
        print(f"error: malformed corpus (tests/evaluation/{module.__name__}.py):",
              file=sys.stderr)
        for problem in bad:
            print(f"  {problem}", file=sys.stderr)
        return 2
    rows = tiny(module.CORPUS) if args.tiny else list(module.CORPUS)
    results = evaluate(rows)
    print(f"parser corpus {args.corpus}: {len(rows)} replies{' (--tiny)' if args.tiny else ''}")
    print(table(results, module.FAMILIES))
    if args.show_misses:
        print()
        print(misses(results, module.CORPUS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
