"""The audit table's hash chain: every edited, deleted or forged row is found and named.

The class closed here is "any single change to the rows of a chained audit table": each row
in turn is edited (a different column each time), deleted, and given a recomputed hash of its
own; every change must fail verification and name that row, or, where the row was a run's last,
the run that links to it (the newest run's tail is caught by the head an evidence document quoted).
The CLI case changes a real table with delta-rs' own ``update`` and ``delete``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from demo.lake import build_lake
from lake_reports.cli import main
from lakeio.audit import chain as audit_chain
from lakeio.audit.contract import (
    AUDIT_COLUMNS,
    AUDIT_PARTITIONS,
    AuditAction,
    RunTable,
    append_run,
    head,
    read_audit,
    rows_date,
    run_rows,
    verify_chain,
)
from lakeio.spark.shapes import OUTCOMES
from lakeio.tables.write import write_delta
from tests.lakes import inventory_of, now_ms, vacuum

pytestmark = pytest.mark.slow  # a few dozen small Spark jobs


def _append(spark, audit: str, run_id: str, at_ms: int, files: int, before_commit=None) -> None:
    outcomes = spark.createDataFrame(
        [("file:///lake/t", f"file:///lake/t/part-{i}.parquet", 10 + i, at_ms, "deleted", None, at_ms + i, None, None,
          None) for i in range(files)], OUTCOMES.schema)
    append_run(spark, audit, run_id, at_ms, [RunTable("file:///lake/t", AuditAction.TABLE_VACUUMED, None, 3, 168.0)],
               outcomes, before_commit=before_commit)


@pytest.fixture(scope="module")
def chained(spark, tmp_path_factory):
    audit = str(tmp_path_factory.mktemp("chain") / "audit")
    start = now_ms()
    for i, files in enumerate((2, 0, 2)):  # a run with no file rows too
        _append(spark, audit, f"run-{i}", start + i * 60_000, files)
    return audit


def _key(row) -> tuple:
    return row["run_id"], row["seq"]


def test_each_row_edited_deleted_or_rehashed_fails_and_is_named(spark, chained):
    # Blocks of two rows: a run's rows 0, 2, ... are each the first of their block (checked against the end
    # of the block before), rows 1, 3, ... are checked within theirs; the other tests check as runs are.
    verify = partial(audit_chain.verify, rows_per_block=2)
    rows = read_audit(spark, chained).localCheckpoint(eager=True)
    clean = verify(rows)
    assert clean.ok, clean.summary()
    assert (clean.runs, clean.rows_verified, clean.unchained_rows, clean.forks) == (3, 7, 0, [])
    order = sorted(rows.collect(), key=lambda r: (r["timestamp"], r["seq"]))
    assert clean.head == audit_chain.Head(order[-1]["row_hash"], "run-2", 2)
    assert [r["prev_hash"] for r in order if r["seq"] == 0] == [audit_chain.GENESIS, order[2]["row_hash"],
                                                                 order[3]["row_hash"]]
    editable = ("table_root", "path", "length", "modificationTime", "action", "error", "timestamp", "retention_hours",
                "table_version", "version_id", "delete_marker_id", "trash_path", "source_run_id", "log_sha256")
    for i, target in enumerate(order):
        this = (F.col("run_id") == target["run_id"]) & (F.col("seq") == target["seq"])
        column = editable[i % len(editable)]
        kind = dict(rows.dtypes)[column]
        changed = F.when(F.col(column).isNull(), F.lit("1").cast(kind)).otherwise(
            F.col(column) + F.lit(1) if kind in ("bigint", "double") else
            F.col(column) + F.expr("INTERVAL 1 SECOND") if kind == "timestamp" else F.concat(F.col(column), F.lit("x")))
        edited = rows.withColumn(column, F.when(this, changed).otherwise(F.col(column)))
        named = f"run {target['run_id']} row {target['seq']} "
        check = verify(edited)
        assert not check.ok and check.problems[0].startswith(named) and "edited" in check.problems[0], (column, check.problems)

        # The forger recomputes the edited row's own hash: the row after it (or the next run's link) breaks.
        prev = (order[i - 1]["row_hash"] if target["seq"] else target["prev_hash"])
        forged = edited.where(this).collect()[0].asDict()
        forged_hash = _rehash(spark, forged, prev)
        rehashed = edited.withColumn("row_hash", F.when(this, F.lit(forged_hash)).otherwise(F.col("row_hash")))
        check = verify(rehashed)
        successor = order[i + 1] if i + 1 < len(order) else None
        if successor is None:
            assert check.ok and check.head.row_hash == forged_hash  # the newest row: only a quoted head shows it
            assert not verify(rehashed, expected_head=clean.head.row_hash).ok
        else:
            assert not check.ok and check.problems[0].startswith(f"run {successor['run_id']} row {successor['seq']}")

        deleted = verify(rows.where(~this))
        last_of_run = successor is None or successor["run_id"] != target["run_id"]
        if successor is None:
            assert deleted.ok  # the chain alone cannot see its own tail go: the quoted head can
            assert verify(rows.where(~this), expected_head=clean.head.row_hash).problems == [
                f"head {clean.head.row_hash} is no row of the table: rows at or before it were deleted or changed"]
        elif last_of_run:
            assert deleted.problems[0].startswith(f"run {successor['run_id']} row 0: links to {target['row_hash']}")
            loose = (f"run {target['run_id']} ends at row {target['seq'] - 1}" if target["seq"]
                     else f"run {order[i - 1]['run_id']} ends at row {order[i - 1]['seq']}")  # the whole run went
            assert f"({loose} and no run follows it)" in deleted.problems[0], deleted.problems
        else:
            assert deleted.problems[0].startswith(f"run {successor['run_id']} row {successor['seq']}") and \
                "missing (deleted)" in deleted.problems[0], deleted.problems

    # A whole run deleted from the middle, and a forged row inserted into a run.
    middle = verify(rows.where(F.col("run_id") != "run-1"))
    assert middle.problems[0].startswith("run run-2 row 0: links to")
    extra = rows.where((F.col("run_id") == "run-0") & (F.col("seq") == 1)).withColumn("seq", F.lit(9).cast("long"))
    assert verify(rows.unionByName(extra)).problems[0].startswith("run run-0 row 9")
    # The newest run's hashes stripped, as if it predated the chain.
    stripped = rows.withColumn("row_hash", F.when(F.col("run_id") == "run-2", None).otherwise(F.col("row_hash")))
    assert verify(stripped).problems == [
        "run run-2: 3 row(s) carry no hash but were written after the chain began "
        f"({order[0]['timestamp'].astimezone(timezone.utc).isoformat(timespec='seconds')}): their hashes were removed"]


def _rehash(spark, row: dict, prev: str) -> str:
    """The hash a forger gives the edited ``row``, by its own chain version."""
    frame = spark.createDataFrame([row], AUDIT_COLUMNS)
    if row["chain_version"] is None:
        return _v1_hash(spark, frame, prev)
    return audit_chain.fold(prev, row["seq"], frame.select(audit_chain.digest(frame, row["chain_version"])).first()[0])


def _v1_hash(spark, frame, prev: str) -> str:
    normal = audit_chain._normalized(frame)
    at = {name: normal.columns.index(name) for name in audit_chain.HASHED_COLUMNS}
    return audit_chain.link(prev, audit_chain.canonical_of(normal.collect()[0], at))


def test_a_chain_begun_by_an_earlier_release_verifies_across_the_versions(spark, tmp_path):
    """Rows chained by canonical JSON (chain version 1, ``chain_version`` null) and rows of version 2 (digested,
    before ``plan_state``) stay verifiable beside this release's; an edit in any of them is named, ``plan_state``'s
    too."""
    written = str(tmp_path / "written")
    _append(spark, written, "run-0", now_ms(), 2)
    old, prev = [], audit_chain.GENESIS
    for row in sorted(read_audit(spark, written).collect(), key=lambda r: r["seq"]):
        row = {**row.asDict(), "chain_version": None, "prev_hash": prev if row["seq"] == 0 else None}
        prev = _v1_hash(spark, spark.createDataFrame([row], AUDIT_COLUMNS), prev if row["seq"] == 0 else old[-1]["row_hash"])
        old.append({**row, "row_hash": prev})
    audit = str(tmp_path / "audit")
    write_delta(spark.createDataFrame(old, AUDIT_COLUMNS), audit, AUDIT_PARTITIONS,
                [{"run_date": old[0]["run_date"].isoformat()}], mode="append")
    at_ms = now_ms() + 60_000
    version_2 = run_rows(spark, "run-1", at_ms, [RunTable("file:///lake/t", AuditAction.TABLE_VACUUMED, None, 3, 168.0)],
                         None)
    write_delta(audit_chain.chain_run(version_2, head(spark, audit), version=2), audit, AUDIT_PARTITIONS,
                [{"run_date": rows_date(at_ms).isoformat()}], mode="append")
    append_run(spark, audit, "run-2", at_ms + 60_000,
               [RunTable("file:///lake/t", AuditAction.TABLE_DRY_RUN, None, 3, 168.0, plan_state='{"v": 1}')], None)

    rows = read_audit(spark, audit).localCheckpoint(eager=True)
    check = audit_chain.verify(rows)
    assert check.ok and (check.runs, check.rows_verified) == (3, 5), check.summary()
    assert {r["run_id"]: r["chain_version"] for r in rows.collect()} == {
        "run-0": None, "run-1": 2, "run-2": audit_chain.CHAIN_VERSION}
    for run_id, seq in (("run-0", 1), ("run-1", 0), ("run-2", 0)):
        edited = rows.withColumn("error", F.when((F.col("run_id") == run_id) & (F.col("seq") == seq), F.lit("x"))
                                 .otherwise(F.col("error")))
        problems = audit_chain.verify(edited).problems
        assert problems[0].startswith(f"run {run_id} row {seq} ") and "edited" in problems[0], problems
    forged = rows.withColumn("plan_state", F.when(F.col("run_id") == "run-2", F.lit('{"v": 2}')))
    assert "edited" in audit_chain.verify(forged).problems[0]
    newer = audit_chain.CHAIN_VERSION + 1
    future = rows.withColumn("chain_version", F.when(F.col("run_id") == "run-2", F.lit(newer))
                             .otherwise(F.col("chain_version")))
    assert f"carry chain version {newer}, which this release cannot verify" in audit_chain.verify(future).problems[0]


def test_a_small_run_is_chained_on_the_driver_as_a_large_one_is_in_a_worker(spark, tmp_path):
    """chain_run folds a run of at most DRIVER_ROWS rows on the driver: the same rows, order, links and hashes as a
    Python worker's fold, in a session whose clock repeats an hour (New York's, the night its summer time ends),
    with rows alike, nulls and every kind of column; and what it writes verifies."""
    summer_ends = datetime(2026, 11, 1, 5, 30, tzinfo=timezone.utc)  # 01:30 in New York, and again an hour later
    at = [int((summer_ends + timedelta(hours=h)).timestamp() * 1000) for h in (0, 1, 1)]
    outcomes = spark.createDataFrame(
        [("file:///lake/t", f"file:///lake/t/part-{i % 2}.parquet", 10 + i % 2, at_ms, "deleted", None, at_ms,
          "v1" if i else None, None, None) for i, at_ms in enumerate(at)], OUTCOMES.schema)
    tables = [RunTable("file:///lake/t", AuditAction.TABLE_VACUUMED, "said", 3, 168.5, "ab" * 32, plan_state='{"v": 1}'),
              RunTable("file:///lake/u", AuditAction.TABLE_DRY_RUN, None, None, None, undo_window_hours=0.25)]
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        rows = run_rows(spark, "run-1", at[1], tables, outcomes, summer_ends.date(), "run-0")
        here = audit_chain.chain_run(rows, None, at_most=len(at) + len(tables))
        worker = audit_chain.chain_run(rows, None)
        assert here.dtypes == worker.dtypes
        assert sorted(here.collect(), key=_key) == sorted(worker.collect(), key=_key)
        audit = str(tmp_path / "audit")
        write_delta(here, audit, AUDIT_PARTITIONS, [{"run_date": rows_date(at[1]).isoformat()}], mode="append")
        check = verify_chain(spark, audit)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert check.ok and check.rows_verified == 5, check.summary()
    assert {r["timestamp"].astimezone(timezone.utc) for r in read_audit(spark, audit).where(F.col("path").isNotNull())
            .collect()} == {summer_ends, summer_ends + timedelta(hours=1)}


def test_runs_appending_at_once_fork_the_chain_and_verify_says_so(spark, tmp_path):
    audit = str(tmp_path / "audit")
    _append(spark, audit, "run-a", now_ms(), 1)
    held = []

    def second_run_commits_first(table_uri: str) -> None:
        if table_uri.endswith("/audit") and not held:
            held.append(table_uri)  # run-b read the head run-a read too, and commits while run-b waits
            _append(spark, audit, "run-c", now_ms(), 1)

    _append(spark, audit, "run-b", now_ms(), 1, before_commit=second_run_commits_first)
    check = verify_chain(spark, audit)
    assert check.ok, check.summary()
    assert check.forks == ["runs run-c, run-b all follow run run-a (appended at the same time)"] or \
        check.forks == ["runs run-b, run-c all follow run run-a (appended at the same time)"]
    _append(spark, audit, "run-d", now_ms(), 1)  # the next run follows the newest tip
    assert verify_chain(spark, audit).ok


def test_the_first_runs_of_a_new_audit_table_appending_at_once_fork_at_its_start_and_verify(spark, tmp_path):
    audit = str(tmp_path / "audit")
    held = []

    def another_first_run_commits_first(table_uri: str) -> None:
        if table_uri.endswith("/audit") and not held:
            held.append(table_uri)  # run-b found no head, as run-a does; run-a commits while run-b waits
            _append(spark, audit, "run-a", now_ms(), 2)

    _append(spark, audit, "run-b", now_ms(), 2, before_commit=another_first_run_commits_first)
    rows = read_audit(spark, audit)
    assert {r["prev_hash"] for r in rows.where("seq = 0").collect()} == {audit_chain.GENESIS}
    check = verify_chain(spark, audit)
    assert check.ok and check.runs == 2, check.summary()
    assert [f.split(" each begin")[0] for f in check.forks] in (["runs run-a, run-b"], ["runs run-b, run-a"])
    _append(spark, audit, "run-c", now_ms(), 1)
    assert verify_chain(spark, audit).ok
    deleted = rows.where("run_id != 'run-a' OR seq > 0")  # a run's first row deleted is still found
    assert any("run-a" in p for p in audit_chain.verify(deleted).problems)


def test_a_vacuum_run_records_its_logs_hash_and_the_cli_names_the_edited_row(spark, tmp_path, capsys):
    lake = build_lake(tmp_path / "lake", rows_per_commit=20)
    inventory = inventory_of(spark, lake.bucket_dir, tmp_path)
    audit = str(tmp_path / "audit")
    tables = [lake.tables["orders"], lake.tables["events"]]
    for dry_run in (True, False):
        vacuum(spark, inventory, tables, dry_run=dry_run, audit_table=audit, retention_hours=0.0, enforce_retention_duration=False)
    table_rows = [r for r in read_audit(spark, audit).collect() if r["path"] is None]
    assert len(table_rows) == 4
    for row in table_rows:
        commit = Path(row["table_root"].removeprefix("file://")) / "_delta_log" / f"{row['table_version']:020d}.json"
        assert row["log_sha256"] == hashlib.sha256(commit.read_bytes()).hexdigest()

    assert main(["erasure", "--audit-table", audit, "--verify"]) == 0
    head = capsys.readouterr().out.split("head ")[1].split()[0]
    rows = read_audit(spark, audit).collect()
    last = {r["run_id"]: max(o["seq"] for o in rows if o["run_id"] == r["run_id"]) for r in rows}
    victim = next(r for r in rows if r["action"] == "deleted" and r["seq"] < last[r["run_id"]])
    DeltaTable(audit).update(predicate=f"run_id = '{victim['run_id']}' AND seq = {victim['seq']}",
                             updates={"path": "'s3://elsewhere/not-this-file.parquet'"})
    assert main(["erasure", "--audit-table", audit, "--verify", "--head", head]) == 1
    out = capsys.readouterr().out
    assert f"the first: run {victim['run_id']} row {victim['seq']} (deleted s3://elsewhere/not-this-file.parquet): " \
           "its content does not match its hash" in out
    DeltaTable(audit).restore(DeltaTable(audit).version() - 1)
    DeltaTable(audit).delete(predicate=f"run_id = '{victim['run_id']}' AND seq = {victim['seq']}")
    assert main(["erasure", "--audit-table", audit, "--verify"]) == 1
    assert f"the first: run {victim['run_id']} row {victim['seq'] + 1} " in capsys.readouterr().out
