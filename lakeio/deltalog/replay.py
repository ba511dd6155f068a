"""Replaying the ``_delta_log`` of many tables at once on Spark.

One small Spark job reads every log file of every table (JSON commits and checkpoint
Parquet; v2 sidecars in a second) for what describes each table; the add and remove
actions stay lazy, to be reconciled per PROTOCOL.md "Action Reconciliation" inside the
caller's own pass: for each (table, path, deletion vector id) the newest action wins.
A caller that runs that pass once may ask for the JSON commits to be kept as the summary
parsed them (Spark's cache, memory then disk), so that each line is parsed once.

Log reads are exact or the table is refused: paths are read literally (no globbing),
corrupt or missing files are never skipped whatever the cluster sets, every checkpoint
part and sidecar must yield actions, and every file an action names must resolve (see
paths). If a combined read fails, each table is read alone so that one broken log
only fails its own table.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from urllib.parse import unquote

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, SparkSession
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

from lakeio.deltalog.keep import dv_relative_path_col
from lakeio.deltalog.paths import is_plain, with_resolved
from lakeio.deltalog.segments import LogSegment, log_segments
from lakeio.errors import HousekeepingError
from lakeio.spark.session import TASK_FAILURE_LOGGERS, is_missing_file, quiet_logs
from lakeio.spark.shapes import FILE_ACTIONS, local_frame, without_tables
from lakeio.spark.tasks import ACTIONS_PER_READ_TASK, COMMITS_PER_READ_TASK, by_key, packed, small_shuffles
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.store.uris import TableRoot
from lakeio.text import first_line

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


@dataclass(frozen=True)
class TableState:
    """What one table's snapshot says about itself (the file lists stay in Spark)."""

    table_root: TableRoot
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
    states: dict[TableRoot, TableState]
    failures: dict[TableRoot, str]  # why its log could not be read
    files: DataFrame  # shapes.FILE_ACTIONS of the readable tables; lazy
    versions: dict[TableRoot, int] = field(default_factory=dict)  # the newest version listed
    kept: DataFrame | None = None  # the parsed JSON commits ``files`` reads, when asked to keep them
    rows: int = 0  # log rows ``files`` was reconciled from: what sizes the tasks that use it
    # The part of ``files`` that needed the full path resolution, read from the few log files that
    # hold such actions: the only actions that can name a file outside the table. None when none do.
    rare_files: DataFrame | None = None

    def release(self) -> None:
        """Drop the kept commits and a persisted ``files``; ``files`` still answers, parsing them again."""
        if self.kept is not None:
            self.kept.unpersist()
            self.kept = None
        if self.files.is_cached:
            self.files.unpersist()


def read_logs(spark: SparkSession, storage: Storage, table_roots: Sequence[str], check_paths: bool = True,
              keep_commits: bool = False) -> Replay:
    """List each table's ``_delta_log/`` and replay its newest snapshot: how every job reads
    many logs. A table whose log cannot be listed or read lands in ``failures``."""
    segments, unlisted = log_segments(storage, table_roots)
    replay = replay_logs(spark, segments, check_paths, keep_commits)
    replay.failures.update({uris.table_root(root): why for root, why in unlisted.items()})
    return replay


def read_unsure_too(spark: SparkSession, storage: Storage, table_roots: Sequence[str],
                    persist_files: bool = False) -> Replay:
    """:func:`read_logs` as the vacuum reads the lake's other tables, for the reports: a table whose
    actions name a file we cannot resolve with certainty lands in ``failures`` (nothing of its own
    is classified), but its actions stay in ``files``, so that the files it names literally are
    still needed by it (deltalog.references), as the vacuum keeps them. One classification for
    the vacuum, the chargeback and the erasure evidence. With ``persist_files``, ``files`` is
    computed once and kept (memory, then disk) for a caller that reads it several times, until
    ``Replay.release``."""
    replay = read_logs(spark, storage, table_roots, check_paths=False)
    if persist_files:
        replay.files = replay.files.persist(StorageLevel.MEMORY_AND_DISK)
    replay.failures.update(unresolvable(replay.files))
    return replay


