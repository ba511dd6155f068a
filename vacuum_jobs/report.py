"""What a vacuum run tells its operator: the JSON report, the summary, each table's counts and reason."""

from __future__ import annotations

import json
import shlex
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakeio.audit.contract import FINAL_STATUSES, AuditAction, TableStatus
from lakeio.deltalog.pinned import PinState, PinStatus
from lakeio.store import uris
from lakeio.store.uris import TableRoot
from lakeio.text import StrEnum, human_bytes, shorten, usd
from vacuum_jobs.vacuum_plan import VacuumPlan


@dataclass
class TableCounts:
    """Files and bytes per outcome of one table. Every report carries every count, so that
    monitors can rely on the keys (schemas/vacuum-report.schema.json)."""

    live_files: int = 0
    live_bytes: int = 0
    tombstone_files: int = 0
    tombstone_bytes: int = 0
    candidate_files: int = 0
    candidate_bytes: int = 0
    deleted_files: int = 0
    deleted_bytes: int = 0
    already_absent_files: int = 0
    already_absent_bytes: int = 0
    deleted_or_absent_files: int = 0  # a delete the store took without saying whether the key was there
    deleted_or_absent_bytes: int = 0
    failed_files: int = 0
    failed_bytes: int = 0
    missing_files: int = 0
    too_recent_files: int = 0
    too_recent_bytes: int = 0
    hidden_files: int = 0
    hidden_bytes: int = 0
    kept_files: int = 0  # inventory rows the log still needs (live files, kept tombstones)
    kept_bytes: int = 0
    pinned_files: int = 0  # inventory rows only a pinned version reads (lakeio.pins): kept
    pinned_bytes: int = 0
    referenced_files: int = 0  # inventory rows another table's log needs (a shallow clone's): kept
    referenced_bytes: int = 0
    dir_files: int = 0  # folder markers the inventory lists
    dir_bytes: int = 0
    named_since_planning_files: int = 0  # candidates a commit made after planning named again: kept
    outside_plan_files: int = 0  # candidates the plan the run was given (a dry run's) does not name: kept
    deferred_files: int = 0  # candidates the run's budget or time left for a later run (vacuum_jobs.budget): kept
    deferred_bytes: int = 0
    restorable_files: int = 0  # deleted files a delete marker hides or the trash holds: restore can bring them back
    noncurrent_files: int = 0  # versions the inventory lists as noncurrent (what delete markers hide): never candidates
    noncurrent_bytes: int = 0

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


class ReasonCode(StrEnum):
    """Why a table of a run was refused, skipped or failed, for a monitor or a caller to act on: the
    report's ``reason_code`` beside ``reason``, which says the same in words with the table's figures."""

    NAME_UNRESOLVED = "name_unresolved"  # a catalog name that resolves to no table
    NOT_VACUUMABLE = "not_vacuumable"  # a view, or a table that is not Delta (a database's: skipped)
    RUN_REFUSED = "run_refused"  # the run was refused before it read this table (the summary says why)
    DISABLED = "disabled"  # enabled: false in the tables file (skipped)
    TRASH_UNUSABLE = "trash_unusable"  # the trash folder cannot take this table's files by a rename
    UNREADABLE_LOG = "unreadable_log"
    LOG_NOT_UNDERSTOOD = "log_not_understood"  # a log that reads but says what the protocol does not allow
    CATALOG_MANAGED = "catalog_managed"  # its catalog owns commits and cleanup (skipped)
    UNSUPPORTED_PROTOCOL = "unsupported_protocol"  # a reader or writer feature this release does not know
    RETENTION_SETTING_INVALID = "retention_setting_invalid"  # delta.deletedFileRetentionDuration unreadable
    # shorter than the table's delta.deletedFileRetentionDuration: enforce_retention_duration=False
    # (--force-retention) allows it
    RETENTION_BELOW_TABLE = "retention_below_table"
    LOG_VANISHED = "log_vanished"  # a file of its log went while the run planned
    INVENTORY_COVERAGE = "inventory_coverage"  # the inventory lists too few of its live files (min_coverage)
    CHANGED_SINCE_PLANNING = "changed_since_planning"  # a change to its log the run cannot follow
    DELETES_FAILED = "deletes_failed"
    NOT_IN_PLAN = "not_in_plan"  # a table the plan the run was given (a dry run's) does not hold (skipped)
    NOT_WORTH_IT = "not_worth_it"  # its candidates hold less than min_reclaimable_bytes (skipped)
    BUDGET_SPENT = "budget_spent"  # the run's max_deletes was spent, or its max_minutes ran out, before all of it
    # settled at its last plan, nothing changed since: carried forward unread (vacuumed or dry_run, nothing to delete)
    UNCHANGED = "unchanged"


