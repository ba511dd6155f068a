"""What keeping the files other tables need costs the batch plan (docs/DESIGN.md "References across the lake").

    python -m benchmarks.lake_references [--tables 500] [--files-per-table 2000] [--clones 10] [--repeat 3]

Builds the planning benchmark's lake (checkpointed tables, 10% orphans) plus ``clones``
shallow clones, each naming 100 live files of a source table by absolute URI; ingests its
inventory; then times, in turn and best of ``repeat`` rounds (benchmarks.timing), the dry-run
plan with the lake's references and the same plan without them (the plan before they were
kept), once over every table and once over half of them, where the other half's logs are
read for what they need. Spark's default 200 shuffle partitions, as a cluster runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from datetime import datetime, timezone

from benchmarks.timing import best_in_turn
from benchmarks.vacuum_planning import SCHEMA, build_table
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import objects_in_folder, write_delivery
from lakeio.deltalog.references import References
from lakeio.spark.session import get_spark
from lakeio.times import epoch_ms
from vacuum_jobs.batch_vacuum import BatchVacuum
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.targets import as_targets

CLONED_FILES = 100


class WithoutReferences(BatchVacuum):
    """The plan as it was before it kept what other tables need: the baseline."""

    def _read_other_logs(self, roots):
        return None

    def _references(self, replay, outside, policies, lake, now_ms):
        return References()


def build_clone(root: str, source: str, now_ms: int) -> None:
    """A shallow clone of ``source``: its log adds the source's first live files by absolute URI."""
    os.makedirs(os.path.join(root, "_delta_log"))
    with open(os.path.join(source, "_delta_log", f"{0:020d}.json")) as first_commit:
        adds = [a for a in map(json.loads, first_commit) if "add" in a][:CLONED_FILES]
    actions = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": os.path.basename(root), "format": {"provider": "parquet", "options": {}},
                             "schemaString": SCHEMA, "partitionColumns": ["p"], "configuration": {},
                             "createdTime": now_ms}}]
    actions += [{"add": {**a["add"], "path": f"file://{source}/{a['add']['path']}"}} for a in adds]
    with open(os.path.join(root, "_delta_log", f"{0:020d}.json"), "w") as out:
        out.write("\n".join(json.dumps(a) for a in actions) + "\n")


def run(tables: int, files_per_table: int, clones: int, repeat: int) -> dict:
    workdir = tempfile.mkdtemp(prefix="bench-references-")
    bucket = os.path.join(workdir, "lake")
    now_ms = epoch_ms()
    roots = [os.path.join(bucket, "warehouse", f"db{i % 5}", f"table_{i:03d}") for i in range(tables)]
    for root in roots:
        build_table(root, files_per_table, now_ms)
    step = max(1, tables // max(1, clones))
    clone_roots = [os.path.join(bucket, "clones", f"clone_{i:03d}") for i in range(clones)]
    for i, clone in enumerate(clone_roots):
        build_clone(clone, roots[(i * step) % tables], now_ms)
    manifest = write_delivery(os.path.join(workdir, "dest"), "lake", "daily", objects_in_folder(bucket),
                              datetime.now(timezone.utc), rows_per_file=250_000)
    spark = get_spark("bench-references")
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    inventory = os.path.join(workdir, "inventory")
    if IngestInventory(spark, inventory, {"lake": bucket}).execute([manifest]).refused:
        raise SystemExit("inventory refused")

    every, half = as_targets(roots + clone_roots), as_targets(roots[: tables // 2])
    options = VacuumOptions(inventory, dry_run=True, now_ms=now_ms)
    BatchVacuum(spark, options).execute(every[:2])  # warm the JVM up
    best = best_in_turn(repeat, {
        "every table": lambda: BatchVacuum(spark, options).execute(every),
        "every table, without": lambda: WithoutReferences(spark, options).execute(every),
        "half": lambda: BatchVacuum(spark, options).execute(half),
        "half, without": lambda: WithoutReferences(spark, options).execute(half),
    })
    referenced = best["every table"][1].totals()["referenced_files"]
    if referenced != clones * CLONED_FILES or best["half"][1].totals()["referenced_files"] > referenced:
        raise SystemExit(f"expected {clones * CLONED_FILES} referenced files, the plan kept {referenced}")
    shutil.rmtree(workdir, ignore_errors=True)
    return {name: seconds for name, (seconds, _) in best.items()} | {"referenced": referenced}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=500)
    parser.add_argument("--files-per-table", type=int, default=2_000)
    parser.add_argument("--clones", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    f = run(args.tables, args.files_per_table, args.clones, args.repeat)
    print(f"{args.tables} tables x {args.files_per_table:,} files, {args.clones} shallow clones "
          f"({f['referenced']:,} files kept for them); best of {args.repeat} rounds, in turn")
    for scope in ("every table", "half"):
        with_refs, without = f[scope], f[f"{scope}, without"]
        print(f"plan over {scope:<12} with the lake's references {with_refs:6.1f} s, without {without:6.1f} s: "
              f"{with_refs / without:.2f}x")


if __name__ == "__main__":
    main()
