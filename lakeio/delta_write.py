"""The one write path for the project's own Delta tables (inventory, audit).

With Delta's Spark jars on the classpath, Spark writes Delta itself. Without them
(offline machines, CI, plain ``pip install``) Spark writes the Parquet files into the
partition folders and ``deltalake`` (delta-rs) commits them: add actions carrying
``numRecords`` and partition values, plus remove actions for the files of every
replaced partition, in one atomic commit. Either way the result is a standard Delta
table that any engine reads.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence
from urllib.parse import quote, unquote

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from lakeio import uris
from lakeio.spark import delta_jars_present
from lakeio.storage import Storage

WriteMode = Literal["append", "replace_partitions"]

# Partition values we write are dates, bucket names and ids. Keeping them to characters
# no engine escapes means the folder name, the log path and the value are one string.
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9._\-]+$")


def partition_folder(columns: Sequence[str], values: Mapping[str, str]) -> str:
    """The folder Spark writes a partition to, e.g. ``inventory_date=2026-01-02/bucket=b``."""
    for column in columns:
        if not _SAFE_VALUE.match(str(values[column])):
            raise ValueError(f"partition value {values[column]!r} of {column!r} needs escaping; not supported")
    return "/".join(f"{c}={values[c]}" for c in columns)


@dataclass(frozen=True)
class WriteResult:
    table_uri: str
    files_added: int
    files_removed: int
    rows: int
    engine: str  # "delta-spark" or "deltalake"


def write_delta(
    df: DataFrame,
    table_uri: str,
    partition_by: Sequence[str],
    partitions: Sequence[Mapping[str, str]],
    mode: WriteMode,
    use_delta_jars: bool | None = None,
) -> WriteResult:
    """Write ``df`` (whose rows all fall in ``partitions``) to a partitioned Delta table.

    ``replace_partitions`` swaps each listed partition's content for ``df``'s rows;
    ``append`` only adds. Readers see the old state or the new one, never a mix.
    """
    table_uri = uris.to_uri(table_uri)
    if use_delta_jars is None:
        use_delta_jars = delta_jars_present()
    if use_delta_jars:
        return _write_with_delta_spark(df, table_uri, partition_by, mode)
    return _write_with_deltalake(df, table_uri, partition_by, partitions, mode)


def _write_with_delta_spark(df, table_uri, partition_by, mode) -> WriteResult:
    writer = df.write.format("delta").partitionBy(*partition_by)
    if mode == "replace_partitions":
        writer = writer.mode("overwrite").option("partitionOverwriteMode", "dynamic")
    else:
        writer = writer.mode("append")
    writer.save(table_uri)
    metrics = (
        df.sparkSession.sql(f"DESCRIBE HISTORY delta.`{table_uri}` LIMIT 1")
        .select("operationMetrics")
        .first()[0]
    )
    return WriteResult(
        table_uri=table_uri,
        files_added=int(metrics.get("numFiles", 0)),
        files_removed=int(metrics.get("numRemovedFiles", 0)),
        rows=int(metrics.get("numOutputRows", 0)),
        engine="delta-spark",
    )


def _write_with_deltalake(df, table_uri, partition_by, partitions, mode) -> WriteResult:
    from deltalake import DeltaTable, Schema
    from deltalake.exceptions import TableNotFoundError
    from deltalake.transaction import AddAction, create_table_with_add_actions

    storage = Storage(df.sparkSession)
    folders = [partition_folder(partition_by, p) for p in partitions]
    before = {f.uri for folder in folders for f in storage.list(uris.join(table_uri, folder))}
    df.write.mode("append").partitionBy(*partition_by).parquet(table_uri)
    new_files = [
        f
        for folder in folders
        for f in storage.list(uris.join(table_uri, folder))
        if f.uri not in before and not f.is_dir and _is_data_file(f.uri)
    ]
    rows_per_file = _row_counts(df, [f.uri for f in new_files])
    folder_of = dict(zip(folders, partitions))
    adds = []
    for f in new_files:
        relative = f.uri[len(table_uri) + 1:]
        values = folder_of[uris.parent(relative)]
        adds.append(
            AddAction(
                path=quote(relative, safe="/="),
                size=f.size,
                partition_values={c: str(values[c]) for c in partition_by},
                modification_time=f.modification_time,
                data_change=True,
                stats=json.dumps({"numRecords": rows_per_file.get(f.uri, 0)}),
            )
        )
    schema = Schema.from_arrow(to_arrow_schema(df.schema, timezone="UTC"))
    try:
        table = DeltaTable(deltalake_uri(table_uri))
    except TableNotFoundError:
        create_table_with_add_actions(
            deltalake_uri(table_uri), schema, adds, mode="error", partition_by=list(partition_by)
        )
        return WriteResult(table_uri, len(adds), 0, sum(rows_per_file.values()), "deltalake")
    removes = _removes_for(table, partition_by, partitions) if mode == "replace_partitions" else []
    table.create_write_transaction(adds + removes, mode="append", schema=schema, partition_by=list(partition_by))
    return WriteResult(table_uri, len(adds), len(removes), sum(rows_per_file.values()), "deltalake")


def _removes_for(table, partition_by, partitions) -> list:
    """Remove actions for every live file of the partitions being replaced."""
    import pyarrow as pa
    from deltalake.transaction import RemoveAction

    wanted = {tuple(str(p[c]) for c in partition_by) for p in partitions}
    live = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    now_ms = int(time.time() * 1000)
    removes = []
    for action in live:
        values = {c: _partition_string(action[f"partition.{c}"]) for c in partition_by}
        if tuple(values[c] for c in partition_by) in wanted:
            removes.append(
                RemoveAction(path=action["path"], data_change=True, deletion_timestamp=now_ms,
                             size=action["size_bytes"], partition_values=values)
            )
    return removes


def _partition_string(value) -> str | None:
    """A partition value as the Delta log spells it."""
    if value is None:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _is_data_file(uri: str) -> bool:
    base = uris.name(uri)
    return not base.startswith((".", "_"))


def _row_counts(df: DataFrame, file_uris: list[str]) -> dict[str, int]:
    """Rows per written file, read from the Parquet footers by Spark tasks."""
    if not file_uris:
        return {}
    counts = (
        df.sparkSession.read.parquet(*file_uris)
        .groupBy(F.input_file_name().alias("file"))
        .count()
        .collect()
    )
    return {uris.to_uri(unquote(r["file"])): int(r["count"]) for r in counts}


def deltalake_uri(table_uri: str) -> str:
    """delta-rs wants a plain path for local tables and s3:// for S3A ones."""
    scheme = uris.scheme_of(table_uri)
    if scheme == "file":
        return uris.local_path(table_uri)
    if scheme in ("s3a", "s3n"):
        return "s3" + table_uri[len(scheme):]
    return table_uri