# How ``TableReport.history`` says a commit of the table's history is missing; and why, where the store
# refused it or its log could not be read (an error, where a rule keeping it out is not).
NOT_RECORDED = "not recorded"
CANNOT_WRITE = "cannot write its log"
NOT_READ = "not read: the run was refused"  # a table of a run refused before it read any (RunReport.refused)


@dataclass
class TableReport:
    table: str
    status: TableStatus = TableStatus.PENDING
    reason: str | None = None
    version: int | None = None
    retention_hours: float | None = None
    cutoff: str | None = None  # ISO-8601 UTC
    dry_run: bool = False
    coverage: float | None = None  # share of live files older than the inventory that it lists
    counts: TableCounts = field(default_factory=TableCounts)
    missing: list[str] = field(default_factory=list)  # sample of live files absent from storage
    errors: list[str] = field(default_factory=list)  # sample of failed deletions
    would_delete: list[str] = field(default_factory=list)  # a dry run's first candidates, in path order
    referenced_by: dict[str, int] = field(default_factory=dict)  # other tables needing its files: how many each
    name: str | None = None  # the catalog name it was given by, shown in place of its location
    history: str | None = None  # its VACUUM START and END versions, or why they are missing; the rule that decided
    reason_code: ReasonCode | None = None  # the reason as a word of a fixed vocabulary
    # what its candidates cost a month where they are (lakeio.prices); priced only with a budget or a least worth
    candidate_usd_per_month: float | None = None
    # ISO-8601 UTC: before it, the clock alone makes no file of the table a candidate that is not one now
    # (vacuum_jobs.planning.quiet_until); None: the clock alone never does; set for the tables planned
    quiet_until: str | None = None

    @property
    def history_incomplete(self) -> bool:
        """A commit of its history was meant and is missing: the summary says why."""
        return self.history is not None and NOT_RECORDED in self.history

    @property
    def history_failed(self) -> bool:
        """A commit of its history is missing because the store refused it or its log could not be read."""
        return self.history is not None and f"{NOT_RECORDED}: {CANNOT_WRITE}" in self.history


SUMMARY_PATHS = 5  # of a dry run's candidates, named per table on the console
ERROR_SAMPLE = 20  # of a table's failed deletes, named in its report
# What a delete can end as; each has its files and bytes count (TableCounts).
DELETE_OUTCOMES = (AuditAction.DELETED, AuditAction.ALREADY_ABSENT, AuditAction.DELETED_OR_ABSENT, AuditAction.FAILED)
ACTED_ON = (TableStatus.VACUUMED, TableStatus.DRY_RUN, TableStatus.FAILED)


