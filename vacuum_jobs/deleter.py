"""Deleting planned files: S3 in batched ``DeleteObjects`` calls and local files, on executors.

Every file ends as one outcome: ``deleted``, ``already_absent`` (the store says it was
gone before we asked: proves nothing about when it was erased, so it is not counted
as deleted) or ``failed`` with the error. S3's ``DeleteObjects`` answers "deleted" for
keys that did not exist, unless each key asks to be deleted only if it is there (``ETag: *``,
``DeleteSettings.if_present``): set where the store is proven to honour that condition
(lakeio.delete_if_present); elsewhere a key S3 answers as deleted is ``deleted_or_absent``, which
is what the store's answer says. Local and Hadoop filesystems tell the difference themselves.
Stores other than S3 and local disks are deleted from the driver through Hadoop. With a
``trash`` folder, files on local disks and Hadoop stores are moved into
``<trash>/<run id>/<authority and path>`` instead (a rename: cheap on local disks, HDFS and
ABFS with a hierarchical namespace), so that ``restore`` can move them back and ``purge``
erase them later; the outcome records where each went.

Outcomes are exact across Spark task attempts (a lost executor, speculation): before it
removes a local file, a task notes it in the run's journal (:class:`DeleteJournal`), so
that a later attempt that finds the file gone records it as this run's ``deleted``, not
``already_absent``. S3 answers the same whichever attempt asks; the driver's deletes run once.

S3 deletes are paced per table (vacuum_jobs.pacing): S3 takes about 3,500 writes per second
per prefix, counts every key of a ``DeleteObjects`` as one, and answers ``SlowDown`` above
what a prefix takes. The targets are cut into as many tasks as the cluster runs at once, each
table's in one task; a task deletes in up to ``prefixes_at_once`` tables at once, each at a
pace of its own that starts at ``prefix_keys_per_second`` and follows S3's answers. Where an
account's limits demand a cap on the whole run, ``keys_per_second`` sets one: the targets are
then cut evenly instead and each task keeps to its share, so the sum holds however many
executors there are, with no coordination between them; a request S3 throttles whole gives its keys'
share back (vacuum_jobs.pacing.Pace.give_back). Throttling, server errors, dropped
connections and read timeouts are retried with backoff; ``DeleteObjects`` is idempotent, so a
retry after a timeout whose request did land is harmless. A key counts as deleted only where
S3's answer lists it so: an error naming a key without its version refuses every version of it
asked, and a key the answer names nowhere is asked again, then reported. A version S3 Object
Lock keeps is refused by S3; its outcome names the lock, read from the version's headers.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from lakeio import uris
from lakeio.audit import AuditAction
from lakeio.cli import LOG_FORMAT
from lakeio.delete_if_present import ABSENT, EVERY_ETAG
from lakeio.errors import InvalidOption
from lakeio.object_lock import GOVERNANCE, Lock
from lakeio.shapes import CANDIDATES, OUTCOMES
from lakeio.storage import Storage
from lakeio.text import first_line, storage_advice
from lakeio.times import epoch_ms
from vacuum_jobs.pacing import Pace, PrefixPace

log = logging.getLogger(__name__)
EXECUTOR_SCHEMES = ("s3", "file")  # stores Python executors reach themselves
# A row read by its columns' names (a dict): what the deletes, restores and purges act on.
Named = Mapping[str, Any]
# A boto3 S3 client: botocore builds its methods at run time, so it is untyped here.
S3Client = Any
THROTTLED_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException"})  # slow a table's pace (vacuum_jobs.pacing)
ARROW_ROWS = 10_000  # outcomes a task hands back to Spark at a time
UNCONFIRMED = "NotConfirmed"  # ours: a key S3's answer to a DeleteObjects names nowhere
_GONE = "gone before the delete"  # ours: a conditional delete S3 answered NoSuchKey (the key was not there)
_GONE_OR_OURS = "gone, perhaps by an attempt of ours"  # ours: NoSuchKey after an attempt whose answer was lost
RETRYABLE_CODES = THROTTLED_CODES | {"InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeTooSkewed",
                                     "OperationAborted", UNCONFIRMED}


@dataclass(frozen=True)
class DeleteSettings:
    batch_size: int = 1000  # keys per DeleteObjects request (S3 allows at most 1,000)
    prefix_keys_per_second: float = 3500.0  # each table's pace to start with (S3's per prefix); S3's answers adjust it
    keys_per_second: float | None = None  # a cap on the whole run's pace, however many tasks delete; default: none
    prefixes_at_once: int = 32  # tables one task deletes in at once, each at its own pace
    max_attempts: int = 6
    base_backoff_seconds: float = 0.2
    read_timeout_seconds: float = 60.0  # a DeleteObjects of 1,000 keys may take seconds
    endpoint_url: str | None = None  # an S3-compatible endpoint; default: boto3's own resolution
    purge_versions: bool = False  # delete every listed version instead of adding a delete marker
    # each key deleted only if it is there (ETag: * in DeleteObjects, s3:DeleteObject alone), so that S3 tells a key
    # already gone (already_absent) from one this run removed: only for a store that honours it. A vacuum sets it
    # where it proved so (lakeio.delete_if_present); a caller who knows its store honours it may set it itself.
    if_present: bool = False
    trash: str | None = None  # move files not on S3 into this folder instead of deleting them (see trash_path)
    # delete versions S3 Object Lock keeps in governance mode (needs s3:BypassGovernanceRetention); never by default
    bypass_governance_retention: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 1000:
            raise InvalidOption("batch_size must be between 1 and 1000")
        if not self.prefix_keys_per_second > 0:
            raise InvalidOption("prefix_keys_per_second must be > 0")
        if self.keys_per_second is not None and not self.keys_per_second > 0:
            raise InvalidOption("keys_per_second must be > 0")
        if self.prefixes_at_once < 1:
            raise InvalidOption("prefixes_at_once must be >= 1")
        if self.max_attempts < 1:
            raise InvalidOption("max_attempts must be >= 1")


@dataclass(frozen=True)
class Target:
    """One file to delete. ``version_ids``: the versions to delete for good (purging versions),
    instead of the key; ``version_id``: the version the inventory lists as current, which a
    delete marker will hide (versioned S3 buckets)."""

    table_root: str
    path: str
    length: int | None
    modification_time: int | None
    version_ids: tuple[str, ...] = ()
    version_id: str | None = None


@dataclass(frozen=True)
class Outcome:
    target: Target
    action: AuditAction
    error: str | None
    at_ms: int
    delete_marker_id: str | None = None  # the delete marker S3 added (versioned buckets)
    trash_path: str | None = None  # where the file was moved to instead (a trash folder)

    def row(self) -> tuple[object, ...]:
        t = self.target
        return (t.table_root, t.path, t.length, t.modification_time, self.action.value, self.error, self.at_ms,
                t.version_id if self.delete_marker_id else None, self.delete_marker_id, self.trash_path)


def trash_path(trash: str, run_id: str, path: str) -> str:
    """Where a run moves ``path`` in the trash: ``<trash>/<run id>/<authority and path>``."""
    return uris.join(uris.to_uri(trash), run_id, path.split(":", 1)[1].lstrip("/"))


def delete_planned(spark: SparkSession, targets: DataFrame, settings: DeleteSettings, run_id: str) -> DataFrame:
    """Delete every target (``table_root, path, length, modificationTime``, and ``version_ids`` or
    ``version_id`` where the targets carry them); one outcome row each. ``run_id`` names the run's
    journal: call :meth:`DeleteJournal.remove` once the outcomes are kept."""
    CANDIDATES.check(targets)
    columns = [*CANDIDATES.columns, "version_ids", "version_id"]
    if "version_ids" not in targets.columns:
        targets = targets.withColumn("version_ids", F.array().cast("array<string>"))
    if "version_id" not in targets.columns:
        targets = targets.withColumn("version_id", F.lit(None).cast("string"))
    return where_reachable(
        spark, targets.select(*columns), OUTCOMES.schema,
        lambda rows, slices: (o.row() for o in _delete_rows(rows, settings, cap_share(settings, slices), run_id)),
        lambda rows: (o.row() for o in delete_with_hadoop(Storage(spark), map(_target, rows), run_id, settings.trash)),
        spread=settings.keys_per_second is not None)


def where_reachable(spark: SparkSession, rows: DataFrame, schema: StructType,
                    per_task: Callable[[Iterable[Named], int], Iterator[tuple[object, ...]]],
                    on_driver: Callable[[Iterator[Named]], Iterator[tuple[object, ...]]], *, spread: bool = False
                    ) -> DataFrame:
    """``rows`` (with a ``table_root`` and a ``path``) acted on where their store is reachable, one ``schema``
    row each: S3 and local files in one wave of executor tasks (``per_task(rows, slices)``: every task
    runs at once, none waits for a slot while holding a share of a pace), other stores from the driver
    through Hadoop (``on_driver``), which Python executors cannot reach. Each table's rows go to one
    task, which paces its prefix; ``spread``: an even share of the rows to every task instead (a
    run-wide cap, of which each task keeps to its share). Rows go to the tasks and back in Arrow
    batches, as dicts to ``per_task``: unpickled and checked against ``schema`` one by one, the rows
    cost a twentieth of a run's deletes (benchmarks.delete_pacing: benchmarks/RESULTS.md)."""
    scheme = F.regexp_extract("path", r"^([a-z0-9+.\-]*):", 1)
    slices = max(1, spark.sparkContext.defaultParallelism)
    reachable = rows.where(scheme.isin(*EXECUTOR_SCHEMES))
    shared = reachable.repartition(slices) if spread else reachable.repartition(slices, "table_root")
    arrow_schema = to_arrow_schema(schema)

    def task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows_in = (row for batch in batches for row in batch.to_pylist())
        done = per_task(rows_in, slices)
        while chunk := list(itertools.islice(done, ARROW_ROWS)):
            yield pa.RecordBatch.from_arrays([pa.array(column, f.type) for column, f in zip(zip(*chunk), arrow_schema)],
                                             schema=arrow_schema)

    result = shared.mapInArrow(task, schema)
    elsewhere = rows.where(~scheme.isin(*EXECUTOR_SCHEMES))
    if elsewhere.take(1):
        named = (row.asDict() for row in elsewhere.toLocalIterator())
        result = result.unionByName(spark.createDataFrame(list(on_driver(named)), schema))
    return result


