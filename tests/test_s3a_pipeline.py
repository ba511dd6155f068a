"""The daily cycle over the S3 API, as on AWS: moto's server is the endpoint for everything.

No folder stands in for a bucket. Spark reads the inventory delivery and the Delta logs through
hadoop-aws (``s3a://``; ``s3://`` mapped to the same connector, as on a cluster outside EMR); the lake
table is written by delta-spark where its jars are loaded (by deltalake on a line without them);
the inventory and audit tables live in a bucket; the vacuum deletes with ``DeleteObjects`` on a
versioned bucket, restore takes its delete markers away, purge erases the hidden versions; the
chargeback and the erasure evidence read the same tables. Credentials come from the environment
(``AWS_ACCESS_KEY_ID``, set before Spark starts), the endpoint from Spark's ``fs.s3a.endpoint`` for
Spark and from ``AWS_ENDPOINT_URL`` for deltalake and boto3. The commands run from their command lines;
one (``lake_reports erasure``) in a process of its own, set up the same way through
``PYSPARK_SUBMIT_ARGS``: a fresh driver finding Delta's jars and the S3 connector in its launch
settings is lakeio.spark.session's, the same for every command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import functions as F

from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import InventoryObject, write_delivery
from lake_reports.charges import chargeback
from lake_reports.cli import main as reports_main
from lake_reports.erasure_evidence import erasure
from lakeio.audit.contract import read_audit, verify_chain
from lakeio.spark.session import delta_jars_present
from lakeio.spark.steps import Step
from lakeio.times import epoch_ms
from tests.conftest import JARS
from tests.lakes import now_ms, ours, vacuum
from tests.s3_faults import FaultyS3, s3_client, s3a_settings
from tests.test_erasure_versions import _listing
from vacuum_jobs.batch_vacuum import BatchVacuum
from vacuum_jobs.budget import STOPPED_INSIDE
from vacuum_jobs.cli import main as vacuum_main
from vacuum_jobs.deletes import DeleteSettings
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.restore_purge import purge, restore

pytestmark = [pytest.mark.s3a, pytest.mark.slow]


def _objects(client, bucket: str, aged_days: float) -> list[InventoryObject]:
    """An all-versions inventory of the bucket, every object's last-modified moved back ``aged_days``."""
    back = int(aged_days * 24 * 3600 * 1000)
    return [replace(o, last_modified_ms=o.last_modified_ms - back) for o in _listing(client, bucket)]


def _deliver(client, local: Path, source: str, destination: str, objects: list[InventoryObject], when: datetime,
             file_format: str = "Parquet", config: str = "all-versions") -> str:
    """Write a delivery as S3 Inventory lays it out in ``destination``; the s3a:// URI of its manifest."""
    manifest = write_delivery(str(local), source, config, objects, when, file_format=file_format, versioned=True,
                              destination_bucket=destination)
    for path in local.rglob("*"):
        if path.is_file():
            client.upload_file(str(path), destination, f"inventory/{path.relative_to(local)}")
    return f"s3a://{destination}/inventory/{Path(manifest).relative_to(local)}"


def _write_lake_table(spark, table: str) -> None:
    """Three commits, the last replacing the rows: the first two commits' files are tombstones."""
    if delta_jars_present():
        for start in (0, 100):
            spark.range(start, start + 100).write.format("delta").mode("append").save(table)
        spark.range(5).write.format("delta").mode("overwrite").save(table)
        return
    s3_table = "s3" + table.removeprefix("s3a")
    for start in (0, 100):
        write_deltalake(s3_table, pa.table({"id": list(range(start, start + 100))}), mode="append")
    write_deltalake(s3_table, pa.table({"id": list(range(5))}), mode="overwrite")


def _lake(spark, s3) -> tuple[str, str, str]:
    """A versioned lake bucket holding one table, and a bucket for the project's own tables."""
    lake, housekeeping = f"lake-{uuid.uuid4().hex[:10]}", f"hk-{uuid.uuid4().hex[:10]}"
    for bucket in (lake, housekeeping):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=lake, VersioningConfiguration={"Status": "Enabled"})
    table = f"s3a://{lake}/warehouse/orders"
    _write_lake_table(spark, table)
    return lake, housekeeping, table


def _rows(spark, table: str) -> int:
    if delta_jars_present():
        return spark.read.format("delta").load(table).count()
    return DeltaTable("s3" + table.removeprefix("s3a")).to_pyarrow_table().num_rows


def _job(endpoint: str, module: str, *args: str, cwd: Path, status: int = 0) -> subprocess.CompletedProcess:
    """``python -m module args`` in a process of its own, set up as on a cluster: the jars and the S3
    connector's endpoint in Spark's conf, the credentials and the clients' endpoint in the environment;
    it must exit with ``status``."""
    conf = " ".join(f"--conf spark.hadoop.{key}={value}" for key, value in s3a_settings(endpoint).items())
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--jars {JARS} {conf} --driver-memory 1g pyspark-shell"}
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == status, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def _json(client, uri: str) -> dict:
    bucket, _, key = uri.removeprefix("s3a://").partition("/")
    return json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())


