"""Our vacuums in each table's own history: ``VACUUM START`` before the deletes, ``VACUUM END`` after.

Delta and delta-rs record a vacuum as two commits that add and remove nothing, which users read
with ``DESCRIBE HISTORY`` or ``DeltaTable.history()``. A real run writes the same two into the
tables it deletes in, with Delta's operation names, parameters and metrics, our run id as one more
parameter and this project as the engine.

Where, follows Delta's own rule (``VacuumCommand.shouldLogVacuum``): the session setting
``spark.databricks.delta.vacuum.logging.enabled`` decides on the schemes whose file systems Delta
trusts with concurrent writes, which get the commits by default; S3 never does: a writer through
Delta's S3 log stores may overwrite a commit of ours, or lose its own to it (``S3DynamoDBLogStore``
takes an existing ``N.json`` as its own, recovered). Delta's setting does not turn it on there: in
Delta it commits through Delta's own log store, and says nothing of the table's other writers. Only
a run's or a table's own setting does (:func:`history_setting`), which on S3 attests that every
writer of the table commits with S3 conditional writes; even then a log that shows a DynamoDB log
store's temp files (``_delta_log/.tmp/``) gets none.

deltalake (1.x) has no public way to commit another engine's operation, so the commit file is
written here, put only if absent: a hard link on local disk, ``If-None-Match: *`` on S3. Every
commit is decided from the table's state at the version it goes after (:meth:`TableHistory.of`,
the same gates whichever path writes it), and before each put the log is read forward from that
version: a commit of another writer that changed the table's protocol or metadata stops the
history (the table's report says why), one that did not is stepped over, and one of our own
(its ``txnId``: a put whose answer was lost, or that failed every retry and still landed) is the
commit itself; so is a commit of the same operation for the same run (two runs settling one killed
run each close its START: one END goes in). A put S3 answers with 409 (another conditional write to
the key under way) is tried again at the same version.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio import __version__
from lakeio.deltalog import gates
from lakeio.deltalog.commits import commit_file
from lakeio.deltalog.replay import TableState, read_logs
from lakeio.deltalog.segments import log_segments
from lakeio.errors import HousekeepingError
from lakeio.spark.shapes import of_tables
from lakeio.store import put_if_absent, s3, uris
from lakeio.store.filesystem import Storage
from lakeio.store.uris import TableRoot
from lakeio.text import first_line
from lakeio.times import epoch_ms, hours_ms
from vacuum_jobs.deletes import DeleteSettings
from vacuum_jobs.report import CANNOT_WRITE, NOT_RECORDED, RunTables

START, END = "VACUUM START", "VACUUM END"
_ENGINE_NAME = "lake-housekeeping/"
ENGINE = f"{_ENGINE_NAME}{__version__}"
# The session setting Delta's VACUUM reads (DeltaSQLConf.DELTA_VACUUM_LOGGING_ENABLED).
LOGGING_SETTING = "spark.databricks.delta.vacuum.logging.enabled"
# Where Delta records its vacuums when that setting is unset (VacuumCommand.supportedFsForLogging).
DELTA_RECORDS_ON = frozenset({"wasbs", "wasbss", "abfs", "abfss", "adl", "gs", "file", "hdfs"})
ATTEMPTS = 10  # puts of one commit (versions taken, or 409s) before giving up
_STORES = ("file", "s3")  # where a put-if-absent is trusted (proven first on S3: lakeio.store.put_if_absent)
# What a DynamoDB log store (S3DynamoDBLogStore) leaves in _delta_log/: its temp commit files.
EXTERNAL_LOG_STORE_TRACES = ".tmp"
_AT_ONCE = 16  # tables committed to at once
_LOOK_BACK = 1000  # commits a later run reads back for a killed run's START when its note names no version

# Called with each version just before the commit is put there (tests take the version first).
BeforePut = Callable[[int], None]


class HistoryNotWritten(HousekeepingError):
    """The commit could not go into the table's log; the message says why."""


