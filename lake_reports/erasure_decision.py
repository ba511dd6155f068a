"""Where a file stands on its way to erasure: the decision, over typed records, without Spark.

:mod:`lake_reports.erasure_evidence` gathers each asked file's audit rows, log rows and listed
versions; :func:`decide` turns them into an :class:`ErasureStatus` with the words that explain it.
That module's docstring says when each status applies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING

from lakeio.audit.contract import REMOVED, AuditAction
from lakeio.pins import PinSource
from lakeio.store.object_lock import Lock
from lakeio.text import StrEnum, human_bytes
from lakeio.times import hours_ms, iso_utc

if TYPE_CHECKING:  # a record the evidence gathers; the decision runs no Spark
    from lakeio.deltalog.pinned import PinStatus


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
    PINNED = "pinned"
    WITHIN_RETENTION = "within_retention"
    DELETE_FAILED = "delete_failed"
    LOCKED = "locked"
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
                          ErasureStatus.REFERENCED_ELSEWHERE, ErasureStatus.PINNED, ErasureStatus.DELETE_FAILED,
                          ErasureStatus.LOCKED, ErasureStatus.NOT_IN_A_TABLE})


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
    asked_as: str  # "path", or "<canonical table root>@<version>" for a commit's files
    status: ErasureStatus
    detail: str
    when: str | None = None  # erased_at, failed_at, or eligible_from (see status)
    run_id: str | None = None

@dataclass
class Question:
    """A file asked about: by its path, or as one a commit removed."""

    path: str  # canonical
    table: str | None
    asked_as: str
    removed_at_ms: int | None = None  # from the commit that removed it, when asked by commit
    soft_deleted: bool = False  # the commit re-added it with a deletion vector


@dataclass(frozen=True)
class AuditEntry:
    """One audit row naming the file: what a run did to it."""

    run_id: str
    action: str
    at_ms: int
    error: str | None = None
    version_id: str | None = None
    delete_marker_id: str | None = None
    trash_path: str | None = None
    source_run_id: str | None = None  # a restore's or a purge's vacuum run


@dataclass(frozen=True)
class LogEntry:
    """One row of a table's replayed log naming the file (``kind``: add or remove)."""

    kind: str
    table_root: str
    dv_storage_type: str | None = None
    deletion_timestamp: int | None = None


@dataclass(frozen=True)
class ListedVersion:
    """A version or delete marker of a key, as the newest inventory lists it."""

    version_id: str
    length: int | None
    modified_ms: int | None
    is_delete_marker: bool | None
    lock: Lock | None = None  # what S3 Object Lock keeps of it, as the inventory lists it


Answer = Callable[..., "FileAnswer"]  # (status, detail, when, run_id) -> the file's answer


@dataclass(frozen=True)
class Versions:
    """What the newest inventory lists of one key in a versioned S3 bucket."""

    all_versions: bool  # an all-versions configuration lists the bucket: a missing version is gone
    rows: tuple[ListedVersion, ...]  # the key's versions and delete markers


# What a purge run did to a vacuum run's delete: erased what it kept, or found it gone.
_PURGING = (AuditAction.PURGED, AuditAction.ALREADY_ABSENT)