def _live_keys(client, bucket: str) -> set[str]:
    return {o.key for o in _objects(client, bucket, 0) if o.is_latest and not o.is_delete_marker}


@pytest.mark.jars_too  # with Delta's jars wherever they are: the lake written by Delta, our tables read by Delta
def test_the_daily_cycle_on_the_s3_api(spark, s3, s3_endpoint, tmp_path):
    lake, housekeeping, table = _lake(spark, s3)
    s3.put_object(Bucket=lake, Key="warehouse/orders/stale-orphan.parquet", Body=b"left by a failed job")
    rows = _rows(spark, table)
    inventory, audit = f"s3a://{housekeeping}/tables/inventory", f"s3a://{housekeeping}/tables/audit"
    settings = DeleteSettings(endpoint_url=s3_endpoint)

    # Job 1: the delivery read through s3a://, the inventory table written to the bucket.
    now = datetime.now(timezone.utc)
    manifest = _deliver(s3, tmp_path / "dest", lake, housekeeping, _objects(s3, lake, aged_days=10), now - timedelta(hours=1))
    ingested = IngestInventory(spark, inventory, {}).execute([manifest])
    assert not ingested.refused, ingested.refused
    assert ingested.ingested
    commit = DeltaTable("s3" + inventory.removeprefix("s3a")).history(1)[0]
    assert commit.get("engineInfo", "").startswith("delta-rs:"), commit  # deltalake's put-if-absent, with Delta's jars too

    # Job 2: the plan from the inventory and the log read through s3a://, deletes with DeleteObjects.
    live = _live_keys(s3, lake)
    run = vacuum(spark, inventory, [table], dry_run=False, retention_hours=0, enforce_retention_duration=False, audit_table=audit,
                 delete=settings, now_ms=now_ms() + 5000)
    assert [(t.status, t.reason) for t in run.tables] == [("vacuumed", None)]
    deleted = live - _live_keys(s3, lake)
    assert "warehouse/orders/stale-orphan.parquet" in deleted
    assert len(deleted) == run.totals()["deleted_files"] >= 3  # the orphan and the two replaced commits' files
    assert not any("_delta_log" in key for key in deleted)
    assert _rows(spark, table) == rows
    # No VACUUM START or END in a log on S3 unless the run is told every writer commits conditionally, as Delta.
    assert not ours("s3" + table.removeprefix("s3a")) and run.tables[0].history.startswith("off: Delta's default on s3://")

    # Restore takes the run's delete markers away; a second vacuum deletes again; purge erases the versions.
    restored = restore(spark, audit, run.run_id, dry_run=False, delete=settings)
    assert restored.ok and _live_keys(s3, lake) == live
    again = vacuum(spark, inventory, [table], dry_run=False, retention_hours=0, enforce_retention_duration=False, audit_table=audit,
                   delete=settings, now_ms=now_ms() + 5000)
    assert again.totals()["deleted_files"] == len(deleted)
    # The vacuum was told to erase at retention 0, forced past the table's own 7 days: the purge erases at once.
    purged = purge(spark, audit, 0, dry_run=False, delete=settings)
    assert purged.ok, purged.problems
    versions = s3.list_object_versions(Bucket=lake, Prefix="warehouse/orders/stale-orphan.parquet")
    assert not versions.get("Versions"), "purge erased every version of the orphan"
    assert _rows(spark, table) == rows

    # The reports read the same tables on S3: the next day's delivery (taken after the purge: the erasure
    # evidence trusts no same-day inventory to postdate it), then the chargeback and erasure.
    later = _deliver(s3, tmp_path / "dest2", lake, housekeeping, _objects(s3, lake, 0),
                     datetime.now(timezone.utc) + timedelta(days=1))
    assert not IngestInventory(spark, inventory, {}).execute([later]).refused
    charges = chargeback(spark, inventory)
    assert not charges.unreadable
    orders = next(t for t in charges.tables() if t.table and t.table.endswith("/warehouse/orders"))
    assert orders.bytes > 0
    evidence = erasure(spark, audit, inventory, paths=[f"s3://{lake}/warehouse/orders/stale-orphan.parquet"])
    assert not evidence.refused, evidence.refused
    assert [a.status for a in evidence.answers] == ["erased"], evidence.answers


