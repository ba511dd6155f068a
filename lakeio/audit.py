"""The vacuum audit table's contract: job 2 appends to it, erasure evidence reads it.

Each run appends one row per table (``path`` null, ``action`` ``table_<status>``, ``error``
the reason) and one row per planned file: what happened to it, and when.
"""

from __future__ import annotations

from lakeio.text import StrEnum

AUDIT_COLUMNS = (
    "run_id string, table_root string, table_version long, path string, length long, modificationTime long, "
    "action string, error string, timestamp timestamp, inventory_date date, retention_hours double, run_date date"
)


class TableStatus(StrEnum):
    """Where a table of a vacuum run ended; ``pending`` only until the run decides."""

    PENDING = "pending"
    VACUUMED = "vacuumed"
    DRY_RUN = "dry_run"
    SKIPPED = "skipped"
    REFUSED = "refused"
    FAILED = "failed"


FINAL_STATUSES = tuple(s for s in TableStatus if s is not TableStatus.PENDING)


class AuditAction(StrEnum):
    """An audit row's ``action``: what happened to a planned file, or how its table's run ended."""

    WOULD_DELETE = "would_delete"  # planned in a dry run
    DELETED = "deleted"
    ALREADY_ABSENT = "already_absent"  # the store says it was gone before the delete
    FAILED = "failed"
    TABLE_VACUUMED = "table_vacuumed"
    TABLE_DRY_RUN = "table_dry_run"
    TABLE_SKIPPED = "table_skipped"
    TABLE_REFUSED = "table_refused"
    TABLE_FAILED = "table_failed"

    @classmethod
    def for_table(cls, status: TableStatus) -> AuditAction:
        return cls(f"table_{status}")


# Runs that deleted files (dry runs do not): what bounds an erasure.
DELETING_RUNS = (AuditAction.TABLE_VACUUMED, AuditAction.TABLE_FAILED)