class RunTables:
    """A run's tables, each with its report, by canonical root: the state every step of the run reads.
    A step may refuse or skip a table (its status and why), or fill in what it found; a table still
    pending goes on to the next step."""

    def __init__(self, reports: Mapping[TableRoot, TableReport]):
        self._reports = dict(reports)

    def __getitem__(self, root: TableRoot) -> TableReport:
        """The report of ``root``, as the run's own steps made it (replay, plan, recheck)."""
        return self._reports[root]

    def __contains__(self, root: object) -> bool:
        return root in self._reports

    def reports(self) -> list[TableReport]:
        return list(self._reports.values())

    def refuse(self, root: TableRoot, code: ReasonCode, reason: str) -> None:
        self._end(root, TableStatus.REFUSED, code, reason)

    def skip(self, root: TableRoot, code: ReasonCode, reason: str) -> None:
        self._end(root, TableStatus.SKIPPED, code, reason)

    def carried(self, root: TableRoot, dry_run: bool, reason: str) -> None:
        """``root`` carried forward unread (vacuum_jobs.carry_forward): ended as its plan with nothing to delete would."""
        self[root].dry_run = dry_run
        self._end(root, TableStatus.DRY_RUN if dry_run else TableStatus.VACUUMED, ReasonCode.UNCHANGED, reason)

    def defer(self, root: TableRoot, files: int, length: int, reason: str) -> None:
        """``root`` left for a later run by the budget, with the ``files`` and ``length`` bytes it would reclaim."""
        self[root].counts.deferred_files, self[root].counts.deferred_bytes = files, length
        self._end(root, TableStatus.DEFERRED, ReasonCode.BUDGET_SPENT, reason)

    def end_deletes(self, outcomes: DataFrame, planned: list[TableRoot]) -> None:
        """Each table's delete counts (files and bytes per outcome, and how many a restore can bring back)
        and a sample of its failed deletes, from ``outcomes`` (shapes.OUTCOMES, read once: materialized);
        then each of ``planned`` ends: a dry run, vacuumed, or failed with how many deletes did."""
        for row in outcomes.groupBy("table_root", "action").agg(
            F.count(F.lit(1)).alias("n"), F.coalesce(F.sum("length"), F.lit(0)).alias("bytes"),
            F.count(F.coalesce("delete_marker_id", "trash_path")).alias("restorable"),
        ).collect():
            if row["action"] in DELETE_OUTCOMES:
                counts = self[row["table_root"]].counts
                setattr(counts, f"{row['action']}_files", row["n"])
                setattr(counts, f"{row['action']}_bytes", row["bytes"])
                counts.restorable_files += row["restorable"]
        failed = outcomes.where(F.col("action") == AuditAction.FAILED.value)
        for row in failed.limit(ERROR_SAMPLE * max(1, len(planned))).collect():
            errors = self[row["table_root"]].errors
            if len(errors) < ERROR_SAMPLE:
                errors.append(f"{row['path']}: {row['error']}")
        for root in planned:
            report = self[root]
            if report.dry_run:
                report.status = TableStatus.DRY_RUN
            elif report.counts.failed_files:
                report.status, report.reason_code = TableStatus.FAILED, ReasonCode.DELETES_FAILED
                report.reason = f"{report.counts.failed_files} deletion(s) failed"
            else:
                report.status = TableStatus.VACUUMED

    def pending(self, among: Collection[str]) -> list[TableRoot]:
        """The tables of ``among`` that no step has ended yet, in the run's order."""
        return [root for root, report in self._reports.items() if root in among and report.status == TableStatus.PENDING]

    def _end(self, root: TableRoot, status: TableStatus, code: ReasonCode, reason: str) -> None:
        report = self[root]
        report.status, report.reason_code, report.reason = status, code, reason


