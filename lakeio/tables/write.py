"""The one write path for the project's own Delta tables (inventory, audit), and their one committer.

Spark writes the Parquet files and ``deltalake`` (delta-rs) commits them, whether or not Delta's
Spark jars are on the classpath: add actions carrying ``numRecords`` and partition values, plus
remove actions for the files of every replaced partition, in one atomic commit. deltalake puts a
commit only if its version is free, as the store enforces it across processes: ``If-None-Match: *``
on S3, a create-or-fail rename on a local disk. Delta's Spark writer would commit through its log
store, which on S3 (``S3SingleDriverLogStore``) is safe for one JVM only: two of our runs at once
(two schedules, a retry while the first still runs) could each write version N, the later PUT
replacing the earlier commit and with it a day's delivery or the record of a run's deletes. The
result is a standard Delta table that any engine reads. :mod:`lakeio.store.put_if_absent` proves, before
a job's first commit, that the store honours the condition.

Each run writes below its own folder ``<table>/run-<UTC stamp>-<id>/`` (partition folders inside
it), so Spark's ``_temporary`` staging is private to the run: a crashed run's task files can never
be swept into a later run's commit, and two runs writing different partitions at once do not share
staging. Only the files of the run's own folder are committed. Timestamps are written as
``TIMESTAMP_MICROS`` (never INT96), so dates past 2262 read in every engine.

A replacing write may carry a :class:`Claim` per partition. The claim goes into the commit as
Delta application transactions (``txn`` actions) named after the partition; a commit that lost its
version to another writer reads the table again and decides anew. A partition whose table-held
claim outranks the write's at commit time is left as it is and reported, never replaced by older
content. A write given ``read_version`` commits only right after that version, or raises
:class:`CommitLost`: the caller's decision (a run the audit does not hold yet) was taken at it.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote, unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakeio.errors import HousekeepingError, InvalidOption
from lakeio.spark.session import session_setting
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.text import LONGEST, shorten_end, storage_advice
from lakeio.times import epoch_ms

if TYPE_CHECKING:
    from deltalake import DeltaTable, Schema
    from deltalake.transaction import AddAction, RemoveAction, Transaction
    from pyarrow import DataType

WriteMode = Literal["append", "replace_partitions"]

# Partition values we write are dates, bucket names and ids. Keeping them to characters
# no engine escapes means the folder name, the log path and the value are one string.
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9._\-]+$")

RUN_FOLDER = re.compile(r"^run-(\d{8}T\d{6}Z)-[0-9a-f]{8}$")
# A run's private staging left behind this long ago belongs to a run that died.
DEAD_RUN_AFTER = timedelta(days=1)
# A log file that makes a table (PROTOCOL.md: a commit or a checkpoint); without one, _delta_log/ is no table yet.
VERSION_FILE = re.compile(r"^\d{20}\.(json|checkpoint(\.\d{10}\.\d{10}|\.[0-9A-Fa-f-]{36})?\.(parquet|json))$")
# What writers stage a commit under before they move it into place: delta-rs on S3 (_commit_<uuid>.json.tmp) and
# on local disks (00000000000000000000.json#1), Hadoop's (.00000000000000000000.json.<uuid>.tmp).
STAGED_COMMIT = re.compile(r"^(_commit_[0-9a-f-]{36}\.json\.tmp|\d{20}\.json#\d+|\.\d{20}\.json\.[0-9a-f-]+\.tmp)$")
DEAD_COMMIT_AFTER = timedelta(minutes=10)
# A write that keeps losing its commit to other writers gives up after this many tries.
COMMIT_ATTEMPTS = 8
# deltalake's own retries of a commit whose version was taken: none, so that every retry is ours and decided anew.
_NO_RETRIES = 0
# Told the table URI right before a commit attempt (see write_delta).
BeforeCommit = Callable[[str], None]
_CLAIM_APP = "lake-housekeeping:"


class IncompatibleTable(HousekeepingError, ValueError):
    """The target exists but is not a table this write may go into."""


def partition_folder(columns: Sequence[str], values: Mapping[str, str]) -> str:
    """The folder Spark writes a partition to (inside the run's folder), e.g. ``inventory_date=2026-01-02/bucket=b``."""
    for column in columns:
        if not _SAFE_VALUE.match(str(values[column])):
            raise ValueError(f"partition value {values[column]!r} of {column!r} needs escaping; not supported")
    return "/".join(f"{c}={values[c]}" for c in columns)


PartitionKey = tuple[str, ...]  # a partition's values, in the order of the table's partition columns


@dataclass(frozen=True)
class Claim:
    """What a replacing write brings to one partition: ``rank`` orders contents (a greater one is
    newer), ``identity`` tells one content from another of the same rank."""

    rank: int
    identity: int

    @staticmethod
    def identity_of(text: str) -> int:
        """A stable 63-bit number for ``text`` (a Delta transaction version is a signed long)."""
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


@dataclass(frozen=True)
class WriteResult:
    table_uri: str
    files_added: int
    files_removed: int
    rows: int
    columns_added: tuple[str, ...] = ()  # older table schema evolved by this write
    # partitions left as they were: at commit time the table held a newer claim (the one shown)
    outranked: Mapping[PartitionKey, Claim] = field(default_factory=dict)


def write_delta(
    df: DataFrame,
    table_uri: str,
    partition_by: Sequence[str],
    partitions: Sequence[Mapping[str, str]],
    mode: WriteMode,
    drop: Sequence[Mapping[str, str]] = (),
    claims: Mapping[PartitionKey, Claim] | None = None,
    outranked_allowed: bool = False,
    before_commit: BeforeCommit | None = None,
    read_version: int | None = None,
) -> WriteResult:
    """Write ``df`` (whose rows all fall in ``partitions``) to a partitioned Delta table.

    ``replace_partitions`` swaps each listed partition's content for ``df``'s rows;
    ``append`` only adds. ``drop`` partitions lose their rows in the same commit (with
    ``replace_partitions``). Readers see the old state or the new one, never a mix.
    ``claims`` (with ``replace_partitions``, keyed by partition values) serialise writers of a
    partition and keep its newest content: see the module's docstring. ``outranked_allowed``
    replaces a partition even where the table holds a newer claim (going back on purpose).
    ``read_version``: commit only as the version right after it (-1: only as the table's first), else
    :class:`CommitLost` and nothing committed. ``before_commit`` is called with the table URI right
    before each commit attempt, after the write has read the table it commits against (where a test
    holds one writer while another commits).
    """
    if drop and mode != "replace_partitions":
        raise InvalidOption("drop goes with mode='replace_partitions'")
    if claims and mode != "replace_partitions":
        raise InvalidOption("claims go with mode='replace_partitions'")
    table_uri = uris.to_uri(table_uri)
    added = _check_target(df.sparkSession, df.schema, table_uri, partition_by, evolve=True)
    # Spark's default INT96 cannot hold dates past 2262 for Arrow readers; micros can.
    with session_setting(df.sparkSession, "spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS"):
        result = _write(df, table_uri, partition_by, partitions, mode, drop, dict(claims or {}), outranked_allowed,
                        before_commit, read_version)
    return replace(result, columns_added=added)


def held_claims(table_uri: str, partition_by: Sequence[str], keys: Sequence[PartitionKey]) -> dict[PartitionKey, Claim]:
    """The claims the table holds now on these partitions; one written without a claim (or not at
    all) is absent. From the log alone."""
    table = open_table(uris.to_uri(table_uri))
    return _held(table, partition_by, keys) if table is not None else {}


def _held(table: DeltaTable, partition_by: Sequence[str], keys: Sequence[PartitionKey]) -> dict[PartitionKey, Claim]:
    held = {}
    for key in keys:
        app = _claim_app(partition_by, key)
        rank = table.transaction_version(app)
        if rank is not None:
            held[key] = Claim(rank, table.transaction_version(app + "#identity") or 0)
    return held


def _claim_app(partition_by: Sequence[str], key: PartitionKey) -> str:
    return _CLAIM_APP + partition_folder(partition_by, dict(zip(partition_by, key)))


def _claim_transactions(partition_by: Sequence[str], claims: Mapping[PartitionKey, Claim]) -> list[Transaction]:
    from deltalake.transaction import Transaction

    now_ms = epoch_ms()
    found = []
    for key, claim in sorted(claims.items()):
        app = _claim_app(partition_by, key)
        found += [Transaction(app, claim.rank, now_ms), Transaction(app + "#identity", claim.identity, now_ms)]
    return found


def check_target(spark: SparkSession, schema: T.StructType, table_uri: str, partition_by: Sequence[str]) -> None:
    """Raise :class:`IncompatibleTable` unless a write of ``schema`` can go to ``table_uri``: empty,
    or a Delta table of ours (same partitioning, no column it does not know, none of another type).
    Reads only the log: callers check before their work, not after it."""
    _check_target(spark, schema, uris.to_uri(table_uri), partition_by, evolve=False)


def _check_target(spark: SparkSession, schema: T.StructType, table_uri: str, partition_by: Sequence[str],
                  evolve: bool) -> tuple[str, ...]:
    """Refuse a target that is not empty and not a compatible Delta table; with ``evolve``, add the
    columns an older table of ours lacks (explicitly, in their own commit) and name them."""
    from deltalake import Field

    table = open_table(table_uri)
    if table is None:
        storage = Storage(spark)
        no_table_yet = _no_table_yet(storage, table_uri)
        # Hidden names are no data (every engine skips them): an audit table's journal may come before its first commit.
        leftovers = [f for f in storage.list(table_uri)
                     if not RUN_FOLDER.match(uris.name(f.uri)) and not (no_table_yet and uris.name(f.uri) == "_delta_log")
                     and not (uris.name(f.uri).startswith(("_", ".")) and uris.name(f.uri) != "_delta_log")]
        if leftovers:
            raise IncompatibleTable(f"{table_uri}: not empty and not a Delta table (holds {uris.name(leftovers[0].uri)}); "
                                    "refusing to write into it") from None
        return ()
    if list(table.metadata().partition_columns) != list(partition_by):
        raise IncompatibleTable(f"{table_uri}: partitioned by {list(table.metadata().partition_columns)}, "
                                f"this write needs {list(partition_by)}")
    ours = {f.name: f for f in _delta_schema(schema).fields}
    theirs = {f.name: f for f in table.schema().fields}
    foreign = sorted(set(theirs) - set(ours))
    if foreign:
        raise IncompatibleTable(f"{table_uri}: has column(s) {foreign} this write does not know; not a table of ours")
    clashing = sorted(n for n in theirs if theirs[n].type != ours[n].type)
    if clashing:
        raise IncompatibleTable(f"{table_uri}: column(s) {clashing} have another type than this write's")
    missing = [n for n in ours if n not in theirs]
    if missing and evolve:
        table.alter.add_columns([Field(n, ours[n].type, nullable=True) for n in missing])
    return tuple(missing)


def _write(df: DataFrame, table_uri: str, partition_by: Sequence[str], partitions: Sequence[Mapping[str, str]],
           mode: WriteMode, drop: Sequence[Mapping[str, str]], claims: Mapping[PartitionKey, Claim],
           outranked_allowed: bool, before_commit: BeforeCommit | None, read_version: int | None) -> WriteResult:
    storage = Storage(df.sparkSession)
    _clear_dead_runs(storage, table_uri)
    run = f"run-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    df.write.mode("errorifexists").partitionBy(*partition_by).parquet(uris.join(table_uri, run))
    storage.delete(uris.join(table_uri, run, "_SUCCESS"))
    staged = _staged_adds(df, storage, table_uri, run, partition_by, partitions)
    attempt = 0
    while True:  # against the table as it is now, until a commit goes in (or too many conflicts)
        attempt += 1
        table = open_table(table_uri) if read_version is None else _table_at(table_uri, read_version)
        held = _held(table, partition_by, list(claims)) if table is not None and claims else {}
        outranked = {k: held[k] for k, c in claims.items() if k in held and held[k].rank > c.rank and not outranked_allowed}
        writing = [p for p in partitions if _key(partition_by, p) not in outranked]
        adds = [a for p in writing for a, _ in staged[_key(partition_by, p)]]
        mine = {k: c for k, c in claims.items() if k not in outranked}
        try:
            removed = _commit(table, table_uri, df, partition_by, adds, [*writing, *drop] if mode == "replace_partitions" else [],
                              mine, before_commit)
        except CommitLost:
            if read_version is not None or attempt == COMMIT_ATTEMPTS:
                storage.delete(uris.join(table_uri, run), recursive=True)  # never committed: nobody reads them
                raise
            continue
        for key in outranked:  # never committed: nobody reads them
            storage.delete(uris.join(table_uri, run, partition_folder(partition_by, dict(zip(partition_by, key)))), True)
        rows = sum(n for p in writing for _, n in staged[_key(partition_by, p)])
        return WriteResult(table_uri, len(adds), removed, rows, outranked=outranked)


def _table_at(table_uri: str, read_version: int) -> DeltaTable | None:
    """The table as of ``read_version`` (-1: none yet): a commit against it lands right after it or not at all."""
    if read_version < 0:
        if open_table(table_uri) is not None:
            raise CommitLost(f"{table_uri}: another writer created the table first")
        return None
    return open_table(table_uri, read_version)


class CommitLost(HousekeepingError):
    """Another writer committed first in a way this commit must not ignore: read the table again."""


def _key(partition_by: Sequence[str], values: Mapping[str, str]) -> PartitionKey:
    return tuple(str(values[c]) for c in partition_by)


def _staged_adds(df: DataFrame, storage: Storage, table_uri: str, run: str, partition_by: Sequence[str],
                 partitions: Sequence[Mapping[str, str]]) -> dict[PartitionKey, list[tuple[AddAction, int]]]:
    """The add action of every file the run staged, with its row count, per partition."""
    from deltalake.transaction import AddAction

    folder_of = {partition_folder(partition_by, p): p for p in partitions}
    new_files = [f for f in storage.walk(uris.join(table_uri, run)) if _is_data_file(f.uri[len(table_uri) + 1:])]
    rows_per_file = _row_counts(df, [f.uri for f in new_files])
    staged: dict[PartitionKey, list[tuple[AddAction, int]]] = {_key(partition_by, p): [] for p in partitions}
    for f in new_files:
        relative = f.uri[len(table_uri) + 1:]
        values = folder_of.get(uris.parent(relative)[len(run) + 1:])
        if values is None:
            raise ValueError(f"{f.uri}: written outside the partitions declared for this write")
        rows = rows_per_file.get(f.uri, 0)
        add = AddAction(path=quote(relative, safe="/="), size=f.size,
                        partition_values={c: str(values[c]) for c in partition_by},
                        modification_time=f.modification_time, data_change=True,
                        stats=json.dumps({"numRecords": rows}))
        staged[_key(partition_by, values)].append((add, rows))
    return staged


class DeltaStorageError(HousekeepingError, OSError):
    """deltalake could not reach the table's store (credentials, endpoint, network): one line saying
    what to do, where deltalake's own error is a chain of nested causes."""


def open_table(table_uri: str, version: int | None = None) -> DeltaTable | None:
    """The table as deltalake reads it (as of ``version``; default: its newest), None where there is none;
    :class:`DeltaStorageError` when its store cannot be reached."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(deltalake_uri(table_uri), version=version)
    except TableNotFoundError:
        return None
    except OSError as exc:
        raise DeltaStorageError(f"{table_uri}: {deltalake_advice(exc)}") from None


# The labels deltalake puts before a cause ("Kernel error -> Generic S3 error -> ..."), which tell a user nothing.
_LIBRARY_LABEL = re.compile(r"^(?:(?:Kernel|Generic(?: S3| DeltaTable)?|Object ?store|Delta(?:Table)?) error"
                            r"(?:\s*(?:->|:)\s*)?)+", re.I)


def deltalake_advice(exc: BaseException) -> str:
    """deltalake's error as one line: its innermost cause, after what to do where we know it."""
    causes = [_LIBRARY_LABEL.sub("", line.strip().lstrip("↳").strip())
              for line in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines()]
    causes = [c for c in causes if c]
    text = f"deltalake: {causes[-1] if causes else type(exc).__name__}"  # the innermost cause says what happened
    advice = storage_advice(str(exc))
    if advice is None and re.search(r"URL scheme is not allowed", str(exc)):
        advice = "deltalake reaches an http:// endpoint only with AWS_ALLOW_HTTP=true in its environment"
    if advice is None and re.search(r"loading credentials|IMDS|error sending request|operation timed out|"
                                    r"dispatch failure|No such host|Connection refused", str(exc), re.I):
        advice = ("deltalake cannot reach the store: give it credentials the usual way (AWS_ACCESS_KEY_ID and "
                  "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance profile), AWS_REGION, and for another endpoint "
                  "AWS_ENDPOINT_URL (with AWS_ALLOW_HTTP=true for http://)")
    return f"{advice} [{shorten_end(text, LONGEST)}]" if advice else shorten_end(text, LONGEST)


def _commit(table: DeltaTable | None, table_uri: str, df: DataFrame, partition_by: Sequence[str], adds: list[AddAction],
            replaced: Sequence[Mapping[str, str]], claims: Mapping[PartitionKey, Claim],
            before_commit: BeforeCommit | None) -> int:
    """One commit against ``table`` as read (None: create it); the number of files it removed."""
    from deltalake.exceptions import CommitFailedError, DeltaError
    from deltalake.transaction import CommitProperties, create_table_with_add_actions

    properties = CommitProperties(max_commit_retries=_NO_RETRIES,
                                  app_transactions=_claim_transactions(partition_by, claims) if claims else None)
    if before_commit is not None:
        before_commit(table_uri)
    schema = _delta_schema(df.schema)
    try:
        if table is None:
            create_table_with_add_actions(deltalake_uri(table_uri), schema, adds, mode="error",
                                          partition_by=list(partition_by), commit_properties=properties)
            return 0
        removes = _removes_for(table, partition_by, replaced)
        table.create_write_transaction(adds + removes, mode="append", schema=schema, partition_by=list(partition_by),
                                       commit_properties=properties)
        return len(removes)
    except CommitFailedError as exc:  # a concurrent commit on what this one claims or removes
        raise CommitLost(str(exc)) from exc
    except DeltaError as exc:
        if table is None and open_table(table_uri) is not None:  # another writer created the table first
            raise CommitLost(str(exc)) from exc
        raise


def _no_table_yet(storage: Storage, table_uri: str) -> bool:
    """Whether ``_delta_log/`` holds no commit and no checkpoint: whatever a dead writer left there
    (a first commit killed before it was moved into place, on any store), there is no table yet and
    the target counts as empty. Staged commits old enough not to be a first commit under way are
    removed (one at a time: never the folder, which a concurrent first commit may be filling)."""
    entries = storage.list(uris.join(table_uri, "_delta_log"))
    if any(VERSION_FILE.match(uris.name(e.uri)) for e in entries):
        return False
    stale_before = int((datetime.now(timezone.utc) - DEAD_COMMIT_AFTER).timestamp() * 1000)
    for entry in entries:
        if not entry.is_dir and STAGED_COMMIT.match(uris.name(entry.uri)) and entry.modification_time < stale_before:
            storage.delete(entry.uri)
    return True


def _clear_dead_runs(storage: Storage, table_uri: str) -> None:
    """Drop the private staging of runs that died long ago; it never reaches a commit.
    (Files a dead run had already moved out of staging are not in the log: any Delta
    VACUUM removes them.)"""
    cutoff = datetime.now(timezone.utc) - DEAD_RUN_AFTER
    for folder in storage.list(table_uri):
        m = RUN_FOLDER.match(uris.name(folder.uri))
        if m and datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc) < cutoff:
            storage.delete(uris.join(folder.uri, "_temporary"), recursive=True)


