"""The answer-status vocabulary: one enumeration for the providers, the parser and the schemas.

Every turn of a Stage 03 run ends in exactly one status (docs/engines.md, "Faults";
docs/parsing.md, "Parser rules"):

- answers, recorded and scored (only ``ok`` can be correct): ``ok`` (the parser read an option),
  ``unparseable`` (no declared answer), ``refused`` (the model declined), ``truncated`` (cut off
  at the token limit), ``error`` (this request alone can never succeed), ``blocked`` (a
  provider-side filter withheld the answer), ``judged`` (the parser could not read the reply,
  ``unparseable``, and the optional judge model read an option from it; docs/parsing.md,
  "Judge model": the judged reading scores it, the strict reading counts it as
  ``unparseable``);
- ``fault``: no answer at all (retries ran out); never recorded as an answer, the case stays
  unfinished.

Members are ``str`` (``Status.OK == "ok"``), so records, JSON files and comparisons keep using
the plain strings.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """A turn's status (see the module docstring)."""

    OK = "ok"
    UNPARSEABLE = "unparseable"
    REFUSED = "refused"
    TRUNCATED = "truncated"
    ERROR = "error"
    BLOCKED = "blocked"
    JUDGED = "judged"
    FAULT = "fault"


#: Statuses of a recorded answer, in the order of the schemas, CSV columns and reports.
#: ``judged`` comes last: only a run with ``--judge`` records it (docs/parsing.md, "Judge model").
ANSWER_STATUSES: tuple[str, ...] = (Status.OK, Status.UNPARSEABLE, Status.REFUSED,
                                    Status.TRUNCATED, Status.ERROR, Status.BLOCKED,
                                    Status.JUDGED)
#: Statuses a provider gives a completion that carries an answer (the parser may still decide
#: ``unparseable``, ``refused`` or ``truncated`` from the text).
COMPLETION_STATUSES: tuple[str, ...] = (Status.OK, Status.REFUSED, Status.TRUNCATED,
                                        Status.ERROR, Status.BLOCKED)
