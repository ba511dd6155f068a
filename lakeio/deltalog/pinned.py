"""Pinned versions as Delta reads them: whether the log still reaches each, when its log cleanup will
stop reaching it, and the files each needs (docs/pins.md).

Delta reads version ``v`` from the newest complete checkpoint at or below it plus every commit up to
it, or from the commits since 0 (segments.log_segment_at): a pin is *readable* while those log files
are there, and *broken* once they are not. Delta's log cleanup (``MetadataCleanup``, run after each
checkpoint unless ``delta.enableExpiredLogCleanup`` is false) deletes the log files of every version
below the newest checkpoint whose modification time is at or before midnight UTC of (now -
``delta.logRetentionDuration``, 30 days by default): ``v`` goes once a checkpoint above it exists and
its commit is older than that. So the first instant cleanup may take it is the midnight after its
commit plus the log retention. A version whose log is whole but whose files are gone is broken too:
the plan names those (vacuum_jobs.plan).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.deltalog.gates import parse_interval_hours
from lakeio.deltalog.replay import Replay, replay_logs
from lakeio.deltalog.segments import LogSegment, UnreadableLog, segment_from_listing
from lakeio.pins import Pin
from lakeio.spark.shapes import PINNED_FILES, local_frame
from lakeio.spark.steps import Step, Steps
from lakeio.store import uris
from lakeio.store.filesystem import FileStatus, Storage
from lakeio.store.uris import TableRoot
from lakeio.tables.pins import pins_with_table
from lakeio.text import StrEnum, first_line
from lakeio.times import hours_ms, iso_utc

DEFAULT_LOG_RETENTION = "interval 30 days"  # delta.logRetentionDuration's default
WARNING_DAYS = 14  # a pin cleanup may take within this many days is at risk
_DAY_MS = 86_400_000
_VERSIONED = re.compile(r"^(\d{20})\.(json|checkpoint\.)")
_COMMIT = re.compile(r"\d{20}\.json")


class PinState(StrEnum):
    HELD = "held"  # readable, and no log cleanup can take it within WARNING_DAYS (or before it expires)
    AT_RISK = "at_risk"  # readable now; Delta's log cleanup may take it from ``unreadable_from``
    BROKEN = "broken"  # Delta can no longer read the version: ``why``
    EXPIRED = "expired"  # past its expiry: no longer kept


@dataclass
class PinStatus:
    """What one run found of one pin; ``files`` and ``bytes`` are the pinned version's (data and deletion
    vectors; a table's ``pinned_files`` count what only pins kept)."""

    pin: Pin
    state: PinState = PinState.HELD
    why: str | None = None
    unreadable_from: str | None = None  # ISO-8601 UTC: the first instant Delta's log cleanup may take it
    advice: str | None = None  # the table setting that keeps it readable
    files: int = 0
    bytes: int = 0
    commit_ms: int | None = None  # its commit file's modification time
    checkpoint_above: bool = False  # the log holds a checkpoint above it: cleanup may remove it

    def broken(self, why: str) -> None:
        self.state, self.why, self.unreadable_from, self.advice = PinState.BROKEN, why, None, None

    def to_dict(self) -> dict[str, object]:
        """As reports carry it (schemas/vacuum-report.schema.json ``pin``)."""
        pin = self.pin
        return {"table": str(pin.root), "version": pin.version, "reason": pin.reason, "set_by": pin.set_by,
                "source": str(pin.source), "expires": None if pin.expires_ms is None else iso_utc(pin.expires_ms),
                "state": str(self.state), "why": self.why, "unreadable_from": self.unreadable_from,
                "advice": self.advice, "files": self.files, "bytes": self.bytes}

    def line(self) -> str:
        """One line for people: the pin, its state and why."""
        by = f", set by {self.pin.set_by}" if self.pin.set_by else ""
        reason = f" ({self.pin.reason}{by})" if self.pin.reason or by else ""
        text = f"pin {self.pin.label}{reason}: {self.state}"
        if self.why:
            text += f": {self.why}"
        if self.advice and self.state is PinState.AT_RISK:
            text += f"; {self.advice}"
        return text


