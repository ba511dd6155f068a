"""What an erasure request's evidence document costs, warm, on the demo lake.

    python -m benchmarks.erasure_request [--commits 100] [--repeat 3]

Two lakes: the demo's (demo.lake), and the demo's with a table of ``commits`` one-file appends,
each then removed by a ``DELETE`` of its own: ``commits`` erasure requests. Each lake is delivered
as an S3 Inventory (with MD5 ETags, so that copies are searched), ingested, and vacuumed with an
audit table. Then, in turn and best of ``repeat`` rounds in one warm session at 200 shuffle
partitions, as a cluster runs (benchmarks.timing): the document of the demo's own ``DELETE`` of
``orders`` on the demo's lake; on the other, one document for one of the new commits, and the
documents of all ``commits`` in one run. Targets (#52): one document in at most 5 s, and the
run of all at most 3x one.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from benchmarks.timing import best_in_turn
from demo.lake import build_lake
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import InventoryObject, objects_in_folder, write_delivery
from lake_reports.erasure_document import ErasureRequest, RequestBatch
from lake_reports.erasure_evidence import CommitQuestion, ErasureOptions
from lakeio.spark.session import get_spark
from vacuum_jobs.batch_vacuum import vacuum
from vacuum_jobs.targets import Discover

BUCKET = "demo-lake"


def build(work: Path, commits: int) -> tuple[str, str, list[CommitQuestion], CommitQuestion]:
    """The lake, its inventory and audit tables; the new table's deletes, and the demo's own."""
    bucket = work / BUCKET
    lake = build_lake(bucket)
    requests = bucket / "privacy" / "requests"
    for i in range(commits):
        write_deltalake(str(requests), pa.table({"id": [i], "who": [f"person-{i}"]}), mode="append")
    for i in range(commits):
        DeltaTable(str(requests)).delete(f"id = {i}")
    deletes = [CommitQuestion(str(requests), commits + i) for i in range(commits)]
    objects = [InventoryObject(o.key, o.size, o.last_modified_ms,
                               e_tag=hashlib.md5((bucket / o.key).read_bytes()).hexdigest())
               for o in objects_in_folder(str(bucket))]
    manifest = write_delivery(str(work / "dest"), BUCKET, "daily", objects, datetime.now(timezone.utc))
    spark = get_spark("benchmarks.erasure_request")
    inventory, audit = str(work / "inventory"), str(work / "audit")
    if IngestInventory(spark, inventory, {BUCKET: str(bucket)}).execute([manifest]).refused:
        raise SystemExit("the benchmark's delivery was refused")
    run = vacuum(spark, inventory, Discover(), dry_run=False, audit_table=audit)
    if not run.ok:
        raise SystemExit(f"the benchmark's vacuum failed:\n{run.summary()}")
    orders_delete = CommitQuestion(str(lake.tables["orders"]), 3)
    return inventory, audit, deletes, orders_delete


def run(commits: int = 100, repeat: int = 3, workdir: str | None = None) -> dict[str, float]:
    work = Path(workdir or tempfile.mkdtemp(prefix="bench-erasure-"))
    demo_lake, (inventory, audit, deletes, _) = build(work / "demo", 0), build(work / "requests", commits)
    spark = get_spark("benchmarks.erasure_request")
    spark.conf.set("spark.sql.shuffle.partitions", "200")  # as a cluster runs
    on_demo = ErasureRequest(spark, ErasureOptions(demo_lake[1], demo_lake[0]))
    on_requests = ErasureRequest(spark, ErasureOptions(audit, inventory))

    def documents(request: ErasureRequest, asked: list[CommitQuestion]) -> RequestBatch:
        batch = request.documents([(f"REQ-{i}", commit) for i, commit in enumerate(asked)])
        if batch.refused or len(batch.documents) != len(asked):
            raise SystemExit(f"a benchmark request was refused: {batch.refused}")
        return batch

    timed = best_in_turn(repeat, {"demo": lambda: documents(on_demo, [demo_lake[3]]),
                                  "one": lambda: documents(on_requests, deletes[:1]),
                                  "all": lambda: documents(on_requests, deletes)})
    shutil.rmtree(work, ignore_errors=True)
    return {"commits": commits, "demo_s": timed["demo"][0], "one_s": timed["one"][0], "all_s": timed["all"][0],
            "ratio_all": timed["all"][0] / timed["one"][0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir")
    args = parser.parse_args()
    figures = run(args.commits, args.repeat, args.workdir)
    print(f"cores: {os.cpu_count()}  warm, best of {args.repeat}")
    print(f"the demo's DELETE of orders, on the demo lake  {figures['demo_s']:6.2f} s  (target: at most 5 s)")
    print(f"one request of the new table                   {figures['one_s']:6.2f} s")
    print(f"{figures['commits']} requests in one run                   {figures['all_s']:6.2f} s"
          f"  ratio {figures['ratio_all']:.2f} (target: at most 3)")


if __name__ == "__main__":
    main()
