"""What a delete is given and what comes of it: how (DeleteSettings), which file (Target), its outcome.

Every file a run deletes ends as one :class:`Outcome`: ``deleted``, ``already_absent`` (the store says
it was gone before we asked: proves nothing about when it was erased, so it is not counted as deleted),
``deleted_or_absent`` (an S3 store that answers both alike, vacuum_jobs.s3_deletes), ``failed`` with
the error, or ``deferred``: never asked for, the run's time having run out (``DeleteSettings.stop_at_ms``).
Where each kind of store is deleted from: vacuum_jobs.delete_tasks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakeio.audit.contract import AuditAction
from lakeio.errors import InvalidOption
from lakeio.store import s3, uris
from lakeio.store.s3 import S3Client

# A row read by its columns' names (a dict): what the deletes, restores and purges act on.
RowDict = Mapping[str, Any]


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
    # where it proved so (lakeio.store.delete_if_present); a caller who knows its store honours it may set it itself.
    if_present: bool = False
    trash: str | None = None  # move files not on S3 into this folder instead of deleting them (see trash_path)
    # delete versions S3 Object Lock keeps in governance mode (needs s3:BypassGovernanceRetention); never by default
    bypass_governance_retention: bool = False
    # epoch ms after which no delete starts (a run's --max-minutes): what is left is ``deferred``, a request sent
    # before it is answered; default: none
    stop_at_ms: int | None = None

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

    def s3_client(self, *, retrying: bool = True, **config: Any) -> S3Client:
        """A client reaching S3 as this run's deletes do (endpoint, read timeout, a connection per table a
        task deletes in at once), with ``config`` (botocore's). ``retrying``: botocore's standard retries, up
        to ``max_attempts``, for reads and single puts; without, one attempt per call, for a caller that
        counts its own against a table's pace (the deletes: throttling, dropped connections, timeouts and
        per-key errors alike) or must meet the store's first answer (the probes)."""
        retries = {"mode": "standard", "max_attempts": self.max_attempts} if retrying else {"total_max_attempts": 1}
        return s3.client(self.endpoint_url, retries=retries, read_timeout=self.read_timeout_seconds, connect_timeout=10,
                         max_pool_connections=self.prefixes_at_once, **config)


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

    @classmethod
    def deferred(cls, target: Target, at_ms: int) -> Outcome:
        """``target`` left for a later run: the run's time ran out before its delete was asked for."""
        return cls(target, AuditAction.DEFERRED, TIME_RAN_OUT, at_ms)

    def row(self) -> tuple[object, ...]:
        t = self.target
        return (t.table_root, t.path, t.length, t.modification_time, self.action.value, self.error, self.at_ms,
                t.version_id if self.delete_marker_id else None, self.delete_marker_id, self.trash_path)


# A deferred file's ``error``: why the run left it.
TIME_RAN_OUT = "not asked for: the run's time ran out (--max-minutes) before its delete"


def out_of_time(stop_at_ms: int | None, now_ms: int) -> bool:
    """Whether, at ``now_ms``, no delete may start any more (``DeleteSettings.stop_at_ms``)."""
    return stop_at_ms is not None and now_ms >= stop_at_ms


def trash_path(trash: str, run_id: str, path: str) -> str:
    """Where a run moves ``path`` in the trash: ``<trash>/<run id>/<authority and path>``."""
    return uris.join(uris.to_uri(trash), run_id, path.split(":", 1)[1].lstrip("/"))