@dataclass(frozen=True)
class HistorySetting:
    """Whether a table's history is written, and the rule that decided it (said in its report)."""

    on: bool
    rule: str

    def __str__(self) -> str:
        return f"{'on' if self.on else 'off'}: {self.rule}"


def history_setting(root: str, table: bool | None = None, run: bool | None = None,
                    session: bool | None = None) -> HistorySetting:
    """The first of: the table's own setting (tables file), the run's (``--history``/``--no-history``),
    the session's :data:`LOGGING_SETTING`, and Delta's default for the root's scheme."""
    if table is not None:
        return HistorySetting(table, f"history: {str(table).lower()} in the tables file")
    if run is not None:
        return HistorySetting(run, "the run's setting (--history)" if run else "the run's setting (--no-history)")
    scheme = uris.scheme_of(root)
    if session is not None and scheme in DELTA_RECORDS_ON:
        return HistorySetting(session, f"{LOGGING_SETTING}={str(session).lower()} in the Spark session")
    if scheme in DELTA_RECORDS_ON:
        return HistorySetting(True, f"Delta's default on {scheme}://")
    if session:
        return HistorySetting(False, f"{LOGGING_SETTING}=true in the Spark session is Delta's, which commits through its "
                                     f"own log store: on {scheme}:// only --history (or history: true in the tables "
                                     "file) turns it on, attesting that every writer of the table commits with S3 "
                                     "conditional writes")
    return HistorySetting(False, f"Delta's default on {scheme}://, whose writers may overwrite a commit; --history "
                                 "turns it on where every writer of the table commits with S3 conditional writes")


def session_history_setting(spark: SparkSession) -> bool | None:
    """:data:`LOGGING_SETTING` as the session has it; None when unset (or not a boolean, as Delta
    would refuse it: the scheme's default then decides, which on S3 writes nothing)."""
    value = (spark.conf.get(LOGGING_SETTING, None) or "").strip().lower()
    return {"true": True, "false": False}.get(value)


@dataclass(frozen=True)
class VacuumCommit:
    """One commit's operation, with Delta's parameter and metric names (values as Delta spells them)."""

    operation: str
    parameters: dict[str, str]
    metrics: dict[str, str]


def start_commit(run_id: str, run_retention_hours: float | None, retention_check: bool, table_retention_hours: float,
                 files: int, size: int) -> VacuumCommit:
    """What the run is about to delete in a table (``files``, ``size`` bytes), under which retention:
    ``specifiedRetentionMillis`` only where the run was given one (``run_retention_hours``), as Delta."""
    parameters = {"retentionCheckEnabled": json.dumps(retention_check),
                  "defaultRetentionMillis": json.dumps(hours_ms(table_retention_hours))}
    if run_retention_hours is not None:
        parameters["specifiedRetentionMillis"] = json.dumps(hours_ms(run_retention_hours))
    parameters["runId"] = json.dumps(run_id)
    return VacuumCommit(START, parameters, {"numFilesToDelete": str(files), "sizeOfDataToDelete": str(size)})


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
    """What writing one table's history needs to know, decided from its state at one version."""

    root: TableRoot
    setting: HistorySetting
    in_commit_timestamps: bool = False
    table_retention_hours: float = 0.0  # the table's own delta.deletedFileRetentionDuration
    run_retention_hours: float | None = None  # the retention the run was given (the run's or the tables file's), if any
    not_recordable: str | None = None  # why its history cannot be written

    @classmethod
    def of(cls, state: TableState, setting: HistorySetting, table_retention_hours: float = 0.0,
           run_retention_hours: float | None = None) -> TableHistory:
        """The table's history as its state (``state.version``) allows: every commit, whichever path
        writes it, passes these gates."""
        root = state.table_root
        scheme = uris.scheme_of(root)
        why = None
        if scheme not in _STORES:
            why = f"{scheme}:// has no put-if-absent this job trusts for a commit"
        elif any(key.startswith("delta.coordinatedCommits.") for key in state.configuration):
            why = "a commit coordinator owns this table's commits"
        else:
            why = gates.catalog_managed(state) or gates.unknown_protocol(state)
        ict = state.configuration.get("delta.enableInCommitTimestamps", "false").lower() == "true"
        return cls(root, setting, ict, table_retention_hours, run_retention_hours,
                   f"{why} (at version {state.version})" if why else None)


