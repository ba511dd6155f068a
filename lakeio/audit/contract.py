"""The vacuum audit table's contract: job 2 appends to it, erasure evidence reads it.

Each run appends one row per table (``path`` null, ``action`` ``table_<status>``, ``error``
the reason) and one row per planned file: what happened to it, and when. On a versioned S3
bucket a file's row also names the version its delete hid (``version_id``) and the delete
marker that hides it (``delete_marker_id``); with a trash folder, where the file went
(``trash_path``): what ``restore`` undoes and ``purge`` erases. Their rows name the vacuum
run whose delete they undo or finish (``source_run_id``). A vacuum's table row carries the
SHA-256 of the table's commit file at the version it planned from (``log_sha256``), and where the plan
proved the table settled, what the next run needs to carry it forward unread (``plan_state``, JSON:
vacuum_jobs.carry_forward).

Every row is chained to the one before it by a SHA-256 (``seq``, ``prev_hash``, ``row_hash``, and
``chain_version`` for how it was made; see :mod:`lakeio.audit.chain`), so that an edited or deleted
row shows.

The columns from ``version_id`` on came later (``LATER_COLUMNS``): a table written before them
gains them (null in old rows) on its next append, and :func:`read_audit` reads them as null until then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.audit import chain as audit_chain
from lakeio.audit import journal as audit_journal
from lakeio.deltalog.commits import commit_file
from lakeio.spark.shapes import OUTCOMES, local_frame
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.tables.read import TableNotFound, partition_values, read_delta
from lakeio.tables.write import COMMIT_ATTEMPTS, BeforeCommit, CommitLost, check_target, open_table, write_delta
from lakeio.text import StrEnum, first_line

log = logging.getLogger(__name__)

AUDIT_COLUMNS = (
    "run_id string, table_root string, table_version long, path string, length long, modificationTime long, "
    "action string, error string, timestamp timestamp, inventory_date date, retention_hours double, run_date date, "
    "version_id string, delete_marker_id string, trash_path string, source_run_id string, log_sha256 string, "
    "undo_window_hours double, plan_state string, seq long, prev_hash string, row_hash string, chain_version int"
)
AUDIT_PARTITIONS = ("run_date",)
# Null in rows written before them.
LATER_COLUMNS = ("version_id", "delete_marker_id", "trash_path", "source_run_id", "log_sha256", "undo_window_hours",
                 "seq", "prev_hash", "row_hash", "chain_version", "plan_state")


class TableStatus(StrEnum):
    """Where a table of a vacuum run ended; ``pending`` only until the run decides."""

    PENDING = "pending"
    VACUUMED = "vacuumed"
    DRY_RUN = "dry_run"
    SKIPPED = "skipped"
    DEFERRED = "deferred"  # planned, left for a later run by the run's budget or its time (vacuum_jobs.budget)
    REFUSED = "refused"
    FAILED = "failed"


FINAL_STATUSES = tuple(s for s in TableStatus if s is not TableStatus.PENDING)


class AuditAction(StrEnum):
    """An audit row's ``action``: what happened to a planned file, or how its table's run ended."""

    WOULD_DELETE = "would_delete"  # planned in a dry run
    DELETED = "deleted"
    ALREADY_ABSENT = "already_absent"  # the store says it was gone before the delete
    # gone after the run's delete, which the store took without saying whether the key was there (S3 without
    # conditional deletes: lakeio.store.delete_if_present); not counted as deleted, nor as absent
    DELETED_OR_ABSENT = "deleted_or_absent"
    FAILED = "failed"
    DEFERRED = "deferred"  # planned, never asked for: the run's time ran out first (--max-minutes, vacuum_jobs.budget)
    TABLE_VACUUMED = "table_vacuumed"
    TABLE_DRY_RUN = "table_dry_run"
    TABLE_SKIPPED = "table_skipped"
    TABLE_DEFERRED = "table_deferred"
    TABLE_REFUSED = "table_refused"
    TABLE_FAILED = "table_failed"
    # restore and purge (vacuum_jobs.restore_purge): per file, then one row per table (a purge's rows carry
    # its undo window in ``undo_window_hours``; before that column, in ``retention_hours``)
    WOULD_RESTORE = "would_restore"  # a dry run's: the file is as the run left it
    WOULD_PURGE = "would_purge"
    RESTORED = "restored"  # back: the run's delete marker removed, or moved back from the trash
    NOT_RESTORED = "not_restored"  # left alone: ``error`` says why (written again since, ...)
    PURGED = "purged"  # what the delete kept (the hidden version, the trash copy) deleted for good
    NOT_PURGED = "not_purged"  # left alone: ``error`` says why (current again, ...)
    TABLE_RESTORED = "table_restored"
    TABLE_PURGED = "table_purged"

    @classmethod
    def for_table(cls, status: TableStatus) -> AuditAction:
        return cls(f"table_{status}")


# What a run's delete of a file may have removed: restore, purge and the erasure evidence act on either.
REMOVED = (AuditAction.DELETED.value, AuditAction.DELETED_OR_ABSENT.value)
# Runs that deleted files (dry runs do not): what bounds an erasure.
DELETING_RUNS = (AuditAction.TABLE_VACUUMED, AuditAction.TABLE_FAILED)


@dataclass(frozen=True)
class RunTable:
    """One table's row of a run: how the run ended for it."""

    table_root: str  # canonical
    action: AuditAction
    reason: str | None = None
    version: int | None = None  # the table version planned from
    retention_hours: float | None = None  # a vacuum's retention
    log_sha256: str | None = None  # of the table's commit file at ``version``
    source_run_id: str | None = None  # the vacuum run a restore or purge acted on here (default: the append's)
    undo_window_hours: float | None = None  # a purge's: deletes younger than this stayed restorable
    plan_state: str | None = None  # a vacuum's, where its plan proved the table settled (vacuum_jobs.carry_forward)

    def __post_init__(self) -> None:
        # A whole number of hours (``retention_hours=0``, ``retention_hours: 336`` in a tables file) goes into a
        # double column: Spark refuses a Python int there, after the deletes it would record.
        for name in ("retention_hours", "undo_window_hours"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))


