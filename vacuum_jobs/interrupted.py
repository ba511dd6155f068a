"""Vacuum runs killed between their first delete and their audit append, settled by the next run.

Before its first delete a run notes the files it sets out to delete (and where ``--trash`` would
move each) in the audit table's journal, ``<audit>/_unrecorded/<run id>/intent/``, with the driver's
host and process id; the run's own append removes the note. A note still there belongs to a run
that died, once its process is gone (same host), or, in this very process, once the run has
ended (two runs at once in one driver: threads, a notebook), or a day has passed (another host:
a long run elsewhere may still be deleting). The next run against the audit table then looks at each noted
file: gone from its place (moved into the trash, or under a delete marker on a versioned S3
bucket) is recorded as that run's ``deleted``, with the marker or the trash path so that
``restore`` can undo it; a local file gone that the run's delete journal did not note was gone
before it, ``already_absent``; a file still there was never reached and gets no row. The killed
run's table rows say ``failed``: it never finished.

Two runs may settle one killed run at once. Its rows go in once (lakeio.audit.contract.record_kept claims the
append); only then are its delete journals removed and its VACUUM STARTs closed, with the counts the
audit holds, so that a run that lost the append cannot have read the journals half gone, and one END
closes each START (vacuum_jobs.history).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import date, timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.audit import journal as audit_journal
from lakeio.audit.contract import AuditAction, RunTable, Settled, check_audit_table, record_kept, run_rows
from lakeio.audit.journal import journal_of, prove_writable
from lakeio.spark.shapes import OUTCOMES, local_frame
from lakeio.spark.steps import Steps
from lakeio.store import put_if_absent, s3, uris
from lakeio.store.filesystem import Storage
from lakeio.tables.write import BeforeCommit
from lakeio.text import first_line
from lakeio.times import epoch_ms
from vacuum_jobs.delete_tasks import where_reachable
from vacuum_jobs.deletes import DeleteSettings, RowDict
from vacuum_jobs.history import HistoryOf, close_killed_run, history_writer
from vacuum_jobs.local_deletes import DeleteJournal

log = logging.getLogger(__name__)
# A run on another host noted this long ago is taken as dead.
DEAD_AFTER = timedelta(days=1)
# Runs of this process that have noted their intent and not ended yet.
_RUNNING: set[str] = set()
_RUNNING_LOCK = threading.Lock()


def ready_audit(spark: SparkSession, audit_table: str, settings: DeleteSettings, history_of: HistoryOf, steps: Steps,
                before_commit: BeforeCommit | None = None) -> list[str]:
    """Before a vacuum, restore or purge changes anything: the audit table can take its rows (its schema, a
    write in its folder, commits there put only if absent: IncompatibleTable, AuditUnwritable or
    lakeio.store.put_if_absent.PutIfAbsentUnproven otherwise), and the runs kept for it are
    appended first, a killed run's note settled into the rows of what it did (:func:`settler`, which
    closes its VACUUM START as ``history_of`` decides). Returns what could not be appended: kept for the
    next run, and said in this run's report."""
    check_audit_table(spark, audit_table)
    prove_writable(spark, audit_table)
    if not put_if_absent.deltalake_locks_commits():
        put_if_absent.prove(journal_of(audit_table), f"the audit table {audit_table}'s",
                            lambda: settings.s3_client(retrying=False))
    try:
        recorded = record_kept(spark, audit_table, settle=settler(spark, settings, history_of, journal_of(audit_table)),
                               before_commit=before_commit)
    except Exception as exc:  # noqa: BLE001 - still kept: the next run tries again
        return [f"runs kept in {journal_of(audit_table)} could not be appended: {first_line(exc)}"]
    if recorded.runs:
        steps(f"appended {len(recorded.runs)} earlier run(s) the audit table had not taken: " + ", ".join(recorded.runs))
    return recorded.problems


def note_intent(spark: SparkSession, audit_table: str, run_id: str, targets: DataFrame, trash: str | None,
                inventory_date: date | None, versions: dict[str, int]) -> None:
    """Note the files ``targets`` (shapes.CANDIDATES, with ``version_id`` on S3) before deleting any, each
    with the version its table was planned from (``versions``: where a later run looks for its VACUUM
    START); the run counts as running in this process until :func:`run_ended`."""
    with _RUNNING_LOCK:
        _RUNNING.add(run_id)
    planned = local_frame(spark, sorted(versions.items()), "table_root string, table_version long")
    version = F.col("version_id") if "version_id" in targets.columns else F.lit(None).cast("string")
    moved = (F.concat(F.lit(uris.join(uris.to_uri(trash), run_id) + "/"),
                      F.regexp_replace("path", r"^[a-z0-9+.\-]*:/*", "")) if trash else F.lit(None).cast("string"))
    targets.join(F.broadcast(planned), "table_root", "left").select(
                   "table_root", "path", "length", "modificationTime", version.alias("version_id"),
                   moved.alias("trash_path"), F.lit(socket.gethostname()).alias("host"),
                   F.lit(os.getpid()).alias("pid"), F.lit(epoch_ms()).alias("noted_ms"),
                   F.lit(inventory_date).cast("date").alias("inventory_date"), "table_version",
                   ).write.mode("overwrite").parquet(uris.join(audit_journal.journal_of(audit_table), run_id,
                                                                audit_journal.INTENT))