@pytest.mark.every_line  # each line's S3 connector
def test_job_1_reads_each_report_format_through_s3a_and_refuses_a_damaged_delivery_by_name(spark, s3, tmp_path):
    lake, housekeeping, _ = _lake(spark, s3)
    objects = _objects(s3, lake, aged_days=1)
    when = datetime.now(timezone.utc) - timedelta(hours=1)
    manifests = {fmt: _deliver(s3, tmp_path / fmt, lake, housekeeping, objects, when, fmt, f"daily-{fmt.lower()}")
                 for fmt in ("Parquet", "ORC", "CSV")}
    damaged = _deliver(s3, tmp_path / "damaged", lake, housekeeping, objects, when, "CSV", "damaged")
    [data_key] = [o["Key"] for o in s3.list_objects_v2(Bucket=housekeeping, Prefix=f"inventory/{lake}/damaged/")["Contents"]
                  if "/data/" in o["Key"]]
    s3.put_object(Bucket=housekeeping, Key=data_key, Body=b"not the report the manifest names")
    inventory = f"s3a://{housekeeping}/tables/inventory"

    result = IngestInventory(spark, inventory, {}).execute([*manifests.values(), damaged])

    assert sorted(d.file_format for d in result.ingested) == ["CSV", "ORC", "Parquet"]
    [refused] = [d for d in result.deliveries if d.status == "refused"]
    assert refused.manifest_uri == damaged and data_key in refused.error and "does not match" in refused.error, refused
    table = "s3" + inventory.removeprefix("s3a")
    rows = DeltaTable(table).to_pyarrow_table(columns=["config_id", "key", "version_id"]).to_pylist()
    per_config = {c: sorted((r["key"], r["version_id"]) for r in rows if r["config_id"] == c) for c in {r["config_id"] for r in rows}}
    expected = sorted((o.key, o.version_id) for o in objects)
    assert per_config == {f"daily-{fmt.lower()}": expected for fmt in manifests}  # each format reads the same rows


@pytest.mark.every_line  # each line's S3 connector
def test_a_second_vacuum_over_the_first_runs_delete_markers_plans_none_of_them(spark, s3, s3_endpoint, tmp_path):
    """The next day's all-versions inventory lists the delete markers the first run added and the
    versions they hide: none is a candidate again, and the hidden bytes are the table's noncurrent ones."""
    lake, housekeeping, table = _lake(spark, s3)
    inventory = f"s3a://{housekeeping}/tables/inventory"
    now = datetime.now(timezone.utc)
    before = _objects(s3, lake, aged_days=10)
    overwritten = [o for o in before if not o.is_latest]  # Delta's own writer replaces a few log files in place
    first = _deliver(s3, tmp_path / "d1", lake, housekeeping, before, now - timedelta(days=1))
    assert not IngestInventory(spark, inventory, {}).execute([first]).refused
    run = vacuum(spark, inventory, [table], dry_run=False, retention_hours=0, enforce_retention_duration=False,
                 delete=DeleteSettings(endpoint_url=s3_endpoint), max_inventory_age_hours=48, history=True,
                 audit_table=f"s3a://{housekeeping}/tables/audit")  # where the store's If-None-Match is proven first
    [report] = run.tables
    assert report.counts.deleted_files >= 2 and report.counts.noncurrent_files == len(overwritten)
    # Told so (history=True), the run puts its VACUUM START and END into the log on S3 (If-None-Match).
    (started, start), (ended, end) = ours("s3" + table.removeprefix("s3a"))[run.run_id]
    assert (started, ended) == ("VACUUM START", "VACUUM END") and end["version"] == start["version"] + 1
    assert end["operationMetrics"]["numDeletedFiles"] == str(report.counts.deleted_files)
    assert report.history.endswith("(on: the run's setting (--history))"), report.history

    listed = _objects(s3, lake, aged_days=10)
    hidden = [o for o in listed if not o.is_latest and not o.is_delete_marker]
    assert len(hidden) == report.counts.deleted_files + len(overwritten)  # one version behind each delete marker
    second = _deliver(s3, tmp_path / "d2", lake, housekeeping, listed, now)
    assert not IngestInventory(spark, inventory, {}).execute([second]).refused
    again = vacuum(spark, inventory, [table], dry_run=True, retention_hours=0, enforce_retention_duration=False)

    [counts] = [t.counts for t in again.tables]
    assert (counts.candidate_files, counts.missing_files) == (0, 0), counts
    assert (counts.noncurrent_files, counts.noncurrent_bytes) == (len(hidden), sum(o.size or 0 for o in hidden))


