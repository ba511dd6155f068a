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
- ``pinned``: its table no longer needs it, but a pinned version reads it (docs/pins.md): every
  vacuum keeps it while the pin stays; the answer names the pin and who set it;
- ``within_retention``: tombstoned; vacuum may delete it from the date given;
- ``delete_failed``: the last attempt failed (error, run): the vacuum's delete, or the delete of
  the restore or purge run that last acted on it;
- ``locked``: S3 Object Lock keeps a version holding its bytes (the inventory's lock fields):
  not erased before the date the lock ends (none while a legal hold stays);
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lake_reports.erasure_decision import (
    AuditEntry,
    FileAnswer,
    ListedVersion,
    LogEntry,
    Question,
    TableErasure,
    Versions,
    decide,
)
from lakeio.audit.contract import DELETING_RUNS, REMOVED, AuditAction, read_audit
from lakeio.deltalog import gates
from lakeio.deltalog.commits import CommitRecord, UnreadableCommit, read_commit
from lakeio.deltalog.ownership import delta_roots
from lakeio.deltalog.pinned import PinnedRead, PinStatus, read_pins
from lakeio.deltalog.replay import Replay, read_unsure_too
from lakeio.errors import HousekeepingError, InvalidOption
from lakeio.inventory import (
    InventorySnapshot,
    InventoryUnavailable,
    current_objects,
    inventory_snapshot,
)
from lakeio.pins import KeepVersions, Pin
from lakeio.pins import keep_versions as pins_given
from lakeio.spark import catalog
from lakeio.spark.session import check_workers
from lakeio.spark.shapes import local_frame, of_tables
from lakeio.spark.steps import Step, Steps, one_run
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.store.object_lock import Lock
from lakeio.tables.pins import PinsUnreadable
from lakeio.tables.read import TableNotFound
from lakeio.text import human_bytes, shorten
from lakeio.times import MS_PER_HOUR, epoch_ms, iso_utc, midnight_utc_ms

log = logging.getLogger(__name__)


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
    keep_versions: tuple[Pin, ...] = ()  # pinned versions (lakeio.pins): a file one reads is ``pinned``
    pins_table: str | None = None  # the pins table (lakeio.tables.pins): its pins too

    def __post_init__(self) -> None:
        if not self.deadline_days > 0:
            raise InvalidOption("deadline_days must be > 0")


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


@dataclass
class _Facts:
    """What the audit, the logs and the inventory say of the asked files, by path."""

    trail: dict[str, list[AuditEntry]] = field(default_factory=lambda: defaultdict(list))
    in_log: dict[str, list[LogEntry]] = field(default_factory=lambda: defaultdict(list))
    listed: set[str] = field(default_factory=set)
    versions: dict[str, Versions] = field(default_factory=dict)
    pinned: dict[str, list[PinStatus]] = field(default_factory=lambda: defaultdict(list))  # the pins reading it


@dataclass
class Gathered:
    """An evidence report and what it is built from: read first (:meth:`ErasureEvidence.read`),
    then answered (:meth:`ErasureEvidence.answer`), which fills ``tables`` and the report."""

    report: ErasureReport
    audit: DataFrame
    snapshot: InventorySnapshot
    inventory: DataFrame  # the newest inventory's current objects
    questions: list[Question]
    scope: list[str]  # the tables the report bounds
    replay: Replay
    roots: list[str]  # the tables whose logs were read
    now_ms: int
    pinned: PinnedRead | None = None  # the pins' versions and the files they read
    tables: dict[str, TableErasure] = field(default_factory=dict)  # every table read, by canonical root


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
    keep_versions: KeepVersions | None = None,
    pins_table: str | None = None,
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
        keep_versions: pinned versions, as ``vacuum_jobs.vacuum`` takes them: a file one reads is ``pinned``.
        pins_table: the pins table (``python -m vacuum_jobs pin`` writes it): its pins too.

    Returns:
        The :class:`ErasureReport`; ``ok`` is False where a table is over the deadline or a question went unanswered.

    Raises:
        ErasureError: the audit, inventory or pins table cannot be read.
    """
    options = ErasureOptions(audit_table, inventory_table, deadline_days, tables, now_ms, pins_given(keep_versions),
                             pins_table)
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

    @one_run
    def execute(self, paths: Sequence[str] = (), commits: Sequence[CommitQuestion] = ()) -> ErasureReport:
        gathered = self.read(paths, commits)
        try:
            return self.answer(gathered).report
        finally:
            gathered.replay.release()

    @one_run
    def read(self, paths: Sequence[str] = (), commits: Sequence[CommitQuestion] = (),
             audit: DataFrame | None = None, records: Sequence[CommitRecord] = ()) -> Gathered:
        """The audit (``audit``, where the caller read it already: :meth:`read_audit`), the newest
        inventory, the questions (of ``commits``, and of ``records`` the caller read already with
        :meth:`removing`) and the logs, not yet answered. The logs' actions stay persisted for
        every question asked of them: ``Gathered.replay.release()`` when done."""
        now_ms = epoch_ms() if self.options.now_ms is None else self.options.now_ms
        self.progress.restart()
        self.progress.begin(Step.READING_AUDIT, "reading the audit and the newest inventory")
        report = ErasureReport(iso_utc(now_ms), self.options.deadline_days)
        commits = [self.named(c) for c in commits]
        audit = self.read_audit() if audit is None else audit
        snapshot = self._newest_inventory()
        inventory = current_objects(snapshot.objects())
        with ThreadPoolExecutor(max_workers=1) as pool:
            audited = pool.submit(lambda: {r["table_root"] for r in audit.select("table_root").distinct().collect()})
            known_roots = sorted(set(delta_roots(inventory)) | audited.result())
        scope = ([uris.canonical(t) for t in self.options.tables]
                 if self.options.tables is not None else known_roots)
        questions = self._questions(paths, commits, records, sorted(set(known_roots) | set(scope)), report)
        roots = sorted(set(scope) | {q.table for q in questions if q.table})
        pinned = self._pinned(now_ms) if questions else None
        replay = self._replay_logs(roots)
        return Gathered(report, audit, snapshot, inventory, questions, scope, replay, roots, now_ms, pinned)

    @one_run
    def answer(self, gathered: Gathered) -> Gathered:
        """``gathered`` with its tables bounded and its questions answered.

        The queries that do not depend on each other's answers run as concurrent Spark jobs: each
        is small, and most of its time is the driver planning it."""
        with ThreadPoolExecutor(max_workers=1) as pool:
            tables = pool.submit(self._tables, gathered.roots, gathered.replay, gathered.audit, gathered.now_ms)
            facts = self._facts(gathered.questions, gathered.replay, gathered.audit, gathered.inventory,
                                gathered.snapshot, gathered.pinned)
            gathered.tables = tables.result()
        report = gathered.report
        report.tables = [gathered.tables[r] for r in gathered.scope]
        report.answers = [decide(q, gathered.tables.get(q.table) if q.table else None, facts.trail[q.path],
                                 facts.in_log[q.path], q.path in facts.listed, gathered.snapshot.day, gathered.now_ms,
                                 facts.versions.get(q.path), facts.pinned.get(q.path, ())) for q in gathered.questions]
        report.step_seconds = self.progress.seconds()
        return gathered

    def named(self, commit: CommitQuestion) -> CommitQuestion:
        """``commit`` with a catalog name for its table resolved to the table's location."""
        return CommitQuestion(catalog.resolve(self.spark, commit.table), commit.version)

    def read_audit(self) -> DataFrame:
        """The audit table as it is now; ErasureError where there is none."""
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

    def _questions(self, paths: Sequence[str], commits: Sequence[CommitQuestion], records: Sequence[CommitRecord],
                   roots: list[str], report: ErasureReport) -> list[Question]:
        found = []
        for path in paths:
            canonical = uris.canonical(path)
            found.append(Question(canonical, uris.owner(canonical, roots), "path"))
        for commit in commits:
            try:
                found += self._removed_files(self.removing(commit))
            except ValueError as exc:
                report.refused.append(str(exc))
        for record in records:
            found += self._removed_files(record)
        return found

    def removing(self, commit: CommitQuestion) -> CommitRecord:
        """The commit's record; UnreadableCommit naming its log file where it cannot be read or removed no file."""
        record = read_commit(self.storage, commit.table, commit.version)
        if not record.removed:
            raise UnreadableCommit(f"{record.log_file}: commit {commit.version} removed no files")
        return record

    @staticmethod
    def _removed_files(record: CommitRecord) -> list[Question]:
        """The data files a commit removed, asked as ``<canonical root>@<version>`` however the commit was
        named (a relative path, a catalog name); those it re-added with a deletion vector stay live."""
        asked = f"{record.table}@{record.version}"
        return [Question(path, record.table, asked, at, path in record.deletion_vectors)
                for path, at in sorted(record.removed.items())]

    def _replay_logs(self, roots: list[str]) -> Replay:
        self.progress.begin(Step.READING_LOGS, f"replaying {len(roots)} log(s)")
        return read_unsure_too(self.spark, self.storage, roots, persist_files=True)  # read again by each question

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
        vectors = replay.files.where((F.col("kind") == "add") & F.col("dv_storage_type").isNotNull()).groupBy(
            "table_root").agg(F.count(F.lit(1)).alias("files"), F.sum("size").alias("bytes"),
                              F.sum("dv_cardinality").alias("rows"))
        with ThreadPoolExecutor(max_workers=2) as pool:  # four small queries at once
            newest_job, vector_job = pool.submit(of_tables(newest, roots).collect), pool.submit(vectors.collect)
            purge_at_ms = self._purges(tables, audit, roots)
            newest_rows, vector_rows = newest_job.result(), vector_job.result()
        run_at_ms: dict[str, int] = {}
        for row in newest_rows:
            table, run = tables[row["table_root"]], row["run"]
            run_ms = run_at_ms[table.table] = run["at_ms"]
            table.last_deleting_run, table.last_deleting_run_at = run["run_id"], iso_utc(run_ms)
            table.last_run_inventory_date = run["inventory_date"].isoformat() if run["inventory_date"] else None
            if run["retention_hours"] is not None:
                table.retention_hours = run["retention_hours"]
            if run["inventory_date"] is not None:
                table.inventory_lag_hours = (run_ms - midnight_utc_ms(run["inventory_date"])) / MS_PER_HOUR
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
        for row in vector_rows:
            table = tables[row["table_root"]]
            table.files_with_deletion_vectors = row["files"]
            table.bytes_with_deletion_vectors = row["bytes"] or 0
            table.soft_deleted_rows = row["rows"] or 0
        return tables

    def _purges(self, tables: dict[str, TableErasure], audit: DataFrame, roots: list[str]) -> dict[str, int]:
        """Which tables' deletes can be undone (delete markers, a trash), and the newest purge run of each (of the
        lake, where none of its own recorded a row): its undo window and when it ran."""
        undoable = of_tables(audit.where(F.col("action").isin(*REMOVED)
                                         & F.coalesce("delete_marker_id", "trash_path").isNotNull())
                             .select("table_root").distinct(), roots)
        runs = audit.where(F.col("path").isNull() & (F.col("action") == AuditAction.TABLE_PURGED.value)).select(
            "table_root", "run_id", F.unix_millis("timestamp").alias("at_ms"),
            F.coalesce("undo_window_hours", "retention_hours").alias("window_hours"))  # older purges: retention_hours
        with ThreadPoolExecutor(max_workers=1) as pool:
            newest_job = pool.submit(runs.groupBy("table_root").agg(
                F.max_by(F.struct("run_id", "at_ms", "window_hours"), "at_ms").alias("run")).collect)
            for row in undoable.collect():
                tables[row["table_root"]].soft_deletes = True
            newest: dict[str, Any] = {row["table_root"]: row["run"] for row in newest_job.result()}
        lake = max(newest.values(), key=lambda run: run["at_ms"], default=None)
        at_ms = {}
        for table in tables.values():
            run = newest.get(table.table, lake)
            if table.soft_deletes and run is not None:
                table.last_purge_run, table.last_purge_run_at = run["run_id"], iso_utc(run["at_ms"])
                table.undo_window_days = (run["window_hours"] or 0.0) / 24
                at_ms[table.table] = run["at_ms"]
        return at_ms

    def _pinned(self, now_ms: int) -> PinnedRead | None:
        """The pins' versions read (None without pins); ErasureError where the pins table cannot be read."""
        try:
            return read_pins(self.spark, self.storage, self.progress, self.options.keep_versions, self.options.pins_table,
                             now_ms)
        except PinsUnreadable as exc:
            raise ErasureError(str(exc)) from None

    def _facts(self, questions: list[Question], replay: Replay, audit: DataFrame, inventory: DataFrame,
               snapshot: InventorySnapshot, pinned: PinnedRead | None = None) -> _Facts:
        """What the audit, the logs, the inventory and the pins say of each asked file (concurrent queries)."""
        facts = _Facts()
        if not questions:
            return facts
        self.progress.begin(Step.ANSWERING, f"answering for {len(questions)} file(s)")
        asked = local_frame(self.spark, sorted({(q.path,) for q in questions}), "path string")
        rows = audit.where(F.col("path").isNotNull()).select(
            uris.canonical_col(F.col("path")).alias("path"), "run_id", "action", F.unix_millis("timestamp").alias("at_ms"),
            "error", "version_id", "delete_marker_id", "trash_path", "source_run_id")
        with ThreadPoolExecutor(max_workers=4) as pool:
            trail = pool.submit(rows.join(F.broadcast(asked), "path").orderBy("at_ms").collect)
            in_log = pool.submit(replay.files.join(F.broadcast(asked), "path").collect)
            listed = pool.submit(inventory.select(uris.canonical_col(F.col("path")).alias("path"))
                                 .join(F.broadcast(asked), "path").collect)
            versions = pool.submit(self._versions, sorted({q.path for q in questions if q.path.startswith("s3://")}),
                                   snapshot)
            for path, *entry in trail.result():
                facts.trail[path].append(AuditEntry(*entry))
            for row in in_log.result():
                facts.in_log[row["path"]].append(LogEntry(row["kind"], row["table_root"], row["dv_storage_type"],
                                                          row["deletion_timestamp"]))
            facts.listed = {r["path"] for r in listed.result()}
            facts.versions = versions.result()
        if pinned is not None and pinned.files is not None:
            for row in pinned.files.join(F.broadcast(asked), "path").select("path", "pin").distinct().collect():
                facts.pinned[row["path"]].append(pinned.versions.statuses[pinned.labels[row["pin"]]])
        return facts

    def _versions(self, paths: list[str], snapshot: InventorySnapshot) -> dict[str, Versions]:
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
        listed: dict[str, list[ListedVersion]] = defaultdict(list)
        # An inventory table written before these fields were ingested has no lock to say.
        lock_columns = [F.col(name) if name in rows.columns else F.lit(None).cast(kind) for name, kind in (
            ("object_lock_retain_until_date", "timestamp"), ("object_lock_mode", "string"),
            ("object_lock_legal_hold_status", "string"))]
        lock_columns[0] = F.unix_millis(lock_columns[0])
        for path, version_id, length, modified_ms, marker, until_ms, mode, hold in rows.where(F.col("version_id").isNotNull()).select(
                uris.canonical_col(F.col("path")).alias("path"), "version_id", "length", "modificationTime",
                "is_delete_marker", *lock_columns).join(F.broadcast(asked), "path").collect():
            listed[path].append(ListedVersion(version_id, length, modified_ms, marker,
                                              Lock.of(version_id, until_ms, mode, hold)))
        return {path: Versions(kinds[bucket]["all_versions"], tuple(listed[path]))
                for path, bucket in bucket_of.items() if bucket in kinds and kinds[bucket]["versioned"]}
