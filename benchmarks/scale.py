"""Job 2 as the lake grows, cold: 1M and 10M objects, in many tables and in one table, each timed as
users run it (a fresh ``python -m vacuum_jobs --discover --dry-run`` process, benchmarks.cold).

    python -m benchmarks.scale [--large] [--rounds 2] [--workdir DIR] [--max-deletes N] [--quiet-night]

The lakes are plan-only: every Delta log is on disk, the data files are not, and the inventory lists
them as S3 Inventory would; the plan does all of its work, while building 10M objects stays within
minutes. Each table has its adds in commits of up to 500,000, one commit removing 5% of them long
ago, a checkpoint, and 5% more files never committed. Without ``--large``, the 1M shapes only; the
driver keeps Spark's default 1 GiB. With ``--max-deletes N``, each round also runs the same dry run with that
budget (vacuum_jobs.budget: every table priced and ordered), in turn with the plain one.

With ``--quiet-night``, the lakes of many tables are settled instead (their tombstones within the retention, no
orphans), planned once with an audit table, and then each round, in turn, a night on which 2% of the tables
got a commit since: carried forward (vacuum_jobs.carry_forward) against ``--full``, cold alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone

from deltalake import DeltaTable

from benchmarks import cold
from benchmarks.vacuum_planning import DAY_MS, PARTITIONS, SCHEMA, table_roots
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import InventoryObject, write_delivery
from lakeio.spark.session import get_spark
from lakeio.times import epoch_ms

ADDS_PER_COMMIT = 500_000
# label -> (tables, files per table); the 10M shapes pair with the 1M shapes in order.
SHAPES = {"1M in 500 tables": (500, 2_000), "one table of 1M files": (1, 1_000_000)}
LARGE = {"10M in 5,000 tables": (5_000, 2_000), "one table of 10M files": (1, 10_000_000)}


def _paths(files: int) -> Iterator[str]:
    return (f"p={i % PARTITIONS:02d}/part-{i:08d}-c000.snappy.parquet" for i in range(files))


def _write_log(root: str, files: int, now_ms: int, settled: bool = False) -> None:
    """The table's log: adds of 95% of ``files``, then removes of the first 5% (a day ago where ``settled``, which
    the retention keeps; else long ago), then a checkpoint."""
    log = os.path.join(root, "_delta_log")
    os.makedirs(log)
    committed, removed = int(files * 0.95), int(files * 0.05)
    header = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
              {"metaData": {"id": os.path.basename(root), "format": {"provider": "parquet", "options": {}},
                            "schemaString": SCHEMA, "partitionColumns": ["p"], "configuration": {},
                            "createdTime": now_ms - 40 * DAY_MS}}]
    version = 0
    out = open(os.path.join(log, f"{version:020d}.json"), "w")
    out.write("".join(json.dumps(a) + "\n" for a in header))
    for i, path in enumerate(_paths(committed)):
        if i and i % ADDS_PER_COMMIT == 0:
            out.close()
            version += 1
            out = open(os.path.join(log, f"{version:020d}.json"), "w")
        out.write(json.dumps({"add": {"path": path, "partitionValues": {"p": path[2:4]}, "size": 4,
                                      "modificationTime": now_ms - 35 * DAY_MS, "dataChange": True}}) + "\n")
    out.close()
    with open(os.path.join(log, f"{version + 1:020d}.json"), "w") as out:
        for path in _paths(removed):
            out.write(json.dumps({"remove": {"path": path, "deletionTimestamp": now_ms - (1 if settled else 20) * DAY_MS,
                                             "dataChange": True, "partitionValues": {"p": path[2:4]}, "size": 4}})
                      + "\n")
    DeltaTable(root).create_checkpoint()


def _objects(bucket: str, roots: list[str], files: int, now_ms: int, settled: bool = False) -> Iterator[InventoryObject]:
    """What S3 Inventory would list: every data file (committed or not, or only those committed where ``settled``)
    and every log file."""
    written = now_ms - 35 * DAY_MS
    for root in roots:
        prefix = os.path.relpath(root, bucket)
        for path in _paths(int(files * 0.95) if settled else files):
            yield InventoryObject(f"{prefix}/{path}", 4, written)
        for name in os.listdir(os.path.join(root, "_delta_log")):
            stat = os.stat(os.path.join(root, "_delta_log", name))
            yield InventoryObject(f"{prefix}/_delta_log/{name}", stat.st_size, int(stat.st_mtime * 1000))


def _lake(workdir: str, tables: int, files_per_table: int, settled: bool = False) -> tuple[str, list[str], dict]:
    """The lake's logs and its inventory, ingested: the inventory table, the table roots, and how long each took."""
    bucket = os.path.join(workdir, "lake")
    now_ms = epoch_ms()
    started = time.monotonic()
    roots = table_roots(bucket, tables, digits=4)
    for root in roots:
        _write_log(root, files_per_table, now_ms, settled)
    logs_s = time.monotonic() - started
    manifest = write_delivery(os.path.join(workdir, "dest"), "lake", "daily",
                              _objects(bucket, roots, files_per_table, now_ms, settled), datetime.now(timezone.utc),
                              rows_per_file=1_000_000)
    delivered_s = time.monotonic() - started - logs_s
    inventory = os.path.join(workdir, "inventory")
    result = IngestInventory(get_spark("benchmarks.scale"), inventory, {"lake": bucket}).execute([manifest])
    if result.refused:
        raise SystemExit(f"inventory refused: {result.refused[0].error}")
    ingested_s = time.monotonic() - started - logs_s - delivered_s
    return inventory, roots, {"logs_s": logs_s, "delivery_s": delivered_s, "ingest_s": ingested_s}