# Delta never lets a cluster's spark.sql.files.ignoreCorruptFiles / ignoreMissingFiles skip a
# log file (DeltaLog.indexToRelation): a skipped checkpoint part would turn live files into orphans.
_EXACT_READ = {"ignoreCorruptFiles": "false", "ignoreMissingFiles": "false"}


def replay_logs(spark: SparkSession, segments: list[LogSegment], check_paths: bool = True,
                keep_commits: bool = False) -> Replay:
    """Reconcile the logs of ``segments``; tables whose files cannot be read land in ``failures``.

    One small Spark job reads every log file for what describes the table (protocol,
    metaData, sidecars, malformed lines, rows per file); ``files`` reads them again, lazily,
    for the add and remove actions. With ``keep_commits`` the JSON commits stay as the
    summary parsed them, for ``files`` to read instead (JSON costs a full parse per read,
    a checkpoint's Parquet only its columns); call ``Replay.release`` when done with
    ``files``. With ``check_paths``, one more job moves the tables whose actions name
    files we cannot resolve into ``failures``; without it the caller folds the ``problem``
    column into its own pass.
    """
    failures: dict[TableRoot, str] = {}
    versions = {s.root: s.version for s in segments}
    kept: list[DataFrame] = []
    with quiet_logs(spark, *TASK_FAILURE_LOGGERS):  # a broken log file is this table's reason, in one line
        try:
            catalog = _summarized(spark, segments, kept if keep_commits else None)
        except Exception:
            for frame in kept:
                frame.unpersist()
            kept.clear()
            catalog = []
            for segment in segments:  # one broken log only fails its own table
                try:
                    catalog += _summarized(spark, [segment])
                except Exception as exc:
                    failures[segment.root] = f"cannot read a log file: {first_line(exc)}"
    failures.update(_read_problems(spark, catalog))
    catalog = [f for f in catalog if f.table_root not in failures]
    segments = [s for s in segments if s.root not in failures]
    commits = kept[0] if kept else None
    rare = _rare_actions(spark, catalog, commits)
    files = _file_actions(spark, catalog, commits, rare) if catalog else local_frame(spark, [], FILE_ACTIONS.schema)
    if check_paths:
        failures.update(unresolvable(files))
        segments = [s for s in segments if s.root not in failures]
        if failures:
            files = without_tables(files, list(failures))
            rare = without_tables(rare, list(failures)) if rare is not None else None
    return Replay(_table_states(catalog, segments), failures, files, versions, commits, sum(f.rows for f in catalog),
                  rare)


@dataclass
class _LogFile:
    """One file of a segment, with what the summary pass found in it."""

    uri: str
    table_root: TableRoot
    version: int
    needs_rows: bool  # checkpoint parts and sidecars: none read means skipped, unless a Parquet footer says none
    is_json: bool
    spelling: str | None = None  # Spark's own ``_metadata.file_path`` for it
    rows: int = 0
    corrupt: int = 0
    protocol: Row | None = None
    metadata: Row | None = None
    sidecars: tuple[str, ...] = ()  # as a v2 checkpoint names them
    rare: int = 0  # add and remove actions naming a file that needs the full path resolution
    dv_ids: int = 0  # actions with a deletion vector of storage type u (a file named by its id)

    @property
    def needs_resolution(self) -> bool:
        return self.rare > 0 or self.table_root.endswith("/")  # the filesystem root as a table


def _log_files(segments: list[LogSegment]) -> list[_LogFile]:
    found = []
    for s in segments:
        root = s.root
        found += [_LogFile(uri, root, v, False, True) for v, uri in s.commits]
        if s.checkpoint_version is not None:
            found += [_LogFile(uri, root, s.checkpoint_version, True, True) for uri in s.checkpoint_json]
            found += [_LogFile(uri, root, s.checkpoint_version, True, False) for uri in s.checkpoint_parquet]
    return found