def _deleted(answer: Answer, run_row: AuditEntry, finished: AuditEntry | None, table: TableErasure | None, versions: Versions | None,
             inventory_date: date, now_ms: int, left_by: AuditEntry | None = None) -> FileAnswer:
    """A file a run deleted: erased, unless a versioned bucket may still hold its bytes.
    ``finished``: the restore or purge row that acted on that delete, if any; ``left_by``: the newest
    restore or purge row that left it alone (kept by a rule, or its delete failed: its ``error`` says why)."""
    run_id, at = run_row.run_id, iso_utc(run_row.at_ms)
    deleted = (f"deleted at {at} by vacuum run {run_id}" if run_row.action == AuditAction.DELETED else
               f"gone at {at}, when vacuum run {run_id} deleted it or found it already gone (the store's answer to "
               "its delete cannot tell which)")
    marker = run_row.delete_marker_id
    trash = run_row.trash_path
    kept = f"moved to the trash ({trash})" if trash else f"delete marker {marker}"
    if finished is not None and finished.action == AuditAction.RESTORED:
        done_at, by = iso_utc(finished.at_ms), finished.run_id
        return answer(ErasureStatus.RESTORED, f"{deleted} ({kept}); restored at {done_at} by restore run {by}: its bytes are "
                      "back", done_at, by)
    if trash is None and (locks := _locks(versions, run_row, now_ms)):
        return _locked(answer, deleted if marker is None else f"{deleted} ({kept})", locks, run_row, inventory_date,
                       now_ms)
    if finished is not None:
        done_at, by = iso_utc(finished.at_ms), finished.run_id
        purged = (f"{deleted} ({kept}); erased at {done_at} by purge run {by}, which deleted "
                  + ("its copy in the trash" if trash else f"the version it hid ({finished.version_id}) and the "
                     "older versions of its key")
                  if finished.action == AuditAction.PURGED else
                  f"{deleted} ({kept}); purge run {by} found nothing of it left at {done_at} (a lifecycle rule or "
                  "another tool removed it)")
        if trash is not None:
            return answer(ErasureStatus.ERASED, purged, done_at, by)
        return _purged_from_versions(answer, purged, run_row, finished, versions, inventory_date)
    if trash is not None:
        return _soft_deleted(answer, run_row, f"{deleted}: moved to the trash ({trash}), which keeps its bytes",
                             table, left_by)
    if marker is not None and not _none_left(versions, run_row, inventory_date):
        hid = f"version {run_row.version_id}" if run_row.version_id else "the version it hid"
        held = _held(versions, run_row) if versions is not None else []
        listed = (f" (the inventory of {inventory_date} lists {', '.join(sorted(r.version_id for r in held))}: "
                  f"{human_bytes(sum(r.length or 0 for r in held))})" if held else "")
        return _soft_deleted(answer, run_row, f"{deleted}, from a versioned bucket: delete marker {marker} hides "
                             f"{hid}, which keeps its bytes{listed}", table, left_by)
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
                  f"({human_bytes(sum(r.length or 0 for r in held))}: "
                  f"{', '.join(sorted(r.version_id for r in held))}) still hold its bytes in the inventory of "
                  f"{inventory_date}; restorable, not erased, until they are deleted for good (vacuum "
                  "--purge-versions, or a lifecycle rule expiring noncurrent versions)", at, run_id)


def _purged_from_versions(answer: Answer, purged: str, run_row: AuditEntry, finished: AuditEntry, versions: Versions | None,
                          inventory_date: date) -> FileAnswer:
    """A purge run acted on a versioned key: erased only once an all-versions inventory taken after
    the purge lists no version of the key written before the vacuum's delete (another version of
    the same bytes may have stayed)."""
    done_at, by = iso_utc(finished.at_ms), finished.run_id
    if versions is None or not versions.all_versions or inventory_date <= date.fromisoformat(done_at[:10]):
        return answer(ErasureStatus.ERASURE_UNCONFIRMED, f"{purged}; no all-versions inventory taken since the purge confirms "
                      "that no other version of the key still holds its bytes", done_at, by)
    held = _held(versions, run_row)
    if held:
        return answer(ErasureStatus.SOFT_DELETED, f"{purged}; but the all-versions inventory of {inventory_date} still lists "
                      f"{', '.join(sorted(r.version_id for r in held))} "
                      f"({human_bytes(sum(r.length or 0 for r in held))}): not erased", done_at, by)
    return answer(ErasureStatus.ERASED, f"{purged}; the all-versions inventory of {inventory_date} lists no version of it",
                  done_at, by)


def _soft_deleted(answer: Answer, run_row: AuditEntry, hidden: str, table: TableErasure | None,
                  kept: AuditEntry | None = None) -> FileAnswer:
    """A delete that can be undone (a recorded delete marker, or a move to the trash): restorable
    until the purge runs' undo window ends, or kept by a purge because a table needs it again
    (``kept``: that purge's row, whose ``error`` names the rule), or left by a restore or purge whose
    delete failed (``kept`` is that ``failed`` row: nothing scheduled is sure to finish it)."""
    run_id = run_row.run_id
    restore = f"python -m vacuum_jobs restore --run-id {run_id}"
    if kept is not None and kept.action == AuditAction.FAILED:
        at = iso_utc(kept.at_ms)
        return answer(ErasureStatus.DELETE_FAILED, f"{hidden}; the delete of run {kept.run_id} (a restore or purge) failed "
                      f"at {at}: {kept.error}; not erased", at, kept.run_id)
    if kept is not None:
        return answer(ErasureStatus.SOFT_DELETED, f"{hidden}; purge run {kept.run_id} kept it at {iso_utc(kept.at_ms)}, "
                      f"not erased: {kept.error}", iso_utc(kept.at_ms), kept.run_id)
    if table is None or table.last_purge_run_at is None:
        return answer(ErasureStatus.SOFT_DELETED, f"{hidden}; restorable ({restore}), and no purge run has been recorded to "
                      "erase it (python -m vacuum_jobs purge --older-than-days N, or a lifecycle rule expiring "
                      "noncurrent versions)", None, run_id)
    due = iso_utc(run_row.at_ms + hours_ms((table.undo_window_days or 0.0) * 24))
    return answer(ErasureStatus.SOFT_DELETED, f"{hidden}; restorable until {due} ({restore}), erased by the first purge run "
                  f"after that (undo window {table.undo_window_days:g} day(s); last purge run {table.last_purge_run} "
                  f"at {table.last_purge_run_at})", due, run_id)


