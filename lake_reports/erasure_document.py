"""One evidence document per erasure request: a ``DELETE`` commit followed to the last copy of its bytes.

The document (JSON, valid under ``schemas/erasure-evidence.schema.json``, and a self-contained
HTML page) names the request, the table version before and at the commit, every file the commit
removed and every deletion vector it added with what became of each (from
:mod:`lake_reports.erasure_evidence`), the other copies of those bytes in the lake
(:mod:`lake_reports.copies`), the audit chain's head it was built from (verified), and a verdict
against the deadline: ``done``, ``on_track`` (by a date) or ``at_risk`` (with every reason).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from html import escape
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lake_reports import copies as lake_copies
from lake_reports.copies import CopyStatus, EtagKind
from lake_reports.erasure_decision import BOUNDED_BY_VACUUMS, GONE, ErasureStatus, FileAnswer, TableErasure
from lake_reports.erasure_evidence import CommitQuestion, ErasureError, ErasureEvidence, ErasureOptions, Gathered
from lakeio.audit import chain as audit_chain
from lakeio.deltalog.commits import CommitRecord, UnreadableCommit, read_commit
from lakeio.errors import InvalidOption
from lakeio.inventory import PARTITION_COLUMNS
from lakeio.pins import KeepVersions
from lakeio.pins import keep_versions as pins_given
from lakeio.spark.steps import one_run
from lakeio.tables.read import newest_partitions, read_delta
from lakeio.text import StrEnum
from lakeio.times import hours_ms, iso_utc

SCHEMA_VERSION = 1
# Copies erased since this many days before the commit still count (a weekly inventory lists them).
COPY_LOOKBACK = timedelta(days=8)


class VerdictStatus(StrEnum):
    """The document's answer against the deadline."""

    DONE = "done"  # no byte of the removed rows remains anywhere
    ON_TRACK = "on_track"  # every remaining byte is due before the deadline
    AT_RISK = "at_risk"  # something is not bounded by the deadline (the reasons say what)


COLOURS = {VerdictStatus.DONE: "#2f855a", VerdictStatus.ON_TRACK: "#2b6cb0", VerdictStatus.AT_RISK: "#c53030"}


@dataclass
class CommitSide:
    version: int
    timestamp: str | None


@dataclass
class RemovedFile:
    path: str
    status: ErasureStatus
    detail: str
    when: str | None
    run_id: str | None


@dataclass
class DeletionVectorAdded:
    path: str  # the data file that stays live
    rows_hidden: int | None  # by this deletion vector (cardinality)
    status: ErasureStatus
    detail: str
    rewrite_with: str  # what erases the hidden rows


@dataclass
class Verdict:
    status: VerdictStatus
    deadline: str  # commit timestamp + deadline days
    expected_by: str | None  # on_track: when the last byte is due
    reasons: list[str] = field(default_factory=list)  # at_risk: every one; on_track: what is still pending


@dataclass
class ChainHead:
    row_hash: str | None
    run_id: str | None
    seq: int | None
    verified: bool
    rows_verified: int
    problems: list[str]


@dataclass
class EvidenceDocument:
    schema_version: int
    request_id: str
    generated_at: str
    table: str
    operation: str | None
    predicate: str | None
    before: CommitSide | None  # the version before the commit
    commit: CommitSide
    deadline_days: float
    removed_files: list[RemovedFile]
    deletion_vectors: list[DeletionVectorAdded]
    copies: list[lake_copies.Copy]
    copies_not_searched: list[str]  # the commit's files no inventory row gives an ETag for
    table_erasure: TableErasure
    audit_chain: ChainHead
    verdict: Verdict

    @property
    def ok(self) -> bool:
        return self.verdict.status != VerdictStatus.AT_RISK

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def to_html(self) -> str:
        return render_html(self)

    def summary(self) -> str:
        v = self.verdict
        lines = [f"erasure request {self.request_id}: {self.table} version {self.commit.version} "
                 f"({self.operation or 'commit'} at {self.commit.timestamp})",
                 f"verdict: {v.status}" + (f", expected by {v.expected_by}" if v.expected_by else "")
                 + f" (deadline {v.deadline})"]
        lines += [f"  - {reason}" for reason in v.reasons]
        lines.append(f"{len(self.removed_files)} removed file(s), {len(self.deletion_vectors)} deletion vector(s), "
                     f"{len(self.copies)} other cop(ies); audit chain head {self.audit_chain.row_hash} "
                     f"({'verified' if self.audit_chain.verified else 'FAILED verification'})")
        return "\n".join(lines)

    def file_name(self) -> str:
        return "erasure-" + re.sub(r"[^A-Za-z0-9._-]+", "_", self.request_id)


