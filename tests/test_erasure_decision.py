"""The erasure decision on its own (lake_reports.erasure_decision): typed records in, a status out,
no Spark. The Spark-gathered cases (test_lake_reports, test_erasure_versions) read real tables; these
pin each branch, including the ones a real lake reaches only by a run of bad luck."""

from __future__ import annotations

from datetime import date

import pytest

from lake_reports.erasure_decision import (
    GONE,
    AuditEntry,
    ErasureStatus,
    ListedVersion,
    LogEntry,
    Question,
    TableErasure,
    Versions,
    decide,
)
from lakeio.audit.contract import AuditAction
from lakeio.deltalog.pinned import PinStatus
from lakeio.pins import Pin, PinSource
from lakeio.store.object_lock import Lock
from lakeio.times import MS_PER_HOUR

DAY = 24 * MS_PER_HOUR
T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z: the vacuum run's delete
NOW = T0 + 20 * DAY
TABLE = "s3://lake/orders"
FILE = f"{TABLE}/part-0.parquet"
AFTER, ON = date(2026, 11, 10), date(2026, 11, 1)  # inventory dates: after the delete, and its own day


def _table(**fields) -> TableErasure:
    return TableErasure(TABLE, retention_hours=168.0, last_deleting_run="v1", last_deleting_run_at="2026-11-01", **fields)


def _vacuum(action: AuditAction = AuditAction.DELETED, run_id: str = "v1", at_ms: int = T0, **fields) -> AuditEntry:
    return AuditEntry(run_id, action.value, at_ms, **fields)


def _then(action: AuditAction, run_id: str, source: str, at_ms: int) -> AuditEntry:
    """A restore or purge row acting on vacuum run ``source``."""
    return AuditEntry(run_id, action.value, at_ms, source_run_id=source)


def _version(version_id: str, written_ms: int, marker: bool = False, lock: Lock | None = None) -> ListedVersion:
    return ListedVersion(version_id, 100, written_ms, marker, lock)


def _locked(version_id: str, written_ms: int, until_ms: int | None = NOW + 10 * DAY, mode: str | None = "GOVERNANCE",
            legal_hold: bool = False) -> ListedVersion:
    """A version S3 Object Lock keeps, as the inventory lists it."""
    return _version(version_id, written_ms, lock=Lock(version_id, until_ms, mode if until_ms else None, legal_hold))


def _decide(trail=(), log=(), listed=True, day=AFTER, versions=None, table=None, question=None, pins=()):
    q = question or Question(FILE, TABLE, "path")
    return decide(q, table or _table(), list(trail), list(log), listed, day, NOW, versions, pins)


AUDITED = PinStatus(Pin(TABLE, version=3, reason="signed off", set_by="auditor", source=PinSource.PINS_TABLE))


