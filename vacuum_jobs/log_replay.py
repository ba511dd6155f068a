"""Replaying the ``_delta_log`` of many tables at once on Spark.

All tables' JSON commits are read in one job and all their checkpoint Parquet in
another (v2 sidecars in a third), then reconciled per PROTOCOL.md "Action
Reconciliation": for each (table, path, deletion vector id) the newest action wins.
If a combined read fails, each table is read alone so that one broken log only
fails its own table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from lakeio import uris
from lakeio.text import first_line
from vacuum_jobs.log_segment import LogSegment

_DV = StructType([
    StructField("storageType", StringType()),
    StructField("pathOrInlineDv", StringType()),
    StructField("offset", IntegerType()),
    StructField("sizeInBytes", IntegerType()),
    StructField("cardinality", LongType()),
])
ACTIONS_SCHEMA = StructType([
    StructField("add", StructType([
        StructField("path", StringType()),
        StructField("size", LongType()),
        StructField("modificationTime", LongType()),
        StructField("deletionVector", _DV),
    ])),
    StructField("remove", StructType([
        StructField("path", StringType()),
        StructField("size", LongType()),
        StructField("deletionTimestamp", LongType()),
        StructField("deletionVector", _DV),
    ])),
    StructField("metaData", StructType([
        StructField("schemaString", StringType()),
        StructField("partitionColumns", ArrayType(StringType())),
        StructField("configuration", MapType(StringType(), StringType())),
    ])),
    StructField("protocol", StructType([
        StructField("minReaderVersion", IntegerType()),
        StructField("minWriterVersion", IntegerType()),
        StructField("readerFeatures", ArrayType(StringType())),
        StructField("writerFeatures", ArrayType(StringType())),
    ])),
    StructField("sidecar", StructType([StructField("path", StringType())])),
])
_JSON_SCHEMA = StructType(ACTIONS_SCHEMA.fields + [StructField("_corrupt_record", StringType())])


@dataclass(frozen=True)
class TableState:
    """What one table's snapshot says about itself (the file lists stay in Spark)."""

    table_root: str
    version: int
    min_reader_version: int | None
    min_writer_version: int | None
    reader_features: tuple[str, ...]
    writer_features: tuple[str, ...]
    partition_columns: tuple[str, ...]
    configuration: dict[str, str]
    schema_string: str | None


@dataclass
class Replay:
    states: dict[str, TableState]  # by canonical table root
    failures: dict[str, str]  # canonical table root -> why its log could not be read
    files: DataFrame  # reconciled file actions of the readable tables (see _file_actions)
    cached: tuple[DataFrame, ...] = ()

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()


def replay_logs(spark: SparkSession, segments: list[LogSegment]) -> Replay:
    """Reconcile the logs of ``segments``; tables whose files cannot be read land in ``failures``."""
    failures: dict[str, str] = {}
    cached: list[DataFrame] = []

    def read(some: list[LogSegment]) -> DataFrame:
        """Read, cache and materialize; a read that fails leaves nothing cached behind."""
        frame = None
        try:
            frame = _read_actions(spark, some).persist(StorageLevel.MEMORY_AND_DISK)
            corrupt = _corrupt_tables(frame)  # materializes the cache: read errors surface here
        except Exception:
            if frame is not None:
                frame.unpersist()
            raise
        cached.append(frame)
        for root in corrupt:
            failures[root] = "malformed JSON line"
        return frame

    try:
        actions = read(segments)
    except Exception:
        readable = []
        for segment in segments:
            try:
                readable.append(read([segment]))
            except Exception as exc:
                failures[uris.canonical(segment.table_root)] = f"cannot read a log file: {first_line(exc)}"
        if not readable:
            return Replay({}, failures, spark.createDataFrame([], _FILES_SCHEMA))
        actions = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), readable)
    if failures:
        actions = actions.where(~F.col("table_root").isin(list(failures)))
    segments = [s for s in segments if uris.canonical(s.table_root) not in failures]
    states = _table_states(actions, segments)
    files = _file_actions(actions).persist(StorageLevel.MEMORY_AND_DISK)
    return Replay(states, failures, files, (*cached, files))


def _read_actions(spark: SparkSession, segments: list[LogSegment]) -> DataFrame:
    """Every action of every segment with (table_root, version) of the file it came from."""
    json_files = [(s, v, uri) for s in segments for v, uri in s.commits]
    json_files += [(s, s.checkpoint_version, uri) for s in segments for uri in s.checkpoint_json]
    parquet_files = [(s, s.checkpoint_version, uri) for s in segments for uri in s.checkpoint_parquet]
    frames = []
    if json_files:
        frames.append(_tagged(spark, json_files, spark.read.schema(_JSON_SCHEMA).option("mode", "PERMISSIVE")
                              .json([uri for _, _, uri in json_files])))
    if parquet_files:
        frames.append(_tagged(spark, parquet_files, spark.read.schema(ACTIONS_SCHEMA)
                              .parquet(*[uri for _, _, uri in parquet_files])))
    actions = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    sidecars = _sidecar_files(actions, segments)
    if sidecars:
        sidecar_actions = _tagged(spark, sidecars, spark.read.schema(ACTIONS_SCHEMA)
                                  .parquet(*[uri for _, _, uri in sidecars]))
        actions = actions.unionByName(sidecar_actions, allowMissingColumns=True)
    return actions


def _tagged(spark: SparkSession, files: list, frame: DataFrame) -> DataFrame:
    """Join each action row to the table and version of the log file it was read from."""
    catalog = spark.createDataFrame(
        [(uris.canonical(uri), uris.canonical(s.table_root), int(v)) for s, v, uri in files],
        "file string, table_root string, version long",
    )
    source = uris.canonical_col(uris.decode_log_path_col(F.input_file_name()))
    return frame.withColumn("file", source).join(F.broadcast(catalog), "file").drop("file")


