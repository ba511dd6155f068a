"""Acting on each file of a restore or purge, where its store is: checked as the vacuum left it, then changed.

A file in a trash folder is moved back or deleted there, unless a file was written at its path since.
On S3 each key's version listing is read first: a restore deletes the run's delete marker while it is
still the key's latest version; a purge deletes the hidden version (and the key's older noncurrent
ones) while it is not current again. Those still as the run left them go in batched ``DeleteObjects``
(vacuum_jobs.s3_deletes); the others are left alone, each with why.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from pyspark.sql.types import StringType, StructField, StructType

from lakeio.audit.contract import AuditAction
from lakeio.spark.shapes import OUTCOMES
from lakeio.store import s3, uris
from lakeio.text import first_line
from lakeio.times import epoch_ms
from vacuum_jobs.deletes import DeleteSettings, RowDict, Target
from vacuum_jobs.local_deletes import prune_empty_folders
from vacuum_jobs.s3_deletes import S3BatchDeleter

UNDONE = StructType([*OUTCOMES.schema.fields, StructField("source_run_id", StringType())])  # a copy: add() mutates


def act(rows: Iterable[RowDict], done: AuditAction, settings: DeleteSettings, keys_per_second: float | None, dry_run: bool,
         files: Files | None = None) -> Iterator[tuple[Any, ...]]:
    """One task's share (or the driver's, for Hadoop stores: ``files``). Files in a trash folder are
    moved back or deleted one by one; on S3 each key's versions are checked, then the marker
    (restore) or the hidden version (purge) of those still as the run left them is deleted, in
    batched ``DeleteObjects``."""
    files = files or LocalFiles()
    deleter, lister = S3BatchDeleter(settings, keys_per_second=keys_per_second), None
    ready: dict[Target, Any] = {}
    for row in rows:
        if row["trash_path"]:
            yield _outcome(row, *_from_trash(row, done, files, dry_run))
            continue
        try:
            lister = lister or settings.s3_client()  # botocore's retries: the listings are not paced
            verdict = (_check_restore if done is AuditAction.RESTORED else _check_purge)(row, lister)
        except Exception as exc:
            yield _outcome(row, AuditAction.FAILED, f"listing the key's versions: {first_line(exc, 200)}")
            continue
        if isinstance(verdict, tuple):
            yield _outcome(row, *verdict)
        elif dry_run:
            yield _outcome(row, AuditAction.WOULD_RESTORE if done is AuditAction.RESTORED else AuditAction.WOULD_PURGE)
        else:
            ready[Target(row["table_root"], row["path"], row["length"], row["modificationTime"], tuple(verdict))] = row
    for result in deleter.delete(list(ready)):
        row = ready[result.target]
        yield (_outcome(row, done, None, result.at_ms) if result.action is AuditAction.DELETED
               else _outcome(row, AuditAction.FAILED, result.error, result.at_ms))


def _outcome(row: RowDict, action: AuditAction, why: str | None = None, at_ms: int | None = None) -> tuple[Any, ...]:
    """A row of ``UNDONE``: the vacuum's row, with what this run did to it."""
    return (row["table_root"], row["path"], row["length"], row["modificationTime"], action.value, why,
            at_ms or epoch_ms(), row["version_id"], row["delete_marker_id"], row["trash_path"],
            row["source_run_id"])


class Files(Protocol):
    def exists(self, uri: str) -> bool: ...
    def move(self, uri: str, to: str) -> bool: ...
    def delete(self, uri: str, recursive: bool = False) -> bool: ...


class LocalFiles:
    """The few file operations a trash needs, on an executor's local disk (Storage's, on the driver)."""

    def exists(self, uri: str) -> bool:
        return os.path.lexists(uris.local_path(uri))

    def move(self, uri: str, to: str) -> bool:
        """Never over a file at ``to``: a link fails where one exists, then the old name goes."""
        source, target = uris.local_path(uri), uris.local_path(to)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.link(source, target)
        os.remove(source)
        return True

    def delete(self, uri: str, recursive: bool = False) -> bool:
        os.remove(uris.local_path(uri))
        return True


