"""On a versioned S3 bucket a vacuum's delete only adds a delete marker: the bytes stay as a
noncurrent version. Erasure evidence says "erased" only when no version of the file remains
(see test_restore_purge for the purge that erases them).

The deletes are real (``DeleteObjects`` against the moto server, versioning on); the
inventories are the bucket's own version listings before and after them.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import InventoryObject, write_delivery
from lake_reports.erasure_evidence import ErasureEvidence, ErasureOptions
from lakeio.audit.contract import TableStatus
from tests.s3_faults import s3_client
from vacuum_jobs.delete_tasks import delete_planned
from vacuum_jobs.deletes import DeleteSettings
from vacuum_jobs.recording import write_audit
from vacuum_jobs.report import RunReport, TableReport

pytestmark = pytest.mark.slow  # inventories ingested on Spark


def _listing(client, bucket: str) -> list[InventoryObject]:
    """What an all-versions S3 Inventory of the bucket would list now."""
    found = client.list_object_versions(Bucket=bucket)
    ms = lambda v: int(v["LastModified"].timestamp() * 1000)  # noqa: E731
    return ([InventoryObject(v["Key"], v["Size"], ms(v), v["ETag"].strip('"'), version_id=v["VersionId"],
                             is_latest=v["IsLatest"]) for v in found.get("Versions", [])]
            + [InventoryObject(m["Key"], None, ms(m), version_id=m["VersionId"], is_latest=m["IsLatest"],
                               is_delete_marker=True, storage_class=None) for m in found.get("DeleteMarkers", [])])


def test_a_file_whose_versions_remain_is_soft_deleted_not_erased(spark, s3_endpoint, tmp_path):
    client = s3_client(s3_endpoint)
    bucket = f"v-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for key in ("t/_delta_log/00000000000000000000.json", "t/marked.parquet", "t/purged.parquet"):
        client.put_object(Bucket=bucket, Key=key, Body=b"rows of a user who asked to be forgotten")
    before = _listing(client, bucket)
    version_of = {o.key: o.version_id for o in before}
    now = datetime.now(timezone.utc)
    inventory, dest = str(tmp_path / "inventory"), str(tmp_path / "dest")
    manifest = write_delivery(dest, bucket, "all-versions", before, now - timedelta(days=1), versioned=True)
    assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused

    # One run deletes both files: one as vacuum does by default (a delete marker), one with --purge-versions.
    table = f"s3://{bucket}/t"
    targets = spark.createDataFrame(
        [(table, f"s3://{bucket}/t/marked.parquet", 40, 0, []),
         (table, f"s3://{bucket}/t/purged.parquet", 40, 0, [version_of["t/purged.parquet"]])],
        "table_root string, path string, length long, modificationTime long, version_ids array<string>")
    settings = DeleteSettings(endpoint_url=s3_endpoint, if_present=True)  # our moto honours conditional deletes
    outcomes = delete_planned(spark, targets.where(~targets.path.endswith("purged.parquet")), settings, "r").unionByName(
        delete_planned(spark, targets.where(targets.path.endswith("purged.parquet")),
                       DeleteSettings(endpoint_url=s3_endpoint, purge_versions=True), "r")
    ).localCheckpoint(eager=True)
    assert {r["action"] for r in outcomes.collect()} == {"deleted"}
    audit = str(tmp_path / "audit")
    run = RunReport("run-1", "", inventory, (now - timedelta(days=1)).date().isoformat(), dry_run=False,
                    tables=[TableReport(table, TableStatus.VACUUMED, None, 0, 168.0)])
    write_audit(spark, audit, run, int(now.timestamp() * 1000), outcomes)

    def statuses(**options) -> dict[str, tuple[str, str]]:
        report = ErasureEvidence(spark, ErasureOptions(audit, inventory, **options)).execute(
            paths=[f"s3://{bucket}/t/marked.parquet", f"s3://{bucket}/t/purged.parquet"])
        return {a.path.rsplit("/", 1)[1]: (a.status, a.detail) for a in report.answers}

    # The run recorded the delete marker it added; the newest inventory was taken before the deletes,
    # so it cannot tell whether the purged file's versions are gone.
    answers = statuses()
    assert {name: status for name, (status, _) in answers.items()} == {
        "marked.parquet": "soft_deleted", "purged.parquet": "erasure_unconfirmed"}
    marker = next(o for o in _listing(client, bucket) if o.key == "t/marked.parquet" and o.is_delete_marker)
    assert f"delete marker {marker.version_id} hides" in answers["marked.parquet"][1]

    # The next day's all-versions inventory lists what the bucket holds after the deletes.
    after = _listing(client, bucket)
    assert {(o.key, o.is_delete_marker) for o in after if not o.is_latest or o.is_delete_marker} == {
        ("t/marked.parquet", False), ("t/marked.parquet", True)}
    manifest = write_delivery(dest, bucket, "all-versions", after, now + timedelta(days=1), versioned=True)
    assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused
    answers = statuses()
    status, detail = answers["marked.parquet"]
    assert status == "soft_deleted" and version_of["t/marked.parquet"] in detail and "restorable" in detail
    assert answers["purged.parquet"][0] == "erased"
