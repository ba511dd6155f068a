"""The audit table's hash chain: an edited, deleted or inserted audit row shows.

Each chained row carries ``row_hash``, a SHA-256 that folds in the previous row's hash; a run's rows
are chained in ``seq`` order (0, 1, ...), and its first row names in ``prev_hash`` the chain's head
when the run was appended (the last row of the run before it), or :data:`GENESIS` for the first
chained run. ``chain_version`` says how a row's hash was made:

- 3 (what runs write): version 2's, over :data:`DIGESTED` and then ``plan_state`` (what the next run
  trusts to carry a table forward, vacuum_jobs.carry_forward).
- 2: ``row_hash = SHA-256(prev + "\n" + seq + "\n" + digest)``, where ``prev``
  is the previous row's hash (``prev_hash`` for row 0) and ``digest`` the SHA-256 of the row's
  :data:`DIGESTED` columns, each written as its length, a colon and its text, a null as ``-``
  (text: strings as they are, whole numbers in decimal, timestamps as UTC microseconds, dates as ISO
  days, doubles as Java's ``%.17g``). The digests are computed on the JVM, in parallel;
  only the fold over them is sequential.
- null (rows chained before version 2): ``SHA-256(prev + "\n" + canonical JSON)`` of the
  :data:`HASHED_COLUMNS`, keys sorted, timestamps as UTC microseconds, dates as ISO days.

Verifying recomputes every hash, of either version:

- an edited row no longer matches its hash;
- a deleted row leaves a gap in ``seq`` (or, the last row of a run, leaves the next run pointing
  at a hash no run ends with);
- a deleted run leaves the run after it pointing at nothing.

Only the newest rows can vanish unseen by the chain alone; evidence documents quote the head they
were built from, and ``--verify --head H`` checks it is still there. Rows written before the chain
existed carry no hash and are counted, not verified. Two runs appending at once both chain to the
same head (the first runs of a new table both to :data:`GENESIS`): a fork, reported, not a failure.

A run is chained in one Spark task (its rows in a total order: by every column), a small one on the driver, and
verified in blocks of its rows, side by side; verifying collects nothing to the driver but one summary row per run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F

from lakeio.spark.shapes import local_frame
from lakeio.times import iso_utc

GENESIS = "0" * 64
CHAIN_VERSION = 3  # what chain_run writes
# The columns a row's hash covers. Fixed: a column added to the audit table later must not change the hash of the
# rows already written (extending this list needs a chain version of its own).
HASHED_COLUMNS = (
    "run_id", "table_root", "table_version", "path", "length", "modificationTime", "action", "error", "timestamp",
    "inventory_date", "retention_hours", "run_date", "version_id", "delete_marker_id", "trash_path", "source_run_id",
    "log_sha256", "seq", "prev_hash",
)
# Version 2 digests these (and the columns added with it); seq and prev_hash go into the fold itself.
DIGESTED = (*(name for name in HASHED_COLUMNS if name not in ("seq", "prev_hash")), "undo_window_hours")
# What each version from 2 on digests: version 3 adds the column that came with it.
DIGESTED_BY_VERSION = {2: DIGESTED, 3: (*DIGESTED, "plan_state")}
# Rows of version 2 on are verified in blocks of this many rows of a run, side by side (a run is one task otherwise).
ROWS_PER_BLOCK = 1 << 16
# A run of at most this many rows is chained on the driver (chain_run): a quiet night's table rows, a small vacuum's.
DRIVER_ROWS = 20_000
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
    plain strings and numbers (never a datetime in the worker's local time zone): version 1's form."""
    kinds = dict(rows.dtypes)
    return rows.select(*[F.unix_micros(c).alias(c) if kinds[c] == "timestamp"
                         else F.date_format(c, "yyyy-MM-dd").alias(c) if kinds[c] == "date" else F.col(c)
                         for c in rows.columns])


def canonical_of(values: Sequence[object], at: dict[str, int]) -> str:
    """A normalized row's canonical JSON over :data:`HASHED_COLUMNS` (version 1), given as values and
    each hashed column's position (a Row's lookup by name scans its fields, which cost more than the hash)."""
    return json.dumps({name: values[i] for name, i in at.items()}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)


