"""Undoing a vacuum's deletes, then finishing them: ``restore`` and ``purge``.

On a versioned S3 bucket a vacuum's delete only adds a delete marker; the audit records it
and the version it hides (``delete_marker_id``, ``version_id``). ``restore`` removes exactly
the markers one run added, so each file is back, byte for byte, under its original version
id. ``purge`` deletes for good the versions that vacuum runs hid more than N days ago and
that nothing restored: only then are the bytes erased. With a trash folder (local disks,
HDFS, ABFS: ``--trash``) the same two steps move a file back from ``trash_path``, or delete
it there; a file written at its path since is left alone. On S3 each acts on a key only
while it still looks as the run left it, checked against the key's version listing just before:

- restore: the run's marker is still the key's latest version. A key written or deleted
  again since is left alone (``not_restored``, with why).
- purge: no table needs the file again (its log and every other audited table's are read
  again: a Delta RESTORE, a clone of an old version), and the hidden version is not the key's
  current version again (restored by hand), so
  purging never removes a current object. It erases that version and every other noncurrent
  version of the key older than the run's delete marker (a retried upload, an in-place copy:
  the same rows under the same name); a version written after the marker is left. A version
  already gone (a lifecycle rule expired it) is ``already_absent``. A version S3 Object Lock
  keeps (a retention date, a legal hold) S3 refuses to delete: the file is ``failed``, its
  error naming the lock (``version V locked until <date> (<mode> mode)``, ``under a legal
  hold``), and every later purge tries again what is left of it, so the first one after the
  date erases it. Governance-mode retention is bypassed only when asked
  (``DeleteSettings.bypass_governance_retention``, ``--bypass-governance-retention``).

A check and its delete are two requests: a writer racing between them can at worst see its
own new version stay current (restore) or a hand restore of that instant undone (purge).
Both are dry runs unless applied; an applied one appends its rows to the audit table, each
naming the vacuum run it acts on (``source_run_id``). Other deletes (unversioned S3 buckets,
other stores without ``--trash``) were final and are reported as ``not_restored``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.audit.contract import REMOVED, AuditAction, RunTable, append_run, check_audit_table, read_audit
from lakeio.audit.journal import AuditNotRecorded, AuditUnwritable
from lakeio.deltalog.replay import TableState
from lakeio.errors import HousekeepingError, InvalidOption
from lakeio.pins import KeepVersions, Pin
from lakeio.pins import keep_versions as pins_given
from lakeio.spark import catalog
from lakeio.spark.session import check_workers
from lakeio.spark.shapes import OUTCOMES
from lakeio.spark.steps import Step, Steps, one_run
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.store.put_if_absent import PutIfAbsentUnproven
from lakeio.tables.pins import PinsUnreadable, pins_with_table
from lakeio.tables.read import TableNotFound
from lakeio.tables.write import BeforeCommit, IncompatibleTable
from lakeio.text import StrEnum, first_line
from lakeio.times import cutoff_ms, epoch_ms, iso_utc
from vacuum_jobs.delete_tasks import cap_share, where_reachable
from vacuum_jobs.deletes import DeleteSettings
from vacuum_jobs.history import TableHistory, history_setting, session_history_setting
from vacuum_jobs.interrupted import ready_audit
from vacuum_jobs.needed_again import OPERATOR_MUST_ACT, KeptBecause, needed_by_the_lake
from vacuum_jobs.undo_files import UNDONE, act

log = logging.getLogger(__name__)

PROBLEM_SAMPLE = 100  # keys left alone or failed, named in the report (the audit names every one)


class UndoError(HousekeepingError):
    """Nothing to act on: no audit table, or no such run in it."""


@dataclass
class UndoOptions:
    """What a restore or purge acts on, and how."""

    audit_table: str
    tables: Sequence[str] | None = None  # default: every table of the run (restore) or the audit (purge)
    dry_run: bool = True  # acting is said out loud: dry_run=False
    delete: DeleteSettings = field(default_factory=DeleteSettings)  # endpoint, pace, retries
    inventory_table: str | None = None  # purge: also re-check every Delta table it shows (default: the audited ones)
    keep_versions: tuple[Pin, ...] = ()  # purge: pinned versions (lakeio.pins); a hidden file one reads is kept
    pins_table: str | None = None  # purge: the pins table (lakeio.tables.pins); its pins too
    now_ms: int | None = None  # for tests


class UndoCommand(StrEnum):
    """What an undo run does to the deletes it selects."""

    RESTORE = "restore"  # bring back one vacuum run's deletes
    PURGE = "purge"  # erase for good what deletes older than the undo window kept


@dataclass
class UndoReport:
    command: UndoCommand
    run_id: str
    started_at: str
    dry_run: bool
    acts_on: str  # which deletes: "vacuum run R", or "deletes older than N day(s)"
    tables: dict[str, dict[str, int]] = field(default_factory=dict)  # per table: files per outcome
    problems: list[str] = field(default_factory=list)  # sample of keys left alone or failed: "path: why"
    warnings: list[str] = field(default_factory=list)  # lifecycle rules that expire versions first, unreadable logs
    # purge: files kept because a table needs them again, per rule (vacuum_jobs.needed_again.KeptBecause)
    kept: dict[str, int] = field(default_factory=dict)
    audit_problems: list[str] = field(default_factory=list)  # what the audit table did not take, and where it is kept
    step_seconds: dict[str, float] = field(default_factory=dict)  # each step's time, in order

    @property
    def ok(self) -> bool:
        """Nothing the operator must act on: every key done, or kept only because a table needs it."""
        left = sum(n for counts in self.tables.values() for action, n in counts.items() if action in _LEFT_ALONE)
        needed = sum(n for rule, n in self.kept.items() if rule not in OPERATOR_MUST_ACT)
        return not self.audit_problems and left == needed

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def summary(self) -> str:
        mode = "DRY RUN: nothing changed" if self.dry_run else "applied"
        lines = [f"{self.command} run {self.run_id} ({mode}) of {self.acts_on}, at {self.started_at}"]
        for table, counts in sorted(self.tables.items()):
            lines.append(f"  {table}: " + ", ".join(f"{n:,} {action}" for action, n in sorted(counts.items())))
        if not self.tables:
            lines.append("  nothing to do")
        lines += [f"  left alone: {problem}" for problem in self.problems]
        needed = {rule: n for rule, n in sorted(self.kept.items()) if rule not in OPERATOR_MUST_ACT}
        if needed:
            lines.append(f"warning: {sum(needed.values()):,} file(s) kept because a table needs them again ("
                         + ", ".join(f"{rule}: {n:,}" for rule, n in needed.items()) + "); not an error")
        lines += [f"warning: {warning}" for warning in self.warnings]
        lines += [f"error: {problem}" for problem in self.audit_problems]
        return "\n".join(lines)


# Outcomes that make a run exit 1: a key left alone, or a request that failed.
_LEFT_ALONE = (AuditAction.NOT_RESTORED, AuditAction.NOT_PURGED, AuditAction.FAILED)


def restore(
    spark: SparkSession,
    audit_table: str,
    run_id: str,
    *,
    dry_run: bool = True,
    tables: Sequence[str] | None = None,
    delete: DeleteSettings | None = None,
    now_ms: int | None = None,
) -> UndoReport:
    """Bring back every file one vacuum run deleted: remove the delete markers it added (versioned
    S3 buckets), or move the files back from its trash.

    Args:
        spark: the session to run in.
        audit_table: the vacuum audit table the run recorded its deletes in (a URI or a catalog name).
        run_id: the vacuum run whose deletes to undo.
        dry_run: check and report only; ``False`` restores.
        tables: only these tables' files; default: every table of the run.
        delete: the S3 client's endpoint, pace and retries; default: :class:`DeleteSettings`.
        now_ms: the run's clock, epoch milliseconds (tests); default: now.

    Returns:
        The :class:`UndoReport`: per table, files per outcome, and what was left alone and why.

    Raises:
        UndoError: no audit table, or no such run in it.
    """
    options = UndoOptions(audit_table, tables=tables, dry_run=dry_run, delete=delete or DeleteSettings(), now_ms=now_ms)
    return Undo(spark, options).restore(run_id)


def purge(
    spark: SparkSession,
    audit_table: str,
    older_than_days: float,
    *,
    dry_run: bool = True,
    tables: Sequence[str] | None = None,
    inventory_table: str | None = None,
    delete: DeleteSettings | None = None,
    now_ms: int | None = None,
    keep_versions: KeepVersions | None = None,
    pins_table: str | None = None,
) -> UndoReport:
    """Erase for good what vacuum runs kept of their deletes (the hidden versions, the trash copies)
    more than ``older_than_days`` ago, where nothing restored them since.

    Args:
        spark: the session to run in.
        audit_table: the vacuum audit table (a URI or a catalog name).
        older_than_days: the undo window: deletes younger than this stay restorable.
        dry_run: check and report only; ``False`` erases.
        tables: only these tables' files; default: every table of the audit.
        inventory_table: also re-check every Delta table this inventory shows (a file one of them
            needs again is left alone); default: the audited tables only.
        delete: the S3 client's endpoint, pace and retries; default: :class:`DeleteSettings`. Its
            ``bypass_governance_retention`` erases versions under governance-mode Object Lock too.
        now_ms: the run's clock, epoch milliseconds (tests); default: now.
        keep_versions: pinned versions, as ``vacuum_jobs.vacuum`` takes them: a hidden file one reads is
            not erased, and named with the restore that brings it back.
        pins_table: the pins table (``python -m vacuum_jobs pin`` writes it): its pins too.

    Returns:
        The :class:`UndoReport`: per table, files per outcome, and what was left alone and why.

    Raises:
        UndoError: no audit table, or the pins table cannot be read.
    """
    options = UndoOptions(audit_table, tables=tables, dry_run=dry_run, delete=delete or DeleteSettings(),
                          inventory_table=inventory_table, now_ms=now_ms, keep_versions=pins_given(keep_versions),
                          pins_table=pins_table)
    return Undo(spark, options).purge(older_than_days)


class Undo:
    """One action per command: select the deletes from the audit, check each key, act, record."""

    def __init__(self, spark: SparkSession, options: UndoOptions, *, before_commit: BeforeCommit | None = None):
        """``before_commit`` is told the table each commit to the audit is about to go into (tests hold a
        run there)."""
        self.spark = spark
        self.before_commit = before_commit
        self.options = replace(options, audit_table=catalog.resolve(spark, options.audit_table, must_be_delta=False),
                               tables=None if options.tables is None
                               else [catalog.resolve(spark, t) for t in options.tables])
        self.progress = Steps(spark, log)
        self.audit_problems: list[str] = []
        check_workers(spark)

    @one_run
    def restore(self, run_id: str) -> UndoReport:
        now_ms, audit = self._start()
        of_run = audit.where(F.col("run_id") == run_id)
        if not of_run.take(1):
            raise UndoError(f"{self.options.audit_table}: no vacuum run {run_id!r} in the audit table")
        deleted = self._in_scope(of_run.where(F.col("path").isNotNull() & F.col("action").isin(*REMOVED)),
                                 of_run, f"vacuum run {run_id}")
        undone = audit.where((F.col("source_run_id") == run_id) & (F.col("action") == AuditAction.RESTORED.value))
        selected = deleted.join(undone.select("path"), "path", "left_anti").withColumn("source_run_id", F.lit(run_id))
        report = self._report(UndoCommand.RESTORE, now_ms, f"vacuum run {run_id}")
        return self._run(report, selected, AuditAction.RESTORED, now_ms, None)

    @one_run
    def purge(self, older_than_days: float) -> UndoReport:
        if not older_than_days >= 0:
            raise InvalidOption("older_than_days must be >= 0")
        try:
            pins = pins_with_table(self.spark, self.options.keep_versions, self.options.pins_table)
        except PinsUnreadable as exc:
            raise UndoError(f"{exc}: nothing is erased") from None
        now_ms, audit = self._start()
        before_ms = cutoff_ms(now_ms, older_than_days * 24)
        restorable = self._in_scope(audit.where(
            F.col("action").isin(*REMOVED) & F.coalesce("delete_marker_id", "trash_path").isNotNull()), audit,
            "the audit table")
        hidden = restorable.where(F.unix_millis("timestamp") < before_ms)
        finished = audit.where(F.col("action").isin(AuditAction.RESTORED.value, AuditAction.PURGED.value,
                                                    AuditAction.ALREADY_ABSENT.value)
                               & F.col("source_run_id").isNotNull())
        selected = hidden.withColumn("source_run_id", F.col("run_id")).join(
            finished.select("path", "source_run_id"), ["path", "source_run_id"], "left_anti")
        report = self._report(UndoCommand.PURGE, now_ms, f"deletes older than {older_than_days:g} day(s), before "
                                               f"{iso_utc(before_ms)}")
        needed = needed_by_the_lake(self.spark, self.progress, audit, selected, report.warnings, now_ms,
                                    self.options.inventory_table, pins).localCheckpoint(eager=True)
        report.kept = {row["rule"]: row["count"] for row in needed.groupBy("rule").count().collect()}
        restore_with = F.concat(F.lit("; bring it back with: python -m vacuum_jobs restore --audit-table "
                                      f"{self.options.audit_table} --run-id "), F.col("source_run_id"),
                                F.lit(" --table "), F.col("table_root"))
        left_alone = selected.join(needed, ["path", "source_run_id"]).select(
            *[F.col(c) for c in UNDONE.names if c not in ("action", "error", "at_ms")],
            F.lit(AuditAction.NOT_PURGED.value).alias("action"),
            F.concat(F.col("rule"), F.lit(": "), F.col("needed_by"), F.lit(" ("), F.col("detail"), F.lit(")"),
                     F.when(F.col("rule").isin(KeptBecause.LIVE_AGAIN.value, KeptBecause.PINNED.value), restore_with)
                     .otherwise(F.lit("")))
            .alias("error"),
            F.lit(now_ms).alias("at_ms")).select(*UNDONE.names)
        # The tables whose deletes it keeps an eye on: each gets its row, due or not, so that the erasure
        # evidence sees the purges that run (the undo window bounds their erasure).
        watched = sorted(r["table_root"] for r in restorable.select("table_root").distinct().collect())
        return self._run(report, selected.join(needed, ["path", "source_run_id"], "left_anti"), AuditAction.PURGED,
                         now_ms, older_than_days, left_alone, watched)

    def _start(self) -> tuple[int, DataFrame]:
        now_ms = epoch_ms() if self.options.now_ms is None else self.options.now_ms
        self.progress.restart()
        self.progress.begin(Step.SELECTING, "selecting the deletes from the audit")
        audit = self.options.audit_table
        try:
            if self.options.dry_run:
                check_audit_table(self.spark, audit)
            else:  # before anything is changed, as a vacuum does: the audit can take the run's rows
                self.audit_problems += ready_audit(self.spark, audit, self.options.delete, self._history_of,
                                                   self.progress, self.before_commit)
            return now_ms, read_audit(self.spark, audit)
        except TableNotFound:
            raise UndoError(f"{audit}: no audit table there") from None
        except (IncompatibleTable, AuditUnwritable, PutIfAbsentUnproven) as exc:
            raise UndoError(f"{exc}; nothing was deleted") from None

    def _history_of(self, state: TableState) -> TableHistory:
        """How a killed vacuum's open VACUUM START is closed from here: by the session's and Delta's rules
        (an undo run has no history setting of its own)."""
        return TableHistory.of(state, history_setting(state.table_root, session=session_history_setting(self.spark)))

    def _in_scope(self, rows: DataFrame, known: DataFrame, where: str) -> DataFrame:
        """``rows`` of the tables asked for; a table ``known`` (the run, the audit) has no row of is a typo
        or the wrong table, refused before anything changes."""
        if self.options.tables is None:
            return rows
        roots = [uris.canonical(t) for t in self.options.tables]
        found = {r["table_root"] for r in known.where(F.col("table_root").isin(roots)).select("table_root")
                 .distinct().collect()}
        if unknown := [t for t, root in zip(self.options.tables, roots) if root not in found]:
            raise UndoError(f"{', '.join(unknown)}: not a table of {where}; nothing was changed")
        return rows.where(F.col("table_root").isin(roots))

    def _report(self, command: UndoCommand, now_ms: int, acts_on: str) -> UndoReport:
        return UndoReport(command, str(uuid.uuid4()), iso_utc(now_ms), self.options.dry_run, acts_on,
                          audit_problems=list(self.audit_problems))

    def _run(self, report: UndoReport, selected: DataFrame, done: AuditAction, now_ms: int,
             undo_window_days: float | None, left_alone: DataFrame | None = None, watched: Sequence[str] = ()
             ) -> UndoReport:
        """Check and act on each ``selected`` file; ``left_alone``: outcomes decided before (``UNDONE``);
        ``watched``: tables a purge looked at, recorded even where nothing of theirs was due."""
        rows = selected.select("table_root", "path", "length", "modificationTime", "version_id", "delete_marker_id",
                               "trash_path", "source_run_id")
        self.progress.begin(Step.ACTING, f"checking the files to {report.command}")
        settings = replace(self.options.delete, purge_versions=True)
        dry_run, spark = self.options.dry_run, self.spark
        outcomes = where_reachable(
            spark, rows, UNDONE,
            lambda part, slices: act(part, done, settings, cap_share(settings, slices), dry_run),
            lambda part: act(part, done, settings, settings.keys_per_second, dry_run, Storage(spark)),
            spread=settings.keys_per_second is not None)
        if left_alone is not None:
            outcomes = outcomes.unionByName(left_alone)
        outcomes = outcomes.localCheckpoint(eager=True)
        for row in outcomes.groupBy("table_root", "action").count().collect():
            report.tables.setdefault(row["table_root"], {})[row["action"]] = row["count"]
        for row in outcomes.where(F.col("action").isin(*[a.value for a in _LEFT_ALONE])).orderBy("path").limit(
                PROBLEM_SAMPLE).collect():
            report.problems.append(f"{row['path']}: {row['error']}")
        report.warnings += _lifecycle_warnings(settings, report.tables, undo_window_days)
        if not self.options.dry_run and (report.tables or watched):
            self.progress.begin(Step.RECORDING, f"recording {self.options.audit_table}")
            try:
                self._record(report, outcomes, done, now_ms, undo_window_days, watched)
            except AuditNotRecorded as unrecorded:  # kept for the next run; the report still goes out
                report.audit_problems.append(str(unrecorded))
        report.step_seconds = self.progress.seconds()
        return report

    def _record(self, report: UndoReport, outcomes: DataFrame, done: AuditAction, now_ms: int,
                undo_window_days: float | None, watched: Sequence[str] = ()) -> None:
        """One audit run, however many vacuum runs it acts on: a table row per (source run, table), and
        every row names the vacuum run it acts on; a watched table with nothing due, one row naming none."""
        table_action = AuditAction.TABLE_RESTORED if done is AuditAction.RESTORED else AuditAction.TABLE_PURGED
        window = None if undo_window_days is None else float(undo_window_days) * 24
        counts: dict[tuple[str, str], list[str]] = {}
        for row in outcomes.groupBy("source_run_id", "table_root", "action").count().collect():
            counts.setdefault((row["source_run_id"], row["table_root"]), []).append(f"{row['count']:,} {row['action']}")
        tables = [RunTable(root, table_action, ", ".join(sorted(parts)), source_run_id=source, undo_window_hours=window)
                  for (source, root), parts in sorted(counts.items())]
        acted = {root for _, root in counts}
        tables += [RunTable(root, table_action, f"nothing hidden longer than {undo_window_days:g} day(s)",
                            undo_window_hours=window) for root in watched if root not in acted]
        append_run(self.spark, self.options.audit_table, report.run_id, now_ms, tables,
                   outcomes.select(*OUTCOMES.columns, "source_run_id"), before_commit=self.before_commit)


def _lifecycle_warnings(settings: DeleteSettings, tables: dict[str, dict[str, int]],
                        undo_window_days: float | None) -> list[str]:
    """Lifecycle rules that expire noncurrent versions of these tables: reported, not fought.
    Earlier than a purge's undo window, they end restores before it does."""
    warnings: list[str] = []
    by_bucket: dict[str, list[str]] = {}
    for root in tables:
        if uris.scheme_of(root) == "s3":
            bucket, prefix = uris.bucket_and_key(root)
            by_bucket.setdefault(bucket, []).append(prefix + "/")
    if not by_bucket:
        return warnings
    client = settings.s3_client()
    for bucket, prefixes in sorted(by_bucket.items()):
        try:
            rules = client.get_bucket_lifecycle_configuration(Bucket=bucket).get("Rules", [])
        except Exception as exc:
            if "NoSuchLifecycleConfiguration" not in str(exc):
                warnings.append(f"s3://{bucket}: cannot read its lifecycle rules ({first_line(exc, 160)})")
            continue
        for rule in rules:
            days = (rule.get("NoncurrentVersionExpiration") or {}).get("NoncurrentDays")
            scope = rule.get("Filter", {}).get("Prefix", rule.get("Prefix", ""))
            if rule.get("Status") != "Enabled" or days is None or not any(
                    p.startswith(scope) or scope.startswith(p) for p in prefixes):
                continue
            earlier = (f", before this purge's {undo_window_days:g}-day undo window ends: deletes older than "
                       f"{days} day(s) can no longer be restored" if undo_window_days is not None
                       and days < undo_window_days else "")
            warnings.append(f"s3://{bucket}: lifecycle rule {rule.get('ID', '(no id)')!r} (prefix {scope!r}) "
                            f"expires noncurrent versions {days} day(s) after a delete{earlier}")
    return warnings