@pytest.mark.jars_too
def test_job_2_from_its_command_line_finds_plans_and_deletes_through_the_s3_api_and_reports_there(spark, s3, s3_endpoint,
                                                                                                  tmp_path):
    """Job 2 on its own, from its command line: tables found in the inventory, the report and the audit
    written to S3."""
    lake, housekeeping, table = _lake(spark, s3)
    s3.put_object(Bucket=lake, Key="warehouse/orders/stale-orphan.parquet", Body=b"left by a failed job")
    rows = _rows(spark, table)
    inventory, audit = f"s3a://{housekeeping}/tables/inventory", f"s3a://{housekeeping}/tables/audit"
    report = f"s3a://{housekeeping}/reports/vacuum.json"
    manifest = _deliver(s3, tmp_path / "dest", lake, housekeeping, _objects(s3, lake, aged_days=10),
                        datetime.now(timezone.utc) - timedelta(hours=1))
    assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused
    # A DynamoDB log store's temp commit file: no history here, even with --history.
    s3.put_object(Bucket=lake, Key=f"warehouse/orders/_delta_log/.tmp/00000000000000000009.json.{uuid.uuid4()}", Body=b"")
    live = _live_keys(s3, lake)

    # The endpoint named: this process's Python workers began before the fixture set AWS_ENDPOINT_URL.
    assert vacuum_main(["--inventory-table", inventory, "--discover", "--retain-hours", "0", "--force-retention",
                        "--apply", "--audit-table", audit, "--report", report, "--history",
                        "--s3-endpoint-url", s3_endpoint]) == 0

    [vacuumed] = _json(s3, report)["tables"]
    assert vacuumed["status"] == "vacuumed" and vacuumed["table"].endswith(f"{lake}/warehouse/orders"), vacuumed
    assert vacuumed["history"].startswith("not recorded: its log holds a DynamoDB log store's temp files"), vacuumed
    assert not ours("s3" + table.removeprefix("s3a"))
    deleted = live - _live_keys(s3, lake)
    assert "warehouse/orders/stale-orphan.parquet" in deleted and not any("_delta_log" in key for key in deleted)
    assert len(deleted) == vacuumed["counts"]["deleted_files"] >= 3
    recorded = DeltaTable("s3" + audit.removeprefix("s3a")).to_pyarrow_table(columns=["path", "action"]).to_pylist()
    assert sorted(r["path"].split(f"{lake}/", 1)[1] for r in recorded if r["action"] == "deleted") == sorted(deleted)
    assert _rows(spark, table) == rows


def test_the_reports_from_their_command_lines_read_the_inventory_and_the_audit_on_s3(spark, s3, s3_endpoint, tmp_path):
    """The chargeback and the erasure evidence on their own: the inventory and the audit on S3, the
    delete a vacuum made there, the report written back to S3 and the chargeback's files kept locally."""
    lake, housekeeping, table = _lake(spark, s3)
    s3.put_object(Bucket=lake, Key="warehouse/orders/stale-orphan.parquet", Body=b"left by a failed job")
    inventory, audit = f"s3a://{housekeeping}/tables/inventory", f"s3a://{housekeeping}/tables/audit"
    now = datetime.now(timezone.utc)
    manifest = _deliver(s3, tmp_path / "d1", lake, housekeeping, _objects(s3, lake, aged_days=10), now - timedelta(days=1))
    assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused
    run = vacuum(spark, inventory, [table], dry_run=False, retention_hours=0, enforce_retention_duration=False, audit_table=audit,
                 delete=DeleteSettings(endpoint_url=s3_endpoint), now_ms=now_ms() + 5000, max_inventory_age_hours=48)
    assert run.ok, run.tables
    later = _deliver(s3, tmp_path / "d2", lake, housekeeping, _objects(s3, lake, aged_days=0), now)
    assert not IngestInventory(spark, inventory, {}).execute([later]).refused

    # The chargeback's command line in this process; the erasure's in one of its own (as on a cluster).
    assert reports_main(["chargeback", "--inventory-table", inventory, "--out", str(tmp_path / "charges")]) == 0
    evidence = f"s3a://{housekeeping}/reports/erasure.json"
    _job(s3_endpoint, "lake_reports", "erasure", "--audit-table", audit, "--inventory-table", inventory, "--path",
         f"s3://{lake}/warehouse/orders/stale-orphan.parquet", "--report", evidence, cwd=tmp_path, status=1)

    charged = json.loads((tmp_path / "charges" / "chargeback.json").read_text())
    assert charged["balanced"] and not charged["unreadable_tables"], charged
    [orders] = charged["tables"]
    listed = _objects(s3, lake, 0)  # delete markers: the run's, and Delta's writer's where it renamed a file
    hidden = [o for o in listed if not o.is_latest and not o.is_delete_marker]
    assert orders["table"] == f"s3://{lake}/warehouse/orders"
    assert orders["bytes_by_category"]["noncurrent"] == sum(o.size or 0 for o in hidden) > 0
    assert orders["objects_by_category"]["delete_marker"] == sum(o.is_delete_marker for o in listed) >= run.totals()["deleted_files"]
    # Not erased, and said so: the delete marker hides a version that keeps the bytes, and exit status 1
    # because nothing bounds the table's erasure while no purge run or lifecycle rule removes such versions.
    [answer] = _json(s3, evidence)["answers"]
    assert (answer["status"], answer["run_id"]) == ("soft_deleted", run.run_id), answer
    [worst] = _json(s3, evidence)["tables"]
    assert worst["over_deadline"] and "not bounded" in worst["problem"], worst


