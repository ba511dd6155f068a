"""Job 2 after planning: the plan as a value, re-checked against the logs, executed.

The tables planning left pending become a :class:`~vacuum_jobs.vacuum_plan.VacuumPlan`; the logs of
those to vacuum are listed once more and the plan loses what was committed since (recheck); given a
plan reviewed before (a dry run's), it loses what that one does not name; it keeps to the run's budget
of deletes and of time (budget); on S3 it gains each target's versions; it is materialized; then its
targets are deleted (or, in a dry run, listed), each table ended with its counts, its history's START
and END around the deletes.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.audit.contract import AuditAction, TableStatus
from lakeio.audit.journal import journal_of
from lakeio.inventory import InventorySnapshot
from lakeio.spark.shapes import CANDIDATES, OUTCOMES, first_paths
from lakeio.spark.steps import Step, Steps
from lakeio.store import uris
from lakeio.store.delete_if_present import why_deletes_cannot_tell
from lakeio.store.filesystem import Storage
from lakeio.store.uris import TableRoot
from lakeio.times import epoch_ms
from vacuum_jobs import budget
from vacuum_jobs.delete_tasks import delete_planned
from vacuum_jobs.deletes import DeleteSettings, out_of_time
from vacuum_jobs.interrupted import note_intent
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.plan import Plan
from vacuum_jobs.recheck import recheck_logs
from vacuum_jobs.report import ReasonCode, RunTables
from vacuum_jobs.vacuum_plan import Decision, VacuumPlan

if TYPE_CHECKING:
    from vacuum_jobs.batch_vacuum import VacuumRun

log = logging.getLogger(__name__)

WOULD_DELETE_SAMPLE = 100  # of a dry run's candidates, named per table in its report


class Execution:
    """The steps of one run from its plan to its outcomes."""

    def __init__(self, spark: SparkSession, storage: Storage, options: VacuumOptions, progress: Steps):
        self.spark, self.storage, self.options, self.progress = spark, storage, options, progress

    def plan(self, planned: Plan, run_tables: RunTables) -> VacuumPlan:
        """The tables planning left pending, each to vacuum or in a dry run, and their candidates."""
        return VacuumPlan.of({root: Decision.DRY_RUN if run_tables[root].dry_run else Decision.VACUUM
                              for root in run_tables.pending(planned.tables)}, planned.candidates)

    def with_versions(self, plan: VacuumPlan, inventory: InventorySnapshot) -> VacuumPlan:
        """Where the run deletes on S3, each target's versions as the inventory lists them (VacuumPlan.with_versions)."""
        if any(uris.scheme_of(root) == "s3" for root in plan.tables(Decision.VACUUM)):
            return plan.with_versions(inventory.rows, self.options.delete.purge_versions)
        return plan

    def recheck_logs(self, plan: VacuumPlan, run_tables: RunTables) -> VacuumPlan:
        """List the logs of the tables about to be deleted in once more: the plan less what was committed
        since planning (see recheck), and less each table whose change we cannot follow."""
        deleting = plan.tables(Decision.VACUUM)
        if not deleting:
            return plan
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
            named = plan.targets.join(recheck.referenced, ["table_root", "path"], "left_semi")
            for row in named.groupBy("table_root").count().collect():
                run_tables[row["table_root"]].counts.named_since_planning_files = row["count"]
        for root, (before, now) in recheck.moved.items():
            self.progress(f"{run_tables[root].table} moved from version {before} to {now} since planning")
        return plan.without(list(recheck.refused), recheck.referenced)

    def within(self, plan: VacuumPlan, reviewed: VacuumPlan, run_tables: RunTables) -> VacuumPlan:
        """The plan less what ``reviewed`` does not name; each table's targets left out counted
        (``outside_plan_files``): found now, not reviewed, so kept for a later run."""
        bounded = plan.within(reviewed)
        outside = plan.targets.join(reviewed.targets.select("table_root", "path"), ["table_root", "path"], "left_anti")
        for row in outside.groupBy("table_root").count().collect():
            run_tables[row["table_root"]].counts.outside_plan_files = row["count"]
        return bounded

    def budgeted(self, plan: VacuumPlan, run_tables: RunTables, audit_table: str | None, now_ms: int) -> VacuumPlan:
        """The plan less the tables not worth a vacuum and less what the run's budget leaves for later (budget)."""
        if not self.options.budgeted or not plan.decisions:
            return plan
        self.progress.begin(Step.BUDGETING, f"weighing {len(plan.decisions)} table(s)"
                            + (f" against a budget of {self.options.max_deletes:,} deletes" if self.options.max_deletes else ""))
        first = (budget.deferred_before(self.spark, audit_table, list(plan.decisions), now_ms) if self.options.max_deletes
                 else set())
        return budget.spend(plan, budget.worth(plan, self.options.prices), run_tables, max_deletes=self.options.max_deletes,
                            min_reclaimable_bytes=self.options.min_reclaimable_bytes, first=first)

    def in_time(self, plan: VacuumPlan, run_tables: RunTables, stop_at_ms: int | None) -> VacuumPlan:
        """The plan, less the tables it deletes in where the run's time ran out before its deletes begin (budget)."""
        if self.options.max_minutes is None or not plan.tables(Decision.VACUUM) or not out_of_time(stop_at_ms, epoch_ms()):
            return plan
        return budget.too_late(plan, run_tables, self.options.max_minutes)

    def frozen(self, plan: VacuumPlan) -> VacuumPlan:
        """The plan materialized, as the deletes' step begins: what the intent note names is what the deletes
        take and the audit records, and what the report hands back is rows, not a query to run again."""
        deleting, dry = plan.tables(Decision.VACUUM), plan.tables(Decision.DRY_RUN)
        if not plan.decisions:
            return plan
        self.progress.begin(Step.DELETING, f"deleting in {len(deleting)} table(s); planning only in {len(dry)}")
        return plan.materialized()

    def execute(self, plan: VacuumPlan, run_tables: RunTables, inventory: InventorySnapshot,
                run: VacuumRun) -> DataFrame | None:
        """Delete the targets of the plan's tables to vacuum (a :meth:`frozen` plan), list those of its dry
        runs. Ends each of its tables: dry run, vacuumed or failed, with its delete counts and sample errors."""
        planned = list(plan.decisions)
        if not planned:
            return None
        deleting, dry = plan.tables(Decision.VACUUM), plan.tables(Decision.DRY_RUN)
        outcomes = OUTCOMES.check(plan.targets_of(Decision.DRY_RUN).select(
            *CANDIDATES.columns, F.lit(AuditAction.WOULD_DELETE.value).alias("action"),
            F.lit(None).cast("string").alias("error"), F.lit(epoch_ms()).alias("at_ms"),
            *[F.lit(None).cast("string").alias(name) for name in ("version_id", "delete_marker_id", "trash_path")]))
        if dry:  # what a dry run would delete, named (the outcomes, the audit and --list-candidates name all)
            for root, paths in first_paths(outcomes, WOULD_DELETE_SAMPLE).items():
                run_tables[root].would_delete = paths
        if not deleting:
            for root in dry:
                run_tables[root].status = TableStatus.DRY_RUN
            return outcomes  # a dry run's counts are the plan's
        targets = plan.targets_of(Decision.VACUUM)
        run_id = run.report.run_id
        if run.audit_table:  # read back by the next run, should this one die before it records
            note_intent(self.spark, run.audit_table, run_id, targets, self.options.delete.trash, inventory.day,
                        {root: version for root in deleting if (version := run_tables[root].version) is not None})
        run.history.start(deleting, targets, run_tables)
        try:
            outcomes = outcomes.unionByName(delete_planned(self.spark, targets, self._delete_settings(run, deleting), run_id))
            # Deletes must run exactly once: materialize before counting and recording.
            outcomes = outcomes.localCheckpoint(eager=True)
        except BaseException:
            run.history.end(run_tables, counted=False)
            raise
        run.deleted_in = deleting
        run_tables.end_deletes(outcomes, planned)
        if self.options.max_minutes is not None:
            budget.time_ran_out(outcomes, run_tables, self.options.max_minutes)
        run.history.end(run_tables, counted=True)
        return outcomes

    def _delete_settings(self, run: VacuumRun, deleting: list[TableRoot]) -> DeleteSettings:
        """The run's delete settings; on S3, each key asked to be there (``if_present``) where the store is
        proven to honour that, so that its answers tell a key this run removed from one already gone. Where it
        is not, the run says why (its report's ``deletes_unconfirmed``) and its deletes are ``deleted_or_absent``."""
        settings = replace(self.options.delete, stop_at_ms=run.stop_at_ms)
        if settings.if_present or not any(uris.scheme_of(root) == "s3" for root in deleting):
            return settings
        why = why_deletes_cannot_tell(run.audit_table and journal_of(run.audit_table),
                                      lambda: settings.s3_client(retrying=False))
        if why is None:
            return replace(settings, if_present=True)
        run.report.deletes_unconfirmed = f"S3 answers a delete of a key already gone as deleted: {why}"
        log.warning("deletes on S3 cannot tell a key this run removed from one already gone: %s", why)
        return settings