def cap_share(settings: DeleteSettings, slices: int) -> float | None:
    """One task's share of the run's cap (``keys_per_second`` over the tasks that run at once); None: no cap."""
    return None if settings.keys_per_second is None else settings.keys_per_second / slices


def _target(row: Named) -> Target:
    return Target(row["table_root"], row["path"], row["length"], row["modificationTime"], tuple(row["version_ids"] or ()),
                  row["version_id"])


def _delete_rows(rows: Iterable[Named], settings: DeleteSettings, keys_per_second: float | None,
                 run_id: str) -> Iterator[Outcome]:
    """One executor task's share; its tally goes to the executor's log."""
    s3_targets: list[Target] = []
    local_targets: list[Target] = []
    for row in rows:
        target = _target(row)
        (s3_targets if target.path.startswith("s3:") else local_targets).append(target)
    tally: dict[str, int] = {}
    deleters = [delete_local(local_targets, run_id, settings.trash)]
    if s3_targets:
        deleters.append(S3BatchDeleter(settings, keys_per_second=keys_per_second).delete(s3_targets))
    for deleter in deleters:
        for outcome in deleter:
            tally[outcome.action] = tally.get(outcome.action, 0) + 1
            yield outcome
    if tally:
        _task_log(", ".join(f"{n} {action}" for action, n in sorted(tally.items())))


