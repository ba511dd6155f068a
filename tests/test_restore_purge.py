"""Recoverable vacuum: vacuum, restore, purge; on a versioned S3 bucket (the moto server) and
with a trash folder on local disks.

Two Delta tables are written by delta-rs into a versioned bucket, with files their later
commits removed. A vacuum deletes those files (real ``DeleteObjects``: delete markers) and
records what each delete hid. ``restore`` brings every file back byte for byte under its
original version id, except a key written again since; ``purge`` erases exactly the hidden
versions older than its window, and the erasure evidence follows each step.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import functions as F

from demo.lake import build_lake
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import write_delivery
from lake_reports.erasure_document import erasure_request
from lake_reports.erasure_evidence import CommitQuestion, ErasureEvidence, ErasureOptions
from lakeio.audit.contract import LATER_COLUMNS, AuditAction, RunTable, TableStatus, append_run, read_audit, verify_chain
from lakeio.inventory import inventory_snapshot
from lakeio.spark.shapes import OUTCOMES
from lakeio.spark.steps import Step
from lakeio.store.uris import TableRoot
from lakeio.tables.write import write_delta
from tests.lakes import inventory_of, vacuum
from tests.test_erasure_versions import _listing
from vacuum_jobs.cli import main
from vacuum_jobs.delete_tasks import delete_planned
from vacuum_jobs.deletes import DeleteSettings
from vacuum_jobs.recording import write_audit
from vacuum_jobs.report import RunReport, TableReport
from vacuum_jobs.restore_purge import Undo, UndoOptions, purge, restore
from vacuum_jobs.vacuum_plan import Decision, VacuumPlan

pytestmark = pytest.mark.slow  # Spark jobs, an inventory ingested, a dozen S3 round trips
DAY_MS = 24 * 3600 * 1000


def _now_ms() -> int:
    return int(datetime.now(timezone.utc).timestamp() * 1000)


def _versioned_bucket(client, prefix: str, endpoint: str) -> tuple[str, dict]:
    """A new bucket with versioning on, and deltalake's storage options for it."""
    bucket = f"{prefix}-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    return bucket, {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                    "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


def _table(uri: str, options: dict) -> list[int]:
    """Four commits: two appends, an overwrite (removing both), an append. Returns its versions."""
    for mode, values in (("append", [1, 2]), ("append", [3]), ("overwrite", [4, 5]), ("append", [6])):
        write_deltalake(uri, pa.table({"x": values}), mode=mode, storage_options=options)
    return list(range(4))


def _snapshots(uri: str, options: dict, versions: list[int]) -> dict[int, list]:
    return {v: sorted(DeltaTable(uri, version=v, storage_options=options).to_pyarrow_table().column("x").to_pylist())
            for v in versions}


def _vacuum_s3(spark, audit: str, inventory: str, tables: list[str], options: dict, endpoint: str, run_id: str,
            done: frozenset[str] = frozenset()) -> list[str]:
    """Delete every file the tables' logs no longer reference (delta-rs names them; those a run deleted
    before: ``done``), as vacuum_jobs does: the inventory's current version joined in, ``DeleteObjects``,
    the audit."""
    rows = []
    for table in tables:
        for name in DeltaTable(table, storage_options=options).vacuum(
                retention_hours=0, enforce_retention_duration=False, dry_run=True):
            if f"{table}/{name}" not in done:
                rows.append((table, f"{table}/{name}", None, 0))
    candidates = spark.createDataFrame(rows, "table_root string, path string, length long, modificationTime long")
    targets = VacuumPlan.of({TableRoot(t): Decision.VACUUM for t in tables}, candidates).with_versions(
        inventory_snapshot(spark, inventory).rows, purge=False).targets
    # the tests' moto honours conditional deletes (tests.aws_s3): said here, as no audit table on S3 proves it
    outcomes = delete_planned(spark, targets, DeleteSettings(endpoint_url=endpoint, if_present=True),
                              run_id).localCheckpoint(eager=True)
    assert {r["action"] for r in outcomes.collect()} == {"deleted"}
    started = _now_ms()
    run = RunReport(run_id, "", inventory, None, dry_run=False,
                    tables=[TableReport(t, TableStatus.VACUUMED, None, 3, 0.0) for t in tables])
    write_audit(spark, audit, run, started, outcomes)
    return [r[1] for r in rows]