@pytest.mark.every_line  # each line's S3 connector
def test_a_log_file_cleaned_up_while_the_run_plans_refuses_its_table_alone_on_the_s3_api(spark, s3, tmp_path):
    """test_vacuum_safety's case over the S3 API: a writer commits, checkpoints and removes its old log
    files between the run's summary read and its plan. What S3A raises for the vanished file is told
    apart by its class (lakeio.spark.session.is_missing_file), so that table alone is refused."""
    lake, housekeeping = f"lake-{uuid.uuid4().hex[:10]}", f"hk-{uuid.uuid4().hex[:10]}"
    for bucket in (lake, housekeeping):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=lake, VersioningConfiguration={"Status": "Enabled"})
    cleaned, other = f"s3://{lake}/warehouse/cleaned", f"s3://{lake}/warehouse/other"
    for i in range(3):
        write_deltalake(cleaned, pa.table({"id": [i]}), mode="append")
    DeltaTable(cleaned).create_checkpoint()  # version 2
    write_deltalake(cleaned, pa.table({"id": [3]}), mode="append")  # version 3: the run reads checkpoint 2, then 3
    for i in range(2):
        write_deltalake(other, pa.table({"id": [i]}), mode="overwrite")
    inventory = f"s3a://{housekeeping}/tables/inventory"
    manifest = _deliver(s3, tmp_path / "dest", lake, housekeeping, _objects(s3, lake, aged_days=10),
                        datetime.now(timezone.utc) - timedelta(hours=1))
    assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused
    cleaned_up = []

    def clean_up_before_the_first_plan(step: str) -> None:
        if step == Step.PLANNING and not cleaned_up:
            write_deltalake(cleaned, pa.table({"id": [4]}), mode="append")  # version 4
            DeltaTable(cleaned).create_checkpoint()
            for listed in s3.list_objects_v2(Bucket=lake, Prefix="warehouse/cleaned/_delta_log/")["Contents"]:
                name = listed["Key"].rsplit("/", 1)[1]
                if name[:20].isdigit() and int(name[:20]) <= 3:
                    s3.delete_object(Bucket=lake, Key=listed["Key"])
            cleaned_up.append(True)

    run = BatchVacuum(spark, VacuumOptions(inventory, retention_hours=0, enforce_retention_duration=False),
                      on_step=clean_up_before_the_first_plan).execute(["s3a" + t.removeprefix("s3") for t in (cleaned, other)])

    tables = {t.table.rsplit("/", 1)[1]: t for t in run.tables}
    assert cleaned_up and tables["cleaned"].status == "refused", (tables["cleaned"].status, tables["cleaned"].reason)
    assert "vanished while the run planned" in tables["cleaned"].reason
    assert tables["other"].status == "dry_run" and tables["other"].counts.candidate_files == 1, tables["other"]


@pytest.mark.jars_too  # Delta's own reader reads a table's newest version each time a frame runs, unless told one
def test_a_delivery_ingested_while_the_run_deletes_changes_nothing_it_deletes_or_records(spark, s3, s3_endpoint, tmp_path):
    """A run reads one version of the inventory table however often it reads it (to plan, to note what it
    will delete, to delete). Here a second configuration's delivery of the same day lands as the run
    begins to delete, listing a newer version of every object: the run deletes what it planned and
    records the versions its delete markers hide, as the bucket shows them, not the rows it never planned with."""
    lake, housekeeping, table = _lake(spark, s3)
    inventory, audit = f"s3a://{housekeeping}/tables/inventory", f"s3a://{housekeeping}/tables/audit"
    when = datetime.now(timezone.utc) - timedelta(hours=1)
    listed = _objects(s3, lake, aged_days=10)
    assert not IngestInventory(spark, inventory, {}).execute([_deliver(s3, tmp_path / "d1", lake, housekeeping, listed,
                                                                       when)]).refused
    current = {o.key: o.version_id for o in listed if o.is_latest and not o.is_delete_marker}
    landed = []

    def second_delivery(step: str) -> None:
        if step == Step.DELETING and not landed:
            newer = [replace(o, version_id=f"{o.version_id}-newer", last_modified_ms=o.last_modified_ms + 1000)
                     for o in listed if o.key in current and o.is_latest]
            manifest = _deliver(s3, tmp_path / "d2", lake, housekeeping, newer, when, config="second")
            landed.append(IngestInventory(spark, inventory, {}).execute([manifest]))

    run = BatchVacuum(spark, VacuumOptions(inventory, dry_run=False, retention_hours=0, enforce_retention_duration=False,
                                           audit_table=audit, delete=DeleteSettings(endpoint_url=s3_endpoint),
                                           now_ms=now_ms() + 5000), on_step=second_delivery).execute([table])

    assert landed and landed[0].ingested and not landed[0].refused
    assert run.ok and run.totals()["deleted_files"] >= 2, run.to_json()
    recorded = {r["path"].split("/", 3)[3]: r["version_id"]
                for r in read_audit(spark, audit).where("action = 'deleted'").collect()}
    assert len(recorded) == run.totals()["deleted_files"]
    assert recorded == {key: current[key] for key in recorded}
    hidden = {o.key: o.version_id for o in _objects(s3, lake, 0) if o.key in recorded and not o.is_latest}
    assert hidden == recorded