def check_audit_table(spark: SparkSession, audit_table: str) -> None:
    """Raise delta_write.IncompatibleTable unless ``audit_table`` can take a run's rows (empty, or
    an audit table of ours): checked before a run changes anything, so that nothing goes unrecorded."""
    check_target(spark, spark.createDataFrame([], AUDIT_COLUMNS).schema, audit_table, AUDIT_PARTITIONS)


def append_run(spark: SparkSession, audit_table: str, run_id: str, started_ms: int, tables: Sequence[RunTable],
               outcomes: DataFrame | None, inventory_date: date | None = None,
               source_run_id: str | None = None, *, before_commit: BeforeCommit | None = None,
               outcome_rows: int | None = None) -> None:
    """Append one run, in one chained append: a row per table (``path`` null) and a row per file of
    ``outcomes`` (shapes.OUTCOMES), carrying its table's version and retention. ``source_run_id``:
    the vacuum run a restore or purge acts on, unless a table (``RunTable.source_run_id``) or an
    outcome (a ``source_run_id`` column) names its own: one purge catching up on several vacuum runs
    is still one run of the chain. The rows are chained after the table's head (lakeio.audit.chain):
    two runs appending at once fork the chain, which verifying reports. When the append fails, the
    rows are kept for the next run (lakeio.audit.journal) and :class:`AuditNotRecorded` says where.
    ``before_commit``: see lakeio.tables.write.write_delta. ``outcome_rows``: about how many rows ``outcomes``
    holds, where the caller knows (a small run is chained on the driver: lakeio.audit.chain.chain_run)."""
    rows = run_rows(spark, run_id, started_ms, tables, outcomes, inventory_date, source_run_id)
    unknown = outcomes is not None and outcome_rows is None
    at_most = None if unknown else len(tables) + (outcome_rows or 0)
    try:
        append_rows(spark, audit_table, rows, rows_date(started_ms), before_commit=before_commit, at_most=at_most)
    except Exception as exc:  # whatever the store says: the run's deletes must not go unrecorded
        raise audit_journal.keep(spark, audit_table, run_id, rows, first_line(exc)) from None


def rows_date(started_ms: int) -> date:
    """A run's ``run_date``: the UTC day it started."""
    return datetime.fromtimestamp(started_ms / 1000, tz=timezone.utc).date()


def run_rows(spark: SparkSession, run_id: str, started_ms: int, tables: Sequence[RunTable],
             outcomes: DataFrame | None, inventory_date: date | None = None,
             source_run_id: str | None = None) -> DataFrame:
    """One run's rows, not chained yet (see :func:`append_run`)."""
    started = datetime.fromtimestamp(started_ms / 1000, tz=timezone.utc)
    rows = local_frame(
        spark,
        [(run_id, t.table_root, t.version, None, None, None, t.action.value, t.reason, started, inventory_date,
          t.retention_hours, started.date(), None, None, None, t.source_run_id or source_run_id, t.log_sha256,
          t.undo_window_hours, t.plan_state)
         for t in tables],
        _UNCHAINED)
    if outcomes is not None:
        OUTCOMES.check(outcomes)
        sources = F.col("source_run_id") if "source_run_id" in outcomes.columns else F.lit(source_run_id)
        # Once per table, whatever the sources.
        per_table = {t.table_root: (t.version, t.retention_hours, t.undo_window_hours) for t in tables}
        facts = local_frame(spark, [(root, *fact) for root, fact in per_table.items()],
                            "table_root string, table_version long, retention_hours double, undo_window_hours double")
        rows = rows.unionByName(outcomes.join(F.broadcast(facts), "table_root", "left").select(
            F.lit(run_id).alias("run_id"), "table_root", "table_version", "path", "length",
            "modificationTime", "action", "error", (F.col("at_ms") / 1000).cast("timestamp").alias("timestamp"),
            F.lit(inventory_date).cast("date").alias("inventory_date"), "retention_hours",
            F.lit(started.date()).alias("run_date"), "version_id", "delete_marker_id", "trash_path",
            sources.cast("string").alias("source_run_id"), F.lit(None).cast("string").alias("log_sha256"),
            "undo_window_hours", F.lit(None).cast("string").alias("plan_state"),
        ))
    return rows


