"""Deleting a plan's targets where their store is reachable: S3 and local files on executors, the rest on the driver.

The targets are cut into as many tasks as the cluster runs at once, each table's in one task (which
paces its S3 prefix, vacuum_jobs.s3_deletes); where an account's limits demand a cap on the whole
run (``keys_per_second``), they are cut evenly instead and each task keeps to its share, so the sum
holds however many executors there are, with no coordination between them. Stores Python executors
cannot reach (HDFS, ABFS, GCS...) are deleted from the driver through Hadoop (vacuum_jobs.local_deletes).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from lakeio.cli import LOG_FORMAT
from lakeio.spark.shapes import CANDIDATES, OUTCOMES
from lakeio.store.filesystem import Storage
from vacuum_jobs.deletes import DeleteSettings, Outcome, RowDict, Target
from vacuum_jobs.local_deletes import delete_local, delete_with_hadoop
from vacuum_jobs.s3_deletes import S3BatchDeleter

log = logging.getLogger(__name__)
EXECUTOR_SCHEMES = ("s3", "file")  # stores Python executors reach themselves
ARROW_ROWS = 10_000  # outcomes a task hands back to Spark at a time


def delete_planned(spark: SparkSession, targets: DataFrame, settings: DeleteSettings, run_id: str) -> DataFrame:
    """Delete every target (``table_root, path, length, modificationTime``, and ``version_ids`` or
    ``version_id`` where the targets carry them); one outcome row each. ``run_id`` names the run's
    journal: call :meth:`DeleteJournal.remove` once the outcomes are kept."""
    CANDIDATES.check(targets)
    columns = [*CANDIDATES.columns, "version_ids", "version_id"]
    if "version_ids" not in targets.columns:
        targets = targets.withColumn("version_ids", F.array().cast("array<string>"))
    if "version_id" not in targets.columns:
        targets = targets.withColumn("version_id", F.lit(None).cast("string"))
    return where_reachable(
        spark, targets.select(*columns), OUTCOMES.schema,
        lambda rows, slices: (o.row() for o in _delete_rows(rows, settings, cap_share(settings, slices), run_id)),
        lambda rows: (o.row() for o in delete_with_hadoop(Storage(spark), map(_target, rows), run_id, settings.trash,
                                                              stop_at_ms=settings.stop_at_ms)),
        spread=settings.keys_per_second is not None)


def where_reachable(spark: SparkSession, rows: DataFrame, schema: StructType,
                    per_task: Callable[[Iterable[RowDict], int], Iterator[tuple[object, ...]]],
                    on_driver: Callable[[Iterator[RowDict]], Iterator[tuple[object, ...]]], *, spread: bool = False
                    ) -> DataFrame:
    """``rows`` (with a ``table_root`` and a ``path``) acted on where their store is reachable, one ``schema``
    row each: S3 and local files in one wave of executor tasks (``per_task(rows, slices)``: every task
    runs at once, none waits for a slot while holding a share of a pace), other stores from the driver
    through Hadoop (``on_driver``), which Python executors cannot reach. Each table's rows go to one
    task, which paces its prefix; ``spread``: an even share of the rows to every task instead (a
    run-wide cap, of which each task keeps to its share). Rows go to the tasks and back in Arrow
    batches, as dicts to ``per_task``: unpickled and checked against ``schema`` one by one, rows cost
    a share of a run's deletes worth saving (benchmarks.delete_pacing)."""
    scheme = F.regexp_extract("path", r"^([a-z0-9+.\-]*):", 1)
    slices = max(1, spark.sparkContext.defaultParallelism)
    reachable = rows.where(scheme.isin(*EXECUTOR_SCHEMES))
    shared = reachable.repartition(slices) if spread else reachable.repartition(slices, "table_root")
    arrow_schema = to_arrow_schema(schema)

    def task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows_in = (row for batch in batches for row in batch.to_pylist())
        done = per_task(rows_in, slices)
        while chunk := list(itertools.islice(done, ARROW_ROWS)):
            yield pa.RecordBatch.from_arrays([pa.array(column, f.type) for column, f in zip(zip(*chunk), arrow_schema)],
                                             schema=arrow_schema)

    result = shared.mapInArrow(task, schema)
    elsewhere = rows.where(~scheme.isin(*EXECUTOR_SCHEMES))
    if elsewhere.take(1):
        named = (row.asDict() for row in elsewhere.toLocalIterator())
        result = result.unionByName(spark.createDataFrame(list(on_driver(named)), schema))
    return result


def cap_share(settings: DeleteSettings, slices: int) -> float | None:
    """One task's share of the run's cap (``keys_per_second`` over the tasks that run at once); None: no cap."""
    return None if settings.keys_per_second is None else settings.keys_per_second / slices


def _target(row: RowDict) -> Target:
    return Target(row["table_root"], row["path"], row["length"], row["modificationTime"], tuple(row["version_ids"] or ()),
                  row["version_id"])


def _delete_rows(rows: Iterable[RowDict], settings: DeleteSettings, keys_per_second: float | None,
                 run_id: str) -> Iterator[Outcome]:
    """One executor task's share; its tally goes to the executor's log."""
    s3_targets: list[Target] = []
    local_targets: list[Target] = []
    for row in rows:
        target = _target(row)
        (s3_targets if target.path.startswith("s3:") else local_targets).append(target)
    tally: dict[str, int] = {}
    deleters = [delete_local(local_targets, run_id, settings.trash, stop_at_ms=settings.stop_at_ms)]
    if s3_targets:
        deleters.append(S3BatchDeleter(settings, keys_per_second=keys_per_second).delete(s3_targets))
    for deleter in deleters:
        for outcome in deleter:
            tally[outcome.action] = tally.get(outcome.action, 0) + 1
            yield outcome
    if tally:
        _task_log(", ".join(f"{n} {action}" for action, n in sorted(tally.items())))


def _task_log(message: str) -> None:
    """A line in the executor's stderr (its log in the cluster UI): Python workers have no logging set up."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    log.info("delete task in process %d: %s", os.getpid(), message)