def test_keys_gone_since_the_inventory_are_already_absent_in_the_report_the_audit_and_the_evidence(spark, s3, s3_endpoint,
                                                                                                     tmp_path):
    """A delivery lists two orphans another tool removed before the run (one for good, one behind a delete
    marker of its own). The run's conditional deletes find them gone: `already_absent` in the report, the
    audit and the erasure evidence alike, no delete marker of the run's on them; the others are its deletes."""
    lake, housekeeping, table = _lake(spark, s3)
    orphans = [f"warehouse/orders/orphan-{i}.parquet" for i in range(4)]
    for key in orphans:
        s3.put_object(Bucket=lake, Key=key, Body=b"left by a failed job")
    inventory, audit = f"s3a://{housekeeping}/tables/inventory", f"s3a://{housekeeping}/tables/audit"
    now = datetime.now(timezone.utc)
    manifest = _deliver(s3, tmp_path / "d1", lake, housekeeping, _objects(s3, lake, aged_days=10), now - timedelta(hours=1))
    assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused
    for version in s3.list_object_versions(Bucket=lake, Prefix=orphans[0])["Versions"]:  # gone for good
        s3.delete_object(Bucket=lake, Key=orphans[0], VersionId=version["VersionId"])
    s3.delete_object(Bucket=lake, Key=orphans[1])  # hidden by someone else's delete marker
    markers_before = {m["VersionId"] for m in s3.list_object_versions(Bucket=lake).get("DeleteMarkers", [])}

    run = vacuum(spark, inventory, [table], dry_run=False, retention_hours=0, enforce_retention_duration=False,
                 audit_table=audit, delete=DeleteSettings(endpoint_url=s3_endpoint), now_ms=now_ms() + 5000)

    assert run.ok and run.deletes_unconfirmed is None, run.summary()
    [counts] = [t.counts for t in run.tables]
    assert (counts.already_absent_files, counts.deleted_or_absent_files) == (2, 0), counts
    assert counts.deleted_files == counts.candidate_files - 2 and "2 already absent" in run.summary()
    actions = {r["path"].split(f"{lake}/", 1)[1]: r["action"] for r in read_audit(spark, audit).where("path is not null")
               .select("path", "action").collect()}
    assert {k: a for k, a in actions.items() if k in orphans} == {
        orphans[0]: "already_absent", orphans[1]: "already_absent", orphans[2]: "deleted", orphans[3]: "deleted"}
    ours_now = {m["Key"] for m in s3.list_object_versions(Bucket=lake).get("DeleteMarkers", [])
                if m["VersionId"] not in markers_before}
    assert not ours_now & set(orphans[:2]) and set(orphans[2:]) <= ours_now  # no marker of the run's on a key gone
    evidence = erasure(spark, audit, inventory, paths=[f"s3://{lake}/{orphans[0]}", f"s3://{lake}/{orphans[2]}"])
    statuses = {a.path.rsplit("/", 1)[1]: (a.status, a.run_id) for a in evidence.answers}
    assert statuses["orphan-0.parquet"] == ("absent_when_vacuumed", run.run_id), statuses
    assert statuses["orphan-2.parquet"][0] != "absent_when_vacuumed", statuses