def _task_log(message: str) -> None:
    """A line in the executor's stderr (its log in the cluster UI): Python workers have no logging set up."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    log.info("delete task in process %d: %s", os.getpid(), message)


def delete_local(targets: Iterable[Target], run_id: str, trash: str | None = None) -> Iterator[Outcome]:
    """Remove local files (or move them into ``trash``) with their checksum side files, then the folders
    they leave empty (never the table root itself). Each is noted in the run's journal first: see
    :class:`DeleteJournal`."""
    journals: dict[str, DeleteJournal] = {}
    for target in targets:
        local = uris.local_path(target.path)
        if target.table_root not in journals:
            journals[target.table_root] = DeleteJournal(target.table_root, run_id)
        journal = journals[target.table_root]
        moved = trash_path(trash, run_id, target.path) if trash else None
        try:
            if not os.path.lexists(local):  # noted only once found: a note says the file was there
                raise FileNotFoundError(local)
            journal.note(target.path)
            if moved:
                os.makedirs(os.path.dirname(uris.local_path(moved)), exist_ok=True)
                os.rename(local, uris.local_path(moved))
            else:
                os.remove(local)
        except FileNotFoundError:
            action = journal.gone(target.path)  # deleted by a twin attempt: moved to the same place
            yield Outcome(target, action, None, epoch_ms(), trash_path=moved if action is AuditAction.DELETED else None)
            continue
        except OSError as exc:
            yield Outcome(target, AuditAction.FAILED, f"{type(exc).__name__}: {exc}", epoch_ms())
            continue
        _remove_checksum(local)
        yield Outcome(target, AuditAction.DELETED, None, epoch_ms(), trash_path=moved)
        prune_empty_folders(os.path.dirname(local), uris.local_path(target.table_root))


def _remove_checksum(local: str) -> None:
    """Hadoop's checksum of a local file (``.<name>.crc`` beside it, written when Spark wrote the file),
    which Hadoop's file system, and so Delta's VACUUM, deletes with the file: hidden, no vacuum plans it,
    so left here it would stay for good. One that cannot be removed costs nothing but its bytes."""
    folder, name = os.path.split(local)
    with contextlib.suppress(OSError):
        os.remove(os.path.join(folder, f".{name}.crc"))


class DeleteJournal:
    """The local files one run set out to delete from one table, noted by each task attempt
    before it removes them: ``<table root>/_vacuum_journal/<run id>/<attempt>.txt``, one line each.

    A retried or speculative attempt that finds a file gone reads the other attempts' notes: a
    file one of them noted was deleted by this run. The driver removes the run's folder once the
    outcomes are recorded; a run killed before that leaves it behind (hidden: no vacuum deletes
    it) for the next run to read back (vacuum_jobs.interrupted), which then removes it."""

    FOLDER = "_vacuum_journal"

    def __init__(self, table_root: str, run_id: str):
        self.folder = os.path.join(uris.local_path(table_root), self.FOLDER, run_id)
        self.own = f"{uuid.uuid4().hex}.txt"
        self._others: set[str] = set()

    def note(self, path: str) -> None:
        os.makedirs(self.folder, exist_ok=True)
        with open(os.path.join(self.folder, self.own), "a", encoding="utf-8") as notes:
            notes.write(path + "\n")

    def gone(self, path: str) -> AuditAction:
        """What a file this attempt finds gone was: deleted by another attempt of the run, if one
        noted it (read again on a miss: a twin attempt may be deleting right now), else already absent."""
        if path not in self._others:
            self._others = set()
            for name in (os.listdir(self.folder) if os.path.isdir(self.folder) else ()):
                if name != self.own:
                    with open(os.path.join(self.folder, name), encoding="utf-8") as notes:
                        self._others.update(notes.read().splitlines())
        return AuditAction.DELETED if path in self._others else AuditAction.ALREADY_ABSENT

    @classmethod
    def remove(cls, storage: Storage, table_roots: Iterable[str], run_id: str) -> None:
        """Drop the run's notes (and the journal folder, once empty) of local ``table_roots``."""
        for root in table_roots:
            if uris.scheme_of(root) == "file":
                journal = uris.join(root, cls.FOLDER)
                storage.delete(uris.join(journal, run_id), recursive=True)
                storage.remove_if_empty(journal)  # another run's notes, written meanwhile, stay


