"""A realistic local lake: Delta tables with weeks of history, and the debris real lakes gather.

Tables are written with ``deltalake`` (appends, overwrites, deletes, compaction,
checkpoints); each commit is then back-dated (commit time, add/remove timestamps and
file mtimes) so that the history spreads over the past weeks and retention matters.
Around them: files of failed jobs nobody committed (old and recent), ``_SUCCESS``
markers, ``.crc`` side files, ``_change_data`` leftovers, a stray folder inside a table
and one outside any table, and, where Delta's jars are at hand, a table with deletion vectors
(no jars-free writer writes them) that Delta's writer wrote.

Used by ``make demo``, the tests and the benchmarks.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from lakeio.store.uris import decode_log_path
from lakeio.times import epoch_ms

DAY_MS = 86_400_000


@dataclass
class Lake:
    bucket_dir: Path  # the folder that plays the S3 bucket
    tables: dict[str, Path] = field(default_factory=dict)  # name -> table root
    stale_debris: set[Path] = field(default_factory=set)  # uncommitted files older than retention: must go
    fresh_debris: set[Path] = field(default_factory=set)  # uncommitted files within retention: must stay
    hidden_debris: set[Path] = field(default_factory=set)  # _SUCCESS, .crc: hidden, always stay
    outside_tables: set[Path] = field(default_factory=set)  # files under no table: never touched

    def row_counts(self) -> dict[str, int]:
        """Rows per table, reading every data file (and deletion vector) the snapshot names."""
        return {name: read_all_rows(path) for name, path in self.tables.items()}


def read_all_rows(table: Path) -> int:
    """A full scan through delta-rs's query engine (its pyarrow reader skips deletion vectors)."""
    result = QueryBuilder().register("t", DeltaTable(str(table))).execute("SELECT * FROM t").read_all()
    return pa.table(result).num_rows


def build_lake(bucket_dir: Path, now_ms: int | None = None, rows_per_commit: int = 200,
               dv_table: Callable[[Path], None] | None = None) -> Lake:
    """Build the lake under ``bucket_dir`` (emptied first), its history ending at ``now_ms``; ``dv_table``
    writes a table with deletion vectors at the folder it is given (``dims/dv_flags``)."""
    now_ms = now_ms or epoch_ms()
    shutil.rmtree(bucket_dir, ignore_errors=True)
    bucket_dir.mkdir(parents=True)
    lake = Lake(bucket_dir)
    day = lambda n: now_ms - n * DAY_MS  # noqa: E731 - "n days ago"

    orders = _table(lake, "orders", "sales/orders")
    _commit(orders, day(40), lambda: write_deltalake(orders, _rows(0, rows_per_commit, "2026-10"), partition_by=["month"]))
    _commit(orders, day(35), lambda: write_deltalake(orders, _rows(1, rows_per_commit, "2026-10"), mode="append",
                                                     partition_by=["month"]))
    _commit(orders, day(30), lambda: write_deltalake(orders, _rows(2, rows_per_commit, "2026-11"), mode="append",
                                                     partition_by=["month"]))
    _commit(orders, day(20), lambda: DeltaTable(orders).delete("amount < 20"))
    _commit(orders, day(10), lambda: DeltaTable(orders).optimize.compact())
    _commit(orders, day(3), lambda: write_deltalake(orders, _rows(3, rows_per_commit, "2026-11"), mode="append",
                                                    partition_by=["month"]))
    _commit(orders, day(1), lambda: DeltaTable(orders).delete("amount > 990"))
    DeltaTable(orders).create_checkpoint()

    backup = _table(lake, "orders_backup", "sales/orders_backup")  # its name extends "orders"
    _commit(backup, day(25), lambda: write_deltalake(backup, _rows(4, rows_per_commit, "2026-10"), partition_by=["month"]))
    _commit(backup, day(15), lambda: write_deltalake(backup, _rows(5, rows_per_commit, "2026-10"), mode="overwrite",
                                                     partition_by=["month"]))

    events = _table(lake, "events", "events")
    for n, ago in enumerate((28, 21, 14, 9, 2)):
        mode = "overwrite" if n == 3 else "append"
        _commit(events, day(ago), lambda n=n, mode=mode: write_deltalake(events, _rows(10 + n, rows_per_commit), mode=mode))
    DeltaTable(events).create_checkpoint()

    customers = _table(lake, "customers", "dims/customers")
    _commit(customers, day(50), lambda: write_deltalake(customers, _rows(20, 50)))

    if dv_table is not None:
        flags = bucket_dir / "dims" / "dv_flags"
        dv_table(flags)
        _touch_tree(flags, day(60))
        lake.tables["dv_flags"] = flags

    _debris(lake, orders, day)
    _debris(lake, events, day)
    scratch = bucket_dir / "scratch" / "export.csv"
    _write(scratch, b"id,amount\n1,2\n", day(45))
    lake.outside_tables.add(scratch)
    return lake


