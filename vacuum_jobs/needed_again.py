"""What a purge keeps of a vacuum run's deletes: the files some table of the lake needs again.

A purge erases for good what a vacuum run hid, so it reads the logs again first, as the vacuum does
before deleting. The vacuum was told what to erase: the tombstones older than its cutoff (its start
less the retention it used, a forced short one included). The purge keeps a file by the first of
these rules that holds, and says which:

1. ``log unreadable``: its table's log cannot be read now; kept this run (the operator must act);
2. ``live again``: a table's current snapshot names it (a Delta ``RESTORE``, a clone of an old
   version, a re-add): restoring it is what that table needs;
3. ``pinned``: a pinned version reads it (docs/pins.md; a pin set after the vacuum hid it): the
   pinned version cannot be read until the file is restored (the operator must act);
4. ``removed again since the run``: its own table holds a tombstone of it newer than the run's
   cutoff, or of unknown age: the file was live again after the run, and that table's time
   travel may read it;
5. ``retention raised since the run``: its own table's retention is longer now than both the run's
   and the table's own at the version the run planned, and the tombstone falls inside it;
6. ``within a table's retention``: another table (a shallow clone) holds a tombstone of it within
   that table's own retention, or the run recorded no retention and its own table's holds it.

Rules 2, 4, 5 and 6 are what the tables need: the purge warns and succeeds. Rules 1 and 3 make it exit 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.deltalog import gates
from lakeio.deltalog.ownership import delta_roots
from lakeio.deltalog.pinned import PinnedRead, PinState, read_pinned
from lakeio.deltalog.references import EVERY_TOMBSTONE, retention_cutoffs
from lakeio.deltalog.replay import Replay, read_logs, replay_logs
from lakeio.deltalog.segments import UnreadableLog, log_segment_at
from lakeio.inventory import current_objects, inventory_snapshot
from lakeio.pins import Pin
from lakeio.spark import catalog
from lakeio.spark.shapes import local_frame
from lakeio.spark.steps import Step, Steps
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.text import StrEnum
from lakeio.times import cutoff_ms


class KeptBecause(StrEnum):
    """Why a purge keeps a file its vacuum run deleted, in the order the rules are tried."""

    LOG_UNREADABLE = "log unreadable"
    LIVE_AGAIN = "live again"
    PINNED = "pinned"
    REMOVED_AGAIN = "removed again since the run"
    RETENTION_RAISED = "retention raised since the run"
    WITHIN_RETENTION = "within a table's retention"


# Kept for a reason the operator must act on: the purge exits 1. The others are what a table needs.
OPERATOR_MUST_ACT = frozenset({KeptBecause.LOG_UNREADABLE, KeptBecause.PINNED})
_ORDER = list(KeptBecause)


@dataclass(frozen=True)
class RunCutoff:
    """Which tombstones of one table the purge keeps for one vacuum run's deletes."""

    run_cutoff_ms: int | None  # the run's start less the retention it used; None: it recorded none
    own_cutoff_ms: int  # what the table keeps: the run's cutoff, earlier where its retention was raised since
    raised_to_hours: float | None = None  # the table's retention now, where it was raised since the run


def run_cutoff(started_ms: int, run_hours: float | None, table_now_hours: float, table_at_run_hours: float | None,
               now_ms: int) -> RunCutoff:
    """The cutoff a purge applies to a file of a table, for the run that deleted it: the run's own
    (``started_ms`` less ``run_hours``), lengthened to the table's retention now only where that was
    raised after the run (``table_at_run_hours``: the table's own at the version the run planned;
    None: not known, so taken as raised). A run that recorded no retention: the table's own now.
    ``table_now_hours`` is ``math.inf`` where the table's setting does not parse (every tombstone kept)."""
    table_now_ms = EVERY_TOMBSTONE if math.isinf(table_now_hours) else cutoff_ms(now_ms, table_now_hours)
    if run_hours is None:
        return RunCutoff(None, table_now_ms)
    cutoff = cutoff_ms(started_ms, run_hours)
    raised = table_now_hours > run_hours and (table_at_run_hours is None or table_now_hours > table_at_run_hours)
    if raised and table_now_ms < cutoff:
        return RunCutoff(cutoff, table_now_ms, table_now_hours)
    return RunCutoff(cutoff, cutoff)


@dataclass(frozen=True)
class VacuumedTable:
    """One (vacuum run, table) pair a purge acts on, as the audit's table row records it."""

    run_id: str
    table_root: str
    started_ms: int
    table_version: int | None
    run_hours: float | None


