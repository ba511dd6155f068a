"""The inventory table contract (docs/DESIGN.md "The inventory table"), shared by ingestion, vacuum and chargeback.

The first four columns are the ones Delta's own ``VACUUM ... USING INVENTORY`` expects,
in its order; the rest carry what S3 Inventory reports and chargeback needs.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date
from functools import reduce
from operator import or_

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakeio.deprecation import renamed_keywords
from lakeio.errors import HousekeepingError
from lakeio.tables.read import TableNotFound, newest_partitions, partitions, read_delta
from lakeio.times import MS_PER_HOUR, midnight_utc_ms

# One partition per delivery unit: each inventory configuration of a bucket is replaced
# on its own, so two configurations never overwrite each other's rows.
PARTITION_COLUMNS = ("inventory_date", "bucket", "config_id")
# How releases before config_id partitioning laid the table out (``--migrate-from`` copies it).
EARLIER_PARTITION_COLUMNS = ("inventory_date", "bucket")

# Report fields S3 Inventory can deliver, by their snake_case name, with the type we store.
REPORT_FIELDS: dict[str, DataType] = {
    "bucket": StringType(),
    "key": StringType(),
    "version_id": StringType(),
    "is_latest": BooleanType(),
    "is_delete_marker": BooleanType(),
    "size": LongType(),
    "last_modified_date": TimestampType(),
    "e_tag": StringType(),
    "storage_class": StringType(),
    "is_multipart_uploaded": BooleanType(),
    "replication_status": StringType(),
    "encryption_status": StringType(),
    "object_lock_retain_until_date": TimestampType(),
    "object_lock_mode": StringType(),
    "object_lock_legal_hold_status": StringType(),
    "intelligent_tiering_access_tier": StringType(),
    "bucket_key_status": StringType(),
    "checksum_algorithm": StringType(),
    "object_access_control_list": StringType(),
    "object_owner": StringType(),
    "lifecycle_expiration_date": TimestampType(),
}

# Without these a row cannot say where an object is, how big, or how old.
REQUIRED_REPORT_FIELDS = ("bucket", "key", "size", "last_modified_date")

INVENTORY_SCHEMA = StructType(
    [
        StructField("path", StringType()),
        StructField("length", LongType()),
        StructField("isDir", BooleanType()),
        StructField("modificationTime", LongType()),
        StructField("bucket", StringType()),
        StructField("key", StringType()),
        StructField("version_id", StringType()),
        StructField("is_latest", BooleanType()),
        StructField("is_delete_marker", BooleanType()),
        StructField("storage_class", StringType()),
        StructField("e_tag", StringType()),
        StructField("last_modified", TimestampType()),
        *[
            StructField(name, dtype)
            for name, dtype in REPORT_FIELDS.items()
            if name not in ("bucket", "key", "version_id", "is_latest", "is_delete_marker",
                            "storage_class", "e_tag", "size", "last_modified_date")
        ],
        StructField("config_id", StringType()),
        StructField("manifest_uri", StringType()),
        StructField("inventory_date", DateType()),
    ]
)


def snake_case(field_name: str) -> str:
    """``LastModifiedDate`` (CSV schema) and ``last_modified_date`` (Parquet/ORC) are one field."""
    name = field_name.strip()
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return name.lower()


def is_delete_marker() -> Column:
    """An inventory row of a delete marker (unversioned inventories leave the flag null: none is)."""
    return F.coalesce(F.col("is_delete_marker"), F.lit(False))


def is_current() -> Column:
    """An inventory row of an object as it is now: its latest version, not a delete marker
    (unversioned inventories leave both flags null: every row is)."""
    return F.coalesce(F.col("is_latest"), F.lit(True)) & ~is_delete_marker()


def is_noncurrent() -> Column:
    """An inventory row of a version a newer one (or a delete marker) hides: bytes the bucket keeps."""
    return ~F.coalesce(F.col("is_latest"), F.lit(True)) & ~is_delete_marker()


def current_objects(rows: DataFrame) -> DataFrame:
    """Inventory rows of objects as they are now (:func:`is_current`)."""
    return rows.where(is_current())


OBJECT_KEY = ("inventory_date", "bucket", "key", "version_id")


def read_inventory(spark: SparkSession, table: str, day: date | Collection[date] | None = None) -> DataFrame:
    """The inventory table's rows of ``day`` (or of each of several dates; every date when None), one row per
    object."""
    version, _, shared = _delivery_units(table)
    return one_row_per_object(read_delta(spark, table, {PARTITION_COLUMNS[0]: day} if day is not None else None,
                                         version=version), shared)


def _delivery_units(table: str) -> tuple[int, frozenset[date], frozenset[tuple[date, str]]]:
    """The table's newest version; every date the table holds at it, and the (date, bucket) pairs whose
    rows may list an object twice, from the log alone: those more than one configuration delivered
    (ingestion refuses a delivery that lists an object twice), and every pair of a table in the layout
    of releases before config_id, which did not refuse them."""
    version, held = newest_partitions(table, list(PARTITION_COLUMNS))
    if held:
        configs = Counter((day, bucket) for day, bucket, _ in held)
        return version, frozenset(day for day, _ in configs), frozenset(pair for pair, n in configs.items() if n > 1)
    earlier = frozenset(partitions(table, list(EARLIER_PARTITION_COLUMNS), version))
    return version, frozenset(day for day, _ in earlier), earlier


class InventoryUnavailable(HousekeepingError):
    """The inventory table cannot answer: no table there, no such date, or too old."""


@dataclass(frozen=True)
class InventorySnapshot:
    """One date of the inventory table: what S3 listed as of about midnight UTC that day, all read from
    one version of the table (a run that reads its rows again reads the same rows)."""

    table: str
    version: int
    day: date
    dates: frozenset[date]  # every date the table holds (a trend reads several)
    rows: DataFrame  # every row of the date: noncurrent versions, delete markers and duplicates too
    shared: frozenset[tuple[date, str]]  # the (date, bucket) pairs whose rows may list an object twice

    def objects(self) -> DataFrame:
        """The date's rows, one per object (:func:`one_row_per_object`)."""
        return one_row_per_object(self.rows, self.shared)

    @property
    def as_of_ms(self) -> int:
        return midnight_utc_ms(self.day)


