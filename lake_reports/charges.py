"""Storage chargeback: who stores what, at what cost, from one inventory date and the Delta logs.

Every inventory row of the date lands in exactly one (bucket, table, category, storage
class) cell, so the cells add up to the inventory's own totals per bucket; the result
checks that. Categories:

- ``live``: the current snapshot needs it (data files and their deletion vectors);
- ``time_travel``: only a tombstone younger than the table's retention needs it;
- ``pinned``: only a pinned version reads it (``--pins-table``, ``keep_versions``: docs/pins.md), so
  this is what the pins cost;
- ``reclaimable``: what a vacuum with the table's retention would delete now;
- ``log``: the table's ``_delta_log/``;
- ``other``: kept by vacuum for other reasons (hidden files such as ``_SUCCESS``, folder
  markers, files nobody committed that are younger than the retention, files another
  table's log needs, such as a shallow clone's);
- ``noncurrent`` and ``delete_marker``: older versions and delete markers (versioned buckets);
- ``untracked``: current objects under no Delta table (``table`` is null);
- ``unclassified``: objects of a table whose log could not be read (the reason is reported).

Objects belong to the longest Delta table root above them. The log is read as it is
now, while the inventory lists objects as of its date.
"""

from __future__ import annotations

import csv
import json
import logging
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from datetime import date, timedelta
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.deltalog import gates
from lakeio.deltalog.ownership import delta_roots, with_owner
from lakeio.deltalog.pinned import PinStatus, read_pins
from lakeio.deltalog.policy import Category, TablePolicy, classify, hidden_patterns, policy_frame
from lakeio.deltalog.references import needed_elsewhere, retention_cutoffs
from lakeio.deltalog.replay import Replay, read_unsure_too
from lakeio.errors import HousekeepingError, InvalidOption
from lakeio.inventory import (
    PARTITION_COLUMNS,
    InventoryUnavailable,
    current_objects,
    inventory_snapshot,
    is_delete_marker,
    read_inventory,
)
from lakeio.pins import KeepVersions, Pin
from lakeio.pins import keep_versions as pins_given
from lakeio.prices import DEFAULT_USD_PER_GB_MONTH, monthly_usd
from lakeio.spark import catalog
from lakeio.spark.session import check_workers
from lakeio.spark.steps import Step, Steps, one_run
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.store.uris import TableRoot
from lakeio.tables.pins import PinsUnreadable
from lakeio.text import StrEnum, human_bytes, shorten, usd
from lakeio.times import cutoff_ms, epoch_ms, iso_utc

log = logging.getLogger(__name__)



class ChargeCategory(StrEnum):
    """Where an object's bytes are charged (the module's docstring says what each holds), in report order."""

    LIVE = "live"
    TIME_TRAVEL = "time_travel"
    PINNED = "pinned"
    RECLAIMABLE = "reclaimable"
    LOG = "log"
    OTHER = "other"
    NONCURRENT = "noncurrent"
    DELETE_MARKER = "delete_marker"
    UNTRACKED = "untracked"
    UNCLASSIFIED = "unclassified"


CATEGORIES = tuple(ChargeCategory)
# The terminal table's columns, each the categories it adds up: every category is in one, so a row adds up to its total
# (the pinned column only where some table holds pinned bytes: it is empty without pins).
SUMMARY_COLUMNS = (("live", (ChargeCategory.LIVE,)), ("timetravel", (ChargeCategory.TIME_TRAVEL,)),
            ("pinned", (ChargeCategory.PINNED,)),
            ("reclaim", (ChargeCategory.RECLAIMABLE,)), ("log", (ChargeCategory.LOG,)),
            ("noncurr", (ChargeCategory.NONCURRENT, ChargeCategory.DELETE_MARKER)),
            ("other", (ChargeCategory.OTHER, ChargeCategory.UNTRACKED, ChargeCategory.UNCLASSIFIED)))
NO_GROWTH = "growth/day: the change since the oldest inventory date the table holds; it holds one date so far"
UNKNOWN_CLASS = "UNKNOWN"  # the inventory has no storage class for the object
NO_CLASS = "NONE"  # a delete marker's: S3 stores no bytes for it, in no storage class


