"""Replaying the ``_delta_log`` of many tables at once on Spark.

All tables' JSON commits are read in one job and all their checkpoint Parquet in
another (v2 sidecars in a third), then reconciled per PROTOCOL.md "Action
Reconciliation": for each (table, path, deletion vector id) the newest action wins.

Log reads are exact or the table is refused: paths are read literally (no globbing),
corrupt or missing files are never skipped whatever the cluster sets, every checkpoint
part and sidecar must yield actions, and every file an action names must resolve (see
log_paths). If a combined read fails, each table is read alone so that one broken log
only fails its own table.
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
from vacuum_jobs.keep import dv_relative_path_col
from vacuum_jobs.log_paths import with_resolved
from vacuum_jobs.log_segment import LogSegment

KNOWN_DV_STORAGE_TYPES = ("u", "p", "i")  # PROTOCOL.md "Deletion Vector Descriptor Schema"

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


# Delta never lets a cluster's spark.sql.files.ignoreCorruptFiles / ignoreMissingFiles skip a
# log file (DeltaLog.indexToRelation): a skipped checkpoint part would turn live files into orphans.
_EXACT_READ = {"ignoreCorruptFiles": "false", "ignoreMissingFiles": "false"}


def replay_logs(spark: SparkSession, segments: list[LogSegment]) -> Replay:
    """Reconcile the logs of ``segments``; tables whose files cannot be read, or whose actions
    name files we cannot resolve, land in ``failures``."""
    failures: dict[str, str] = {}
    cached: list[DataFrame] = []

    def read(some: list[LogSegment]) -> DataFrame:
        """Read, cache and materialize; a read that fails leaves nothing cached behind."""
        frame = None
        try:
            frame, catalog = _read_actions(spark, some)
            frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
            problems = _read_problems(frame, catalog)  # materializes the cache: read errors surface here
        except Exception:
            if frame is not None:
                frame.unpersist()
            raise
        cached.append(frame)
        failures.update(problems)
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
    files = _file_actions(actions).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(files)
    failures.update(_log_problems(files))
    segments = [s for s in segments if uris.canonical(s.table_root) not in failures]
    states = _table_states(actions, segments)
    trusted = files.where(~F.col("table_root").isin(list(failures))) if failures else files
    return Replay(states, failures, trusted.drop("problem"), tuple(cached))


@dataclass(frozen=True)
class _LogFile:
    """One file of a segment, numbered so that every action row can say where it came from."""

    file_id: int
    uri: str
    segment: LogSegment
    version: int
    needs_rows: bool  # checkpoint parts and sidecars always hold actions: none read means it was skipped


def _read_actions(spark: SparkSession, segments: list[LogSegment]) -> tuple[DataFrame, list[_LogFile]]:
    """Every action of every segment with (table_root, version, file_id) of the file it came from."""
    json_files = [(s, v, uri, False) for s in segments for v, uri in s.commits]
    json_files += [(s, s.checkpoint_version, uri, True) for s in segments for uri in s.checkpoint_json]
    parquet_files = [(s, s.checkpoint_version, uri, True) for s in segments for uri in s.checkpoint_parquet]
    catalog: list[_LogFile] = []
    frames = []
    if json_files:
        frames.append(_tagged(spark, catalog, json_files, _reader(spark, _JSON_SCHEMA).option("mode", "PERMISSIVE")
                              .json([uris.literal(uri) for _, _, uri, _ in json_files])))
    if parquet_files:
        frames.append(_tagged(spark, catalog, parquet_files, _reader(spark, ACTIONS_SCHEMA)
                              .parquet(*[uris.literal(uri) for _, _, uri, _ in parquet_files])))
    actions = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    sidecars = _sidecar_files(actions, segments)
    if sidecars:
        sidecar_actions = _tagged(spark, catalog, sidecars, _reader(spark, ACTIONS_SCHEMA)
                                  .parquet(*[uris.literal(uri) for _, _, uri, _ in sidecars]))
        actions = actions.unionByName(sidecar_actions, allowMissingColumns=True)
    return actions, catalog


def _reader(spark: SparkSession, schema: StructType):
    return spark.read.schema(schema).options(**_EXACT_READ)


def _tagged(spark: SparkSession, catalog: list[_LogFile], files: list, frame: DataFrame) -> DataFrame:
    """Join each action row to the table, version and file id of the log file it was read from."""
    added = [_LogFile(len(catalog) + i, uri, s, int(v), needs_rows) for i, (s, v, uri, needs_rows) in enumerate(files)]
    catalog.extend(added)
    lookup = spark.createDataFrame(
        [(uris.canonical(f.uri), uris.canonical(f.segment.table_root), f.version, f.file_id) for f in added],
        "file string, table_root string, version long, file_id int",
    )
    source = uris.canonical_col(uris.decode_log_path_col(F.col("_metadata.file_path")))
    return frame.withColumn("file", source).join(F.broadcast(lookup), "file").drop("file")


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
        found.append((segment, row["version"], uri, True))
    return found


def _read_problems(actions: DataFrame, catalog: list[_LogFile]) -> dict[str, str]:
    """Malformed JSON lines, and checkpoint parts or sidecars that yielded no action (skipped,
    whatever the reason), by table. One pass over the actions, which materializes their cache."""
    corrupt = F.col("_corrupt_record").isNotNull() if "_corrupt_record" in actions.columns else F.lit(False)
    seen = {row["file_id"]: row for row in actions.groupBy("file_id").agg(
        F.count(F.lit(1)).alias("rows"), F.count(F.when(corrupt, 1)).alias("corrupt")).collect()}
    problems: dict[str, str] = {}
    for log_file in catalog:
        root = uris.canonical(log_file.segment.table_root)
        row = seen.get(log_file.file_id)
        if row is not None and row["corrupt"]:
            problems.setdefault(root, f"malformed JSON line in {log_file.uri}")
        elif row is None and log_file.needs_rows:
            problems.setdefault(root, f"{log_file.uri}: no actions read from this checkpoint file")
    return problems


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
    StructField("dv_path", StringType()),
    StructField("dv_cardinality", LongType()),
])


def _file_actions(actions: DataFrame) -> DataFrame:
    """The winning add/remove per (table, path, deletion vector), with canonical file URIs
    (``path``, and ``dv_path`` for a deletion vector stored in a file) and ``problem``: why
    a file it names cannot be resolved, or null."""

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
    dv_type, dv_text = F.col("dv_storage_type"), F.col("dv_path_or_inline")
    files = with_resolved(winners, "table_root", "raw_path", "path")
    files = with_resolved(files.withColumn("dv_absolute", F.when(dv_type == "p", dv_text)),
                          "table_root", "dv_absolute", "dv_absolute_path")
    files = files.withColumn("dv_path", F.when(dv_type == "u", F.concat(
        F.col("table_root"), F.lit("/"), dv_relative_path_col(dv_text))).when(dv_type == "p", F.col("dv_absolute_path")))
    files = files.withColumn("problem", F.coalesce(
        F.col("path_problem"),
        F.col("dv_absolute_path_problem"),
        F.when((dv_type == "u") & F.col("dv_path").isNull(),
               F.concat(F.lit("deletion vector id '"), dv_text, F.lit("' is not valid z85"))),
        F.when(~dv_type.isin(*KNOWN_DV_STORAGE_TYPES),
               F.concat(F.lit("unknown deletion vector storage type '"), dv_type, F.lit("'"))),
    ))
    return files.select(
        "table_root", "kind", "path", "size", "modification_time", "deletion_timestamp",
        "dv_storage_type", "dv_path", "dv_cardinality",
        F.when(F.col("problem").isNotNull(), F.concat(
            F.lit("version "), F.col("version").cast("string"), F.lit(": "), F.col("problem"))).alias("problem"),
    )


def _log_problems(files: DataFrame) -> dict[str, str]:
    """``{table_root: why}`` for tables whose actions name a file we cannot resolve: one example each."""
    return {
        row["table_root"]: f"{row['n']} action(s) name a file that cannot be resolved, e.g. {row['problem']}"
        for row in files.where(F.col("problem").isNotNull()).groupBy("table_root").agg(
            F.count(F.lit(1)).alias("n"), F.min("problem").alias("problem")).collect()
    }