@dataclass
class RequestBatch:
    """The documents of one run of erasure requests, in the order asked, and the requests refused."""

    documents: list[EvidenceDocument]
    refused: dict[str, str] = field(default_factory=dict)  # request id -> why it has no document

    @property
    def ok(self) -> bool:
        return not self.refused and all(d.ok for d in self.documents)


def erasure_request(
    spark: SparkSession,
    audit_table: str,
    inventory_table: str,
    commit: CommitQuestion,
    request_id: str,
    *,
    deadline_days: float = ErasureOptions.deadline_days,
    tables: list[str] | None = None,
    now_ms: int | None = None,
    keep_versions: KeepVersions | None = None,
    pins_table: str | None = None,
) -> EvidenceDocument:
    """The evidence document for one erasure request: what ``commit`` deleted, and where its bytes are now.

    Args:
        spark: the session to run in.
        audit_table: the vacuum audit table (a URI or a catalog name).
        inventory_table: the inventory Delta table (its dates since the commit are searched for copies).
        commit: the table and version of the commit that deleted the rows.
        request_id: the request's own id, written into the document.
        deadline_days: the deadline, counted from the commit.
        tables: the tables whose vacuums bound the copies; default: every table the newest inventory shows.
        now_ms: the clock, epoch milliseconds (tests); default: now.
        keep_versions: pinned versions, as ``vacuum_jobs.vacuum`` takes them: a removed file a pinned
            version reads is ``pinned``, and the verdict names the pin that blocks the erasure.
        pins_table: the pins table (``python -m vacuum_jobs pin`` writes it): its pins too.

    Returns:
        The :class:`EvidenceDocument`, with its verdict (``done``, ``on_track`` or ``at_risk``).

    Raises:
        ErasureError: the audit or inventory table cannot be read, or the commit removed nothing or cannot be read.
    """
    if isinstance(audit_table, CommitQuestion):  # the order before this release: commit, request id, the tables
        _old_order_warning("erasure_request", "commit, request_id")
        audit_table, inventory_table, commit, request_id = commit, request_id, audit_table, inventory_table  # type: ignore[assignment]
    options = ErasureOptions(audit_table, inventory_table, deadline_days, tables, now_ms, pins_given(keep_versions),
                             pins_table)
    return ErasureRequest(spark, options).document(commit, request_id)


def erasure_requests(
    spark: SparkSession,
    audit_table: str,
    inventory_table: str,
    requests: Sequence[tuple[str, CommitQuestion]],
    *,
    deadline_days: float = ErasureOptions.deadline_days,
    tables: list[str] | None = None,
    now_ms: int | None = None,
    keep_versions: KeepVersions | None = None,
    pins_table: str | None = None,
) -> RequestBatch:
    """The evidence documents of many erasure requests, from one read of the audit, the inventory and the logs.

    Args:
        spark: the session to run in.
        audit_table, inventory_table: as :func:`erasure_request`'s.
        requests: (request id, commit) pairs; the ids must be distinct.
        deadline_days, tables, now_ms, keep_versions, pins_table: as :func:`erasure_request`'s.

    Returns:
        The :class:`RequestBatch`: a document per request, and each request refused (its commit
        removed nothing or cannot be read) with the reason.

    Raises:
        ErasureError: the audit or inventory table cannot be read.
    """
    if not isinstance(audit_table, str):  # the order before this release: the requests, then the tables
        _old_order_warning("erasure_requests", "requests")
        audit_table, inventory_table, requests = inventory_table, requests, audit_table
    options = ErasureOptions(audit_table, inventory_table, deadline_days, tables, now_ms, pins_given(keep_versions),
                             pins_table)
    return ErasureRequest(spark, options).documents(requests)