def link(prev_hash: str, canonical_json: str) -> str:
    """A version 1 row's hash."""
    return hashlib.sha256(f"{prev_hash}\n{canonical_json}".encode()).hexdigest()


def digest(rows: DataFrame, version: int = CHAIN_VERSION) -> Column:
    """A row's digest of the columns its chain ``version`` digests (:data:`DIGESTED_BY_VERSION`), as a column of
    ``rows`` (on the JVM)."""
    kinds = dict(rows.dtypes)
    parts = []
    for name in DIGESTED_BY_VERSION[version]:
        kind = kinds[name]
        text = (F.unix_micros(name).cast("string") if kind == "timestamp"
                else F.date_format(name, "yyyy-MM-dd") if kind == "date"
                else F.format_string("%.17g", name) if kind == "double"
                else F.col(name).cast("string"))
        parts.append(F.when(F.col(name).isNull(), F.lit("-"))
                     .otherwise(F.concat(F.length(text).cast("string"), F.lit(":"), text)))
    return F.sha2(F.concat(*parts), 256)


def fold(prev_hash: str, seq: int, row_digest: str) -> str:
    """A row's hash, from version 2 on."""
    return hashlib.sha256(f"{prev_hash}\n{seq}\n{row_digest}".encode()).hexdigest()


_DIGEST = "_digest"


