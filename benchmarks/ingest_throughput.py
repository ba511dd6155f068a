"""Job 1 throughput: ingestion rows/second next to a bare Spark Parquet read+write of the same reports.

    python -m benchmarks.ingest_throughput [--rows 2000000] [--rounds 3] [--workdir DIR]
    python -m benchmarks.ingest_throughput --orc [--jvm-zone America/New_York] [--rows 10000000]

The ratio (ingestion time / bare copy time) is the figure: it is what checksums,
validation, normalization and the Delta commit cost on top of moving the bytes. The
Spark write of the contract's rows alone (no check, no commit) is printed too: the floor
for any ingestion that writes the table DESIGN.md fixes. The four run in turn, round after
round, each keeping its fastest (benchmarks.timing). The fastest MD5-verified ingestion is
split into its steps, timed by the job's own progress lines.

``--orc`` instead times the ingestion of one delivery in ORC against the same rows in Parquet
(both MD5-verified, in turn): what reading ORC and turning its wall clocks back into UTC
instants costs. That correction does its work only where the executors' JVM zone is not UTC,
so ``--jvm-zone`` starts this process's JVM in another zone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from datetime import datetime, timezone

from pyspark.sql import SparkSession

from benchmarks.timing import best_in_turn
from inventory_etl.ingestion import IngestInventory
from inventory_etl.manifest import parse_manifest
from inventory_etl.producer import InventoryObject, write_delivery
from inventory_etl.reports import PROBLEM, SOURCE_FILE, executors_zone, read_report, to_contract
from lakeio.inventory import PARTITION_COLUMNS
from lakeio.spark.session import get_spark
from lakeio.store import uris

STORAGE_CLASSES = ("STANDARD", "STANDARD_IA", "GLACIER_IR", "INTELLIGENT_TIERING")


def make_delivery(workdir: str, rows: int, file_format: str = "Parquet") -> str:
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
    return write_delivery(os.path.join(workdir, "dest"), "bench-bucket", file_format.lower(), objects,
                          datetime(2026, 11, 21, 1, 0, tzinfo=timezone.utc), file_format=file_format,
                          rows_per_file=250_000)


def ingest_once(spark: SparkSession, inventory: str, manifest: str, verify: bool = True) -> dict[str, float]:
    """Its steps' seconds (the result's own), into a table of its own: a table that holds the
    delivery already skips it."""
    result = IngestInventory(spark, inventory, verify_checksums=verify).execute([manifest])
    if result.refused:
        raise SystemExit(f"benchmark delivery was refused: {result.refused[0].error}")
    if not result.ingested:
        raise SystemExit("benchmark delivery was not ingested")
    return result.step_seconds


def run_orc(rows: int = 2_000_000, workdir: str | None = None, rounds: int = 3) -> dict:
    """One delivery's rows in ORC and in Parquet, each ingested (MD5 verified) in turn."""
    workdir = workdir or tempfile.mkdtemp(prefix="bench-ingest-orc-")
    manifests = {fmt: make_delivery(workdir, rows, fmt) for fmt in ("Parquet", "ORC")}
    spark = get_spark("bench-ingest-orc")
    zone = executors_zone(spark)
    tables = iter(range(1_000_000))
    def ingest(fmt: str) -> dict[str, float]:
        return ingest_once(spark, os.path.join(workdir, f"inventory-{next(tables)}"), manifests[fmt])

    timed = best_in_turn(rounds, {"Parquet": lambda: ingest("Parquet"), "ORC": lambda: ingest("ORC")})
    shutil.rmtree(workdir, ignore_errors=True)
    return {"rows": rows, "jvm_zone": zone, "parquet_s": timed["Parquet"][0], "orc_s": timed["ORC"][0],
            "ratio_orc": timed["ORC"][0] / timed["Parquet"][0], "orc_steps_s": timed["ORC"][1],
            "parquet_steps_s": timed["Parquet"][1]}


def run(rows: int = 2_000_000, workdir: str | None = None, rounds: int = 3) -> dict:
    workdir = workdir or tempfile.mkdtemp(prefix="bench-ingest-")
    started = time.monotonic()
    manifest = make_delivery(workdir, rows)
    generated = time.monotonic() - started
    spark = get_spark("bench-ingest")
    data = os.path.join(workdir, "dest", "bench-bucket", "parquet", "data")

    tables = iter(range(1_000_000))

    def bare_copy() -> None:
        spark.read.parquet(data).write.mode("overwrite").parquet(os.path.join(workdir, "bare-copy"))

    def contract_write() -> None:
        with open(manifest, "rb") as body:
            delivery = parse_manifest(uris.to_uri(manifest), body.read(), None)
        rows = to_contract(read_report(spark, delivery), delivery, {}).drop(PROBLEM, SOURCE_FILE)
        rows.write.mode("overwrite").partitionBy(*PARTITION_COLUMNS).parquet(os.path.join(workdir, "contract-copy"))

    def ingest(verify: bool) -> dict[str, float]:
        return ingest_once(spark, os.path.join(workdir, f"inventory-{next(tables)}"), manifest, verify)

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
    parser.add_argument("--orc", action="store_true", help="time an ORC delivery against the same rows in Parquet")
    parser.add_argument("--jvm-zone", help="the JVM's default time zone (user.timezone), for --orc")
    args = parser.parse_args()
    if args.jvm_zone:
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-java-options -Duser.timezone={args.jvm_zone} pyspark-shell"
    if args.orc:
        orc = run_orc(args.rows, args.workdir, args.rounds)
        print(f"cores: {os.cpu_count()}  rows: {orc['rows']:,}  executors' JVM zone: {orc['jvm_zone']}")
        print(f"ingestion of the Parquet delivery  {orc['parquet_s']:7.1f} s  ({step_times(orc['parquet_steps_s'])})")
        print(f"ingestion of the ORC delivery      {orc['orc_s']:7.1f} s  ({step_times(orc['orc_steps_s'])})")
        print(f"ratio ORC / Parquet                {orc['ratio_orc']:7.2f}")
        return
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
