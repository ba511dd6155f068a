"""The audit table's hash chain: an edited, deleted or inserted audit row shows.

Each chained row carries ``row_hash``: the SHA-256 of the previous row's hash, a newline, and the
row's canonical JSON (the :data:`HASHED_COLUMNS`, keys sorted, timestamps as UTC microseconds,
dates as ISO days). A run's rows are chained in ``seq`` order (0, 1, ...); its first row names in
``prev_hash`` the chain's head when the run was appended (the last row of the run before it), or
:data:`GENESIS` for the first chained run. Verifying recomputes every hash:

- an edited row no longer matches its hash;
- a deleted row leaves a gap in ``seq`` (or, the last row of a run, leaves the next run pointing
  at a hash no run ends with);
- a deleted run leaves the run after it pointing at nothing.

Only the newest rows can vanish unseen by the chain alone; evidence documents quote the head they
were built from, and ``--verify --head H`` checks it is still there. Rows written before the chain
existed carry no hash and are counted, not verified. Two runs appending at once both chain to the
same head: a fork, reported, not a failure.

The chain is computed in one Spark task per run on write (a run's rows in a total order), and in
one task per run on verify: nothing is collected to the driver but one summary row per run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from lakeio.times import iso_utc

GENESIS = "0" * 64
# The columns a row's hash covers. Fixed: a column added to the audit table later must not change the hash of the
# rows already written (extending this list needs a chain version of its own).
HASHED_COLUMNS = (
    "run_id", "table_root", "table_version", "path", "length", "modificationTime", "action", "error", "timestamp",
    "inventory_date", "retention_hours", "run_date", "version_id", "delete_marker_id", "trash_path", "source_run_id",
    "log_sha256", "seq", "prev_hash",
)
# The newest run is looked for among runs that started this long before the newest run_date.
_HEAD_LOOKBACK = timedelta(days=7)


@dataclass(frozen=True)
class Head:
    """The chain's newest row: what the next run links to, and what an evidence document quotes."""

    row_hash: str
    run_id: str
    seq: int


@dataclass
class ChainCheck:
    """What ``verify`` found. ``problems`` are in chain order, the first one first."""

    rows_verified: int = 0
    runs: int = 0
    unchained_rows: int = 0  # written before the chain existed: counted, not verified
    head: Head | None = None
    problems: list[str] = field(default_factory=list)
    forks: list[str] = field(default_factory=list)  # runs appended at once, both after one head

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        head = f"head {self.head.row_hash} (run {self.head.run_id}, row {self.head.seq})" if self.head else "no head"
        lines = [f"audit chain: {self.rows_verified:,} row(s) of {self.runs:,} run(s) verified, "
                 f"{self.unchained_rows:,} written before the chain (not verifiable); {head}"]
        lines += [f"fork: {fork}" for fork in self.forks]
        if self.problems:
            lines.append(f"FAILED: {len(self.problems):,} problem(s); the first: {self.problems[0]}")
            lines += [f"  {p}" for p in self.problems[1:20]]
        else:
            lines.append("ok: every chained row matches its hash and its links")
        return "\n".join(lines)


def _normalized(rows: DataFrame) -> DataFrame:
    """``rows`` with timestamps as UTC microseconds and dates as ISO days, so that the Python side hashes
    plain strings and numbers (never a datetime in the worker's local time zone)."""
    kinds = dict(rows.dtypes)
    return rows.select(*[F.unix_micros(c).alias(c) if kinds[c] == "timestamp"
                         else F.date_format(c, "yyyy-MM-dd").alias(c) if kinds[c] == "date" else F.col(c)
                         for c in rows.columns])


def _restored(rows: DataFrame, kinds: dict[str, str]) -> DataFrame:
    """The inverse of :func:`_normalized`."""
    return rows.select(*[F.timestamp_micros(c).alias(c) if kind == "timestamp"
                         else F.col(c).cast(kind).alias(c) for c, kind in kinds.items()])


def canonical_of(values: Sequence, at: dict[str, int]) -> str:
    """A normalized row's canonical JSON over :data:`HASHED_COLUMNS`, given as values and each hashed
    column's position (a Row's lookup by name scans its fields, which cost more than the hash)."""
    return json.dumps({name: values[i] for name, i in at.items()}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)


def link(prev_hash: str, canonical_json: str) -> str:
    return hashlib.sha256(f"{prev_hash}\n{canonical_json}".encode()).hexdigest()