def _from_trash(row: RowDict, done: AuditAction, files: Files, dry_run: bool) -> tuple[AuditAction, str | None]:
    """Move a file back from the trash (restore) or delete it there (purge), unless it is not as the run left it."""
    path, trash = row["path"], row["trash_path"]
    try:
        if done is AuditAction.RESTORED:
            if files.exists(path):
                return AuditAction.NOT_RESTORED, "written again since the vacuum: a file is at its path again"
            if not files.exists(trash):
                return AuditAction.NOT_RESTORED, f"no longer in the trash ({trash}): purged?"
            if not dry_run:
                files.move(trash, path)
        else:
            if not files.exists(trash):
                return AuditAction.ALREADY_ABSENT, f"no longer in the trash ({trash})"
            if not dry_run:
                files.delete(trash)
    except Exception as exc:
        return AuditAction.FAILED, first_line(exc, 200)
    if dry_run:
        return (AuditAction.WOULD_RESTORE if done is AuditAction.RESTORED else AuditAction.WOULD_PURGE), None
    if isinstance(files, LocalFiles):  # run folders emptied by the move go too
        run_folder = trash[:trash.index(f"/{row['source_run_id']}/") + len(row["source_run_id"]) + 1]
        prune_empty_folders(os.path.dirname(uris.local_path(trash)), os.path.dirname(uris.local_path(run_folder)))
    return done, None


# A check's verdict: the version ids to delete, or (action, why) for a key left alone.
Verdict = list[str] | tuple[AuditAction, str]


def _check_restore(row: RowDict, client: Any) -> Verdict:
    """The run's delete marker, to remove; or why the key is left alone."""
    if row["delete_marker_id"] is None and not row["path"].startswith("s3:"):
        return (AuditAction.NOT_RESTORED, "the delete was final: no delete marker or trash recorded (the store "
                                          "keeps no versions, and the run had no --trash)")
    versions = s3.key_versions(client, row["path"])
    latest = next((v for v in versions if v["IsLatest"]), None)
    if row["delete_marker_id"] is None:  # what the key holds now, not a guess at why
        now = ("it holds no version" if latest is None else
               f"its latest version is {'a delete marker' if latest['marker'] else 'an object'} ({latest['VersionId']}) "
               f"of {len(versions)}")
        return (AuditAction.NOT_RESTORED, f"the delete was final: S3 named no delete marker for it, so nothing of the "
                                          f"run's is there to take away; {now}")
    if latest is None:
        return (AuditAction.NOT_RESTORED, "the key holds no version any more (purged, or expired by a lifecycle "
                                          "rule)")
    if latest["VersionId"] != row["delete_marker_id"]:
        what = "deleted again" if latest["marker"] else "written again"
        return (AuditAction.NOT_RESTORED, f"{what} since the vacuum: {latest['VersionId']} is the latest "
                                          f"version, not its delete marker {row['delete_marker_id']}")
    if row["version_id"] and not any(v["VersionId"] == row["version_id"] for v in versions):
        return (AuditAction.NOT_RESTORED, f"the version it hid ({row['version_id']}) is gone (purged, or expired "
                                          "by a lifecycle rule)")
    below = max((v for v in versions if v["VersionId"] != latest["VersionId"]
                 and v["LastModified"] <= latest["LastModified"]), key=lambda v: v["LastModified"], default=None)
    if below is None or below["marker"]:  # a store that cannot tell took a delete of a key already gone
        return (AuditAction.NOT_RESTORED, "it was gone before the vacuum run: under the run's delete marker "
                                          + (f"lies another, {below['VersionId']}" if below else "lies no version")
                                          + ", so removing it would bring nothing back")
    return [row["delete_marker_id"]]


def _check_purge(row: RowDict, client: Any) -> Verdict:
    """The versions to erase: the one the delete hid and every other noncurrent version of the key
    older than the run's delete marker (a retried upload, an in-place copy: the same rows); or why
    the key is left alone."""
    hidden = row["version_id"]
    if hidden is None:
        return (AuditAction.NOT_PURGED, "the version the delete hid is not recorded (the inventory listed no "
                                        "version id): expire it with a lifecycle rule")
    listed = s3.key_versions(client, row["path"])
    versions = {v["VersionId"]: v for v in listed}
    if hidden in versions and versions[hidden]["IsLatest"]:
        return (AuditAction.NOT_PURGED, f"version {hidden} is current again (restored outside this tool): "
                                        "not erased")
    marker = versions.get(row["delete_marker_id"] or "")
    until = (marker or versions.get(hidden) or {}).get("LastModified")
    older = sorted(v["VersionId"] for v in listed if until is not None and not v["marker"] and not v["IsLatest"]
                   and v["LastModified"] <= until and v["VersionId"] != hidden)
    if hidden not in versions and not older:  # a purge that S3 refused in part erases the rest next time
        return (AuditAction.ALREADY_ABSENT, f"version {hidden} is no longer held (expired by a lifecycle rule, "
                                            "or deleted by another tool)")
    return [v for v in (hidden, *older) if v in versions]