class ChargebackError(HousekeepingError):
    """The inventory cannot answer: no table there, or no such date."""


@dataclass
class ChargebackOptions:
    inventory_table: str
    inventory_date: date | None = None  # default: the newest
    prices: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_USD_PER_GB_MONTH))
    trend_days: int = 90  # how far back the trend reaches from the inventory date
    now_ms: int | None = None  # for tests; default: the clock at the start
    keep_versions: tuple[Pin, ...] = ()  # pinned versions (lakeio.pins): what only they keep is ``pinned``
    pins_table: str | None = None  # the pins table (lakeio.tables.pins): its pins too

    def __post_init__(self) -> None:
        if self.trend_days < 0:
            raise InvalidOption("trend_days must be >= 0")


@dataclass(frozen=True)
class Cell:
    """Objects and bytes of one (bucket, table, category, storage class)."""

    bucket: str
    table: str | None  # canonical table root; None when untracked
    category: ChargeCategory
    storage_class: str
    objects: int
    bytes: int
    usd_per_month: float | None  # None when the storage class has no price


@dataclass
class TableCharge:
    """One table's (or one bucket's untracked objects') totals, split by category and class."""

    bucket: str
    table: str | None
    objects: int = 0
    bytes: int = 0
    usd_per_month: float = 0.0
    bytes_by_category: dict[str, int] = field(default_factory=dict)
    objects_by_category: dict[str, int] = field(default_factory=dict)
    usd_by_category: dict[str, float] = field(default_factory=dict)  # per month; priced storage classes only
    bytes_by_storage_class: dict[str, int] = field(default_factory=dict)
    growth_bytes: int | None = None  # since the first inventory date of the trend
    growth_bytes_per_day: float | None = None


@dataclass(frozen=True)
class TrendPoint:
    inventory_date: str
    bucket: str
    table: str | None
    objects: int
    bytes: int


