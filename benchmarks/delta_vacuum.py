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
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time

from benchmarks import cold
from benchmarks.vacuum_planning import build_lake
from infra import jvm_jars
from lakeio.cli import setup_logging
from lakeio.spark import get_spark

SIDES = {
    "full": "Delta VACUUM DRY RUN, per table",
    "lite": "Delta VACUUM LITE DRY RUN, per table",
    "inventory": "Delta VACUUM USING INVENTORY DRY RUN, per table",
}
# README's form: Delta keeps the inventory rows under the table's qualified path, spelled file:/x locally.
INVENTORY_QUERY = ("SELECT regexp_replace(path, '^file:///', 'file:/') AS path, length, isDir, modificationTime "
                   "FROM delta.`{inventory}` WHERE coalesce(is_latest, true) AND NOT coalesce(is_delete_marker, false)")
log = logging.getLogger(__name__)


def delta_side(side: str, inventory: str, roots: list[str]) -> int:
    """In this process: Delta's VACUUM dry run of ``side`` over every table of ``roots``; the candidates."""
    spark = get_spark(f"delta-vacuum-{side}")
    found = 0
    for root in roots:
        using = f"USING INVENTORY ({INVENTORY_QUERY.format(inventory=inventory)}) " if side == "inventory" else ""
        lite = "LITE " if side == "lite" else ""
        found += spark.sql(f"VACUUM delta.`{root}` {lite}{using}RETAIN 168 HOURS DRY RUN").count()
    return found


def run(tables: int, files_per_table: int, repeat: int, workdir: str | None, jars: str) -> dict:
    workdir = workdir or tempfile.mkdtemp(prefix="bench-delta-vacuum-")
    lake = build_lake(get_spark("bench-delta-vacuum"), workdir, tables, files_per_table, int(time.time() * 1000))
    roots, inventory = lake.roots, lake.inventory

    def delta(side: str):
        return lambda: cold.run_module(["benchmarks.delta_vacuum", "--side", side, "--inventory", inventory, *roots],
                                       200, jars)
    best: dict[str, tuple[float, cold.ColdRun]] = {}
    for _ in range(repeat):  # in turn, each its fastest round (benchmarks.timing's rule, on fresh processes)
        for name, action in {"ours": lambda: cold.run_cli(inventory, 200), **{s: delta(s) for s in SIDES}}.items():
            fresh = action()
            if name not in best or fresh.job_s < best[name][0]:
                best[name] = (fresh.job_s, fresh)
    shutil.rmtree(workdir, ignore_errors=True)
    return {"tables": tables, "files": len(lake.objects), "build_s": lake.build_s, "best": best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--files-per-table", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=2, help="best of this many rounds (default: 2)")
    parser.add_argument("--workdir")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # one Delta process (run by the bench)
    parser.add_argument("--inventory", help=argparse.SUPPRESS)
    parser.add_argument("roots", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        setup_logging("INFO")
        print(delta_side(args.side, args.inventory, args.roots))
        return
    try:
        pins = jvm_jars.for_installed_pyspark()
        if pins.delta is None:
            raise jvm_jars.JarsUnavailable(f"no Delta release is built for Spark {pins.spark_line}")
        jars = ",".join(str(j) for j in jvm_jars.jars(pins))
    except (jvm_jars.JarsUnavailable, OSError) as exc:
        sys.exit(f"benchmarks.delta_vacuum needs Delta's jars: {exc}")
    f = run(args.tables, args.files_per_table, args.repeat, args.workdir, jars)
    ours = f["best"]["ours"][1]
    print(f"cores: {os.cpu_count()}  tables: {f['tables']}  objects: {f['files']:,}  (lake built in {f['build_s']:.0f} s); "
          f"fresh processes, the job after the session start, best of {args.repeat}")
    print(f"{'ours: python -m vacuum_jobs --discover --dry-run':<52} {ours.job_s:7.1f} s  {ours.candidates:,} candidates")
    for side, label in SIDES.items():
        theirs = f["best"][side][1]
        print(f"{label:<52} {theirs.job_s:7.1f} s  {theirs.candidates:,} candidates  "
              f"{theirs.job_s / ours.job_s:5.1f}x ours")


if __name__ == "__main__":
    main()
