"""Before a vacuum reads a log: its names resolved, its audit table ready, its inventory loaded, its trash usable.

Each of these refuses the whole run, before anything is read or deleted, where it fails (``REFUSALS``):
a catalog that does not know a name, an audit table that cannot take the run's rows, a store that does
not prove its put-if-absent, no inventory or one too old. A table the trash cannot take files from by
a rename is refused alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from lakeio.audit.contract import TableStatus
from lakeio.audit.journal import AuditUnwritable, journal_of
from lakeio.deltalog.replay import TableState
from lakeio.inventory import InventorySnapshot, InventoryUnavailable, inventory_snapshot
from lakeio.spark import catalog
from lakeio.spark.steps import Steps
from lakeio.store import uris
from lakeio.store.put_if_absent import PutIfAbsentUnproven
from lakeio.store.uris import TableRoot
from lakeio.tables.write import BeforeCommit, IncompatibleTable
from vacuum_jobs.history import HistorySetting, LogWriter, TableHistory
from vacuum_jobs.interrupted import ready_audit
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.report import ReasonCode, RunTables, TableReport
from vacuum_jobs.targets import Database, Discover, TableTarget, TargetsError, resolve_names
from vacuum_jobs.vacuum_plan import VacuumPlan

# What refuses a whole run before it reads a log: the catalog's names, the audit table, the inventory.
NAME_REFUSALS = (catalog.CatalogError, TargetsError)
REFUSALS = (IncompatibleTable, AuditUnwritable, PutIfAbsentUnproven, InventoryUnavailable)

# Whether the run writes a table's history, and by which rule (the table's own setting, or None).
HistorySettingOf = Callable[[TableRoot, bool | None], HistorySetting]


@dataclass(frozen=True)
class ResolvedNames:
    """The run's tables by location: its inventory and audit tables, the tables it was given (None: to be
    discovered from the inventory), and the reports of names it will not run."""

    inventory_table: str
    audit_table: str | None
    given: list[TableTarget] | None
    not_run: list[TableReport]


def names_a_catalog_table(options: VacuumOptions, tables: list[TableTarget] | Database | Discover) -> bool:
    """Whether resolving the run's names asks a catalog: a database, or a table, inventory or audit named so."""
    named = [options.inventory_table, options.audit_table or ""] + ([t.uri for t in tables] if isinstance(tables, list) else [])
    return isinstance(tables, Database) or any(catalog.is_name(name) for name in named if name)


def resolved_names(spark: SparkSession, options: VacuumOptions, tables: list[TableTarget] | Database | Discover
                   ) -> ResolvedNames:
    """Catalog names resolved to locations; NAME_REFUSALS for an unknown database or a table named twice.
    A name that is no Delta table is reported (refused or skipped), not run."""
    inventory_table = catalog.resolve(spark, options.inventory_table)
    audit_table = options.audit_table and catalog.resolve(spark, options.audit_table, must_be_delta=False)
    if isinstance(tables, Discover):
        return ResolvedNames(inventory_table, audit_table, None, [])
    given, unnamed, passed_by = resolve_names(spark, tables)
    not_run = ([TableReport(name, TableStatus.REFUSED, why, name=name, reason_code=code)
                for name, (code, why) in unnamed.items()]
               + [TableReport(name, TableStatus.SKIPPED, why, name=name, reason_code=ReasonCode.NOT_VACUUMABLE)
                  for name, why in passed_by.items()])
    return ResolvedNames(inventory_table, audit_table, given, not_run)


class Readiness:
    """The audit table and the inventory ready for one run, and the tables its trash can take files from."""

    def __init__(self, spark: SparkSession, options: VacuumOptions, progress: Steps, log_writer: LogWriter,
                 history_setting: HistorySettingOf, before_commit: BeforeCommit | None):
        self.spark, self.options, self.progress = spark, options, progress
        self.log_writer, self.history_setting, self.before_commit = log_writer, history_setting, before_commit

    def ready_audit(self, audit_table: str, targets: list[TableTarget]) -> list[str]:
        """Before anything is deleted: the audit table can take the run's rows (its schema, a write in its
        folder), and the runs kept for it appended first (interrupted.ready_audit, the one readiness of every
        destructive run). What could not be appended, kept for the next run."""
        own = {t.root: t.history for t in targets}  # a killed run's START is closed by this run's rule
        self.log_writer.proof_folder = journal_of(audit_table)  # where ready_audit proves the store's put-if-absent

        def history_of(state: TableState) -> TableHistory:
            return TableHistory.of(state, self.history_setting(state.table_root, own.get(state.table_root)))

        return ready_audit(self.spark, audit_table, self.options.delete, history_of, self.progress, self.before_commit)

    def inventory(self, inventory_table: str, now_ms: int) -> InventorySnapshot:
        """The newest (or chosen) inventory date; InventoryUnavailable when there is none or it is too old.
        Every row of the date: the plan picks one row per object itself, in its own pass."""
        inventory = inventory_snapshot(self.spark, inventory_table, self.options.inventory_date,
                                       self.options.max_inventory_age_hours, now_ms)
        self.progress(f"inventory {inventory.table} as of {inventory.day} (version {inventory.version})")
        return inventory

    def runnable(self, targets: list[TableTarget], run_tables: RunTables, reviewed: VacuumPlan | None) -> list[TableTarget]:
        """Tables disabled in the tables file are skipped, and, given a plan ``reviewed`` before, the tables it
        does not hold; with a trash folder, tables it cannot take files from by a rename (another file system,
        or the trash inside them) are refused."""
        runnable = []
        trash = self.options.delete.trash and uris.canonical(self.options.delete.trash)
        for target in targets:
            if not target.enabled:
                run_tables.skip(target.root, ReasonCode.DISABLED, "disabled in the tables file")
            elif reviewed is not None and target.root not in reviewed.decisions:
                run_tables.skip(target.root, ReasonCode.NOT_IN_PLAN, "not a table of the plan the run was given")
            elif trash and (why := trash_unusable(trash, target.root)):
                run_tables.refuse(target.root, ReasonCode.TRASH_UNUSABLE, why)
            else:
                runnable.append(target)
        return runnable


def trash_unusable(trash: str, root: TableRoot) -> str | None:
    """Why ``trash`` cannot take this table's files by a rename; None when it can (or the table is on
    S3, where deletes add delete markers instead)."""
    if uris.scheme_of(root) == "s3":
        return None
    if urlsplit(trash)[:2] != urlsplit(root)[:2]:  # scheme and authority
        return f"the trash {trash} is on another file system: moving this table's files there would copy them"
    if trash == root or uris.is_strictly_under(trash, root):
        return f"the trash {trash} lies inside this table: its next vacuum would delete the trash"
    return None
