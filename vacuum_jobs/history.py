"""Our vacuums in each table's own history: ``VACUUM START`` before the deletes, ``VACUUM END`` after.

Delta and delta-rs record a vacuum as two commits that add and remove nothing, which users read
with ``DESCRIBE HISTORY`` or ``DeltaTable.history()``. A real run writes the same two into every
table it deletes in, with Delta's operation names, parameters and metrics, our run id as one more
parameter and this project as the engine.

deltalake (1.x) has no public way to commit another engine's operation, so the commit file is
written here, put only if absent: a hard link on local disk, ``If-None-Match: *`` on S3. A writer
that takes a version first keeps it, and the commit goes to the next one, unless that writer's
commit changed the table's protocol or metadata: then the history is not written, and the table's
report says why. The same goes for other stores (no put-if-absent this job trusts) and for a log
the job may not write; the table is vacuumed all the same. Tables with in-commit timestamps get one, later than
the commit before.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lakeio import __version__, uris
from lakeio.deltalog.commits import commit_file
from lakeio.deltalog.replay import TableState
from lakeio.deltalog.segments import log_segments
from lakeio.errors import HousekeepingError
from lakeio.storage import Storage
from lakeio.text import first_line
from lakeio.times import MS_PER_HOUR, epoch_ms
from vacuum_jobs.deleter import DeleteSettings, S3BatchDeleter

START, END = "VACUUM START", "VACUUM END"
ENGINE = f"lake-housekeeping/{__version__}"
ATTEMPTS = 10  # versions taken by other writers in a row before giving up
_STORES = ("file", "s3")  # where a put-if-absent is trusted
# S3's answers when the key exists (412), or another conditional write to it is under way (409).
_TAKEN = ("PreconditionFailed", "ConditionalRequestConflict")
_AT_ONCE = 16  # tables committed to at once
_LOOK_BACK = 1000  # commits a later run reads back, newest first, for a killed run's START

# Called with each version just before the commit is put there (tests take the version first).
BeforePut = Callable[[int], None]


class HistoryNotWritten(HousekeepingError):
    """The commit could not go into the table's log; the message says why."""


@dataclass(frozen=True)
class VacuumCommit:
    """One commit's operation, with Delta's parameter and metric names (values as Delta spells them)."""

    operation: str
    parameters: dict[str, str]
    metrics: dict[str, str]


def start_commit(run_id: str, retention_hours: float, retention_check: bool, table_retention_hours: float,
                 files: int, size: int) -> VacuumCommit:
    """What the run is about to delete in a table (``files``, ``size`` bytes), under which retention."""
    return VacuumCommit(START, {
        "retentionCheckEnabled": json.dumps(retention_check),
        "defaultRetentionMillis": json.dumps(round(table_retention_hours * MS_PER_HOUR)),
        "specifiedRetentionMillis": json.dumps(round(retention_hours * MS_PER_HOUR)),
        "runId": json.dumps(run_id),
    }, {"numFilesToDelete": str(files), "sizeOfDataToDelete": str(size)})


def end_commit(run_id: str, deleted: int | None, failed: int | None) -> VacuumCommit:
    """COMPLETED when no delete failed; FAILED when some did, or ``failed`` is None (the run died
    before it could count them). ``deleted`` None: no counts at all (Delta's FAILED has none)."""
    status = "COMPLETED" if failed == 0 else "FAILED"
    metrics = {} if deleted is None else {"numDeletedFiles": str(deleted), "numVacuumedDirectories": "0"}
    if deleted is not None and failed is not None:
        metrics["numFailedDeletes"] = str(failed)
    return VacuumCommit(END, {"status": json.dumps(status), "runId": json.dumps(run_id)}, metrics)


@dataclass(frozen=True)
class TableHistory:
    """What writing one table's history needs to know from its log."""

    root: str
    in_commit_timestamps: bool = False
    retention_hours: float = 0.0  # the table's own delta.deletedFileRetentionDuration
    not_recordable: str | None = None  # why its history cannot be written

    @classmethod
    def of(cls, root: str, state: TableState, retention_hours: float) -> TableHistory:
        scheme = uris.scheme_of(root)
        why = None
        if scheme not in _STORES:
            why = f"{scheme}:// has no put-if-absent this job trusts for a commit"
        elif any(key.startswith("delta.coordinatedCommits.") for key in state.configuration):
            why = "a commit coordinator owns this table's commits"
        ict = state.configuration.get("delta.enableInCommitTimestamps", "false").lower() == "true"
        return cls(root, ict, retention_hours, why)


