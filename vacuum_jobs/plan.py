"""Diffing the inventory against the keep sets of many tables in one set of Spark jobs.

Each inventory row belongs to the table that owns it (see deltalog.ownership), so a row
under a Delta table nested inside a target, or under a neighbour whose name extends it,
is never the target's. An owned row then falls in one category (deltalog.policy):
``kept`` (the log needs it; ``live`` says whether the current snapshot does or only a
tombstone), ``hidden``, ``too_recent``, ``dir`` or ``candidate``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.deltalog.keep import needed
from lakeio.deltalog.ownership import with_owner
from lakeio.deltalog.policy import Category, TablePolicy, category, hidden_patterns, policy_frame, released
from lakeio.deltalog.replay import unresolvable
from lakeio.inventory import is_current, is_noncurrent
from lakeio.spark.shapes import CANDIDATES, FILE_ACTIONS, INVENTORY_ROWS, first_paths, local_frame, of_tables
from lakeio.spark.tasks import by_key, small_shuffles
from lakeio.store import uris
from lakeio.store.uris import TableRoot
from vacuum_jobs.report import TableCounts

MISSING_SAMPLE = 100  # live files missing from storage listed per table in the report


@dataclass
class TablePlan:
    counts: TableCounts = field(default_factory=TableCounts)
    missing: list[str] = field(default_factory=list)  # sample of live files absent from the inventory
    referenced_by: dict[str, int] = field(default_factory=dict)  # files kept because another table needs them
    old_live_files: int = 0  # live files written before the inventory was taken
    outside_files: int = 0  # files its log names outside its root (a shallow clone's): others' plans need its log
    # The first instant past which the cutoff releases a listed file it keeps now (deltalog.policy.released; None:
    # none is released by the clock alone); vacuum_jobs.planning.quiet_until makes it a moment of the clock.
    released_ms: int | None = None

    @property
    def coverage(self) -> float | None:
        if not self.old_live_files:
            return None
        return 1 - self.counts.missing_files / self.old_live_files


@dataclass
class Plan:
    tables: dict[TableRoot, TablePlan]
    candidates: DataFrame  # shapes.CANDIDATES
    refused: dict[TableRoot, str] = field(default_factory=dict)  # why its log cannot be trusted
    cached: tuple[DataFrame, ...] = ()
    # Per pin (its index in the run's pins) of the planned tables: its files written before the
    # inventory that the inventory does not list, how many and the first by path.
    pins_missing: dict[int, tuple[int, str]] = field(default_factory=dict)

    def release(self) -> None:
        """Drop what a deleting run cached, once its deletes are done."""
        for frame in self.cached:
            frame.unpersist()


def plan_tables(
    spark: SparkSession, inventory: DataFrame, files: DataFrame, policies: list[TablePolicy],
    inventory_as_of_ms: int, other_roots: Iterable[str] = (), cache: bool = False, log_rows: int = 0,
    references: DataFrame | None = None, pinned: DataFrame | None = None, priced: Sequence[str] = (),
) -> Plan:
    """Classify the current inventory rows owned by ``policies``' tables in one Spark job.

    ``inventory`` holds every row of one inventory date (all versions, every configuration:
    ``path``, ``length``, ``isDir``, ``modificationTime``, ``is_latest``, ``is_delete_marker``);
    ``files`` are reconciled log actions with their ``problem`` column (see
    deltalog.replay); ``other_roots`` are every other Delta table root known (nested tables and
    neighbours own their own rows). The inventory rows and the log facts meet in one
    aggregation per (table, path), and one aggregation per table yields every count. A table
    whose log names a file we cannot resolve lands in ``refused``. With ``cache`` the
    classified paths are kept for the deletes that follow; a dry run needs nothing cached.
    ``log_rows``, the log rows ``files`` came from (``Replay.rows``), sizes the per-path
    aggregation's tasks. ``references`` (shapes.REFERENCES, see deltalog.references) are files
    other tables need: such a file is ``referenced``, never a candidate. ``pinned``
    (shapes.PINNED_FILES, see deltalog.pinned) are files pinned versions read: such a file is
    ``pinned``, never a candidate, and the pins whose files the inventory no longer lists are
    found in the classified rows (kept for that pass). With ``priced``, the storage classes a budget's prices
    name, the candidates carry each row's ``storage_class`` (another class as null), for the budget to price
    (vacuum_jobs.budget); a run without one does not pay for it.
    """
    INVENTORY_ROWS.check(inventory)
    FILE_ACTIONS.check(files)
    cache = cache or pinned is not None
    tables, patterns = policy_frame(spark, policies), hidden_patterns(policies)
    roots = sorted({p.table_root for p in policies} | set(other_roots))
    classes = tuple(priced) if "storage_class" in inventory.columns else ()
    per_path = _per_path(inventory, files, F.broadcast(tables.select("table_id", "table_root", "cutoff_ms")),
                         roots, inventory_as_of_ms, log_rows, references, pinned, classes)
    classified = per_path.join(F.broadcast(tables), "table_id").select(
        "*", F.when(F.col("inside"), F.concat("table_root", F.lit("/"), "relative")).otherwise(
            F.col("relative")).alias("path"),
        F.when(F.col("present"), category(F.col("relative"), patterns)).alias("category"),
        F.when(F.col("present"), released(F.col("relative"), patterns)).alias("released"),
    ).drop("hidden_rule", "cutoff_ms", "inside", "relative", "kept_deleted")
    if cache:
        classified = classified.persist(StorageLevel.MEMORY_AND_DISK)
    plans, unresolved = _table_counts(classified, policies, inventory_as_of_ms, roots)
    refused = unresolvable(of_tables(files, unresolved)) if unresolved else {}
    if any(plan.counts.missing_files for plan in plans.values()):
        _missing_sample(classified, plans)
    priced_as = ([_class_name(F.col("storage_class"), classes).alias("storage_class")] if classes
                 else [F.lit(None).cast("string").alias("storage_class")] if priced else [])
    candidates = classified.where(F.col("category") == Category.CANDIDATE.value).select(*CANDIDATES.columns,
                                                                                       *priced_as)
    missing = _pins_missing(classified, pinned, inventory_as_of_ms) if pinned is not None else {}
    return Plan(plans, candidates, refused, (classified,) if cache else (), missing)


def _per_path(inventory: DataFrame, files: DataFrame, tables: DataFrame, roots: list[str], as_of_ms: int,
              log_rows: int, references: DataFrame | None, pinned: DataFrame | None, classes: Sequence[str]
              ) -> DataFrame:
    """One row per (table, path) that the inventory lists under a planned table or its log names:
    the log's facts about it, and the inventory's newest row of it (``present`` when that row is
    a current object). Two inventory configurations listing one object give one row.

    ``tables`` maps ``table_root`` to ``table_id`` and ``cutoff_ms``; ``roots`` are every Delta
    table root known. Rows are keyed by ``table_id``, ``inside`` (a shallow clone's files lie
    outside its root) and ``relative`` (the path below the root, or the whole path outside it),
    which keeps the shuffle narrow. The inventory's rows under the tables are not counted before
    this scan; they are about as many as the log's (``log_rows``), a table's files being in both.
    ``referenced_by`` is the index in ``roots`` of a table that needs the file from another table's
    folder (the least of them; -1 for a table not among ``roots``): a number, since Spark hashes
    only fixed-width aggregate buffers (a string one makes it sort every row). ``pinned_by`` is, likewise,
    the least index of a pin whose version reads the file."""
    inside = F.col("path").startswith(F.concat(F.col("table_root"), F.lit("/")))
    relative = F.when(F.col("inside"), F.expr("substring(path, length(table_root) + 2)")).otherwise(F.col("path"))
    live = F.col("kind") == "add"
    # Each action names its data file and maybe a deletion-vector file: one pass emits both rows.
    named = F.array(F.struct(F.col("path"), F.lit(True).alias("is_data")))
    named = F.when(F.col("dv_path").isNotNull() & needed(), F.concat(named, F.array(
        F.struct(F.col("dv_path").alias("path"), F.lit(False).alias("is_data"))))).otherwise(named)
    actions = files.join(tables, "table_root").select("*", F.explode(named).alias("named")).drop("path").select(
        "*", "named.*").withColumn("inside", inside)
    data = F.col("is_data")
    logged = actions.select(
        "table_id", "inside", relative.alias("relative"), F.when(needed(), live).alias("keep_live"),
        F.when(data, live).alias("log_live"),
        F.when(data, ~live & needed()).alias("log_tombstone"), F.when(data, F.col("size")).alias("log_size"),
        F.when(data, F.col("modification_time")).alias("log_written"), F.when(data, F.col("inside")).alias("log_inside"),
        F.when(data, live & (F.col("modification_time") < as_of_ms) & F.col("inside")).alias("log_old_live"),
        F.when(data, F.col("problem")).alias("problem"),
        F.when(~live & needed(), F.col("deletion_timestamp")).alias("kept_deleted"))
    current = is_current()
    # The newest row of the path wins (by modification time, as Delta's own inventory vacuum), a
    # current version a tie; folded into one number, since Spark hashes only fixed-width aggregate buffers.
    newest = F.coalesce(F.col("modificationTime"), F.lit(-(2 ** 61))) * 2 + current.cast("long")
    # A version a delete marker (or a newer version) hides: bytes the bucket keeps, never a candidate.
    noncurrent = is_noncurrent()
    # With ``classes``, the storage class goes with the row, what a budget prices (vacuum_jobs.budget): as its number
    # among the priced classes, a fixed-width buffer again (0: one the prices do not name).
    number = [_class_number(F.col("storage_class"), classes).alias("storage_class")] if classes else []
    listed = with_owner(inventory.where(F.col("path").isNotNull()).select(
        uris.canonical_col(F.col("path")).alias("path"), "length", "isDir", "modificationTime",
        *number, current.alias("current"), newest.alias("newest"),
        F.when(noncurrent, F.coalesce(F.col("length"), F.lit(0))).alias("noncurrent_length"),
    ), roots).join(tables, "table_root").select(
        "table_id", F.lit(True).alias("inside"), F.expr("substring(path, length(table_root) + 2)").alias("relative"),
        "length", "isDir", "modificationTime", *(["storage_class"] if classes else []), "current", "newest",
        "noncurrent_length")
    key = ["table_id", "inside", "relative"]
    rows = logged.unionByName(listed, allowMissingColumns=True)
    referenced = [F.lit(None).cast("int").alias("referenced_by")]
    if references is not None:
        ids = F.broadcast(local_frame(tables.sparkSession, list(enumerate(roots)), "id int, referenced_by string"))
        rows = rows.unionByName(references.join(tables, "table_root").join(ids, "referenced_by", "left").select(
            "table_id", F.lit(True).alias("inside"), F.expr("substring(path, length(table_root) + 2)").alias("relative"),
            F.coalesce(F.col("id"), F.lit(-1)).alias("referencing")), allowMissingColumns=True)
        referenced = [F.min("referencing").alias("referenced_by")]
    pinning = [F.lit(None).cast("int").alias("pinned_by")]
    if pinned is not None:
        rows = rows.unionByName(pinned.where(F.col("path").isNotNull()).join(tables, "table_root").withColumn(
            "inside", inside).select("table_id", "inside", relative.alias("relative"), F.col("pin").alias("pinning")),
            allowMissingColumns=True)
        pinning = [F.min("pinning").alias("pinned_by")]
    rows = by_key(rows, key, 2 * log_rows)
    return rows.groupBy(*key).agg(
        *referenced, *pinning,
        F.max("keep_live").alias("live"), F.max("log_live").alias("log_live"),
        F.max("log_tombstone").alias("log_tombstone"), F.max("log_size").alias("log_size"),
        F.min("log_written").alias("log_written"), F.max("log_inside").alias("log_inside"),
        F.max("log_old_live").alias("log_old_live"), F.count("problem").alias("problems"),
        F.max("kept_deleted").alias("kept_deleted"),
        F.coalesce(F.max_by("current", "newest"), F.lit(False)).alias("present"),
        F.count("noncurrent_length").alias("noncurrent_versions"), F.sum("noncurrent_length").alias("noncurrent_length"),
        *[F.max_by(name, "newest").alias(name)
          for name in ("length", "isDir", "modificationTime", *(("storage_class",) if classes else ()))],
    )


def _table_counts(classified: DataFrame, policies: list[TablePolicy], as_of_ms: int, roots: list[str]
                  ) -> tuple[dict[TableRoot, TablePlan], list[TableRoot]]:
    """Every count of the report, per table, in one aggregation (with the tables that need its
    files); and the tables whose log names a file we cannot resolve (their plans are dropped)."""
    def files_and_bytes(name: str, condition: Column, size: str) -> list[Column]:
        return [F.count(F.when(condition, 1)).alias(f"{name}_files"),
                F.coalesce(F.sum(F.when(condition, F.col(size))), F.lit(0)).alias(f"{name}_bytes")]

    log_live, tombstone = F.col("log_live"), F.col("log_tombstone")
    counts = [c for name in Category for c in files_and_bytes(name.value, F.col("category") == name.value, "length")]
    counts += files_and_bytes("live", log_live, "log_size")
    counts += files_and_bytes("tombstone", ~log_live & tombstone, "log_size")
    counts += [F.coalesce(F.sum("noncurrent_versions"), F.lit(0)).alias("noncurrent_files"),
               F.coalesce(F.sum("noncurrent_length"), F.lit(0)).alias("noncurrent_bytes")]
    counts += [
        F.count(F.when(log_live & F.col("log_inside") & (F.col("log_written") < as_of_ms), 1)).alias("old_live"),
        F.count(F.when(F.col("log_old_live") & ~F.col("present"), 1)).alias("missing_files"),
        F.sum("problems").alias("problems"),
        F.min("released").alias("released"),
        F.count(F.when(~F.col("path").startswith(F.concat("table_root", F.lit("/"))), 1)).alias("outside"),
    ]
    # Grouped by the table that needs a referenced row too (null for every other row): the few
    # groups per table add up to its counts, and say which tables need its files, in the same job.
    referencing = F.when(F.col("category") == Category.REFERENCED.value, F.col("referenced_by"))
    with small_shuffles(classified.sparkSession, len(policies)):
        groups = classified.groupBy("table_root", referencing.alias("referencing")).agg(*counts).collect()
    totals: dict[str, dict[str, int]] = {}
    referenced_by: dict[str, dict[str, int]] = {}
    earliest: dict[str, int] = {}
    for row in groups:
        added = totals.setdefault(row["table_root"], {})
        for name, value in row.asDict().items():
            if name == "released":  # the least of the table's groups
                if value is not None:
                    earliest[row["table_root"]] = min(value, earliest.get(row["table_root"], value))
            elif name not in ("table_root", "referencing"):
                added[name] = added.get(name, 0) + (value or 0)
        if row["referencing"] is not None:
            name = roots[row["referencing"]] if row["referencing"] >= 0 else "a Delta table the run does not know"
            referenced_by.setdefault(row["table_root"], {})[name] = row["referenced_files"]
    plans = {p.table_root: TablePlan() for p in policies}
    unresolved = []
    for root, added in totals.items():
        if added["problems"]:
            unresolved.append(TableRoot(root))
            del plans[TableRoot(root)]
            continue
        plan = plans[TableRoot(root)]
        plan.old_live_files, plan.outside_files = added["old_live"], added["outside"]
        plan.counts = TableCounts(**{name: added[name] for name in added if name.endswith(("_files", "_bytes"))})
        plan.referenced_by = referenced_by.get(root, {})
        plan.released_ms = earliest.get(root)
    return plans, unresolved


def _pins_missing(classified: DataFrame, pinned: DataFrame, as_of_ms: int) -> dict[int, tuple[int, str]]:
    """Per pin, its files below its table written before the inventory was taken that the inventory does not
    list as current (how many, and the first by path): the pinned version cannot be read whole."""
    listed = classified.where(F.col("present")).select("table_root", "path")
    inside = F.col("path").startswith(F.concat(F.col("table_root"), F.lit("/")))
    old = pinned.where(F.col("path").isNotNull() & inside & (F.col("modification_time") < as_of_ms))
    gone = old.join(listed, ["table_root", "path"], "left_anti")
    return {row["pin"]: (row["n"], row["first"])
            for row in gone.groupBy("pin").agg(F.count("path").alias("n"), F.min("path").alias("first")).collect()}


def _missing_sample(classified: DataFrame, plans: dict[TableRoot, TablePlan]) -> None:
    """The first live files written before the inventory was taken that it does not list."""
    missing = classified.where(F.col("log_old_live") & ~F.col("present"))
    for root, paths in first_paths(missing, MISSING_SAMPLE).items():
        if root in plans:
            plans[root].missing += paths


def _class_number(storage_class: Column, classes: Sequence[str]) -> Column:
    """A storage class as its place among the priced ``classes``, from 1; 0 for another."""
    named = F.upper(storage_class)
    return F.coalesce(*[F.when(named == name, place) for place, name in enumerate(classes, start=1)], F.lit(0))


def _class_name(number: Column, classes: Sequence[str]) -> Column:
    """The priced class a ``_class_number`` names (null for 0)."""
    return F.element_at(F.array(*[F.lit(name) for name in classes]), F.when(number > 0, number))