def _old_order_warning(function: str, asked: str) -> None:
    warnings.warn(f"{function}(spark, {asked}, audit_table, inventory_table) is deprecated and goes in the next "
                  f"release: the tables come first, as in every job, {function}(spark, audit_table, inventory_table, "
                  f"{asked})", DeprecationWarning, stacklevel=3)


class ErasureRequest:
    """One action: the evidence of the commits' files, their copies, the chain, a verdict per request."""

    def __init__(self, spark: SparkSession, options: ErasureOptions):
        self.spark = spark
        self.evidence = ErasureEvidence(spark, options)
        self.options = self.evidence.options  # with catalog names resolved
        self.progress = self.evidence.progress  # one run's steps, the evidence's and the search for copies

    def document(self, commit: CommitQuestion, request_id: str) -> EvidenceDocument:
        """The one request's document; ErasureError where its commit is refused."""
        batch = self.documents([(request_id, commit)])
        if batch.refused:
            raise ErasureError(batch.refused[request_id])
        return batch.documents[0]

    @one_run
    def documents(self, requests: Sequence[tuple[str, CommitQuestion]]) -> RequestBatch:
        """Every request's document: one gathering of the evidence, one search for copies, one chain check."""
        ids = [request_id for request_id, _ in requests]
        if any(not request_id.strip() for request_id in ids):
            raise InvalidOption("request_id must not be empty")
        if len(set(ids)) != len(ids):
            raise InvalidOption("request ids must be distinct: " + ", ".join(sorted({i for i in ids if ids.count(i) > 1})))
        batch = RequestBatch([])
        records: dict[str, CommitRecord] = {}
        for request_id, commit in requests:
            try:
                records[request_id] = self.evidence.removing(self.evidence.named(commit))
            except UnreadableCommit as exc:
                batch.refused[request_id] = str(exc)
        if not records:
            return batch
        distinct = {(r.table, r.version): r for r in records.values()}
        # A file given a deletion vector still holds the rows, and so does every copy of it.
        asked = {request_id: sorted(r.removed) for request_id, r in records.items()}
        audit = self.evidence.read_audit()
        with ThreadPoolExecutor(max_workers=2) as pool:  # the chain's check beside all the rest
            chain = pool.submit(self._chain, audit)
            gathered = self.evidence.read(audit=audit, records=[distinct[k] for k in sorted(distinct)])
            since = {request_id: self._copies_since(r, gathered.now_ms) for request_id, r in records.items()}
            try:
                searched = pool.submit(self._copies, gathered, sorted({p for paths in asked.values() for p in paths}),
                                       min(since.values()))
                self.evidence.answer(gathered)
                (found, unsearched), head = searched.result(), chain.result()
            finally:
                gathered.replay.release()
        answers = {a.path: a for a in gathered.report.answers}
        for request_id, record in records.items():
            mine = set(asked[request_id])
            copies = [c for c in found if c.of in mine
                      and (c.last_listed is None or date.fromisoformat(c.last_listed) >= since[request_id])]
            batch.documents.append(self._document(request_id, record, gathered, answers, copies,
                                                  [p for p in unsearched if p in mine], head))
        return batch

    def _document(self, request_id: str, record: CommitRecord, gathered: Gathered, answers: dict[str, FileAnswer],
                  found: list[lake_copies.Copy], unsearched: list[str], head: ChainHead) -> EvidenceDocument:
        at_ms = record.timestamp_ms
        before = self._before(CommitQuestion(record.table, record.version))
        removed = [self._removed(answers[p]) for p in sorted(record.removed) if p not in record.deletion_vectors]
        vectors = [self._vector(answers[p], rows, record.table) for p, rows in sorted(record.deletion_vectors.items())]
        table = gathered.tables[record.table]
        start_ms = at_ms or gathered.now_ms  # the deadline runs from the commit
        deadline_ms = start_ms + hours_ms(self.options.deadline_days * 24)
        return EvidenceDocument(
            SCHEMA_VERSION, request_id, iso_utc(gathered.now_ms), record.table, record.operation,
            _predicate(record.parameters), before, CommitSide(record.version, iso_utc(at_ms) if at_ms else None),
            self.options.deadline_days, removed, vectors, found, unsearched, table, head,
            _verdict(removed, vectors, found, unsearched, table, gathered.tables, head, start_ms, deadline_ms))

    def _before(self, commit: CommitQuestion) -> CommitSide | None:
        if commit.version == 0:
            return None
        try:
            previous = read_commit(self.evidence.storage, commit.table, commit.version - 1)
        except UnreadableCommit:  # log cleanup took it: the version is still named
            return CommitSide(commit.version - 1, None)
        return CommitSide(previous.version, iso_utc(previous.timestamp_ms) if previous.timestamp_ms else None)

    @staticmethod
    def _removed(answer: FileAnswer) -> RemovedFile:
        return RemovedFile(answer.path, answer.status, answer.detail, answer.when, answer.run_id)

    @staticmethod
    def _vector(answer: FileAnswer, rows: int | None, table: str) -> DeletionVectorAdded:
        return DeletionVectorAdded(answer.path, rows, answer.status, answer.detail,
                                   f"REORG TABLE delta.`{table}` APPLY (PURGE), then a vacuum past the retention")

    @staticmethod
    def _copies_since(record: CommitRecord, now_ms: int) -> date:
        """The first inventory date searched for copies of what ``record`` removed."""
        return date.fromisoformat(iso_utc(record.timestamp_ms or now_ms)[:10]) - COPY_LOOKBACK

    def _copies(self, gathered: Gathered, asked: list[str], since: date) -> tuple[list[lake_copies.Copy], list[str]]:
        inventory = self.options.inventory_table
        newest: dict[str, date] = {}
        recent: set[date] = set()
        version, held = newest_partitions(inventory, [PARTITION_COLUMNS[0], "bucket"])  # the rows read: of that version
        for day, bucket in held:
            day = day if isinstance(day, date) else date.fromisoformat(str(day))
            newest[bucket] = max(day, newest.get(bucket, day))
            if day >= since:
                recent.add(day)
        history = read_delta(self.spark, inventory, {PARTITION_COLUMNS[0]: recent}, version=version)
        return lake_copies.find_copies(self.spark, history, newest, asked, gathered.replay.files, gathered.roots,
                                       gathered.audit)

    @staticmethod
    def _chain(audit: DataFrame) -> ChainHead:
        check = audit_chain.verify(audit)
        head = check.head
        return ChainHead(head.row_hash if head else None, head.run_id if head else None, head.seq if head else None,
                         check.ok, check.rows_verified, check.problems[:20])


