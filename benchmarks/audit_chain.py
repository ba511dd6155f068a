"""What the audit table's hash chain costs: a run's rows written chained against the same rows written
plain, and ``--verify`` against one aggregating read of the table.

    python -m benchmarks.audit_chain [--rows 500000] [--repeat 3]

A run's audit rows (``rows`` planned files of 200 tables) are built once and cached; then, in turn and
best of ``repeat`` rounds (benchmarks.timing), each is appended to a fresh table of its own, plain and
chained (the chain is computed in one task per run, so this is its worst case), and the chained table is
verified and read. Spark's default 200 shuffle partitions, as a cluster runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import uuid
from datetime import datetime, timezone

from pyspark.sql import functions as F

from benchmarks.timing import best_in_turn
from lakeio.audit import chain as audit_chain
from lakeio.audit.contract import AUDIT_PARTITIONS, read_audit
from lakeio.spark.session import get_spark
from lakeio.tables.write import write_delta


def run(rows_of_run: int = 500_000, repeat: int = 3) -> dict[str, float]:
    """Seconds of each (best in turn) and the two ratios, at ``rows_of_run`` audit rows of one run."""
    spark = get_spark("benchmarks.audit_chain")
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    work = tempfile.mkdtemp(prefix="audit-chain-")
    started = datetime.now(timezone.utc)
    rows = (spark.range(rows_of_run).select(
        F.lit(str(uuid.uuid4())).alias("run_id"),
        F.format_string("s3://lake/warehouse/t%03d", F.col("id") % 200).alias("table_root"),
        F.lit(42).cast("long").alias("table_version"),
        F.format_string("s3://lake/warehouse/t%03d/part-%08d-c000.snappy.parquet", F.col("id") % 200,
                        F.col("id")).alias("path"),
        (F.col("id") * 7 % 100_000_000).alias("length"), (F.col("id") + 1_700_000_000_000).alias("modificationTime"),
        F.lit("deleted").alias("action"), F.lit(None).cast("string").alias("error"),
        F.lit(started).alias("timestamp"), F.lit(started.date()).alias("inventory_date"),
        F.lit(168.0).alias("retention_hours"), F.lit(started.date()).alias("run_date"),
        F.format_string("v%d", F.col("id")).alias("version_id"), F.format_string("m%d", F.col("id")).alias("delete_marker_id"),
        F.lit(None).cast("string").alias("trash_path"), F.lit(None).cast("string").alias("source_run_id"),
        F.lit(None).cast("string").alias("log_sha256"), F.lit(None).cast("double").alias("undo_window_hours"),
    )).localCheckpoint(eager=True)
    partition = [{"run_date": started.date().isoformat()}]
    counter = iter(range(10_000))

    def fresh() -> str:
        return os.path.join(work, f"audit-{next(counter)}")

    def plain() -> None:
        write_delta(rows, fresh(), AUDIT_PARTITIONS, partition, mode="append")

    chained_tables: list[str] = []

    def chained() -> None:
        chained_tables.append(fresh())
        write_delta(audit_chain.chain_run(rows, None), chained_tables[-1], AUDIT_PARTITIONS, partition, mode="append")

    writes = best_in_turn(repeat, {"plain": plain, "chained": chained})
    table = chained_tables[-1]
    reads = best_in_turn(repeat, {
        "read": lambda: read_audit(spark, table).groupBy("action").count().collect(),
        "verify": lambda: audit_chain.verify(read_audit(spark, table)),
    })
    check = reads["verify"][1]
    assert check.ok and check.rows_verified == rows_of_run, check.summary()
    shutil.rmtree(work, ignore_errors=True)
    return {"rows": rows_of_run, "plain_s": writes["plain"][0], "chained_s": writes["chained"][0],
            "read_s": reads["read"][0], "verify_s": reads["verify"][0],
            "ratio_append": writes["chained"][0] / writes["plain"][0], "ratio_verify": reads["verify"][0] / reads["read"][0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    f = run(args.rows, args.repeat)
    print(f"\nmachine: {os.cpu_count()} cores; {args.rows:,} audit rows of one run; best of {args.repeat} rounds in turn")
    for label, seconds in (("append, plain", f["plain_s"]), ("append, chained", f["chained_s"]),
                           ("read (one aggregation)", f["read_s"]), ("verify", f["verify_s"])):
        print(f"  {label:<24} {seconds:7.1f} s  {args.rows / seconds:12,.0f} rows/s")
    print(f"  chained / plain append   {f['ratio_append']:7.2f}x  (target: at most 1.5x)")
    print(f"  verify / read            {f['ratio_verify']:7.2f}x  (target: at most 3x)")


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"({time.monotonic() - started:.0f} s in all)")