@pytest.mark.s3a  # purge reads the tables' logs again through Spark's S3 connector
def test_vacuum_restore_purge_round_trip_on_a_versioned_bucket(spark, s3, s3_endpoint, tmp_path, capsys):
    client = s3
    bucket, options = _versioned_bucket(client, "undo", s3_endpoint)
    kept, rewritten = f"s3://{bucket}/kept", f"s3://{bucket}/rewritten"
    versions = {t: _table(t, options) for t in (kept, rewritten)}
    before = {t: _snapshots(t, options, versions[t]) for t in versions}
    original = {(o.key, o.version_id) for o in _listing(client, bucket)}
    bytes_of = {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key, _ in original}
    inventory, audit = str(tmp_path / "inventory"), str(tmp_path / "audit")
    now = datetime.now(timezone.utc)
    manifest = write_delivery(str(tmp_path / "dest"), bucket, "all-versions", _listing(client, bucket),
                              now - timedelta(hours=1), versioned=True)
    assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused

    deleted = _vacuum_s3(spark, audit, inventory, [kept, rewritten], options, s3_endpoint, "vacuum-1")
    assert len(deleted) == 4
    rows = {r["path"]: r for r in read_audit(spark, audit).where(F.col("path").isNotNull()).collect()}
    listing = _listing(client, bucket)
    for path in deleted:
        key = path.split("/", 3)[3]
        marker = next(o for o in listing if o.key == key and o.is_latest)
        assert marker.is_delete_marker and rows[path]["delete_marker_id"] == marker.version_id
        assert (key, rows[path]["version_id"]) in original  # the version the marker hides, as the inventory listed it
    with pytest.raises(OSError):  # time travel needs the deleted files
        DeltaTable(kept, version=0, storage_options=options).to_pyarrow_table()

    # A writer puts one deleted key of the second table back (new bytes) after the vacuum.
    again = next(p for p in deleted if p.startswith(rewritten))
    again_key = again.split("/", 3)[3]
    new_version = client.put_object(Bucket=bucket, Key=again_key, Body=b"written again")["VersionId"]
    staged = _listing(client, bucket)

    def undo(**settings) -> Undo:
        return Undo(spark, UndoOptions(audit, delete=DeleteSettings(endpoint_url=s3_endpoint), **settings))

    dry = undo().restore("vacuum-1")
    assert dry.tables == {kept: {"would_restore": 2}, rewritten: {"would_restore": 1, "not_restored": 1}}
    assert [p.split(": ", 1)[0] for p in dry.problems] == [again] and new_version in dry.problems[0]
    assert _listing(client, bucket) == staged  # a dry run changes nothing

    assert main(["restore", "--audit-table", audit, "--run-id", "vacuum-1", "--apply",
                 "--s3-endpoint-url", s3_endpoint, "--report", str(tmp_path / "restore.json")]) == 1
    out = capsys.readouterr().out
    assert "2 restored" in out and f"left alone: {again}: written again since the vacuum" in out
    restored = json.loads((tmp_path / "restore.json").read_text())
    assert restored["tables"] == {kept: {"restored": 2}, rewritten: {"restored": 1, "not_restored": 1}}

    # Every version of the first table reads as before; every key holds its original version and bytes.
    assert _snapshots(kept, options, versions[kept]) == before[kept]
    for key, version in original - {(again_key, rows[again]["version_id"])}:
        current = client.get_object(Bucket=bucket, Key=key)
        assert (current["VersionId"], current["Body"].read()) == (version, bytes_of[key])
    assert client.get_object(Bucket=bucket, Key=again_key)["VersionId"] == new_version
    assert undo(dry_run=False).restore("vacuum-1").tables == {rewritten: {"not_restored": 1}}  # done ones not redone

    def evidence(now_ms: int, paths: list[str]) -> dict[str, tuple[str, str]]:
        report = ErasureEvidence(spark, ErasureOptions(audit, inventory, now_ms=now_ms, tables=[kept])).execute(
            paths=paths)
        return {a.path: (a.status, a.detail) for a in report.answers}

    answers = evidence(_now_ms(), deleted)
    assert {status for status, _ in answers.values()} == {"restored", "soft_deleted"}
    status, detail = answers[again]
    assert status == "soft_deleted" and "no purge run has been recorded" in detail

    # Vacuumed again, twice; a purge with a 7-day window, run when the first is older than that, the second not.
    old = _vacuum_s3(spark, audit, inventory, [kept], options, s3_endpoint, "vacuum-2")
    between = _now_ms() + 1
    hidden_old = {p: r for p, r in ((r["path"], r) for r in read_audit(spark, audit).where(
        (F.col("run_id") == "vacuum-2") & F.col("path").isNotNull()).collect())}
    assert set(hidden_old) == set(old) and all(r["delete_marker_id"] for r in hidden_old.values())
    write_deltalake(kept, pa.table({"x": [7]}), mode="overwrite", storage_options=options)
    recent = _vacuum_s3(spark, audit, inventory, [kept], options, s3_endpoint, "vacuum-3", done=frozenset(old))
    assert len(recent) == 2 and not set(recent) & set(old)

    assert {status for status, _ in evidence(_now_ms(), old).values()} == {"soft_deleted"}
    # One hidden version is made current again by hand (its marker removed): purge must leave it.
    by_hand = sorted(old)[0]
    client.delete_object(Bucket=bucket, Key=by_hand.split("/", 3)[3], VersionId=hidden_old[by_hand]["delete_marker_id"])

    later = between + 7 * DAY_MS
    client.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
        {"ID": "tidy", "Status": "Enabled", "Filter": {"Prefix": "kept/"}, "NoncurrentVersionExpiration": {
            "NoncurrentDays": 3}}]})
    preview = undo(now_ms=later).purge(7)
    assert preview.warnings == [f"s3://{bucket}: lifecycle rule 'tidy' (prefix 'kept/') expires noncurrent versions "
                                "3 day(s) after a delete, before this purge's 7-day undo window ends: deletes older "
                                "than 3 day(s) can no longer be restored"]
    # The key written again after vacuum-1 keeps its new version; the one vacuum-1 hid is erased too.
    assert preview.tables == {kept: {"would_purge": 1, "not_purged": 1}, rewritten: {"would_purge": 1}}
    purged = undo(dry_run=False, now_ms=later).purge(7)
    assert purged.tables == {kept: {"purged": 1, "not_purged": 1}, rewritten: {"purged": 1}} and not purged.ok
    # One purge run caught up on two vacuum runs (vacuum-1 and vacuum-2): one run of the chain, which verifies.
    purge_rows = read_audit(spark, audit).where(F.col("run_id") == purged.run_id).collect()
    assert {r["source_run_id"] for r in purge_rows} == {"vacuum-1", "vacuum-2"}
    assert sorted(r["seq"] for r in purge_rows) == list(range(len(purge_rows)))
    # The undo window in a column of its own, on the table rows and the file rows alike.
    assert {(r["undo_window_hours"], r["retention_hours"]) for r in purge_rows} == {(7 * 24.0, None)}
    assert verify_chain(spark, audit).ok, verify_chain(spark, audit).summary()
    assert purged.problems == [f"{by_hand}: version {hidden_old[by_hand]['version_id']} is current again "
                               "(restored outside this tool): not erased"]
    now_listed = {(o.key, o.version_id) for o in _listing(client, bucket)}
    erased = next(p for p in old if p != by_hand)
    assert (erased.split("/", 3)[3], hidden_old[erased]["version_id"]) not in now_listed
    assert (erased.split("/", 3)[3], hidden_old[erased]["delete_marker_id"]) in now_listed  # the marker stays
    for path in recent:  # inside the window: untouched
        key = path.split("/", 3)[3]
        assert any(o.key == key and not o.is_delete_marker and not o.is_latest for o in _listing(client, bucket))
    assert (client.get_object(Bucket=bucket, Key=again_key)["VersionId"], (again_key, rows[again]["version_id"])
            in {(o.key, o.version_id) for o in _listing(client, bucket)}) == (new_version, False)
    assert undo(dry_run=False, now_ms=later).purge(7).tables == {kept: {"not_purged": 1}}  # none purged twice

    answers = evidence(later, old + recent)
    status, detail = answers[erased]  # the newest inventory predates the purge: nothing confirms it yet
    assert status == "erasure_unconfirmed" and f"by purge run {purged.run_id}" in detail
    status, detail = answers[recent[0]]
    assert status == "soft_deleted" and "restorable until" in detail and "undo window 7 day(s)" in detail