def _predicate(parameters: dict[str, Any]) -> str | None:
    value = parameters.get("predicate")
    if isinstance(value, str) and value.startswith("["):
        try:
            value = " AND ".join(json.loads(value))
        except ValueError:
            pass
    return value if value is None else str(value)


def _verdict(removed: list[RemovedFile], vectors: list[DeletionVectorAdded], found: list[lake_copies.Copy],
             unsearched: list[str], table: TableErasure, tables: dict[str, TableErasure], head: ChainHead,
             start_ms: int, deadline_ms: int) -> Verdict:
    """done: no byte remains anywhere; on_track: every remaining one is due before the deadline; at_risk: why not."""
    risks: list[str] = []
    pending: list[str] = []
    due: list[tuple[int, TableErasure]] = []

    def bounded_by(t: TableErasure | None, what: str) -> None:
        """``what`` waits for the vacuums of table ``t``: due by its worst case, or a risk saying why not."""
        if t is not None and t.worst_case_days is not None and not t.over_deadline:
            pending.append(what)
            due.append((start_ms + hours_ms(t.worst_case_days * 24), t))
        elif t is not None and (t.problem or t.worst_case_days is None):
            risks.append(f"{what}: {t.problem or 'no vacuum run has deleted files in its table'}")
        elif t is not None:
            risks.append(f"{what}: worst case {t.worst_case_days:.1f} days (retention, vacuum cadence, inventory lag, "
                         "undo window) exceeds the deadline")
        else:
            risks.append(f"{what}: its table's log was not read: no bound on its erasure")

    hidden = [v for v in vectors if v.status in (ErasureStatus.LIVE, ErasureStatus.LIVE_SOFT_DELETED)]
    # A file rewritten since its deletion vector was added goes the way of a removed one.
    states = [(f.path, f.status, f.detail) for f in removed] + [(v.path, v.status, v.detail) for v in vectors
                                                                 if v not in hidden]
    for path, status, detail in states:
        if status in GONE:
            continue
        if status in BOUNDED_BY_VACUUMS:
            bounded_by(table, f"{path} ({status})")
        else:  # NEEDS_ACTION
            risks.append(f"{path}: {status}: {detail}")
    if hidden:
        rows = sum(v.rows_hidden or 0 for v in hidden)
        risks.append(f"{rows:,} deleted row(s) stay on disk in {len(hidden)} live file(s) behind deletion vectors "
                     f"until the files are rewritten: {hidden[0].rewrite_with}")
    outside = [c for c in found if c.status == CopyStatus.OUTSIDE_TABLES]
    if outside:
        risks.append(f"{len(outside)} cop(ies) outside any table, which no vacuum erases: "
                     + ", ".join(c.path for c in outside[:5]))
    for c in found:
        if c.etag_kind == EtagKind.SAME_OBJECT:  # the removed file itself, whose own status says what keeps it
            continue
        if c.status == CopyStatus.NONCURRENT_VERSION and c.path == c.of:  # its own key's: what the purge of its delete erases
            bounded_by(table, f"version {c.version_id} of {c.path} ({c.status})")
        elif c.status in (CopyStatus.LIVE_IN_TABLE, CopyStatus.NONCURRENT_VERSION):
            risks.append(f"copy {c.path}: {c.detail}")
        elif c.status in (CopyStatus.TIME_TRAVEL_IN_TABLE, CopyStatus.ORPHAN_IN_TABLE):
            bounded_by(tables.get(c.table or ""), f"copy {c.path} ({c.status})")
    if unsearched:
        risks.append(f"{len(unsearched)} file(s) of the commit have no ETag in the inventory: their copies could not be "
                     "looked for (add ETag to the inventory configuration)")
    if not head.verified:
        risks.append("the audit table fails its hash chain: " + (head.problems[0] if head.problems else "unverified"))
    deadline = iso_utc(deadline_ms)
    if risks:
        return Verdict(VerdictStatus.AT_RISK, deadline, None, risks + [f"pending: {p}" for p in pending])
    if not pending:
        return Verdict(VerdictStatus.DONE, deadline, None, [])
    expected, slowest = max(due, key=lambda pair: pair[0])
    why = f"expected by {iso_utc(expected)}{', after the deadline' if expected > deadline_ms else ''}: {_worst_case(slowest)}"
    verdict = VerdictStatus.AT_RISK if expected > deadline_ms else VerdictStatus.ON_TRACK
    return Verdict(verdict, deadline, iso_utc(expected), [why] + [f"pending: {p}" for p in pending])