def _summarized(spark: SparkSession, segments: list[LogSegment], kept: list[DataFrame] | None = None) -> list[_LogFile]:
    """Every log file of ``segments`` (v2 sidecars included) with what it says about its table,
    in one Spark job (two when there are sidecars). Read errors surface here. With ``kept``,
    the parsed JSON commits are cached and put there (sidecars are Parquet)."""
    catalog = _log_files(segments)
    if not catalog:
        return []
    catalog = _summarize(spark, catalog, kept)
    by_root = {s.root: s for s in segments}
    sidecars = []
    for log_file in catalog:
        for relative in dict.fromkeys(log_file.sidecars):
            segment = by_root[log_file.table_root]
            path = uris.decode_log_path(relative)
            uri = path if uris.scheme_of(path) else uris.join(segment.table_root, "_delta_log", "_sidecars", path)
            sidecars.append(_LogFile(uri, log_file.table_root, log_file.version, True, False))
    return catalog + (_summarize(spark, sidecars) if sidecars else [])


def _reads(spark: SparkSession, log_files: list[_LogFile], schema: StructType) -> tuple[DataFrame | None, DataFrame | None]:
    """The JSON and the Parquet files of ``log_files`` (None where there are none), read exactly,
    each row with its file's spelling."""
    json_files = [uris.literal(f.uri) for f in log_files if f.is_json]
    parquet_files = [uris.literal(f.uri) for f in log_files if not f.is_json]
    reader = spark.read.options(**_EXACT_READ)
    commits = checkpoints = None
    if json_files:
        commits = (reader.schema(StructType(schema.fields + [StructField("_corrupt_record", StringType())]))
                   .option("mode", "PERMISSIVE").json(json_files).withColumn("file", F.col("_metadata.file_path")))
    if parquet_files:
        checkpoints = reader.schema(schema).parquet(*parquet_files).select(
            "*", F.lit(None).cast("string").alias("_corrupt_record"), F.col("_metadata.file_path").alias("file"))
    return commits, checkpoints


def _summarize(spark: SparkSession, log_files: list[_LogFile], kept: list[DataFrame] | None = None) -> list[_LogFile]:
    """Fill in each file's rows, malformed lines, protocol, metaData and sidecars. The add and
    remove paths are counted too, so that every column the replay reads later is read (and
    type-checked) here, and so are the actions whose files need the full path resolution (only
    their files are read for it).

    One scan and one hashed aggregation: the lines that describe the table are grouping keys
    (null for every action, so each file's actions fall in one group), the counts fixed-width
    buffers; a file's counts add up over its groups. (Collecting the describing lines apart
    scanned every file twice; aggregating their wide values would sort every action.) With
    ``kept``, the JSON rows are cached as parsed, for the actions to be read from."""
    described = [
        F.col("protocol"),
        # A map cannot be a grouping key; its entries can (a null metaData stays null).
        F.col("metaData").withField("configuration", F.map_entries("metaData.configuration")).alias("metaData"),
        F.col("sidecar.path").alias("sidecar"),
    ]
    dv_storage_type = _either("deletionVector", "storageType")
    counts = [
        F.count(F.lit(1)).alias("rows"), F.count("_corrupt_record").alias("corrupt"),
        F.count("add.path").alias("adds"), F.count("remove.path").alias("removes"),
        F.count(F.when(_is_action() & ~_plain(_either("path"), dv_storage_type), 1)).alias("rare"),
        F.count(F.when(dv_storage_type == "u", 1)).alias("dv_ids"),
    ]
    commits, checkpoints = _reads(spark, log_files, ACTIONS_SCHEMA)
    if commits is not None:
        # Packed first, so that a kept cache is built in these few tasks, not in Spark's one per 31 commits.
        commits = packed(commits, sum(f.is_json for f in log_files), COMMITS_PER_READ_TASK)
        if kept is not None:
            commits = commits.persist(StorageLevel.MEMORY_AND_DISK)
            kept.append(commits)
    parts = [frame.groupBy("file", *described).agg(*counts) for frame in (commits, checkpoints) if frame is not None]
    by_uri = {uris.canonical(f.uri): f for f in log_files}
    with small_shuffles(spark, len(log_files)):
        summary = reduce(DataFrame.unionByName, parts).collect()
    for row in summary:
        log_file = by_uri[uris.canonical(uris.decode_log_path(row["file"]))]
        log_file.spelling = row["file"]
        log_file.rows += row["rows"]
        log_file.corrupt += row["corrupt"]
        log_file.rare += row["rare"]
        log_file.dv_ids += row["dv_ids"]
        log_file.protocol = log_file.protocol or row["protocol"]
        log_file.metadata = log_file.metadata or row["metaData"]
        if row["sidecar"] is not None:
            log_file.sidecars += (row["sidecar"],)
    return log_files