@dataclass
class RunReport:
    run_id: str
    started_at: str
    inventory_table: str
    inventory_date: str | None
    dry_run: bool
    audit_table: str | None = None  # where the run's rows go (restore and purge read them there)
    tables: list[TableReport] = field(default_factory=list)
    # Delta tables of the lake, outside the run, whose logs could not be read: the files they
    # need from the run's tables are not known, so not protected. Makes the run exit 1.
    references_unknown: dict[str, str] = field(default_factory=dict)
    # What the audit table did not take (this run's rows, or earlier runs' kept ones), and where the
    # rows are kept (lakeio.audit.journal). Makes the run exit 1.
    audit_problems: list[str] = field(default_factory=list)
    # Why the whole run was refused before it deleted anything (batch_vacuum.RunRefused); None when it ran.
    refused: str | None = None
    # Every pin the run kept (lakeio.pins), with its state: held, at risk, broken (makes the run exit 1), expired.
    pins: list[PinStatus] = field(default_factory=list)
    # The most files the run deletes, and its time, after which no delete starts (vacuum_jobs.budget); None: no budget.
    max_deletes: int | None = None
    max_minutes: float | None = None
    # Why the store's answers to the run's S3 deletes cannot tell removed from already gone (lakeio.store.delete_if_present).
    deletes_unconfirmed: str | None = None
    elapsed_seconds: float = 0.0
    step_seconds: dict[str, float] = field(default_factory=dict)  # each step's time (lakeio.spark.steps.Step), in order
    # Per planned file: shapes.OUTCOMES (action an AuditAction). Deletes ran once already; reading
    # it again never deletes. None when nothing was planned.
    outcomes: DataFrame | None = field(default=None, repr=False, compare=False)
    # What the run acted on: each table it deleted in or dry-ran, and the files (vacuum_plan.VacuumPlan),
    # as the deletes took them; None when it planned nothing.
    plan: VacuumPlan | None = field(default=None, repr=False, compare=False)
    # Each table's plan_state for the audit (vacuum_jobs.carry_forward), as JSON: what the next run may carry it on.
    plan_states: dict[TableRoot, str] = field(default_factory=dict, repr=False, compare=False)
    # Each carried table's log_sha256 as the row of its state holds it: its log lists as it did, so the commit file is
    # not read again.
    carried_hashes: dict[TableRoot, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """Nothing to act on: no table refused or failed, no commit of a table's history the store refused
        (Delta's VACUUM fails where it cannot commit one; one a rule kept out is said, not an error), every
        row in the audit."""
        return not self.refused and not self.references_unknown and not self.audit_problems and not any(
            p.state is PinState.BROKEN for p in self.pins) and not any(
            t.status in (TableStatus.REFUSED, TableStatus.FAILED) or t.history_failed for t in self.tables)

    @property
    def budgeted(self) -> bool:
        """The run was given a budget of deletes or of time: it may defer tables."""
        return self.max_deletes is not None or self.max_minutes is not None

    def totals(self) -> dict[str, int]:
        """Counts over the tables the run acted on (planned, vacuumed, or failed part way): a table
        refused or skipped, even after planning, deletes nothing, so its candidates are not the run's."""
        acted = [t for t in self.tables if t.status in ACTED_ON]
        totals = {name: sum(getattr(t.counts, name) for t in acted) for name in TableCounts.names()}
        for name in ("deferred_files", "deferred_bytes"):  # a deferred table's candidates are the run's to leave
            totals[name] = sum(getattr(t.counts, name) for t in self.tables)
        totals["tables"] = len(self.tables)
        for status in FINAL_STATUSES:
            totals[f"tables_{status}"] = sum(1 for t in self.tables if t.status == status)
        return totals

    def to_dict(self) -> dict[str, Any]:
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("outcomes", "plan", "plan_states",
                                                                                 "carried_hashes")}
        doc["tables"] = [asdict(t) for t in self.tables]
        doc["pins"] = [p.to_dict() for p in self.pins]
        doc["elapsed_seconds"] = round(self.elapsed_seconds, 3)
        doc["totals"] = self.totals()
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def summary(self) -> str:
        if self.refused:
            return self._refused_summary()
        t = self.totals()
        mode = "DRY RUN: nothing deleted" if self.dry_run else "deletions performed"
        prefix = uris.common_folder([r.table for r in self.tables])
        lines = [
            f"vacuum run {self.run_id} ({mode}), inventory {self.inventory_date}, {self.elapsed_seconds:.1f} s",
            f"tables: {t['tables']} (" + ", ".join(f"{t['tables_' + s]} {s}" for s in FINAL_STATUSES
                                                   if s != TableStatus.DEFERRED or self.budgeted) + ")"
            + (f" under {prefix}" if prefix else ""),
            f"{'status':<9} {'table':<40} {'candidates':>11} {'deleted':>9} {'reclaimed':>10} {'kept(tt)':>9} "
            f"{'recent':>7} {'missing':>8}",
        ]
        for r in self.tables:
            c = r.counts
            lines.append(
                f"{r.status:<9} {shorten(r.name or r.table.removeprefix(prefix), 40):<40} {c.candidate_files:>11,} "
                f"{c.deleted_files:>9,} "
                f"{human_bytes(c.deleted_bytes if not r.dry_run else c.candidate_bytes):>10} "
                f"{c.tombstone_files:>9,} {c.too_recent_files:>7,} {c.missing_files:>8,}"
            )
            if r.reason:
                lines.append(f"          reason: {r.reason}")
            if r.status == TableStatus.DRY_RUN:
                shown = r.would_delete[:SUMMARY_PATHS]
                lines += [f"          would delete {path}" for path in shown]
                if c.candidate_files > len(shown):
                    lines.append(f"          … and {c.candidate_files - len(shown):,} more (the report names the first "
                                 f"{len(r.would_delete):,}, --list-candidates FILE every one)")
            if r.history:  # its commits, or why there are none, and the rule that decided
                lines.append(f"          history: {r.history}")
            for other, files in sorted(r.referenced_by.items()):
                lines.append(f"          kept {files:,} file(s) that {other} needs")
            if c.pinned_files:
                lines.append(f"          kept {c.pinned_files:,} file(s) ({human_bytes(c.pinned_bytes)}) only pinned "
                             "versions read")
        for table, why in sorted(self.references_unknown.items()):
            lines.append(f"warning: cannot tell which files {table} needs from other tables: {why}")
        for pin in self.pins:
            if pin.state in (PinState.BROKEN, PinState.AT_RISK):
                lines.append(f"{'error' if pin.state is PinState.BROKEN else 'warning'}: {pin.line()}")
        lines += [f"error: {problem}" for problem in self.audit_problems]
        lines.append(
            f"total: {t['candidate_files']:,} candidate file(s), {t['deleted_files']:,} deleted "
            f"({human_bytes(t['deleted_bytes'])}), {t['already_absent_files']:,} already absent, "
            + (f"{t['deleted_or_absent_files']:,} deleted or already absent "
               f"({human_bytes(t['deleted_or_absent_bytes'])}: the store cannot tell which), "
               if t["deleted_or_absent_files"] else "")
            + f"{t['failed_files']:,} failed"
        )
        if self.budgeted:
            deferred = [r for r in self.tables if r.counts.deferred_files]
            worth = sum(r.candidate_usd_per_month or 0.0 for r in deferred if r.status == TableStatus.DEFERRED)
            given = [f"{self.max_deletes:,} delete(s)"] if self.max_deletes is not None else []
            given += [f"{self.max_minutes:g} minute(s)"] if self.max_minutes is not None else []
            lines.append(f"budget: {', '.join(given)}; " + (
                f"{len(deferred)} table(s) with {t['deferred_files']:,} candidate(s) ({human_bytes(t['deferred_bytes'])}"
                f"{f', {usd(worth)}/month in the tables left whole' if worth else ''}) deferred: "
                + ("the next run with this audit table takes them first" if self.audit_table
                   else "without an --audit-table the next run cannot know them, and orders by cost alone")
                if deferred else "nothing deferred"))
        if self.deletes_unconfirmed and t["deleted_or_absent_files"]:
            lines.append(f"note: {self.deletes_unconfirmed}")
        removed = t["deleted_files"] + t["deleted_or_absent_files"]
        if removed:
            final = removed - t["restorable_files"]
            undo = (f"python -m vacuum_jobs restore --audit-table {shlex.quote(self.audit_table)} --run-id {self.run_id} "
                    "--apply brings them back until a purge erases them" if self.audit_table
                    else "a restore needs the run's rows: this run had no --audit-table")
            lines.append(f"undo: {t['restorable_files']:,} deleted file(s) kept by a delete marker or the trash "
                         f"({undo}); {final:,} delete(s) final (no versions kept, no --trash)")
        return "\n".join(lines)

    def _refused_summary(self) -> str:
        """Why the run was refused, once; then the tables refused for a reason of their own (a name that
        resolves to no table), and how many it never read."""
        lines = [f"vacuum run {self.run_id} refused, nothing deleted: {self.refused}"]
        lines += [f"  {r.status} {r.name or r.table}: {r.reason}" for r in self.tables if r.reason not in (None, NOT_READ)]
        unread = sum(1 for r in self.tables if r.reason == NOT_READ)
        if unread:
            lines.append(f"  {unread} table(s) named, none read")
        return "\n".join(lines)
