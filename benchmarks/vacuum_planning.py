"""Job 2 planning speed: one batch dry run over many tables next to the bare Spark program that
answers the same question and next to delta-rs's FULL vacuum per table; and the chargeback of the
same lake (which classifies every object the same way).

    python -m benchmarks.vacuum_planning [--tables 50] [--files-per-table 20000] [--repeat 3] [--shape checkpoint] [--workdir DIR]

Builds a local lake of ``tables`` Delta tables holding ``tables * files-per-table`` files,
about 10% of them orphans (half tombstoned long ago, half never committed), writes its
S3-style inventory and ingests it; then times, in the same run and session, in turn for
``repeat`` rounds, each its fastest round (benchmarks.timing): the batch dry-run plan
(inventory + logs, no listing), the chargeback of the whole lake, the bare Spark baseline (benchmarks.bare_spark: read the
inventory date, read checkpoints and commits, absolute paths, one anti-join, count; no safety
rule beyond what this lake needs), ``DeltaTable.vacuum(dry_run=True, full=True)`` looped over
the same tables (which lists every folder), and the job as users run it: a fresh
``python -m vacuum_jobs --discover --dry-run`` process, next to the bare baseline in a fresh
process of its own (benchmarks.cold; ``--no-cold`` leaves both out). The timed runs use Spark's
own default of 200 shuffle partitions, with adaptive execution, as a cluster would
(``--shuffle-partitions`` to compare). On S3 both would also pay for their listings: the
figures labelled "S3 model" add an assumed cost per ListObjectsV2 page to each measured time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from deltalake import DeltaTable

from benchmarks import cold
from benchmarks.bare_spark import bare_spark_candidates
from benchmarks.timing import best_in_turn
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import objects_in_folder, write_delivery
from lake_reports.charges import Chargeback, ChargebackOptions
from lakeio.spark.session import get_spark
from lakeio.times import epoch_ms
from vacuum_jobs.batch_vacuum import BatchVacuum
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.targets import as_targets

DAY_MS = 86_400_000
PARTITIONS = 20
S3_PAGE_S = 0.022  # assumed latency of one ListObjectsV2 page (1,000 keys) from the same region
SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}}]})


SHAPES = {
    "checkpoint": "two large commits of adds and one of removes, then a checkpoint",
    "commits": "the same three commits, no checkpoint",
    "small-commits": "one commit per 500 actions (40 per table at 20,000 files), no checkpoint",
}


def table_roots(bucket: str, tables: int, digits: int = 3) -> list[str]:
    """Where a benchmark lake's tables live: five databases under ``warehouse/``."""
    return [os.path.join(bucket, "warehouse", f"db{i % 5}", f"table_{i:0{digits}d}") for i in range(tables)]


def build_table(root: str, files: int, now_ms: int, shape: str = "checkpoint") -> None:
    """A table whose log has ``files`` adds (5% later removed, long ago) plus 5% uncommitted files,
    its log laid out as ``shape`` says (see SHAPES)."""
    log = os.path.join(root, "_delta_log")
    os.makedirs(log)
    old = (now_ms - 30 * DAY_MS) / 1000
    committed = int(files * 0.95)
    removed = int(files * 0.05)
    paths = [f"p={i % PARTITIONS:02d}/part-{i:06d}-c000.snappy.parquet" for i in range(files)]
    for part in range(PARTITIONS):
        os.makedirs(os.path.join(root, f"p={part:02d}"))
    for path in paths:
        full = os.path.join(root, path)
        with open(full, "wb") as out:
            out.write(b"PAR1")
        os.utime(full, (old, old))
    first: list[dict] = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
             {"metaData": {"id": os.path.basename(root), "format": {"provider": "parquet", "options": {}},
                           "schemaString": SCHEMA, "partitionColumns": ["p"], "configuration": {},
                           "createdTime": now_ms - 40 * DAY_MS}}]
    adds: list[dict] = [{"add": {"path": p, "partitionValues": {"p": p[2:4]}, "size": 4, "modificationTime": now_ms - 35 * DAY_MS,
                     "dataChange": True}} for p in paths[:committed]]
    removes: list[dict] = [{"remove": {"path": p, "deletionTimestamp": now_ms - 20 * DAY_MS, "dataChange": True,
                           "partitionValues": {"p": p[2:4]}, "size": 4}} for p in paths[:removed]]
    if shape == "small-commits":
        commits = [adds[i:i + 500] for i in range(0, len(adds), 500)] + [removes[i:i + 500]
                                                                       for i in range(0, len(removes), 500)]
        commits[0] = first + commits[0]
    else:
        half = committed // 2
        commits = [first + adds[:half], adds[half:], removes]
    for version, actions in enumerate(commits):
        with open(os.path.join(log, f"{version:020d}.json"), "w") as out:
            out.write("\n".join(json.dumps(a) for a in actions) + "\n")
    if shape == "checkpoint":
        DeltaTable(root).create_checkpoint()


