"""Where a run's deletes stop: the tables worth a vacuum, in the order that pays most, up to a budget.

After the logs' re-check, each table's candidates are counted and priced (their bytes at their storage
class's monthly price: the run's prices, lakeio.prices' list prices where they name none). A table whose
candidates hold less than ``min_reclaimable_bytes`` is skipped (``not_worth_it``). With ``max_deletes``, the
tables go in order: first those an earlier run left work in (the audit's ``table_deferred`` rows, and the
table it stopped inside, of the last MEMORY_DAYS), then by what their
candidates cost a month, the most first. Each takes its candidates whole while the budget lasts; the
table the budget runs out in takes its largest files first, up to what is left, and is vacuumed (or
dry-run) for those; the tables after it are ``deferred``: their report says what they hold and cost, and
the next run with the same audit table takes them first. Deleting fewer of the files a table may lose
is always safe: the rest stay for a later run, which plans them again from the logs.

With ``max_minutes``, no delete starts once that long has passed since the run began: where the time is
gone before the deletes begin, every table to vacuum is deferred whole (:func:`too_late`); where it runs
out during them, each file not yet asked for is ``deferred`` (vacuum_jobs.deletes), and its table says so
(:func:`time_ran_out`). The tables' deletes run side by side, so the time, unlike ``max_deletes``, does
not follow the order.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.audit.contract import DELETING_RUNS, AuditAction, TableStatus, read_audit, rows_date
from lakeio.prices import BYTES_PER_GB, DEFAULT_USD_PER_GB_MONTH
from lakeio.spark.shapes import of_tables
from lakeio.store.uris import TableRoot
from lakeio.tables.read import TableNotFound
from lakeio.text import human_bytes, usd
from vacuum_jobs.report import ReasonCode, RunTables
from vacuum_jobs.vacuum_plan import Decision, VacuumPlan

# How the reason of a table the budget or the time ran out in begins: the next run reads it back from the audit.
STOPPED_INSIDE = "the budget ran out in this table"
# How the reason of a table the run's time left whole begins: an applied run's alone (a dry run is not cut), which
# the next run reads back though the run deleted nothing.
OUT_OF_TIME = "deferred: the run's time ran out"
MEMORY_DAYS = 31  # how far back a run looks for what earlier runs deferred: the audit's partitions it reads


@dataclass(frozen=True)
class Worth:
    """One planned table's candidates: how many, their bytes, what they cost a month where they are."""

    files: int
    bytes: int
    usd_per_month: float


def worth(plan: VacuumPlan, prices: Mapping[str, float] = DEFAULT_USD_PER_GB_MONTH) -> dict[TableRoot, Worth]:
    """Each table of ``plan`` with its candidates' worth (one Spark job over the plan's own rows): each at the storage
    class of the inventory row the plan read (vacuum_jobs.plan), STANDARD where a row has none (not S3)."""
    price = F.create_map(*[F.lit(x) for item in prices.items() for x in item])
    usd_per_byte = F.coalesce(price[F.coalesce(F.upper("storage_class"), F.lit("STANDARD"))],
                              F.lit(prices.get("STANDARD", 0.0))) / BYTES_PER_GB
    found = {TableRoot(row["table_root"]): Worth(row["files"], row["bytes"] or 0, row["usd"] or 0.0)
             for row in plan.targets.groupBy("table_root").agg(
                 F.count(F.lit(1)).alias("files"), F.sum("length").alias("bytes"),
                 F.sum(F.coalesce("length", F.lit(0)) * usd_per_byte).alias("usd")).collect()}
    return {root: found.get(root, Worth(0, 0, 0.0)) for root in plan.decisions}


def deferred_before(spark: SparkSession, audit_table: str | None, roots: Sequence[TableRoot], now_ms: int
                    ) -> set[TableRoot]:
    """Of ``roots``, those whose newest row of a run that deleted or ran out of time (a dry run changes nothing,
    so decides nothing here) in the last ``MEMORY_DAYS`` left work for a later run: deferred, or the table the
    budget ran out in. A run with a budget of deletes that deleted holds a vacuumed or failed table: the budget
    always reaches the first of its order."""
    if not audit_table:
        return set()
    try:
        rows = read_audit(spark, audit_table).where(F.col("run_date") >= rows_date(now_ms) - timedelta(days=MEMORY_DAYS))
    except TableNotFound:
        return set()
    deleting = rows.where(F.col("path").isNull() & (F.col("action").isin([a.value for a in DELETING_RUNS])
                                                    | F.coalesce(F.col("error").startswith(OUT_OF_TIME), F.lit(False))))
    vacuums = [a.value for a in (*DELETING_RUNS, AuditAction.TABLE_DEFERRED, AuditAction.TABLE_SKIPPED,
                                 AuditAction.TABLE_REFUSED)]
    newest = (of_tables(rows.where(F.col("path").isNull() & F.col("action").isin(vacuums)), roots)
              .join(deleting.select("run_id").distinct(), "run_id", "left_semi").groupBy("table_root")
              .agg(F.max_by(F.struct("action", "error"), F.struct("timestamp", "seq")).alias("last")))
    left = newest.where((F.col("last.action") == AuditAction.TABLE_DEFERRED.value)
                        | F.coalesce(F.col("last.error").startswith(STOPPED_INSIDE), F.lit(False)))
    return {TableRoot(row["table_root"]) for row in left.collect()}