def run(tables: int, files_per_table: int, rounds: int, workdir: str | None = None,
        max_deletes: int | None = None) -> dict:
    workdir = workdir or tempfile.mkdtemp(prefix="bench-scale-")
    inventory, _, built = _lake(workdir, tables, files_per_table)
    budget = [] if max_deletes is None else ["--max-deletes", str(max_deletes)]
    variants = [[], budget] if budget else [[]]  # in turn, each round
    runs = [[cold.run_cli(inventory, 200, options) for options in variants] for _ in range(rounds)]
    fastest = [min((r[i] for r in runs), key=lambda r: r.job_s) for i in range(len(runs[0]))]
    expected = tables * (int(files_per_table * 0.05) + files_per_table - int(files_per_table * 0.95))
    if any(f.candidates != expected for f in fastest):
        raise SystemExit(f"{[f.candidates for f in fastest]} candidates, expected {expected:,}")
    shutil.rmtree(workdir, ignore_errors=True)
    return {"tables": tables, "objects": tables * files_per_table, **built, "cold": fastest[0],
            "budgeted": fastest[1] if budget else None}


CHANGED_SHARE = 0.02  # of a quiet night's tables, those with a commit since the last run


def quiet_night(tables: int, files_per_table: int, rounds: int, workdir: str | None = None) -> dict:
    """A settled lake planned once with an audit table; then each round a night on which ``CHANGED_SHARE`` of the
    tables got a commit (an add of a file the inventory does not list yet), carried forward and then ``--full``
    (which records nothing), each a cold process after its own night's commits. The fastest of each."""
    workdir = workdir or tempfile.mkdtemp(prefix="bench-quiet-")
    inventory, roots, _ = _lake(workdir, tables, files_per_table, settled=True)
    audit = ["--audit-table", os.path.join(workdir, "audit")]
    first = cold.run_cli(inventory, 200, audit)  # records every table's state
    if first.candidates:
        raise SystemExit(f"the settled lake has {first.candidates:,} candidates")
    changed = roots[:max(1, round(len(roots) * CHANGED_SHARE))]
    runs: dict[str, list[cold.ColdRun]] = {"carried": [], "full": []}
    for night in range(2 * rounds):
        for root in changed:
            version = DeltaTable(root).version() + 1
            with open(os.path.join(root, "_delta_log", f"{version:020d}.json"), "x") as out:
                out.write(json.dumps({"add": {"path": f"p=00/night-{night}.parquet", "partitionValues": {"p": "00"},
                                              "size": 4, "modificationTime": epoch_ms(), "dataChange": True}}) + "\n")
        kind = "carried" if night % 2 == 0 else "full"
        runs[kind].append(cold.run_cli(inventory, 200, audit if kind == "carried" else [*audit, "--full"]))
    fastest = {kind: min(found, key=lambda r: r.job_s) for kind, found in runs.items()}
    if fastest["carried"].carried != len(roots) - len(changed) or fastest["full"].carried:
        raise SystemExit(f"carried {fastest['carried'].carried} and {fastest['full'].carried} of {len(roots)} tables, "
                         f"expected {len(roots) - len(changed)} and 0")
    shutil.rmtree(workdir, ignore_errors=True)
    return {"tables": tables, "objects": tables * files_per_table, "changed": len(changed), **fastest}