def _worst_case(table: TableErasure) -> str:
    """Why a verdict's date is later than a file's "kept for time travel until": what it adds to the retention."""
    parts = [f"retention {table.retention_hours or 0:g} h (a file's 'kept until' counts this alone)",
             f"the next vacuum of {table.table}", f"an inventory after it ({table.inventory_lag_hours or 0:.0f} h lag)"]
    if table.soft_deletes:
        parts.append(f"the undo window of its purge ({table.undo_window_days or 0:g} days)")
    return f"{table.worst_case_days or 0:.1f} days after the commit: " + ", then ".join(parts)


def render_html(doc: EvidenceDocument) -> str:
    """The document as one self-contained page (no scripts, nothing fetched)."""
    v = doc.verdict

    def rows(items: Sequence[Any], columns: Sequence[str]) -> str:
        head = "".join(f"<th>{escape(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{escape(str(getattr(i, c) if getattr(i, c) is not None else ''))}</td>"
                                        for c in columns) + "</tr>" for i in items)
        widths = "".join(f'<col style="width:{"34%" if c == "path" else "auto"}">' for c in columns)
        return f"<table><colgroup>{widths}</colgroup><tr>{head}</tr>{body}</table>" if items else "<p>none</p>"

    reasons = "".join(f"<li>{escape(r)}</li>" for r in v.reasons)
    chain = doc.audit_chain
    before = f"{doc.before.version} ({doc.before.timestamp or 'time unknown'})" if doc.before else "none (first commit)"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Erasure evidence {escape(doc.request_id)}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #1a202c; max-width: 1200px; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; width: 100%; table-layout: fixed; }}
