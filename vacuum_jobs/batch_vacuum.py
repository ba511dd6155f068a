"""Job 2 as one action: vacuum many Delta tables by diffing the inventory against their logs.

``vacuum()`` is the Python entry point; :class:`BatchVacuum` is the action behind it and
the CLI. Steps, each a method: resolve the names, ready the audit and load the inventory,
read the logs, apply the gates, plan, check the inventory's coverage; then the plan as a value
(vacuum_plan.VacuumPlan), re-checked against the logs, its S3 versions added, executed
(deleted, or listed in a dry run) and recorded. One table's problem never stops the others;
its report says why.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from lakeio import catalog, uris
from lakeio.audit import TableStatus
from lakeio.audit_journal import AuditNotRecorded, AuditUnwritable, journal_of
from lakeio.delta_write import BeforeCommit, IncompatibleTable
from lakeio.deltalog.ownership import delta_roots
from lakeio.deltalog.replay import TableState
from lakeio.deprecation import renamed_keywords
from lakeio.errors import HousekeepingError
from lakeio.inventory import InventorySnapshot, InventoryUnavailable, current_objects, inventory_snapshot
from lakeio.put_if_absent import PutIfAbsentUnproven
from lakeio.spark import check_workers
from lakeio.steps import Step, Steps, one_run
from lakeio.storage import Storage
from lakeio.times import epoch_ms, iso_utc
from lakeio.uris import TableRoot
from vacuum_jobs.deleter import DeleteJournal, DeleteSettings
from vacuum_jobs.execution import Execution
from vacuum_jobs.history import (
    BeforePut,
    HistorySetting,
    RunHistory,
    TableHistory,
    history_setting,
    history_writer,
    session_history_setting,
)
from vacuum_jobs.interrupted import forget_intent, ready_audit, run_ended
from vacuum_jobs.options import OLD_NAMES, VacuumOptions
from vacuum_jobs.planning import Planning
from vacuum_jobs.report import NOT_READ, ReasonCode, RunReport, RunTables, TableReport, write_audit
from vacuum_jobs.targets import Database, Discover, TableTarget, TargetsError, as_targets, resolve_names

log = logging.getLogger(__name__)



Tables = Sequence[str | os.PathLike[str] | TableTarget] | Database | Discover


@dataclass
class VacuumRun:
    """One :meth:`BatchVacuum.execute`: the places its names resolved to, and where its history and
    deletes stand. Each step fills its own part (the report, the tables' reports in ``RunTables``);
    nothing of a run stays on the action after it."""

    report: RunReport
    now_ms: int
    started: float  # time.monotonic() when it began
    history: RunHistory
    inventory_table: str  # the options' tables, catalog names resolved to locations (_resolve_names)
    audit_table: str | None
    deleted_in: list[TableRoot] = field(default_factory=list)  # tables whose delete journals wait for the audit append


@renamed_keywords(**OLD_NAMES)
def vacuum(
    spark: SparkSession,
    inventory_table: str,
    tables: Tables,
    *,
    dry_run: bool = True,
    retention_hours: float | None = None,
    enforce_retention_duration: bool = True,
    audit_table: str | None = None,
    inventory_date: date | None = None,
    max_inventory_age_hours: float = VacuumOptions.max_inventory_age_hours,
    min_coverage: float = VacuumOptions.min_coverage,
    delete: DeleteSettings | None = None,
    history: bool | None = None,
    now_ms: int | None = None,
) -> RunReport:
    """Vacuum many Delta tables in one run by diffing the inventory against their logs.

    Args:
        spark: the session to run in (its conf reaches the stores).
        inventory_table: the inventory Delta table (job 1), a URI or a catalog name.
        tables: table URIs or catalog names, :class:`TableTarget` values (a retention per
            table), ``Database(name)``, or ``Discover(include=..., exclude=...)`` over the inventory.
        dry_run: plan and report only; ``False`` deletes.
        retention_hours: keep what the logs removed less than this long ago; default: each
            table's ``delta.deletedFileRetentionDuration``.
        enforce_retention_duration: refuse a table whose own retention is longer than
            ``retention_hours`` (as Delta's retention check does); ``False`` allows it.
        audit_table: the Delta table every run appends to, planned and deleted files alike.
        inventory_date: the inventory date to use; default: the newest.
        max_inventory_age_hours: refuse the run when the inventory is older than this.
        min_coverage: below this share of a table's old live files listed, the inventory does
            not cover the table, which is refused.
        delete: how files are deleted (batch size, pace, trash, versions); default: :class:`DeleteSettings`.
        history: record the vacuum in each table it deletes in, as Delta does: a ``VACUUM START``
            commit before the deletes and a ``VACUUM END`` after (``DESCRIBE HISTORY`` shows them).
            Default None follows Delta: the session's ``spark.databricks.delta.vacuum.logging.enabled``
            where set, else on for local disk (and the stores Delta trusts), off on S3. ``True`` on S3
            attests that every writer of the tables commits with S3 conditional writes. A
            :class:`TableTarget`'s own setting comes first for its table.
        now_ms: the run's clock, epoch milliseconds (tests); default: now.

    Returns:
        The :class:`RunReport`: each table's status and counts, and the per-file outcomes.

    Raises:
        RunRefused: the inventory cannot be used; a table's own problem is in its report, never raised.
    """
    options = VacuumOptions(inventory_table, inventory_date=inventory_date, max_inventory_age_hours=max_inventory_age_hours,
                            retention_hours=retention_hours, enforce_retention_duration=enforce_retention_duration,
                            dry_run=dry_run, audit_table=audit_table, min_coverage=min_coverage,
                            delete=delete or DeleteSettings(), history=history, now_ms=now_ms)
    return BatchVacuum(spark, options).execute(tables)


class BatchVacuum:
    """One run over many tables: each step a method, the steps timed into the report."""

    def __init__(self, spark: SparkSession, options: VacuumOptions, *, on_step: Callable[[str], None] | None = None,
                 before_commit: BeforeCommit | None = None, before_history: BeforePut | None = None):
        """``on_step`` is told each step's name as it begins, ``before_commit`` the table each commit
        to the audit is about to go into, ``before_history`` each version a table's VACUUM START or
        END is about to be put at (where tests hold a run, or change what it reads)."""
        self.spark = spark
        self.before_commit = before_commit
        self.options = options
        self.progress = Steps(spark, log, on_step=on_step)
        check_workers(spark)
        self.storage = Storage(spark)
        self.log_writer = history_writer(options.delete, before_history)
        self.session_history = session_history_setting(spark)  # Delta's own switch, read once

    @one_run
    def execute(self, tables: Tables) -> RunReport:
        """Vacuum ``tables``: a list of table URIs or targets, or :class:`Discover` for the
        Delta tables the inventory shows. There is no default: nothing lake-wide by omission."""
        started = time.monotonic()
        self.progress.restart()
        self.progress.begin(Step.INVENTORY_DATE, "reading the inventory")
        if tables is None:
            raise TargetsError("name the tables to vacuum: a list of table URIs, or Discover() for every "
                               "Delta table the inventory shows")
        now_ms = epoch_ms() if self.options.now_ms is None else self.options.now_ms
        report = RunReport(run_id=str(uuid.uuid4()), started_at=iso_utc(now_ms),
                           inventory_table=uris.to_uri(self.options.inventory_table),
                           inventory_date=None, dry_run=self.options.dry_run)
        run = VacuumRun(report, now_ms, started,
                        RunHistory(self.log_writer, report.run_id, self.options.enforce_retention_duration),
                        self.options.inventory_table, self.options.audit_table)
        explicit, not_run = self._resolve_names(tables, run)
        inventory = self._ready_audit_and_inventory(run, explicit, not_run)
        self.progress.begin(Step.FINDING_TABLES, "finding the Delta tables the inventory shows")
        all_roots = delta_roots(current_objects(inventory.rows))
        targets = tables.targets(all_roots) if isinstance(tables, Discover) else explicit or []
        if not targets:  # a typo in a daily schedule would otherwise vacuum nothing, forever, with exit 0
            report.tables = not_run
            raise self._refused(run, _nothing_to_vacuum(tables, all_roots))
        run_tables = RunTables({t.root: TableReport(t.uri, name=t.name) for t in targets})
        report.tables = run_tables.reports() + not_run
        runnable = self._runnable(targets, run_tables)
        planning = Planning(self.spark, self.storage, self.options, self.progress,
                            functools.partial(self._decide_history, run, run_tables))
        read = planning.read_and_plan(inventory, runnable, run_tables, all_roots, now_ms,
                                      recorded=run.audit_table is not None)
        report.references_unknown = {root: why for root, why in read.references_unknown.items()}
        planned = read.plan
        try:
            if planned is not None:
                planning.check_coverage(planned, run_tables)
                execution = Execution(self.spark, self.storage, self.options, self.progress)
                plan = execution.recheck_logs(execution.plan(planned, run_tables), run_tables)
                report.plan = plan = execution.with_versions(plan, inventory)
                report.outcomes = execution.execute(plan, run_tables, inventory, run)
            self._record(run)
        finally:
            run_ended(report.run_id)
            # Only now: a dry run's outcomes stay lazy until the audit above reads them, from the plan's cache.
            if planned is not None:
                planned.release()
            read.replay.release()
        report.elapsed_seconds, report.step_seconds = time.monotonic() - started, self.progress.seconds()
        return report

    def _refused(self, run: VacuumRun, reason: str) -> RunRefused:
        """The whole run refused, its report timed so far."""
        run.report.refused = reason
        run.report.elapsed_seconds, run.report.step_seconds = time.monotonic() - run.started, self.progress.seconds()
        return RunRefused(reason, run.report)

    def _resolve_names(self, tables: Tables, run: VacuumRun) -> tuple[list[TableTarget] | None, list[TableReport]]:
        """The tables the run was given, catalog names resolved (None: discovered from the inventory),
        and the reports of names it will not run. Resolves the run's inventory and audit tables to their
        locations; refuses the run for an unknown database or a table named twice."""
        given: list[TableTarget] | Database | None = (
            tables if isinstance(tables, Database) else None if isinstance(tables, Discover) else as_targets(tables))
        explicit: list[TableTarget] | None = None
        unnamed: dict[str, tuple[ReasonCode, str]] = {}
        passed_by: dict[str, str] = {}
        try:
            run.inventory_table = catalog.resolve(self.spark, self.options.inventory_table)
            run.audit_table = self.options.audit_table and catalog.resolve(self.spark, self.options.audit_table,
                                                                           must_be_delta=False)
            run.report.inventory_table = uris.to_uri(run.inventory_table)
            run.report.audit_table = self.options.audit_table
            if given is not None:
                explicit, unnamed, passed_by = resolve_names(self.spark, given)
        except (catalog.CatalogError, TargetsError) as refusal:  # an unknown database; a name and its URI both
            raise self._refused(run, str(refusal)) from None
        return explicit, ([TableReport(name, TableStatus.REFUSED, why, name=name, reason_code=code)
                           for name, (code, why) in unnamed.items()]
                          + [TableReport(name, TableStatus.SKIPPED, why, name=name, reason_code=ReasonCode.NOT_VACUUMABLE)
                             for name, why in passed_by.items()])

    def _ready_audit_and_inventory(self, run: VacuumRun, explicit: list[TableTarget] | None, not_run: list[TableReport]
               ) -> InventorySnapshot:
        """The audit table ready to take the run's rows, and the inventory to plan against; the run is
        refused (each named table with it) when either is not."""
        try:
            if run.audit_table:
                self._ready_audit(run, run.audit_table, explicit or [])
            inventory = self._load_inventory(run)
        except (IncompatibleTable, AuditUnwritable, PutIfAbsentUnproven, InventoryUnavailable) as refusal:
            run.report.tables = [TableReport(t.uri, TableStatus.REFUSED, NOT_READ, name=t.name,
                                             reason_code=ReasonCode.RUN_REFUSED) for t in explicit or []] + not_run
            raise self._refused(run, str(refusal)) from None
        run.report.inventory_date = inventory.day.isoformat()
        return inventory

    def _record(self, run: VacuumRun) -> None:
        """Append the run to the audit table (kept for the next run when the append fails), then drop
        the delete journals: a run killed before this point is read back from them."""
        report = run.report
        if run.audit_table:
            self.progress.begin(Step.RECORDING, f"recording {run.audit_table}")
            try:
                write_audit(self.spark, run.audit_table, report, run.now_ms, report.outcomes,
                            before_commit=self.before_commit)
                forget_intent(self.spark, run.audit_table, report.run_id)
            except AuditNotRecorded as unrecorded:  # kept for the next run; the report still goes out
                report.audit_problems.append(str(unrecorded))
        DeleteJournal.remove(self.storage, run.deleted_in, report.run_id)

    def _ready_audit(self, run: VacuumRun, audit_table: str, targets: list[TableTarget]) -> None:
        """Before anything is deleted: the audit table can take the run's rows (its schema, a write in its
        folder), and the runs kept for it appended first: the one readiness of every destructive run (ready_audit)."""
        own = {t.root: t.history for t in targets}  # a killed run's START is closed by this run's rule
        self.log_writer.proof_folder = journal_of(audit_table)  # where ready_audit proves the store's put-if-absent

        def history_of(state: TableState) -> TableHistory:
            return TableHistory.of(state, self._history_setting(state.table_root, own.get(state.table_root)))

        run.report.audit_problems += ready_audit(self.spark, audit_table, self.options.delete, history_of,
                                                 self.progress, self.before_commit)

    def _load_inventory(self, run: VacuumRun) -> InventorySnapshot:
        """The newest (or chosen) inventory date; refused when there is none or it is too old.
        Every row of the date: the plan picks one row per object itself, in its own pass."""
        inventory = inventory_snapshot(self.spark, run.inventory_table, self.options.inventory_date,
                                       self.options.max_inventory_age_hours, run.now_ms)
        self.progress(f"inventory {inventory.table} as of {inventory.day} (version {inventory.version})")
        return inventory

    def _runnable(self, targets: list[TableTarget], run_tables: RunTables) -> list[TableTarget]:
        """Tables disabled in the tables file are skipped; with a trash folder, tables it cannot
        take files from by a rename (another file system, or the trash inside them) are refused."""
        runnable = []
        trash = self.options.delete.trash and uris.canonical(self.options.delete.trash)
        for target in targets:
            if not target.enabled:
                run_tables.skip(target.root, ReasonCode.DISABLED, "disabled in the tables file")
            elif trash and (why := _trash_unusable(trash, target.root)):
                run_tables.refuse(target.root, ReasonCode.TRASH_UNUSABLE, why)
            else:
                runnable.append(target)
        return runnable

    def _decide_history(self, run: VacuumRun, run_tables: RunTables, target: TableTarget, state: TableState,
                        table_hours: float) -> None:
        """Whether and how the run writes the history of ``target``, a table it will delete in."""
        run_hours = next((h for h in (target.retention_hours, self.options.retention_hours) if h is not None), None)
        run.history.decide(TableHistory.of(state, self._history_setting(target.root, target.history), table_hours,
                                           run_hours), run_tables)

    def _history_setting(self, root: TableRoot, table: bool | None) -> HistorySetting:
        """Whether this run writes ``root``'s history, and by which rule (``table``: its own setting)."""
        return history_setting(root, table, self.options.history, self.session_history)


def _trash_unusable(trash: str, root: TableRoot) -> str | None:
    """Why ``trash`` cannot take this table's files by a rename; None when it can (or the table is on
    S3, where deletes add delete markers instead)."""
    if uris.scheme_of(root) == "s3":
        return None
    if urlsplit(trash)[:2] != urlsplit(root)[:2]:  # scheme and authority
        return f"the trash {trash} is on another file system: moving this table's files there would copy them"
    if trash == root or uris.is_strictly_under(trash, root):
        return f"the trash {trash} lies inside this table: its next vacuum would delete the trash"
    return None


def _nothing_to_vacuum(tables: Tables, roots: list[TableRoot]) -> str:
    """Why a run has no table: the patterns that matched nothing, and a few roots the inventory holds."""
    if isinstance(tables, Database):
        return f"database {tables.name} holds no Delta table"
    if not isinstance(tables, Discover):
        return "the list of tables to vacuum is empty, or none of its names is a Delta table"
    if not roots:
        return "the inventory shows no Delta table (no key with a _delta_log/ segment)"
    patterns = "include " + ", ".join(repr(g) for g in tables.include) if tables.include else "no include pattern"
    excluded = ", ".join(repr(g) for g in tables.exclude)
    shown = ", ".join(roots[:5]) + (f" and {len(roots) - 5} more" if len(roots) > 5 else "")
    return (f"{patterns}{' with exclude ' + excluded if excluded else ''} matches none of the {len(roots)} Delta table(s) "
            f"the inventory shows: {shown} (patterns match whole table URIs: start them with * or the scheme)")


class RunRefused(HousekeepingError):
    """The whole run was refused before it deleted anything (no usable inventory or audit, no table
    to vacuum); ``report.refused`` holds why, and its tables are those it never read."""

    def __init__(self, message: str, report: RunReport):
        super().__init__(f"run refused, nothing deleted: {message}")
        self.report = report
