"""The least Spark program that finds a benchmark lake's candidates: the floor the plan is measured
against, warm in the benchmark's session and cold in a fresh process of its own.

    python -m benchmarks.bare_spark --inventory DIR --cutoff-ms MS ROOT [ROOT ...]

prints the number of candidates; its log lines are the jobs' own (benchmarks.cold times it so).
"""

from __future__ import annotations

import argparse
import os
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.cli import setup_logging
from lakeio.spark.session import get_spark
from lakeio.tables.read import partition_values, read_delta


def bare_spark_candidates(spark: SparkSession, inventory: str, roots: list[str], cutoff_ms: int) -> int:
    """The candidates of a lake of ``benchmarks.vacuum_planning`` (local roots), counted.

    Every table here has at most one checkpoint, removes older than the cut-off, no
    deletion vectors, nothing hidden but ``_delta_log/``: rules the real plan checks and
    this one takes for granted."""
    day = max(partition_values(inventory, "inventory_date"))
    checkpoints, commits = [], []
    for root in roots:  # the newest checkpoint and the commits after it
        log = os.path.join(root, "_delta_log")
        names = os.listdir(log)
        newest = max((n for n in names if n.endswith(".checkpoint.parquet")), default="")
        checkpoints += [os.path.join(log, newest)] if newest else []
        commits += [os.path.join(log, n) for n in names if n.endswith(".json") and n[:20] > newest[:20]]
    table_of = F.regexp_extract(F.col("_metadata.file_path"), r"^file:/*(/.*)/_delta_log/[^/]*$", 1)
    version = F.regexp_extract(F.col("_metadata.file_path"), r"/(\d{20})\.", 1).cast("long")
    actions = "add struct<path string>, remove struct<path string, deletionTimestamp long>"
    reads = ([spark.read.schema(actions).parquet(*checkpoints)] if checkpoints else []) + [
        spark.read.schema(actions).json(commits)]
    actions_read = reduce(DataFrame.unionByName, [r.select(table_of.alias("root"), version.alias("v"), "add", "remove")
                                                  for r in reads])
    log_rows = actions_read.select("root", "v", F.coalesce("add.path", "remove.path").alias("rel"),
                     F.col("add.path").isNotNull().alias("is_add"), F.col("remove.deletionTimestamp").alias("deleted"))
    needed = log_rows.where(F.col("rel").isNotNull()).groupBy("root", "rel").agg(
        F.max_by(F.struct("is_add", "deleted"), "v").alias("last")
    ).where(F.col("last.is_add") | (F.col("last.deleted") >= cutoff_ms)).select(
        F.concat("root", F.lit("/"), "rel").alias("path"))
    rows = read_delta(spark, inventory, {"inventory_date": day}).select(  # one delivery: no duplicate rows
        F.regexp_replace("path", "^file:/*/", "/").alias("path"), "modificationTime")
    owned = rows.where(F.col("path").rlike(r"/warehouse/db\d/table_\d{3}/") & ~F.col("path").contains("/_delta_log/")
                       & (F.col("modificationTime") < cutoff_ms))
    return owned.join(needed, "path", "left_anti").count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", required=True, help="the lake's inventory table (a local folder)")
    parser.add_argument("--cutoff-ms", type=int, required=True, help="files removed before this are candidates")
    parser.add_argument("roots", nargs="+", help="the tables' local roots")
    args = parser.parse_args()
    setup_logging("INFO")
    print(bare_spark_candidates(get_spark("bare-spark-candidates"), args.inventory, args.roots, args.cutoff_ms))


if __name__ == "__main__":
    main()
