"""How many tasks the log reads and the per-file aggregations run in: sized by rows, not bytes.

Spark sizes tasks by bytes. A read gets a task per 128 MB split, or per 4 MB of small files;
after a shuffle, AQE merges partitions up to 64 MB of shuffled data. Neither fits a log or an
inventory. A lake's small commits make dozens of near-empty read tasks, and before an
aggregation each writes a block per shuffle partition (200 on a cluster's defaults). An
aggregation keyed by file path holds several times its shuffled bytes in its hash table, so
AQE's 64 MB partitions outgrow a task's memory and spill. These jobs know their row counts
before they aggregate (the log summary counts every file's rows), so they size tasks by them.

The small aggregations (one row per log file or per table) have the opposite problem: at up
to 200 partitions Spark's shuffle writes one file per partition a map task's rows reach, and
a few hundred keys reach them all. They get a few partitions instead (see small_shuffles).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pyspark.sql import DataFrame, SparkSession

from lakeio.spark.session import session_setting

COMMITS_PER_READ_TASK = 500  # the summary knows only how many commits it reads
ACTIONS_PER_READ_TASK = 250_000
KEYS_PER_AGGREGATION_TASK = 125_000
KEYS_PER_SMALL_SHUFFLE = 10_000
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def packed(frame: DataFrame, units: int, per_task: int) -> DataFrame:
    """``frame`` read in one task per core, or per ``per_task`` of its ``units`` where there are more:
    Spark's one task per few small files costs more than the reading (benchmarks/RESULTS.md, "Figures
    behind the code's rules"). Coalescing only merges tasks, and a checkpoint big enough for Spark to
    split holds at least a few hundred thousand actions per 128 MB split, so it keeps about as many tasks."""
    return frame.coalesce(_tasks(frame, units, per_task))


def by_key(frame: DataFrame, keys: Sequence[str], rows: int) -> DataFrame:
    """``frame`` shuffled by ``keys`` into one partition per core, or per 125,000 of its ``rows``
    where there are more, for an aggregation on ``keys`` to follow.

    An explicit partition count is one AQE keeps, and the aggregation needs no shuffle of its own,
    so it runs whole after this one (rows keyed by path rarely meet before it anyway); AQE's few
    tasks by bytes would spill (benchmarks/RESULTS.md, "Figures behind the code's rules")."""
    return frame.repartition(_tasks(frame, rows, KEYS_PER_AGGREGATION_TASK), *keys)


@contextmanager
def small_shuffles(spark: SparkSession, keys: int) -> Iterator[None]:
    """Within the block, the shuffles Spark sizes itself get one partition per 10,000 of ``keys``
    (at most the session's setting): for the action of an aggregation with that many keys whose
    other shuffles are sized by rows (by_key).

    Up to 200 partitions (spark.shuffle.sort.bypassMergeThreshold) a map task writes a file for
    each partition its rows reach, and 500 tables' keys reach all 200 of a cluster's default
    (benchmarks/RESULTS.md, "Figures behind the code's rules")."""
    setting = spark.conf.get(SHUFFLE_PARTITIONS)
    wanted = -(-max(keys, 1) // KEYS_PER_SMALL_SHUFFLE)
    if setting and setting.isdigit():  # Databricks may say "auto"
        wanted = min(wanted, int(setting))
    with session_setting(spark, SHUFFLE_PARTITIONS, str(wanted)):
        yield


def _tasks(frame: DataFrame, units: int, per_task: int) -> int:
    return max(frame.sparkSession.sparkContext.defaultParallelism, -(-units // per_task))
