"""Which Delta tables the inventory shows, and which one owns a storage path: the longest
table root strictly above it.

Chargeback attributes bytes with it and vacuum uses it to keep a table's plan away from
tables nested inside it and from neighbours whose names extend its own (``t`` never
owns ``t_backup/...``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakeio.spark.shapes import local_frame
from lakeio.store import uris


def with_owner(rows: DataFrame, roots: Iterable[str]) -> DataFrame:
    """``rows`` (with a canonical ``path``) plus ``table_root``: its owner among ``roots``, or null.

    A root with ``n`` slashes can only own paths whose prefix up to their ``n+1``-th slash
    is that root, so each distinct root depth costs one broadcast lookup (usually one or
    two); the deepest match wins.
    """
    by_depth: dict[int, list[str]] = defaultdict(list)
    for root in set(roots):
        by_depth[root.count("/")].append(root)
    spark = rows.sparkSession
    found = []
    for depth in sorted(by_depth, reverse=True):
        column = f"_owner_at_depth_{depth}"
        lookup = local_frame(spark, [(r,) for r in by_depth[depth]], f"{column} string")
        prefix = F.substring_index(F.col("path"), "/", depth + 1)
        rows = rows.join(F.broadcast(lookup),
                         (prefix == F.col(column)) & (F.length("path") > F.length(column)), "left")
        found.append(column)
    owner = F.coalesce(*[F.col(c) for c in found]) if found else F.lit(None).cast("string")
    return rows.withColumn("table_root", owner).drop(*found)


def log_root(path: Column) -> Column:
    """The root of the table whose log holds the canonical ``path``: what precedes its first ``/_delta_log/``
    ('' where it has none)."""
    return F.regexp_extract(path, r"^(.*?)/_delta_log/", 1)


def delta_roots(inventory: DataFrame) -> list[uris.TableRoot]:
    """Canonical roots of every Delta table the inventory shows (folders holding ``_delta_log/``)."""
    roots = (
        inventory.where(F.col("path").contains("/_delta_log/"))
        .select(log_root(uris.canonical_col(F.col("path"))).alias("root"))
        .where(F.col("root") != "")
        .distinct()
        .collect()
    )
    return sorted(uris.TableRoot(r["root"]) for r in roots)