@pytest.mark.s3a  # the erasure request reads the commit through Spark's S3 connector
def test_a_purge_erases_every_version_of_the_key_and_the_evidence_waits_for_an_inventory_to_say_so(
        spark, s3, s3_endpoint, tmp_path):
    """Two versions of a deleted file's key hold the same bytes (an in-place copy, a retried
    upload): the purge erases both, and neither the file's evidence nor the erasure request's
    document says erased (or done) before an all-versions inventory taken after the purge does."""
    client = s3
    bucket, options = _versioned_bucket(client, "twice", s3_endpoint)
    table = f"s3://{bucket}/people"
    _table(table, options)  # version 2 (an overwrite) removes the files of versions 0 and 1
    removed = sorted(f"{table}/{n}" for n in DeltaTable(table, storage_options=options).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=True))
    copied = removed[0].split("/", 3)[3]
    client.copy_object(Bucket=bucket, Key=copied, CopySource={"Bucket": bucket, "Key": copied},
                       MetadataDirective="REPLACE", Metadata={"re-encrypted": "yes"})  # same bytes, a new version
    assert len([o for o in _listing(client, bucket) if o.key == copied]) == 2
    inventory, audit = str(tmp_path / "inventory"), str(tmp_path / "audit")
    now = datetime.now(timezone.utc)

    def inventory_taken(at: datetime) -> None:
        manifest = write_delivery(str(tmp_path / "dest"), bucket, "all-versions", _listing(client, bucket), at,
                                  versioned=True)
        assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused

    def evidence() -> tuple[dict[str, str], object]:
        options_ = ErasureOptions(audit, inventory, now_ms=_now_ms() + 9 * DAY_MS, tables=[table])
        answers = ErasureEvidence(spark, options_).execute(paths=removed).answers
        document = erasure_request(spark, audit, inventory, CommitQuestion(table, 2), "forget-me",
                                   now_ms=options_.now_ms, tables=[table])
        return {a.path: a.status for a in answers}, document

    inventory_taken(now - timedelta(hours=1))
    assert sorted(_vacuum_s3(spark, audit, inventory, [table], options, s3_endpoint, "vacuum-1")) == removed
    statuses, document = evidence()
    assert set(statuses.values()) == {"soft_deleted"} and document.verdict.status != "done"
    assert any(c.path == removed[0] and c.status == "noncurrent_version" for c in document.copies)

    purged = purge(spark, audit, 0, dry_run=False, now_ms=_now_ms() + 8 * DAY_MS,  # past the table's retention
                   delete=DeleteSettings(endpoint_url=s3_endpoint))
    assert purged.tables == {table: {"purged": len(removed)}} and purged.ok
    left = _listing(client, bucket)
    assert [(o.key, o.is_delete_marker) for o in left if o.key == copied] == [(copied, True)]  # only the marker
    statuses, document = evidence()
    assert set(statuses.values()) == {"erasure_unconfirmed"} and document.verdict.status != "done"

    inventory_taken(now + timedelta(days=1))  # taken after the purge, listing what the bucket holds
    statuses, document = evidence()
    assert set(statuses.values()) == {"erased"}
    assert document.verdict.status == "done", document.verdict.reasons


