"""How many tasks the log reads and the per-file aggregations run in: sized by rows, not bytes.

Spark sizes tasks by bytes. A read gets a task per 128 MB split, or per 4 MB of small files;
after a shuffle, AQE merges partitions up to 64 MB of shuffled data. Neither fits a log or an
inventory. A lake's small commits make dozens of near-empty read tasks, and before an
aggregation each writes a block per shuffle partition (200 on a cluster's defaults). An
aggregation keyed by file path holds several times its shuffled bytes in its hash table, so
AQE's 64 MB partitions outgrow a task's memory and spill. These jobs know their row counts
before they aggregate (the log summary counts every file's rows), so they size tasks by them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame

COMMITS_PER_READ_TASK = 500  # the summary knows only how many commits it reads
ACTIONS_PER_READ_TASK = 250_000
KEYS_PER_AGGREGATION_TASK = 125_000


def packed(frame: DataFrame, units: int, per_task: int) -> DataFrame:
    """``frame`` read in one task per core, or per ``per_task`` of its ``units`` where there are more.

    1M actions in 2,000 commits took 7.5 s to read and reconcile in Spark's 63 tasks, 4.2 s in 4
    (2 cores). Coalescing only merges tasks, and a checkpoint big enough for Spark to split holds
    at least a few hundred thousand actions per 128 MB split, so it keeps about as many tasks."""
    return frame.coalesce(_tasks(frame, units, per_task))


def by_key(frame: DataFrame, keys: Sequence[str], rows: int) -> DataFrame:
    """``frame`` shuffled by ``keys`` into one partition per core, or per 125,000 of its ``rows``
    where there are more, for an aggregation on ``keys`` to follow.

    An explicit partition count is one AQE keeps, and the aggregation needs no shuffle of its own,
    so it runs whole after this one (rows keyed by path rarely meet before it anyway). A dry run
    over 3M objects took 35-38 s with AQE's two spilling tasks per aggregation, 22-25 s in 22
    and 44 (2 cores, 1 GB)."""
    return frame.repartition(_tasks(frame, rows, KEYS_PER_AGGREGATION_TASK), *keys)


def _tasks(frame: DataFrame, units: int, per_task: int) -> int:
    return max(frame.sparkSession.sparkContext.defaultParallelism, -(-units // per_task))
