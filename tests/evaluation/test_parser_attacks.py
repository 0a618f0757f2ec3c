"""The parser against hostile-but-realistic replies (parser_attacks.json).

536 replies written to make the parser read a different answer with status ``ok``: changes of
mind without a statement, labels of a walk-through, criticism of an option, "Wrong answer:",
quoted or attributed statements, conditions, additions in a later sentence, reordered option
lists. Each row gives the answer a careful human reads (``human``, None: no answer) and the
other readings a careful human might accept (``alt``). Wrong with status ``ok`` is the worst
outcome; the few rows the grammar cannot tell without reading the image's meaning are listed
in ``KNOWN_WRONG`` (docs/parsing.md, "What the grammar cannot see"), and no other row may be.
"""

from __future__ import annotations

import json
from pathlib import Path

from parser_corpus import CorpusReply, call_kwargs

from chexpercept.evaluation.parsing import OK, parse_answer

ROWS = json.loads((Path(__file__).parent / "parser_attacks.json").read_text(encoding="utf-8"))

#: Replies whose contradiction lies in what a note or a later sentence means, not in how it
#: is written: "Answer: 2 (left upper zone)" where option 2 is another region, "No, it
#: definitely needs a major revision" (the explanation says yes).
KNOWN_WRONG = frozenset({
    "Yes, the mask needs a major revision — is what I would say if the overlay missed the "
    "base; it doesn't, so no.",
    "No, it definitely needs a major revision.",
    "Answer: 2 (the left medial/upper zone intersection)",
    "Answer: 2 (left upper zone)",
    "Answer: 1 (right lateral mid zone)",
    "Answer: None\n\nThe red point marks consolidation that the mask does not cover yet.",
})


def _readings(row: dict) -> list[tuple[int, ...] | None]:
    return [tuple(r) if r else None for r in [row["human"], *row["alt"]]]


def _parse(row: dict):
    reply = CorpusReply("attack", row["kind"], row["kind"] in ("points", "location"),
                        row["raw"], tuple(row["human"]) if row["human"] else None, row["fr"],
                        row.get("note", ""), row.get("pq") or "expansion")
    return parse_answer(reply.raw, **call_kwargs(reply))


def test_no_attack_is_read_wrong_with_status_ok():
    wrong = []
    for row in ROWS:
        parsed = _parse(row)
        if parsed.status == OK and parsed.answer not in _readings(row):
            wrong.append((row["raw"], row["human"], parsed.answer))
    unexpected = [w for w in wrong if w[0] not in KNOWN_WRONG]
    assert not unexpected, unexpected
    assert len(ROWS) >= 500


def test_few_attacks_that_a_human_reads_are_refused():
    refused = [row["raw"] for row in ROWS
               if None not in _readings(row) and _parse(row).status != OK]
    assert len(refused) <= 20, refused
