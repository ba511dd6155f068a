"""Erasure evidence: when was a file physically deleted, and how long can an erasure take.

A privacy delete (GDPR, DPDP) removes rows in a commit, but the files holding them stay
on storage until a vacuum deletes them. The vacuum audit table records every table of
every run (``action`` ``table_<status>``) and every planned file; with the table's log
and the newest inventory that answers, per file:

- ``erased``: a run deleted it (when, which run), and no version of it remains: the store
  keeps no versions, a purge run erased its copy in the trash (when, which purge run), or an
  all-versions inventory taken after the delete (after the purge, where one ran on its key)
  lists no version of its key written before the delete;
- ``soft_deleted``: a run deleted it from a versioned S3 bucket, but a noncurrent version
  still holds its bytes (the delete only added a delete marker): restorable until the undo
  window of the purge runs ends, erased by the purge due then; not erased yet;
- ``restored``: a run deleted it, and a restore run brought it back (when, which run);
- ``erasure_unconfirmed``: a run deleted it from a versioned S3 bucket (and perhaps a purge
  run erased the versions it found), and no all-versions inventory taken since says whether
  a version of it remains;
- ``absent_when_vacuumed``: a run found it already gone (when, which run);
- ``live``: the current snapshot still references it;
- ``live_soft_deleted``: still referenced, with a deletion vector hiding the deleted rows:
  the rows stay on disk until the file is rewritten (``REORG TABLE ... APPLY (PURGE)``);
- ``referenced_elsewhere``: its table no longer needs it, but another table's log does (a
  shallow clone): every vacuum keeps it while that table does;
- ``within_retention``: tombstoned; vacuum may delete it from the date given;
- ``delete_failed``: the last attempt failed (error, run);
- ``gone_unrecorded``: the newest inventory no longer lists it, but no run recorded
  deleting it (another tool deleted it);
- ``not_vacuumed_since``: deletable, but no deleting run has reached it yet.

Per table, the worst case from a delete to erasure is the retention, plus the time since
the last run that deleted (its cadence), plus that run's inventory lag; where deletes only add
delete markers (versioned S3 buckets), plus the purge runs' undo window and the time since the
last of them. Such a table without any purge run is over the deadline: its bytes stay until a
purge, or a lifecycle rule this report cannot see, removes them.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio import catalog, uris
from lakeio.audit import DELETING_RUNS, AuditAction, read_audit
from lakeio.delta_read import TableNotFound
from lakeio.deltalog import gates
from lakeio.deltalog.ownership import delta_roots
from lakeio.deltalog.paths import UnresolvablePath, resolve
from lakeio.deltalog.replay import Replay, read_unsure_too
from lakeio.errors import HousekeepingError
from lakeio.inventory import (
    InventorySnapshot,
    InventoryUnavailable,
    current_objects,
    inventory_snapshot,
    one_row_per_object,
)
from lakeio.shapes import local_frame, of_tables
from lakeio.spark import check_workers
from lakeio.steps import Steps
from lakeio.storage import Storage
from lakeio.text import StrEnum, first_line, human_bytes, shorten
from lakeio.times import MS_PER_HOUR, epoch_ms, iso_utc, midnight_utc_ms

log = logging.getLogger(__name__)


class ErasureStatus(StrEnum):
    """Where a file stands on its way to erasure (the module's docstring says when each applies)."""

    ERASED = "erased"
    SOFT_DELETED = "soft_deleted"
    RESTORED = "restored"
    ERASURE_UNCONFIRMED = "erasure_unconfirmed"
    ABSENT_WHEN_VACUUMED = "absent_when_vacuumed"
    LIVE = "live"
    LIVE_SOFT_DELETED = "live_soft_deleted"
    REFERENCED_ELSEWHERE = "referenced_elsewhere"
    WITHIN_RETENTION = "within_retention"
    DELETE_FAILED = "delete_failed"
    GONE_UNRECORDED = "gone_unrecorded"
    NOT_VACUUMED_SINCE = "not_vacuumed_since"
    NOT_IN_A_TABLE = "not_in_a_table"


# Every status falls in exactly one of three courses (a test checks that they cover the enum):
# none of the file's bytes remain where it was;
GONE = frozenset({ErasureStatus.ERASED, ErasureStatus.ABSENT_WHEN_VACUUMED, ErasureStatus.GONE_UNRECORDED})
# its bytes go with its table's vacuums (and purges), so the table's worst case bounds them;
BOUNDED_BY_VACUUMS = frozenset({ErasureStatus.WITHIN_RETENTION, ErasureStatus.NOT_VACUUMED_SINCE,
                                ErasureStatus.SOFT_DELETED, ErasureStatus.ERASURE_UNCONFIRMED})
# nothing scheduled erases it: someone must act.
NEEDS_ACTION = frozenset({ErasureStatus.RESTORED, ErasureStatus.LIVE, ErasureStatus.LIVE_SOFT_DELETED,
                          ErasureStatus.REFERENCED_ELSEWHERE, ErasureStatus.DELETE_FAILED,
                          ErasureStatus.NOT_IN_A_TABLE})


class ErasureError(HousekeepingError):
    """The audit or inventory table cannot be read."""


@dataclass(frozen=True)
class CommitQuestion:
    table: str
    version: int


@dataclass
class ErasureOptions:
    audit_table: str
    inventory_table: str
    deadline_days: float = 30.0
    tables: list[str] | None = None  # default: every table the newest inventory shows, and every audited one
    now_ms: int | None = None  # for tests

    def __post_init__(self) -> None:
        if not self.deadline_days > 0:
            raise ValueError("deadline_days must be > 0")


@dataclass
class TableErasure:
    table: str
    retention_hours: float | None = None
    last_deleting_run: str | None = None
    last_deleting_run_at: str | None = None
    last_run_inventory_date: str | None = None
    inventory_lag_hours: float | None = None
    worst_case_days: float | None = None  # None: no run has deleted anything in this table
    over_deadline: bool = True
    soft_deletes: bool = False  # its deletes can be undone (delete markers, a trash): a purge erases them
    undo_window_days: float | None = None  # of the newest purge run: deletes stay restorable this long
    last_purge_run: str | None = None
    last_purge_run_at: str | None = None
    files_with_deletion_vectors: int = 0
    bytes_with_deletion_vectors: int = 0
    soft_deleted_rows: int = 0
    problem: str | None = None


@dataclass
class FileAnswer:
    path: str
    table: str | None
    asked_as: str  # "path", or "<table>@<version>" for a commit's files
    status: ErasureStatus
    detail: str
    when: str | None = None  # erased_at, failed_at, or eligible_from (see status)
    run_id: str | None = None


@dataclass
class ErasureReport:
    generated_at: str
    deadline_days: float
    tables: list[TableErasure] = field(default_factory=list)
    answers: list[FileAnswer] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # questions that could not be answered, and why
    step_seconds: dict[str, float] = field(default_factory=dict)  # each step's time, in order

    @property
    def ok(self) -> bool:
        return not self.refused and not any(t.over_deadline for t in self.tables)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def summary(self) -> str:
        prefix = uris.common_folder([t.table for t in self.tables])
        lines = [f"erasure evidence at {self.generated_at}, deadline {self.deadline_days:g} days"
                 + (f"; tables under {prefix}" if prefix else "")]
        if self.tables:
            lines.append(f"{'':2}{'table':<48} {'retention':>9} {'last run':>20} {'worst case':>11} "
                         f"{'DV files':>8} {'soft-deleted rows':>17}")
        for t in self.tables:
            worst = "never run" if t.worst_case_days is None else f"{t.worst_case_days:.1f} d"
            retention = ("" if t.retention_hours is None else f"{t.retention_hours:g} h" if t.retention_hours < 48
                         else f"{t.retention_hours / 24:g} d")
            lines.append(f"{'!' if t.over_deadline else ' ':2}{shorten(t.table.removeprefix(prefix), 48):<48} "
                         f"{retention:>9} "
                         f"{(t.last_deleting_run_at or '-')[:19]:>20} {worst:>11} "
                         f"{t.files_with_deletion_vectors:>8,} {t.soft_deleted_rows:>17,}")
            if t.problem:
                lines.append(f"{'':4}{t.problem}")
        over = [t for t in self.tables if t.over_deadline]
        if over:
            lines.append(f"{len(over)} table(s) over the {self.deadline_days:g}-day deadline (marked !)")
        purge = [t for t in self.tables if t.soft_deleted_rows]
        if purge:
            lines.append(f"{len(purge)} table(s) keep soft-deleted rows in live files: "
                         f"{human_bytes(sum(t.bytes_with_deletion_vectors for t in purge))} to rewrite "
                         "(REORG TABLE ... APPLY (PURGE), then vacuum)")
        for a in self.answers:
            lines.append(f"{a.status:<20} {a.path}: {a.detail}")
        for problem in self.refused:
            lines.append(f"refused: {problem}")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Versions:
    """What the newest inventory lists of one key in a versioned S3 bucket."""

    all_versions: bool  # an all-versions configuration lists the bucket: a missing version is gone
    rows: tuple  # the key's versions and delete markers (version_id, length, modificationTime, ...)


# What a purge run did to a vacuum run's delete: erased what it kept, or found it gone.
_PURGING = (AuditAction.PURGED, AuditAction.ALREADY_ABSENT)


def _deleted(answer, run_row, finished, table: TableErasure | None, versions: _Versions | None,
             inventory_date: date) -> FileAnswer:
    """A file a run deleted: erased, unless a versioned bucket may still hold its bytes.
    ``finished``: the restore or purge row that acted on that delete, if any."""
    run_id, at = run_row["run_id"], iso_utc(run_row["at_ms"])
    deleted = f"deleted at {at} by vacuum run {run_id}"
    marker = run_row["delete_marker_id"]
    trash = run_row["trash_path"]
    kept = f"moved to the trash ({trash})" if trash else f"delete marker {marker}"
    if finished is not None:
        done_at, by = iso_utc(finished["at_ms"]), finished["run_id"]
        if finished["action"] == AuditAction.RESTORED:
            return answer(ErasureStatus.RESTORED, f"{deleted} ({kept}); restored at {done_at} by restore run {by}: its bytes are "
                          "back", done_at, by)
        purged = (f"{deleted} ({kept}); erased at {done_at} by purge run {by}, which deleted "
                  + ("its copy in the trash" if trash else f"the version it hid ({finished['version_id']}) and the "
                     "older versions of its key")
                  if finished["action"] == AuditAction.PURGED else
                  f"{deleted} ({kept}); purge run {by} found nothing of it left at {done_at} (a lifecycle rule or "
                  "another tool removed it)")
        if trash is not None:
            return answer(ErasureStatus.ERASED, purged, done_at, by)
        return _purged_from_versions(answer, purged, run_row, finished, versions, inventory_date)
    if trash is not None:
        return _soft_deleted(answer, run_row, f"{deleted}: moved to the trash ({trash}), which keeps its bytes",
                             table)
    if marker is not None and not _none_left(versions, run_row, inventory_date):
        hid = f"version {run_row['version_id']}" if run_row["version_id"] else "the version it hid"
        held = _held(versions, run_row) if versions is not None else []
        listed = (f" (the inventory of {inventory_date} lists {', '.join(sorted(r['version_id'] for r in held))}: "
                  f"{human_bytes(sum(r['length'] or 0 for r in held))})" if held else "")
        return _soft_deleted(answer, run_row, f"{deleted}, from a versioned bucket: delete marker {marker} hides "
                             f"{hid}, which keeps its bytes{listed}", table)
    if versions is None:
        return answer(ErasureStatus.ERASED, deleted, at, run_id)
    if not versions.all_versions or inventory_date <= date.fromisoformat(at[:10]):
        return answer(ErasureStatus.ERASURE_UNCONFIRMED, f"{deleted} from a versioned bucket: unless that run purged its versions "
                      "(--purge-versions), a delete marker hides it and a noncurrent version keeps its bytes; no "
                      "all-versions inventory taken since the delete says which", at, run_id)
    held = _held(versions, run_row)
    if not held:
        return answer(ErasureStatus.ERASED, f"{deleted}; the all-versions inventory of {inventory_date} lists no version of it",
                      at, run_id)
    return answer(ErasureStatus.SOFT_DELETED, f"{deleted}, but the bucket is versioned: {len(held)} noncurrent version(s) "
                  f"({human_bytes(sum(r['length'] or 0 for r in held))}: "
                  f"{', '.join(sorted(r['version_id'] for r in held))}) still hold its bytes in the inventory of "
                  f"{inventory_date}; restorable, not erased, until they are deleted for good (vacuum "
                  "--purge-versions, or a lifecycle rule expiring noncurrent versions)", at, run_id)


def _purged_from_versions(answer, purged: str, run_row, finished, versions: _Versions | None,
                          inventory_date: date) -> FileAnswer:
    """A purge run acted on a versioned key: erased only once an all-versions inventory taken after
    the purge lists no version of the key written before the vacuum's delete (another version of
    the same bytes may have stayed)."""
    done_at, by = iso_utc(finished["at_ms"]), finished["run_id"]
    if versions is None or not versions.all_versions or inventory_date <= date.fromisoformat(done_at[:10]):
        return answer(ErasureStatus.ERASURE_UNCONFIRMED, f"{purged}; no all-versions inventory taken since the purge confirms "
                      "that no other version of the key still holds its bytes", done_at, by)
    held = _held(versions, run_row)
    if held:
        return answer(ErasureStatus.SOFT_DELETED, f"{purged}; but the all-versions inventory of {inventory_date} still lists "
                      f"{', '.join(sorted(r['version_id'] for r in held))} "
                      f"({human_bytes(sum(r['length'] or 0 for r in held))}): not erased", done_at, by)
    return answer(ErasureStatus.ERASED, f"{purged}; the all-versions inventory of {inventory_date} lists no version of it",
                  done_at, by)


def _soft_deleted(answer, run_row, hidden: str, table: TableErasure | None) -> FileAnswer:
    """A delete that can be undone (a recorded delete marker, or a move to the trash): restorable
    until the purge runs' undo window ends. ``hidden`` says where its bytes are."""
    run_id = run_row["run_id"]
    restore = f"python -m vacuum_jobs restore --run-id {run_id}"
    if table is None or table.last_purge_run_at is None:
        return answer(ErasureStatus.SOFT_DELETED, f"{hidden}; restorable ({restore}), and no purge run has been recorded to "
                      "erase it (python -m vacuum_jobs purge --older-than-days N, or a lifecycle rule expiring "
                      "noncurrent versions)", None, run_id)
    due = iso_utc(run_row["at_ms"] + int((table.undo_window_days or 0.0) * 24 * MS_PER_HOUR))
    return answer(ErasureStatus.SOFT_DELETED, f"{hidden}; restorable until {due} ({restore}), erased by the first purge run "
                  f"after that (undo window {table.undo_window_days:g} day(s); last purge run {table.last_purge_run} "
                  f"at {table.last_purge_run_at})", due, run_id)


def _none_left(versions: _Versions | None, run_row, inventory_date: date) -> bool:
    """An all-versions inventory taken after the delete lists no version of the key written before it."""
    return (versions is not None and versions.all_versions
            and inventory_date > date.fromisoformat(iso_utc(run_row["at_ms"])[:10]) and not _held(versions, run_row))


def _held(versions: _Versions, run_row) -> list:
    """The versions (not delete markers) the inventory lists of a key, written before the run deleted it."""
    return [r for r in versions.rows if not r["is_delete_marker"] and (r["modificationTime"] or 0) < run_row["at_ms"]]


@dataclass
class Gathered:
    """An evidence report and what it was built from."""

    report: ErasureReport
    tables: dict[str, TableErasure]  # every table read, by canonical root
    audit: DataFrame
    snapshot: InventorySnapshot
    replay: Replay
    roots: list[str]  # the tables whose logs were read
    now_ms: int


@dataclass
class CommitRecord:
    """What one commit of a table did, as its log file says."""

    table: str  # canonical root
    version: int
    log_file: str
    timestamp_ms: int | None  # inCommitTimestamp, else commitInfo's timestamp
    operation: str | None
    parameters: dict
    removed: dict[str, int | None]  # data file -> deletionTimestamp
    deletion_vectors: dict[str, int | None]  # data file re-added with a deletion vector -> rows it hides


def read_commit(storage: Storage, commit: CommitQuestion) -> CommitRecord:
    """Read ``_delta_log/<version>.json`` of a table; ValueError naming the file when it cannot be read."""
    root = uris.canonical(uris.to_uri(commit.table))
    log_file = uris.join(root, "_delta_log", f"{commit.version:020d}.json")
    try:
        text = storage.read_bytes(log_file).decode("utf-8")
    except Exception as exc:
        raise ValueError(f"{log_file}: cannot read commit {commit.version} ({first_line(exc, 160)}); "
                         "log retention may have removed it: ask by file path instead") from None
    record = CommitRecord(root, commit.version, log_file, None, None, {}, {}, {})
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError:
            raise ValueError(f"{log_file}: line {number} is not JSON") from None
        try:
            if "remove" in action:
                record.removed[resolve(root, action["remove"]["path"])] = action["remove"].get("deletionTimestamp")
            elif "add" in action and action["add"].get("deletionVector"):
                record.deletion_vectors[resolve(root, action["add"]["path"])] = \
                    action["add"]["deletionVector"].get("cardinality")
            elif "commitInfo" in action:
                info = action["commitInfo"]
                record.timestamp_ms = info.get("inCommitTimestamp", info.get("timestamp"))
                record.operation = info.get("operation")
                record.parameters = info.get("operationParameters") or {}
        except UnresolvablePath as exc:
            raise ValueError(f"{log_file}: line {number}: {exc}") from None
    return record


@dataclass
class _Question:
    path: str  # canonical
    table: str | None
    asked_as: str
    removed_at_ms: int | None = None  # from the commit that removed it, when asked by commit
    soft_deleted: bool = False  # the commit re-added it with a deletion vector


def erasure(
    spark: SparkSession,
    audit_table: str,
    inventory_table: str,
    *,
    paths: Sequence[str] = (),
    commits: Sequence[CommitQuestion] = (),
    deadline_days: float = ErasureOptions.deadline_days,
    tables: list[str] | None = None,
    now_ms: int | None = None,
) -> ErasureReport:
    """When were files physically erased: per table the worst case from a delete to erasure, per
    asked file its status.

    Args:
        spark: the session to run in.
        audit_table: the vacuum audit table (a URI or a catalog name).
        inventory_table: the inventory Delta table; its newest date says what is still stored.
        paths: files to answer for.
        commits: commits whose removed files to answer for (a privacy delete's commit).
        deadline_days: the erasure deadline a table's worst case is held to.
        tables: the tables to bound; default: every table the newest inventory shows, and every audited one.
        now_ms: the clock, epoch milliseconds (tests); default: now.

    Returns:
        The :class:`ErasureReport`; ``ok`` is False where a table is over the deadline or a question went unanswered.

    Raises:
        ErasureError: the audit or inventory table cannot be read.
    """
    options = ErasureOptions(audit_table, inventory_table, deadline_days, tables, now_ms)
    return ErasureEvidence(spark, options).execute(paths, commits)


class ErasureEvidence:
    """One action: read the audit, the newest inventory and the logs; answer per table and per file."""

    def __init__(self, spark: SparkSession, options: ErasureOptions):
        self.spark = spark
        self.options = replace(options, audit_table=catalog.resolve(spark, options.audit_table, must_be_delta=False),
                               inventory_table=catalog.resolve(spark, options.inventory_table),
                               tables=None if options.tables is None
                               else [catalog.resolve(spark, t) for t in options.tables])
        self.progress = Steps(spark, log)
        check_workers(spark)
        self.storage = Storage(spark)

    def execute(self, paths: Sequence[str] = (), commits: Sequence[CommitQuestion] = ()) -> ErasureReport:
        return self.gather(paths, commits).report

    def gather(self, paths: Sequence[str] = (), commits: Sequence[CommitQuestion] = ()) -> Gathered:
        """The report, and what it was built from (for an erasure request's document)."""
        now_ms = epoch_ms() if self.options.now_ms is None else self.options.now_ms
        self.progress.restart()
        self.progress.begin("the audit and the inventory", "reading the audit and the newest inventory")
        report = ErasureReport(iso_utc(now_ms), self.options.deadline_days)
        commits = [self.named(c) for c in commits]
        audit = self._read_audit()
        snapshot = self._newest_inventory()
        inventory = current_objects(one_row_per_object(snapshot.rows))
        known_roots = sorted(set(delta_roots(inventory))
                             | {r["table_root"] for r in audit.select("table_root").distinct().collect()})
        scope = ([uris.canonical(uris.to_uri(t)) for t in self.options.tables]
                 if self.options.tables is not None else known_roots)
        questions = self._questions(paths, commits, sorted(set(known_roots) | set(scope)), report)
        roots = sorted(set(scope) | {q.table for q in questions if q.table})
        replay = self._replay_logs(roots)
        tables = self._tables(roots, replay, audit, now_ms)
        report.tables = [tables[r] for r in scope]
        report.answers = self._answers(questions, tables, replay, audit, inventory, snapshot, now_ms)
        report.step_seconds = self.progress.seconds()
        return Gathered(report, tables, audit, snapshot, replay, roots, now_ms)

    def named(self, commit: CommitQuestion) -> CommitQuestion:
        """``commit`` with a catalog name for its table resolved to the table's location."""
        return CommitQuestion(catalog.resolve(self.spark, commit.table), commit.version)

    def _read_audit(self) -> DataFrame:
        try:
            return read_audit(self.spark, self.options.audit_table)
        except TableNotFound:
            raise ErasureError(f"{self.options.audit_table}: no audit table there (run vacuum_jobs with "
                               "--audit-table first)") from None

    def _newest_inventory(self) -> InventorySnapshot:
        try:
            return inventory_snapshot(self.spark, self.options.inventory_table)
        except InventoryUnavailable as exc:
            raise ErasureError(str(exc)) from None

    def _questions(self, paths, commits, roots: list[str], report: ErasureReport) -> list[_Question]:
        found = []
        for path in paths:
            canonical = uris.canonical(uris.to_uri(path))
            found.append(_Question(canonical, uris.owner(canonical, roots), "path"))
        for commit in commits:
            try:
                found += self._commit_files(commit)
            except ValueError as exc:
                report.refused.append(str(exc))
        return found

    def _commit_files(self, commit: CommitQuestion) -> list[_Question]:
        """The data files a commit removed; those it re-added with a deletion vector stay live."""
        record = read_commit(self.storage, commit)
        if not record.removed:
            raise ValueError(f"{record.log_file}: commit {commit.version} removed no files")
        asked = f"{commit.table}@{commit.version}"
        return [_Question(path, record.table, asked, at, path in record.deletion_vectors)
                for path, at in sorted(record.removed.items())]

    def _replay_logs(self, roots: list[str]) -> Replay:
        self.progress.begin("reading the logs", f"replaying {len(roots)} log(s)")
        return read_unsure_too(self.spark, self.storage, roots)

    def _tables(self, roots: list[str], replay: Replay, audit: DataFrame, now_ms: int) -> dict[str, TableErasure]:
        tables = {root: TableErasure(root) for root in roots}
        for root, reason in replay.failures.items():
            tables[uris.canonical(root)].problem = f"unreadable log: {reason}"
        for root, state in replay.states.items():
            try:
                tables[root].retention_hours = gates.table_retention_hours(state)
            except ValueError as exc:
                tables[root].problem = f"delta.deletedFileRetentionDuration: {exc}"
        newest = (audit.where(F.col("path").isNull() & F.col("action").isin(*[a.value for a in DELETING_RUNS]))
                  .groupBy("table_root").agg(F.max_by(F.struct(
                      "run_id", F.unix_millis("timestamp").alias("at_ms"), "inventory_date", "retention_hours"),
                      "timestamp").alias("run")))
        run_at_ms: dict[str, int] = {}
        for row in of_tables(newest, roots).collect():
            table, run = tables[row["table_root"]], row["run"]
            run_ms = run_at_ms[table.table] = run["at_ms"]
            table.last_deleting_run, table.last_deleting_run_at = run["run_id"], iso_utc(run_ms)
            table.last_run_inventory_date = run["inventory_date"].isoformat() if run["inventory_date"] else None
            if run["retention_hours"] is not None:
                table.retention_hours = run["retention_hours"]
            if run["inventory_date"] is not None:
                table.inventory_lag_hours = (run_ms - midnight_utc_ms(run["inventory_date"])) / MS_PER_HOUR
        purge_at_ms = self._purges(tables, audit, roots)
        deadline_hours = self.options.deadline_days * 24
        for table in tables.values():
            if table.last_deleting_run_at is None or table.retention_hours is None:
                table.over_deadline = True
                if table.problem is None and table.last_deleting_run_at is None:
                    table.problem = "no vacuum run has deleted files in this table: erasure is not bounded"
                continue
            since_run = (now_ms - run_at_ms[table.table]) / MS_PER_HOUR
            worst = table.retention_hours + since_run + (table.inventory_lag_hours or 0.0)
            if table.soft_deletes and table.table in purge_at_ms:
                worst += (table.undo_window_days or 0.0) * 24 + (now_ms - purge_at_ms[table.table]) / MS_PER_HOUR
            elif table.soft_deletes and table.problem is None:
                table.problem = ("its deletes can be undone (delete markers on a versioned bucket, or a trash "
                                 "folder), and no purge run has erased what they keep: erasure is not bounded unless "
                                 "a lifecycle rule expires noncurrent versions (python -m vacuum_jobs purge "
                                 "--older-than-days N)")
            table.worst_case_days = worst / 24
            table.over_deadline = worst > deadline_hours or table.problem is not None
        for row in replay.files.where((F.col("kind") == "add") & F.col("dv_storage_type").isNotNull()).groupBy(
                "table_root").agg(F.count(F.lit(1)).alias("files"), F.sum("size").alias("bytes"),
                                  F.sum("dv_cardinality").alias("rows")).collect():
            table = tables[row["table_root"]]
            table.files_with_deletion_vectors = row["files"]
            table.bytes_with_deletion_vectors = row["bytes"] or 0
            table.soft_deleted_rows = row["rows"] or 0
        return tables

    def _purges(self, tables: dict[str, TableErasure], audit: DataFrame, roots: list[str]) -> dict[str, int]:
        """Which tables' deletes can be undone (delete markers, a trash), and the newest purge run of each (of the
        lake, where none of its own recorded a row): its undo window and when it ran."""
        for row in of_tables(audit.where((F.col("action") == AuditAction.DELETED.value)
                                         & F.coalesce("delete_marker_id", "trash_path").isNotNull())
                             .select("table_root").distinct(),
                             roots).collect():
            tables[row["table_root"]].soft_deletes = True
        runs = audit.where(F.col("path").isNull() & (F.col("action") == AuditAction.TABLE_PURGED.value)).select(
            "table_root", "run_id", F.unix_millis("timestamp").alias("at_ms"), "retention_hours")
        newest: dict[str, Any] = {}
        for row in runs.groupBy("table_root").agg(F.max_by(F.struct("run_id", "at_ms", "retention_hours"),
                                                           "at_ms").alias("run")).collect():
            newest[row["table_root"]] = row["run"]
        lake = max(newest.values(), key=lambda run: run["at_ms"], default=None)
        at_ms = {}
        for table in tables.values():
            run = newest.get(table.table, lake)
            if table.soft_deletes and run is not None:
                table.last_purge_run, table.last_purge_run_at = run["run_id"], iso_utc(run["at_ms"])
                table.undo_window_days = (run["retention_hours"] or 0.0) / 24
                at_ms[table.table] = run["at_ms"]
        return at_ms

    def _answers(self, questions: list[_Question], tables: dict[str, TableErasure], replay: Replay,
                 audit: DataFrame, inventory: DataFrame, snapshot: InventorySnapshot, now_ms: int
                 ) -> list[FileAnswer]:
        if not questions:
            return []
        self.progress.begin("answering", f"answering for {len(questions)} file(s)")
        asked = local_frame(self.spark, sorted({(q.path,) for q in questions}), "path string")
        trail: dict[str, list] = defaultdict(list)
        rows = audit.where(F.col("path").isNotNull()).select(
            uris.canonical_col(F.col("path")).alias("path"), "run_id", "action", "error",
            F.unix_millis("timestamp").alias("at_ms"), "version_id", "delete_marker_id", "trash_path", "source_run_id")
        for row in rows.join(F.broadcast(asked), "path").orderBy("at_ms").collect():
            trail[row["path"]].append(row)
        in_log: dict[str, list] = defaultdict(list)
        for row in replay.files.join(F.broadcast(asked), "path").collect():
            in_log[row["path"]].append(row)
        listed = {r["path"] for r in inventory.select(uris.canonical_col(F.col("path")).alias("path"))
                  .join(F.broadcast(asked), "path").collect()}
        versions = self._versions(sorted({q.path for q in questions if q.path.startswith("s3://")}), snapshot)
        return [self._answer(q, tables.get(q.table) if q.table else None, trail[q.path], in_log[q.path], q.path in listed,
                             snapshot.day, now_ms, versions.get(q.path)) for q in questions]

    def _versions(self, paths: list[str], snapshot: InventorySnapshot) -> dict[str, _Versions]:
        """What the newest inventory lists of each asked S3 key (``paths``) in a versioned bucket (one
        that lists version ids): its versions and delete markers, and whether an all-versions
        configuration lists the bucket. Other stores keep no versions this job can see."""
        bucket_of = {path: path.split("/")[2] for path in paths}
        if not paths:
            return {}
        rows = snapshot.rows.where(F.col("bucket").isin(sorted(set(bucket_of.values()))))
        kinds = {r["bucket"]: r for r in rows.groupBy("bucket").agg(
            F.max(F.col("version_id").isNotNull()).alias("versioned"),
            F.max(F.col("is_latest").isNotNull()).alias("all_versions")).collect()}
        asked = local_frame(self.spark, [(path,) for path in paths], "path string")
        listed: dict[str, list] = defaultdict(list)
        for row in rows.where(F.col("version_id").isNotNull()).select(
                uris.canonical_col(F.col("path")).alias("path"), "version_id", "length", "modificationTime",
                "is_latest", "is_delete_marker").join(F.broadcast(asked), "path").collect():
            listed[row["path"]].append(row)
        return {path: _Versions(kinds[bucket]["all_versions"], tuple(listed[path]))
                for path, bucket in bucket_of.items() if bucket in kinds and kinds[bucket]["versioned"]}

    @staticmethod
    def _answer(q: _Question, table: TableErasure | None, trail: list, log_rows: list, listed: bool,
                inventory_date: date, now_ms: int, versions: _Versions | None) -> FileAnswer:
        def answer(status: ErasureStatus, detail: str, when: str | None = None, run_id: str | None = None) -> FileAnswer:
            return FileAnswer(q.path, q.table, q.asked_as, status, detail, when, run_id)

        if q.table is None:
            return answer(ErasureStatus.NOT_IN_A_TABLE, "no known Delta table contains this path")
        vacuumed = [r for r in trail if r["source_run_id"] is None]  # restores and purges name their vacuum run
        restores = [r for r in trail if r["action"] == AuditAction.RESTORED]
        back_at = restores[-1]["at_ms"] if restores else -1
        # The first delete since the file last came back is its erasure (a re-run deleting it again is not).
        deleted = [r for r in vacuumed if r["action"] == AuditAction.DELETED and r["at_ms"] > back_at]
        if deleted:
            runs = {r["run_id"] for r in deleted}
            purged = [r for r in trail if r["source_run_id"] in runs and r["action"] in _PURGING]
            return _deleted(answer, deleted[0], purged[0] if purged else None, table, versions, inventory_date)
        undone = [r for r in vacuumed if restores and r["run_id"] == restores[-1]["source_run_id"]]
        if undone:
            return _deleted(answer, undone[0], restores[-1], table, versions, inventory_date)
        absent = [r for r in vacuumed if r["action"] == AuditAction.ALREADY_ABSENT]
        if absent:
            at = iso_utc(absent[0]["at_ms"])
            return answer(ErasureStatus.ABSENT_WHEN_VACUUMED, f"already gone when vacuum run {absent[0]['run_id']} reached it "
                                                  f"at {at}", at, absent[0]["run_id"])
        live = [r for r in log_rows if r["kind"] == "add" and r["table_root"] == q.table]
        others = sorted({r["table_root"] for r in log_rows if r["kind"] == "add" and r["table_root"] != q.table})
        if others and not live:
            return answer(ErasureStatus.REFERENCED_ELSEWHERE, f"no longer in this table, but {', '.join(others)} still "
                                                  "reference(s) it (a shallow clone?): no vacuum deletes it while "
                                                  "they do; delete the rows there too")
        if live:
            if q.soft_deleted or any(r["dv_storage_type"] for r in live):
                return answer(ErasureStatus.LIVE_SOFT_DELETED, "still live; a deletion vector hides the deleted rows, which "
                                                   "stay on disk until the file is rewritten "
                                                   "(REORG TABLE ... APPLY (PURGE)) and vacuumed")
            return answer(ErasureStatus.LIVE, "the table's current snapshot still references this file")
        removed_ms = q.removed_at_ms or max((r["deletion_timestamp"] for r in log_rows
                                            if r["deletion_timestamp"] is not None and r["table_root"] == q.table),
                                           default=None)
        retention = table.retention_hours if table else None
        if removed_ms is not None and retention is not None:
            eligible_ms = removed_ms + int(retention * MS_PER_HOUR)
            if eligible_ms > now_ms:
                return answer(ErasureStatus.WITHIN_RETENTION, f"removed at {iso_utc(removed_ms)}; kept for time travel until "
                                                  f"{iso_utc(eligible_ms)} ({retention:g} h retention)", iso_utc(eligible_ms))
        if trail and trail[-1]["action"] == AuditAction.FAILED:
            last = trail[-1]
            at = iso_utc(last["at_ms"])
            return answer(ErasureStatus.DELETE_FAILED, f"vacuum run {last['run_id']} failed to delete it at {at}: "
                                           f"{last['error']}", at, last["run_id"])
        if not listed:
            return answer(ErasureStatus.GONE_UNRECORDED, f"the inventory of {inventory_date} does not list it, but no vacuum "
                                             "run recorded deleting it (deleted by another tool?)")
        last_run = (f"the last deleting run was {table.last_deleting_run} at {table.last_deleting_run_at}"
                    if table and table.last_deleting_run else "no vacuum run has deleted files in this table")
        planned = [r for r in trail if r["action"] == AuditAction.WOULD_DELETE]
        dry = f"; dry run {planned[-1]['run_id']} planned it" if planned else ""
        since = f"deletable since {iso_utc(eligible_ms)}" if removed_ms is not None and retention is not None \
            else "deletable (no longer referenced by the log)"
        return answer(ErasureStatus.NOT_VACUUMED_SINCE, f"{since}; {last_run}{dry}")