def needed_again(spark: SparkSession, storage: Storage, replay: Replay, deletes: DataFrame, runs: Iterable[VacuumedTable],
                 now_ms: int, pinned: PinnedRead | None = None) -> DataFrame:
    """``(path, source_run_id, rule, needed_by, detail)`` of each of ``deletes`` (``table_root``,
    ``path``, ``source_run_id``) that a table of ``replay`` (the lake's logs, read now) or a pinned
    version of ``pinned`` needs again: the first rule of the module's that holds, a :class:`KeptBecause`
    value, and what it found."""
    cutoffs = _run_cutoffs(spark, storage, replay, list(runs), now_ms)
    frame = local_frame(spark, [(r, t, c.run_cutoff_ms, c.own_cutoff_ms, c.raised_to_hours) for (r, t), c in cutoffs.items()],
                        "source_run_id string, table_root string, run_cutoff_ms long, own_cutoff_ms long, "
                        "raised_to_hours double")
    others = local_frame(spark, sorted(retention_cutoffs(replay.states.values(), now_ms).items()),
                         "needed_by string, other_cutoff_ms long")
    named = replay.files.select(
        F.col("table_root").alias("needed_by"), "kind", "deletion_timestamp",
        F.explode(F.array("path", "dv_path")).alias("path")).where(F.col("path").isNotNull()).select(
        "needed_by", "kind", "deletion_timestamp", uris.canonical_col(F.col("path")).alias("path"))
    matched = (deletes.select("table_root", "path", "source_run_id").join(F.broadcast(frame), ["source_run_id", "table_root"], "left")
               .join(named, "path").join(F.broadcast(others), "needed_by", "left"))
    rule = _rule(F.col("needed_by") == F.col("table_root"), F.col("deletion_timestamp"))
    found = matched.select("path", "source_run_id", "needed_by", rule.alias("rule"), _detail().alias("detail"))
    if pinned is not None and pinned.files is not None:
        pins = local_frame(spark, [(i, pinned.versions.statuses[label].line()) for i, label in enumerate(pinned.labels)],
                           "pin int, pin_line string")
        found = found.unionByName(deletes.select("path", "source_run_id").join(
            pinned.files.select(uris.canonical_col(F.col("path")).alias("path"), "table_root", "pin"), "path")
            .join(F.broadcast(pins), "pin").select(
            "path", "source_run_id", F.col("table_root").alias("needed_by"), F.lit(KeptBecause.PINNED.value).alias("rule"),
            F.concat(F.col("pin_line"), F.lit("; its version cannot be read until the file is back")).alias("detail")))
    unread = sorted(replay.failures)
    if unread:
        found = found.unionByName(deletes.where(F.col("table_root").isin(unread)).select(
            "path", "source_run_id", F.col("table_root").alias("needed_by"),
            F.lit(KeptBecause.LOG_UNREADABLE.value).alias("rule"), F.lit("its log cannot be read").alias("detail")))
    order = F.lit(None).cast("int")
    for position, kept in reversed(list(enumerate(_ORDER))):  # Spark 3.5's array_position takes no column
        order = F.when(F.col("rule") == kept.value, F.lit(position)).otherwise(order)
    first = found.where(F.col("rule").isNotNull()).groupBy("path", "source_run_id").agg(
        F.min(F.struct(order.alias("order"), "rule", "needed_by", "detail")).alias("first"))
    return first.select("path", "source_run_id", "first.rule", "first.needed_by", "first.detail")


def needed_by_the_lake(spark: SparkSession, progress: Steps, audit: DataFrame, selected: DataFrame, warnings: list[str],
                       now_ms: int, inventory_table: str | None = None, pins: Sequence[Pin] = ()) -> DataFrame:
    """The ``selected`` deletes (audit rows with their ``source_run_id``) some table of the lake needs
    again, with the rule that keeps each (:func:`needed_again`). The lake: every table the audit names,
    and with ``inventory_table`` every Delta table the inventory shows; ``pins``' versions too. A table
    whose log cannot be read keeps its own files this run (said in ``warnings``). Nothing ``selected``,
    no log is read: no need could keep anything (an unreadable inventory and broken pins are still said)."""
    none = local_frame(spark, [], "path string, source_run_id string, rule string, needed_by string, detail string")
    snapshot = inventory_snapshot(spark, catalog.resolve(spark, inventory_table)) if inventory_table else None
    storage = Storage(spark)
    pinned = None
    if pins:
        progress.begin(Step.READING_PINS, f"reading {len(pins)} pinned version(s)")
        pinned = read_pinned(spark, storage, pins, now_ms)
        warnings += [s.line() for s in pinned.versions.statuses.values() if s.state is PinState.BROKEN]
    if not selected.take(1):
        return none
    roots = {uris.table_root(r["table_root"]) for r in
             audit.where(F.col("path").isNull()).select("table_root").distinct().collect()}
    if snapshot is not None:
        roots.update(delta_roots(current_objects(snapshot.rows)))
    if not roots and pinned is None:
        return none
    progress.begin(Step.READING_LOGS, f"reading the logs of {len(roots)} table(s) for the files they need again")
    replay = read_logs(spark, storage, sorted(roots), check_paths=False)
    for root in sorted(replay.failures):
        warnings.append(f"{root}: its log cannot be read ({replay.failures[root]}): its files are not purged this run")
    pairs = selected.select(F.col("source_run_id").alias("run_id"), "table_root").distinct()
    runs = [VacuumedTable(r["run_id"], r["table_root"], r["started_ms"], r["table_version"], r["retention_hours"])
            for r in audit.where(F.col("path").isNull() & F.col("source_run_id").isNull()).join(pairs, ["run_id", "table_root"])
            .groupBy("run_id", "table_root").agg(F.min(F.unix_millis("timestamp")).alias("started_ms"),
                                                 F.max("table_version").alias("table_version"),
                                                 F.min("retention_hours").alias("retention_hours")).collect()]
    return needed_again(spark, storage, replay, selected, runs, now_ms, pinned)


