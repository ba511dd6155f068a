"""A neglected lake cleared over several budgeted nights, through a store that throttles each prefix.

Fifty Delta tables (written by deltalake) on moto's server, each holding orphans of its own size and
storage class, so that each table's candidates cost a different amount a month. Every night is a new
inventory delivery, ingested, then one applied run with ``--max-deletes`` through a proxy that answers
``SlowDown`` where a table's folder is asked more keys than it takes (tests.s3_faults.FaultyS3). The test
keeps its own ledger of what is left and what each table's leftovers cost, from how it built the lake,
and holds every night to it: within the budget, the costliest first after what the night before left,
the audit whole and verifying, and in the end exactly the files one unbudgeted dry run named.

``BACKLOG_CANDIDATES`` sets the lake's orphans (default 5,000; the issue's lake is 200,000, some
minutes more).
"""

from __future__ import annotations

import math
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import functions as F

from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import InventoryObject, write_delivery
from lakeio.audit.contract import REMOVED, read_audit, verify_chain
from lakeio.prices import BYTES_PER_GB, DEFAULT_USD_PER_GB_MONTH
from tests.lakes import now_ms, vacuum
from tests.s3_faults import FaultyS3
from vacuum_jobs.deletes import DeleteSettings

pytestmark = [pytest.mark.s3a, pytest.mark.slow]

TABLES = 50
CLASSES = ("STANDARD", "STANDARD_IA", "GLACIER_IR", "DEEP_ARCHIVE")
AGED_MS = 10 * 24 * 3600 * 1000  # each delivery lists the objects ten days older than they are


def _listing(client, bucket: str, class_of: dict[str, str]) -> list[InventoryObject]:
    """What a current-versions S3 Inventory of the bucket lists now, every object aged, each table's objects
    in its storage class (``class_of``: table folder -> class)."""
    objects = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            folder = "/".join(o["Key"].split("/")[:2])
            objects.append(InventoryObject(o["Key"], o["Size"], int(o["LastModified"].timestamp() * 1000) - AGED_MS,
                                           o["ETag"].strip('"'), storage_class=class_of.get(folder, "STANDARD")))
    return objects


def _deliver(client, local: Path, lake: str, housekeeping: str, objects: list[InventoryObject], when: datetime) -> str:
    manifest = write_delivery(str(local), lake, "current", objects, when, destination_bucket=housekeeping)
    for path in local.rglob("*"):
        if path.is_file():
            client.upload_file(str(path), housekeeping, f"inventory/{path.relative_to(local)}")
    return f"s3a://{housekeeping}/inventory/{Path(manifest).relative_to(local)}"


