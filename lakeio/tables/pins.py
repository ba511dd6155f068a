"""The pins table: a platform team's pins as a Delta table of ours, so that they outlive any schedule.

Append-only: ``pin`` and ``unpin`` each append one row through the one write path (lakeio.tables.write,
put-if-absent commits), so two processes pinning at once both land, and a run reading the table
mid-change reads one committed version: before the other's commit, or after it. A pin of (table,
version) is in force while its newest row is a ``pin``; the rows stay, as who pinned or unpinned
what, when, and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from pyspark.sql import Row, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakeio.errors import HousekeepingError
from lakeio.pins import Pin, PinSource
from lakeio.spark.shapes import local_frame
from lakeio.store import uris
from lakeio.tables.read import read_delta
from lakeio.tables.write import BeforeCommit, write_delta
from lakeio.text import first_line
from lakeio.times import epoch_ms

PIN, UNPIN = "pin", "unpin"
PINS_SCHEMA = StructType([
    StructField("table_root", StringType()),
    StructField("version", LongType()),
    StructField("action", StringType()),  # PIN or UNPIN
    StructField("reason", StringType()),
    StructField("expires_ms", LongType()),
    StructField("set_by", StringType()),
    StructField("set_at_ms", LongType()),
    StructField("asked_as_of_ms", LongType()),  # the instant a pin by timestamp named, resolved to ``version``
    StructField("day", StringType()),  # the UTC day of ``set_at_ms``: the partition
])
PARTITIONS = ["day"]


def append_pin_rows(spark: SparkSession, pins_table: str, pins: Sequence[Pin], action: str, *,
                    asked_as_of_ms: int | None = None, now_ms: int | None = None,
                    before_commit: BeforeCommit | None = None) -> None:
    """One commit of ``pins`` (resolved: each with its version) as ``action`` rows."""
    at = epoch_ms() if now_ms is None else now_ms
    day = datetime.fromtimestamp(at / 1000, tz=timezone.utc).date().isoformat()
    rows = [(str(p.root), p.version, action, p.reason, p.expires_ms, p.set_by, at, asked_as_of_ms, day) for p in pins]
    write_delta(local_frame(spark, rows, PINS_SCHEMA), uris.to_uri(pins_table), PARTITIONS, [{"day": day}],
                mode="append", before_commit=before_commit)


def pins_in_force(spark: SparkSession, pins_table: str) -> list[Pin]:
    """Every pin whose newest row is a ``pin`` (expired ones too: the run reports them), from one version
    of the table; TableNotFound when there is no table there."""
    rows = read_delta(spark, pins_table).collect()
    newest: dict[tuple[str, int], Row] = {}
    for row in sorted(rows, key=lambda r: (r["set_at_ms"], r["action"] == UNPIN)):
        newest[(row["table_root"], row["version"])] = row
    return [Pin(row["table_root"], version=row["version"], reason=row["reason"] or "", expires_ms=row["expires_ms"],
                set_by=row["set_by"], source=PinSource.PINS_TABLE)
            for row in (newest[k] for k in sorted(newest)) if row["action"] == PIN]


class PinsUnreadable(HousekeepingError):
    """The pins table cannot be read: what its pins keep is not known, so nothing may be erased on its word."""


def pins_with_table(spark: SparkSession, given: Sequence[Pin], pins_table: str | None) -> list[Pin]:
    """``given`` and, with ``pins_table``, every pin in force there; PinsUnreadable where it cannot be read
    (missing, unreadable)."""
    if not pins_table:
        return list(given)
    try:
        return [*given, *pins_in_force(spark, pins_table)]
    except Exception as exc:
        raise PinsUnreadable(f"cannot read the pins table {pins_table}: {first_line(exc)} "
                             "(python -m vacuum_jobs pin creates it)") from None