@pytest.mark.parametrize("store", ["trash", pytest.param("versioned bucket", marks=pytest.mark.s3a)])
def test_a_purge_erases_what_a_forced_vacuum_was_told_to_and_keeps_what_a_restore_brought_back(spark, tmp_path, request,
                                                                                                 store):
    """The usual erasure path: a vacuum at retention 0 forced past the tables' own (7 days), then a purge at 0
    days. The purge erases every file the vacuum deleted (every version of its key), a failed job's leftover
    that no commit named included, but the one a Delta RESTORE made live again in between, which it names
    with the restore that brings it back, and exits 0; the erasure evidence names the rule that kept it; the
    untouched audit verifies from its first row."""
    audit, now = str(tmp_path / "audit"), datetime.now(timezone.utc)
    if store == "trash":
        client, endpoint, options = None, None, None
        lake, delete = f"file://{tmp_path}/lake", DeleteSettings(trash=str(tmp_path / "trash"))
    else:
        client, endpoint = request.getfixturevalue("s3"), request.getfixturevalue("s3_endpoint")
        bucket, options = _versioned_bucket(client, "erase", endpoint)
        lake, delete = f"s3://{bucket}", DeleteSettings(endpoint_url=endpoint, if_present=True)  # moto as AWS
    erased, back = f"{lake}/erased", f"{lake}/back"
    for table in (erased, back):
        write_deltalake(table, pa.table({"id": [1, 2]}), storage_options=options)
        write_deltalake(table, pa.table({"id": [3]}), mode="overwrite", storage_options=options)
    leftover = b"a failed job's output, never committed"
    if client is None:
        (tmp_path / "lake" / "erased" / "part-leftover.parquet").write_bytes(leftover)
    else:
        client.put_object(Bucket=bucket, Key="erased/part-leftover.parquet", Body=leftover)
    if client is None:
        inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    else:
        inventory = str(tmp_path / "inventory")
        manifest = write_delivery(str(tmp_path / "dest"), bucket, "all-versions", _listing(client, bucket),
                                  now - timedelta(hours=1), versioned=True)
        assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused

    run = vacuum(spark, inventory, [erased, back], dry_run=False, retention_hours=0, enforce_retention_duration=False,
                 audit_table=audit, delete=delete)
    assert {t.table: t.counts.deleted_files for t in run.tables} == {erased: 2, back: 1}, run.summary()
    deleted = [(r["table_root"], r["path"]) for r in read_audit(spark, audit).where("action = 'deleted'").collect()]
    gone = {table: sorted(path for root, path in deleted if root == table) for table in (erased, back)}
    assert f"{erased}/part-leftover.parquet" in gone[erased]
    DeltaTable(back, storage_options=options).restore(0, ignore_missing_files=True)  # version 0's file is live again

    code = main(["purge", "--audit-table", audit, "--older-than-days", "0", "--apply", "--report",
                 str(tmp_path / "purge.json"), *(["--s3-endpoint-url", endpoint] if endpoint else [])])

    purged = json.loads((tmp_path / "purge.json").read_text())
    assert code == 0 and purged["tables"] == {erased: {"purged": 2}, back: {"not_purged": 1}}, purged
    assert purged["kept"] == {"live again": 1}
    command = f"python -m vacuum_jobs restore --audit-table {audit} --run-id {run.run_id} --table {back}"
    assert purged["problems"] == [f"{gone[back][0]}: live again: {back} (its current snapshot reads it); bring it back "
                                  f"with: {command}"]
    if client is None:
        assert [p.name for p in (tmp_path / "trash").rglob("*.parquet")] == [gone[back][0].rsplit("/", 1)[1]]
    else:
        for path, versions_left in [*((p, 0) for p in gone[erased]), (gone[back][0], 1)]:
            listed = client.list_object_versions(Bucket=bucket, Prefix=path.split("/", 3)[3])
            assert len(listed.get("Versions", [])) == versions_left and listed.get("DeleteMarkers"), (path, listed)
    assert verify_chain(spark, audit).ok, verify_chain(spark, audit).summary()
    evidence = ErasureEvidence(spark, ErasureOptions(audit, inventory, tables=[back])).execute(paths=gone[back])
    [kept] = evidence.answers
    assert kept.status == "soft_deleted" and "not erased: live again:" in kept.detail, kept

    assert restore(spark, audit, run.run_id, dry_run=False, tables=[back], delete=delete).ok
    assert sorted(DeltaTable(back, storage_options=options).to_pyarrow_table().column("id").to_pylist()) == [1, 2]