def prune_empty_folders(folder: str, stop_at: str) -> None:
    """Remove ``folder`` and its parents while they are empty, up to (not including) ``stop_at``."""
    while folder.startswith(stop_at.rstrip("/") + "/"):
        try:
            os.rmdir(folder)
        except OSError:  # not empty (or already gone): stop climbing
            return
        folder = os.path.dirname(folder)


def delete_with_hadoop(storage: Storage, targets: Iterable[Target], run_id: str,
                       trash: str | None = None) -> Iterator[Outcome]:
    """Driver-side deletes (or moves into ``trash``) for stores Python executors cannot reach
    (HDFS, ABFS, GCS, ...)."""
    for target in targets:
        try:
            moved = trash_path(trash, run_id, target.path) if trash else None
            if storage.move(target.path, moved) if moved else storage.delete(target.path):
                yield Outcome(target, AuditAction.DELETED, None, epoch_ms(), trash_path=moved)
            else:
                yield Outcome(target, AuditAction.ALREADY_ABSENT, None, epoch_ms())
        except Exception as exc:
            yield Outcome(target, AuditAction.FAILED, first_line(exc), epoch_ms())


class S3BatchDeleter:
    """``DeleteObjects`` in batches, each table's prefix at its own pace (vacuum_jobs.pacing), up to
    ``prefixes_at_once`` tables at once, with exponential backoff and per-key retries.

    ``keys_per_second`` is this deleter's share of the run's cap (default: all of it; none without one)."""

    def __init__(self, settings: DeleteSettings, client: S3Client | None = None, sleep: Callable[[float], None] = time.sleep,
                 keys_per_second: float | None = None):
        self.settings = settings
        self.sleep = sleep
        cap = keys_per_second or settings.keys_per_second
        self._cap = None if cap is None else Pace(cap, sleep)
        self._client = client
        self._client_lock = threading.Lock()  # the prefixes' threads each reach for the client first
        self._versioning: dict[str, bool] = {}  # bucket -> versioning suspended

    @staticmethod
    def make_client(endpoint_url: str | None = None,
                    read_timeout_seconds: float = DeleteSettings.read_timeout_seconds,
                    retries: dict[str, Any] | None = None,
                    connections: int = DeleteSettings.prefixes_at_once, validated: bool = True) -> S3Client:
        """A boto3 S3 client, by default without botocore's own retries: ours (below) cover throttling,
        dropped connections, timeouts and per-key errors alike, and count every attempt against its
        table's pace. ``connections``: as many as requests at once (one per table a task deletes in).
        ``validated``: botocore checks each request's parameters against the API's model before sending it.
        Each client from a session of its own: boto3's default session is not safe to make clients from in
        several threads at once (clients made so can carry different exception classes)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=Config(
            retries=retries or {"total_max_attempts": 1}, read_timeout=read_timeout_seconds, connect_timeout=10,
            max_pool_connections=connections, parameter_validation=validated))

    @property
    def client(self) -> S3Client:
        """The deleter's own client. It sends requests this class builds, of fixed shape, so botocore's check
        of their parameters is skipped: walking 1,000 keys of a ``DeleteObjects`` took about a sixth of the
        request's CPU (a store that refuses a malformed request still answers with its reason)."""
        with self._client_lock:
            if self._client is None:
                self._client = self.make_client(self.settings.endpoint_url, self.settings.read_timeout_seconds,
                                                connections=self.settings.prefixes_at_once, validated=False)
        return self._client

    def delete(self, targets: list[Target]) -> Iterator[Outcome]:
        """Every target's outcome; the tables' prefixes deleted in at once, each paced on its own."""
        by_prefix: dict[tuple[str, str], list[tuple[dict[str, Any], Target]]] = {}
        for target in targets:
            bucket, key = uris.bucket_and_key(target.path)
            if self.settings.purge_versions and target.version_ids:
                keys = [{"Key": key, "VersionId": v} for v in target.version_ids]
            else:
                keys = [{"Key": key, "ETag": EVERY_ETAG} if self.settings.if_present else {"Key": key}]
            by_prefix.setdefault((bucket, target.table_root), []).extend((entry, target) for entry in keys)
        for bucket in sorted({bucket for (bucket, _), entries in by_prefix.items() if _unversioned(entries)}):
            self._suspended(bucket)  # asked once, before the prefixes' threads read it
        groups = [(bucket, entries) for (bucket, _), entries in by_prefix.items()]
        if len(groups) <= 1 or self.settings.prefixes_at_once == 1:
            for bucket, entries in groups:
                yield from self._delete_prefix(bucket, entries)
            return
        with ThreadPoolExecutor(max_workers=min(self.settings.prefixes_at_once, len(groups))) as pool:
            running = [pool.submit(lambda args: list(self._delete_prefix(*args)), group) for group in groups]
            for done in as_completed(running):
                yield from done.result()

    def _delete_prefix(self, bucket: str, entries: list[tuple[dict[str, Any], Target]]) -> Iterator[Outcome]:
        """One table's keys, at its own pace. Entries of one target (its versions) may span batches; a
        target fails if any entry fails. Tallies are kept by the target's identity (``entries`` holds every
        target for the whole call): hashing a target's seven fields several times a key cost about a
        quarter of this class's own CPU per key (benchmarks/RESULTS.md)."""
        pace = PrefixPace(self.settings.prefix_keys_per_second, self.sleep)
        errors: dict[int, str] = {}
        markers: dict[int, str] = {}
        absent: set[int] = set()
        unsure: set[int] = set()
        remaining = Counter(id(target) for _entry, target in entries)
        suspended = _unversioned(entries) and self._suspended(bucket)
        start = 0
        while start < len(entries):
            batch = entries[start:start + pace.batch(self.settings.batch_size)]
            start += len(batch)
            for entry, target, error, marker in self._delete_batch(bucket, batch, pace):
                which = id(target)
                if error is _GONE:
                    absent.add(which)
                elif error is _GONE_OR_OURS:
                    unsure.add(which)
                elif error and error not in errors.get(which, ""):  # each version's own refusal, once
                    errors[which] = f"{errors[which]}; {error}" if which in errors else error
                if marker and not _final(marker, target, suspended):
                    markers[which] = marker
                remaining[which] -= 1
                if not remaining[which]:
                    refused = errors.get(which)
                    action = (AuditAction.FAILED if refused is not None else AuditAction.ALREADY_ABSENT if which in absent
                              else AuditAction.DELETED if ("VersionId" in entry or "ETag" in entry) and which not in unsure
                              else AuditAction.DELETED_OR_ABSENT)
                    yield Outcome(target, action, refused, epoch_ms(), markers.get(which))

    def _delete_batch(self, bucket: str, batch: list[tuple[dict[str, Any], Target]], pace: PrefixPace
                      ) -> Iterator[tuple[dict[str, Any], Target, str | None, str | None]]:
        """Per entry: its error (``_GONE``: S3 says a conditional delete found no key; ``_GONE_OR_OURS``: so it
        says after an attempt of ours that may have deleted it, whose answer was lost or named it otherwise),
        or the delete marker a key's delete added (versioned buckets). A ``SlowDown`` (of the request or of
        some keys) slows the prefix; an answer without one speeds it up."""
        pending = list(batch)
        tried: set[int] = set()  # entries an earlier attempt may have deleted
        for attempt in range(1, self.settings.max_attempts + 1):
            if self._cap is not None:
                self._cap.wait(len(pending))
            pace.wait(len(pending))
            try:
                response = self.client.delete_objects(
                    Bucket=bucket, Delete={"Objects": [entry for entry, _ in pending], "Quiet": False},
                    **({"BypassGovernanceRetention": True} if self.settings.bypass_governance_retention else {}))
            except Exception as exc:
                code, status = _error_code(exc)
                if code in THROTTLED_CODES or status == 503:
                    pace.slowed()
                    if self._cap is not None:
                        self._cap.give_back(len(pending))
                if _retryable(exc, code, status) and attempt < self.settings.max_attempts:
                    if not (code in THROTTLED_CODES or status == 503):  # a throttled request reached no key
                        tried.update(id(entry) for entry, _ in pending)
                    self._backoff(attempt)
                    continue
                for entry, target in pending:
                    yield entry, target, _described(code or type(exc).__name__, str(exc)[:200]), None
                return
            failed = {(e.get("Key"), e.get("VersionId")): e for e in response.get("Errors", [])}
            if any(e.get("Code") in THROTTLED_CODES for e in failed.values()):
                pace.slowed()
            else:
                pace.answered()
            listed = response.get("Deleted", [])
            deleted = Listed.of(listed)
            markers = {d.get("Key"): d["DeleteMarkerVersionId"] for d in listed
                       if "DeleteMarkerVersionId" in d and "VersionId" not in d}
            retry = []
            for entry, target in pending:
                error = _answered(entry, failed, deleted)
                if error is None:
                    yield entry, target, None, None if "VersionId" in entry else markers.get(entry["Key"])
                elif "ETag" in entry and error.get("Code") in ABSENT:
                    yield entry, target, _GONE_OR_OURS if id(entry) in tried else _GONE, None
                elif error.get("Code") in RETRYABLE_CODES and attempt < self.settings.max_attempts:
                    if error.get("Code") not in THROTTLED_CODES:
                        tried.add(id(entry))
                    retry.append((entry, target))
                else:
                    yield entry, target, self._refusal(bucket, entry, error), None
            if not retry:
                return
            pending = retry
            self._backoff(attempt)

    def _refusal(self, bucket: str, entry: dict[str, Any], error: dict[str, str]) -> str:
        """S3's refusal of one key, as the audit records it; where S3 Object Lock keeps the version, the
        lock (its date and mode, or the legal hold), read from the version's own headers (asked only where
        S3 says a lock refused it). Where the role may not read the lock, the refusal says which permission
        would have named it."""
        described = _described(error.get("Code"), error.get("Message", ""))
        if error.get("Code") != "AccessDenied" or "VersionId" not in entry or not _LOCKED.search(error.get("Message", "")):
            return described
        refused, where = f"AccessDenied: {error.get('Message', '')}", f"s3://{bucket}/{entry['Key']}"
        try:
            lock = Lock.of_head(entry["VersionId"], self.client.head_object(Bucket=bucket, Key=entry["Key"],
                                                                            VersionId=entry["VersionId"]))
        except Exception as exc:  # noqa: BLE001 - S3's own words, and why the lock is not named
            status = _error_code(exc)[1]
            why = "naming it needs s3:GetObjectVersion on " + where if status == 403 else first_line(exc, 160)
            return f"{refused}; its lock not read: {why}"
        if lock is None:  # S3 shows a version's lock only to a role that may read it (or the lock just ended)
            return (f"{refused}; its lock not shown: naming it needs s3:GetObjectRetention and "
                    f"s3:GetObjectLegalHold on {where}, unless it ended since")
        now_ms = epoch_ms()
        if not lock.holds_at(now_ms):
            return described
        bypass = ("; governance mode: purge --bypass-governance-retention deletes it (with "
                  "s3:BypassGovernanceRetention)" if lock.mode == GOVERNANCE and not lock.legal_hold
                  and not self.settings.bypass_governance_retention else "")
        return f"AccessDenied: {lock.describe(now_ms)}: S3 Object Lock refuses its delete{bypass}"

    def _suspended(self, bucket: str) -> bool:
        """Whether the bucket says its versioning is suspended (unknown, as when we may not ask: no)."""
        if bucket not in self._versioning:
            try:
                self._versioning[bucket] = self.client.get_bucket_versioning(Bucket=bucket).get("Status") == "Suspended"
            except Exception as exc:  # noqa: BLE001 - a "null" delete marker still tells (see _final)
                log.warning("versioning state of bucket %s unknown: %s", bucket, first_line(exc))
                self._versioning[bucket] = False
        return self._versioning[bucket]

    def _backoff(self, attempt: int) -> None:
        delay = self.settings.base_backoff_seconds * (2 ** (attempt - 1))
        self.sleep(delay * (0.5 + random.random()))