@dataclass
class LogWriter:
    """Put-if-absent commits into tables' logs; ``s3_client`` makes the S3 client when one is first needed,
    once, for every thread (:meth:`commit_each` commits to several tables at once)."""

    s3_client: Callable[[], Any]
    before_put: BeforePut | None = None
    # An s3:// folder of ours (the audit's journal) where the store's put-if-absent is proven before the first S3 put.
    proof_folder: str | None = None
    _client: Any = field(default=None, repr=False)
    _client_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def commit(self, table: TableHistory, after: int, commit: VacuumCommit) -> int:
        """Put ``commit`` at the first free version after ``after`` (the version ``table`` was decided
        from), every commit in between read and checked; the version it went to. HistoryNotWritten
        when it cannot."""
        if not table.setting.on:
            raise HistoryNotWritten(str(table.setting))
        if table.not_recordable:
            raise HistoryNotWritten(table.not_recordable)
        txn = str(uuid.uuid4())
        version = after + 1
        try:
            if self._external_log_store(table.root):
                raise HistoryNotWritten(f"its log holds a DynamoDB log store's temp files (_delta_log/"
                                        f"{EXTERNAL_LOG_STORE_TRACES}/): a writer through it takes an existing "
                                        "commit file as its own")
            for _ in range(ATTEMPTS):
                version, ours = self._catch_up(table.root, version, txn, commit)
                if ours:  # an earlier put of this commit went in (its answer was lost), or another run's of the same
                    return version
                text = self._line(table, version, commit, version - 1, txn)
                if self.before_put is not None:
                    self.before_put(version)
                if self._put(commit_file(table.root, version), text, txn):
                    return version
        except HistoryNotWritten:
            raise
        except Exception as exc:  # a log we may not write or read: the vacuum goes on, its history noted
            raise HistoryNotWritten(f"{CANNOT_WRITE}: {first_line(exc)}") from exc
        raise HistoryNotWritten(f"{ATTEMPTS} puts in a row found the version taken or contended")

    def _put(self, uri: str, text: str, txn: str) -> bool:
        """:meth:`_put_if_absent`; where every try of it failed, the key read back: a put whose answers were all
        lost may have gone in (then it is ours), or another writer's commit holds the version."""
        try:
            return self._put_if_absent(uri, text)
        except Exception:
            landed = self._read(uri)
            if landed is None:
                raise
            return _commit_info(landed).get("txnId") == txn

    def _catch_up(self, root: str, version: int, txn: str, commit: VacuumCommit) -> tuple[int, bool]:
        """The log read forward from ``version``: the first version no commit holds, or the one that
        holds ours (``txn``, or ``commit``'s operation for the same run: True). HistoryNotWritten at a
        commit that changed the protocol or metadata."""
        while (text := self._read(commit_file(root, version))) is not None:
            actions = _actions(text)
            info = _commit_info_of(actions)
            if info.get("txnId") == txn or (
                    info.get("operation") == commit.operation and info.get("engineInfo", "").startswith(_ENGINE_NAME)
                    and info.get("operationParameters", {}).get("runId") == commit.parameters["runId"]):
                return version, True
            if any(key in action for action in actions for key in ("protocol", "metaData")):
                raise HistoryNotWritten(f"version {version}, committed by another writer during the run, "
                                        f"changed the table's protocol or metadata")
            version += 1
        return version, False

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

    def find(self, root: str, latest: int, run_id: str, after: int | None) -> dict[str, int]:
        """The commits of run ``run_id`` in ``root``'s log after version ``after`` (unknown: among the last
        :data:`_LOOK_BACK` commits) up to ``latest``: {operation: version}. By version, not by the commits'
        clocks: a writer whose clock runs behind hides nothing."""
        found: dict[str, int] = {}
        first = after + 1 if after is not None else max(0, latest - _LOOK_BACK + 1)
        for version in range(first, latest + 1):
            text = self._read(commit_file(root, version))
            if text is None:  # cleaned up by the log's retention
                continue
            info = _commit_info(text)
            if info.get("operationParameters", {}).get("runId") == json.dumps(run_id):
                found.setdefault(info.get("operation", ""), version)
        return found

    def _line(self, table: TableHistory, version: int, commit: VacuumCommit, read_version: int, txn: str) -> str:
        now = epoch_ms()
        info: dict[str, Any] = {}
        if table.in_commit_timestamps:  # first, and later than the commit before: the protocol's rule
            before = _commit_info(self._read(commit_file(table.root, version - 1)) or "")
            info["inCommitTimestamp"] = max(now, int(before.get("inCommitTimestamp", 0)) + 1)
        info.update({
            "timestamp": now, "operation": commit.operation, "operationParameters": commit.parameters,
            "readVersion": read_version, "isolationLevel": "SnapshotIsolation", "isBlindAppend": True,
            "operationMetrics": commit.metrics, "engineInfo": ENGINE, "txnId": txn,
        })
        return json.dumps({"commitInfo": info}, separators=(",", ":")) + "\n"

    def _external_log_store(self, root: str) -> bool:
        """Whether ``root``'s log holds a DynamoDB log store's temp commit files."""
        folder = uris.join(root, "_delta_log", EXTERNAL_LOG_STORE_TRACES)
        if uris.scheme_of(root) == "s3":
            return s3.holds_keys_under(self._s3(), folder)
        return os.path.isdir(uris.local_path(folder))

    def _put_if_absent(self, uri: str, text: str) -> bool:
        if uris.scheme_of(uri) == "s3":
            if self.proof_folder is None or uris.scheme_of(uris.canonical(self.proof_folder)) != "s3":
                raise HistoryNotWritten("history on S3 needs an --audit-table on S3: the folder where the run first proves "
                                        "that the store honours If-None-Match")
            put_if_absent.prove(self.proof_folder, "VACUUM START and END in the tables' logs", self._s3)
            return s3.put_if_absent(self._s3(), uri, text.encode())
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
            return s3.read_text(self._s3(), uri)
        try:
            with open(uris.local_path(uri), encoding="utf-8") as src:
                return src.read()
        except FileNotFoundError:
            return None

    def _s3(self) -> Any:
        with self._client_lock:
            if self._client is None:
                self._client = self.s3_client()
            return self._client