def _read_problems(spark: SparkSession, catalog: list[_LogFile]) -> dict[TableRoot, str]:
    """Malformed JSON lines, and checkpoint parts or sidecars that yielded no action, by table.

    Spark passes over an empty (zero-byte) file without a word, so a part that yielded nothing was
    skipped unless it is a Parquet file of some bytes: the exact read parsed its footer, which says
    it holds no rows. Delta writes such parts (a multi-part checkpoint with more parts than actions
    to spread)."""
    problems: dict[TableRoot, str] = {}
    storage = None
    for log_file in catalog:
        if log_file.corrupt:
            problems.setdefault(log_file.table_root, f"malformed JSON line in {log_file.uri}")
        elif log_file.spelling is None and log_file.needs_rows:
            if not log_file.is_json:
                storage = storage or Storage(spark)
                status = storage.status(log_file.uri)
                if status is not None and status.size > 0:
                    continue
            problems.setdefault(log_file.table_root, f"{log_file.uri}: no actions read from this checkpoint file")
    return problems


def _table_states(catalog: list[_LogFile], segments: list[LogSegment]) -> dict[TableRoot, TableState]:
    """Newest protocol and metaData per table (each is replaced whole by a newer one)."""
    newest: dict[tuple[TableRoot, str], tuple[int, Row]] = {}
    for f in catalog:
        for kind, action in (("protocol", f.protocol), ("metaData", f.metadata)):
            if action is not None and newest.get((f.table_root, kind), (-1,))[0] < f.version:
                newest[(f.table_root, kind)] = (f.version, action)
    states = {}
    for segment in segments:
        root = segment.root
        protocol = newest[(root, "protocol")][1] if (root, "protocol") in newest else None
        metadata = newest[(root, "metaData")][1] if (root, "metaData") in newest else None
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


_FILE_ACTIONS_SCHEMA = StructType([ACTIONS_SCHEMA["add"], ACTIONS_SCHEMA["remove"]])


def _actions(spark: SparkSession, catalog: list[_LogFile], commits: DataFrame | None = None) -> DataFrame:
    """The add and remove actions of the summarized files, each with its table and version:
    a broadcast lookup on Spark's own spelling of the file it came from. ``commits``, the
    JSON commits as the summary kept them, stand in for reading ``catalog``'s JSON files (the
    lookup keeps only ``catalog``'s)."""
    lookup = local_frame(
        spark, [(f.spelling, f.table_root, f.version) for f in catalog if f.spelling is not None],
        "file string, table_root string, version long")
    if commits is None:
        commits, checkpoints = _reads(spark, catalog, _FILE_ACTIONS_SCHEMA)
    else:
        checkpoints = _reads(spark, [f for f in catalog if not f.is_json], _FILE_ACTIONS_SCHEMA)[1]
    frames = [frame.where(_is_action()).select("file", "add", "remove")
              for frame in (commits, checkpoints) if frame is not None]
    actions = packed(reduce(DataFrame.unionByName, frames), sum(f.rows for f in catalog), ACTIONS_PER_READ_TASK)
    return actions.join(F.broadcast(lookup), "file").drop("file")


def _is_add() -> Column:
    """One action per row; like Delta, an add wins over a remove on a malformed one."""
    return F.col("add").isNotNull()


def _is_action() -> Column:
    return _is_add() | F.col("remove").isNotNull()


