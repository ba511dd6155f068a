"""The DataFrames that pass between steps, named once: their columns and types.

Each step's output is checked against its shape where the next step takes it in (a
check reads only the frame's schema, no data), so a renamed or missing column fails at
the seam with both sides named, not three joins later as an unresolved column.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BooleanType, DoubleType, IntegerType, LongType, StringType, StructField, StructType

from lakeio.errors import HousekeepingError
from lakeio.spark.session import jvm_of
from lakeio.store.uris import TableRoot

_TYPES = {"string": StringType(), "long": LongType(), "int": IntegerType(), "boolean": BooleanType(),
          "double": DoubleType()}


class ShapeError(HousekeepingError, ValueError):
    """A frame lacks columns its consumer needs."""


@dataclass(frozen=True)
class Shape:
    name: str
    schema: StructType

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()

    def check(self, frame: DataFrame) -> DataFrame:
        """``frame`` itself, once it has every column of this shape (more are allowed)."""
        missing = [c for c in self.columns if c not in frame.columns]
        if missing:
            raise ShapeError(f"{self.name}: missing column(s) {missing}; the frame has {frame.columns}")
        return frame


def _schema(ddl: str) -> StructType:
    """``"a string, b long"`` as a schema, without a Spark session (``StructType.fromDDL`` needs one)."""
    return StructType([StructField(name, _TYPES[kind]) for name, kind in
                       (column.split() for column in ddl.split(","))])


def local_frame(spark: SparkSession, rows: Iterable[Sequence[object]], schema: str | StructType) -> DataFrame:
    """A small table the driver holds (table roots, lookups, a run's audit rows) as a DataFrame that needs no Python
    worker.

    ``spark.createDataFrame`` of a Python list unpickles it in a Python worker, and starting one
    costs seconds of a cold run whose jobs otherwise run in the JVM alone. Here the rows travel as
    one JSON text in a one-row local relation the JVM builds, and are parsed where the frame is
    used; a value that does not fit its column (``schema``: a StructType, or DDL of string, int,
    long, double, boolean, timestamp and date columns) fails the job instead of turning null. A timestamp
    travels as UTC microseconds (an ``int``, or an aware ``datetime``), a date as its ISO day (a ``date``, or
    its text), so that no time zone of this process or of the session moves either. No SQL text carries it:
    Delta 4's SQL parser leaves a named parameter inside ``VALUES`` unbound."""
    kinds = dict(column.split() for column in schema.split(",")) if isinstance(schema, str) else {}
    struct = _schema(", ".join(f"{name} {_CARRIED.get(kind, kind)}" for name, kind in kinds.items())) \
        if isinstance(schema, str) else schema
    carried = [_CARRIERS.get(kinds.get(name, ""), _as_is) for name in struct.fieldNames()]
    text = json.dumps([{name: carry(value) for name, carry, value in zip(struct.fieldNames(), carried, row, strict=True)}
                       for row in rows])
    jvm, gateway = jvm_of(spark), spark.sparkContext._gateway
    assert gateway is not None, "a classic session has a gateway"
    values = gateway.new_array(jvm.java.lang.Object, 1)
    values[0] = text
    one_row = jvm.java.util.ArrayList()
    one_row.add(jvm.org.apache.spark.sql.RowFactory.create(values))
    given = jvm.org.apache.spark.sql.types.DataType.fromJson(StructType([StructField("rows", StringType())]).json())
    parsed = DataFrame(spark._jsparkSession.createDataFrame(one_row, given), spark).select(
        F.inline(F.from_json("rows", ArrayType(struct), {"mode": "FAILFAST"})))
    if not any(kind in _CARRIED for kind in kinds.values()):
        return parsed
    return parsed.select(*[F.timestamp_micros(name).alias(name) if kind == "timestamp"
                           else F.to_date(name).alias(name) if kind == "date" else F.col(name)
                           for name, kind in kinds.items()])


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_CARRIED = {"timestamp": "long", "date": "string"}  # how local_frame carries a kind JSON has no form for


def _micros(value: object) -> object:
    if isinstance(value, datetime):
        assert value.tzinfo is not None, f"a timestamp for a frame must know its zone: {value!r}"
        return (value - _EPOCH) // timedelta(microseconds=1)
    return value


def _day(value: object) -> object:
    return value.isoformat() if isinstance(value, date) else value


def _as_is(value: object) -> object:
    return value


_CARRIERS = {"timestamp": _micros, "date": _day}


# Reconciled add/remove actions, one per (table, file, deletion vector): see deltalog.replay.
# ``path`` and ``dv_path`` are canonical URIs; ``problem`` says why a named file cannot be resolved.
FILE_ACTIONS = Shape("file actions", _schema(
    "table_root string, kind string, path string, size long, modification_time long, deletion_timestamp long, "
    "dv_storage_type string, dv_path string, dv_cardinality long, problem string"))

# A file one Delta table needs (``referenced_by``) that another (``table_root``) owns: deltalog.references.
REFERENCES = Shape("references", _schema("table_root string, path string, referenced_by string"))

# A file a pinned version reads (data or deletion vector) of table ``table_root``: deltalog.pinned;
# ``pin`` indexes the run's pins, ``problem`` says why a file it names cannot be resolved.
PINNED_FILES = Shape("pinned files", _schema(
    "table_root string, pin int, path string, size long, modification_time long, problem string"))

# Rows of one inventory date as job 2 reads them (every version, every configuration).
INVENTORY_ROWS = Shape("inventory rows", _schema(
    "path string, length long, isDir boolean, modificationTime long, is_latest boolean, is_delete_marker boolean"))

# What a plan deletes: canonical table root and file URI, with what the inventory says of the file.
CANDIDATES = Shape("candidates", _schema(
    "table_root string, path string, length long, modificationTime long"))

# One row per planned file after the run: ``action`` is an AuditAction, ``at_ms`` when it happened;
# how to undo a delete: on a versioned S3 bucket the version it hid and the delete marker it added,
# elsewhere where the file was moved to (a trash folder).
OUTCOMES = Shape("outcomes", _schema(
    "table_root string, path string, length long, modificationTime long, action string, error string, at_ms long, "
    "version_id string, delete_marker_id string, trash_path string"))


def of_tables(frame: DataFrame, roots: Sequence[str]) -> DataFrame:
    """The rows of ``frame`` whose ``table_root`` is one of ``roots``, by a broadcast semi-join:
    the same few gateway calls for 5 tables or 500, where an ``isin`` makes a call per root."""
    return frame.join(F.broadcast(_roots(frame, roots)), "table_root", "left_semi")


def first_paths(frame: DataFrame, count: int) -> dict[TableRoot, list[str]]:
    """The first ``count`` paths of each ``table_root`` of ``frame`` (a run's rows: their roots are the run's own,
    canonical), in path order: the samples a report names (the audit, or a file the run writes, names every one)."""
    first = Window.partitionBy("table_root").orderBy("path")
    found: dict[TableRoot, list[str]] = {}
    for row in (frame.select("table_root", "path").withColumn("_rank", F.row_number().over(first))
                .where(F.col("_rank") <= count).orderBy("table_root", "path").collect()):
        found.setdefault(TableRoot(row["table_root"]), []).append(row["path"])
    return found


def without_tables(frame: DataFrame, roots: Sequence[str]) -> DataFrame:
    """The rows of ``frame`` whose ``table_root`` is none of ``roots`` (see :func:`of_tables`)."""
    return frame.join(F.broadcast(_roots(frame, roots)), "table_root", "left_anti")


def _roots(frame: DataFrame, roots: Sequence[str]) -> DataFrame:
    return local_frame(frame.sparkSession, [(root,) for root in roots], "table_root string")