def _with_locks(client, bucket: str) -> list:
    """``_listing`` with the Object Lock fields an inventory configuration asking for them lists."""
    listed = []
    for o in _listing(client, bucket):
        head = {} if o.is_delete_marker else client.head_object(Bucket=bucket, Key=o.key, VersionId=o.version_id)
        until = head.get("ObjectLockRetainUntilDate")
        listed.append(replace(o, object_lock_retain_until_date=until and int(until.timestamp() * 1000),
                              object_lock_mode=head.get("ObjectLockMode"),
                              object_lock_legal_hold_status=head.get("ObjectLockLegalHoldStatus")))
    return listed


@pytest.mark.s3a  # purge reads the table's log again through Spark's S3 connector
def test_what_object_lock_keeps_is_never_called_erased_and_the_purge_erases_it_once_the_lock_ends(
        spark, s3, s3_endpoint, tmp_path):
    """A bucket with Object Lock: the vacuum's deletes add markers (allowed); the purge's deletes of the
    versions are refused, one under governance-mode retention, one under a legal hold. The purge names
    each lock and exits 1; the evidence says ``locked`` with the date erasure becomes possible and the
    request's verdict is at risk. Governance is bypassed only with the flag; a lifted hold lets the
    next purge erase the rest."""
    client = s3
    bucket = f"locked-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    options = {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    table = f"s3://{bucket}/people"
    for mode, ids in (("append", [1]), ("append", [2]), ("overwrite", [3])):
        write_deltalake(table, pa.table({"id": ids}), mode=mode, storage_options=options)
    removed = sorted(f"{table}/{n}" for n in DeltaTable(table, storage_options=options).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=True))
    governed, held = (p.split("/", 3)[3] for p in removed)
    until = (datetime.now(timezone.utc) + timedelta(days=30)).replace(microsecond=0)
    version = {o.key: o.version_id for o in _listing(client, bucket)}
    client.put_object_retention(Bucket=bucket, Key=governed, VersionId=version[governed],
                                Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until})
    client.put_object_legal_hold(Bucket=bucket, Key=held, VersionId=version[held], LegalHold={"Status": "ON"})
    inventory, audit, now = str(tmp_path / "inventory"), str(tmp_path / "audit"), datetime.now(timezone.utc)

    def inventory_taken(at: datetime) -> None:
        manifest = write_delivery(str(tmp_path / "dest"), bucket, "all-versions", _with_locks(client, bucket), at,
                                  versioned=True, object_lock=True)
        assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused

    def purge_cli(*flags: str) -> tuple[int, dict]:
        report = tmp_path / f"purge-{uuid.uuid4().hex[:6]}.json"
        code = main(["purge", "--audit-table", audit, "--older-than-days", "0", "--apply", "--report", str(report),
                     "--s3-endpoint-url", s3_endpoint, *flags])
        return code, json.loads(report.read_text())

    inventory_taken(now - timedelta(hours=1))
    run = vacuum(spark, inventory, [table], dry_run=False, retention_hours=0, enforce_retention_duration=False,
                 audit_table=audit, delete=DeleteSettings(endpoint_url=s3_endpoint, if_present=True))  # moto as AWS
    assert run.tables[0].counts.deleted_files == 2, run.summary()

    code, first = purge_cli()
    assert code == 1 and first["tables"] == {table: {"failed": 2}}, first
    day = until.strftime("%Y-%m-%dT%H:%M:%S")
    why = dict(p.split(": ", 1) for p in first["problems"])
    assert f"version {version[governed]} locked until {day}" in why[removed[0]] and "governance mode" in why[removed[0]]
    assert f"version {version[held]} under a legal hold" in why[removed[1]]

    inventory_taken(now + timedelta(days=1))  # after the purge: the versions, and their locks, still listed
    answers = {a.path: a for a in ErasureEvidence(spark, ErasureOptions(audit, inventory, tables=[table]))
               .execute(paths=removed).answers}
    assert {a.status for a in answers.values()} == {"locked"}, answers
    assert answers[removed[0]].when.startswith(day) and answers[removed[1]].when is None
    document = erasure_request(spark, audit, inventory, CommitQuestion(table, 2), "forget-me", tables=[table])
    assert document.verdict.status == "at_risk"
    assert any(f"erasable from {day}" in r for r in document.verdict.reasons), document.verdict.reasons
    assert any("legal hold is lifted" in r for r in document.verdict.reasons), document.verdict.reasons

    code, bypassed = purge_cli("--bypass-governance-retention")  # governance goes; the legal hold stays
    assert code == 1 and bypassed["tables"] == {table: {"failed": 1, "purged": 1}}, bypassed
    client.put_object_legal_hold(Bucket=bucket, Key=held, VersionId=version[held], LegalHold={"Status": "OFF"})
    code, last = purge_cli()
    assert code == 0 and last["tables"] == {table: {"purged": 1}}, last
    assert not client.list_object_versions(Bucket=bucket, Prefix=f"people/{removed[0].rsplit('/', 1)[1]}").get(
        "Versions")
    inventory_taken(now + timedelta(days=2))
    statuses = {a.status for a in ErasureEvidence(spark, ErasureOptions(audit, inventory, tables=[table]))
                .execute(paths=removed).answers}
    assert statuses == {"erased"}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _every_version(table: Path) -> dict[int, int]:
    latest = DeltaTable(str(table)).version()
    return {v: DeltaTable(str(table), version=v).to_pyarrow_table().num_rows for v in range(latest + 1)}


