"""Job 2 as one action: vacuum many Delta tables by diffing the inventory against their logs.

``vacuum()`` is the Python entry point; :class:`BatchVacuum` is the action behind it and the CLI,
and reads as the run's steps: the names resolved, the audit readied and the inventory loaded
(readiness); the tables found; the logs read, gated and planned (planning); the plan as a value
(vacuum_plan.VacuumPlan) re-checked against the logs, given its S3 versions and executed: deleted,
or listed in a dry run (execution); the run recorded (recording). One table's problem never stops
the others; its report says why.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date

from pyspark.sql import SparkSession

from lakeio.audit.contract import TableStatus
from lakeio.deltalog.ownership import delta_roots
from lakeio.deltalog.replay import TableState
from lakeio.deprecation import renamed_keywords
from lakeio.errors import HousekeepingError, InvalidOption
from lakeio.inventory import InventorySnapshot, current_objects
from lakeio.pins import KeepVersions, Pin
from lakeio.pins import keep_versions as pins_given
from lakeio.spark.session import check_workers
from lakeio.spark.steps import Step, Steps, one_run
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.store.uris import TableRoot
from lakeio.tables.pins import PinsUnreadable, pins_with_table
from lakeio.tables.write import BeforeCommit
from lakeio.times import epoch_ms, iso_utc
from vacuum_jobs.carry_forward import CarryForward
from vacuum_jobs.deletes import DeleteSettings
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
from vacuum_jobs.interrupted import run_ended
from vacuum_jobs.options import OLD_NAMES, VacuumOptions
from vacuum_jobs.plan import Plan
from vacuum_jobs.planning import Planning
from vacuum_jobs.readiness import NAME_REFUSALS, REFUSALS, Readiness, ResolvedNames, names_a_catalog_table, resolved_names
from vacuum_jobs.recording import record_run
from vacuum_jobs.report import NOT_READ, ReasonCode, RunReport, RunTables, TableReport
from vacuum_jobs.targets import Database, Discover, TableTarget, TargetsError, as_targets
from vacuum_jobs.vacuum_plan import VacuumPlan

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
    stop_at_ms: int | None  # epoch ms after which no delete starts (options.max_minutes), by the real clock
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
    plan: VacuumPlan | None = None,
    keep_versions: KeepVersions | None = None,
    pins_table: str | None = None,
    max_deletes: int | None = None,
    min_reclaimable_bytes: int = 0,
    max_minutes: float | None = None,
    prices: Mapping[str, float] | None = None,
    full: bool = False,
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
        plan: a plan made before in this session (a dry run's ``RunReport.plan``, reviewed): the run acts
            on its tables only and deletes only the files it names that the run finds deletable now, its
            logs read and checked again; a table it does not hold is skipped (``not_in_plan``), a file
            found now that it does not name is kept (``outside_plan_files``).
        keep_versions: pinned versions, kept readable whatever the retention (docs/pins.md):
            ``{table: [version, ...]}`` (deltalake's name; an entry may be a mapping with ``version`` or
            ``timestamp``, ``reason``, ``expires``) or a list of :class:`lakeio.pins.Pin`.
        pins_table: the pins table (``python -m vacuum_jobs pin`` writes it): its pins are kept too.
        max_deletes: the most files the run deletes: the tables an earlier run left work in first (read from
            ``audit_table``), then the costliest candidates; the rest are ``deferred`` (docs/operations.md).
        min_reclaimable_bytes: skip a table whose candidates hold fewer bytes (``not_worth_it``).
        max_minutes: from the run's start, after which no delete starts: the files left are ``deferred``, their
            tables taken first by the next run with ``audit_table``; a dry run is not cut.
        prices: USD per GB-month by storage class, which a budget's order follows (``max_deletes``): each class
            named replaces the built-in list price (lakeio.prices), as the chargeback's ``--prices`` does.
        full: plan every table, and record nothing for the next run to carry (the cost of runs before carrying);
            without it, a run with ``audit_table`` carries forward, unread, each table its
            last plan proved settled and that has not changed since (``reason_code`` ``unchanged``:
            vacuum_jobs.carry_forward).

    Returns:
        The :class:`RunReport`: each table's status and counts, and the per-file outcomes.

    Raises:
        RunRefused: the inventory cannot be used; a table's own problem is in its report, never raised.
    """
    options = VacuumOptions(inventory_table, inventory_date=inventory_date, max_inventory_age_hours=max_inventory_age_hours,
                            retention_hours=retention_hours, enforce_retention_duration=enforce_retention_duration,
                            dry_run=dry_run, audit_table=audit_table, min_coverage=min_coverage,
                            delete=delete or DeleteSettings(), history=history, now_ms=now_ms,
                            keep_versions=pins_given(keep_versions), pins_table=pins_table,
                            max_deletes=max_deletes, min_reclaimable_bytes=min_reclaimable_bytes, max_minutes=max_minutes,
                            prices=prices or {}, full=full)
    return BatchVacuum(spark, options).execute(tables, plan=plan)