def chain_run(rows: DataFrame, head: Head | None, version: int = CHAIN_VERSION, *, at_most: int | None = None
              ) -> DataFrame:
    """``rows`` (one run's audit rows, without ``seq``/``prev_hash``/``row_hash``/``chain_version``) chained
    after ``head`` (``version``: an earlier one, where a test needs the rows an earlier release wrote): digested
    where they are, then in one task, in a total order (every column: identical rows are interchangeable),
    numbered and folded. Returns the audit table's columns, in its order. ``at_most``: about how many rows the
    caller expects; a run of at most :data:`DRIVER_ROWS` is folded on the driver, with the same hashes, where a
    large one is folded in a Python worker, whose start costs seconds of a night that plans little."""
    previous = head.row_hash if head else GENESIS
    ordered = (rows.withColumn(_DIGEST, digest(rows, version)).repartition(1)
               .sortWithinPartitions(*[F.col(c).asc_nulls_first() for c in rows.columns])
               .withColumn("seq", F.monotonically_increasing_id())  # one partition: 0, 1, ...
               .withColumn("prev_hash", F.when(F.col("seq") == 0, F.lit(previous)).cast("string")))
    names = [*rows.columns, "seq", "prev_hash"]
    if at_most is not None and at_most <= DRIVER_ROWS:
        return _folded_here(ordered, names, previous, version)
    seq_at, digest_at = ordered.columns.index("seq"), ordered.columns.index(_DIGEST)
    kept_at = [ordered.columns.index(name) for name in names]

    def chain(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        last = previous
        for batch in batches:
            hashes = []
            for seq, row_digest in zip(batch.column(seq_at).to_pylist(), batch.column(digest_at).to_pylist()):
                last = fold(last, seq, row_digest)
                hashes.append(last)
            yield pa.RecordBatch.from_arrays(
                [*(batch.column(i) for i in kept_at), pa.array(hashes, pa.string()),
                 pa.array([version] * len(hashes), pa.int32())],
                names=[*names, "row_hash", "chain_version"])

    kinds = dict(ordered.dtypes)
    schema = ", ".join(f"{n} {kinds[n]}" for n in names) + ", row_hash string, chain_version int"
    return ordered.mapInArrow(chain, schema)


def _folded_here(ordered: DataFrame, names: list[str], previous: str, version: int) -> DataFrame:
    """``chain_run``'s fold on the driver: the rows collected once, in their order (timestamps as UTC microseconds,
    dates as ISO days, so that no time zone moves them), folded, and given back as a frame the JVM builds."""
    kinds = dict(ordered.dtypes)
    collected = _normalized(ordered.select(*names, _DIGEST)).collect()
    chained, last = [], previous
    for row in sorted(collected, key=lambda r: r["seq"]):
        last = fold(last, row["seq"], row[_DIGEST])
        chained.append((*(row[name] for name in names), last, version))
    ddl = ", ".join(f"{name} {_DDL.get(kinds[name], kinds[name])}" for name in names)
    return local_frame(ordered.sparkSession, chained, f"{ddl}, row_hash string, chain_version int")


_DDL = {"bigint": "long"}  # Spark's names of the audit's kinds, as local_frame's DDL spells them


def chain_head(rows: DataFrame, newest_run_date: date | None = None) -> Head | None:
    """The chain's head in ``rows`` (the audit table): the last row of the newest run that no run links to
    (of the runs of the last week before ``newest_run_date``, or of all when none of them is chained)."""
    chained = rows.where(F.col("row_hash").isNotNull())
    if newest_run_date is not None:
        recent = _tips(_run_ends(chained.where(F.col("run_date") >= F.lit(newest_run_date - _HEAD_LOOKBACK))))
        if recent:
            return recent[0]
    found = _tips(_run_ends(chained))
    return found[0] if found else None


def _run_ends(chained: DataFrame) -> list[Row]:
    return chained.groupBy("run_id").agg(
        F.max_by("row_hash", "seq").alias("last_hash"), F.max("seq").alias("last_seq"),
        F.max(F.when(F.col("seq") == 0, F.col("prev_hash"))).alias("first_prev"),
        F.min(F.unix_millis("timestamp")).alias("at_ms")).collect()


def _tips(runs: Sequence[Row]) -> list[Head]:
    """Runs' last rows that no run links to, the newest run's first."""
    linked = {r["first_prev"] for r in runs}
    tips = sorted((r for r in runs if r["last_hash"] not in linked), key=lambda r: (r["at_ms"], r["run_id"]),
                  reverse=True)
    return [Head(r["last_hash"], r["run_id"], r["last_seq"]) for r in tips]


_FINDINGS_DDL = ("run_id string, seq long, at_ms long, table_root string, path string, action string, "
                 "problem string, first_prev string, last_hash string, last_seq long, rows long")
_FINDINGS = tuple(column.split()[0] for column in _FINDINGS_DDL.split(", "))


# Version 1 rows as its walk reads them: the hashed columns (normalized), then the stored hash.
_V1_WALKED = (*HASHED_COLUMNS, "row_hash")
_V1_AT = {name: i for i, name in enumerate(HASHED_COLUMNS)}
_WHERE = ("run_id", "seq", "prev_hash", "row_hash", "timestamp", "table_root", "path", "action")
_RUN, _SEQ, _PREV, _STORED, _TIME, _TABLE, _PATH, _ACTION = (_V1_WALKED.index(name) for name in _WHERE)


def _walk(partition: Iterable[Sequence[Any]]) -> Iterator[tuple[object, ...]]:
    """One partition's version 1 runs, each in ``seq`` order: a row per problem (``problem`` set), then a
    summary row per run (``rows`` set). :func:`_checked` finds the same for versions 2 and 3, on the JVM."""
    run: dict[str, Any] | None = None
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
        elif stored != link(prev if seq == 0 else run["last_hash"], canonical_of(values, _V1_AT)):
            problem = "its content does not match its hash (the row was edited)"
        else:
            problem = None
        if problem:
            yield tuple({**_found(values), "problem": problem}.get(n) for n in _FINDINGS)
        run.update(last_seq=seq, last_hash=stored, rows=run["rows"] + 1)
    if run is not None:
        yield tuple(run.get(n) for n in _FINDINGS)


def _found(values: Sequence[Any]) -> dict[str, Any]:
    """Where a finding is: the row's run, place, time, table and file."""
    return {"run_id": values[_RUN], "seq": values[_SEQ], "at_ms": (values[_TIME] or 0) // 1000,
            "table_root": values[_TABLE], "path": values[_PATH], "action": values[_ACTION]}


def _checked(rows: DataFrame, version: int, rows_per_block: int) -> DataFrame:
    """:func:`_walk`'s findings for rows of chain ``version`` (2 on), on the JVM: each row is checked against the row
    before it in its run (its stored hash and ``seq``), which needs no fold. A run is checked in
    blocks of ``rows_per_block`` consecutive ``seq``, side by side; a block's first row is checked
    against the last row of the run's block before it."""
    seq, prev = F.col("seq"), F.col("prev_hash")
    block = F.floor(seq / F.lit(rows_per_block))
    digested = rows.select(*_WHERE, digest(rows, version).alias(_DIGEST), block.alias("_block"))  # before the shuffle
    in_block = Window.partitionBy("run_id", "_block").orderBy("seq")
    ends = rows.groupBy(F.col("run_id").alias("_run"), block.alias("_at")).agg(
        F.max(seq).alias("_end_seq"), F.max_by("row_hash", seq).alias("_end_hash"))
    blocks = Window.partitionBy("_run").orderBy("_at")
    entries = ends.select("_run", "_at", F.lag("_end_seq").over(blocks).alias("_entry_seq"),
                          F.lag("_end_hash").over(blocks).alias("_entry_hash"))
    lagged = digested.select("*", F.lag("seq").over(in_block).alias("_seq"),
                             F.lag("row_hash").over(in_block).alias("_hash"))
    joined = lagged.join(F.broadcast(entries),  # a row per block: the rows stay where the window left them
                         F.col("run_id").eqNullSafe(F.col("_run")) & (F.col("_block") == F.col("_at")), "left")
    first_in_block = F.col("_seq").isNull()
    before = joined.select(
        *_WHERE, _DIGEST,
        F.when(first_in_block, F.col("_entry_seq")).otherwise(F.col("_seq")).alias("seq_before"),
        F.when(first_in_block, F.col("_entry_hash")).otherwise(F.col("_hash")).alias("hash_before"))
    expected = F.coalesce(F.col("seq_before") + 1, F.lit(0))
    linked = F.sha2(F.concat_ws("\n", F.when(seq == 0, prev).otherwise(F.col("hash_before")), seq.cast("string"),
                                F.col(_DIGEST)), 256)
    problem = (F.when(seq > expected, F.format_string("row(s) %d..%d of the run before it are missing (deleted)",
                                                      expected, seq - 1))
               .when(seq < expected, F.format_string("row %d appears twice", seq))
               .when((seq == 0) & prev.isNull(), F.lit("the run's first row names no previous hash"))
               .when((seq != 0) & prev.isNotNull(), F.lit("a row other than the run's first names a previous hash"))
               .when(~F.col("row_hash").eqNullSafe(linked),
                     F.lit("its content does not match its hash (the row was edited)")))
    at_ms = F.coalesce(F.floor(F.unix_micros("timestamp") / 1000), F.lit(0)).cast("long")  # as _found has it
    where = [F.col("run_id"), seq, at_ms.alias("at_ms"), F.col("table_root"), F.col("path"), F.col("action")]
    problems = before.where(problem.isNotNull()).select(
        *where, problem.alias("problem"), *[F.lit(None).cast(kind).alias(name) for name, kind in
                                            (("first_prev", "string"), ("last_hash", "string"), ("last_seq", "long"),
                                             ("rows", "long"))])
    first = F.struct(*where)
    runs = rows.groupBy("run_id").agg(
        F.min_by(first, seq).alias("first"), F.min_by(prev, seq).alias("prev"), F.min(seq).alias("first_seq"),
        F.max_by("row_hash", seq).alias("last_hash"), F.max(seq).alias("last_seq"), F.count(F.lit(1)).alias("rows"))
    summaries = runs.select(
        *[F.col(f"first.{name}").alias(name) for name in ("run_id", "seq", "at_ms", "table_root", "path", "action")],
        F.lit(None).cast("string").alias("problem"),
        F.when(F.col("first_seq") == 0, F.col("prev")).alias("first_prev"), "last_hash", "last_seq", "rows")
    return problems.unionByName(summaries)


def _findings(chained: DataFrame, versions: dict[int | None, int], rows_per_block: int) -> list[Row]:
    """Every run's summary and every problem row, walked by the version its rows were chained with
    (``versions``: rows per ``chain_version``); one row per run or problem, so they are collected."""
    spark = chained.sparkSession
    found = spark.createDataFrame([], _FINDINGS_DDL)
    if versions.get(None):
        old = _normalized(chained.where(F.col("chain_version").isNull()).select(*_V1_WALKED))
        ordered = old.repartition("run_id").sortWithinPartitions("run_id", "seq")
        found = found.unionByName(spark.createDataFrame(ordered.rdd.mapPartitions(_walk),
                                                        _FINDINGS_DDL))
    for version in DIGESTED_BY_VERSION:
        if versions.get(version):
            found = found.unionByName(_checked(chained.where(F.col("chain_version") == version), version, rows_per_block))
    return found.collect()


def verify(rows: DataFrame, expected_head: str | None = None, rows_per_block: int = ROWS_PER_BLOCK) -> ChainCheck:
    """Check every chained row of the audit table ``rows`` and the links between runs; ``expected_head``
    (a head an evidence document quoted) must still be a row of the chain. ``rows_per_block``: how many
    rows of a run one task checks (a test makes it small, to cross a block's edge every other row)."""
    # One job counts the rows of each chain version, and each run without hashes (with its newest row):
    # the walk reads only what was chained, and the check for stripped hashes runs only where one may be.
    chained_flag = F.col("row_hash").isNotNull()
    kinds = rows.groupBy(chained_flag.alias("chained"), "chain_version",
                         F.when(~chained_flag, F.col("run_id")).alias("bare_run")).agg(
        F.count(F.lit(1)).alias("rows"), F.max(F.unix_millis("timestamp")).alias("newest_ms")).collect()
    check = ChainCheck(unchained_rows=sum(r["rows"] for r in kinds if not r["chained"]))
    chained = rows.where(chained_flag)
    versions: dict[int | None, int] = {}
    for r in kinds:
        if r["chained"]:
            versions[r["chain_version"]] = versions.get(r["chain_version"], 0) + r["rows"]
    findings = _findings(chained, versions, rows_per_block)
    runs = [r for r in findings if r["problem"] is None]
    check.runs, check.rows_verified = len(runs), sum(r["rows"] for r in runs)
    problems = [(r["at_ms"] or 0, r["run_id"], r["seq"], f"{_named(r)}: {r['problem']}")
                for r in findings if r["problem"] is not None]
    if set(versions) - {None, *DIGESTED_BY_VERSION}:
        for r in (chained.where(~F.col("chain_version").isin(*DIGESTED_BY_VERSION)).groupBy("run_id", "chain_version")
                  .agg(F.count(F.lit(1)).alias("n"), F.min(F.unix_millis("timestamp")).alias("at_ms")).collect()):
            problems.append((r["at_ms"], r["run_id"], 0, f"run {r['run_id']}: {r['n']:,} row(s) carry chain version "
                             f"{r['chain_version']}, which this release cannot verify (written by a newer one?)"))
    ends = {r["last_hash"]: r for r in runs}
    heads = _tips(runs)
    check.head = heads[0] if heads else None
    loose = "; ".join(f"run {h.run_id} ends at row {h.seq} and no run follows it" for h in heads[1:])
    followers: dict[str, list[Row]] = {}
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
        # Runs that each read the same head: appended at the same time. Each begins the chain where the
        # table had none yet (the first runs of a new audit table); rows deleted later change no run's link.
        check.forks.append(f"runs {names} " + ("each begin the chain (appended at the same time to an audit "
                                               "table that had no run yet)" if prev == GENESIS else
                                               f"all follow run {ends[prev]['run_id'] if prev in ends else '?'} "
                                               "(appended at the same time)"))
    began = min((r["at_ms"] for r in runs), default=None)
    if began is not None and any(not r["chained"] and (r["newest_ms"] or 0) > began for r in kinds):
        # a run written after the chain began, without hashes: they were stripped
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


def _named(row: Row) -> str:
    what = f"table {row['table_root']}" if row["path"] is None else f"{row['action']} {row['path']}"
    return f"run {row['run_id']} row {row['seq']} ({what})"