def test_where_the_store_ignores_conditional_deletes_no_delete_is_claimed_and_restore_says_what_it_finds(
        spark, s3, tmp_path, monkeypatch):
    """moto's own server takes `ETag: *` and deletes anyway: the run proves that first, claims none of its
    deletes (`deleted_or_absent`, and why), the evidence attributes no erasure to it, and restore leaves a
    key that was gone before the run as it found it, saying so."""
    from tests.s3_faults import moto_server, point_s3a_at

    with moto_server(module="moto.server") as plain:
        client = s3_client(plain)
        point_s3a_at(spark, plain)
        monkeypatch.setenv("AWS_ENDPOINT_URL", plain)
        try:
            lake, housekeeping, table = _lake(spark, client)
            for key in ("warehouse/orders/orphan-here.parquet", "warehouse/orders/orphan-gone.parquet"):
                client.put_object(Bucket=lake, Key=key, Body=b"left by a failed job")
            inventory, audit = f"s3a://{housekeeping}/tables/inventory", f"s3a://{housekeeping}/tables/audit"
            manifest = _deliver(client, tmp_path / "d1", lake, housekeeping, _objects(client, lake, aged_days=10),
                                datetime.now(timezone.utc) - timedelta(hours=1))
            assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused
            client.delete_object(Bucket=lake, Key="warehouse/orders/orphan-gone.parquet")

            run = vacuum(spark, inventory, [table], dry_run=False, retention_hours=0, enforce_retention_duration=False,
                         audit_table=audit, delete=DeleteSettings(endpoint_url=plain), now_ms=now_ms() + 5000)
            totals = run.totals()
            assert (totals["deleted_files"], totals["already_absent_files"]) == (0, 0), run.summary()
            assert totals["deleted_or_absent_files"] == totals["candidate_files"] >= 2
            assert f"{plain} ignores the condition" in run.deletes_unconfirmed and "note: S3 answers" in run.summary()
            gone = f"s3://{lake}/warehouse/orders/orphan-gone.parquet"
            [answer] = erasure(spark, audit, inventory, paths=[gone]).answers
            assert "deleted it or found it already gone" in answer.detail and "deleted at" not in answer.detail, answer

            undone = restore(spark, audit, run.run_id, dry_run=False, delete=DeleteSettings(endpoint_url=plain))
            outcome = {p.split(": ", 1)[0]: p.split(": ", 1)[1] for p in undone.problems}
            assert outcome[gone].startswith("it was gone before the vacuum run"), undone.problems
            assert sum(c.get("restored", 0) for c in undone.tables.values()) == totals["candidate_files"] - 1
        finally:
            point_s3a_at(spark, s3.meta.endpoint_url)


def test_a_budget_on_s3_spends_on_the_costliest_storage_first_and_the_next_run_takes_what_it_deferred(spark, s3, s3_endpoint,
                                                                                                      tmp_path):
    """Two tables on a versioned bucket: one's orphans in STANDARD, the other's, more bytes, in DEEP_ARCHIVE (as
    the inventory lists them). A budget one delete past the first table spends it there whole, then takes the
    other's largest file: each delete a delete marker, restorable. The next run, though the first table has new
    orphans worth more, takes first what the first run deferred, and defers the first table."""
    lake, housekeeping, orders = _lake(spark, s3)
    archive = f"s3a://{lake}/warehouse/archive"
    _write_lake_table(spark, archive)
    for i in range(3):
        s3.put_object(Bucket=lake, Key=f"warehouse/orders/orphan-{i}.parquet", Body=b"o" * 10_000)
        s3.put_object(Bucket=lake, Key=f"warehouse/archive/orphan-{i}.parquet", Body=b"a" * (50_000 + i))
    inventory, audit = f"s3a://{housekeeping}/tables/inventory", f"s3a://{housekeeping}/tables/audit"
    now = datetime.now(timezone.utc)

    def deliver(name: str, hours_ago: float) -> None:
        listed = [replace(o, storage_class="DEEP_ARCHIVE") if o.key.startswith("warehouse/archive/") and o.storage_class
                  else o for o in _objects(s3, lake, aged_days=10)]
        manifest = _deliver(s3, tmp_path / name, lake, housekeeping, listed, now - timedelta(hours=hours_ago))
        assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused

    forced = {"retention_hours": 0, "enforce_retention_duration": False, "delete": DeleteSettings(endpoint_url=s3_endpoint)}
    deliver("d1", 2)
    whole = {Path(t.table).name: t.counts.candidate_files for t in vacuum(spark, inventory, [orders, archive],
                                                                            now_ms=now_ms() + 5000, **forced).tables}
    first = vacuum(spark, inventory, [orders, archive], dry_run=False, audit_table=audit, max_deletes=whole["orders"] + 1,
                   now_ms=now_ms() + 5000, **forced)
    by = {Path(t.table).name: t for t in first.tables}
    assert first.ok and by["orders"].counts.deleted_files == whole["orders"], first.summary()
    assert by["archive"].counts.deleted_files == 1 and by["archive"].counts.deferred_files == whole["archive"] - 1
    assert by["orders"].candidate_usd_per_month > by["archive"].candidate_usd_per_month  # STANDARD over DEEP_ARCHIVE
    assert first.totals()["restorable_files"] == whole["orders"] + 1  # each a delete marker over its version
    assert "warehouse/archive/orphan-2.parquet" not in _live_keys(s3, lake)  # its largest file
    assert {"warehouse/archive/orphan-0.parquet", "warehouse/archive/orphan-1.parquet"} <= _live_keys(s3, lake)

    for i in range(3, 6):
        s3.put_object(Bucket=lake, Key=f"warehouse/orders/orphan-{i}.parquet", Body=b"o" * 10_000)
    deliver("d2", 1)
    second = vacuum(spark, inventory, [orders, archive], dry_run=False, audit_table=audit,
                    max_deletes=whole["archive"] - 1, now_ms=now_ms() + 5000, **forced)
    by = {Path(t.table).name: t for t in second.tables}
    assert by["archive"].status == "vacuumed" and by["archive"].counts.deleted_files == whole["archive"] - 1
    assert by["orders"].status == "deferred" and by["orders"].counts.deferred_files == 3, second.summary()
    assert not {k for k in _live_keys(s3, lake) if k.startswith("warehouse/archive/orphan-")}


