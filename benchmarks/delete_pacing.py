"""Deletes at S3's own limit: 100,000 keys through the delete path, against a store that throttles each prefix.

    python -m benchmarks.delete_pacing [--rounds 2] [--keys 100000]

The store is the fault proxy of tests.s3_faults in front of moto's server: it holds every request
20 ms, answers ``SlowDown`` to a request asking more of a folder than its per-prefix rate, and
answers the ``DeleteObjects`` it lets through itself (moto deletes about 7,000-10,000 keys a second
on 2 cores, which would be the floor instead of the limit measured). Two lakes:

- spread: the keys over 50 tables, each prefix taking 1,000 keys a second;
- concentrated: every key in one table, its prefix taking 3,500 keys a second (S3's figure).

The floor is the largest prefix's keys over its rate. Each lake is deleted by ``delete_planned`` on
Spark (local, a task per core) with the default settings (each table at its own pace, adapting to
``SlowDown``), and with a run-wide cap of 3,000 keys a second, the pace every run kept before
(its default then): the baseline; and, by default, through a store that throttles nothing: what
this machine's two cores push through boto3 and the proxy, the floor below the store's. In the
same session, in turn, best of ``rounds``. Targets (#67):
spread within 1.5x of its floor and at least 10x faster than the baseline; concentrated within
1.5x of its floor, fewer than 5 % of its requests throttled once the pace has settled (the second
half of the run).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.timing import best_in_turn
from lakeio.audit.contract import AuditAction
from lakeio.spark.session import get_spark
from lakeio.store import s3
from vacuum_jobs.delete_tasks import delete_planned
from vacuum_jobs.deletes import DeleteSettings

BUCKET = "bench-deletes"
LATENCY_S = 0.02
BEFORE = 3000.0  # keys a second: the run-wide pace every run kept before per-prefix pacing


@dataclass(frozen=True)
class Lake:
    label: str
    tables: int
    prefix_keys_per_second: float  # what the store takes per prefix


LAKES = (Lake("spread", 50, 1000.0), Lake("concentrated", 1, 3500.0))


@dataclass(frozen=True)
class Deleted:
    seconds: float
    requests: int
    throttled: int
    settled_throttled: int  # in the second half of the run
    settled_requests: int


def targets(spark: SparkSession, tables: int, keys: int) -> DataFrame:
    """``keys`` files spread evenly over ``tables`` tables' folders (none exists: the store answers alone)."""
    table = F.format_string(f"s3://{BUCKET}/t%03d", F.col("id") % tables)
    return spark.range(keys).select(table.alias("table_root"),
                                    F.format_string("%s/part-%07d.parquet", table, F.col("id")).alias("path"),
                                    F.lit(1).cast("long").alias("length"), F.lit(0).cast("long").alias("modificationTime"))


def delete(spark: SparkSession, frame: DataFrame, keys: int, lake: Lake, settings: DeleteSettings,
           upstream: str, throttled: bool = True) -> Deleted:
    """One run of the deletes through a fresh store (nothing owed from the run before), which throttles
    each prefix at the lake's rate unless told not to."""
    from tests.s3_faults import FaultyS3

    store = FaultyS3(upstream, delay_seconds=LATENCY_S, answer_deletes=True,
                     prefix_keys_per_second=lake.prefix_keys_per_second if throttled else None)
    try:
        started = time.monotonic()
        actions = {r["action"]: r["count"] for r in delete_planned(
            spark, frame, replace(settings, endpoint_url=store.endpoint), "bench").groupBy("action").count().collect()}
        seconds = time.monotonic() - started
    finally:
        store.close()
    if actions != {AuditAction.DELETED.value: keys}:
        raise SystemExit(f"{lake.label}: not every key was deleted once: {actions}")
    times = [at for at, _, _ in store.requests]
    half = times[0] + (times[-1] - times[0]) / 2
    settled = [fault for at, fault, _ in store.requests if at >= half]
    return Deleted(seconds, len(store.requests), sum(f == "throttled" for _, f, _ in store.requests),
                   settled.count("throttled"), len(settled))


def run(keys: int = 100_000, rounds: int = 2) -> dict[str, dict[str, Any]]:
    from tests.s3_faults import moto_server

    for name, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(name, value)
    spark = get_spark("benchmarks.delete_pacing", "local[2]")
    figures: dict[str, dict[str, Any]] = {}
    with moto_server() as upstream:
        s3.client(upstream).create_bucket(Bucket=BUCKET)  # asked for its versioning
        for lake in LAKES:
            figures[lake.label] = _compared(spark, lake, keys, rounds, upstream)
    return figures


def _compared(spark: SparkSession, lake: Lake, keys: int, rounds: int, upstream: str) -> dict[str, Any]:
    """The lake deleted paced per prefix, under the run-wide cap, and through a store that throttles
    nothing, in turn; each one's fastest round."""
    frame = targets(spark, lake.tables, keys).cache()
    frame.count()
    timed = best_in_turn(rounds, {
        "paced": lambda: delete(spark, frame, keys, lake, DeleteSettings(), upstream),
        "capped": lambda: delete(spark, frame, keys, lake, DeleteSettings(keys_per_second=BEFORE), upstream),
        "machine": lambda: delete(spark, frame, keys, lake, DeleteSettings(), upstream, throttled=False)})
    frame.unpersist()
    return {"lake": lake, "floor_s": keys / lake.tables / lake.prefix_keys_per_second,
            "paced": timed["paced"][1], "capped": timed["capped"][1], "machine": timed["machine"][1]}


def report(figures: dict[str, dict[str, Any]], keys: int) -> list[str]:
    lines = []
    for label, f in figures.items():
        lake, paced, capped, machine = f["lake"], f["paced"], f["capped"], f["machine"]
        lines.append(
            f"{label}: {keys:,} keys in {lake.tables} table(s), {lake.prefix_keys_per_second:,.0f} keys/s a prefix, "
            f"floor {f['floor_s']:.1f} s; unthrottled on this machine {machine.seconds:.1f} s. Paced per prefix "
            f"{paced.seconds:.1f} s ({paced.seconds / f['floor_s']:.2f}x the floor, "
            f"{paced.seconds / max(f['floor_s'], machine.seconds):.2f}x the higher floor; {paced.throttled} of "
            f"{paced.requests} requests throttled, {paced.settled_throttled} of {paced.settled_requests} once settled); "
            f"run-wide {BEFORE:,.0f} keys/s {capped.seconds:.1f} s ({capped.seconds / paced.seconds:.1f}x the paced run)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}  warm, best of {args.rounds}, {LATENCY_S * 1000:.0f} ms a request")
    print("\n".join(report(run(args.keys, args.rounds), args.keys)))


if __name__ == "__main__":
    main()