@dataclass(frozen=True)
class BenchLake:
    roots: list[str]
    inventory: str  # the inventory table of the lake (job 1)
    objects: list  # what the inventory lists
    build_s: float
    inventory_s: float


def build_lake(spark, workdir: str, tables: int, files_per_table: int, now_ms: int, shape: str = "checkpoint") -> BenchLake:
    """``tables`` tables of ``files_per_table`` files under ``workdir``/lake, and their inventory, ingested."""
    bucket = os.path.join(workdir, "lake")
    started = time.monotonic()
    roots = table_roots(bucket, tables)
    for root in roots:
        build_table(root, files_per_table, now_ms, shape)
    built = time.monotonic() - started
    started = time.monotonic()
    objects = objects_in_folder(bucket)
    manifest = write_delivery(os.path.join(workdir, "dest"), "lake", "daily", objects, datetime.now(timezone.utc),
                              rows_per_file=250_000)
    inventory = os.path.join(workdir, "inventory")
    result = IngestInventory(spark, inventory, {"lake": bucket}).execute([manifest])
    if result.refused:
        raise SystemExit(f"inventory refused: {result.refused[0].error}")
    return BenchLake(roots, inventory, objects, built, time.monotonic() - started)


def _pages(keys: int) -> int:
    return max(1, -(-keys // 1000))


def run(tables: int = 50, files_per_table: int = 20_000, workdir: str | None = None, repeat: int = 3,
        shuffle_partitions: int = 200, shape: str = "checkpoint", cold_runs: bool = True) -> dict:
    workdir = workdir or tempfile.mkdtemp(prefix="bench-vacuum-")
    now_ms = epoch_ms()
    spark = get_spark("bench-vacuum")
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    lake = build_lake(spark, workdir, tables, files_per_table, now_ms, shape)
    roots, inventory, objects, built, inventoried = lake.roots, lake.inventory, lake.objects, lake.build_s, lake.inventory_s

    targets = as_targets(roots)
    options = VacuumOptions(inventory, dry_run=True, now_ms=now_ms)
    BatchVacuum(spark, options).execute(targets[:2])  # warm the JVM up on two tables
    cutoff_ms = now_ms - 168 * 3_600_000
    best = best_in_turn(repeat, {
        "plan": lambda: BatchVacuum(spark, options).execute(targets),
        "baseline": lambda: bare_spark_candidates(spark, inventory, roots, cutoff_ms),
        "chargeback": lambda: Chargeback(spark, ChargebackOptions(inventory, now_ms=now_ms)).execute(),
        "loop": lambda: sum(len(set(DeltaTable(root).vacuum(
            retention_hours=168, dry_run=True, enforce_retention_duration=False, full=True))) for root in roots),
        **({"cold": lambda: cold.run_cli(inventory, shuffle_partitions),
            "cold_baseline": lambda: cold.run_bare(inventory, roots, cutoff_ms, shuffle_partitions)}
           if cold_runs else {}),
    })
    (batch, report), (baseline, bare), (looped, delta_rs) = best["plan"], best["baseline"], best["loop"]
    fresh: cold.ColdRun | None = best["cold"][1] if cold_runs else None
    fresh_bare: cold.ColdRun | None = best["cold_baseline"][1] if cold_runs else None
    for name, process in (("cold run", fresh), ("cold bare Spark baseline", fresh_bare)):
        if process is not None and process.candidates != report.totals()["candidate_files"]:
            raise SystemExit(f"the {name} found {process.candidates} candidates, the plan "
                             f"{report.totals()['candidate_files']}")
    if bare != report.totals()["candidate_files"]:
        raise SystemExit(f"the bare Spark baseline found {bare} candidates, the plan "
                         f"{report.totals()['candidate_files']}")
    if not report.ok:
        raise SystemExit("benchmark tables were refused: " + "; ".join(t.reason or "" for t in report.tables))

    chargeback, charge = best["chargeback"]
    reclaimable = sum(c.objects for c in charge.cells if c.category == "reclaimable")
    if not charge.balanced or reclaimable != report.totals()["candidate_files"]:
        raise SystemExit(f"chargeback disagrees: {reclaimable} reclaimable, {report.totals()['candidate_files']} "
                         "candidates" if charge.balanced else "chargeback does not add up")

    # ListObjectsV2 pages (1,000 keys each) per prefix: a listing vacuum lists each table's
    # whole tree, the batch plan only each _delta_log/ folder.
    listing_pages = sum(_pages(sum(len(names) for _, _, names in os.walk(root))) for root in roots)
    log_pages = sum(_pages(len(os.listdir(os.path.join(root, "_delta_log")))) for root in roots)
    shutil.rmtree(workdir, ignore_errors=True)
    return {
        "tables": tables,
        "files": len(objects),
        "candidates": report.totals()["candidate_files"],
        "delta_rs_candidates": delta_rs,
        "build_s": built,
        "inventory_s": inventoried,
        "batch_dry_run_s": batch,
        "bare_spark_baseline_s": baseline,
        "plan_over_baseline": batch / baseline,
        "shuffle_partitions": int(spark.conf.get("spark.sql.shuffle.partitions") or 0),
        "delta_rs_full_vacuum_loop_s": looped,
        "chargeback_s": chargeback,
        "speedup": looped / batch,
        # What a listing vacuum would ask S3 for (1,000 keys per ListObjectsV2 page, one prefix per table),
        # against this project's one _delta_log listing per table: a computed figure, not a measurement.
        "shape": shape,
        "s3_list_pages_listing_vacuum": listing_pages,
        "s3_list_pages_batch": log_pages,
        # A model, not a measurement (this machine has no S3): each run's measured time plus
        # what its ListObjectsV2 pages would cost at S3_PAGE_S each.
        "s3_model_delta_rs_loop_s": looped + listing_pages * S3_PAGE_S,
        "s3_model_batch_s": batch + log_pages * S3_PAGE_S,
        # The fastest fresh process (benchmarks.cold): the session start apart, the job after it;
        # and the fastest fresh process of the bare Spark program, the floor under it.
        "cold": fresh,
        "cold_baseline": fresh_bare,
        "s3_model_cold_s": fresh.job_s + log_pages * S3_PAGE_S if fresh else None,
    }


def cold_lines(f: dict) -> str:
    """The fastest fresh process, step by step, against the deltalake loop."""
    fresh: cold.ColdRun = f["cold"]
    archive = "from the JVM class-data archive" if fresh.jvm_archive else "no JVM class-data archive"
    lines = [f"cold process (python -m vacuum_jobs --discover --dry-run, {archive}), session start "
             f"{fresh.session_s:.1f} s, then"]
    lines += [f"  {name:<38} {seconds:7.1f} s" for name, seconds in fresh.steps_s.items()]
    lines += [f"  {'job (after the session)':<38} {fresh.job_s:7.1f} s  cold / deltalake loop "
              f"{fresh.job_s / f['delta_rs_full_vacuum_loop_s']:.2f}; S3 model loop / cold "
              f"{f['s3_model_delta_rs_loop_s'] / f['s3_model_cold_s']:.2f}"]
    bare: cold.ColdRun = f["cold_baseline"]
    lines += [f"the bare Spark baseline in a fresh process the same way, session start {bare.session_s:.1f} s, then",
              f"  {'job (after the session)':<38} {bare.job_s:7.1f} s  cold job / cold baseline "
              f"{fresh.job_s / bare.job_s:.2f}; cold baseline / deltalake loop "
              f"{bare.job_s / f['delta_rs_full_vacuum_loop_s']:.2f}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--files-per-table", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many timed runs (default: 3)")
    parser.add_argument("--shuffle-partitions", type=int, default=200,
                        help="spark.sql.shuffle.partitions for the timed runs (default: 200, Spark's own)")
    parser.add_argument("--shape", choices=SHAPES, default="checkpoint",
                        help="how each table's log is laid out: " + "; ".join(f"{k}: {v}" for k, v in SHAPES.items()))
    parser.add_argument("--no-cold", action="store_true", help="leave out the fresh-process runs")
    parser.add_argument("--workdir")
    args = parser.parse_args()
    f = run(args.tables, args.files_per_table, args.workdir, args.repeat, args.shuffle_partitions, args.shape,
            not args.no_cold)
    print(f"cores: {os.cpu_count()}  tables: {f['tables']}  files: {f['files']:,}  log shape: {f['shape']}  "
          f"(lake built in {f['build_s']:.0f} s, inventory in {f['inventory_s']:.0f} s)")
    print(f"shuffle partitions: {f['shuffle_partitions']}; plan, baseline and loop run in turn, best of {args.repeat} rounds each")
    print(f"batch dry-run plan (this project)        {f['batch_dry_run_s']:7.1f} s  {f['candidates']:,} candidates")
    print(f"bare Spark baseline (same candidates)    {f['bare_spark_baseline_s']:7.1f} s")
    print(f"ratio (plan / baseline)                  {f['plan_over_baseline']:7.2f}")
    print(f"deltalake FULL vacuum dry run, looped    {f['delta_rs_full_vacuum_loop_s']:7.1f} s  "
          f"{f['delta_rs_candidates']:,} candidates")
    print(f"ratio (deltalake loop / batch)           {f['speedup']:7.2f}")
    print(f"chargeback of the whole lake             {f['chargeback_s']:7.1f} s  (reclaimable = candidates; "
          f"{f['chargeback_s'] / f['batch_dry_run_s']:.2f}x the plan)")
    if f["cold"]:
        print(cold_lines(f))
    print(f"on S3, a model: + {S3_PAGE_S * 1000:.0f} ms per ListObjectsV2 page "
          f"({f['s3_list_pages_listing_vacuum']:,} pages for the loop, {f['s3_list_pages_batch']:,} for the batch)")
    print(f"  deltalake loop, S3 model                {f['s3_model_delta_rs_loop_s']:7.1f} s")
    print(f"  batch dry-run plan, S3 model            {f['s3_model_batch_s']:7.1f} s")


if __name__ == "__main__":
    main()