def test_a_run_whose_time_runs_out_on_s3_answers_the_request_it_sent_and_defers_the_rest(spark, s3, s3_endpoint, tmp_path):
    """The run's first DeleteObjects (two keys) is held at the store until the run's --max-minutes has passed:
    its answer counts, no other request starts, and every other candidate is deferred, recorded so in the audit
    and taken by the next run."""
    lake, housekeeping, orders = _lake(spark, s3)
    for i in range(6):
        s3.put_object(Bucket=lake, Key=f"warehouse/orders/orphan-{i}.parquet", Body=b"o" * 1000)
    inventory, audit = f"s3a://{housekeeping}/tables/inventory", f"s3a://{housekeeping}/tables/audit"
    manifest = _deliver(s3, tmp_path / "d1", lake, housekeeping, _objects(s3, lake, aged_days=10),
                        datetime.now(timezone.utc) - timedelta(hours=1))
    assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused
    forced = {"retention_hours": 0, "enforce_retention_duration": False}
    planning = time.monotonic()
    whole = vacuum(spark, inventory, [orders], now_ms=now_ms() + 5000, **forced).tables[0].counts.candidate_files
    assert whole > 2
    # The run's time, which the test waits out: four times what planning the table took just now, and half
    # a minute at least (the run also creates its audit table and probes the store before its first delete),
    # so that its first delete comes well within it.
    minutes = round(min(1.0, max(0.5, 4 * (time.monotonic() - planning) / 60)), 2)
    proxy = FaultyS3(s3_endpoint)
    proxy.hold, proxy.hold_bucket, done = threading.Event(), lake, {}
    live, began = _live_keys(s3, lake), epoch_ms()

    def run() -> None:
        done["report"] = vacuum(spark, inventory, [orders], dry_run=False, audit_table=audit, max_minutes=minutes,
                                now_ms=now_ms() + 5000, delete=DeleteSettings(endpoint_url=proxy.endpoint, batch_size=2),
                                **forced)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        assert proxy.arrived.wait(timeout=minutes * 60), "the run sent no delete within its time: nothing to hold"
        arrived = epoch_ms()
        assert arrived < began + minutes * 60_000, "the first delete came after the run's time: the test cannot cut it"
        # The run began before the request came, so its time is over by then plus its minutes.
        time.sleep((arrived + minutes * 60_000 - epoch_ms()) / 1000 + 0.1)
    finally:
        proxy.hold.set()
        runner.join()
        proxy.close()
    report = done["report"]
    table = report.tables[0]
    removed = table.counts.deleted_files + table.counts.deleted_or_absent_files
    assert report.ok and table.status == "vacuumed" and removed == 2, report.summary()
    assert (table.counts.deferred_files, table.counts.deferred_bytes > 0) == (whole - 2, True)
    assert table.reason_code == "budget_spent" and table.reason.startswith(STOPPED_INSIDE), table.reason
    assert len(live - _live_keys(s3, lake)) == 2  # no other delete reached the lake
    assert f"budget: {minutes:g} minute(s); 1 table(s)" in report.summary()
    rows = read_audit(spark, audit).where(F.col("run_id") == report.run_id)
    deferred = [row["path"] for row in rows.where(F.col("action") == "deferred").collect()]
    assert len(deferred) == whole - 2 and not verify_chain(spark, audit).problems
    [answer] = erasure(spark, audit, inventory, paths=[deferred[0]]).answers  # not erased, and why
    assert answer.status == "not_vacuumed_since" and f"run {report.run_id} planned it, and ran out of time" in answer.detail

    after = vacuum(spark, inventory, [orders], dry_run=False, audit_table=audit, now_ms=now_ms() + 5000,
                   delete=DeleteSettings(endpoint_url=s3_endpoint), **forced)
    counts = after.tables[0].counts
    # the same inventory: what the first run deleted is already gone, the rest is this run's
    assert (counts.deleted_files + counts.deleted_or_absent_files, counts.already_absent_files) == (whole - 2, 2)
    assert not {k for k in _live_keys(s3, lake) if k.startswith("warehouse/orders/orphan-")}
