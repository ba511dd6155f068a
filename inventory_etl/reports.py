"""Reading a delivery's report files with Spark and normalizing them to the contract.

Parquet and ORC are read by their own schemas; CSV (gzip, no header) by the column
order of ``fileSchema``, with keys URL-decoded (``+`` is a space, ``%2B`` a plus).
Every row gets a ``_problem`` (null when fine) so one aggregate per run can tell which
delivery holds rows we cannot trust, and its ``_file`` (the report file it came from)
so a refusal can name the file.

Timestamps: a Parquet ``INT64`` without a timestamp logical type is epoch milliseconds,
as AWS documents; typed timestamps are read as their type says. An ORC ``timestamp`` is a
wall clock (S3 writes UTC's), which the ORC reader turns into an instant of the executor
JVM's own zone; it is turned back into the UTC instant S3 meant, whatever that zone is, as long
as every executor has the same one (a row read in another refuses its delivery).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, IntegralType, StringType, TimestampType

from inventory_etl.manifest import DeliveryError, Manifest
from lakeio.inventory import INVENTORY_SCHEMA, REPORT_FIELDS, REQUIRED_REPORT_FIELDS, snake_case
from lakeio.store import uris
from lakeio.text import first_line
from lakeio.times import hours_ms

PROBLEM = "_problem"
# A check of a report row: where the condition holds, the row has this problem (a text, or a column of one).
Check = tuple[Column, "str | Column"]
SOURCE_FILE = "_file"
_NULL_SENTINEL = "\u0000"  # so that only a missing CSV field reads as null, never ""


def read_report(spark: SparkSession, manifest: Manifest) -> DataFrame:
    """The delivery's rows: known report fields typed as the contract wants, plus ``_problem``."""
    lacking = [f for f in REQUIRED_REPORT_FIELDS if f not in manifest.columns]
    if lacking:
        raise DeliveryError(manifest.uri, f"fileSchema lacks required field(s) {', '.join(lacking)}: "
                                          "enable them in the inventory configuration")
    paths = [uris.literal(f.uri) for f in manifest.files]
    try:
        if manifest.file_format == "CSV":
            return _read_csv(spark, manifest, paths)
        return _read_columnar(spark, manifest, paths)
    except DeliveryError:
        raise
    except Exception as exc:  # Spark's AnalysisException / Py4JJavaError on a corrupt footer
        raise DeliveryError(manifest.files[0].uri if len(paths) == 1 else manifest.uri,
                            f"unreadable {manifest.file_format} report: {first_line(exc)}") from None


def _read_columnar(spark: SparkSession, manifest: Manifest, paths: list[str]) -> DataFrame:
    reader = spark.read.option("mergeSchema", "true")
    df = reader.parquet(*paths) if manifest.file_format == "Parquet" else reader.orc(paths)
    df = df.select(*[F.col(f"`{c}`").alias(snake_case(c)) for c in df.columns],
                   F.col("_metadata.file_path").alias(SOURCE_FILE))
    found = set(df.columns) - {SOURCE_FILE}
    if found != set(manifest.columns):
        extra = sorted(found - set(manifest.columns))
        absent = sorted(set(manifest.columns) - found)
        raise DeliveryError(manifest.uri, f"report columns do not match fileSchema (extra: {extra}, missing: {absent})")
    typed = {name: _typed(f"`{name}`", name, df.schema[name].dataType)
             for name in manifest.columns if name in REPORT_FIELDS}
    shifted = [n for n in manifest.wall_clock_fields if n in typed and isinstance(df.schema[n].dataType, TimestampType)]
    df = df.select(*[c.alias(n) for n, c in typed.items()], SOURCE_FILE)
    if not shifted:
        return _with_problems(df, manifest, [])
    zone = executors_zone(spark)
    if zone not in _UTC_NAMES:
        for name in shifted:
            df = _utc_wall_clock(df, name, zone)
    # Each row's own executor reads its ORC in its own zone: a row read elsewhere than in ``zone``
    # was corrected by the wrong rules, so it refuses its delivery rather than land shifted.
    df = df.withColumn(_JVM_ZONE, F.expr("reflect('java.time.ZoneId', 'systemDefault')"))
    other_zone = (F.col(_JVM_ZONE) != F.lit(zone),
                  F.concat(F.lit("read by an executor whose JVM zone is "), F.col(_JVM_ZONE),
                           F.lit(f", not {zone} as the others: give every executor one -Duser.timezone")))
    return _with_problems(df, manifest, [other_zone]).drop(_JVM_ZONE)