def _either(*field: str) -> Column:
    """The add's field, else the remove's."""
    return F.when(_is_add(), F.col(".".join(("add", *field)))).otherwise(F.col(".".join(("remove", *field))))


def _plain(raw_path: Column, dv_storage_type: Column, table_root: Column | None = None) -> Column:
    """An action naming ``<table_root>/<raw_path>`` (see paths.is_plain) and, if it has a deletion
    vector, one stored inline or by id (below the root)."""
    return is_plain(raw_path, table_root) & (dv_storage_type.isNull() | dv_storage_type.isin("i", "u"))


def _dv_by_id() -> Column:
    """The file of a deletion vector stored by id (type ``u``): below the root, named by the id."""
    return F.when(F.col("dv_storage_type") == "u", F.concat(
        F.col("table_root"), F.lit("/"), dv_relative_path_col(F.col("dv_path_or_inline"))))


def _invalid_dv_id() -> Column:
    """Why a deletion vector stored by id has no file (``dv_path`` is null): its id does not decode."""
    return F.when((F.col("dv_storage_type") == "u") & F.col("dv_path").isNull(),
                  F.concat(F.lit("deletion vector id '"), F.col("dv_path_or_inline"), F.lit("' is not valid z85")))


def _in_version(problem: Column) -> Column:
    return F.when(problem.isNotNull(), F.concat(F.lit("version "), F.col("version").cast("string"), F.lit(": "), problem))


def _file_actions(spark: SparkSession, catalog: list[_LogFile], commits: DataFrame | None,
                  rare: DataFrame | None) -> DataFrame:
    """The winning add/remove per (table, path, deletion vector), with canonical file URIs
    (``path``, and ``dv_path`` for a deletion vector stored in a file) and ``problem``: why
    a file it names cannot be resolved, or null.

    Nearly every action names a plain relative path (and no deletion vector, or one inline or
    by id): those take a branch Spark compiles whole, decoding ids only when the summary saw
    one. The rest go through the full resolution, read only from the files the summary found
    them in (all actions of one key share its path, so each key is reconciled whole in its
    branch: ``rare``, see :func:`_rare_actions`); with none, that branch is not built at all."""
    columns = FILE_ACTIONS.columns
    plain = _plain(F.col("raw_path"), F.col("dv_storage_type"), F.col("table_root"))
    simple = _winners(_actions(spark, catalog, commits), sum(f.rows for f in catalog)).where(plain).select(
        "*", F.concat("table_root", F.lit("/"), "raw_path").alias("path"))
    if any(f.dv_ids for f in catalog):
        simple = simple.withColumn("dv_path", _dv_by_id()).withColumn("problem", _in_version(_invalid_dv_id()))
    else:
        simple = simple.select("*", F.lit(None).cast("string").alias("dv_path"), F.lit(None).cast("string").alias("problem"))
    simple = simple.select(columns)
    return simple if rare is None else simple.unionByName(rare)


def _rare_actions(spark: SparkSession, catalog: list[_LogFile], commits: DataFrame | None) -> DataFrame | None:
    """The winning actions whose paths are not plain, resolved in full, read only from the log
    files the summary found them in; None when there are none."""
    rare = [f for f in catalog if f.needs_resolution]
    if not rare:
        return None
    plain = _plain(F.col("raw_path"), F.col("dv_storage_type"), F.col("table_root"))
    winners = _winners(_actions(spark, rare, commits), sum(f.rows for f in rare)).where(~plain)
    return _resolved(winners).select(FILE_ACTIONS.columns)


