"""Reading the project's own Delta tables (inventory, audit) into Spark.

``deltalake`` names the files of one snapshot and Spark reads those Parquet files, putting the
partition values (which Hive-style writers keep out of the files) back as columns: with Delta's
jars on the classpath too, since their reader costs a fresh driver some ten seconds before its
first row (measured in benchmarks/RESULTS.md). Only a table whose protocol asks its readers for
more than its files (deletion vectors, column mapping: what another engine's command on our
tables may have turned on) is read by Delta's jars, and refused without them.

Either way a frame reads one version of the table, however often it runs: Delta's own reader
reads the newest version each time a frame runs unless it is told one (its ``TahoeLogFileIndex``),
and a run reads its inventory several times (to plan, to note what it will delete, to delete).
A write landing in between (the day's ingestion, a compaction) would have shown it another table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import date
from functools import reduce
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakeio.errors import HousekeepingError
from lakeio.spark.session import delta_jars_present
from lakeio.store import uris
from lakeio.tables.write import open_table

if TYPE_CHECKING:
    from deltalake import DeltaTable


class TableNotFound(HousekeepingError):
    """There is no Delta table at the URI."""


class NeedsDeltaJars(HousekeepingError):
    """The table's protocol asks its readers for more than its Parquet files, and Delta's jars are not loaded."""


# Reader features that change nothing in how a table's files read (the others, deletion vectors and
# column mapping among them, make a plain Parquet read of the files wrong).
PLAIN_FILE_FEATURES = frozenset({"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"})


def partition_values(table_uri: str, column: str, version: int | None = None) -> set[Any]:
    """The distinct values of one partition column, from the log alone (as of ``version``; default: the newest)."""
    return {values[0] for values in partitions(table_uri, [column], version)}


def partition_columns(table_uri: str) -> list[str] | None:
    """The table's partition columns; None when there is no table."""
    try:
        return list(_open(table_uri).metadata().partition_columns)
    except TableNotFound:
        return None


def partitions(table_uri: str, columns: list[str], version: int | None = None) -> set[tuple[Any, ...]]:
    """The distinct value tuples of some partition columns, from the log alone (as of ``version``;
    default: the newest)."""
    return _partitions(_open(table_uri, version), columns)


def newest_partitions(table_uri: str, columns: list[str]) -> tuple[int, set[tuple[Any, ...]]]:
    """The table's newest version and :func:`partitions` as of it, from one read of its log (to read the
    rows of that version next)."""
    table = _open(table_uri)
    return table.version(), _partitions(table, columns)


def _partitions(table: DeltaTable, columns: list[str]) -> set[tuple[Any, ...]]:
    actions = pa.table(table.get_add_actions(flatten=True))
    names = [f"partition.{c}" for c in columns]
    if not set(names) <= set(actions.column_names):
        return set()
    return set(zip(*(actions.column(n).to_pylist() for n in names)))


def read_delta(spark: SparkSession, table_uri: str, where: Mapping[str, object] | None = None,
               version: int | None = None) -> DataFrame:
    """The table's rows as of ``version`` (default: its newest as this is called; every run of the frame
    reads that version), restricted to partitions equal to ``where`` (a value, or a set, list or tuple of
    the values allowed). Only those partitions' files are read, and the plan holds only them: a filter
    after the read would leave every partition in the plan to analyse. Delta's jars read it only where its
    protocol needs them (:data:`PLAIN_FILE_FEATURES`)."""
    wanted = {column: _allowed(value) for column, value in (where or {}).items()}
    table_uri = uris.to_uri(table_uri)
    table = _open(table_uri, version)
    if missed := _features_files_miss(table):
        if not delta_jars_present():
            raise NeedsDeltaJars(f"{table_uri}: its readers must honour {', '.join(missed)}, "
                                 "which only Delta's jars do here: run with them (python -m infra.jvm_jars)")
        df = spark.read.format("delta").option("versionAsOf", table.version()).load(table_uri)
        for column, allowed in wanted.items():
            df = df.where(F.col(column).isin(list(allowed)))
        return df
    partition_columns = table.metadata().partition_columns
    schema = _spark_schema(table)
    groups: dict[tuple[object, ...], list[str]] = defaultdict(list)
    for action in pa.table(table.get_add_actions(flatten=True)).to_pylist():
        values = tuple(action.get(f"partition.{c}") for c in partition_columns)
        row = dict(zip(partition_columns, values))
        if all(any(_same(row.get(c), v) for v in allowed) for c, allowed in wanted.items()):
            groups[values].append(uris.join(table_uri, uris.decode_log_path(action["path"])))
    data_columns = [f for f in schema.fields if f.name not in partition_columns]
    file_schema = StructType(data_columns)
    frames = [
        spark.read.schema(file_schema).parquet(*[uris.literal(f) for f in files]).select(
            *[F.col(f.name) for f in data_columns],
            *[F.lit(v).cast(schema[c].dataType).alias(c) for c, v in zip(partition_columns, values)],
        ).select(*schema.fieldNames())
        for values, files in sorted(groups.items(), key=lambda kv: str(kv[0]))
    ]
    if not frames:
        return spark.createDataFrame([], schema)
    return reduce(DataFrame.unionByName, frames)


def _features_files_miss(table: DeltaTable) -> list[str]:
    """What the table's protocol asks of its readers that a plain read of its files would miss."""
    protocol = table.protocol()
    if protocol.min_reader_version == 2:
        return ["columnMapping"]
    return sorted(set(protocol.reader_features or ()) - PLAIN_FILE_FEATURES)


def _open(table_uri: str, version: int | None = None) -> DeltaTable:
    table = open_table(uris.to_uri(table_uri), version)
    if table is None:
        raise TableNotFound(f"{table_uri}: no Delta table there")
    return table


def _spark_schema(table: DeltaTable) -> StructType:
    """The table's schema as Spark types."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema(table.schema().to_arrow()))


def _allowed(value: object) -> tuple[object, ...]:
    return tuple(sorted(value, key=str)) if isinstance(value, (set, frozenset, list, tuple)) else (value,)


def _same(value: object, wanted: object) -> bool:
    if isinstance(value, date) and isinstance(wanted, str):
        return value.isoformat() == wanted
    return value == wanted
