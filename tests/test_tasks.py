"""Log reads and per-file aggregations get their task counts from rows, and AQE keeps them; small
aggregations get a few shuffle partitions."""

from __future__ import annotations

import json

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql import functions as F

from lakeio.deltalog.replay import replay_logs
from lakeio.deltalog.segments import log_segment
from lakeio.spark.session import session_setting
from lakeio.spark.tasks import KEYS_PER_AGGREGATION_TASK, SHUFFLE_PARTITIONS, by_key, packed, small_shuffles
from lakeio.store.filesystem import Storage


def test_an_aggregation_runs_in_one_task_per_core_or_per_slice_of_its_rows(spark):
    cores = spark.sparkContext.defaultParallelism
    rows = spark.range(0, 1000, numPartitions=7).select((F.col("id") % 100).alias("key"), "id")
    for declared, tasks in ((10, cores), (KEYS_PER_AGGREGATION_TASK * (cores + 3), cores + 3)):
        counted = by_key(rows, ["key"], declared).groupBy("key").count()
        assert counted.rdd.getNumPartitions() == tasks
        assert sorted(r["count"] for r in counted.collect()) == [10] * 100


def test_small_aggregations_shuffle_into_a_few_partitions_and_leave_the_setting_as_it_was(spark):
    rows = spark.range(0, 2000).select((F.col("id") % 500).alias("table"), "id")
    with session_setting(spark, "spark.sql.adaptive.enabled", "false"), session_setting(spark, SHUFFLE_PARTITIONS, "200"):
        with small_shuffles(spark, keys=500):
            assert rows.groupBy("table").count().rdd.getNumPartitions() == 1
        with small_shuffles(spark, keys=25_000):
            assert rows.groupBy("table").count().rdd.getNumPartitions() == 3
        with session_setting(spark, SHUFFLE_PARTITIONS, "2"), small_shuffles(spark, keys=25_000):
            assert rows.groupBy("table").count().rdd.getNumPartitions() == 2
        assert spark.conf.get(SHUFFLE_PARTITIONS) == "200"
        assert rows.groupBy("table").count().rdd.getNumPartitions() == 200


def test_overlapping_settings_restore_what_was_there_before_the_first(spark):
    """Two threads sharing a session: the first block ends while the second still runs."""
    key = "spark.sql.files.maxRecordsPerFile"
    assert spark.conf.get(key, None) is None
    first, second = session_setting(spark, key, "10"), session_setting(spark, key, "20")
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert spark.conf.get(key) == "20"
    second.__exit__(None, None, None)
    assert spark.conf.get(key, None) is None  # not "10", the value the second block found
    with session_setting(spark, key, "30"):
        assert spark.conf.get(key) == "30"
    assert spark.conf.get(key, None) is None


def test_small_reads_are_merged_but_never_split(spark):
    cores = spark.sparkContext.defaultParallelism
    files = spark.range(0, 1000, numPartitions=40)
    assert packed(files, units=40, per_task=500).rdd.getNumPartitions() == cores
    assert packed(files, units=40, per_task=4).rdd.getNumPartitions() == 10
    assert packed(files, units=4000, per_task=4).rdd.getNumPartitions() == 40
    assert packed(files, units=40, per_task=4).count() == 1000


def test_the_commits_a_replay_keeps_are_cached_in_packed_tasks(spark, tmp_path):
    """Spark reads 100 small commits in more tasks than there are cores (it counts 4 MB to open
    each); the cache the plan reads them from is built in one task per core."""
    write_deltalake(str(tmp_path / "t"), pa.table({"id": [0]}))  # commit 0: protocol, metaData, one file
    log = tmp_path / "t" / "_delta_log"
    for version in range(1, 100):
        add = {"add": {"path": f"part-{version}.parquet", "partitionValues": {}, "size": 1, "modificationTime": 1,
                       "dataChange": True}}
        (log / f"{version:020d}.json").write_text(json.dumps(add) + "\n")
    commits = sorted(str(f) for f in log.iterdir())
    cores = spark.sparkContext.defaultParallelism
    assert spark.read.json(commits).rdd.getNumPartitions() > cores
    replay = replay_logs(spark, [log_segment(Storage(spark), str(tmp_path / "t"))], keep_commits=True)
    try:
        assert replay.kept is not None and replay.kept.rdd.getNumPartitions() == cores
        assert replay.files.count() == 100
    finally:
        replay.release()
