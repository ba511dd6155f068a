"""Diffing the inventory against the keep sets of many tables in one set of Spark jobs.

Each inventory row belongs to the table that owns it (see ownership), so a row under a
Delta table nested inside a target, or under a neighbour whose name extends it, is
never the target's. An owned row is then one of: ``kept`` (the log needs it; ``live``
says whether the current snapshot does or only a tombstone), ``hidden``,
``too_recent`` (modified at or after the cutoff), ``dir`` (a folder marker) or
``candidate``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakeio import uris
from vacuum_jobs import gates
from vacuum_jobs.keep import hidden, keep_set
from vacuum_jobs.log_replay import TableState
from vacuum_jobs.ownership import with_owner

MISSING_SAMPLE = 100  # live files missing from storage listed per table in the report


@dataclass(frozen=True)
class TablePolicy:
    table_root: str  # canonical
    cutoff_ms: int
    partition_names: tuple[str, ...]  # logical and physical partition column names
    hidden_names: tuple[str, ...] = ()  # segment names hidden at any depth (UniForm metadata)

    @classmethod
    def for_state(cls, state: TableState, cutoff_ms: int) -> TablePolicy:
        """The policy a table's own log implies; ValueError when it uses a UniForm format we do not know."""
        return cls(state.table_root, cutoff_ms, gates.partition_folder_names(state), gates.uniform_hidden_names(state))


@dataclass
class TablePlan:
    counts: dict[str, int] = field(default_factory=dict)  # e.g. candidate_files, candidate_bytes
    missing: list[str] = field(default_factory=list)  # sample of live files absent from the inventory
    old_live_files: int = 0  # live files written before the inventory was taken

    @property
    def coverage(self) -> float | None:
        if not self.old_live_files:
            return None
        return 1 - self.counts.get("missing_files", 0) / self.old_live_files


@dataclass
class Plan:
    tables: dict[str, TablePlan]
    candidates: DataFrame  # table_root, path, length, modificationTime
    cached: tuple[DataFrame, ...] = ()

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()


def plan_tables(
    spark: SparkSession, inventory: DataFrame, files: DataFrame, policies: list[TablePolicy],
    inventory_as_of_ms: int, other_roots: Iterable[str] = (),
) -> Plan:
    """Classify the current inventory rows owned by ``policies``' tables; ``other_roots`` are
    every other Delta table root known (nested tables and neighbours own their own rows)."""
    tables = policy_frame(spark, policies)
    files = files.join(F.broadcast(tables.select("table_root", "cutoff_ms")), "table_root")
    rows = inventory.where(F.col("path").isNotNull()).select(
        uris.canonical_col(F.col("path")).alias("path"), "length", "modificationTime", "isDir")
    owned = with_owner(rows, [p.table_root for p in policies] + list(other_roots))
    classified = (
        classify(owned.join(F.broadcast(tables), "table_root"), files)
        .select("table_root", "path", "length", "modificationTime", "category")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    plans = {p.table_root: TablePlan() for p in policies}
    for row in classified.groupBy("table_root", "category").agg(
        F.count(F.lit(1)).alias("n"), F.coalesce(F.sum("length"), F.lit(0)).alias("bytes")
    ).collect():
        plans[row["table_root"]].counts[f"{row['category']}_files"] = row["n"]
        plans[row["table_root"]].counts[f"{row['category']}_bytes"] = row["bytes"]
    _log_counts(files, plans, inventory_as_of_ms)
    _missing(files, classified, plans, inventory_as_of_ms)
    candidates = classified.where(F.col("category") == "candidate").drop("category")
    return Plan(plans, candidates, (classified,))


def policy_frame(spark: SparkSession, policies: list[TablePolicy]) -> DataFrame:
    return spark.createDataFrame(
        [(p.table_root, p.cutoff_ms, list(p.partition_names), list(p.hidden_names)) for p in policies],
        "table_root string, cutoff_ms long, partition_names array<string>, hidden_names array<string>",
    )


def classify(owned: DataFrame, files: DataFrame) -> DataFrame:
    """``owned`` rows (canonical ``path``, ``table_root``, ``cutoff_ms``, ``partition_names``, ``hidden_names``, ...)
    plus ``category`` and ``live``; ``files`` are reconciled log actions with ``cutoff_ms``."""
    relative = F.expr("substring(path, length(table_root) + 2)")
    return owned.join(keep_set(files), ["table_root", "path"], "left").withColumn(
        "category",
        F.when(F.col("isDir"), "dir")
        .when(F.col("live").isNotNull(), "kept")
        .when(hidden(relative, F.col("partition_names"), F.col("hidden_names")), "hidden")
        .when(F.col("modificationTime").isNull() | (F.col("modificationTime") >= F.col("cutoff_ms")), "too_recent")
        .otherwise("candidate"),
    )


def _inside_root() -> Column:
    """A file the log names inside its own table; a shallow clone's files elsewhere are not
    this table's to delete, nor to miss."""
    return F.col("path").startswith(F.concat(F.col("table_root"), F.lit("/")))


def _log_counts(files: DataFrame, plans: dict[str, TablePlan], as_of_ms: int) -> None:
    """Live files and kept tombstones per table, from the log alone."""
    live = F.col("kind") == "add"
    kept_tombstone = (F.col("kind") == "remove") & (
        F.col("deletion_timestamp").isNull() | (F.col("deletion_timestamp") >= F.col("cutoff_ms")))
    per_path = files.groupBy("table_root", "path").agg(
        F.max(live).alias("live"), F.max(kept_tombstone).alias("tombstone"),
        F.max("size").alias("size"), F.min("modification_time").alias("written"),
        F.max(_inside_root()).alias("inside"),
    )
    for row in per_path.groupBy("table_root").agg(
        F.count(F.when(F.col("live"), 1)).alias("live_files"),
        F.coalesce(F.sum(F.when(F.col("live"), F.col("size"))), F.lit(0)).alias("live_bytes"),
        F.count(F.when(~F.col("live") & F.col("tombstone"), 1)).alias("tombstone_files"),
        F.coalesce(F.sum(F.when(~F.col("live") & F.col("tombstone"), F.col("size"))), F.lit(0)).alias("tombstone_bytes"),
        F.count(F.when(F.col("live") & F.col("inside") & (F.col("written") < as_of_ms), 1)).alias("old_live"),
    ).collect():
        plan = plans[row["table_root"]]
        for name in ("live_files", "live_bytes", "tombstone_files", "tombstone_bytes"):
            plan.counts[name] = row[name]
        plan.old_live_files = row["old_live"]


def _missing(files: DataFrame, classified: DataFrame, plans: dict[str, TablePlan], as_of_ms: int) -> None:
    """Live files written before the inventory was taken that the inventory does not list."""
    old_live = files.where((F.col("kind") == "add") & (F.col("modification_time") < as_of_ms) & _inside_root()).select(
        "table_root", "path").distinct()
    missing = old_live.join(classified.select("table_root", "path"), ["table_root", "path"], "left_anti")
    first = Window.partitionBy("table_root").orderBy("path")
    counted = missing.withColumn("n", F.count(F.lit(1)).over(Window.partitionBy("table_root")))
    for row in counted.withColumn("rank", F.row_number().over(first)).where(F.col("rank") <= MISSING_SAMPLE).collect():
        plans[row["table_root"]].counts["missing_files"] = row["n"]
        plans[row["table_root"]].missing.append(row["path"])
