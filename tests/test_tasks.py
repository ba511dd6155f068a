"""Log reads and per-file aggregations get their task counts from rows, and AQE keeps them."""

from __future__ import annotations

from pyspark.sql import functions as F

from lakeio.tasks import KEYS_PER_AGGREGATION_TASK, by_key, packed


def test_an_aggregation_runs_in_one_task_per_core_or_per_slice_of_its_rows(spark):
    cores = spark.sparkContext.defaultParallelism
    rows = spark.range(0, 1000, numPartitions=7).select((F.col("id") % 100).alias("key"), "id")
    for declared, tasks in ((10, cores), (KEYS_PER_AGGREGATION_TASK * (cores + 3), cores + 3)):
        counted = by_key(rows, ["key"], declared).groupBy("key").count()
        assert counted.rdd.getNumPartitions() == tasks
        assert sorted(r["count"] for r in counted.collect()) == [10] * 100


def test_small_reads_are_merged_but_never_split(spark):
    cores = spark.sparkContext.defaultParallelism
    files = spark.range(0, 1000, numPartitions=40)
    assert packed(files, units=40, per_task=500).rdd.getNumPartitions() == cores
    assert packed(files, units=40, per_task=4).rdd.getNumPartitions() == 10
    assert packed(files, units=4000, per_task=4).rdd.getNumPartitions() == 40
    assert packed(files, units=40, per_task=4).count() == 1000