def _locks(versions: Versions | None, run_row: AuditEntry, now_ms: int) -> list[Lock]:
    """The Object Locks the inventory lists on the versions that hold the key's bytes, still in force."""
    if versions is None:
        return []
    return [r.lock for r in _held(versions, run_row) if r.lock is not None and r.lock.holds_at(now_ms)]


def _locked(answer: Answer, deleted: str, locks: list[Lock], run_row: AuditEntry, inventory_date: date,
            now_ms: int) -> FileAnswer:
    """A delete whose bytes S3 Object Lock keeps: no purge erases them before the lock ends."""
    ends = [lock.erasable_from_ms(now_ms) for lock in locks]
    when = None if None in ends else iso_utc(max(end for end in ends if end is not None))
    then = (f"erasable from {when}, by the first purge run after that" if when else
            "erasable only once the legal hold is lifted (s3:PutObjectLegalHold), by the first purge run after that")
    held = "; ".join(lock.describe(now_ms) for lock in sorted(locks, key=lambda lock: lock.version_id))
    return answer(ErasureStatus.LOCKED, f"{deleted}; S3 Object Lock keeps its bytes ({held}, as the inventory of "
                  f"{inventory_date} lists): not erased; {then}", when, run_row.run_id)


def _none_left(versions: Versions | None, run_row: AuditEntry, inventory_date: date) -> bool:
    """An all-versions inventory taken after the delete lists no version of the key written before it."""
    return (versions is not None and versions.all_versions
            and inventory_date > date.fromisoformat(iso_utc(run_row.at_ms)[:10]) and not _held(versions, run_row))


def _held(versions: Versions, run_row: AuditEntry) -> list[ListedVersion]:
    """The versions (not delete markers) the inventory lists of a key, written before the run deleted it."""
    return [r for r in versions.rows if not r.is_delete_marker and (r.modified_ms or 0) < run_row.at_ms]


def _blocking(status: PinStatus) -> str:
    """A pin as the answer names it: which version, why, who set it, until when."""
    pin = status.pin
    until = f", until {iso_utc(pin.expires_ms)}" if pin.expires_ms is not None else ""
    lift = (f"python -m vacuum_jobs unpin --pins-table ... {pin.root}@{pin.version}" if pin.source is PinSource.PINS_TABLE
            else f"take it out of {pin.source}")
    by = f"set by {pin.set_by}" if pin.set_by else f"given as {pin.source}"
    return (f"pin {pin.label} ({pin.reason or 'no reason given'}; {by}{until}) "
            f"blocks its erasure ({lift} to lift it)")