def _rule(own: Column, removed: Column) -> Column:
    """The rule a file named by one log row falls under (null: that row needs nothing). A cutoff not
    known (no table row of the run in the audit, a table not read) keeps every tombstone."""
    every = F.lit(EVERY_TOMBSTONE)
    run = F.col("run_cutoff_ms")
    kept_other = F.coalesce(F.col("other_cutoff_ms"), every)
    kept_own = F.coalesce(F.col("own_cutoff_ms"), kept_other)
    return (F.when(F.col("kind") == "add", F.lit(KeptBecause.LIVE_AGAIN.value))
            .when(own & run.isNotNull() & (removed.isNull() | (removed >= run)), F.lit(KeptBecause.REMOVED_AGAIN.value))
            .when(own & run.isNotNull() & (removed >= kept_own), F.lit(KeptBecause.RETENTION_RAISED.value))
            .when(own & run.isNull() & (removed.isNull() | (removed >= kept_own)), F.lit(KeptBecause.WITHIN_RETENTION.value))
            .when(~own & (removed.isNull() | (removed >= kept_other)), F.lit(KeptBecause.WITHIN_RETENTION.value)))


def _detail() -> Column:
    """What the log row shows: when the table removed the file, against the run's cutoff."""
    removed = F.col("deletion_timestamp")
    when = F.coalesce(_iso(removed), F.lit("an unknown time"))
    return (F.when(F.col("kind") == "add", F.lit("its current snapshot reads it"))
            .otherwise(F.concat(F.lit("a tombstone of "), when,
                                F.when(F.col("run_cutoff_ms").isNotNull(), F.concat(
                                    F.lit(" against the run's cutoff "),
                                    _iso(F.col("run_cutoff_ms"))))
                                .otherwise(F.lit("")),
                                F.when(F.col("raised_to_hours").isNotNull(), F.concat(
                                    F.lit(", its retention now "), F.col("raised_to_hours").cast("string"), F.lit(" h")))
                                .otherwise(F.lit("")))))


def _iso(epoch_ms: Column) -> Column:
    """Epoch milliseconds as an ISO-8601 UTC instant, as the reports spell times."""
    return F.date_format(F.timestamp_millis(epoch_ms), "yyyy-MM-dd'T'HH:mm:ss'Z'")


def _run_cutoffs(spark: SparkSession, storage: Storage, replay: Replay, runs: list[VacuumedTable],
                 now_ms: int) -> dict[tuple[str, str], RunCutoff]:
    """Each (run, table) pair's cutoff; the table's retention at the run's version is read from its
    log only where it matters (the table's retention now is longer than the run's)."""
    now_hours: dict[str, float] = {}
    for root, state in replay.states.items():
        try:
            now_hours[root] = gates.table_retention_hours(state)
        except ValueError:
            now_hours[root] = math.inf
    asked = {(r.table_root, r.table_version) for r in runs if r.table_root in now_hours and r.run_hours is not None
             and r.table_version is not None and now_hours[r.table_root] > r.run_hours}
    at_run = _retention_at(spark, storage, asked)
    return {(r.run_id, r.table_root): run_cutoff(r.started_ms, r.run_hours, now_hours[r.table_root],
                                                 None if r.table_version is None
                                                 else at_run.get((r.table_root, r.table_version)), now_ms)
            for r in runs if r.table_root in now_hours}


def _retention_at(spark: SparkSession, storage: Storage, asked: set[tuple[str, int]]) -> dict[tuple[str, int], float]:
    """The table's own retention at each (root, version) asked, from its log at that version; a
    version the log no longer holds, or whose setting does not parse, is left out (taken as unknown)."""
    found: dict[tuple[str, int], float] = {}
    pending = sorted(asked)
    while pending:  # one version per table a round: a replay's states are keyed by table
        this_round = {root: version for root, version in reversed(pending)}
        pending = [pair for pair in pending if this_round[pair[0]] != pair[1]]
        segments = []
        for root, version in this_round.items():
            try:
                segments.append(log_segment_at(storage, root, version))
            except UnreadableLog:
                continue
        if not segments:
            continue
        replay = replay_logs(spark, segments, check_paths=False)
        for root, state in replay.states.items():
            try:
                found[(root, this_round[root])] = gates.table_retention_hours(state)
            except ValueError:
                continue
    return found
