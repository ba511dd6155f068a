"""A run's audit rows that the audit table could not take: kept beside it, appended later.

A run that deletes must leave a record of every delete. Before its first delete it proves the
audit table's folder writable (:func:`prove_writable`); should the append still fail after the
deletes (a disk filling up, a permission revoked mid-run, a store that stops answering), the
run's rows are kept as Parquet in ``<audit table>/_unrecorded/<run id>/`` (a folder no Delta
reader or vacuum looks into), or, when even that fails, in a folder on the driver's own disk.
The next run against the audit table appends what its folder keeps, in the order the runs
happened, before anything of its own; ``python -m vacuum_jobs record`` does the same for a
folder named by hand. A kept run the audit already holds (its append landed, then failed) is
dropped, not appended twice. Beside a run's kept ``rows/`` its ``intent/`` may lie: the files it
set out to delete, noted before the first (vacuum_jobs.interrupted reads them back when the run
died before it recorded).
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from lakeio.errors import HousekeepingError
from lakeio.spark.jvm_archive import cache_dir
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.text import first_line

log = logging.getLogger(__name__)

FOLDER = "_unrecorded"
ROWS = "rows"  # a run's rows, kept when its append failed
INTENT = "intent"  # the files a run sets out to delete, noted before the first (vacuum_jobs.interrupted)


class AuditUnwritable(HousekeepingError):
    """The audit table's folder cannot be written: refused before anything is deleted."""


class AuditNotRecorded(HousekeepingError):
    """A run's append failed; its rows are kept where the message says, for the next run to append."""


def journal_of(audit_table: str) -> str:
    """The folder where runs the audit table could not take are kept."""
    return uris.join(uris.to_uri(audit_table), FOLDER)


def prove_writable(spark: SparkSession, audit_table: str) -> None:
    """Write and remove a small file in the audit table's journal folder (as its Parquet writes
    would create it), or raise :class:`AuditUnwritable` with the store's reason."""
    storage = Storage(spark)
    journal = journal_of(audit_table)
    probe = uris.join(journal, f".probe-{uuid.uuid4().hex}")
    try:
        storage.write_bytes(probe, b"can the audit be written here?\n")
        storage.delete(probe)
        storage.remove_if_empty(journal)
    except Exception as exc:
        raise AuditUnwritable(f"audit table {audit_table} cannot be written: {first_line(exc)}") from None


def keep(spark: SparkSession, audit_table: str, run_id: str, rows: DataFrame, why: str) -> AuditNotRecorded:
    """Keep a run's unchained rows after its append failed (``why``); the error to raise, saying
    where they are and what records them."""
    kept = uris.join(journal_of(audit_table), run_id)
    try:
        rows.write.mode("overwrite").parquet(uris.join(kept, ROWS))
        then = "the next run against the audit table appends them first"
    except Exception as beside_failed:  # noqa: BLE001 - the driver's own disk is the last place left
        journal = os.path.join(cache_dir(), "unrecorded", hashlib.sha256(audit_table.encode()).hexdigest()[:16])
        kept = os.path.join(journal, run_id)
        try:
            pq.write_table(_collected(rows), os.path.join(_fresh(os.path.join(kept, ROWS)), "part-0.parquet"))
        except Exception as local_failed:  # noqa: BLE001
            return AuditNotRecorded(
                f"audit table {audit_table} did not take run {run_id} ({why}), and its rows could be kept neither "
                f"beside it ({first_line(beside_failed)}) nor on this machine ({first_line(local_failed)}): the "
                "report is the only record of this run's deletes")
        then = f"append them with: python -m vacuum_jobs record --audit-table {audit_table} --journal {journal}"
    log.warning("audit table %s did not take run %s: %s; rows kept in %s", audit_table, run_id, why, kept)
    return AuditNotRecorded(f"audit table {audit_table} did not take run {run_id}: {why}; its rows are kept in "
                            f"{kept}: {then}")


def drop(spark: SparkSession, audit_table: str, run_id: str, journal: str | None = None) -> None:
    """A run's kept rows or note are in the audit table: its folder goes, and the journal folder while it
    holds nothing else (another run's note written meanwhile stays: :meth:`Storage.remove_if_empty`)."""
    storage = Storage(spark)
    folder = uris.to_uri(journal) if journal else journal_of(audit_table)
    storage.delete(uris.join(folder, run_id), recursive=True)
    if journal is None:
        storage.remove_if_empty(folder)


def _collected(rows: DataFrame) -> pa.Table:
    """The rows on the driver as Arrow, every column's type kept (Spark 3.5 lacks the public call)."""
    if hasattr(rows, "toArrow"):
        return rows.toArrow()
    return pa.Table.from_batches(rows._collect_as_arrow())  # type: ignore[operator]  # Spark 3.5's private call


def _fresh(folder: str) -> str:
    os.makedirs(folder, exist_ok=True)
    return folder
