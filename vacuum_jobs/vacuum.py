"""Job 2 as one action: vacuum many Delta tables by diffing the inventory against their logs.

Steps, each a method: load the inventory, resolve the tables, find their log segments,
replay the logs, apply the gates, plan, check the plan, re-check the logs, delete,
record. One table's problem never stops the others; its report says why.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from inventory_etl.contract import PARTITION_COLUMNS, current_objects
from lakeio import uris
from lakeio.delta_read import TableNotFound, partition_values, read_delta
from lakeio.spark import step_announcer
from lakeio.storage import Storage
from lakeio.times import MS_PER_HOUR, iso_utc, midnight_utc_ms
from vacuum_jobs import gates
from vacuum_jobs.deleter import ALREADY_ABSENT, DELETED, FAILED, DeleteSettings, delete_planned
from vacuum_jobs.log_replay import Replay, replay_logs
from vacuum_jobs.log_segment import LogSegment, log_segments
from vacuum_jobs.plan import Plan, TablePolicy, plan_tables
from vacuum_jobs.recheck import Recheck, recheck_logs
from vacuum_jobs.report import RunReport, TableReport, write_audit
from vacuum_jobs.targets import TableTarget, delta_roots, discovered

log = logging.getLogger(__name__)

ERROR_SAMPLE = 20


@dataclass
class VacuumOptions:
    inventory_table: str
    inventory_date: date | None = None
    max_inventory_age_hours: float = 72.0
    retain_hours: float | None = None  # default: each table's delta.deletedFileRetentionDuration
    force_retention: bool = False
    dry_run: bool = False
    audit_table: str | None = None
    min_coverage: float = 0.5  # below this share of old live files listed, the inventory "does not cover" a table
    delete: DeleteSettings = field(default_factory=DeleteSettings)
    now_ms: int | None = None  # for tests; default: the clock at the start of the run


class BatchVacuum:
    def __init__(self, spark: SparkSession, options: VacuumOptions):
        self.spark = spark
        self.options = options
        self.progress = step_announcer(spark, log)
        self.storage = Storage(spark)

    def execute(self, targets: list[TableTarget] | None = None, include: list[str] | None = None,
                exclude: list[str] | None = None) -> RunReport:
        """Vacuum ``targets``, or every Delta table the inventory shows (filtered by globs) when None."""
        started = time.monotonic()
        now_ms = self.options.now_ms or int(time.time() * 1000)
        run = RunReport(run_id=str(uuid.uuid4()), started_at=iso_utc(now_ms),
                        inventory_table=uris.to_uri(self.options.inventory_table),
                        inventory_date=None, dry_run=self.options.dry_run)
        try:
            inventory = self._load_inventory(run, now_ms)
        except _RunRefused as refusal:
            run.tables = [TableReport(t.table_root, "refused", str(refusal)) for t in targets or []]
            run.elapsed_seconds = time.monotonic() - started
            raise RunRefused(str(refusal), run) from None
        all_roots = delta_roots(current_objects(inventory.rows))
        targets = targets if targets is not None else discovered(all_roots, include, exclude)
        reports = {uris.canonical(t.table_root): TableReport(t.table_root) for t in targets}
        run.tables = list(reports.values())
        runnable = self._skip_disabled(targets, reports)
        segments = self._find_log_segments(runnable, reports)
        replay = self._replay_logs(segments, reports)
        outcomes = None
        policies = self._apply_gates(runnable, replay, reports, now_ms)
        if policies:
            plan = self._plan(inventory, replay, policies, reports, all_roots)
            try:
                self._check_plan(plan, reports)
                outcomes = self._delete(plan, reports, inventory)
            finally:
                plan.release()
        if self.options.audit_table:
            self.progress(f"recording {self.options.audit_table}")
            write_audit(self.spark, self.options.audit_table, run, now_ms, outcomes)
        run.elapsed_seconds = time.monotonic() - started
        return run

    def _load_inventory(self, run: RunReport, now_ms: int) -> _Inventory:
        """The newest (or chosen) inventory date's current objects; refuse an inventory too old."""
        table = self.options.inventory_table
        try:
            dates = partition_values(table, "inventory_date")
        except TableNotFound as exc:
            raise _RunRefused(str(exc)) from None
        day = self.options.inventory_date or (max(dates) if dates else None)
        if day is None or day not in dates:
            raise _RunRefused(f"{table}: no inventory for {day or 'any date'}")
        run.inventory_date = day.isoformat()
        as_of_ms = midnight_utc_ms(day)
        age_hours = (now_ms - as_of_ms) / MS_PER_HOUR
        if age_hours > self.options.max_inventory_age_hours:
            raise _RunRefused(f"inventory of {day} is {age_hours:.0f} h old, more than "
                              f"--max-inventory-age-hours {self.options.max_inventory_age_hours:g}")
        self.progress(f"inventory {table} as of {day}")
        # Every row of the date: the plan picks one row per object itself, in its own pass.
        return _Inventory(read_delta(self.spark, table, {PARTITION_COLUMNS[0]: day}), as_of_ms)

    def _skip_disabled(self, targets: list[TableTarget], reports: dict[str, TableReport]) -> list[TableTarget]:
        runnable = []
        for target in targets:
            if target.enabled:
                runnable.append(target)
            else:
                _set(reports, target.table_root, "skipped", "disabled in the tables file")
        return runnable

    def _find_log_segments(self, targets: list[TableTarget], reports: dict[str, TableReport]) -> list[LogSegment]:
        """One listing of ``_delta_log/`` per table (not of its data)."""
        self.progress(f"listing the logs of {len(targets)} table(s)")
        segments, failures = log_segments(self.storage, [t.table_root for t in targets])
        for root, reason in failures.items():
            _set(reports, root, "refused", f"unreadable log: {reason}")
        for segment in segments:
            reports[uris.canonical(segment.table_root)].version = segment.version
        return segments

    def _replay_logs(self, segments: list[LogSegment], reports: dict[str, TableReport]) -> Replay:
        self.progress(f"replaying {len(segments)} log(s) on Spark")
        replay = replay_logs(self.spark, segments, check_paths=False)  # the plan checks them in its pass
        for root, reason in replay.failures.items():
            _set(reports, root, "refused", f"unreadable log: {reason}")
        return replay

    def _apply_gates(self, targets, replay, reports, now_ms: int) -> list[TablePolicy]:
        policies = []
        for target in targets:
            root = uris.canonical(target.table_root)
            state = replay.states.get(root)
            if state is None:
                continue  # already refused with its reason
            report = reports[root]
            skip = gates.catalog_managed(state)
            if skip:
                _set(reports, root, "skipped", skip)
                continue
            refusal = gates.unknown_protocol(state)
            if refusal:
                _set(reports, root, "refused", refusal)
                continue
            try:
                table_hours = gates.table_retention_hours(state)
            except ValueError as exc:
                _set(reports, root, "refused", f"delta.deletedFileRetentionDuration: {exc}")
                continue
            hours = next(h for h in (target.retain_hours, self.options.retain_hours, table_hours) if h is not None)
            if hours < table_hours and not self.options.force_retention:
                _set(reports, root, "refused", f"retention {hours:g} h is shorter than the table's "
                                               f"delta.deletedFileRetentionDuration ({table_hours:g} h); "
                                               "pass --force-retention to allow it")
                continue
            cutoff = now_ms - int(hours * MS_PER_HOUR)
            try:
                policy = TablePolicy.for_state(state, cutoff)
            except ValueError as exc:
                _set(reports, root, "refused", str(exc))
                continue
            report.retention_hours, report.cutoff = hours, iso_utc(cutoff)
            report.dry_run = self.options.dry_run or bool(target.dry_run)
            policies.append(policy)
        return policies

    def _plan(self, inventory: _Inventory, replay, policies, reports, all_roots: list[str]) -> Plan:
        self.progress(f"planning {len(policies)} table(s) against the inventory")
        deleting = any(not reports[p.table_root].dry_run for p in policies)
        plan = plan_tables(self.spark, inventory.rows, replay.files, policies, inventory.as_of_ms, all_roots,
                           cache=deleting)
        for root, reason in plan.refused.items():
            _set(reports, root, "refused", f"unreadable log: {reason}")
        for root, table_plan in plan.tables.items():
            report = reports[root]
            report.counts.update(table_plan.counts)
            report.missing = table_plan.missing
            report.coverage = table_plan.coverage
        return plan

    def _check_plan(self, plan: Plan, reports: dict[str, TableReport]) -> None:
        """Refuse tables whose plan cannot be trusted: the inventory does not cover them."""
        for root, table_plan in plan.tables.items():
            coverage = table_plan.coverage
            if coverage is not None and coverage < self.options.min_coverage:
                _set(reports, root, "refused",
                     f"inventory does not cover this table: it lists {coverage:.0%} of the "
                     f"{table_plan.old_live_files} live file(s) written before it was taken")

    def _delete(self, plan: Plan, reports, inventory: _Inventory) -> DataFrame | None:
        """Delete (or, in dry runs, only list) the candidates of the tables still pending;
        the outcomes per file, fixed so that deletes never run twice."""
        pending = [root for root, r in reports.items() if root in plan.tables and r.status == "pending"]
        recheck = self._recheck_logs(plan, [root for root in pending if not reports[root].dry_run], reports)
        return self._delete_rechecked(plan, reports, inventory, recheck)

    def _recheck_logs(self, plan: Plan, deleting: list[str], reports: dict[str, TableReport]) -> Recheck:
        """List the logs of the tables about to be deleted in once more; what was committed since
        planning is kept (see recheck), a table whose change we cannot follow deletes nothing."""
        if not deleting:
            return Recheck()
        self.progress(f"checking {len(deleting)} log(s) again before deleting")
        recheck = recheck_logs(self.spark, self.storage, {reports[r].table: reports[r].version for r in deleting})
        for root, reason in recheck.refused.items():
            _set(reports, root, "refused", reason)
        if recheck.referenced is not None:
            named = plan.candidates.join(recheck.referenced, ["table_root", "path"], "left_semi")
            for row in named.groupBy("table_root").count().collect():
                reports[row["table_root"]].counts["named_since_planning_files"] = row["count"]
        for root, (before, now) in recheck.moved.items():
            self.progress(f"{reports[root].table} moved from version {before} to {now} since planning")
        return recheck

    def _delete_rechecked(self, plan: Plan, reports, inventory: _Inventory, recheck: Recheck) -> DataFrame | None:
        planned = [root for root, r in reports.items() if root in plan.tables and r.status == "pending"]
        if not planned:
            return None
        deleting = [root for root in planned if not reports[root].dry_run]
        dry = [root for root in planned if reports[root].dry_run]
        candidates = recheck.without_referenced(plan.candidates.where(F.col("table_root").isin(planned)))
        if self.options.delete.purge_versions and deleting:
            candidates = _with_versions(candidates, inventory.rows)
        self.progress(f"deleting in {len(deleting)} table(s); planning only in {len(dry)}")
        outcomes = candidates.where(F.col("table_root").isin(dry)).select(
            "table_root", "path", "length", "modificationTime", F.lit("would_delete").alias("action"),
            F.lit(None).cast("string").alias("error"), F.lit(int(time.time() * 1000)).alias("at_ms"))
        if not deleting:
            for root in dry:
                reports[root].status = "dry_run"
            return outcomes  # a dry run's counts are the plan's: nothing to run until the audit records it
        targets = candidates.where(F.col("table_root").isin(deleting))
        outcomes = outcomes.unionByName(delete_planned(self.spark, targets, self.options.delete))
        # Deletes must run exactly once: materialize before counting and recording.
        outcomes = outcomes.localCheckpoint(eager=True)
        for row in outcomes.groupBy("table_root", "action").agg(
            F.count(F.lit(1)).alias("n"), F.coalesce(F.sum("length"), F.lit(0)).alias("bytes")
        ).collect():
            counts = reports[row["table_root"]].counts
            prefix = {DELETED: "deleted", ALREADY_ABSENT: "already_absent", FAILED: "failed"}.get(row["action"])
            if prefix:
                counts[f"{prefix}_files"], counts[f"{prefix}_bytes"] = row["n"], row["bytes"]
        for row in outcomes.where(F.col("action") == FAILED).limit(ERROR_SAMPLE * max(1, len(deleting))).collect():
            errors = reports[row["table_root"]].errors
            if len(errors) < ERROR_SAMPLE:
                errors.append(f"{row['path']}: {row['error']}")
        for root in planned:
            report = reports[root]
            if report.dry_run:
                report.status = "dry_run"
            elif report.counts["failed_files"]:
                report.status, report.reason = "failed", f"{report.counts['failed_files']} deletion(s) failed"
            else:
                report.status = "vacuumed"
        return outcomes


@dataclass(frozen=True)
class _Inventory:
    rows: DataFrame  # every row of the date, noncurrent versions, delete markers and duplicates too
    as_of_ms: int  # midnight UTC of the inventory date: S3 lists objects as of about then


def _with_versions(candidates: DataFrame, all_versions: DataFrame) -> DataFrame:
    """Every inventory-listed version (delete markers included) of each candidate key."""
    versions = (
        all_versions.where(F.col("version_id").isNotNull())
        .select(uris.canonical_col(F.col("path")).alias("path"), "version_id")
        .groupBy("path").agg(F.sort_array(F.collect_set("version_id")).alias("version_ids"))
    )
    return candidates.join(versions, "path", "left")


class RunRefused(Exception):
    """The whole run was refused (no usable inventory); ``report`` says so per table."""

    def __init__(self, message: str, report: RunReport):
        super().__init__(message)
        self.report = report


class _RunRefused(Exception):
    pass


def _set(reports: dict[str, TableReport], root: str, status: str, reason: str) -> None:
    report = reports[uris.canonical(root)]
    report.status, report.reason = status, reason