def append_rows(spark: SparkSession, audit_table: str, rows: DataFrame, run_date: date, *,
                before_commit: BeforeCommit | None = None, read_version: int | None = None,
                at_most: int | None = None) -> None:
    """Chain one run's rows (``_UNCHAINED``, all of ``run_date``; about ``at_most`` of them, where known) after the
    table's head and append them; with ``read_version``, the head as of that version and the commit right after
    it, or delta_write.CommitLost."""
    chained = audit_chain.chain_run(rows, head(spark, audit_table, read_version), at_most=at_most)
    write_delta(chained, audit_table, AUDIT_PARTITIONS, [{"run_date": run_date.isoformat()}], mode="append",
                before_commit=before_commit, read_version=read_version)


@dataclass(frozen=True)
class Settled:
    """A killed run's rows, made from its note, and what is left to do once the audit holds them, whichever
    run's append put them there: ``finish`` is told the run's deleted files per table as the audit holds them."""

    rows: DataFrame
    finish: Callable[[dict[str, int]], None]


@dataclass
class Recorded:
    """What :func:`record_kept` did: the runs it appended, and the kept folders it could not read."""

    runs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def record_kept(spark: SparkSession, audit_table: str, journal: str | None = None,
                settle: Callable[[DataFrame, str], Settled | None] | None = None, *,
                before_commit: BeforeCommit | None = None) -> Recorded:
    """Append every run kept in ``journal`` (default: the audit table's own, lakeio.audit.journal) to
    the audit table, the earliest first, each in one chained append, and remove each once it is in;
    a kept run the audit already holds is removed, not appended again. A run that left only the
    files it set out to delete (killed before it recorded) becomes the rows ``settle`` makes of them
    (None: it may still be running, and stays). Each append is claimed: it goes in only right after the
    version at which the audit was seen not to hold the run, so two runs recording one kept run at
    once record it once (:func:`_append_unless_held`). Raises what the append raises."""
    storage = Storage(spark)
    folder = uris.to_uri(journal) if journal else audit_journal.journal_of(audit_table)
    done = Recorded()
    runs = [entry.uri for entry in storage.list(folder) if entry.is_dir]
    pending = []
    for kept in runs:
        run_id = uris.name(kept)
        # A part with no data file yet (a note still being written, or the empty folders a store keeps as
        # markers of one removed) holds nothing to read: passed by, not an unreadable folder.
        parts = {uris.name(e.uri) for e in storage.list(kept) if e.is_dir and _holds_data(storage, e.uri)}
        finish = None
        try:
            if audit_journal.ROWS in parts:
                rows = spark.read.schema(_UNCHAINED).parquet(uris.join(kept, audit_journal.ROWS))
            elif audit_journal.INTENT in parts and settle is not None:
                settled = settle(spark.read.parquet(uris.join(kept, audit_journal.INTENT)), run_id)
                if settled is None:
                    continue
                rows, finish = settled.rows.localCheckpoint(eager=True), settled.finish  # checked once: the store moves on
            else:
                continue
            first, run_date = rows.agg(F.min("timestamp"), F.min("run_date")).collect()[0]
        except Exception as exc:  # noqa: BLE001 - one unreadable folder must not keep the others out
            done.problems.append(f"{kept}: cannot read the kept rows: {first_line(exc)}")
            continue
        pending.append((first, run_id, kept, rows, run_date, finish))
    for _, run_id, kept, rows, run_date, finish in sorted(pending, key=lambda p: (p[0] is None, p[0] or 0, p[1])):
        if run_date is not None and _append_unless_held(spark, audit_table, run_id, rows, run_date, before_commit):
            log.warning("recorded run %s in %s from %s, kept there when its own append failed or never came",
                        run_id, audit_table, kept)
            done.runs.append(run_id)
        if finish is not None:
            finish(_deleted_per_table(spark, audit_table, run_id))
        audit_journal.drop(spark, audit_table, run_id, journal)
    return done


