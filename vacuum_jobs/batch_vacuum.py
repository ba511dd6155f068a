"""Job 2 as one action: vacuum many Delta tables by diffing the inventory against their logs.

``vacuum()`` is the Python entry point; :class:`BatchVacuum` is the action behind it and
the CLI. Steps, each a method: load the inventory, resolve the tables, read their logs,
apply the gates, plan, check the plan, re-check the logs, delete, record. One table's
problem never stops the others; its report says why.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from urllib.parse import urlsplit

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio import catalog, uris
from lakeio.audit import AuditAction, TableStatus
from lakeio.audit_journal import AuditNotRecorded, AuditUnwritable, journal_of
from lakeio.delete_if_present import why_deletes_cannot_tell
from lakeio.delta_write import BeforeCommit, IncompatibleTable
from lakeio.deltalog import gates
from lakeio.deltalog.ownership import delta_roots
from lakeio.deltalog.policy import TablePolicy
from lakeio.deltalog.references import References, needed_elsewhere, retention_cutoffs
from lakeio.deltalog.replay import LogFileVanished, Replay, TableState, naming_vanished_logs, read_logs
from lakeio.deprecation import not_, renamed_keywords
from lakeio.errors import HousekeepingError, InvalidOption
from lakeio.inventory import InventorySnapshot, InventoryUnavailable, current_objects, inventory_snapshot, is_current
from lakeio.put_if_absent import PutIfAbsentUnproven
from lakeio.shapes import CANDIDATES, OUTCOMES, first_paths, of_tables
from lakeio.spark import check_workers
from lakeio.steps import Step, Steps, one_run
from lakeio.storage import Storage
from lakeio.text import first_line
from lakeio.times import cutoff_ms, epoch_ms, iso_utc
from lakeio.uris import TableRoot
from vacuum_jobs.deleter import DeleteJournal, DeleteSettings, S3BatchDeleter, delete_planned
from vacuum_jobs.history import (
    BeforePut,
    HistorySetting,
    RunHistory,
    TableHistory,
    history_setting,
    history_writer,
    session_history_setting,
)
from vacuum_jobs.interrupted import forget_intent, note_intent, ready_audit, run_ended
from vacuum_jobs.plan import Plan, plan_tables
from vacuum_jobs.recheck import Recheck, recheck_logs
from vacuum_jobs.report import NOT_READ, ReasonCode, RunReport, RunTables, TableReport, write_audit
from vacuum_jobs.targets import Database, Discover, TableTarget, TargetsError, as_targets, resolve_names

log = logging.getLogger(__name__)

WOULD_DELETE_SAMPLE = 100  # of a dry run's candidates, named per table in its report


@dataclass
class VacuumOptions:
    """How a run vacuums; invalid values raise InvalidOption (a ValueError) here, whoever builds them."""

    inventory_table: str
    inventory_date: date | None = None  # default: the newest the table holds
    max_inventory_age_hours: float = 72.0
    retention_hours: float | None = None  # default: each table's delta.deletedFileRetentionDuration
    enforce_retention_duration: bool = True  # False: a retention shorter than a table's own is allowed
    dry_run: bool = True  # deleting is said out loud: dry_run=False
    audit_table: str | None = None
    min_coverage: float = 0.5  # below this share of old live files listed, the inventory "does not cover" a table
    delete: DeleteSettings = field(default_factory=DeleteSettings)
    history: bool | None = None  # VACUUM START / END commits in the tables deleted in; None: Delta's rule (vacuum_jobs.history)
    now_ms: int | None = None  # for tests; default: the clock at the start of the run

    def __post_init__(self) -> None:
        if not self.max_inventory_age_hours > 0:
            raise InvalidOption("max_inventory_age_hours must be > 0")
        if self.retention_hours is not None and self.retention_hours < 0:
            raise InvalidOption("retention_hours must be >= 0")
        if not 0 <= self.min_coverage <= 1:
            raise InvalidOption("min_coverage must be between 0 and 1")
        if self.delete.trash is not None and uris.scheme_of(uris.to_uri(self.delete.trash)) == "s3":
            raise InvalidOption("trash cannot be on S3, where a move is a copy: turn on bucket versioning instead "
                             "(deletes then add delete markers, which restore removes)")


VacuumOptions.__init__ = renamed_keywords(  # type: ignore[method-assign]
    retain_hours="retention_hours", force_retention=("enforce_retention_duration", not_))(VacuumOptions.__init__)
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
    inventory_table: str  # the options' tables, catalog names resolved to locations (_named)
    audit_table: str | None
    deleted_in: list[TableRoot] = field(default_factory=list)  # tables whose delete journals wait for the audit append


@renamed_keywords(retain_hours="retention_hours", force_retention=("enforce_retention_duration", not_))
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
        explicit, not_run = self._named(tables, run)
        inventory = self._ready(run, explicit, not_run)
        all_roots = delta_roots(current_objects(inventory.rows))
        targets = tables.targets(all_roots) if isinstance(tables, Discover) else explicit or []
        if not targets:  # a typo in a daily schedule would otherwise vacuum nothing, forever, with exit 0
            report.tables = not_run
            raise self._refused(run, _nothing_to_vacuum(tables, all_roots))
        run_tables = RunTables({t.root: TableReport(t.uri, name=t.name) for t in targets})
        report.tables = run_tables.reports() + not_run
        runnable = self._runnable(targets, run_tables)
        replay, plan = self._read_and_plan(inventory, runnable, run_tables, all_roots, run)
        try:
            if plan is not None:
                self._check_plan(plan, run_tables)
                report.outcomes = self._delete(plan, run_tables, inventory, run)
            self._record(run)
        finally:
            run_ended(report.run_id)
            # Only now: a dry run's outcomes stay lazy until the audit above reads them, from the plan's cache.
            if plan is not None:
                plan.release()
            replay.release()
        report.elapsed_seconds, report.step_seconds = time.monotonic() - started, self.progress.seconds()
        return report

    def _refused(self, run: VacuumRun, reason: str) -> RunRefused:
        """The whole run refused, its report timed so far."""
        run.report.refused = reason
        run.report.elapsed_seconds, run.report.step_seconds = time.monotonic() - run.started, self.progress.seconds()
        return RunRefused(reason, run.report)

    def _named(self, tables: Tables, run: VacuumRun) -> tuple[list[TableTarget] | None, list[TableReport]]:
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

    def _ready(self, run: VacuumRun, explicit: list[TableTarget] | None, not_run: list[TableReport]
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
        self.progress.begin(Step.FINDING_TABLES, f"inventory {inventory.table} as of {inventory.day} (version {inventory.version})")
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

    def _read_logs(self, targets: list[TableTarget], run_tables: RunTables) -> Replay:
        """One listing of each ``_delta_log/`` (not of the data), then every log on Spark at once. Sets each
        table's version; refuses a table whose log cannot be read."""
        self.progress.begin(Step.READING_LOGS, f"reading the logs of {len(targets)} table(s)")
        replay = read_logs(self.spark, self.storage, [t.uri for t in targets],
                           check_paths=False,  # the plan checks them in its pass
                           keep_commits=True)  # the plan reads the actions from the commits the summary parsed
        for root, version in replay.versions.items():
            run_tables[root].version = version
        for root, reason in replay.failures.items():
            run_tables.refuse(root, ReasonCode.UNREADABLE_LOG, f"unreadable log: {reason}")
        return replay

    def _apply_gates(self, targets: list[TableTarget], replay: Replay, run_tables: RunTables,
                     run: VacuumRun) -> list[TablePolicy]:
        """Each table's gates and policy under a guard of its own: a log that parses but says
        something the protocol does not allow refuses that table alone, with the first line of why."""
        policies = []
        for target in targets:
            state = replay.states.get(target.root)
            if state is None:
                continue  # already refused with its reason
            try:
                policy = self._gate(target, state, run_tables, run)
            except Exception as exc:
                run_tables.refuse(target.root, ReasonCode.LOG_NOT_UNDERSTOOD,
                                  f"cannot make sense of its log: {first_line(exc)}")
                continue
            if policy is not None:
                policies.append(policy)
        return policies

    def _gate(self, target: TableTarget, state: TableState, run_tables: RunTables,
              run: VacuumRun) -> TablePolicy | None:
        """The table's policy, or None when a gate skipped or refused it (said in its report)."""
        root = target.root
        skip = gates.catalog_managed(state)
        if skip:
            run_tables.skip(root, ReasonCode.CATALOG_MANAGED, skip)
            return None
        refusal = gates.unknown_protocol(state)
        if refusal:
            run_tables.refuse(root, ReasonCode.UNSUPPORTED_PROTOCOL, refusal)
            return None
        try:
            table_hours = gates.table_retention_hours(state)
        except ValueError as exc:
            run_tables.refuse(root, ReasonCode.RETENTION_SETTING_INVALID, f"delta.deletedFileRetentionDuration: {exc}")
            return None
        hours = next(h for h in (target.retention_hours, self.options.retention_hours, table_hours) if h is not None)
        if hours < table_hours and self.options.enforce_retention_duration:
            run_tables.refuse(root, ReasonCode.RETENTION_BELOW_TABLE, f"retention {hours:g} h is shorter than the "
                              f"table's delta.deletedFileRetentionDuration ({table_hours:g} h), which the run enforces")
            return None
        cutoff = cutoff_ms(run.now_ms, hours)
        try:
            policy = TablePolicy.for_state(state, cutoff)
        except ValueError as exc:
            run_tables.refuse(root, ReasonCode.LOG_NOT_UNDERSTOOD, str(exc))
            return None
        report = run_tables[root]
        report.retention_hours, report.cutoff = hours, iso_utc(cutoff)
        report.dry_run = self.options.dry_run or bool(target.dry_run)
        if not report.dry_run:
            run.history.decide(TableHistory.of(state, self._history_setting(root, target.history), table_hours,
                                               next((h for h in (target.retention_hours, self.options.retention_hours)
                                                     if h is not None), None)), run_tables)
        return policy

    def _history_setting(self, root: TableRoot, table: bool | None) -> HistorySetting:
        """Whether this run writes ``root``'s history, and by which rule (``table``: its own setting)."""
        return history_setting(root, table, self.options.history, self.session_history)

    def _read_and_plan(self, inventory: InventorySnapshot, targets: list[TableTarget],
                       run_tables: RunTables, all_roots: list[TableRoot], run: VacuumRun) -> tuple[Replay, Plan | None]:
        """Read the logs, apply the gates, plan (None when no table is left to plan). The plan reads
        log files the summary read once more (checkpoints, and commits Spark dropped from its cache):
        one that a writer's log cleanup removed in between refuses its own table, and the others are
        read and planned again without it (its log is then read afresh for what it needs from them)."""
        planned = {t.root for t in targets}
        lake = sorted(set(all_roots) | planned)
        others = [root for root in lake if root not in planned]
        vanished: dict[TableRoot, str] = {}
        while True:
            replay = self._read_logs(targets, run_tables)
            policies = self._apply_gates(targets, replay, run_tables, run)
            if not policies:
                return replay, None
            try:
                with naming_vanished_logs([p.table_root for p in policies] + others):
                    references = self._references(replay, self._read_other_logs(others), policies, lake, run.now_ms)
                    plan = self._plan(inventory, replay, policies, run_tables, lake, references,
                                      recorded=run.audit_table is not None)
            except LogFileVanished as lost:
                replay.release()
                why = f"a file of its log vanished while the run planned (a writer's log cleanup?): {lost.cause}"
                if lost.table_root in run_tables:
                    run_tables.refuse(lost.table_root, ReasonCode.LOG_VANISHED, f"{why}; vacuum it in the next run")
                    targets = [t for t in targets if t.root != lost.table_root]
                    others.append(lost.table_root)  # listed afresh, for the files it needs from the others
                else:
                    others.remove(lost.table_root)
                    vanished[lost.table_root] = why
                continue
            except BaseException:
                replay.release()
                raise
            run.report.references_unknown = {root: why for root, why in (*references.unknown.items(), *vanished.items())}
            return replay, plan

    def _read_other_logs(self, roots: list[TableRoot]) -> Replay | None:
        """The summaries of the lake's other Delta tables: for the files they need from the run's tables."""
        if not roots:
            return None
        self.progress(f"reading the logs of {len(roots)} other Delta table(s) for the files they reference")
        return read_logs(self.spark, self.storage, roots, check_paths=False)

    def _references(self, replay: Replay, outside: Replay | None, policies: list[TablePolicy], lake: list[TableRoot],
                    now_ms: int) -> References:
        """What each Delta table of the lake needs from another's folder, by its own retention (or the
        run's, where that keeps more). A table whose references cannot be read is named, not guessed."""
        cutoffs = retention_cutoffs(replay.states.values(), now_ms)
        for policy in policies:
            cutoffs[policy.table_root] = min(cutoffs[policy.table_root], policy.cutoff_ms)
        references = needed_elsewhere(replay, cutoffs, lake)
        references.unknown.update({root: f"unreadable log: {why}" for root, why in replay.failures.items()})
        if outside is not None:
            references = references.add(
                needed_elsewhere(outside, retention_cutoffs(outside.states.values(), now_ms), lake, check_paths=True))
            references.unknown.update({root: f"unreadable log: {why}" for root, why in outside.failures.items()})
        return references

    def _plan(self, inventory: InventorySnapshot, replay: Replay, policies: list[TablePolicy],
              run_tables: RunTables, lake: list[TableRoot], references: References, *, recorded: bool) -> Plan:
        """The candidates of every table in one pass (``recorded``: the run has an audit table, which reads
        them again). Sets each table's counts, coverage, missing files and the tables referencing it;
        refuses a table whose log rows the plan cannot read."""
        self.progress.begin(Step.PLANNING, f"planning {len(policies)} table(s) against the inventory")
        deleting = any(not run_tables[p.table_root].dry_run for p in policies)
        # Cached where anything reads the plan again (the deletes, the audit), so that no log file
        # is needed from storage after this.
        plan = plan_tables(self.spark, inventory.rows, replay.files, policies, inventory.as_of_ms, lake,
                           cache=deleting or recorded, log_rows=replay.rows,
                           references=references.frame)
        for root, reason in plan.refused.items():
            run_tables.refuse(root, ReasonCode.UNREADABLE_LOG, f"unreadable log: {reason}")
        for root, table_plan in plan.tables.items():
            report = run_tables[root]
            report.counts = table_plan.counts
            report.missing = table_plan.missing
            report.coverage = table_plan.coverage
            report.referenced_by = table_plan.referenced_by
        return plan

    def _check_plan(self, plan: Plan, run_tables: RunTables) -> None:
        """Refuse tables whose plan cannot be trusted: the inventory does not cover them."""
        for root, table_plan in plan.tables.items():
            coverage = table_plan.coverage
            if coverage is not None and coverage < self.options.min_coverage:
                run_tables.refuse(root, ReasonCode.INVENTORY_COVERAGE, f"inventory does not cover this table: it lists "
                                  f"{coverage:.0%} of the {table_plan.old_live_files} live file(s) written before it was taken")

    def _delete(self, plan: Plan, run_tables: RunTables,
                inventory: InventorySnapshot, run: VacuumRun) -> DataFrame | None:
        """Delete (or, in dry runs, only list) the candidates of the tables still pending;
        the outcomes per file, fixed so that deletes never run twice."""
        pending = run_tables.pending(plan.tables)
        recheck = self._recheck_logs(plan, [root for root in pending if not run_tables[root].dry_run], run_tables)
        return self._delete_rechecked(plan, run_tables, inventory, recheck, run)

    def _recheck_logs(self, plan: Plan, deleting: list[TableRoot], run_tables: RunTables) -> Recheck:
        """List the logs of the tables about to be deleted in once more; what was committed since
        planning is kept (see recheck), a table whose change we cannot follow deletes nothing."""
        if not deleting:
            return Recheck()
        self.progress.begin(Step.RECHECKING, f"checking {len(deleting)} log(s) again before deleting")
        planned: dict[str, int] = {}
        for root in deleting:
            version = run_tables[root].version
            assert version is not None, root  # a table is planned only after its log was listed
            planned[run_tables[root].table] = version
        recheck = recheck_logs(self.spark, self.storage, planned)
        for root, reason in recheck.refused.items():
            run_tables.refuse(root, ReasonCode.CHANGED_SINCE_PLANNING, reason)
        if recheck.referenced is not None:
            named = plan.candidates.join(recheck.referenced, ["table_root", "path"], "left_semi")
            for row in named.groupBy("table_root").count().collect():
                run_tables[row["table_root"]].counts.named_since_planning_files = row["count"]
        for root, (before, now) in recheck.moved.items():
            self.progress(f"{run_tables[root].table} moved from version {before} to {now} since planning")
        return recheck

    def _delete_rechecked(self, plan: Plan, run_tables: RunTables, inventory: InventorySnapshot,
                          recheck: Recheck, run: VacuumRun) -> DataFrame | None:
        """Delete what the re-check left of the pending tables' candidates (only list them in dry runs).
        Ends each pending table: dry run, vacuumed or failed, with its delete counts and sample errors."""
        planned = run_tables.pending(plan.tables)
        if not planned:
            return None
        deleting = [root for root in planned if not run_tables[root].dry_run]
        dry = [root for root in planned if run_tables[root].dry_run]
        candidates = recheck.without_referenced(of_tables(plan.candidates, planned))
        to_delete = candidates
        if any(uris.scheme_of(root) == "s3" for root in deleting):
            candidates = _with_versions(candidates, inventory.rows, self.options.delete.purge_versions)
        self.progress.begin(Step.DELETING, f"deleting in {len(deleting)} table(s); planning only in {len(dry)}")
        outcomes = OUTCOMES.check(of_tables(candidates, dry).select(
            *CANDIDATES.columns, F.lit(AuditAction.WOULD_DELETE.value).alias("action"),
            F.lit(None).cast("string").alias("error"), F.lit(epoch_ms()).alias("at_ms"),
            *[F.lit(None).cast("string").alias(name) for name in ("version_id", "delete_marker_id", "trash_path")]))
        if dry:  # what a dry run would delete, named (the outcomes, the audit and --list-candidates name all)
            for root, paths in first_paths(outcomes, WOULD_DELETE_SAMPLE).items():
                run_tables[root].would_delete = paths
        if not deleting:
            for root in dry:
                run_tables[root].status = TableStatus.DRY_RUN
            return outcomes  # a dry run's counts are the plan's: nothing to run until the audit records it
        # Computed once, not for the note, the look for other stores and the deletes each: what the note
        # names is what the deletes take, whatever a second run of the plan's joins would have picked.
        targets = of_tables(candidates, deleting).localCheckpoint(eager=True)
        run_id = run.report.run_id
        if run.audit_table:  # read back by the next run, should this one die before it records
            note_intent(self.spark, run.audit_table, run_id, targets, self.options.delete.trash, inventory.day,
                        {root: version for root in deleting if (version := run_tables[root].version) is not None})
        run.history.start(deleting, to_delete, run_tables)
        try:
            outcomes = outcomes.unionByName(delete_planned(self.spark, targets, self._delete_settings(run, deleting), run_id))
            # Deletes must run exactly once: materialize before counting and recording.
            outcomes = outcomes.localCheckpoint(eager=True)
        except BaseException:
            run.history.end(run_tables, counted=False)
            raise
        run.deleted_in = deleting
        run_tables.end_deletes(outcomes, planned)
        run.history.end(run_tables, counted=True)
        return outcomes


    def _delete_settings(self, run: VacuumRun, deleting: list[TableRoot]) -> DeleteSettings:
        """The run's delete settings; on S3, each key asked to be there (``if_present``) where the store is
        proven to honour that, so that its answers tell a key this run removed from one already gone. Where it
        is not, the run says why (its report's ``deletes_unconfirmed``) and its deletes are ``deleted_or_absent``."""
        settings = self.options.delete
        if settings.if_present or not any(uris.scheme_of(root) == "s3" for root in deleting):
            return settings
        why = why_deletes_cannot_tell(run.audit_table and journal_of(run.audit_table),
                                      lambda: S3BatchDeleter.make_client(settings.endpoint_url))
        if why is None:
            return replace(settings, if_present=True)
        run.report.deletes_unconfirmed = f"S3 answers a delete of a key already gone as deleted: {why}"
        log.warning("deletes on S3 cannot tell a key this run removed from one already gone: %s", why)
        return settings


def _with_versions(candidates: DataFrame, all_versions: DataFrame, purge: bool) -> DataFrame:
    """Each candidate key's current version as the inventory lists it (``version_id``: what a delete
    marker will hide, recorded for restore and purge) and, when ``purge``, every listed version
    (delete markers included: ``version_ids``, deleted for good instead)."""
    listed = all_versions.where(F.col("version_id").isNotNull()).select(
        uris.canonical_col(F.col("path")).alias("path"), "version_id", "modificationTime",
        is_current().alias("current"))
    versions = listed.groupBy("path").agg(
        F.max_by(F.when(F.col("current"), F.col("version_id")), F.struct("current", "modificationTime"))
        .alias("version_id"),
        *([F.sort_array(F.collect_set("version_id")).alias("version_ids")] if purge else []))
    return candidates.join(versions, "path", "left")


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
