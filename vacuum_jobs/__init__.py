"""Job 2: vacuum many Delta tables in one Spark run from the inventory table (see DESIGN.md).

``vacuum(spark, inventory_table, tables)`` plans a dry run; ``dry_run=False`` deletes.
"""

from lakeio.audit import AuditAction, TableStatus
from vacuum_jobs.batch_vacuum import BatchVacuum, RunRefused, VacuumOptions, vacuum
from vacuum_jobs.deleter import DeleteSettings
from vacuum_jobs.report import RunReport, TableCounts, TableReport
from vacuum_jobs.targets import Discover, TableTarget, TargetsError

__all__ = [
    "AuditAction", "BatchVacuum", "DeleteSettings", "Discover", "RunRefused", "RunReport", "TableCounts",
    "TableReport", "TableStatus", "TableTarget", "TargetsError", "VacuumOptions", "vacuum",
]