_JVM_ZONE = "_jvm_zone"
_HOURS_3 = hours_ms(3)
_UTC_NAMES = ("UTC", "Z", "GMT", "Etc/UTC", "Etc/GMT", "UCT", "Etc/UCT", "Universal", "Zulu")


def executors_zone(spark: SparkSession) -> str:
    """The JVM default zone of an executor, which ORC's reader reads wall clocks in (one-row job)."""
    [row] = spark.range(1).selectExpr("reflect('java.time.ZoneId', 'systemDefault')").collect()
    return str(row[0])


def _utc_wall_clock(df: DataFrame, name: str, zone: str) -> DataFrame:
    """``df`` with column ``name`` turned into the instant whose UTC wall clock ORC read in ``zone``.

    ORC's reader maps a wall clock ``u`` to ``u - offset(u)``, or, where that lands across a
    zone transition, to ``u - offset(u - offset(u))``. Inverted: of the candidates
    ``read + offset(read + d)``, d being 0 and ±3 h (either side of any transition), the ones
    ORC maps back onto ``read``. Only in the hour before a spring-forward transition does
    ORC map two wall clocks onto one reading; there the later is taken, so that a file never
    looks older than it is (run executors with ``-Duser.timezone=UTC`` to be exact there too).

    Each step is a column of its own, so that Spark computes each offset once a row: nested
    into one expression, the candidates repeat their offsets some hundred times a row."""
    def offset(c: Column) -> Column:
        return F.unix_millis(F.from_utc_timestamp(c, zone)) - F.unix_millis(c)

    def at(millis: Column) -> Column:
        return F.timestamp_millis(millis)

    read, ms = F.col(name), F.unix_millis(F.col(name))
    steps = [f"_{name}_{step}{i}" for step in ("k", "c", "o", "f", "p") for i in range(3)]
    k, c, o, f, p = (steps[i:i + 3] for i in range(0, 15, 3))
    stages = [
        {k[i]: offset(at(ms + d)) for i, d in enumerate((0, _HOURS_3, -_HOURS_3))},
        # the candidates, each once: away from a transition all three are one, and a null costs nothing
        {c[0]: at(ms + F.col(k[0])),
         c[1]: F.when(F.col(k[1]) != F.col(k[0]), at(ms + F.col(k[1]))),
         c[2]: F.when((F.col(k[2]) != F.col(k[0])) & (F.col(k[2]) != F.col(k[1])), at(ms + F.col(k[2])))},
        {o[i]: offset(F.col(c[i])) for i in range(3)},
        {f[i]: at(F.unix_millis(F.col(c[i])) - F.col(o[i])) for i in range(3)},  # ORC's first reading
        {p[i]: offset(F.col(f[i])) for i in range(3)},
    ]
    for stage in stages:
        df = df.select("*", *[column.alias(step) for step, column in stage.items()])
    readings = [F.when(F.col(p[i]) == F.col(o[i]), F.col(f[i])).otherwise(at(F.unix_millis(F.col(c[i])) - F.col(p[i])))
                for i in range(3)]
    latest = F.greatest(*[F.when(F.unix_millis(r) == ms, F.col(c[i])) for i, r in enumerate(readings)])
    return df.withColumn(name, F.when(read.isNull(), read).otherwise(F.coalesce(latest, F.col(c[0])))).drop(*steps)