CASES = {
    "outside every table": (dict(question=Question("s3://lake/loose.csv", None, "path")), ErasureStatus.NOT_IN_A_TABLE),
    "deleted from an unversioned store": (dict(trail=[_vacuum()]), ErasureStatus.ERASED),
    "moved to the trash, no purge run yet": (dict(trail=[_vacuum(trash_path="/trash/v1/part-0.parquet")]),
                                             ErasureStatus.SOFT_DELETED),
    "moved to the trash, then purged": (
        dict(trail=[_vacuum(trash_path="/trash/v1/part-0.parquet"), _then(AuditAction.PURGED, "p1", "v1", T0 + DAY)]),
        ErasureStatus.ERASED),
    "restored": (dict(trail=[_vacuum(delete_marker_id="m1"), _then(AuditAction.RESTORED, "r1", "v1", T0 + DAY)]),
                 ErasureStatus.RESTORED),
    "a marker in a bucket no all-versions inventory lists since": (
        dict(trail=[_vacuum(delete_marker_id="m1", version_id="a")], versions=Versions(False, ())),
        ErasureStatus.SOFT_DELETED),
    "deleted in a versioned bucket, no marker recorded, no all-versions inventory": (
        dict(trail=[_vacuum()], versions=Versions(False, ())), ErasureStatus.ERASURE_UNCONFIRMED),
    "deleted in a versioned bucket, listed on the delete's own day": (
        dict(trail=[_vacuum()], versions=Versions(True, ()), day=ON), ErasureStatus.ERASURE_UNCONFIRMED),
    "an older version still listed after the delete": (
        dict(trail=[_vacuum()], versions=Versions(True, (_version("a", T0 - DAY),))), ErasureStatus.SOFT_DELETED),
    "only a version written after the delete is listed": (
        dict(trail=[_vacuum()], versions=Versions(True, (_version("b", T0 + DAY),))), ErasureStatus.ERASED),
    "purged, and the all-versions inventory since lists nothing older": (
        dict(trail=[_vacuum(delete_marker_id="m1"), _then(AuditAction.PURGED, "p1", "v1", T0 + DAY)],
             versions=Versions(True, (_version("m1", T0, marker=True),))), ErasureStatus.ERASED),
    "purged, but a copy of the bytes under another version stays": (
        dict(trail=[_vacuum(delete_marker_id="m1"), _then(AuditAction.PURGED, "p1", "v1", T0 + DAY)],
             versions=Versions(True, (_version("old", T0 - DAY),))), ErasureStatus.SOFT_DELETED),
    "purged, no all-versions inventory since the purge": (
        dict(trail=[_vacuum(delete_marker_id="m1"), _then(AuditAction.PURGED, "p1", "v1", T0 + DAY)],
             versions=Versions(False, ())), ErasureStatus.ERASURE_UNCONFIRMED),
    "already gone when the run came": (dict(trail=[_vacuum(AuditAction.ALREADY_ABSENT)]),
                                       ErasureStatus.ABSENT_WHEN_VACUUMED),
    "live": (dict(log=[LogEntry("add", TABLE)]), ErasureStatus.LIVE),
    "live with a deletion vector": (dict(log=[LogEntry("add", TABLE, "u")]), ErasureStatus.LIVE_SOFT_DELETED),
    "a commit re-added it with a deletion vector": (
        dict(log=[LogEntry("add", TABLE)], question=Question(FILE, TABLE, f"{TABLE}@3", T0, soft_deleted=True)),
        ErasureStatus.LIVE_SOFT_DELETED),
    "a clone still references it": (dict(log=[LogEntry("add", "s3://lake/clone")]), ErasureStatus.REFERENCED_ELSEWHERE),
    "a pinned version reads it": (dict(log=[LogEntry("remove", TABLE, deletion_timestamp=NOW - DAY)], pins=[AUDITED]),
                                  ErasureStatus.PINNED),
    "tombstoned within the retention": (dict(log=[LogEntry("remove", TABLE, deletion_timestamp=NOW - DAY)]),
                                        ErasureStatus.WITHIN_RETENTION),
    "the last attempt failed": (dict(trail=[_vacuum(AuditAction.FAILED, error="403 Forbidden")]),
                                ErasureStatus.DELETE_FAILED),
    "the purge's delete failed": (
        dict(trail=[_vacuum(delete_marker_id="m1", version_id="a"),
                    AuditEntry("p1", AuditAction.FAILED.value, T0 + DAY, error="InternalError", source_run_id="v1")]),
        ErasureStatus.DELETE_FAILED),
    "a version Object Lock keeps until a date": (
        dict(trail=[_vacuum(delete_marker_id="m1", version_id="a")], versions=Versions(True, (_locked("a", T0 - DAY),))),
        ErasureStatus.LOCKED),
    "a version under a legal hold, after a purge erased the rest": (
        dict(trail=[_vacuum(delete_marker_id="m1", version_id="a"), _then(AuditAction.PURGED, "p1", "v1", T0 + DAY)],
             versions=Versions(True, (_locked("old", T0 - 2 * DAY, None, legal_hold=True),))), ErasureStatus.LOCKED),
    "gone with no run's record": (dict(log=[LogEntry("remove", TABLE, deletion_timestamp=T0 - 30 * DAY)], listed=False),
                                  ErasureStatus.GONE_UNRECORDED),
    "deletable, no run has reached it": (dict(log=[LogEntry("remove", TABLE, deletion_timestamp=T0 - 30 * DAY)]),
                                         ErasureStatus.NOT_VACUUMED_SINCE),
}


@pytest.mark.parametrize("case", CASES)
def test_each_case_gets_its_status(case):
    given, expected = CASES[case]
    answer = _decide(**given)
    assert answer.status == expected, answer.detail
    assert answer.path == (given.get("question") or Question(FILE, TABLE, "path")).path
    assert answer.detail


def test_the_cases_reach_every_status():
    assert {expected for _, expected in CASES.values()} == set(ErasureStatus)


def test_a_pinned_file_names_the_pin_who_set_it_and_how_to_lift_it():
    answer = _decide(log=[LogEntry("remove", TABLE, deletion_timestamp=T0 - 30 * DAY)], pins=[AUDITED])
    assert f"pin {AUDITED.pin.label} (signed off; set by auditor) blocks its erasure" in answer.detail
    assert f"unpin --pins-table ... {AUDITED.pin.root}@3" in answer.detail
    deleted = _decide(trail=[_vacuum()], pins=[AUDITED])  # a pin set after the delete holds nothing back
    assert deleted.status == ErasureStatus.ERASED


def test_a_deleted_file_names_its_run_and_time():
    answer = _decide(trail=[_vacuum()])
    assert (answer.run_id, answer.when) == ("v1", "2026-11-01T00:00:00+00:00")


def test_the_purge_due_date_follows_the_undo_window():
    table = _table(soft_deletes=True, undo_window_days=7.0, last_purge_run="p0", last_purge_run_at="2026-11-05")
    answer = _decide(trail=[_vacuum(trash_path="/trash/v1/part-0.parquet")], table=table)
    assert answer.status == ErasureStatus.SOFT_DELETED and answer.when == "2026-11-08T00:00:00+00:00"
    assert "restorable until 2026-11-08" in answer.detail