class BatchVacuum:
    """One run over many tables, its steps in order (:meth:`execute`), each timed into the report."""

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
        self.readiness = Readiness(spark, options, self.progress, self.log_writer, self._history_setting, before_commit)

    @one_run
    def execute(self, tables: Tables, *, plan: VacuumPlan | None = None) -> RunReport:
        """Vacuum ``tables``: a list of table URIs or targets, or :class:`Discover` for the
        Delta tables the inventory shows. There is no default: nothing lake-wide by omission.
        ``plan``: one made before in this session (a dry run's ``RunReport.plan``), which bounds the run:
        it acts on that plan's tables only and deletes only what that plan names, everything about the
        lake read and checked again now."""
        run = self._start(tables, plan)
        names = self._resolve_names(run, tables)
        inventory = self._ready_audit_and_inventory(run, names)
        # A run that carries tables forward sums the inventory's folders as it finds the tables (carry_forward).
        carry = (CarryForward(self.spark, self.storage, self.options, self.progress, run.audit_table)
                 if run.audit_table and not self.options.full else None)
        self.progress.begin(Step.FINDING_TABLES, "finding the Delta tables the inventory shows")
        all_roots = carry.find_roots(inventory) if carry else delta_roots(current_objects(inventory.rows))
        try:
            return self._run_tables(run, tables, names, inventory, all_roots, carry, plan)
        finally:
            if carry is not None:
                carry.release()

    def _run_tables(self, run: VacuumRun, tables: Tables, names: ResolvedNames, inventory: InventorySnapshot,
                    all_roots: list[TableRoot], carry: CarryForward | None, plan: VacuumPlan | None) -> RunReport:
        """The run past finding the tables: each carried forward, or read and planned; the plan acted on; the run
        recorded."""
        targets = tables.targets(all_roots) if isinstance(tables, Discover) else names.given or []
        if not targets:  # a typo in a daily schedule would otherwise vacuum nothing, forever, with exit 0
            run.report.tables = names.not_run
            raise self._refused(run, _nothing_to_vacuum(tables, all_roots))
        run_tables = RunTables({t.root: TableReport(t.uri, name=t.name) for t in targets})
        run.report.tables = run_tables.reports() + names.not_run
        pins = self._pins(run, targets)
        planning = Planning(self.spark, self.storage, self.options, self.progress,
                            functools.partial(self._decide_history, run, run_tables))
        runnable = self.readiness.runnable(targets, run_tables, plan)
        to_plan = (carry.carry(runnable, all_roots, run_tables, pins, run.now_ms,
                               lambda t: self._history_setting(t.root, t.history).on) if carry else runnable)
        read = planning.read_and_plan(inventory, to_plan, run_tables, all_roots, run.now_ms,
                                      recorded=run.audit_table is not None, pins=pins,
                                      unread=carry.carried if carry else ())
        run.report.references_unknown = {root: why for root, why in read.references_unknown.items()}
        run.report.pins = list(read.pins.versions.statuses.values()) if read.pins is not None else []
        try:
            if read.plan is not None:
                planning.check_coverage(read.plan, run_tables)
                self._act(read.plan, plan, run, run_tables, inventory)
            if carry is not None:
                if read.plan is not None:
                    carry.settle(run_tables, to_plan, {root: p.outside_files for root, p in read.plan.tables.items()})
                run.report.plan_states, run.report.carried_hashes = carry.states, carry.hashes
            record_run(self.spark, self.storage, self.progress, run.audit_table, run.report, run.now_ms, run.deleted_in,
                       before_commit=self.before_commit)
        finally:
            run_ended(run.report.run_id)
            if read.plan is not None:  # what planning cached: the frozen plan holds its own rows
                read.plan.release()
            read.replay.release()
        return self._timed(run)

    def _act(self, diff: Plan, reviewed: VacuumPlan | None, run: VacuumRun, run_tables: RunTables,
             inventory: InventorySnapshot) -> None:
        """The diff's pending tables as the plan (vacuum_plan.VacuumPlan), re-checked against the logs, bounded
        by the ``reviewed`` plan where given, with its S3 versions, frozen into the report; then executed."""
        execution = Execution(self.spark, self.storage, self.options, self.progress)
        plan = execution.recheck_logs(execution.plan(diff, run_tables), run_tables)
        if reviewed is not None:
            plan = execution.within(plan, reviewed, run_tables)
        plan = execution.in_time(execution.budgeted(plan, run_tables, run.audit_table, run.now_ms), run_tables,
                                 run.stop_at_ms)
        run.report.plan = plan = execution.frozen(execution.with_versions(plan, inventory))
        run.report.outcomes = execution.execute(plan, run_tables, inventory, run)

    def _start(self, tables: Tables, plan: VacuumPlan | None) -> VacuumRun:
        """The run's report begun and its clock read; refused at once without tables to vacuum, or with a
        plan that is not one of this session's."""
        started = time.monotonic()
        self.progress.restart()
        if tables is None:
            raise TargetsError("name the tables to vacuum: a list of table URIs, or Discover() for every "
                               "Delta table the inventory shows")
        if plan is not None and not isinstance(plan, VacuumPlan):
            raise InvalidOption(f"plan must be a VacuumPlan (a dry run's RunReport.plan), not {type(plan).__name__}")
        if plan is not None and plan.targets.sparkSession.sparkContext is not self.spark.sparkContext:
            raise InvalidOption("plan was made by another Spark session: its rows live in that session's executors")
        now_ms = epoch_ms() if self.options.now_ms is None else self.options.now_ms
        report = RunReport(run_id=str(uuid.uuid4()), started_at=iso_utc(now_ms),
                           inventory_table=uris.to_uri(self.options.inventory_table),
                           inventory_date=None, dry_run=self.options.dry_run, max_deletes=self.options.max_deletes,
                           max_minutes=self.options.max_minutes)
        minutes = self.options.max_minutes
        return VacuumRun(report, now_ms, started, None if minutes is None else epoch_ms() + round(minutes * 60_000),
                         RunHistory(self.log_writer, report.run_id, self.options.enforce_retention_duration),
                         self.options.inventory_table, self.options.audit_table)

    def _timed(self, run: VacuumRun) -> RunReport:
        run.report.elapsed_seconds, run.report.step_seconds = time.monotonic() - run.started, self.progress.seconds()
        return run.report

    def _refused(self, run: VacuumRun, reason: str) -> RunRefused:
        """The whole run refused, its report timed so far."""
        run.report.refused = reason
        return RunRefused(reason, self._timed(run))

    def _pins(self, run: VacuumRun, targets: list[TableTarget]) -> list[Pin]:
        """The run's pins: the options', the tables file's, the pins table's; the run is refused where the
        pins table cannot be read (its pins would not be kept)."""
        try:
            return pins_with_table(self.spark, [*self.options.keep_versions, *(p for t in targets for p in t.keep_versions)],
                                   self.options.pins_table)
        except PinsUnreadable as exc:
            raise self._refused(run, str(exc)) from None

    def _resolve_names(self, run: VacuumRun, tables: Tables) -> ResolvedNames:
        """The run's names resolved to locations (readiness.resolved_names), a step of its own where a
        catalog is asked; the run refused where they cannot be."""
        given = tables if isinstance(tables, (Database, Discover)) else as_targets(tables)
        if names_a_catalog_table(self.options, given):
            self.progress.begin(Step.RESOLVING_NAMES, "resolving the catalog's names")
        try:
            names = resolved_names(self.spark, self.options, given)
        except NAME_REFUSALS as refusal:  # an unknown database; a name and its URI both
            raise self._refused(run, str(refusal)) from None
        run.inventory_table, run.audit_table = names.inventory_table, names.audit_table
        run.report.inventory_table, run.report.audit_table = uris.to_uri(names.inventory_table), self.options.audit_table
        return names

    def _ready_audit_and_inventory(self, run: VacuumRun, names: ResolvedNames) -> InventorySnapshot:
        """The audit table ready to take the run's rows, and the inventory to plan against; the run is
        refused (each named table with it) when either is not."""
        try:
            if run.audit_table:
                self.progress.begin(Step.READYING_AUDIT, f"readying the audit table {run.audit_table}")
                run.report.audit_problems += self.readiness.ready_audit(run.audit_table, names.given or [])
            self.progress.begin(Step.INVENTORY_DATE, "reading the inventory")
            inventory = self.readiness.inventory(run.inventory_table, run.now_ms)
        except REFUSALS as refusal:
            run.report.tables = [TableReport(t.uri, TableStatus.REFUSED, NOT_READ, name=t.name,
                                             reason_code=ReasonCode.RUN_REFUSED) for t in names.given or []] + names.not_run
            raise self._refused(run, str(refusal)) from None
        run.report.inventory_date = inventory.day.isoformat()
        return inventory

    def _decide_history(self, run: VacuumRun, run_tables: RunTables, target: TableTarget, state: TableState,
                        table_hours: float) -> None:
        """Whether and how the run writes the history of ``target``, a table it will delete in."""
        run_hours = next((h for h in (target.retention_hours, self.options.retention_hours) if h is not None), None)
        run.history.decide(TableHistory.of(state, self._history_setting(target.root, target.history), table_hours,
                                           run_hours), run_tables)

    def _history_setting(self, root: TableRoot, table: bool | None) -> HistorySetting:
        """Whether this run writes ``root``'s history, and by which rule (``table``: its own setting)."""
        return history_setting(root, table, self.options.history, self.session_history)


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
