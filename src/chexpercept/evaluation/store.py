"""Re-export of :mod:`chexpercept.run_store`; import from there.

The run store moved to the core so that Stage 04 reads run folders through it too; this module
keeps imports of the old name working.
"""

from chexpercept.run_store import (  # noqa: F401
    FSYNC_EVERY,
    FSYNC_INTERVAL_S,
    IDENTITY_FIELDS,
    SELECTION_FIELD,
    Records,
    RecordWriter,
    RunStore,
    identity_diffs,
)

__all__ = ["FSYNC_EVERY", "FSYNC_INTERVAL_S", "IDENTITY_FIELDS", "SELECTION_FIELD",
           "RecordWriter", "Records", "RunStore", "identity_diffs"]