@dataclass
class ChargebackResult:
    inventory_table: str
    inventory_date: str
    generated_at: str
    prices: dict[str, float]
    cells: list[Cell] = field(default_factory=list)
    bucket_totals: dict[str, dict[str, int]] = field(default_factory=dict)  # from the inventory itself
    trend: list[TrendPoint] = field(default_factory=list)
    unreadable: dict[TableRoot, str] = field(default_factory=dict)  # why its log could not be read
    pins: list[PinStatus] = field(default_factory=list)  # each pin of the run, as a vacuum would find it
    elapsed_seconds: float = 0.0
    step_seconds: dict[str, float] = field(default_factory=dict)  # each step's time, in order

    @property
    def unpriced(self) -> list[str]:
        """Storage classes holding bytes that the price table does not know."""
        return sorted({c.storage_class for c in self.cells if c.usd_per_month is None and c.bytes})

    @property
    def balanced(self) -> bool:
        """Do the cells add up to the inventory's own totals, bucket by bucket?"""
        sums: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for cell in self.cells:
            sums[cell.bucket][0] += cell.objects
            sums[cell.bucket][1] += cell.bytes
        return {b: {"objects": o, "bytes": n} for b, (o, n) in sums.items()} == self.bucket_totals

    @property
    def ok(self) -> bool:
        return self.balanced and not self.unreadable and not self.unpriced

    def tables(self) -> list[TableCharge]:
        """Per table (and per bucket for untracked objects), largest first."""
        found: dict[tuple[str, str | None], TableCharge] = {}
        for cell in self.cells:
            charge = found.setdefault((cell.bucket, cell.table), TableCharge(cell.bucket, cell.table))
            charge.objects += cell.objects
            charge.bytes += cell.bytes
            charge.usd_per_month += cell.usd_per_month or 0.0
            for mapping, key, value in ((charge.bytes_by_category, cell.category, cell.bytes),
                                        (charge.objects_by_category, cell.category, cell.objects),
                                        (charge.bytes_by_storage_class, cell.storage_class, cell.bytes)):
                mapping[key] = mapping.get(key, 0) + value
            charge.usd_by_category[cell.category] = charge.usd_by_category.get(cell.category, 0.0) + (cell.usd_per_month or 0.0)
        points: dict[tuple[str, str | None], list[TrendPoint]] = defaultdict(list)
        for point in self.trend:
            points[(point.bucket, point.table)].append(point)
        for owner, charge in found.items():
            series = sorted(points.get(owner, []), key=lambda p: p.inventory_date)
            if len(series) >= 2:
                days = (date.fromisoformat(series[-1].inventory_date) - date.fromisoformat(series[0].inventory_date)).days
                charge.growth_bytes = series[-1].bytes - series[0].bytes
                charge.growth_bytes_per_day = charge.growth_bytes / days
        return sorted(found.values(), key=lambda t: (-t.bytes, t.bucket, t.table or ""))

    def to_dict(self) -> dict[str, Any]:
        return {
            "inventory_table": self.inventory_table,
            "inventory_date": self.inventory_date,
            "generated_at": self.generated_at,
            "balanced": self.balanced,
            "bucket_totals": self.bucket_totals,
            "unreadable_tables": self.unreadable,
            "pins": [p.to_dict() for p in self.pins],
            "unpriced_storage_classes": self.unpriced,
            "prices_usd_per_gb_month": self.prices,
            "tables": [asdict(t) for t in self.tables()],
            "cells": [asdict(c) for c in self.cells],
            "trend": [asdict(p) for p in self.trend],
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "step_seconds": self.step_seconds,
        }

    def write_json(self, path: str) -> None:
        with open(path, "w") as out:
            json.dump(self.to_dict(), out, indent=2)
            out.write("\n")

    def write_csv(self, cells_path: str, tables_path: str, trend_path: str) -> None:
        """Three flat files: every cell, one line per table, and the trend."""
        with open(cells_path, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["inventory_date", "bucket", "table", "category", "storage_class", "objects", "bytes",
                             "usd_per_month"])
            for c in self.cells:
                writer.writerow([self.inventory_date, c.bucket, c.table or "", c.category, c.storage_class,
                                 c.objects, c.bytes, "" if c.usd_per_month is None else f"{c.usd_per_month:.6f}"])
        with open(tables_path, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["inventory_date", "bucket", "table", "objects", "bytes",
                             *[f"{c}_bytes" for c in CATEGORIES], "usd_per_month", "growth_bytes",
                             "growth_bytes_per_day"])
            for t in self.tables():
                writer.writerow([self.inventory_date, t.bucket, t.table or "", t.objects, t.bytes,
                                 *[t.bytes_by_category.get(c, 0) for c in CATEGORIES], f"{t.usd_per_month:.6f}",
                                 "" if t.growth_bytes is None else t.growth_bytes,
                                 "" if t.growth_bytes_per_day is None else f"{t.growth_bytes_per_day:.1f}"])
        with open(trend_path, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["inventory_date", "bucket", "table", "objects", "bytes"])
            for p in self.trend:
                writer.writerow([p.inventory_date, p.bucket, p.table or "", p.objects, p.bytes])

    def summary(self, top: int = 15) -> str:
        tables = self.tables()
        total_bytes = sum(t.bytes for t in tables)
        total_usd = sum(t.usd_per_month for t in tables)
        prefix = uris.common_folder([t.table for t in tables if t.table])
        pinned = any(t.bytes_by_category.get(ChargeCategory.PINNED) for t in tables)
        columns = [(heading, held) for heading, held in SUMMARY_COLUMNS if pinned or ChargeCategory.PINNED not in held]
        lines = [
            f"chargeback of {self.inventory_table} as of {self.inventory_date}: {len(tables)} table(s) and "
            f"untracked areas, {human_bytes(total_bytes)}, {usd(total_usd)}/month"
            + (f"; tables under {prefix}" if prefix else ""),
            f"{'table':<40} {'total':>10} " + " ".join(f"{heading:>10}" for heading, _ in columns)
            + f" {'$/month':>8} {'growth/day':>11}",
        ]
        for t in tables[:top]:
            name = t.table.removeprefix(prefix) if t.table else f"(untracked in {t.bucket})"
            growth = "" if t.growth_bytes_per_day is None else human_bytes(int(t.growth_bytes_per_day))
            b = t.bytes_by_category
            lines.append(f"{shorten(name, 40):<40} {human_bytes(t.bytes):>10} "
                         + " ".join(f"{human_bytes(sum(b.get(c, 0) for c in held)):>10}" for _, held in columns)
                         + f" {usd(t.usd_per_month):>8} {growth:>11}")
        if len(tables) > top:
            lines.append(f"... and {len(tables) - top} more in the CSV/JSON output")
        if any(t.bytes_by_category.get(ChargeCategory.RECLAIMABLE, 0) for t in tables):
            lines.append(f"reclaim: what the inventory of {self.inventory_date} lists that a vacuum may delete; a vacuum "
                         "run after it removed what it deleted, which the next delivery shows")
        for t in tables:
            if t.bytes_by_category.get(ChargeCategory.PINNED):
                lines.append(f"pinned in {t.table}: {human_bytes(t.bytes_by_category[ChargeCategory.PINNED])}, "
                             f"{usd(t.usd_by_category.get(ChargeCategory.PINNED, 0.0))}/month that only its pins keep")
        lines += [f"{p.line()}: {human_bytes(p.bytes)} in {p.files} file(s)" for p in self.pins]
        if not any(t.growth_bytes_per_day is not None for t in tables):
            lines.append(NO_GROWTH)
        lines.append("totals match the inventory, bucket by bucket" if self.balanced
                     else "ERROR: the split does not add up to the inventory's totals")
        for root, reason in self.unreadable.items():
            lines.append(f"unclassified {root}: {reason}")
        if self.unpriced:
            lines.append(f"no price for storage class(es) {', '.join(self.unpriced)}: pass --prices")
        return "\n".join(lines)


