"""Delta's own VACUUM as the baseline: the per-table loop users run today, against one batch run of ours.

    python -m benchmarks.delta_vacuum [--tables 50] [--files-per-table 2000] [--repeat 2] [--workdir DIR]

Builds the lake of benchmarks.vacuum_planning (tables of tiny files, a tenth of them orphans, their
logs checkpointed) and its inventory (job 1), then times fresh processes, in turn, each its best of
``repeat`` rounds:

- (a) ``VACUUM delta.`t` RETAIN 168 HOURS DRY RUN`` for every table, one after the other in one Spark
  application with Delta's jars: the loop users write, listing each table's whole tree;
- (b) the same with ``LITE`` (the files the log removed, no listing);
- (c) ``VACUUM ... USING INVENTORY (<the inventory table>)`` per table, which scans the inventory once
  per table;
- (d) ours: ``python -m vacuum_jobs --discover --dry-run``, every table in one run.

Every process starts its session the same way (benchmarks.cold); what is compared is the job after
it, from the session's first log line to the process's end. Needs Delta's jars (``python -m
infra.jvm_jars``); ours runs without them, as a plain ``pip install`` does.

With ``--s3`` the lake's files are uploaded to a bucket of moto's S3 server and the inventory table
(job 1, from a listing of the bucket) is written to another; every side then reaches S3 through
Spark's connector (``s3a://``), by way of a loopback proxy that holds each request ``--delay-ms``
before relaying it (one round per value: 0 ms, and 20 ms, about a ListObjectsV2 page on AWS).
moto stamps an object with its upload time, so every side runs at retention 0 (Delta's with its
retention check off): the tombstones are all older than that, and the candidates the same.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import boto3

from benchmarks import cold
from benchmarks.vacuum_planning import build_lake, build_table, table_roots
from infra import jvm_jars
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import InventoryObject, write_delivery
from lakeio.cli import setup_logging
from lakeio.spark.session import get_spark
from lakeio.times import epoch_ms

SIDES = {
    "full": "Delta VACUUM DRY RUN, per table",
    "lite": "Delta VACUUM LITE DRY RUN, per table",
    "inventory": "Delta VACUUM USING INVENTORY DRY RUN, per table",
}
# README's form: Delta keeps the inventory rows under the table's qualified path: spelled file:/x
# locally, s3a://bucket/x where the tables are read through Spark's S3 connector.
INVENTORY_QUERY = ("SELECT {path} AS path, length, isDir, modificationTime FROM delta.`{inventory}` "
                   "WHERE coalesce(is_latest, true) AND NOT coalesce(is_delete_marker, false)")
QUALIFIED = {"file": "regexp_replace(path, '^file:///', 'file:/')", "s3a": "concat('s3a', substr(path, 3))"}
LAKE, HOUSEKEEPING = "lake", "housekeeping"  # the buckets of --s3
log = logging.getLogger(__name__)


def delta_side(side: str, inventory: str, roots: list[str], retain_hours: int, budget_s: float | None) -> tuple[int, int]:
    """In this process: Delta's VACUUM dry run of ``side`` over the tables of ``roots`` in turn, until
    all are done or ``budget_s`` has passed; how many tables it covered, and their candidates."""
    spark = get_spark(f"delta-vacuum-{side}")
    found, started = 0, time.monotonic()
    for covered, root in enumerate(roots):
        if budget_s is not None and time.monotonic() - started >= budget_s:
            return covered, found
        query = INVENTORY_QUERY.format(path=QUALIFIED["s3a" if root.startswith("s3a://") else "file"], inventory=inventory)
        using = f"USING INVENTORY ({query}) " if side == "inventory" else ""
        lite = "LITE " if side == "lite" else ""
        found += spark.sql(f"VACUUM delta.`{root}` {lite}{using}RETAIN {retain_hours} HOURS DRY RUN").count()
    return len(roots), found


def covered(run: cold.ColdRun) -> int:
    """How many tables a Delta side's process covered (``delta_side``'s first figure)."""
    return int(run.output.split()[-2])


def _best_in_turn(repeat: int, actions: dict[str, Callable[[], cold.ColdRun]]) -> dict[str, cold.ColdRun]:
    """Each action's fastest of ``repeat`` rounds, the actions taken in turn in every round
    (benchmarks.timing's rule, on fresh processes)."""
    best: dict[str, cold.ColdRun] = {}
    for _ in range(repeat):
        for name, action in actions.items():
            fresh = action()
            if name not in best or fresh.job_s < best[name].job_s:
                best[name] = fresh
    return best


def _delta_args(side: str, inventory: str, retain_hours: int, roots: list[str], budget_s: float | None) -> list[str]:
    """The command line of one Delta side's process."""
    budget = ["--budget-s", str(budget_s)] if budget_s is not None else []
    return ["benchmarks.delta_vacuum", "--side", side, "--inventory", inventory, "--retain-hours", str(retain_hours),
            *budget, *roots]


def run(tables: int, files_per_table: int, repeat: int, workdir: str | None, jars: str, sides: list[str],
        budget_s: float | None) -> dict:
    workdir = workdir or tempfile.mkdtemp(prefix="bench-delta-vacuum-")
    lake = build_lake(get_spark("bench-delta-vacuum"), workdir, tables, files_per_table, epoch_ms())
    roots, inventory = lake.roots, lake.inventory

    def delta(side: str) -> Callable[[], cold.ColdRun]:
        return lambda: cold.run_module(_delta_args(side, inventory, 168, roots, budget_s), 200, jars)
    best = _best_in_turn(repeat, {"ours": lambda: cold.run_cli(inventory, 200), **{s: delta(s) for s in sides}})
    shutil.rmtree(workdir, ignore_errors=True)
    return {"tables": tables, "files": len(lake.objects), "build_s": lake.build_s, "rounds": {"local disk": best}}


def run_s3(tables: int, files_per_table: int, repeat: int, workdir: str | None, jars: str, sides: list[str],
           budget_s: float | None, delays_ms: list[float]) -> dict:
    """The same sides on moto's S3 server, through a proxy holding every request each of ``delays_ms``."""
    from tests.s3_faults import FaultyS3, moto_server, s3a_settings

    workdir = workdir or tempfile.mkdtemp(prefix="bench-delta-vacuum-s3-")
    bucket = os.path.join(workdir, "lake")
    started = time.monotonic()
    local_roots = table_roots(bucket, tables)
    for root in local_roots:
        build_table(root, files_per_table, epoch_ms())
    for name, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
                        "AWS_ALLOW_HTTP": "true"}.items():
        os.environ[name] = value
    ours_jars = ",".join(j for j in jars.split(",") if "/delta-" not in j)  # the S3 connector only, as pip users run
    with moto_server() as endpoint:
        os.environ["AWS_ENDPOINT_URL"] = endpoint  # this process's clients: deltalake writing the inventory
        client = boto3.client("s3", endpoint_url=endpoint)
        for name in (LAKE, HOUSEKEEPING):
            client.create_bucket(Bucket=name)
        files = [os.path.join(parent, f) for parent, _, names in os.walk(bucket) for f in names]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda f: client.upload_file(f, LAKE, os.path.relpath(f, bucket)), files))
        objects = [InventoryObject(o["Key"], o["Size"], int(o["LastModified"].timestamp() * 1000), o["ETag"].strip('"'))
                   for page in client.get_paginator("list_objects_v2").paginate(Bucket=LAKE) for o in page.get("Contents", [])]
        built = time.monotonic() - started
        spark = get_spark("bench-delta-vacuum-s3")
        for key, value in s3a_settings(endpoint).items():
            spark.sparkContext._jsc.hadoopConfiguration().set(key, value)
        manifest = write_delivery(os.path.join(workdir, "dest"), LAKE, "daily", objects, datetime.now(timezone.utc),
                                  rows_per_file=250_000)
        inventory = f"s3a://{HOUSEKEEPING}/inventory"
        ingested = IngestInventory(spark, inventory, {}).execute([manifest])
        if ingested.refused:
            raise SystemExit(f"inventory refused: {ingested.refused[0].error}")
        roots = [f"s3a://{LAKE}/{os.path.relpath(root, bucket)}" for root in local_roots]

        def timed(proxy: str) -> dict[str, Callable[[], cold.ColdRun]]:
            conf = {f"spark.hadoop.{key}": value for key, value in s3a_settings(proxy).items()}
            unchecked = {**conf, "spark.databricks.delta.retentionDurationCheck.enabled": "false"}
            delta = {s: functools.partial(cold.run_module, _delta_args(s, inventory, 0, roots, budget_s), 200, jars,
                                          unchecked) for s in sides}
            ours = ["--retention-hours", "0", "--force-retention"]
            return {"ours": functools.partial(cold.run_cli, inventory, 200, ours, ours_jars, conf), **delta}

        rounds = {}
        for delay in delays_ms:
            proxy = FaultyS3(endpoint, delay_seconds=delay / 1000)
            os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
            rounds[f"S3 API, {delay:g} ms a request"] = _best_in_turn(repeat, timed(proxy.endpoint))
            proxy.close()
    shutil.rmtree(workdir, ignore_errors=True)
    return {"tables": tables, "files": len(objects), "build_s": built, "rounds": rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--files-per-table", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=2, help="best of this many rounds (default: 2)")
    parser.add_argument("--workdir")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES),
                        help="Delta's sides to time (default: all three)")
    parser.add_argument("--s3", action="store_true", help="the lake and the inventory on moto's S3 server")
    parser.add_argument("--delay-ms", type=float, nargs="+", default=[0, 20],
                        help="with --s3: what the proxy adds to every request, one round per value (default: 0 20)")
    parser.add_argument("--budget-s", type=float,
                        help="stop each Delta loop after the table that passes this many seconds; its ratio is then "
                             "a lower bound, printed with how many tables it covered (default: no budget)")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # one Delta process (run by the bench)
    parser.add_argument("--inventory", help=argparse.SUPPRESS)
    parser.add_argument("--retain-hours", type=int, default=168, help=argparse.SUPPRESS)
    parser.add_argument("roots", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        setup_logging("INFO")
        print(*delta_side(args.side, args.inventory, args.roots, args.retain_hours, args.budget_s))
        return
    try:
        pins = jvm_jars.for_installed_pyspark()
        if pins.delta is None:
            raise jvm_jars.JarsUnavailable(f"no Delta release is built for Spark {pins.spark_line}")
        jars = ",".join(str(j) for j in jvm_jars.jars(pins))
    except (jvm_jars.JarsUnavailable, OSError) as exc:
        sys.exit(f"benchmarks.delta_vacuum needs Delta's jars: {exc}")
    if args.s3:  # this process writes the inventory table to S3 through Spark's connector
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {jars} pyspark-shell"
        f = run_s3(args.tables, args.files_per_table, args.repeat, args.workdir, jars, args.sides, args.budget_s,
                   args.delay_ms)
    else:
        f = run(args.tables, args.files_per_table, args.repeat, args.workdir, jars, args.sides, args.budget_s)
    print(f"cores: {os.cpu_count()}  tables: {f['tables']}  objects: {f['files']:,}  (lake built in {f['build_s']:.0f} s); "
          f"fresh processes, the job after the session start, best of {args.repeat}")
    for where, best in f["rounds"].items():
        ours = best["ours"]
        print(f"{where}:")
        print(f"  {'ours: python -m vacuum_jobs --discover --dry-run':<52} {ours.job_s:7.1f} s  {ours.candidates:,} candidates")
        for side in args.sides:
            theirs, label, done = best[side], SIDES[side], covered(best[side])
            partial = "" if done == f["tables"] else f"  (at least: stopped at the budget after {done} of {f['tables']} tables)"
            print(f"  {label:<52} {theirs.job_s:7.1f} s  {theirs.candidates:,} candidates  "
                  f"{theirs.job_s / ours.job_s:5.1f}x ours{partial}")


if __name__ == "__main__":
    main()
