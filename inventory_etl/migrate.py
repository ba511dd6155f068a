"""Copying an inventory table written by an earlier release into the current layout.

Earlier releases partitioned the table by (inventory_date, bucket), so two inventory
configurations of a bucket replaced each other's rows. A Delta table cannot change its
partitioning in one atomic commit that also keeps its data, so the rows are copied into
a new table in one commit; the old table is left as it was. Re-running the copy replaces
what an earlier copy wrote.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakeio.errors import InvalidOption
from lakeio.inventory import INVENTORY_SCHEMA, PARTITION_COLUMNS, one_row_per_object
from lakeio.store import uris
from lakeio.tables.read import read_delta
from lakeio.tables.write import WriteResult, write_delta


def migrate(spark: SparkSession, source: str, target: str) -> WriteResult:
    """Every current row of ``source`` into ``target`` (new, or an earlier copy), in today's layout,
    one row per object: readers merge only what two configurations delivered, since ingestion now
    refuses a delivery that lists an object twice."""
    if uris.canonical(source) == uris.canonical(target):
        raise InvalidOption(f"{source}: copy it into a new table, not into itself")
    rows = read_delta(spark, source)
    present = set(rows.columns)
    rows = one_row_per_object(rows.select(*[F.col(f.name) if f.name in present else F.lit(None).cast(f.dataType).alias(f.name)
                                            for f in INVENTORY_SCHEMA.fields]))  # earlier releases kept repeated rows
    partitions = [
        {"inventory_date": r[0].isoformat(), "bucket": r[1], "config_id": r[2]}
        for r in rows.select(*PARTITION_COLUMNS).distinct().collect()
    ]
    return write_delta(rows, target, PARTITION_COLUMNS, partitions, mode="replace_partitions")