def chargeback(
    spark: SparkSession,
    inventory_table: str,
    *,
    inventory_date: date | None = None,
    prices: dict[str, float] | None = None,
    trend_days: int = ChargebackOptions.trend_days,
    now_ms: int | None = None,
    keep_versions: KeepVersions | None = None,
    pins_table: str | None = None,
) -> ChargebackResult:
    """Who stores what, where, at what cost: every object of one inventory date in one (bucket,
    table, category, storage class) cell.

    Args:
        spark: the session to run in.
        inventory_table: the inventory Delta table (a URI or a catalog name).
        inventory_date: the date to charge; default: the newest.
        prices: USD per GB-month by storage class; default: the built-in list (``lakeio.prices``).
        trend_days: how far back the growth trend reaches from the inventory date.
        now_ms: the clock that decides time travel against reclaimable, epoch milliseconds (tests); default: now.
        keep_versions: pinned versions, as ``vacuum_jobs.vacuum`` takes them: what only they read is ``pinned``.
        pins_table: the pins table (``python -m vacuum_jobs pin`` writes it): its pins too.

    Returns:
        The :class:`ChargebackResult`; ``balanced`` says the cells add up to the inventory's totals.

    Raises:
        ChargebackError: no inventory table there, or no such date, or the pins table cannot be read.
    """
    options = ChargebackOptions(inventory_table, inventory_date, dict(DEFAULT_USD_PER_GB_MONTH) if prices is None
                                else prices, trend_days, now_ms, pins_given(keep_versions), pins_table)
    return Chargeback(spark, options).execute()


