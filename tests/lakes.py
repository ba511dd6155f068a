"""Test helpers: an inventory of a local folder, vacuum runs against it, and what they wrote into tables' logs."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

from deltalake import DeltaTable

import vacuum_jobs
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import objects_in_folder, write_delivery


def inventory_of(spark, bucket_dir: Path, work: Path, when: datetime | None = None, bucket: str = "lake") -> str:
    """Ingest an S3-style inventory of ``bucket_dir`` (as bucket ``bucket``); return the table path."""
    when = when or datetime.now(timezone.utc)
    manifest = write_delivery(str(work / "inventory-dest"), bucket, "daily", objects_in_folder(str(bucket_dir)), when)
    table = work / "inventory"
    result = IngestInventory(spark, str(table), {bucket: str(bucket_dir)}).execute([manifest])
    assert not result.refused, result.refused
    return str(table)


UNACTED = (vacuum_jobs.TableStatus.REFUSED, vacuum_jobs.TableStatus.SKIPPED, vacuum_jobs.TableStatus.DEFERRED,
           vacuum_jobs.TableStatus.FAILED)


def vacuum(spark, inventory: str, tables, **options):
    """One vacuum run through the public API: a dry run unless ``dry_run=False``. Every table it did not act
    on says why in a code as well as in words, and only those and the one the budget ran out in."""
    report = vacuum_jobs.vacuum(spark, inventory, tables, **options)
    for t in report.tables:
        said = t.status in UNACTED or t.counts.deferred_files > 0 or t.reason_code == vacuum_jobs.ReasonCode.UNCHANGED
        assert (t.reason_code is not None) == said == (t.reason is not None), (t.table, t.status, t.reason)
    return report


def by_table(report) -> dict:
    return {Path(t.table.removeprefix("file://")).name: t for t in report.tables}


def now_ms() -> int:
    return int(time.time() * 1000)


def ours(table: Path | str, options: dict | None = None) -> dict[str, list[tuple[str, dict]]]:
    """The table's commits written by our runs: {run id: [(operation, commitInfo), ...] oldest first}."""
    runs: dict[str, list[tuple[str, dict]]] = {}
    for info in reversed(DeltaTable(str(table), storage_options=options).history()):
        run = info.get("operationParameters", {}).get("runId")
        if run is not None:
            runs.setdefault(json.loads(run), []).append((info["operation"], info))
    return runs
