"""A vacuum run recorded: its rows appended to the audit table, then its delete journals dropped.

The order is the rule: a run killed before its append is read back by the next one from its intent
note and its delete journals (vacuum_jobs.interrupted), so they go only once its rows are in. An append
that fails is kept beside the audit table for the next run (lakeio.audit.journal), and the run's report
still goes out, saying so.
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import DataFrame, SparkSession

from lakeio.audit.contract import AuditAction, RunTable, append_run, commit_file_hashes
from lakeio.audit.journal import AuditNotRecorded
from lakeio.spark.steps import Step, Steps
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.store.uris import TableRoot
from lakeio.tables.write import BeforeCommit
from vacuum_jobs.interrupted import forget_intent
from vacuum_jobs.local_deletes import DeleteJournal
from vacuum_jobs.report import RunReport


def record_run(spark: SparkSession, storage: Storage, progress: Steps, audit_table: str | None, report: RunReport, started_ms: int,
               deleted_in: list[TableRoot], *, before_commit: BeforeCommit | None = None) -> None:
    """Append the run to ``audit_table`` (where it has one; kept for the next run when the append fails:
    ``report.audit_problems`` says so), then drop the delete journals of the tables it deleted in."""
    if audit_table:
        progress.begin(Step.RECORDING, f"recording {audit_table}")
        try:
            write_audit(spark, audit_table, report, started_ms, report.outcomes, before_commit=before_commit)
            forget_intent(spark, audit_table, report.run_id)
        except AuditNotRecorded as unrecorded:  # kept for the next run; the report still goes out
            report.audit_problems.append(str(unrecorded))
    DeleteJournal.remove(storage, deleted_in, report.run_id)


def write_audit(spark: SparkSession, audit_table: str, run: RunReport, started_ms: int,
                outcomes: DataFrame | None, *, before_commit: BeforeCommit | None = None) -> None:
    """Append the run to the audit table: one row per table (``path`` null, ``action``
    ``table_<status>``, ``error`` the reason) and one per planned file (what happened to it,
    when), each table's row with the hash of the commit file it planned from. Erasure evidence reads both."""
    roots = [uris.canonical(t.table) for t in run.tables]  # as the audit keys tables (a name not resolved stays one)
    hashes: dict[str, str] = {str(root): sha for root, sha in run.carried_hashes.items()}
    hashes.update(commit_file_hashes(spark, {root: t.version for root, t in zip(roots, run.tables)
                                             if t.version is not None and root not in hashes}))
    tables = [RunTable(root, AuditAction.for_table(t.status), t.reason, t.version, t.retention_hours, hashes.get(root),
                       plan_state=run.plan_states.get(TableRoot(root))) for root, t in zip(roots, run.tables)]
    inventory_day = date.fromisoformat(run.inventory_date) if run.inventory_date else None
    planned = sum(t.counts.candidate_files for t in run.tables)  # the outcomes: a row per planned file, at most
    append_run(spark, audit_table, run.run_id, started_ms, tables, outcomes, inventory_day, before_commit=before_commit,
               outcome_rows=planned)