def partitioned_deletion_vectors(spark, path: Path) -> None:
    """Delta's writer (``spark`` has its jars): 40 rows in 4 partitions, 8 files, deletion vectors on, a
    checkpoint at version 5. Version 2 hides a row of a file that version 3 removes (a partition deleted);
    version 6, the last, hides a row of a file that stays live. Either row stays on disk until a vacuum
    (and, for the live file, a rewrite: REORG ... APPLY (PURGE)) has run."""
    table = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {table} (id INT, part INT) USING delta PARTITIONED BY (part) "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'delta.checkpointInterval' = '5')")
    spark.sql(f"INSERT INTO {table} SELECT CAST(id AS INT), CAST(id % 4 AS INT) FROM range(0, 40, 1, 2)")
    for predicate in ("id = 0", "part = 0", "id = 21", "id = 2", "id = 23"):
        spark.sql(f"DELETE FROM {table} WHERE {predicate}")


def _table(lake: Lake, name: str, relative: str) -> str:
    path = lake.bucket_dir / relative
    lake.tables[name] = path
    return str(path)


def _rows(seed: int, n: int, month: str | None = None) -> pa.Table:
    ids = list(range(seed * 100_000, seed * 100_000 + n))
    columns = {"id": ids, "amount": [(i * 37) % 1000 for i in ids], "note": [f"row {i}" for i in ids]}
    if month:
        columns["month"] = [month] * n
    return pa.table(columns)


def _commit(table: str, at_ms: int, operation) -> None:
    """Run one operation, then back-date the commit it wrote and the files it added."""
    before = DeltaTable(table).version() if DeltaTable.is_deltatable(table) else -1
    operation()
    for version in range(before + 1, DeltaTable(table).version() + 1):
        _backdate(Path(table), version, at_ms)


def _backdate(table: Path, version: int, at_ms: int) -> None:
    commit = table / "_delta_log" / f"{version:020d}.json"
    lines = []
    for line in commit.read_text().splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action:
            action["commitInfo"]["timestamp"] = at_ms
        if "add" in action:
            action["add"]["modificationTime"] = at_ms
            data_file = table / decode_log_path(action["add"]["path"])
            if data_file.exists():
                os.utime(data_file, (at_ms / 1000, at_ms / 1000))
        if "remove" in action:
            action["remove"]["deletionTimestamp"] = at_ms
        lines.append(json.dumps(action))
    commit.write_text("\n".join(lines) + "\n")
    os.utime(commit, (at_ms / 1000, at_ms / 1000))


def _debris(lake: Lake, table: str, day) -> None:
    root = Path(table)
    folders = sorted({p.parent for p in root.rglob("*.parquet") if "_delta_log" not in p.parts})
    folder = folders[0]
    stale = [folder / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet",  # a failed job, weeks ago
             root / "_change_data" / f"cdc-00000-{uuid.uuid4()}.c000.snappy.parquet",
             root / "tmp_export" / "2026" / "dump-0001.json"]  # a stray non-Delta folder inside the table
    for i, path in enumerate(stale):
        _write(path, b"x" * (1000 + i), day(12 + i))
        lake.stale_debris.add(path)
    fresh = folder / f"part-00001-{uuid.uuid4()}-c000.snappy.parquet"  # a job that may still commit
    _write(fresh, b"y" * 900, day(2))
    lake.fresh_debris.add(fresh)
    for path in (folder / "_SUCCESS", folder / ".part-00000.crc", root / ".hive-staging" / "old.tmp"):
        _write(path, b"", day(30))
        lake.hidden_debris.add(path)


def _write(path: Path, content: bytes, at_ms: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    os.utime(path, (at_ms / 1000, at_ms / 1000))


def _touch_tree(root: Path, at_ms: int) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, (at_ms / 1000, at_ms / 1000))