class Chargeback:
    """One action: load the inventory date, find the tables, replay their logs, split, price, trend."""

    def __init__(self, spark: SparkSession, options: ChargebackOptions):
        self.spark = spark
        self.options = replace(options, inventory_table=catalog.resolve(spark, options.inventory_table))
        self.progress = Steps(spark, log)
        check_workers(spark)

    @one_run
    def execute(self) -> ChargebackResult:
        started = time.monotonic()
        self.progress.restart()
        self.progress.begin(Step.READING_INVENTORY, "reading the inventory and finding its Delta tables")
        now_ms = epoch_ms() if self.options.now_ms is None else self.options.now_ms
        try:
            inventory = inventory_snapshot(self.spark, self.options.inventory_table, self.options.inventory_date)
        except InventoryUnavailable as exc:
            raise ChargebackError(str(exc)) from None
        day = inventory.day
        result = ChargebackResult(uris.to_uri(self.options.inventory_table), day.isoformat(),
                                  iso_utc(now_ms),
                                  dict(self.options.prices))
        rows = inventory.objects().select(
            uris.canonical_col(F.col("path")).alias("path"), "bucket", "length", "modificationTime", "isDir",
            "is_latest", "is_delete_marker", "storage_class")
        # Read by discovery, the split and the totals: kept when merging shuffled them; a plain scan
        # of the inventory is cheaper to repeat than to cache (measured on the 1M lake).
        kept = rows.persist(StorageLevel.MEMORY_AND_DISK) if inventory.shared else rows
        try:
            current = current_objects(kept)
            roots = delta_roots(current)
            self.progress(f"inventory of {day}: {len(roots)} Delta table(s)")  # found within the date's step
            replay = self._replay_logs(roots, result)
            policies = self._policies(replay, result, now_ms)
            pinned = self._pinned(result, now_ms)
            result.cells = self._split(kept, roots, policies, replay, now_ms, pinned)
            result.bucket_totals = self._bucket_totals(kept)
        finally:
            kept.unpersist()
        result.trend = self._trend(day, inventory.dates, roots, result.cells)
        result.elapsed_seconds, result.step_seconds = time.monotonic() - started, self.progress.seconds()
        return result

    def _replay_logs(self, roots: list[TableRoot], result: ChargebackResult) -> Replay:
        self.progress.begin(Step.READING_LOGS, f"replaying {len(roots)} log(s)")
        replay = read_unsure_too(self.spark, Storage(self.spark), roots)
        result.unreadable.update(replay.failures)
        return replay

    def _pinned(self, result: ChargebackResult, now_ms: int) -> DataFrame | None:
        """What the pins' versions read (shapes.PINNED_FILES), their statuses in ``result``; None without pins."""
        try:
            read = read_pins(self.spark, Storage(self.spark), self.progress, self.options.keep_versions,
                             self.options.pins_table, now_ms)
        except PinsUnreadable as exc:
            raise ChargebackError(str(exc)) from None
        if read is None:
            return None
        result.pins = list(read.versions.statuses.values())
        return read.files

    def _policies(self, replay: Replay, result: ChargebackResult, now_ms: int) -> list[TablePolicy]:
        """Each readable table's own retention decides time travel versus reclaimable."""
        policies = []
        for root, state in sorted(replay.states.items()):
            if root in replay.failures:  # its own files stay unclassified; what it names still counts (_split)
                continue
            try:
                hours = gates.table_retention_hours(state)
            except ValueError as exc:
                result.unreadable[root] = f"delta.deletedFileRetentionDuration: {exc}"
                continue
            try:
                policies.append(TablePolicy.for_state(state, cutoff_ms(now_ms, hours)))
            except ValueError as exc:
                result.unreadable[root] = str(exc)
        return policies

    def _split(self, rows: DataFrame, roots: list[TableRoot], policies: list[TablePolicy], replay: Replay,
               now_ms: int, pinned: DataFrame | None) -> list[Cell]:
        self.progress.begin(Step.SPLITTING, "splitting every object by table, category and storage class")
        tables = policy_frame(self.spark, policies)
        files = replay.files.join(F.broadcast(tables.select("table_root", "cutoff_ms")), "table_root")
        owned = with_owner(rows, roots).join(F.broadcast(tables), "table_root", "left")
        relative = F.expr("substring(path, length(table_root) + 2)")
        category = (
            F.when(is_delete_marker(), ChargeCategory.DELETE_MARKER.value)
            .when(~F.coalesce(F.col("is_latest"), F.lit(True)), ChargeCategory.NONCURRENT.value)
            .when(F.col("table_root").isNull(), ChargeCategory.UNTRACKED.value)
            .when(F.col("cutoff_ms").isNull(), ChargeCategory.UNCLASSIFIED.value)
            .when(relative.startswith("_delta_log/"), ChargeCategory.LOG.value)
            .when((F.col("category") == Category.KEPT.value) & F.col("live"), ChargeCategory.LIVE.value)
            .when(F.col("category") == Category.KEPT.value, ChargeCategory.TIME_TRAVEL.value)
            .when(F.col("category") == Category.PINNED.value, ChargeCategory.PINNED.value)
            .when(F.col("category") == Category.CANDIDATE.value, ChargeCategory.RECLAIMABLE.value)
            .otherwise(ChargeCategory.OTHER.value)
        )
        cutoffs = retention_cutoffs(replay.states.values(), now_ms)  # the policies' own, and the unreadable tables' too
        references = needed_elsewhere(replay, cutoffs, roots).frame
        split = classify(owned, files, hidden_patterns(policies), references, pinned).select(
            "bucket", "table_root", category.alias("charge_category"),
            F.when(F.coalesce(F.col("is_delete_marker"), F.lit(False)), F.lit(NO_CLASS))
            .otherwise(F.coalesce(F.upper("storage_class"), F.lit(UNKNOWN_CLASS))).alias("storage_class"), "length")
        cells = []
        for row in split.groupBy("bucket", "table_root", "charge_category", "storage_class").agg(
            F.count(F.lit(1)).alias("objects"), F.coalesce(F.sum("length"), F.lit(0)).alias("bytes")
        ).collect():
            price = self.options.prices.get(row["storage_class"])
            cells.append(Cell(row["bucket"], row["table_root"], ChargeCategory(row["charge_category"]), row["storage_class"],
                              row["objects"], row["bytes"],
                              None if price is None else monthly_usd(row["bytes"], price)))
        return sorted(cells, key=lambda c: (c.bucket, c.table or "", CATEGORIES.index(c.category), c.storage_class))

    @staticmethod
    def _bucket_totals(rows: DataFrame) -> dict[str, dict[str, int]]:
        return {
            r["bucket"]: {"objects": r["objects"], "bytes": r["bytes"]}
            for r in rows.groupBy("bucket").agg(F.count(F.lit(1)).alias("objects"),
                                                F.coalesce(F.sum("length"), F.lit(0)).alias("bytes")).collect()
        }

    def _trend(self, day: date, dates: frozenset[date], roots: list[TableRoot], cells: list[Cell]) -> list[TrendPoint]:
        """Objects and bytes per table on every inventory date of the window, attributed to today's
        table roots and each object counted once, as the split counts it: today's from the split's
        cells (not read again), the earlier dates' read from the inventory."""
        since = day - timedelta(days=self.options.trend_days)
        earlier = sorted(d for d in dates if since <= d < day)
        self.progress.begin(Step.TREND, f"trend over {len(earlier) + 1} inventory date(s) since {min(earlier, default=day)}")
        today: dict[tuple[str, str | None], tuple[int, int]] = {}
        for cell in cells:
            objects, size = today.get((cell.bucket, cell.table), (0, 0))
            today[(cell.bucket, cell.table)] = (objects + cell.objects, size + cell.bytes)
        points = [TrendPoint(day.isoformat(), bucket, table, objects, size)
                  for (bucket, table), (objects, size) in today.items()]
        if earlier:
            rows = read_inventory(self.spark, self.options.inventory_table, earlier).select(
                uris.canonical_col(F.col("path")).alias("path"), "bucket", "length", PARTITION_COLUMNS[0])
            points += [TrendPoint(r[PARTITION_COLUMNS[0]].isoformat(), r["bucket"], r["table_root"], r["objects"], r["bytes"])
                       for r in with_owner(rows, roots).groupBy(PARTITION_COLUMNS[0], "bucket", "table_root").agg(
                           F.count(F.lit(1)).alias("objects"), F.coalesce(F.sum("length"), F.lit(0)).alias("bytes"))
                       .collect()]
        return sorted(points, key=lambda p: (p.inventory_date, p.bucket, p.table or ""))
