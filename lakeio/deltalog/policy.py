"""Which category an inventory row of a Delta table falls in, table by table.

Job 2 deletes the ``candidate`` rows; chargeback prices every category. Both derive a
table's policy from its own log (cutoff, partition folders, UniForm metadata) and classify
rows with the same expression, so a byte reported reclaimable is one a vacuum would delete.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.deltalog import gates
from lakeio.deltalog.keep import hidden, hidden_pattern, keep_set
from lakeio.deltalog.replay import TableState
from lakeio.spark.shapes import local_frame
from lakeio.store.uris import TableRoot
from lakeio.text import StrEnum


class Category(StrEnum):
    """What a vacuum does with an inventory row its table owns."""

    DIR = "dir"  # a folder marker
    KEPT = "kept"  # the log needs it: a live file or a tombstone within the retention
    PINNED = "pinned"  # a pinned version reads it (lakeio.pins): kept
    REFERENCED = "referenced"  # another table's log needs it (a shallow clone's source file): kept
    HIDDEN = "hidden"  # a hidden path (``_delta_log/``, ``_x``, ``.x``): never a vacuum's business
    TOO_RECENT = "too_recent"  # modified at or after the cutoff (maybe a commit in flight)
    CANDIDATE = "candidate"  # vacuum deletes it


@dataclass(frozen=True)
class TablePolicy:
    """What decides one table's categories: its root, cutoff and hidden-path rule."""

    table_root: TableRoot
    cutoff_ms: int
    partition_names: tuple[str, ...]  # logical and physical partition column names
    hidden_names: tuple[str, ...] = ()  # segment names hidden at any depth (UniForm metadata)

    @classmethod
    def for_state(cls, state: TableState, cutoff_ms: int) -> TablePolicy:
        """The policy a table's own log implies; ValueError when its metaData is not what the protocol
        allows, or when it uses a UniForm format we do not know."""
        malformed = gates.malformed_metadata(state)
        if malformed:
            raise ValueError(malformed)
        return cls(state.table_root, cutoff_ms, gates.partition_folder_names(state), gates.uniform_hidden_names(state))

    @property
    def hidden_pattern(self) -> str:
        return hidden_pattern(self.partition_names, self.hidden_names)


def hidden_patterns(policies: list[TablePolicy]) -> list[str]:
    """The distinct hidden-path patterns of ``policies`` (usually one): ``hidden_rule`` indexes it."""
    return sorted({p.hidden_pattern for p in policies})


def policy_frame(spark: SparkSession, policies: list[TablePolicy]) -> DataFrame:
    """``table_id`` (the index in ``policies``), ``table_root``, ``cutoff_ms`` and ``hidden_rule``
    (see :func:`hidden_patterns`) per table."""
    patterns = hidden_patterns(policies)
    return local_frame(
        spark, [(i, p.table_root, p.cutoff_ms, patterns.index(p.hidden_pattern)) for i, p in enumerate(policies)],
        "table_id int, table_root string, cutoff_ms long, hidden_rule int",
    )


def category(relative: Column, patterns: list[str]) -> Column:
    """What an owned inventory row is (``isDir``, ``live`` from the keep set, ``pinned_by``, ``referenced_by``,
    ``modificationTime`` and its table's ``cutoff_ms`` and ``hidden_rule``); ``relative`` is its
    path below the table root."""
    return (
        F.when(F.col("isDir"), Category.DIR.value)
        .when(F.col("live").isNotNull(), Category.KEPT.value)
        .when(F.col("pinned_by").isNotNull(), Category.PINNED.value)
        .when(F.col("referenced_by").isNotNull(), Category.REFERENCED.value)
        .when(hidden(relative, F.col("hidden_rule"), patterns), Category.HIDDEN.value)
        .when(F.col("modificationTime").isNull() | (F.col("modificationTime") >= F.col("cutoff_ms")),
              Category.TOO_RECENT.value)
        .otherwise(Category.CANDIDATE.value)
    )


def released(relative: Column, patterns: list[str]) -> Column:
    """The instant past which the cutoff makes an owned row a ``candidate`` that is not one now, its table's log and
    the lake's other tables staying as they are (null: the clock alone never does, or it is one now). A row only a
    tombstone keeps (``live`` false, ``kept_deleted`` the tombstone's deletion) is released once both its deletion
    and its modification are older than the cutoff; a row too recent once its modification is. A pinned or
    referenced row is released by its pin's end or by another table, never by this table's clock: null here, and
    the caller says so where a table has any. The same columns as :func:`category`."""
    mtime, deleted = F.col("modificationTime"), F.col("kept_deleted")
    never = F.lit(None).cast("long")
    return (F.when(F.col("isDir") | F.col("live") | hidden(relative, F.col("hidden_rule"), patterns), never)
            .when(~F.col("live"), F.when(mtime.isNotNull() & deleted.isNotNull(), F.greatest(deleted, mtime)))
            .when(F.col("pinned_by").isNotNull() | F.col("referenced_by").isNotNull(), never)
            .when(mtime >= F.col("cutoff_ms"), mtime))


def classify(owned: DataFrame, files: DataFrame, patterns: list[str], references: DataFrame | None = None,
             pinned: DataFrame | None = None) -> DataFrame:
    """``owned`` rows (canonical ``path``, ``table_root``, ``cutoff_ms``, ``hidden_rule``, ...) plus
    ``category``, ``live``, ``pinned_by`` and ``referenced_by``; ``files`` are reconciled log actions with
    ``cutoff_ms``, ``references`` what other tables need (deltalog.references), ``pinned`` what pinned
    versions read (shapes.PINNED_FILES)."""
    relative = F.expr("substring(path, length(table_root) + 2)")
    key = ["table_root", "path"]
    owned = owned.join(keep_set(files), key, "left")
    if references is None:
        owned = owned.withColumn("referenced_by", F.lit(None).cast("string"))
    else:
        owned = owned.join(references.groupBy(*key).agg(F.min("referenced_by").alias("referenced_by")), key, "left")
    if pinned is None:
        owned = owned.withColumn("pinned_by", F.lit(None).cast("int"))
    else:
        owned = owned.join(pinned.where(F.col("path").isNotNull()).groupBy(*key).agg(
            F.min("pin").alias("pinned_by")), key, "left")
    return owned.withColumn("category", category(relative, patterns))