def _run_history(table: Path, before: dict[int, int]) -> tuple[dict[str, bytes], dict[int, int]]:
    """The files and versions of ``table`` once a run added its VACUUM START and END commits to the
    versions ``before`` (version -> rows): each reads as the version before it."""
    last = max(before)
    commits = {f"_delta_log/{v:020d}.json": (table / "_delta_log" / f"{v:020d}.json").read_bytes()
               for v in (last + 1, last + 2)}
    return commits, {**before, last + 1: before[last], last + 2: before[last]}


def test_trash_round_trip_on_local_files(spark, tmp_path):
    lake = build_lake(tmp_path / "lake", rows_per_commit=20)
    orders, events = lake.tables["orders"], lake.tables["events"]
    before = {t: (_files(t), _every_version(t)) for t in (orders, events)}
    inventory, audit, trash = inventory_of(spark, lake.bucket_dir, tmp_path), str(tmp_path / "audit"), tmp_path / "trash"
    settings = {"audit_table": audit, "delete": DeleteSettings(trash=str(trash)), "retention_hours": 0.0,
                "enforce_retention_duration": False}

    run = vacuum(spark, inventory, [orders, events], dry_run=False, **settings)
    deleted = {r["path"]: r["trash_path"] for r in read_audit(spark, audit).where("action = 'deleted'").collect()}
    assert run.totals()["restorable_files"] == len(deleted) > 4 and "0 delete(s) final" in run.summary()
    for path, moved in deleted.items():  # moved, not removed: <trash>/<run id>/<path>
        assert not Path(path.removeprefix("file://")).exists()
        assert moved == f"file://{trash}/{run.run_id}{path.removeprefix('file://')}"
        assert Path(moved.removeprefix("file://")).read_bytes() == before[orders if "/orders/" in path else events][0][
            str(Path(path.removeprefix("file://")).relative_to(orders if "/orders/" in path else events))]
    with pytest.raises(OSError):
        _every_version(orders)  # time travel needs them
    for elsewhere, why in ((str(orders / "_trash"), "lies inside this table: its next vacuum would delete the trash"),
                           ("hdfs://nn/trash", "is on another file system: moving this table's files there would "
                                               "copy them")):
        refused = vacuum(spark, inventory, [orders], delete=DeleteSettings(trash=elsewhere))
        assert refused.tables[0].status == "refused" and refused.tables[0].reason.endswith(why)
        assert refused.tables[0].reason_code == "trash_unusable" and "--" not in refused.tables[0].reason

    # A writer puts a file at one deleted path of events: restore leaves it, and names it.
    again = Path(sorted(p for p in deleted if "/events/" in p)[0].removeprefix("file://"))
    again.parent.mkdir(parents=True, exist_ok=True)
    again.write_bytes(b"written again")
    restored = restore(spark, audit, run.run_id, dry_run=False)
    assert restored.tables == {f"file://{orders}": {"restored": sum("/orders/" in p for p in deleted)},
                               f"file://{events}": {"restored": sum("/events/" in p for p in deleted) - 1,
                                                    "not_restored": 1}}
    assert restored.problems == [f"file://{again}: written again since the vacuum: a file is at its path again"]
    history, versions = _run_history(orders, before[orders][1])
    assert (_files(orders), _every_version(orders)) == ({**before[orders][0], **history}, versions)  # byte for byte
    assert _files(events) == {**before[events][0], **_run_history(events, before[events][1])[0],
                              str(again.relative_to(events)): b"written again"}
    assert {str(p.relative_to(trash)) for p in trash.rglob("*") if p.is_file()} == {
        f"{run.run_id}{again}"}  # only the one left alone; emptied folders pruned

    idle = purge(spark, audit, 1, dry_run=False)  # nothing hidden a day yet: no table's log is read for it
    assert idle.ok and not idle.tables and Step.READING_LOGS not in idle.step_seconds, idle.step_seconds
    purged = purge(spark, audit, 1, dry_run=False, now_ms=_now_ms() + 2 * DAY_MS)
    assert purged.tables == {f"file://{events}": {"purged": 1}} and purged.ok
    assert Step.READING_LOGS in purged.step_seconds
    assert not list(trash.iterdir())  # the run's folder went with its last file
    answers = {a.path: (a.status, a.detail) for a in ErasureEvidence(spark, ErasureOptions(
        audit, inventory, tables=[str(orders), str(events)])).execute(paths=list(deleted)).answers}
    assert answers[f"file://{again}"][0] == "erased" and f"by purge run {purged.run_id}" in answers[f"file://{again}"][1]
    assert {status for path, (status, _) in answers.items() if path != f"file://{again}"} == {"restored"}


