"""Job 1 throughput: ingestion rows/second next to a bare Spark Parquet read+write of the same reports.

    python -m benchmarks.ingest_throughput [--rows 2000000] [--rounds 3] [--workdir DIR]

The ratio (ingestion time / bare copy time) is the figure: it is what checksums,
validation, normalization and the Delta commit cost on top of moving the bytes. The
Spark write of the contract's rows alone (no check, no commit) is printed too: the floor
for any ingestion that writes the table DESIGN.md fixes. The four run in turn, round after
round, each keeping its fastest (benchmarks.timing). The fastest MD5-verified ingestion is
split into its steps, timed by the job's own progress lines.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from datetime import datetime, timezone

from benchmarks.timing import best_in_turn
from inventory_etl.ingestion import IngestInventory
from inventory_etl.manifest import parse_manifest
from inventory_etl.producer import InventoryObject, write_delivery
from inventory_etl.reports import PROBLEM, SOURCE_FILE, read_report, to_contract
from lakeio import uris
from lakeio.inventory import PARTITION_COLUMNS
from lakeio.spark import get_spark

STORAGE_CLASSES = ("STANDARD", "STANDARD_IA", "GLACIER_IR", "INTELLIGENT_TIERING")


def make_delivery(workdir: str, rows: int) -> str:
    t0 = 1_760_000_000_000
    objects = (
        InventoryObject(
            key=f"warehouse/table_{i % 97}/date=2026-{1 + i % 12:02d}-01/part-{i:09d}-c000.snappy.parquet",
            size=1_000 + (i * 7919) % 50_000_000,
            last_modified_ms=t0 + i * 13,
            e_tag=f"{i:032x}",
            storage_class=STORAGE_CLASSES[i % len(STORAGE_CLASSES)],
        )
        for i in range(rows)
    )
    return write_delivery(os.path.join(workdir, "dest"), "bench-bucket", "daily", objects,
                          datetime(2026, 11, 21, 1, 0, tzinfo=timezone.utc), rows_per_file=250_000)


def run(rows: int = 2_000_000, workdir: str | None = None, rounds: int = 3) -> dict:
    workdir = workdir or tempfile.mkdtemp(prefix="bench-ingest-")
    started = time.monotonic()
    manifest = make_delivery(workdir, rows)
    generated = time.monotonic() - started
    spark = get_spark("bench-ingest")
    data = os.path.join(workdir, "dest", "bench-bucket", "daily", "data")

    tables = iter(range(1_000_000))

    def bare_copy() -> None:
        spark.read.parquet(data).write.mode("overwrite").parquet(os.path.join(workdir, "bare-copy"))

    def contract_write() -> None:
        with open(manifest, "rb") as body:
            delivery = parse_manifest(uris.to_uri(manifest), body.read(), None)
        rows = to_contract(read_report(spark, delivery), delivery, {}).drop(PROBLEM, SOURCE_FILE)
        rows.write.mode("overwrite").partitionBy(*PARTITION_COLUMNS).parquet(os.path.join(workdir, "contract-copy"))

    def ingest(verify: bool) -> dict[str, float]:
        """Its steps' seconds (the result's own). A table of its own each time: a table that holds the
        delivery already skips it."""
        inventory = os.path.join(workdir, f"inventory-{next(tables)}")
        result = IngestInventory(spark, inventory, verify_checksums=verify).execute([manifest])
        if not result.ingested:
            raise SystemExit("benchmark delivery was not ingested")
        if result.refused:
            raise SystemExit(f"benchmark delivery was refused: {result.refused[0].error}")
        return result.step_seconds

    timed = best_in_turn(rounds, {"bare": bare_copy, "contract": contract_write, "ingest": lambda: ingest(True),
                                  "ingest_no_md5": lambda: ingest(False)})
    best = {name: seconds for name, (seconds, _) in timed.items()}
    steps = timed["ingest"][1]
    shutil.rmtree(workdir, ignore_errors=True)
    return {
        "rows": rows,
        "generate_s": generated,
        "bare_parquet_copy_s": best["bare"],
        "contract_write_s": best["contract"],
        "ingest_s": best["ingest"],
        "ingest_no_checksums_s": best["ingest_no_md5"],
        "ingest_steps_s": steps,
        "ingest_rows_per_s": rows / best["ingest"],
        "bare_rows_per_s": rows / best["bare"],
        "ratio": best["ingest"] / best["bare"],
        "ratio_contract_write": best["contract"] / best["bare"],
        "ratio_over_floor": best["ingest"] / best["contract"],
        "ratio_no_checksums": best["ingest_no_md5"] / best["bare"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir")
    args = parser.parse_args()
    figures = run(args.rows, args.workdir, args.rounds)
    print(f"cores: {os.cpu_count()}  rows: {figures['rows']:,}")
    print(f"bare Spark Parquet read+write   {figures['bare_parquet_copy_s']:7.1f} s  {figures['bare_rows_per_s']:12,.0f} rows/s")
    print(f"contract rows written alone     {figures['contract_write_s']:7.1f} s"
          f"  ratio {figures['ratio_contract_write']:.2f} (the floor: no check, no commit)")
    print(f"ingestion (MD5 verified)        {figures['ingest_s']:7.1f} s  {figures['ingest_rows_per_s']:12,.0f} rows/s"
          f"  ratio {figures['ratio']:.2f}")
    print(f"ingestion (--no-verify-checksums) {figures['ingest_no_checksums_s']:5.1f} s"
          f"  ratio {figures['ratio_no_checksums']:.2f}")
    print(f"ingestion / floor                 {figures['ratio_over_floor']:5.2f}")
    print(f"steps of the fastest MD5-verified ingestion: {step_times(figures['ingest_steps_s'])}")


def step_times(steps: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps.items())


if __name__ == "__main__":
    main()