def _read_csv(spark: SparkSession, manifest: Manifest, paths: list[str]) -> DataFrame:
    width = len(manifest.columns)
    raw_names = [f"c{i}" for i in range(width + 1)]  # one more than fileSchema, to catch extra fields
    df = (
        spark.read.schema(", ".join(f"{n} string" for n in raw_names))
        .option("header", "false")
        .option("quote", '"')
        .option("escape", '"')
        .option("nullValue", _NULL_SENTINEL)
        .option("mode", "PERMISSIVE")
        .csv(paths)
    )
    checks: list[Check] = [
        (F.col(raw_names[width]).isNotNull(), "more fields than fileSchema"),
        (F.col(raw_names[width - 1]).isNull(), "fewer fields than fileSchema"),
    ]
    columns = {}
    for raw, name in zip(raw_names, manifest.columns):
        if name not in REPORT_FIELDS:
            continue
        text = F.nullif(F.col(raw), F.lit(""))
        value = uris.try_url_decode_col(text) if name == "key" else _typed(f"nullif({raw}, '')", name)
        checks.append((text.isNotNull() & value.isNull(), f"unparseable {name}"))
        columns[name] = value
    problem = _first_problem(checks)
    df = df.select(*[c.alias(n) for n, c in columns.items()], problem.alias("_csv_problem"),
                   F.col("_metadata.file_path").alias(SOURCE_FILE))
    return _with_problems(df, manifest, [(F.col("_csv_problem").isNotNull(), F.col("_csv_problem"))]).drop("_csv_problem")


_TEXT = StringType()  # what CSV cells are read as


def _typed(sql: str, name: str, read_as: DataType = _TEXT) -> Column:
    """``sql`` (a column's SQL text) as the contract's type, null where it does not parse.

    SQL's ``try_cast`` rather than ``Column.try_cast``, which PySpark 3.5 lacks."""
    dtype = REPORT_FIELDS[name]
    column = F.expr(sql)
    if isinstance(dtype, TimestampType) and isinstance(read_as, IntegralType):
        return F.timestamp_millis(column)
    if isinstance(dtype, StringType):
        return column
    cast = F.expr(f"try_cast({sql} AS {dtype.simpleString()})")
    if isinstance(dtype, TimestampType) and isinstance(read_as, StringType):
        # ISO 8601 only, as S3 writes it: a cast alone reads "1234" (a size in the wrong column) as a year
        return F.when(column.rlike(r"^\d{4}-\d{2}-\d{2}T"), cast)
    return cast


def _with_problems(df: DataFrame, manifest: Manifest, earlier: list[Check]) -> DataFrame:
    marker = F.coalesce(F.col("is_delete_marker"), F.lit(False)) if "is_delete_marker" in df.columns else F.lit(False)
    checks = earlier + [
        (F.col("bucket").isNull() | F.col("key").isNull(), "row without bucket or key"),
        (F.col("bucket") != F.lit(manifest.source_bucket), f"row of another bucket than {manifest.source_bucket}"),
        (F.col("size").isNull() & ~marker, "object row without size"),
        (F.col("size") < 0, "negative size"),
        (F.col("last_modified_date").isNull() & ~marker, "object row without last_modified_date"),
    ]
    return df.withColumn(PROBLEM, _first_problem(checks))


def _first_problem(checks: list[Check]) -> Column:
    expr = F.lit(None).cast("string")
    for condition, message in reversed(checks):
        label = message if isinstance(message, Column) else F.lit(message)
        expr = F.when(condition, label).otherwise(expr)
    return expr


def to_contract(df: DataFrame, manifest: Manifest, path_roots: Mapping[str, str]) -> DataFrame:
    """Rows of the inventory table (INVENTORY_SCHEMA order), then ``_problem`` and ``_file``."""
    root = path_roots.get(manifest.source_bucket, f"s3://{manifest.source_bucket}").rstrip("/")
    present = set(df.columns)

    def field(name: str) -> Column:
        return F.col(name) if name in present else F.lit(None).cast(REPORT_FIELDS[name])

    derived = {
        # A row naming another bucket carries a problem and refuses its delivery, so every row
        # written holds the manifest's bucket: as a literal, Spark writes the partition unsorted.
        "bucket": F.lit(manifest.source_bucket),
        "path": F.concat(F.lit(root + "/"), F.col("key")),
        "length": F.col("size"),
        "isDir": F.col("key").endswith("/"),
        "modificationTime": F.unix_millis(F.col("last_modified_date")),
        "last_modified": F.col("last_modified_date"),
        "config_id": F.lit(manifest.config_id),
        "manifest_uri": F.lit(manifest.uri),
        "inventory_date": F.lit(manifest.inventory_date),
    }
    columns = [
        (derived[f.name] if f.name in derived else field(f.name)).cast(f.dataType).alias(f.name)
        for f in INVENTORY_SCHEMA.fields
    ]
    return df.select(*columns, F.col(PROBLEM), F.col(SOURCE_FILE))