@dataclass
class PinnedVersions:
    """The pins of one run, resolved: each one's status (by label) and the log segment of each readable one."""

    statuses: dict[str, PinStatus] = field(default_factory=dict)
    segments: dict[str, LogSegment] = field(default_factory=dict)


def resolve_pins(storage: Storage, pins: Iterable[Pin], now_ms: int) -> PinnedVersions:
    """Each pin's version (an instant resolved to the version current then, as Delta's time travel does)
    and whether the log still reaches it, from one listing of each pinned table's ``_delta_log/``."""
    found = PinnedVersions()
    listings: dict[TableRoot, list[FileStatus] | str] = {}
    for pin in sorted(dict.fromkeys(pins), key=lambda p: p.expired(now_ms)):  # one in force first, of a version pinned twice
        if pin.root not in listings:
            listings[pin.root] = _listing(storage, pin.table)
        listing = listings[pin.root]
        if isinstance(listing, str):
            status = PinStatus(pin)
            status.broken(listing)
        else:
            status, segment = _resolved(pin, listing)
            if segment is not None and not pin.expired(now_ms):
                found.segments[status.pin.label] = segment
        if status.pin.label in found.statuses:  # an instant that resolved to a version pinned already
            continue
        if pin.expired(now_ms) and status.state is not PinState.BROKEN:
            status.state = PinState.EXPIRED
        found.statuses[status.pin.label] = status
    for label in [label for label, s in found.statuses.items() if s.state is PinState.BROKEN]:
        found.segments.pop(label, None)
    return found


def _listing(storage: Storage, table: str) -> list[FileStatus] | str:
    log_dir = uris.join(table, "_delta_log")
    try:
        return [s for s in storage.list(log_dir) if not s.is_dir and _VERSIONED.match(uris.name(s.uri))]
    except Exception as exc:  # missing, permission, throttling
        return f"cannot list {log_dir}: {first_line(exc)}"


def _commit_times(listing: list[FileStatus]) -> dict[int, int]:
    """Each listed commit's version and modification time, made monotonic as Delta's history does."""
    times: dict[int, int] = {}
    last: int | None = None
    for status in sorted((s for s in listing if _COMMIT.fullmatch(uris.name(s.uri))), key=lambda s: uris.name(s.uri)):
        last = status.modification_time if last is None else max(status.modification_time, last + 1)
        times[int(uris.name(status.uri)[:20])] = last
    return times


def _resolved(pin: Pin, listing: list[FileStatus]) -> tuple[PinStatus, LogSegment | None]:
    """The pin with its version, and its log segment (None, the status broken, where it is not whole)."""
    times = _commit_times(listing)
    if pin.version is None:
        assert pin.at_ms is not None
        before = [v for v, at in times.items() if at <= pin.at_ms]
        if not before:
            status = PinStatus(pin)
            earliest = f" (its earliest commit left is {iso_utc(min(times.values()))})" if times else ""
            status.broken(f"no commit of {pin.table} the log still holds was made by {iso_utc(pin.at_ms)}{earliest}")
            return status, None
        pin = replace(pin, version=max(before), at_ms=None)
    assert pin.version is not None
    status = PinStatus(pin, commit_ms=times.get(pin.version))
    try:
        segment = _segment(status, listing)
    except UnreadableLog as exc:
        status.broken(f"Delta can no longer read version {pin.version}: {exc}")
        return status, None
    versions = [int(uris.name(s.uri)[:20]) for s in listing if ".checkpoint." in uris.name(s.uri)]
    status.checkpoint_above = any(v > pin.version for v in versions)
    return status, segment


def _segment(status: PinStatus, listing: list[FileStatus]) -> LogSegment:
    version = status.pin.version
    assert version is not None
    below = [s.uri for s in listing if int(uris.name(s.uri)[:20]) <= version]
    segment = segment_from_listing(status.pin.table, below)
    if segment.version != version:
        raise UnreadableLog(f"the log holds no version {version} (its newest is {segment.version})")
    return segment


