"""``make demo``: build a lake, deliver its S3 Inventory, ingest it, vacuum it, prove nothing was lost.

Everything happens under ./demo-output (local Spark, local files). The same demo runs
against a standalone cluster with ``SPARK_MASTER=spark://host:7077 make demo`` as
long as the workers see this folder at the same path.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from deltalake import DeltaTable

from demo.lake import build_lake, partitioned_deletion_vectors
from inventory_etl.cli import main as inventory_etl
from inventory_etl.producer import objects_in_folder, write_delivery
from lake_reports.cli import main as lake_reports
from lakeio.spark.session import delta_jars_present, get_spark
from lakeio.text import human_bytes
from vacuum_jobs.cli import main as vacuum_jobs

OUTPUT = Path("demo-output").resolve()
BUCKET = "demo-lake"


def step(number: int, text: str) -> None:
    print(f"\n=== {number}. {text}", flush=True)


def main() -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.monotonic()
    shutil.rmtree(OUTPUT, ignore_errors=True)
    bucket_dir = OUTPUT / BUCKET

    step(1, f"building a lake in {bucket_dir} (Delta tables with 7 weeks of history, plus debris)")
    spark = get_spark("demo")  # the jobs below take this session
    lake = build_lake(bucket_dir, dv_table=(lambda path: partitioned_deletion_vectors(spark, path))
                      if delta_jars_present() else None)
    rows_before = lake.row_counts()
    for name, path in lake.tables.items():
        print(f"  {name:<14} {rows_before[name]:>6} rows  {path.relative_to(OUTPUT)}")
    print(f"  debris: {len(lake.stale_debris)} stale uncommitted files, {len(lake.fresh_debris)} recent ones, "
          f"{len(lake.hidden_debris)} hidden markers, {len(lake.outside_tables)} outside any table")

    step(2, "delivering its S3 Inventory (Parquet reports + manifest.json + manifest.checksum)")
    manifest = write_delivery(str(OUTPUT / "inventory-destination"), BUCKET, "daily-parquet",
                              objects_in_folder(str(bucket_dir)), datetime.now(timezone.utc))
    print(f"  {Path(manifest).relative_to(OUTPUT)}")

    inventory = str(OUTPUT / "tables" / "inventory")
    step(3, "job 1: python -m inventory_etl")
    code = inventory_etl(["--inventory-table", inventory, "--inventory-root", str(OUTPUT / "inventory-destination"),
                          "--path-root", f"{BUCKET}={bucket_dir}", "--report", str(OUTPUT / "ingest.json")])
    if code:
        return _fail("ingestion refused a delivery")

    step(4, "chargeback: python -m lake_reports chargeback")
    if lake_reports(["chargeback", "--inventory-table", inventory, "--out", str(OUTPUT / "chargeback")]):
        return _fail("the chargeback could not classify or price everything")

    step(5, "job 2, dry run: python -m vacuum_jobs --discover --dry-run")
    dry_report = OUTPUT / "vacuum-dry-run.json"
    common = ["--inventory-table", inventory, "--discover", "--audit-table", str(OUTPUT / "tables" / "vacuum_audit")]
    if vacuum_jobs(common + ["--dry-run", "--report", str(dry_report)]):
        return _fail("the dry run refused a table")
    would = json.loads(dry_report.read_text())["totals"]["candidate_files"]
    if any(p.exists() is False for p in lake.stale_debris):
        return _fail("a dry run deleted something")

    step(6, "job 2 for real")
    report_file = OUTPUT / "vacuum.json"
    if vacuum_jobs(common + ["--apply", "--report", str(report_file)]):
        return _fail("the vacuum refused or failed a table")

    step(7, "checking the outcome")
    report = json.loads(report_file.read_text())
    print(f"  {'table':<40} {'reclaimed':>16} {'kept (time travel)':>20} {'too recent':>12}")
    for t in report["tables"]:
        c = t["counts"]
        print(f"  {t['table'].rsplit(BUCKET + '/', 1)[-1]:<40} "
              f"{c['deleted_files']:>4} / {human_bytes(c['deleted_bytes']):>9} "
              f"{c['tombstone_files']:>8} / {human_bytes(c['tombstone_bytes']):>9} {c['too_recent_files']:>12}")
    rows_after = lake.row_counts()
    problems = [f"{n}: {rows_before[n]} rows before, {rows_after[n]} after" for n in rows_before
                if rows_before[n] != rows_after[n]]
    problems += [f"stale debris survived: {p}" for p in lake.stale_debris if p.exists()]
    problems += [f"kept file vanished: {p}" for p in lake.fresh_debris | lake.hidden_debris | lake.outside_tables
                 if not p.exists()]
    problems += [f"{t['table']}: no VACUUM START and END in its history ({t['history']})" for t in report["tables"]
                 if not (t["history"] or "").startswith("VACUUM START at version")]
    if report["totals"]["deleted_files"] != would:
        problems.append(f"dry run planned {would} deletions, the real run made {report['totals']['deleted_files']}")
    for problem in problems:
        print(f"  PROBLEM {problem}")
    if problems:
        return 1
    print(f"  every table reads completely: row counts before = after ({sum(rows_after.values())} rows)")
    print(f"  every stale orphan is gone ({report['totals']['deleted_files']} files, "
          f"{human_bytes(report['totals']['deleted_bytes'])}); recent, hidden and out-of-table files are untouched")
    print("  each table's own history holds the run (DeltaTable.history(), DESCRIBE HISTORY); sales/orders:")
    for commit in DeltaTable(str(lake.tables["orders"])).history(2):
        print(f"    version {commit['version']} {commit['operation']}: {commit['operationParameters']} "
              f"{commit['operationMetrics']}")

    erased = sorted(lake.stale_debris)[0]
    step(8, f"erasure evidence: python -m lake_reports erasure --path …/{erased.name}")
    evidence = OUTPUT / "erasure.json"
    lake_reports(["erasure", "--audit-table", str(OUTPUT / "tables" / "vacuum_audit"), "--inventory-table", inventory,
                  "--path", str(erased), "--report", str(evidence)])
    if json.loads(evidence.read_text())["answers"][0]["status"] != "erased":
        return _fail(f"no evidence that {erased} was erased")
    print(f"\nreports: {report_file}, {dry_report}, {evidence}, {OUTPUT / 'chargeback' / 'chargeback.html'}; "
          f"audit table: {OUTPUT / 'tables' / 'vacuum_audit'}")
    print(f"demo finished in {time.monotonic() - started:.0f} s")
    return 0


def _fail(message: str) -> int:
    print(f"demo failed: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