def chain_run(rows: DataFrame, head: Head | None) -> DataFrame:
    """``rows`` (one run's audit rows, without ``seq``/``prev_hash``/``row_hash``) chained after ``head``:
    in one task, in a total order (every column), so that a re-evaluation hashes alike."""
    previous = head.row_hash if head else GENESIS
    staged = rows.withColumn("seq", F.lit(None).cast("long")).withColumn("prev_hash", F.lit(None).cast("string"))
    kinds = dict(staged.withColumn("row_hash", F.lit(None).cast("string")).dtypes)
    ordered = _normalized(staged).repartition(1).sortWithinPartitions(
        *[F.col(c).asc_nulls_first() for c in rows.columns])
    names = ordered.columns

    at = {name: names.index(name) for name in HASHED_COLUMNS}
    seq_at, prev_at = at["seq"], at["prev_hash"]

    def chain(partition: Iterable[Row]) -> Iterator[tuple]:
        last = previous
        for seq, row in enumerate(partition):
            values = list(row)
            values[seq_at], values[prev_at] = seq, previous if seq == 0 else None
            last = link(last, canonical_of(values, at))
            yield (*values, last)

    spark = rows.sparkSession
    normal = dict(ordered.dtypes)
    schema = ", ".join(f"{n} {normal[n]}" for n in names) + ", row_hash string"
    # The rows come straight from a frame of this schema: checking each of them again costs more than the hash.
    return _restored(spark.createDataFrame(ordered.rdd.mapPartitions(chain), schema, verifySchema=False), kinds)


def chain_head(rows: DataFrame, newest_run_date=None) -> Head | None:
    """The chain's head in ``rows`` (the audit table): the last row of the newest run that no run links to
    (of the runs of the last week before ``newest_run_date``, or of all when none of them is chained)."""
    chained = rows.where(F.col("row_hash").isNotNull())
    if newest_run_date is not None:
        recent = _tips(_run_ends(chained.where(F.col("run_date") >= F.lit(newest_run_date - _HEAD_LOOKBACK))))
        if recent:
            return recent[0]
    found = _tips(_run_ends(chained))
    return found[0] if found else None


def _run_ends(chained: DataFrame) -> list:
    return chained.groupBy("run_id").agg(
        F.max_by("row_hash", "seq").alias("last_hash"), F.max("seq").alias("last_seq"),
        F.max(F.when(F.col("seq") == 0, F.col("prev_hash"))).alias("first_prev"),
        F.min(F.unix_millis("timestamp")).alias("at_ms")).collect()


def _tips(runs: Sequence) -> list[Head]:
    """Runs' last rows that no run links to, the newest run's first."""
    linked = {r["first_prev"] for r in runs}
    tips = sorted((r for r in runs if r["last_hash"] not in linked), key=lambda r: (r["at_ms"], r["run_id"]),
                  reverse=True)
    return [Head(r["last_hash"], r["run_id"], r["last_seq"]) for r in tips]


_FINDINGS_DDL = ("run_id string, seq long, at_ms long, table_root string, path string, action string, "
                 "problem string, first_prev string, last_hash string, last_seq long, rows long")
_FINDINGS = tuple(column.split()[0] for column in _FINDINGS_DDL.split(", "))


# verify's rows: the hashed columns, then the stored hash.
_WALKED = (*HASHED_COLUMNS, "row_hash")
_AT = {name: i for i, name in enumerate(HASHED_COLUMNS)}
_RUN, _SEQ, _PREV, _STORED, _TIME, _TABLE, _PATH, _ACTION = (
    _WALKED.index(name) for name in ("run_id", "seq", "prev_hash", "row_hash", "timestamp", "table_root", "path",
                                     "action"))


def _walk(partition: Iterable[Row]) -> Iterator[tuple]:
    """One partition's runs, each in ``seq`` order (normalized rows of :data:`_WALKED`): a row per problem
    (``problem`` set), then a summary row per run (``rows`` set)."""
    run: dict | None = None
    for values in partition:
        run_id, seq, stored, prev = values[_RUN], values[_SEQ], values[_STORED], values[_PREV]
        if run is None or run["run_id"] != run_id:
            if run is not None:
                yield tuple(run.get(n) for n in _FINDINGS)
            run = {**_found(values), "first_prev": prev if seq == 0 else None, "last_seq": None, "rows": 0}
        expected = 0 if run["last_seq"] is None else run["last_seq"] + 1
        if seq > expected:
            problem = f"row(s) {expected}..{seq - 1} of the run before it are missing (deleted)"
        elif seq < expected:
            problem = f"row {seq} appears twice"
        elif seq == 0 and prev is None:
            problem = "the run's first row names no previous hash"
        elif seq != 0 and prev is not None:
            problem = "a row other than the run's first names a previous hash"
        elif stored != link(prev if seq == 0 else run["last_hash"], canonical_of(values, _AT)):
            problem = "its content does not match its hash (the row was edited)"
        else:
            problem = None
        if problem:
            yield tuple({**_found(values), "problem": problem}.get(n) for n in _FINDINGS)
        run.update(last_seq=seq, last_hash=stored, rows=run["rows"] + 1)
    if run is not None:
        yield tuple(run.get(n) for n in _FINDINGS)