def spend(plan: VacuumPlan, worths: Mapping[TableRoot, Worth], run_tables: RunTables, *, max_deletes: int | None,
          min_reclaimable_bytes: int, first: Collection[TableRoot] = ()) -> VacuumPlan:
    """The plan less the tables not worth a vacuum (skipped) and less what the budget does not reach
    (deferred, or the smaller files of the table it runs out in); each table's report says which and why."""
    worthless = [root for root in plan.decisions if worths[root].bytes < min_reclaimable_bytes]
    for root in worthless:
        w = worths[root]
        run_tables.skip(root, ReasonCode.NOT_WORTH_IT,
                        f"its {w.files:,} candidate(s) hold {human_bytes(w.bytes)}, less than --min-reclaimable-bytes "
                        f"{min_reclaimable_bytes:,}")
    plan = plan.without(worthless)
    for root in plan.decisions:
        run_tables[root].candidate_usd_per_month = worths[root].usd_per_month
    if max_deletes is None:
        return plan
    order = sorted(plan.decisions, key=lambda r: (r not in first, -worths[r].usd_per_month, -worths[r].bytes, r))
    left, deferred, cut = max_deletes, [], None
    for root in order:
        w = worths[root]
        if w.files <= left:
            left -= w.files
        elif left > 0:
            cut, left = (root, left), 0
        else:
            deferred.append(root)
            run_tables.defer(root, w.files, w.bytes,
                             f"deferred by the budget of {max_deletes:,} deletes: its {w.files:,} candidate(s) hold "
                             f"{human_bytes(w.bytes)}, {usd(w.usd_per_month)}/month")
    plan = plan.without(deferred)
    if cut is None:
        return plan
    root, taken = cut
    plan = plan.largest(root, taken)
    kept = plan.targets.where(F.col("table_root") == root).agg(F.coalesce(F.sum("length"), F.lit(0))).collect()[0][0]
    w, counts = worths[root], run_tables[root].counts
    counts.deferred_files, counts.deferred_bytes = w.files - taken, w.bytes - kept
    run_tables[root].reason_code = ReasonCode.BUDGET_SPENT
    run_tables[root].reason = (f"{STOPPED_INSIDE}: it takes its {taken:,} largest of {w.files:,} candidate(s); the other "
                               f"{w.files - taken:,} ({human_bytes(w.bytes - kept)}) are deferred")
    return plan


def too_late(plan: VacuumPlan, run_tables: RunTables, max_minutes: float) -> VacuumPlan:
    """The plan less the tables it deletes in, each deferred with what it holds: the run's time ran out before
    its deletes began. A table with nothing to delete costs no time, and stays."""
    held = {row["table_root"]: (row["files"], row["bytes"] or 0) for row in plan.targets_of(Decision.VACUUM)
            .groupBy("table_root").agg(F.count(F.lit(1)).alias("files"), F.sum("length").alias("bytes")).collect()}
    for root, (files, length) in held.items():
        worth = run_tables[root].candidate_usd_per_month
        run_tables.defer(TableRoot(root), files, length,
                         f"{OUT_OF_TIME} (--max-minutes {max_minutes:g}) before its deletes began; its {files:,} "
                         f"candidate(s) hold {human_bytes(length)}"
                         + (f", {usd(worth)}/month" if worth else ""))
    return plan.without([TableRoot(root) for root in held])


def time_ran_out(outcomes: DataFrame, run_tables: RunTables, max_minutes: float) -> None:
    """After the deletes (``outcomes`` materialized), each table with ``deferred`` files counts them; one that
    deleted none of its files is deferred, one that deleted some says where the time ran out (a failed one keeps
    its status, its reason saying both)."""
    left = outcomes.where(F.col("action") == AuditAction.DEFERRED.value).groupBy("table_root").agg(
        F.count(F.lit(1)).alias("files"), F.coalesce(F.sum("length"), F.lit(0)).alias("bytes"))
    for row in left.collect():
        report = run_tables[row["table_root"]]
        counts = report.counts
        files, length = counts.deferred_files + row["files"], counts.deferred_bytes + row["bytes"]
        acted = counts.deleted_files + counts.already_absent_files + counts.deleted_or_absent_files + counts.failed_files
        if not acted:
            run_tables.defer(TableRoot(row["table_root"]), files, length,
                             f"{OUT_OF_TIME} (--max-minutes {max_minutes:g}) before any of its {files:,} candidate(s) "
                             f"({human_bytes(length)}) was asked to be deleted")
            continue
        said = f"the run's time (--max-minutes {max_minutes:g}) ran out"
        counts.deferred_files, counts.deferred_bytes = files, length
        taken = f"after {acted:,} of its {acted + files:,} candidate(s); the other {files:,} ({human_bytes(length)}) are deferred"
        if report.status == TableStatus.FAILED:
            report.reason = f"{report.reason}; {said} in it {taken}"
        else:
            report.reason_code, report.reason = ReasonCode.BUDGET_SPENT, f"{STOPPED_INSIDE}: {said} {taken}"