def history_writer(settings: DeleteSettings, before_put: BeforePut | None = None,
                   proof_folder: str | None = None) -> LogWriter:
    """A LogWriter reaching S3 as the deletes do (``settings``: endpoint, timeouts, attempts)."""
    return LogWriter(settings.s3_client, before_put, proof_folder)


# A table's history as a run decides it now, from the table's state (TableHistory.of with the run's settings).
HistoryOf = Callable[[TableState], TableHistory]


@dataclass
class RunHistory:
    """Where one vacuum run's history stands in the tables it deletes from: the tables that write it
    (decided at their gates), the VACUUM START each got, then its END. Each step says the outcome in
    the table's report (``history``)."""

    writer: LogWriter
    run_id: str
    retention_check: bool  # the run enforces the tables' own retention (START's retentionCheckEnabled)
    tables: dict[TableRoot, TableHistory] = field(default_factory=dict)  # those whose history is on
    started: dict[TableRoot, int] = field(default_factory=dict)  # the version each START went to

    def decide(self, history: TableHistory, run_tables: RunTables) -> None:
        """Write the table's history if its setting is on; else its report says which rule kept it off."""
        if history.setting.on:
            self.tables[history.root] = history
        else:
            run_tables[history.root].history = str(history.setting)

    def start(self, deleting: list[TableRoot], to_delete: DataFrame, run_tables: RunTables) -> None:
        """A VACUUM START in each table of ``deleting`` whose history is on, with what it is about to delete
        (``to_delete``: shapes.CANDIDATES). Written after the logs' re-check, which therefore never sees it."""
        tables = [root for root in deleting if root in self.tables]
        if not tables:
            return
        sizes = {r["table_root"]: (r["n"], r["bytes"]) for r in of_tables(to_delete, tables).groupBy("table_root").agg(
            F.count(F.lit(1)).alias("n"), F.coalesce(F.sum("length"), F.lit(0)).alias("bytes")).collect()}
        commits = []
        for root in tables:
            version, history = run_tables[root].version, self.tables[root]
            assert version is not None, root
            files, size = sizes.get(root, (0, 0))
            # After the version the table's history was decided from: the put checks every commit since.
            commits.append((history, version, start_commit(self.run_id, history.run_retention_hours, self.retention_check,
                                                           history.table_retention_hours, files, size)))
        for root, written in zip(tables, self.writer.commit_each(commits)):
            if isinstance(written, HistoryNotWritten):
                run_tables[root].history = f"{NOT_RECORDED}: {written} ({self.tables[root].setting})"
            else:
                self.started[root] = written

    def end(self, run_tables: RunTables, *, counted: bool) -> None:
        """A VACUUM END in each table that got a START, with its delete counts, or FAILED without them
        when the deletes did not finish (``counted`` False)."""
        roots = list(self.started)
        commits = []
        for root in roots:
            counts = run_tables[root].counts
            commits.append((self.tables[root], self.started[root],
                            end_commit(self.run_id, counts.deleted_files, counts.failed_files) if counted
                            else end_commit(self.run_id, None, None)))
        for root, written in zip(roots, self.writer.commit_each(commits)):
            end = (f"{END} at version {written}" if not isinstance(written, HistoryNotWritten)
                   else f"{END} {NOT_RECORDED}: {written}")
            run_tables[root].history = f"{START} at version {self.started[root]}, {end} ({self.tables[root].setting})"