def _sidecar_files(actions: DataFrame, segments: list[LogSegment]) -> list:
    """v2 checkpoints name their sidecars; those files hold the checkpoint's add and remove actions."""
    v2 = [s for s in segments if s.checkpoint_json or (s.checkpoint_parquet and len(s.checkpoint_parquet) == 1)]
    if not v2:
        return []
    by_root = {uris.canonical(s.table_root): s for s in v2}
    rows = (
        actions.where(F.col("sidecar.path").isNotNull() & F.col("table_root").isin(list(by_root)))
        .select("table_root", "version", "sidecar.path").distinct().collect()
    )
    found = []
    for row in rows:
        segment = by_root[row["table_root"]]
        relative = uris.decode_log_path(row["path"])
        uri = relative if uris.scheme_of(relative) else uris.join(segment.table_root, "_delta_log", "_sidecars", relative)
        found.append((segment, row["version"], uri))
    return found


def _corrupt_tables(actions: DataFrame) -> list[str]:
    if "_corrupt_record" not in actions.columns:
        return []
    return [r[0] for r in actions.where(F.col("_corrupt_record").isNotNull()).select("table_root").distinct().collect()]


def _table_states(actions: DataFrame, segments: list[LogSegment]) -> dict[str, TableState]:
    """Newest protocol and metaData per table (each is replaced whole by a newer one)."""
    newest = Window.partitionBy("table_root", "kind").orderBy(F.col("version").desc())
    picked = (
        actions.where(F.col("protocol").isNotNull() | F.col("metaData").isNotNull())
        .withColumn("kind", F.when(F.col("protocol").isNotNull(), "protocol").otherwise("metaData"))
        .withColumn("rank", F.row_number().over(newest))
        .where("rank = 1")
        .select("table_root", "kind", "protocol", "metaData")
        .collect()
    )
    by_root: dict[str, dict] = {}
    for row in picked:
        by_root.setdefault(row["table_root"], {})[row["kind"]] = row[row["kind"]]
    states = {}
    for segment in segments:
        root = uris.canonical(segment.table_root)
        found = by_root.get(root, {})
        protocol, metadata = found.get("protocol"), found.get("metaData")
        states[root] = TableState(
            table_root=root,
            version=segment.version,
            min_reader_version=protocol["minReaderVersion"] if protocol else None,
            min_writer_version=protocol["minWriterVersion"] if protocol else None,
            reader_features=tuple(protocol["readerFeatures"] or ()) if protocol else (),
            writer_features=tuple(protocol["writerFeatures"] or ()) if protocol else (),
            partition_columns=tuple(metadata["partitionColumns"] or ()) if metadata else (),
            configuration=dict(metadata["configuration"] or {}) if metadata else {},
            schema_string=metadata["schemaString"] if metadata else None,
        )
    return states


_FILES_SCHEMA = StructType([
    StructField("table_root", StringType()),
    StructField("kind", StringType()),
    StructField("path", StringType()),
    StructField("size", LongType()),
    StructField("modification_time", LongType()),
    StructField("deletion_timestamp", LongType()),
    StructField("dv_storage_type", StringType()),
    StructField("dv_path_or_inline", StringType()),
    StructField("dv_cardinality", LongType()),
])


def _file_actions(actions: DataFrame) -> DataFrame:
    """The winning add/remove per (table, path, deletion vector), with absolute decoded paths."""

    def side(kind: str) -> DataFrame:
        a = F.col(kind)
        return actions.where(a.isNotNull()).select(
            "table_root", "version", F.lit(kind).alias("kind"),
            a["path"].alias("raw_path"), a["size"].alias("size"),
            (a["modificationTime"] if kind == "add" else F.lit(None).cast("long")).alias("modification_time"),
            (a["deletionTimestamp"] if kind == "remove" else F.lit(None).cast("long")).alias("deletion_timestamp"),
            a["deletionVector"]["storageType"].alias("dv_storage_type"),
            a["deletionVector"]["pathOrInlineDv"].alias("dv_path_or_inline"),
            a["deletionVector"]["offset"].alias("dv_offset"),
            a["deletionVector"]["cardinality"].alias("dv_cardinality"),
        )

    both = side("add").unionByName(side("remove"))
    dv_id = F.concat_ws("|", "dv_storage_type", "dv_path_or_inline", F.col("dv_offset").cast("string"))
    newest = Window.partitionBy("table_root", "raw_path", "dv_id").orderBy(
        F.col("version").desc(), F.when(F.col("kind") == "add", 0).otherwise(1))
    winners = both.withColumn("dv_id", dv_id).withColumn("rank", F.row_number().over(newest)).where("rank = 1")
    return winners.select(
        "table_root", "kind", absolute_path(F.col("table_root"), F.col("raw_path")).alias("path"),
        "size", "modification_time", "deletion_timestamp", "dv_storage_type", "dv_path_or_inline", "dv_cardinality",
    )


def absolute_path_of(table_root: str, log_path: str) -> str:
    """Python twin of :func:`absolute_path` for one canonical table root."""
    decoded = uris.decode_log_path(log_path)
    return uris.canonical(decoded) if uris.scheme_of(log_path) else f"{table_root}/{decoded}"


def absolute_path(table_root, log_path):
    """A log path (URL-encoded, relative or absolute) as a canonical decoded URI."""
    decoded = uris.decode_log_path_col(log_path)
    is_absolute = log_path.rlike(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
    return F.when(is_absolute, uris.canonical_col(decoded)).otherwise(F.concat(table_root, F.lit("/"), decoded))