def test_a_delete_after_a_restore_is_the_erasure():
    """Deleted, restored, deleted again by a later run: the second delete is what erased it."""
    trail = [_vacuum(delete_marker_id="m1"), _then(AuditAction.RESTORED, "r1", "v1", T0 + DAY),
             _vacuum(run_id="v2", at_ms=T0 + 2 * DAY)]
    answer = _decide(trail=trail)
    assert (answer.status, answer.run_id) == (ErasureStatus.ERASED, "v2")


def test_a_rerun_deleting_again_does_not_move_the_erasure():
    answer = _decide(trail=[_vacuum(), _vacuum(run_id="v2", at_ms=T0 + DAY)])
    assert (answer.status, answer.run_id) == (ErasureStatus.ERASED, "v1")


def test_the_retention_end_is_when_it_becomes_deletable():
    answer = _decide(log=[LogEntry("remove", TABLE, deletion_timestamp=NOW - DAY)])
    assert answer.when == "2026-11-27T00:00:00+00:00"  # removed on the 20th, 168 h retention


def test_a_file_a_purge_kept_names_the_rule_and_the_purge_that_erases_it_later_wins():
    kept = AuditEntry("p1", AuditAction.NOT_PURGED.value, T0 + DAY, error="live again: s3://lake/orders (its current "
                      "snapshot reads it)", source_run_id="v1")
    trashed = _vacuum(trash_path="/trash/v1/part-0.parquet")
    answer = _decide(trail=[trashed, kept])
    assert answer.status == ErasureStatus.SOFT_DELETED and answer.run_id == "p1"
    assert "purge run p1 kept it at 2026-11-02T00:00:00+00:00, not erased: live again: s3://lake/orders" in answer.detail
    later = _decide(trail=[trashed, kept, _then(AuditAction.PURGED, "p2", "v1", T0 + 2 * DAY)])
    assert later.status == ErasureStatus.ERASED and later.run_id == "p2"


def test_a_lock_says_when_erasure_becomes_possible_and_a_legal_hold_that_it_waits_for_someone():
    marked = _vacuum(delete_marker_id="m1", version_id="a")
    dated = _decide(trail=[marked], versions=Versions(True, (_locked("a", T0 - DAY, mode="COMPLIANCE"),)))
    assert dated.when == "2026-12-01T00:00:00+00:00" and dated.run_id == "v1"
    assert "version a locked until 2026-12-01T00:00:00+00:00 (compliance mode)" in dated.detail
    assert "erasable from 2026-12-01T00:00:00+00:00" in dated.detail and "not erased" in dated.detail
    held = _decide(trail=[marked], versions=Versions(True, (_locked("a", T0 - DAY, legal_hold=True),)))
    assert held.when is None and "under a legal hold" in held.detail and "once the legal hold is lifted" in held.detail


def test_a_lock_that_has_ended_keeps_nothing():
    """Retention over by now: the file goes its usual way (here a version still listed: soft-deleted)."""
    answer = _decide(trail=[_vacuum()], versions=Versions(True, (_locked("a", T0 - DAY, NOW - DAY),)))
    assert answer.status == ErasureStatus.SOFT_DELETED


def test_a_failed_purge_names_its_run_and_error_and_a_later_purge_that_erases_wins():
    marked = _vacuum(delete_marker_id="m1", version_id="a")
    refused = AuditEntry("p1", AuditAction.FAILED.value, T0 + DAY, source_run_id="v1",
                         error="AccessDenied: version a locked until 2026-12-01T00:00:00+00:00 (governance mode)")
    answer = _decide(trail=[marked, refused])
    assert (answer.status, answer.run_id, answer.when) == (ErasureStatus.DELETE_FAILED, "p1", "2026-11-02T00:00:00+00:00")
    assert "locked until 2026-12-01" in answer.detail
    later = _decide(trail=[marked, refused, _then(AuditAction.PURGED, "p2", "v1", T0 + 2 * DAY)],
                    versions=Versions(True, ()))
    assert later.status == ErasureStatus.ERASED and later.run_id == "p2"


@pytest.mark.parametrize("case", [case for case, (given, _) in CASES.items() if given.get("versions")])
@pytest.mark.parametrize("lock", ["retention", "legal hold"])
def test_no_file_reads_as_gone_while_a_lock_keeps_a_version_written_before_its_delete(case, lock):
    """Every case that lists versions, each version then locked: a version the delete hid (written
    before it) keeps the bytes, and nothing but ``locked`` (or ``restored``) may be said of the file."""
    given = dict(CASES[case][0])
    rows = tuple(r if r.is_delete_marker else _locked(r.version_id, r.modified_ms, *(
        (NOW + DAY, "COMPLIANCE") if lock == "retention" else (None, None, True))) for r in given["versions"].rows)
    given["versions"] = Versions(given["versions"].all_versions, rows)
    answer = _decide(**given)
    hidden = any(not r.is_delete_marker and r.modified_ms < T0 for r in rows)
    assert answer.status not in GONE or not hidden, answer.detail
    assert answer.status in (ErasureStatus.LOCKED, ErasureStatus.RESTORED) or not hidden, answer.detail
