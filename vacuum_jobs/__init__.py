"""Job 2: vacuum many Delta tables in one Spark run from the inventory table (see docs/DESIGN.md).

``vacuum(spark, inventory_table, tables)`` plans a dry run; ``dry_run=False`` deletes.
``restore(spark, audit_table, run_id)`` and ``purge(spark, audit_table, days)`` undo a run's
deletes on versioned S3 buckets, or erase them for good (dry runs too, unless told).
"""

from lakeio.audit.contract import AuditAction, TableStatus
from lakeio.errors import HousekeepingError
from vacuum_jobs.batch_vacuum import BatchVacuum, RunRefused, vacuum
from vacuum_jobs.deletes import DeleteSettings
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.report import ReasonCode, RunReport, TableCounts, TableReport
from vacuum_jobs.restore_purge import Undo, UndoCommand, UndoError, UndoOptions, UndoReport, purge, restore
from vacuum_jobs.targets import Database, Discover, TableTarget, TargetsError
from vacuum_jobs.vacuum_plan import Decision, VacuumPlan

__all__ = [
    "AuditAction", "BatchVacuum", "Database", "Decision", "DeleteSettings", "Discover", "HousekeepingError", "ReasonCode",
    "RunRefused", "RunReport", "TableCounts", "TableReport", "TableStatus", "TableTarget", "TargetsError", "Undo", "UndoCommand",
    "UndoError", "UndoOptions", "UndoReport", "VacuumOptions", "VacuumPlan", "purge", "restore", "vacuum",
]