def _found(values: Sequence) -> dict:
    """Where a finding is: the row's run, place, time, table and file."""
    return {"run_id": values[_RUN], "seq": values[_SEQ], "at_ms": (values[_TIME] or 0) // 1000,
            "table_root": values[_TABLE], "path": values[_PATH], "action": values[_ACTION]}


def verify(rows: DataFrame, expected_head: str | None = None) -> ChainCheck:
    """Check every chained row of the audit table ``rows`` and the links between runs; ``expected_head``
    (a head an evidence document quoted) must still be a row of the chain."""
    check = ChainCheck(unchained_rows=rows.where(F.col("row_hash").isNull()).count())
    chained = rows.where(F.col("row_hash").isNotNull())
    ordered = _normalized(chained.select(*_WALKED)).repartition("run_id").sortWithinPartitions(
        "run_id", "seq")
    findings = rows.sparkSession.createDataFrame(ordered.rdd.mapPartitions(_walk), _FINDINGS_DDL).localCheckpoint(
        eager=True)
    runs = findings.where(F.col("problem").isNull()).collect()
    check.runs, check.rows_verified = len(runs), sum(r["rows"] for r in runs)
    problems = [(r["at_ms"] or 0, r["run_id"], r["seq"], f"{_named(r)}: {r['problem']}")
                for r in findings.where(F.col("problem").isNotNull()).collect()]
    ends = {r["last_hash"]: r for r in runs}
    heads = _tips(runs)
    check.head = heads[0] if heads else None
    loose = "; ".join(f"run {h.run_id} ends at row {h.seq} and no run follows it" for h in heads[1:])
    followers: dict[str, list] = {}
    for r in runs:
        if r["first_prev"] is None:  # its first row is missing: reported above
            continue
        followers.setdefault(r["first_prev"], []).append(r)
        if r["first_prev"] != GENESIS and r["first_prev"] not in ends:
            problems.append((r["at_ms"], r["run_id"], 0, f"run {r['run_id']} row 0: links to {r['first_prev']}, "
                             "which ends no run in the table: the run before it, or its last rows, were deleted "
                             "or changed" + (f" ({loose})" if loose else "")))
    for prev, after in followers.items():
        if len(after) < 2:
            continue
        after.sort(key=lambda r: (r["at_ms"], r["run_id"]))
        names = ", ".join(r["run_id"] for r in after)
        if prev == GENESIS:
            problems += [(r["at_ms"], r["run_id"], 0, f"run {r['run_id']} row 0: starts a second chain (runs {names} "
                          "each start one): the rows before it were deleted, or their hashes removed")
                         for r in after[1:]]
        else:
            check.forks.append(f"runs {names} all follow run {ends[prev]['run_id'] if prev in ends else '?'} "
                               "(appended at the same time)")
    if runs:  # a run written after the chain began, without hashes: they were stripped
        began = min(r["at_ms"] for r in runs)
        for r in (rows.where(F.col("row_hash").isNull() & (F.unix_millis("timestamp") > began))
                  .groupBy("run_id").agg(F.count(F.lit(1)).alias("n"), F.min(F.unix_millis("timestamp")).alias("at_ms"))
                  .collect()):
            problems.append((r["at_ms"], r["run_id"], -1, f"run {r['run_id']}: {r['n']:,} row(s) carry no hash but "
                             f"were written after the chain began ({iso_utc(began)}): their hashes were removed"))
    if expected_head and not chained.where(F.col("row_hash") == expected_head).limit(1).count():
        problems.append((-1, "", 0, f"head {expected_head} is no row of the table: rows at or before it were "
                         "deleted or changed"))
    check.problems = [text for *_, text in sorted(problems, key=lambda p: (p[0], p[1], p[2]))]
    return check


def _named(row) -> str:
    what = f"table {row['table_root']}" if row["path"] is None else f"{row['action']} {row['path']}"
    return f"run {row['run_id']} row {row['seq']} ({what})"