def _delta_schema(schema: T.StructType) -> Schema:
    import pyarrow as pa
    from deltalake import Schema

    return Schema.from_arrow(pa.schema([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in schema]))


def _arrow_type(dtype: T.DataType) -> DataType:
    """Spark's type in Arrow, timestamps as UTC microseconds (what Delta stores); ours, because
    pyspark's converter changed its signature in every release from 3.5 to 4.3."""
    import pyarrow as pa

    simple = {T.StringType: pa.string(), T.LongType: pa.int64(), T.IntegerType: pa.int32(),
              T.ShortType: pa.int16(), T.ByteType: pa.int8(), T.BooleanType: pa.bool_(),
              T.DoubleType: pa.float64(), T.FloatType: pa.float32(), T.DateType: pa.date32(),
              T.BinaryType: pa.binary(), T.TimestampType: pa.timestamp("us", tz="UTC"),
              T.TimestampNTZType: pa.timestamp("us")}
    if type(dtype) in simple:
        return simple[type(dtype)]
    if isinstance(dtype, T.DecimalType):
        return pa.decimal128(dtype.precision, dtype.scale)
    if isinstance(dtype, T.ArrayType):
        return pa.list_(_arrow_type(dtype.elementType))
    if isinstance(dtype, T.MapType):
        return pa.map_(_arrow_type(dtype.keyType), _arrow_type(dtype.valueType))
    if isinstance(dtype, T.StructType):
        return pa.struct([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in dtype])
    raise TypeError(f"no Delta type for Spark's {dtype.simpleString()}")