def forecast(status: PinStatus, configuration: Mapping[str, str] | None, now_ms: int) -> None:
    """When Delta's log cleanup may first take ``status``'s version, by the table's settings now, and
    what to set to keep it: at risk when that is within WARNING_DAYS and before the pin expires."""
    if status.state is not PinState.HELD or status.commit_ms is None:
        return
    config = configuration or {}
    if config.get("delta.enableExpiredLogCleanup", "true").strip().lower() == "false":
        return
    setting = config.get("delta.logRetentionDuration", DEFAULT_LOG_RETENTION)
    try:
        retention_ms = hours_ms(parse_interval_hours(setting))
    except ValueError:
        retention_ms = hours_ms(parse_interval_hours(DEFAULT_LOG_RETENTION))
    commit_midnight = -(-status.commit_ms // _DAY_MS) * _DAY_MS  # the cutoff is truncated to midnight UTC
    first_ms = commit_midnight + retention_ms
    expires = status.pin.expires_ms
    if expires is not None and first_ms >= expires:
        return
    status.unreadable_from = iso_utc(first_ms)
    days = math.ceil(((expires if expires is not None else now_ms + 365 * _DAY_MS) - commit_midnight) / _DAY_MS) + 1
    status.advice = (f"set delta.logRetentionDuration = 'interval {days} days' on {status.pin.root} (now {setting!r})"
                     + ("" if expires is not None else ", or longer for as long as the pin stays")
                     + ", or delta.enableExpiredLogCleanup = false")
    if first_ms - now_ms <= WARNING_DAYS * _DAY_MS:
        status.state = PinState.AT_RISK
        status.why = (f"Delta's log cleanup may remove version {status.pin.version}'s log "
                      + ("at the table's next checkpoint" if first_ms <= now_ms else f"from {status.unreadable_from}")
                      + ("" if status.checkpoint_above else " (once a checkpoint above it is written)"))


def pinned_replays(spark: SparkSession, pinned: PinnedVersions) -> list[tuple[Replay, dict[TableRoot, str]]]:
    """The pinned versions' logs, replayed: one replay per round, a round holding at most one version
    of a table (a replay is keyed by table); with each, the label of the pin each of its tables stands for.
    A pin whose log cannot be read is marked broken."""
    pending = [(pinned.statuses[label].pin, segment) for label, segment in sorted(pinned.segments.items())]
    rounds: list[tuple[Replay, dict[TableRoot, str]]] = []
    while pending:
        this_round: dict[TableRoot, tuple[Pin, LogSegment]] = {}
        later = []
        for pin, segment in pending:
            if pin.root in this_round:
                later.append((pin, segment))
            else:
                this_round[pin.root] = (pin, segment)
        pending = later
        replay = replay_logs(spark, [segment for _, segment in this_round.values()], check_paths=False)
        for root, why in replay.failures.items():
            label = this_round[root][0].label
            pinned.statuses[label].broken(f"Delta can no longer read version {this_round[root][0].version}: {why}")
            pinned.segments.pop(label, None)
        rounds.append((replay, {root: pin.label for root, (pin, _) in this_round.items() if root not in replay.failures}))
    return rounds


def pinned_files(rounds: Sequence[tuple[Replay, dict[TableRoot, str]]], labels: Sequence[str]) -> DataFrame | None:
    """shapes.PINNED_FILES of every round: each file a pinned version reads (data and deletion vectors),
    ``pin`` its label's index in ``labels``; None without pins."""
    frames = []
    for replay, by_root in rounds:
        ids = local_frame(replay.files.sparkSession, [(root, labels.index(label)) for root, label in by_root.items()],
                          "table_root string, pin int")
        adds = replay.files.where(F.col("kind") == "add").join(F.broadcast(ids), "table_root")
        frames.append(adds.select("table_root", "pin", F.explode(F.array(
            F.struct(F.col("path"), F.col("size"), F.col("modification_time"), F.col("problem")),
            F.struct(F.col("dv_path").alias("path"), F.lit(None).cast("long").alias("size"),
                     F.col("modification_time"), F.lit(None).cast("string").alias("problem")))).alias("f"))
                      .where(F.col("f.path").isNotNull() | F.col("f.problem").isNotNull()).select(
                          "table_root", "pin", "f.path", "f.size", "f.modification_time", "f.problem"))
    return PINNED_FILES.check(reduce(DataFrame.unionByName, frames)) if frames else None


def count_pinned(pinned: PinnedVersions, files: DataFrame | None, labels: Sequence[str]) -> None:
    """Each readable pin's files and bytes; one whose actions name a file we cannot resolve is broken
    (we cannot say which file it needs). One small Spark job."""
    if files is None:
        return
    rows = files.groupBy("pin").agg(F.count("path").alias("files"), F.coalesce(F.sum("size"), F.lit(0)).alias("bytes"),
                                    F.count("problem").alias("problems"), F.min("problem").alias("problem")).collect()
    for row in rows:
        status = pinned.statuses[labels[row["pin"]]]
        status.files, status.bytes = row["files"], row["bytes"]
        if row["problems"]:
            status.broken(f"{row['problems']} action(s) of version {status.pin.version} name a file that cannot be "
                          f"resolved, e.g. {row['problem']}")
            pinned.segments.pop(status.pin.label, None)


@dataclass
class PinnedRead:
    """A run's pins read: their statuses, each readable version's files (``files``, ``pin`` indexing
    ``labels``) and the replays they came from (for the files they need from other tables' folders)."""

    versions: PinnedVersions
    labels: list[str]
    files: DataFrame | None
    rounds: list[tuple[Replay, dict[TableRoot, str]]]

    def broken(self, index: int, why: str) -> None:
        self.versions.statuses[self.labels[index]].broken(why)
        self.versions.segments.pop(self.labels[index], None)


def read_pinned(spark: SparkSession, storage: Storage, pins: Sequence[Pin], now_ms: int) -> PinnedRead:
    """Every pin resolved, its log replayed and its files counted (one small Spark job a round)."""
    versions = resolve_pins(storage, pins, now_ms)
    rounds = pinned_replays(spark, versions) if versions.segments else []
    labels = sorted(versions.statuses)
    files = pinned_files(rounds, labels)
    count_pinned(versions, files, labels)
    if files is not None:
        in_force = [labels.index(label) for label in versions.segments]
        files = files.where(F.col("pin").isin(in_force)) if in_force else None
    return PinnedRead(versions, labels, files, rounds)


def check_present(storage: Storage, read: PinnedRead) -> None:
    """Mark broken each readable pin some of whose files are not in storage now (a vacuum, or another
    tool, deleted them): one recursive listing of each pinned table, a lookup of each file outside it
    (a shallow clone's). For the commands that set and show pins; a run checks against its inventory."""
    if read.files is None:
        return
    listed: dict[str, set[str]] = {}
    missing: dict[int, list[str]] = {}
    for row in read.files.select("table_root", "pin", "path").where(F.col("path").isNotNull()).collect():
        root, path = row["table_root"], row["path"]
        if root not in listed:
            listed[root] = {uris.canonical(s.uri) for s in storage.walk(root) if not s.is_dir}
        present = path in listed[root] if path.startswith(root + "/") else storage.exists(path)
        if not present:
            missing.setdefault(row["pin"], []).append(path)
    for index, paths in missing.items():
        version = read.versions.statuses[read.labels[index]].pin.version
        read.broken(index, f"{len(paths)} file(s) version {version} reads are gone (a vacuum deleted them?), "
                           f"e.g. {min(paths)}")


def read_pins(spark: SparkSession, storage: Storage, progress: Steps, given: Sequence[Pin], pins_table: str | None,
              now_ms: int) -> PinnedRead | None:
    """``given`` and the pins in force in ``pins_table``, read (:func:`read_pinned`, a step of its own);
    None without any pin. PinsUnreadable where the pins table cannot be read."""
    pins = pins_with_table(spark, given, pins_table)
    if not pins:
        return None
    progress.begin(Step.READING_PINS, f"reading {len(pins)} pinned version(s)")
    return read_pinned(spark, storage, pins, now_ms)