th, td {{ padding: 3px 6px; border-bottom: 1px solid #e2e8f0; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }}
.verdict {{ display: inline-block; padding: 6px 14px; color: #fff; background: {COLOURS[v.status]};
           font-weight: bold; border-radius: 4px; }}
code {{ overflow-wrap: anywhere; }}
.facts th {{ width: 11em; }}
</style></head><body>
<h1>Erasure evidence: request <code>{escape(doc.request_id)}</code></h1>
<p><span class="verdict">{escape(v.status.replace("_", " "))}</span>
deadline {escape(v.deadline)}{f", expected by {escape(v.expected_by)}" if v.expected_by else ""}</p>
<ul>{reasons}</ul>
<table class="facts">
<tr><th>table</th><td><code>{escape(doc.table)}</code></td></tr>
<tr><th>commit</th><td>version {doc.commit.version} at {escape(doc.commit.timestamp or "unknown")}:
{escape(doc.operation or "")} {escape(doc.predicate or "")}</td></tr>
<tr><th>version before</th><td>{escape(before)}</td></tr>
<tr><th>audit chain head</th><td><code>{escape(chain.row_hash or "none")}</code> (run {escape(chain.run_id or "-")},
row {chain.seq if chain.seq is not None else "-"}): {"verified" if chain.verified else "FAILED verification"},
{chain.rows_verified:,} row(s)</td></tr>
<tr><th>generated</th><td>{escape(doc.generated_at)}</td></tr>
</table>
<h2>Files the commit removed</h2>
{rows(doc.removed_files, ("path", "status", "when", "run_id", "detail"))}
<h2>Deletion vectors the commit added</h2>
{rows(doc.deletion_vectors, ("path", "rows_hidden", "status", "rewrite_with"))}
<h2>Other copies of the bytes</h2>
{rows(doc.copies, ("path", "status", "etag_kind", "table", "last_listed", "detail"))}
{"".join(f"<p>{escape(k)}: {escape(t)}</p>" for k, t in lake_copies.ETAG_KINDS.items()
         if any(c.etag_kind == k for c in doc.copies))}
</body></html>
"""