@dataclass(frozen=True)
class Listed:
    """What a ``DeleteObjects`` answer lists deleted: each (key, version) pair (version None where the
    answer names none), and the keys."""

    pairs: set[tuple[str | None, str | None]]
    keys: set[str | None]

    @classmethod
    def of(cls, deleted: Iterable[Mapping[str, str]]) -> Listed:
        """From an answer's ``Deleted`` entries."""
        pairs = {(d.get("Key"), d.get("VersionId")) for d in deleted}
        return cls(pairs, {key for key, _ in pairs})


def _answered(entry: dict[str, Any], failed: dict[tuple[str, str | None], dict[str, str]],
              deleted: Listed) -> dict[str, str] | None:
    """S3's error for one entry of a ``DeleteObjects``, or None where its answer lists it deleted. An
    error naming the key without a version refuses each of its versions asked (moto, some S3-compatible
    stores answer so); an entry the answer names nowhere is not taken as deleted, and is asked again."""
    key, version = entry["Key"], entry.get("VersionId")
    error = (failed.get((key, version)) or failed.get((key, None))) if failed else None
    if error is not None or (key in deleted.keys and (version is None or (key, version) in deleted.pairs
                                                       or (key, None) in deleted.pairs)):
        return error
    return {"Code": UNCONFIRMED, "Message": "the answer lists it neither deleted nor failed"}