def _removes_for(table: DeltaTable, partition_by: Sequence[str], partitions: Sequence[Mapping[str, str]]) -> list[RemoveAction]:
    """Remove actions for every live file of the partitions being replaced."""
    import pyarrow as pa
    from deltalake.transaction import RemoveAction

    wanted = {tuple(str(p[c]) for c in partition_by) for p in partitions}
    live = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    now_ms = epoch_ms()
    removes = []
    for action in live:
        values = {c: partition_string(action[f"partition.{c}"]) for c in partition_by}
        if tuple(values[c] for c in partition_by) in wanted:
            removes.append(
                RemoveAction(path=action["path"], data_change=True, deletion_timestamp=now_ms,
                             size=action["size_bytes"], partition_values=values)
            )
    return removes


def partition_string(value: object) -> str | None:
    """A partition value as the Delta log spells it."""
    if value is None:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _is_data_file(relative: str) -> bool:
    """Not Spark's bookkeeping (``_SUCCESS``, ``.crc``, ``_temporary/``)."""
    return not any(part.startswith((".", "_")) for part in relative.split("/"))


def _row_counts(df: DataFrame, file_uris: list[str]) -> dict[str, int]:
    """Rows per written file, read from the Parquet footers by Spark tasks."""
    if not file_uris:
        return {}
    counts = (
        df.sparkSession.read.parquet(*[uris.literal(u) for u in file_uris])
        .groupBy(F.col("_metadata.file_path").alias("file"))
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