@dataclass
class LogWriter:
    """Put-if-absent commits into tables' logs; ``s3_client`` makes the S3 client when one is needed."""

    s3_client: Callable[[], Any]
    before_put: BeforePut | None = None
    _client: Any = field(default=None, repr=False)

    def commit(self, table: TableHistory, after: int, commit: VacuumCommit) -> int:
        """Put ``commit`` at the first free version after ``after`` (the version it read); the version
        it went to. HistoryNotWritten when it cannot."""
        if table.not_recordable:
            raise HistoryNotWritten(table.not_recordable)
        version = after + 1
        try:
            for _ in range(ATTEMPTS):
                text = self._line(table, version, commit, after)
                if self.before_put is not None:
                    self.before_put(version)
                if self._put_if_absent(commit_file(table.root, version), text):
                    return version
                theirs = self._read(commit_file(table.root, version)) or ""
                if any(key in action for action in _actions(theirs) for key in ("protocol", "metaData")):
                    raise HistoryNotWritten(f"version {version}, committed by another writer during the run, "
                                            f"changed the table's protocol or metadata")
                version += 1
        except HistoryNotWritten:
            raise
        except Exception as exc:  # a log we may not write or read: the vacuum goes on, its history noted
            raise HistoryNotWritten(f"cannot write its log: {first_line(exc)}") from exc
        raise HistoryNotWritten(f"{ATTEMPTS} versions in a row were taken by other writers")

    def commit_each(self, commits: list[tuple[TableHistory, int, VacuumCommit]]) -> list[int | HistoryNotWritten]:
        """:meth:`commit` for each (table, after, commit), several at once (each is a few requests
        to a store): per table the version, or why not."""

        def one(item: tuple[TableHistory, int, VacuumCommit]) -> int | HistoryNotWritten:
            try:
                return self.commit(*item)
            except HistoryNotWritten as exc:
                return exc

        if len(commits) <= 1:
            return [one(item) for item in commits]
        with ThreadPoolExecutor(max_workers=min(_AT_ONCE, len(commits))) as pool:
            return list(pool.map(one, commits))

    def find(self, root: str, latest: int, run_id: str, since_ms: int) -> dict[str, tuple[int, dict[str, Any]]]:
        """The commits of run ``run_id`` among ``root``'s commits made since ``since_ms``, read newest
        first from ``latest``: {operation: (version, its commitInfo)}."""
        found: dict[str, tuple[int, dict[str, Any]]] = {}
        for version in range(latest, max(-1, latest - _LOOK_BACK), -1):
            text = self._read(commit_file(root, version))
            if text is None:  # cleaned up by the log's retention
                break
            info = _commit_info(text)
            when = info.get("inCommitTimestamp", info.get("timestamp"))
            if isinstance(when, int) and when < since_ms:
                break
            if info.get("operationParameters", {}).get("runId") == json.dumps(run_id):
                found.setdefault(info.get("operation", ""), (version, info))
        return found

    def _line(self, table: TableHistory, version: int, commit: VacuumCommit, read_version: int) -> str:
        now = epoch_ms()
        info: dict[str, Any] = {}
        if table.in_commit_timestamps:  # later than the commit before: the protocol's rule
            before = _commit_info(self._read(commit_file(table.root, version - 1)) or "")
            info["inCommitTimestamp"] = max(now, int(before.get("inCommitTimestamp", 0)) + 1)
        info.update({
            "timestamp": now, "operation": commit.operation, "operationParameters": commit.parameters,
            "readVersion": read_version, "isolationLevel": "SnapshotIsolation", "isBlindAppend": True,
            "operationMetrics": commit.metrics, "engineInfo": ENGINE, "txnId": str(uuid.uuid4()),
        })
        return json.dumps({"commitInfo": info}, separators=(",", ":")) + "\n"

    def _put_if_absent(self, uri: str, text: str) -> bool:
        if uris.scheme_of(uri) == "s3":
            from botocore.exceptions import ClientError

            bucket, key = uris.bucket_and_key(uri)
            try:
                self._s3().put_object(Bucket=bucket, Key=key, Body=text.encode(), IfNoneMatch="*")
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in _TAKEN:
                    return False
                raise
            return True
        path = uris.local_path(uri)
        temp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4()}.tmp")
        with open(temp, "w", encoding="utf-8") as out:
            out.write(text)
        try:
            os.link(temp, path)  # fails when the name exists: the put-if-absent of a local disk
        except FileExistsError:
            return False
        finally:
            os.unlink(temp)
        return True

    def _read(self, uri: str) -> str | None:
        if uris.scheme_of(uri) == "s3":
            bucket, key = uris.bucket_and_key(uri)
            try:
                return self._s3().get_object(Bucket=bucket, Key=key)["Body"].read().decode()
            except self._s3().exceptions.NoSuchKey:
                return None
        try:
            with open(uris.local_path(uri), encoding="utf-8") as src:
                return src.read()
        except FileNotFoundError:
            return None

    def _s3(self) -> Any:
        if self._client is None:
            self._client = self.s3_client()
        return self._client


def history_writer(settings: DeleteSettings, before_put: BeforePut | None = None) -> LogWriter:
    """A LogWriter reaching S3 as the deletes do (``settings``: endpoint, timeouts, attempts)."""
    return LogWriter(lambda: S3BatchDeleter.make_client(
        settings.endpoint_url, settings.read_timeout_seconds,
        retries={"mode": "standard", "max_attempts": settings.max_attempts}), before_put)


def close_killed_run(writer: LogWriter, storage: Storage, run_id: str, roots: list[str], noted_ms: int,
                     deleted: dict[str, int]) -> dict[str, str]:
    """A VACUUM END (FAILED, with the deletes read back: ``deleted`` per root) in each of ``roots``
    where run ``run_id``, killed, left a VACUUM START without one; {root: why} where that failed."""
    problems: dict[str, str] = {}
    segments, unreadable = log_segments(storage, [r for r in roots if uris.scheme_of(r) in _STORES])
    problems.update(unreadable)
    for segment in segments:
        root = segment.table_root
        try:
            found = writer.find(root, segment.version, run_id, noted_ms)
            if START in found and END not in found:
                info = found[START][1]
                writer.commit(TableHistory(root, "inCommitTimestamp" in info), segment.version,
                              end_commit(run_id, deleted.get(uris.canonical(root), 0), None))
        except Exception as exc:  # the settling goes on; the START stays open, said in the log
            problems[root] = first_line(exc)
    return problems


def _actions(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _commit_info(text: str) -> dict[str, Any]:
    return next((a["commitInfo"] for a in _actions(text) if isinstance(a.get("commitInfo"), dict)), {})