def test_a_backlog_lake_is_cleared_over_budgeted_nights_costliest_first_and_deferred_first(spark, s3, s3_endpoint,
                                                                                           tmp_path):
    candidates = int(os.environ.get("BACKLOG_CANDIDATES", "5000"))
    per_table = math.ceil(candidates / TABLES)
    lake, housekeeping = f"lake-{uuid.uuid4().hex[:10]}", f"hk-{uuid.uuid4().hex[:10]}"
    for bucket in (lake, housekeeping):
        s3.create_bucket(Bucket=bucket)
    folders = [f"warehouse/t{i:02d}" for i in range(TABLES)]
    class_of = {folder: CLASSES[i % len(CLASSES)] for i, folder in enumerate(folders)}
    size_of = {folder: 40 + 13 * i for i, folder in enumerate(folders)}  # bytes of each of its orphans
    for i, folder in enumerate(folders):
        write_deltalake(f"s3://{lake}/{folder}", pa.table({"id": [i]}))
    orphans = [(folder, f"{folder}/orphan-{n:06d}.parquet") for folder in folders for n in range(per_table)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda o: s3.put_object(Bucket=lake, Key=o[1], Body=b"x" * size_of[o[0]]), orphans))
    inventory, audit = f"s3a://{housekeeping}/tables/inventory", f"s3a://{housekeeping}/tables/audit"
    tables = [f"s3a://{lake}/{folder}" for folder in folders]
    first_night = datetime.now(timezone.utc) - timedelta(hours=12)

    def deliver(night: int) -> None:
        when = first_night + timedelta(minutes=10 * night)
        manifest = _deliver(s3, tmp_path / f"night-{night}", lake, housekeeping, _listing(s3, lake, class_of), when)
        assert not IngestInventory(spark, inventory, {}).execute([manifest]).refused

    forced = {"retention_hours": 0, "enforce_retention_duration": False, "now_ms": now_ms() + 5000}
    deliver(0)
    whole = vacuum(spark, inventory, tables, **forced)  # one unbudgeted run, as a dry run: what the nights must delete
    named = {row["path"] for row in whole.outcomes.select("path").collect()}
    assert len(named) == TABLES * per_table and whole.totals()["candidate_files"] == len(named)

    budget = math.ceil(len(named) / 3)  # three nights: the second and third take what the one before left
    proxy = FaultyS3(s3_endpoint, prefix_keys_per_second=50, burst_seconds=0.05)
    left = {folder: {f"s3://{lake}/{key}" for f, key in orphans if f == folder} for folder in folders}

    def cost(folder: str) -> float:  # what a table's leftovers cost a month, from how the test built them
        return len(left[folder]) * size_of[folder] / BYTES_PER_GB * DEFAULT_USD_PER_GB_MONTH[class_of[folder]]

    carried: set[str] = set()  # tables the night before left work in
    gone: set[str] = set()
    try:
        for night in range(1, 9):
            if not any(left.values()):
                break
            if night > 1:
                deliver(night)
            remaining = sum(len(paths) for paths in left.values())
            order = sorted((f for f in folders if left[f]), key=lambda f: (f not in carried, -cost(f)))
            report = vacuum(spark, inventory, tables, dry_run=False, audit_table=audit, max_deletes=budget,
                            delete=DeleteSettings(endpoint_url=proxy.endpoint, batch_size=10,
                                                  prefix_keys_per_second=2000), **forced)
            by = {t.table.rsplit(f"{lake}/", 1)[1]: t for t in report.tables}
            removed = report.totals()["deleted_files"] + report.totals()["deleted_or_absent_files"]
            # within its budget (to 10%), every planned delete done, nothing failed
            assert report.ok and report.totals()["failed_files"] == 0, report.summary()
            assert 0.9 * min(budget, remaining) <= removed <= budget, (night, removed, budget, remaining)
            # the tables it took are the first of the order, the one it ran out in last, the rest deferred whole
            taken = [f for f in order if by[f].counts.deleted_files + by[f].counts.deleted_or_absent_files]
            assert taken == order[:len(taken)], (night, taken, order)
            assert all(by[f].status == "deferred" for f in order[len(taken):]), night
            assert all(by[f].reason_code == "budget_spent" for f in taken if by[f].counts.deferred_files), night
            # the audit holds every delete of the night, each once, and verifies
            rows = read_audit(spark, audit).where(F.col("run_id") == report.run_id)
            deleted = {r["path"] for r in rows.where(F.col("action").isin(*REMOVED)).select("path").collect()}
            assert len(deleted) == removed and not deleted & gone, night
            assert rows.where(F.col("path").isNull()).count() == TABLES, night
            assert not verify_chain(spark, audit).problems, night
            for folder in folders:
                left[folder] -= deleted
            gone |= deleted
            carried = {f for f in folders if by[f].status == "deferred" or by[f].counts.deferred_files}
            assert carried == {f for f in folders if left[f]}, night  # what is left is what the night said it left
    finally:
        proxy.close()
    assert not any(left.values()), f"still left after {night} nights: {sum(map(len, left.values()))}"
    assert gone == named  # the same files as one unbudgeted run
    assert proxy.counts().get("throttled", 0) > 0  # the store pushed back, and the runs went on
    remaining_keys = {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=lake)
                      for o in page.get("Contents", [])}
    assert not {k for k in remaining_keys if "/orphan-" in k}
    assert all(DeltaTable(f"s3://{lake}/{folder}").to_pyarrow_table().num_rows == 1 for folder in folders[::7])