def _append_unless_held(spark: SparkSession, audit_table: str, run_id: str, rows: DataFrame, run_date: date,
                        before_commit: BeforeCommit | None) -> bool:
    """Append a kept run's rows unless the audit holds the run, decided at the version the append goes after:
    where another writer committed first, the audit is read again. Whether this call appended them."""
    for _ in range(COMMIT_ATTEMPTS):
        table = open_table(uris.to_uri(audit_table))
        version = table.version() if table is not None else -1
        # A run's rows all lie in its run_date's partition: only that one is read.
        if version >= 0 and read_delta(spark, audit_table, {"run_date": run_date.isoformat()}, version=version).where(
                F.col("run_id") == run_id).limit(1).count():
            return False
        try:
            append_rows(spark, audit_table, rows, run_date, before_commit=before_commit, read_version=version)
            return True
        except CommitLost:
            continue
    raise CommitLost(f"{audit_table}: {COMMIT_ATTEMPTS} appends of run {run_id} in a row lost to other writers")


def _holds_data(storage: Storage, folder: str) -> bool:
    """Whether ``folder`` holds a data file of its own (not a hidden ``_``/``.`` one, as a write in progress leaves)."""
    return any(not e.is_dir and not uris.name(e.uri).startswith(("_", ".")) for e in storage.list(folder))


def _deleted_per_table(spark: SparkSession, audit_table: str, run_id: str) -> dict[str, int]:
    """The files the audit holds as deleted by run ``run_id``, per table."""
    try:
        audit = read_audit(spark, audit_table)
    except TableNotFound:
        return {}
    rows = audit.where((F.col("run_id") == run_id) & (F.col("action") == AuditAction.DELETED.value))
    return {r["table_root"]: r["count"] for r in rows.groupBy("table_root").count().collect()}


def head(spark: SparkSession, audit_table: str, version: int | None = None) -> audit_chain.Head | None:
    """The audit table's chain head (as of ``version``; default: its newest); None for no table (or version
    -1), or one written before the chain."""
    if version is not None and version < 0:
        return None
    try:
        rows = read_audit(spark, audit_table, version)
    except TableNotFound:
        return None
    run_dates = {d if isinstance(d, date) else date.fromisoformat(str(d))
                 for d in partition_values(audit_table, "run_date", version) if d is not None}
    return audit_chain.chain_head(rows, max(run_dates) if run_dates else None)


def verify_chain(spark: SparkSession, audit_table: str, expected_head: str | None = None) -> audit_chain.ChainCheck:
    """Check the audit table's hash chain (lakeio.audit.chain.verify). Raises delta_read.TableNotFound."""
    return audit_chain.verify(read_audit(spark, audit_table), expected_head)


def commit_file_hashes(spark: SparkSession, versions: dict[str, int]) -> dict[str, str]:
    """The SHA-256 of each table's commit file ``_delta_log/<version>.json`` (``versions``: table root to
    version), read in one Spark job per file system. A file that is gone (log cleanup), or a file system
    that cannot be read, leaves its tables out: the audit is written whatever happens here."""
    files = {uris.canonical(commit_file(root, version)): root
             for root, version in versions.items()}
    by_scheme: dict[str | None, list[str]] = {}
    for f in sorted(files):
        by_scheme.setdefault(uris.scheme_of(f), []).append(f)
    hashes = {}
    for scheme, group in by_scheme.items():
        try:
            found = (spark.read.format("binaryFile").option("ignoreMissingFiles", "true")
                     .load([uris.literal(f) for f in group])
                     .select(uris.canonical_col(F.col("path")).alias("path"), F.sha2("content", 256).alias("sha256"))
                     .collect())
        except Exception as exc:  # noqa: BLE001 - evidence we cannot add must not cost the run its audit
            log.warning("commit file hashes of %d table(s) on %s left out: %s", len(group), scheme, first_line(exc))
            continue
        hashes.update({files[r["path"]]: r["sha256"] for r in found if r["path"] in files})
    return hashes


def read_audit(spark: SparkSession, audit_table: str, version: int | None = None) -> DataFrame:
    """Every audit row (as of ``version``; default: the newest), with the later columns null where the table
    predates them. Raises delta_read.TableNotFound when there is no table."""
    rows = read_delta(spark, audit_table, version=version)
    for name in LATER_COLUMNS:
        if name not in rows.columns:
            rows = rows.withColumn(name, F.lit(None).cast(_TYPES[name]))
    return rows


_TYPES = {name: kind for name, kind in (column.split() for column in AUDIT_COLUMNS.split(", "))}
_UNCHAINED = ", ".join(f"{name} {kind}" for name, kind in _TYPES.items()
                       if name not in ("seq", "prev_hash", "row_hash", "chain_version"))