def run_ended(run_id: str) -> None:
    """The run has ended, recorded or not: a note it left is for the next run to read back."""
    with _RUNNING_LOCK:
        _RUNNING.discard(run_id)


def forget_intent(spark: SparkSession, audit_table: str, run_id: str) -> None:
    """The run's rows are in the audit: its note goes."""
    audit_journal.drop(spark, audit_table, run_id)


def settler(spark: SparkSession, settings: DeleteSettings, history_of: HistoryOf,
            proof_folder: str | None) -> Callable[[DataFrame, str], Settled | None]:
    """What :func:`lakeio.audit.contract.record_kept` calls on a run that left only its note: the rows of
    what it did (None while it may still be running). Once the audit holds them, its delete journals
    go, and a VACUUM START it left open is closed where ``history_of`` (the settling run's rule and
    gates, on each table's state now) allows."""

    def settle(intent: DataFrame, run_id: str) -> Settled | None:
        owner = intent.select("host", "pid", "noted_ms", "inventory_date").first()
        if owner is None or _may_be_running(owner["host"], owner["pid"], owner["noted_ms"], run_id):
            return None
        outcomes = where_reachable(spark, intent, OUTCOMES.schema,
                                   lambda rows, _: _looked_at(rows, settings, run_id, None),
                                   lambda rows: _looked_at(rows, settings, run_id, Storage(spark))
                                   ).localCheckpoint(eager=True)  # looked at once, before the journals go
        planned = _planned_versions(intent)
        roots = sorted(planned)

        def finish(deleted: dict[str, int]) -> None:
            DeleteJournal.remove(Storage(spark), roots, run_id)
            for root, why in close_killed_run(spark, history_writer(settings, proof_folder=proof_folder), run_id, planned, deleted,
                                              history_of).items():
                log.warning("run %s left a VACUUM START in %s that could not be closed: %s", run_id, root, why)

        why = "killed before it recorded: its deletes were read back from its note by a later run"
        tables = [RunTable(root, AuditAction.TABLE_FAILED, why) for root in roots]
        return Settled(run_rows(spark, run_id, owner["noted_ms"], tables, outcomes, owner["inventory_date"]), finish)

    return settle


def _planned_versions(intent: DataFrame) -> dict[str, int | None]:
    """Each noted table and the version the run planned it from (None in a note written before the notes named it)."""
    if "table_version" not in intent.columns:
        return {r["table_root"]: None for r in intent.select("table_root").distinct().collect()}
    return {r["table_root"]: r["table_version"] for r in intent.select("table_root", "table_version").distinct().collect()}


def _may_be_running(host: str, pid: int, noted_ms: int, run_id: str) -> bool:
    if host == socket.gethostname():
        if pid == os.getpid():
            with _RUNNING_LOCK:
                return run_id in _RUNNING
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process of that number: alive
            return True
        return True
    return noted_ms > (time.time() - DEAD_AFTER.total_seconds()) * 1000


def _looked_at(rows: Iterable[RowDict], settings: DeleteSettings, run_id: str, storage: Storage | None
               ) -> Iterator[tuple[object, ...]]:
    """The outcome of each noted file that is no longer in its place (one task's share, or the
    driver's through Hadoop for other stores)."""
    client = None
    journals: dict[str, DeleteJournal] = {}
    now_ms = epoch_ms()
    for row in rows:
        path, trash = row["path"], row["trash_path"]
        marker = None
        if path.startswith("s3:"):
            client = client or settings.s3_client()
            versions = s3.key_versions(client, path)
            latest = next((v for v in versions if v["IsLatest"]), None)
            if latest is not None and not latest["marker"]:
                continue  # still there
            marker = latest["VersionId"] if latest is not None else None
            action = AuditAction.DELETED
        else:
            exists = storage.exists if storage is not None else (lambda u: os.path.lexists(uris.local_path(u)))
            if exists(path):
                continue
            if trash and exists(trash):
                action = AuditAction.DELETED
            elif storage is not None:
                action, trash = AuditAction.DELETED, None
            else:
                journal = journals.setdefault(row["table_root"], DeleteJournal(row["table_root"], run_id))
                action, trash = journal.gone(path), None
        yield (row["table_root"], path, row["length"], row["modificationTime"], action.value,
               "read back after the run was killed", now_ms, row["version_id"] if marker else None, marker, trash)