@renamed_keywords(table="inventory_table", day="inventory_date", max_age_hours="max_inventory_age_hours")
def inventory_snapshot(spark: SparkSession, inventory_table: str, inventory_date: date | None = None,
                       max_inventory_age_hours: float | None = None, now_ms: int | None = None) -> InventorySnapshot:
    """The inventory of ``inventory_date`` (default: the newest date held), named as the jobs name it;
    :class:`InventoryUnavailable` when there is none, or when it is more than ``max_inventory_age_hours``
    older than ``now_ms``."""
    try:
        version, dates, shared = _delivery_units(inventory_table)
    except TableNotFound as exc:
        raise InventoryUnavailable(str(exc)) from None
    day = inventory_date or (max(dates) if dates else None)
    if day is None or day not in dates:
        raise InventoryUnavailable(f"{inventory_table}: no inventory for {day or 'any date'}")
    if max_inventory_age_hours is not None and now_ms is not None:
        age_hours = (now_ms - midnight_utc_ms(day)) / MS_PER_HOUR
        if age_hours > max_inventory_age_hours:
            raise InventoryUnavailable(f"inventory of {day} is {age_hours:.0f} h old, more than "
                                       f"--max-inventory-age-hours {max_inventory_age_hours:g}")
    return InventorySnapshot(inventory_table, version, day, dates,
                             read_delta(spark, inventory_table, {PARTITION_COLUMNS[0]: day}, version=version),
                             frozenset(pair for pair in shared if pair[0] == day))


def held_partitions(table: str) -> set[tuple[date, str, str]]:
    """Every (inventory date, bucket, config_id) the table holds rows of, from its log."""
    try:
        return {(day, bucket, config) for day, bucket, config in partitions(table, list(PARTITION_COLUMNS))}
    except TableNotFound:
        return set()


def one_row_per_object(rows: DataFrame, shared: Collection[tuple[date, str]] | None = None) -> DataFrame:
    """One row per (inventory date, bucket, key, version): two inventory configurations of a
    bucket deliver the same object twice.

    Only the rows of ``shared`` (date, bucket) pairs, where the table's log shows that this can
    happen (``InventorySnapshot.shared``), are merged; the others pass as they are, sparing a
    shuffle of every row. ``None`` merges every row: for rows no ingestion checked.

    A current-only configuration's row carries no version id; where another configuration of
    the bucket lists versions of the key that date, it is the version listed as latest, and is
    matched to it. Of the rows of one object the newest delivery's wins (a lifecycle transition
    between two deliveries changes the storage class, not the modification time), then the newest
    modification time, as in Delta's own inventory vacuum (``maxBy(modificationTime)``)."""
    if shared is None:
        return _merged(rows)
    if not shared:
        return rows
    buckets: dict[date, set[str]] = defaultdict(set)
    for day, bucket in shared:
        buckets[day].add(bucket)
    in_shared = F.coalesce(reduce(or_, [(F.col(PARTITION_COLUMNS[0]) == F.lit(day)) & F.col("bucket").isin(sorted(names))
                                        for day, names in sorted(buckets.items())]), F.lit(False))
    return rows.where(~in_shared).unionByName(_merged(rows.where(in_shared)))


def _merged(rows: DataFrame) -> DataFrame:
    """``rows`` merged into one row per object (:func:`one_row_per_object`)."""
    listed_latest = F.max(F.when(F.col("is_latest") & ~is_delete_marker(),
                                 F.col("version_id"))).over(Window.partitionBy("inventory_date", "bucket", "key"))
    matched = F.col("version_id").isNull() & listed_latest.isNotNull()
    rows = rows.select(*[
        F.when(matched, listed_latest).otherwise(F.col(c)).alias(c) if c == "version_id"
        else F.when(matched, F.coalesce(F.col(c), F.lit(c == "is_latest"))).otherwise(F.col(c)).alias(c)
        if c in ("is_latest", "is_delete_marker") else F.col(c)
        for c in rows.columns])
    others = [c for c in rows.columns if c not in OBJECT_KEY]
    delivered = F.regexp_extract(F.col("manifest_uri"), r"/([^/]*)/manifest\.json$", 1)
    newest = F.struct(delivered, F.col("modificationTime"), F.col("manifest_uri"))
    return rows.groupBy(*OBJECT_KEY).agg(F.max_by(F.struct(*others), newest).alias("_row")).select(
        *OBJECT_KEY, "_row.*").select(*rows.columns)