def test_an_audit_table_from_before_undo_still_reads_and_gains_the_columns(spark, tmp_path):
    audit, day = str(tmp_path / "audit"), datetime(2026, 11, 1, tzinfo=timezone.utc)
    before_undo = ("run_id string, table_root string, table_version long, path string, length long, "
                   "modificationTime long, action string, error string, timestamp timestamp, inventory_date date, "
                   "retention_hours double, run_date date")
    old = spark.createDataFrame([("run-0", "file:///t", 3, "file:///t/a.parquet", 1, 0, "deleted", None, day,
                                  day.date(), 168.0, day.date())], before_undo)
    write_delta(old, audit, ["run_date"], [{"run_date": "2026-11-01"}], mode="append")

    undone = restore(spark, audit, "run-0")  # reads the old rows: their deletes were final
    assert undone.tables == {"file:///t": {"not_restored": 1}} and "the delete was final" in undone.problems[0]

    outcomes = spark.createDataFrame([("s3://b/t", "s3://b/t/c.parquet", 1, 0, "deleted", None, 0, "v1", "m1", None)],
                                     OUTCOMES.schema)
    append_run(spark, audit, "run-1", _now_ms(), [RunTable("s3://b/t", AuditAction.TABLE_VACUUMED)], outcomes)
    assert set(LATER_COLUMNS) <= set(DeltaTable(audit).schema().to_arrow().names)  # gained, in their own commit
    rows = {r["run_id"]: r for r in read_audit(spark, audit).where("path is not null").collect()}
    assert (rows["run-0"]["delete_marker_id"], rows["run-1"]["delete_marker_id"]) == (None, "m1")
    # The chain starts with the first run appended after it existed; the older rows are counted, not verified.
    check = verify_chain(spark, audit)
    assert (check.ok, check.unchained_rows, check.rows_verified, check.head.run_id) == (True, 1, 2, "run-1")
