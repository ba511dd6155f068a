"""Deleting keys on S3 in batched ``DeleteObjects`` calls, each table's prefix at its own pace.

S3's ``DeleteObjects`` answers "deleted" for keys that did not exist, unless each key asks to be
deleted only if it is there (``ETag: *``, ``DeleteSettings.if_present``): set where the store is proven
to honour that condition (lakeio.store.delete_if_present); elsewhere a key S3 answers as deleted is
``deleted_or_absent``, which is what the store's answer says.

S3 takes about 3,500 writes per second per prefix, counts every key of a ``DeleteObjects`` as one, and
answers ``SlowDown`` above what a prefix takes: a task deletes in up to ``prefixes_at_once`` tables at
once, each at a pace of its own that starts at ``prefix_keys_per_second`` and follows S3's answers
(vacuum_jobs.pacing); a request S3 throttles whole gives its keys' share of a run-wide cap back
(vacuum_jobs.pacing.Pace.give_back). Throttling, server errors, dropped connections and read timeouts
are retried with backoff; ``DeleteObjects`` is idempotent, so a retry after a timeout whose request did
land is harmless. Once ``stop_at_ms`` passes (a run's ``--max-minutes``), no new request starts: a request
sent is answered (its retries too), a key whose versions some request asked has the rest asked, and every
other key is ``deferred``. A key counts as deleted only where S3's answer lists it so: an error naming a key
without its version refuses every version of it asked, and a key the answer names nowhere is asked
again, then reported. A version S3 Object Lock keeps is refused by S3; its outcome names the lock, read
from the version's headers. S3 answers the same whichever task attempt asks.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from lakeio.audit.contract import AuditAction
from lakeio.store import s3, uris
from lakeio.store.delete_if_present import ABSENT, EVERY_ETAG
from lakeio.store.object_lock import GOVERNANCE, Lock
from lakeio.store.s3 import S3Client
from lakeio.text import first_line, storage_advice
from lakeio.times import epoch_ms
from vacuum_jobs.deletes import DeleteSettings, Outcome, Target, out_of_time
from vacuum_jobs.pacing import Pace, PrefixPace

log = logging.getLogger(__name__)
THROTTLED_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException"})  # slow a table's pace (vacuum_jobs.pacing)
UNCONFIRMED = "NotConfirmed"  # ours: a key S3's answer to a DeleteObjects names nowhere
_GONE = "gone before the delete"  # ours: a conditional delete S3 answered NoSuchKey (the key was not there)
_GONE_OR_OURS = "gone, perhaps by an attempt of ours"  # ours: NoSuchKey after an attempt whose answer was lost
RETRYABLE_CODES = THROTTLED_CODES | {"InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeTooSkewed",
                                     "OperationAborted", UNCONFIRMED}


class S3BatchDeleter:
    """``DeleteObjects`` in batches, each table's prefix at its own pace (vacuum_jobs.pacing), up to
    ``prefixes_at_once`` tables at once, with exponential backoff and per-key retries.

    ``keys_per_second`` is this deleter's share of the run's cap (default: all of it; none without one)."""

    def __init__(self, settings: DeleteSettings, client: S3Client | None = None, sleep: Callable[[float], None] = time.sleep,
                 keys_per_second: float | None = None, clock: Callable[[], int] = epoch_ms):
        self.settings = settings
        self.sleep = sleep
        self.clock = clock  # epoch ms, against settings.stop_at_ms
        cap = keys_per_second or settings.keys_per_second
        self._cap = None if cap is None else Pace(cap, sleep)
        self._client = client
        self._client_lock = threading.Lock()  # the prefixes' threads each reach for the client first
        self._versioning: dict[str, bool] = {}  # bucket -> versioning suspended

    @property
    def client(self) -> S3Client:
        """The deleter's own client. It sends requests this class builds, of fixed shape, so botocore's check
        of their parameters is skipped: it walks every key of a ``DeleteObjects``, a share of the request's CPU
        worth saving (a store that refuses a malformed request still answers with its reason)."""
        with self._client_lock:
            if self._client is None:
                self._client = self.settings.s3_client(retrying=False, parameter_validation=False)
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
        target for the whole call), not by its fields, which would be hashed several times a key."""
        pace = PrefixPace(self.settings.prefix_keys_per_second, self.sleep)
        errors: dict[int, str] = {}
        markers: dict[int, str] = {}
        absent: set[int] = set()
        unsure: set[int] = set()
        remaining = Counter(id(target) for _entry, target in entries)
        asked = Counter(remaining)
        suspended = _unversioned(entries) and self._suspended(bucket)
        start, stopped = 0, False
        while start < len(entries):
            if not stopped and out_of_time(self.settings.stop_at_ms, now := self.clock()):
                # Time ran out: a target begun is finished (all its versions asked), every other one left.
                stopped, rest = True, entries[start:]
                begun = {which for which, n in remaining.items() if 0 < n < asked[which]}
                left = {id(target): target for _entry, target in rest if id(target) not in begun}
                yield from (Outcome.deferred(target, now) for target in left.values())
                entries = entries[:start] + [(entry, target) for entry, target in rest if id(target) in begun]
                continue
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
            deleted = DeletedKeys.of(listed)
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
                    yield entry, target, _refusal(self.client, self.settings, bucket, entry, error), None
            if not retry:
                return
            pending = retry
            self._backoff(attempt)

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


def _refusal(client: S3Client, settings: DeleteSettings, bucket: str, entry: dict[str, Any], error: dict[str, str]) -> str:
    """S3's refusal of one key, as the audit records it; where S3 Object Lock keeps the version, the
    lock (its date and mode, or the legal hold), read from the version's own headers (asked only where
    S3 says a lock refused it). Where the role may not read the lock, the refusal says which permission
    would have named it."""
    described = _described(error.get("Code"), error.get("Message", ""))
    if error.get("Code") != "AccessDenied" or "VersionId" not in entry or not _LOCKED.search(error.get("Message", "")):
        return described
    refused, where = f"AccessDenied: {error.get('Message', '')}", f"s3://{bucket}/{entry['Key']}"
    try:
        lock = Lock.of_head(entry["VersionId"], client.head_object(Bucket=bucket, Key=entry["Key"],
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
              and not settings.bypass_governance_retention else "")
    return f"AccessDenied: {lock.describe(now_ms)}: S3 Object Lock refuses its delete{bypass}"


@dataclass(frozen=True)
class DeletedKeys:
    """What a ``DeleteObjects`` answer lists deleted: each (key, version) pair (version None where the
    answer names none), and the keys."""

    pairs: set[tuple[str | None, str | None]]
    keys: set[str | None]

    @classmethod
    def of(cls, deleted: Iterable[Mapping[str, str]]) -> DeletedKeys:
        """From an answer's ``Deleted`` entries."""
        pairs = {(d.get("Key"), d.get("VersionId")) for d in deleted}
        return cls(pairs, {key for key, _ in pairs})


def _answered(entry: dict[str, Any], failed: dict[tuple[str, str | None], dict[str, str]],
              deleted: DeletedKeys) -> dict[str, str] | None:
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
    """S3's error code and HTTP status of a failed call (None where it has none)."""
    response = getattr(exc, "response", None) or {}
    return s3.error_code(exc), response.get("ResponseMetadata", {}).get("HTTPStatusCode")