def decide(q: Question, table: TableErasure | None, trail: Sequence[AuditEntry], log_rows: Sequence[LogEntry],
           listed: bool, inventory_date: date, now_ms: int, versions: Versions | None,
           pins: Sequence[PinStatus] = ()) -> FileAnswer:
    """Where the file ``q`` stands: from its audit rows (``trail``, oldest first), the rows of every
    log that names it, whether the newest inventory (of ``inventory_date``) lists it, what that
    inventory lists of its key's versions, and the pins whose versions read it (``pins``)."""
    def answer(status: ErasureStatus, detail: str, when: str | None = None, run_id: str | None = None) -> FileAnswer:
        return FileAnswer(q.path, q.table, q.asked_as, status, detail, when, run_id)

    if q.table is None:
        return answer(ErasureStatus.NOT_IN_A_TABLE, "no known Delta table contains this path")
    vacuumed = [r for r in trail if r.source_run_id is None]  # restores and purges name their vacuum run
    restores = [r for r in trail if r.action == AuditAction.RESTORED]
    back_at = restores[-1].at_ms if restores else -1
    # The first delete since the file last came back is its erasure (a re-run deleting it again is not).
    deleted = [r for r in vacuumed if r.action in REMOVED and r.at_ms > back_at]
    if deleted:
        runs = {r.run_id for r in deleted}
        purged = [r for r in trail if r.source_run_id in runs and r.action in _PURGING]
        left = [r for r in trail if r.source_run_id in runs and r.action in (AuditAction.NOT_PURGED, AuditAction.FAILED)]
        return _deleted(answer, deleted[0], purged[0] if purged else None, table, versions, inventory_date, now_ms,
                        left[-1] if left else None)
    undone = [r for r in vacuumed if restores and r.run_id == restores[-1].source_run_id]
    if undone:
        return _deleted(answer, undone[0], restores[-1], table, versions, inventory_date, now_ms)
    absent = [r for r in vacuumed if r.action == AuditAction.ALREADY_ABSENT]
    if absent:
        at = iso_utc(absent[0].at_ms)
        return answer(ErasureStatus.ABSENT_WHEN_VACUUMED, f"already gone when vacuum run {absent[0].run_id} reached it "
                                              f"at {at}", at, absent[0].run_id)
    live = [r for r in log_rows if r.kind == "add" and r.table_root == q.table]
    others = sorted({r.table_root for r in log_rows if r.kind == "add" and r.table_root != q.table})
    if others and not live:
        return answer(ErasureStatus.REFERENCED_ELSEWHERE, f"no longer in this table, but {', '.join(others)} still "
                                              "reference(s) it (a shallow clone?): no vacuum deletes it while "
                                              "they do; delete the rows there too")
    if live:
        if q.soft_deleted or any(r.dv_storage_type for r in live):
            return answer(ErasureStatus.LIVE_SOFT_DELETED, "still live; a deletion vector hides the deleted rows, which "
                                               "stay on disk until the file is rewritten "
                                               "(REORG TABLE ... APPLY (PURGE)) and vacuumed")
        return answer(ErasureStatus.LIVE, "the table's current snapshot still references this file")
    if pins and listed:
        return answer(ErasureStatus.PINNED, "no longer in the table's snapshot, but pinned: "
                      + "; ".join(_blocking(p) for p in pins) + ": no vacuum deletes it while the pin stays")
    removed_ms = q.removed_at_ms or max((r.deletion_timestamp for r in log_rows
                                        if r.deletion_timestamp is not None and r.table_root == q.table),
                                       default=None)
    retention = table.retention_hours if table else None
    if removed_ms is not None and retention is not None:
        eligible_ms = removed_ms + hours_ms(retention)
        if eligible_ms > now_ms:
            return answer(ErasureStatus.WITHIN_RETENTION, f"removed at {iso_utc(removed_ms)}; kept for time travel until "
                                              f"{iso_utc(eligible_ms)} ({retention:g} h retention)", iso_utc(eligible_ms))
    if trail and trail[-1].action == AuditAction.FAILED:
        last = trail[-1]
        at = iso_utc(last.at_ms)
        return answer(ErasureStatus.DELETE_FAILED, f"vacuum run {last.run_id} failed to delete it at {at}: "
                                       f"{last.error}", at, last.run_id)
    if not listed:
        return answer(ErasureStatus.GONE_UNRECORDED, f"the inventory of {inventory_date} does not list it, but no vacuum "
                                         "run recorded deleting it (deleted by another tool?)")
    last_run = (f"the last deleting run was {table.last_deleting_run} at {table.last_deleting_run_at}"
                if table and table.last_deleting_run else "no vacuum run has deleted files in this table")
    planned = [r for r in trail if r.action == AuditAction.WOULD_DELETE]
    dry = f"; dry run {planned[-1].run_id} planned it" if planned else ""
    deferred = [r for r in trail if r.action == AuditAction.DEFERRED]
    dry += f"; run {deferred[-1].run_id} planned it, and ran out of time (--max-minutes) before its delete" if deferred else ""
    since = f"deletable since {iso_utc(eligible_ms)}" if removed_ms is not None and retention is not None \
        else "deletable (no longer referenced by the log)"
    return answer(ErasureStatus.NOT_VACUUMED_SINCE, f"{since}; {last_run}{dry}")