# S3's words for a delete Object Lock refused (AWS's and moto's), not a policy's refusal: its resource may
# name a table "locked" or "blocks".
_LOCKED = re.compile(r"protected by object lock", re.IGNORECASE)


def _unversioned(entries: list[tuple[dict[str, Any], Target]]) -> bool:
    """Whether any of these deletes names no version (a vacuum's: it may leave a delete marker, which
    the bucket's versioning state explains); a restore's and a purge's each name one."""
    return any("VersionId" not in entry for entry, _ in entries)


def _final(marker: str, target: Target, suspended: bool) -> bool:
    """Whether a delete that added ``marker`` removed the key's bytes for good: in a bucket whose
    versioning is suspended (its markers are ``null``), a delete removes the version written while
    suspended (id ``null``) outright; one written before the suspension stays, hidden, restorable."""
    return (suspended or marker == "null") and target.version_id in (None, "null")


def _retryable(exc: Exception, code: str | None, status: int | None) -> bool:
    """Throttling and server errors, and a request that never got an answer: refused, dropped or timed out."""
    from botocore.exceptions import ConnectionError, HTTPClientError

    return code in RETRYABLE_CODES or (status or 0) >= 500 or isinstance(exc, (ConnectionError, HTTPClientError))


def _described(code: str | None, message: str) -> str:
    """An S3 error as the audit records it: its code and message first (what monitors group by), then
    what to do where it is a common one (lakeio.text.storage_advice)."""
    text = f"{code}: {message}".strip()
    advice = storage_advice(text)
    return f"{text} ({advice})" if advice else text


def _error_code(exc: Exception) -> tuple[str | None, int | None]:
    response = getattr(exc, "response", None) or {}
    return response.get("Error", {}).get("Code"), response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def key_versions(client: S3Client, path: str) -> list[dict[str, Any]]:
    """Every version and delete marker of exactly this key (``marker`` says which)."""
    bucket, key = uris.bucket_and_key(path)
    found: list[dict[str, Any]] = []
    params = {"Bucket": bucket, "Prefix": key}
    while True:
        page = client.list_object_versions(**params)
        found += [dict(v, marker=False) for v in page.get("Versions", []) if v["Key"] == key]
        found += [dict(m, marker=True) for m in page.get("DeleteMarkers", []) if m["Key"] == key]
        if not page.get("IsTruncated") or page.get("NextKeyMarker") != key:
            return found
        params.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