def _winners(actions: DataFrame, rows: int) -> DataFrame:
    """The newest action per (table, path, deletion vector) of ``rows`` actions; within one version
    an add beats a remove."""
    both = actions.select(
        "table_root", "version", F.when(_is_add(), "add").otherwise("remove").alias("kind"),
        _either("path").alias("raw_path"), _either("size").alias("size"),
        F.col("add.modificationTime").alias("modification_time"),
        F.col("remove.deletionTimestamp").alias("deletion_timestamp"),
        *[_either("deletionVector", name).alias(alias) for name, alias in (
            ("storageType", "dv_storage_type"), ("pathOrInlineDv", "dv_path_or_inline"), ("offset", "dv_offset"),
            ("cardinality", "dv_cardinality"))],
    )
    # Folded into one number so that every aggregate keeps a fixed-width buffer (Spark hashes
    # those; a string or struct buffer makes it sort every action instead).
    order = F.col("version") * 2 + (F.col("kind") == "add").cast("long")
    key = ["table_root", "raw_path", "dv_storage_type", "dv_path_or_inline", "dv_offset"]
    return by_key(both, key, rows).groupBy(*key).agg(
        F.max(order).alias("order"),
        *[F.max_by(name, order).alias(name) for name in ("size", "modification_time", "deletion_timestamp",
                                                         "dv_cardinality")],
    ).select(*key, "size", "modification_time", "deletion_timestamp", "dv_cardinality",
             F.floor(F.col("order") / 2).alias("version"),
             F.when(F.col("order") % 2 == 1, "add").otherwise("remove").alias("kind"))


def _resolved(winners: DataFrame) -> DataFrame:
    """Winning actions with canonical file URIs resolved in full (see deltalog.paths), or the problem."""
    dv_type, dv_text = F.col("dv_storage_type"), F.col("dv_path_or_inline")
    files = with_resolved(winners, "table_root", "raw_path", "path")
    files = with_resolved(files.withColumn("dv_absolute", F.when(dv_type == "p", dv_text)),
                          "table_root", "dv_absolute", "dv_absolute_path")
    files = files.withColumn("dv_path", _dv_by_id().when(dv_type == "p", F.col("dv_absolute_path")))
    problem = F.coalesce(
        F.when(F.col("raw_path").isNull(), F.lit("an add or remove without a path")),
        F.col("path_problem"),
        F.col("dv_absolute_path_problem"),
        _invalid_dv_id(),
        F.when(~dv_type.isin(*KNOWN_DV_STORAGE_TYPES),
               F.concat(F.lit("unknown deletion vector storage type '"), dv_type, F.lit("'"))),
    )
    return files.withColumn("problem", _in_version(problem))


def unresolvable(files: DataFrame) -> dict[TableRoot, str]:
    """``{table_root: why}`` for tables whose actions name a file we cannot resolve: one example each.

    Counted per table first and filtered after: a filter on ``problem`` itself would be pushed
    into the path resolution and spell its expressions out again and again (Spark 3.5 took
    30 s to plan that for nine files)."""
    counted = files.groupBy("table_root").agg(F.count("problem").alias("n"), F.min("problem").alias("problem"))
    return {
        row["table_root"]: f"{row['n']} action(s) name a file that cannot be resolved, e.g. {row['problem']}"
        for row in counted.where(F.col("n") > 0).collect()
    }


class LogFileVanished(HousekeepingError):
    """A file of ``table_root``'s log, read once already, was gone when a later job read it again
    (a writer's log cleanup): that table's log must be read afresh."""

    def __init__(self, table_root: TableRoot, cause: str):
        super().__init__(f"a file of {table_root}'s log vanished: {cause}")
        self.table_root, self.cause = table_root, cause


@contextmanager
def naming_vanished_logs(roots: Sequence[TableRoot]) -> Iterator[None]:
    """Inside, a Spark job that fails for a file gone from one of ``roots``' ``_delta_log/`` raises
    :class:`LogFileVanished` naming that table; any other error passes as it is. Spark says which file
    only in its message (told apart from other errors by its class: lakeio.spark.session.is_missing_file)."""
    try:
        yield
    except Exception as error:
        if not is_missing_file(error):
            raise
        text = str(error)
        spellings = (text, unquote(text))
        for root in roots:
            folder = root.split(":", 1)[1].lstrip("/") + "/_delta_log/"  # whatever the scheme's spelling
            if any(folder in spelled for spelled in spellings):
                raise LogFileVanished(root, first_line(error)) from error
        raise