def run_all(large: bool, rounds: int, workdir: str | None = None, max_deletes: int | None = None) -> dict[str, dict]:
    """Every shape (the 10M ones too when ``large``), each in a scratch folder of its own."""
    chosen = {**SHAPES, **(LARGE if large else {})}
    return {label: run(tables, files, rounds, workdir and os.path.join(workdir, str(i)), max_deletes)
            for i, (label, (tables, files)) in enumerate(chosen.items())}


def quiet_report(found: dict[str, dict]) -> str:
    """Each quiet night: the carried run against the full one, step by step."""
    lines = []
    for label, f in found.items():
        carried, full = f["carried"], f["full"]
        lines.append(f"{label}, {f['changed']} table(s) changed: carried {carried.job_s:.1f} s against full "
                     f"{full.job_s:.1f} s, {carried.job_s / full.job_s:.2f}x (target: 0.3x); by step, carried / full:")
        lines += [f"  {step:<38} {carried.steps_s.get(step, 0.0):7.1f} s {seconds:7.1f} s"
                  for step, seconds in full.steps_s.items()]
        lines += [f"  {step:<38} {seconds:7.1f} s" for step, seconds in carried.steps_s.items() if step not in full.steps_s]
    return "\n".join(lines)


def report(found: dict[str, dict]) -> str:
    """Each lake's cold run step by step, then each 10M lake against its 1M one."""
    lines = []
    for label, f in found.items():
        fresh: cold.ColdRun = f["cold"]
        lines += [f"{label}: {f['objects']:,} objects in {f['tables']:,} table(s); logs written in {f['logs_s']:.0f} s, "
                  f"delivery in {f['delivery_s']:.0f} s, ingested in {f['ingest_s']:.0f} s; the fastest cold run "
                  f"({'with' if fresh.jvm_archive else 'without'} the JVM class-data archive):",
                  f"  {'session start':<38} {fresh.session_s:7.1f} s"]
        lines += [f"  {step:<38} {seconds:7.1f} s" for step, seconds in fresh.steps_s.items()]
        lines += [f"  {'job (after the session)':<38} {fresh.job_s:7.1f} s"]
        if budgeted := f["budgeted"]:
            lines += [f"  with the budget: job {budgeted.job_s:.1f} s ({budgeted.job_s / fresh.job_s:.2f}x), of which "
                      f"weighing the tables {budgeted.steps_s.get('weighing the tables', 0.0):.1f} s"]
    for (small, _), (large, _) in zip(SHAPES.items(), LARGE.items()):
        if large in found:
            steps = ", ".join(f"{step} {found[large]['cold'].steps_s[step] / max(seconds, 0.01):.1f}x"
                              for step, seconds in found[small]["cold"].steps_s.items())
            lines.append(f"{large} / {small}: job {found[large]['cold'].job_s / found[small]['cold'].job_s:.2f}x "
                         f"(target: within 4x); by step: {steps}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="add the 10M-object lakes (about half an hour)")
    parser.add_argument("--rounds", type=int, default=2, help="fresh processes per lake; the fastest counts")
    parser.add_argument("--workdir")
    parser.add_argument("--max-deletes", type=int, help="also time each lake's dry run with this budget")
    parser.add_argument("--quiet-night", action="store_true",
                        help="time the lakes of many tables on a quiet night instead: carried forward against --full")
    args = parser.parse_args()
    if args.quiet_night:
        chosen = {label: shape for label, shape in {**SHAPES, **(LARGE if args.large else {})}.items() if shape[0] > 1}
        print(quiet_report({label: quiet_night(tables, files, args.rounds, args.workdir and os.path.join(args.workdir, str(i)))
                            for i, (label, (tables, files)) in enumerate(chosen.items())}))
        return
    print(report(run_all(args.large, args.rounds, args.workdir, args.max_deletes)))


if __name__ == "__main__":
    main()