def close_killed_run(spark: SparkSession, writer: LogWriter, run_id: str, planned: dict[str, int | None],
                     deleted: dict[str, int], history_of: HistoryOf) -> dict[str, str]:
    """A VACUUM END (FAILED, with the deletes read back: ``deleted`` per root) in each table of ``planned``
    (root: the version run ``run_id`` planned it from, None where its note does not say) where that run,
    killed, left a VACUUM START without one, decided as any commit of ours is: from the table's state now
    (``history_of``). Every commit since the START is read, up to the version the END goes to: where one
    closes it already (another run settling the same killed run), that one stands. {root: why} where it
    was not done."""
    storage = Storage(spark)
    problems: dict[str, str] = {}
    segments, unreadable = log_segments(storage, [r for r in planned if uris.scheme_of(r) in _STORES])
    problems.update(unreadable)
    starts = {}
    for segment in segments:
        try:
            found = writer.find(segment.table_root, segment.version, run_id, planned.get(segment.table_root))
        except Exception as exc:  # the settling goes on; the START stays open, said in the log
            problems[segment.table_root] = first_line(exc)
            continue
        if START in found and END not in found:
            starts[segment.table_root] = found[START]
    if not starts:
        return problems
    replay = read_logs(spark, storage, list(starts), check_paths=False)
    problems.update({str(root): why for root, why in replay.failures.items()})
    for root, state in replay.states.items():
        try:
            if END in writer.find(root, state.version, run_id, starts[root]):
                continue  # closed meanwhile; a later END is caught up with by the commit itself
            writer.commit(history_of(state), state.version, end_commit(run_id, deleted.get(root, 0), None))
        except HistoryNotWritten as exc:
            problems[root] = str(exc)
        except Exception as exc:  # a log that cannot be read now: the START stays open, said in the log
            problems[root] = first_line(exc)
    return problems


def _actions(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _commit_info(text: str) -> dict[str, Any]:
    return _commit_info_of(_actions(text))


def _commit_info_of(actions: list[dict[str, Any]]) -> dict[str, Any]:
    return next((a["commitInfo"] for a in actions if isinstance(a.get("commitInfo"), dict)), {})
