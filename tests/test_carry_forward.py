"""A table carried forward unread is one nothing has changed in: every kind of change is noticed.

One lake of Delta tables written by deltalake, each with a tombstone its retention keeps. A dry run with an audit
table plans them all and finds nothing to delete; the next run, on the same inventory, carries them forward
without reading their logs. Then each table but one is changed in one way a carried table's plan could miss: a
commit, an orphan, a live file gone, its retention, its protocol, a restore, a checkpoint, a log cleanup, the
clock past its tombstone's retention, a retention the run asks, a pin, its log gone after the inventory. On the
next inventory, a run that may carry and a ``--full`` one are compared table by table: the same status, the same
candidates, and only the unchanged tables carried. A table whose log names another's file (a shallow clone) is
never carried: the plans of the others would need its log.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from lakeio.audit.contract import read_audit, verify_chain
from lakeio.deltalog.ownership import delta_roots, with_owner
from lakeio.inventory import current_objects
from lakeio.store.uris import canonical_col
from tests.lakes import by_table, inventory_of, vacuum
from vacuum_jobs import TableTarget
from vacuum_jobs.carry_forward import InventoryFolders

pytestmark = pytest.mark.slow

DAY_MS = 24 * 3600 * 1000
CHANGED = ("commit", "orphan", "file_gone", "retention", "protocol", "restore", "checkpoint", "cleanup", "clock",
           "asked", "pinned", "log_gone")


def _table(root: Path, retention: str | None = None) -> None:
    """Three versions: two appends, then a delete that rewrites the first file (its tombstone kept by the
    retention, 7 days unless ``retention``)."""
    write_deltalake(str(root), pa.table({"x": [1, 2]}),
                    configuration={"delta.deletedFileRetentionDuration": retention} if retention else None)
    write_deltalake(str(root), pa.table({"x": [3]}), mode="append")
    DeltaTable(str(root)).delete("x = 1")


def _clone_of(root: Path, other: Path) -> None:
    """A table whose newest commit adds one of ``other``'s live files by its absolute URI, as a shallow clone."""
    write_deltalake(str(root), pa.table({"x": [1]}))
    named = DeltaTable(str(other)).file_uris()[0]
    commit = {"add": {"path": "file://" + named.removeprefix("file://"), "size": os.path.getsize(named.removeprefix(
        "file://")), "modificationTime": 1, "dataChange": True, "partitionValues": {}}}
    (root / "_delta_log" / f"{1:020d}.json").write_text(json.dumps(commit) + "\n")


def _aged(path: Path, days: int) -> None:
    at = (datetime.now(timezone.utc) - timedelta(days=days)).timestamp()
    os.utime(path, (at, at))


def _change(lake: Path, name: str) -> None:
    """``name``'s table changed in the way it names (the clock, the run's retention and the pin change the runs)."""
    root = lake / name
    table = DeltaTable(str(root))
    if name == "log_gone":  # after the inventory: the listing alone shows it
        shutil.rmtree(root / "_delta_log")
    elif name == "commit":
        write_deltalake(str(root), pa.table({"x": [4]}), mode="append")
    elif name == "orphan":
        orphan = root / "part-orphan.parquet"
        orphan.write_bytes(b"left by a failed write")
        _aged(orphan, 30)
    elif name == "file_gone":
        os.remove(table.file_uris()[0].removeprefix("file://"))
    elif name == "retention":
        table.alter.set_table_properties({"delta.deletedFileRetentionDuration": "interval 0 hours"})
    elif name == "protocol":
        table.alter.add_feature(TableFeatures.ChangeDataFeed, allow_protocol_versions_increase=True)
    elif name == "restore":
        table.restore(1)
    elif name == "checkpoint":
        table.create_checkpoint()
    elif name == "cleanup":  # the checkpoint was written with the table: the commits before it go, as Delta's cleanup
        for commit in sorted((root / "_delta_log").glob("*.json"))[:2]:
            _aged(commit, 60)
        table.cleanup_metadata()
        assert len(list((root / "_delta_log").glob("*.json"))) < 3, "the cleanup removed no commit"


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    """The lake, its first inventory and the day it was taken (epoch ms)."""
    base = tmp_path_factory.mktemp("carry")
    lake = base / "lake"
    for name in ("quiet", *CHANGED):
        _table(lake / name, "interval 1 days" if name == "clock" else None)
    DeltaTable(str(lake / "cleanup")).create_checkpoint()
    _table(lake / "origin")
    _clone_of(lake / "clone", lake / "origin")
    day = datetime.now(timezone.utc)
    return base, lake, inventory_of(spark, lake, base, when=day), int(day.timestamp() * 1000)


def _targets(lake: Path, asked: bool) -> list:
    return [TableTarget(str(p), retention_hours=240.0 if asked and p.name == "asked" else None)
            for p in sorted(lake.iterdir())]


def test_a_settled_table_is_carried_forward_until_it_changes_and_then_planned_as_a_full_run_plans_it(
        spark, lake, caplog):
    base, lake_dir, inventory, day_ms = lake
    audit = str(base / "audit")
    first = by_table(vacuum(spark, inventory, _targets(lake_dir, False), audit_table=audit, now_ms=day_ms + 3600_000))
    assert {t.status.value for t in first.values()} == {"dry_run"}
    assert not any(t.counts.candidate_files for t in first.values())
    states = {r["table_root"].rsplit("/", 1)[1]: r["plan_state"] for r in read_audit(spark, audit).where(
        F.col("path").isNull()).collect()}
    assert {n for n, s in states.items() if s is None} == {"clone"}  # it names another table's file

    with caplog.at_level(logging.INFO):
        second = vacuum(spark, inventory, _targets(lake_dir, False), audit_table=audit, now_ms=day_ms + 2 * 3600_000)
    again = by_table(second)
    carried = {n for n, t in again.items() if t.reason_code is not None and t.reason_code.value == "unchanged"}
    assert carried == {"quiet", "origin", *CHANGED}, {n: t.reason for n, t in again.items()}
    assert {again[n].status.value for n in carried} == {"dry_run"}
    assert all(again[n].counts == first[n].counts and again[n].version == first[n].version for n in carried)
    assert again["clone"].status.value == "dry_run"
    assert "reading the logs of 1 table(s)" in caplog.text  # the carried ones were not read
    # Each row holds the hash of the commit file its table stands at, a carried table's too (not read again).
    hashes = {r["table_root"].rsplit("/", 1)[1]: r["log_sha256"] for r in read_audit(spark, audit).where(
        (F.col("run_id") == second.run_id) & F.col("path").isNull()).collect()}
    assert hashes == {name: hashlib.sha256((lake_dir / name / "_delta_log" / f"{t.version:020d}.json").read_bytes())
                      .hexdigest() for name, t in again.items()}

    for name in CHANGED[:-1]:
        _change(lake_dir, name)
    next_day = datetime.fromtimestamp(day_ms / 1000, timezone.utc) + timedelta(days=1)
    inventory = inventory_of(spark, lake_dir, base, when=next_day)
    _change(lake_dir, CHANGED[-1])
    runs = {}
    for full in (False, True):
        report = vacuum(spark, inventory, _targets(lake_dir, True), audit_table=audit, full=full,
                        now_ms=int(next_day.timestamp() * 1000) + 3600_000, keep_versions={str(lake_dir / "pinned"): [1]})
        runs[full] = by_table(report)
    carried_run, full_run = runs[False], runs[True]
    assert not any(t.reason_code is not None and t.reason_code.value == "unchanged" for t in full_run.values())
    for name, table in carried_run.items():
        expected = full_run[name]
        if name in ("quiet", "origin"):
            assert table.reason_code is not None and table.reason_code.value == "unchanged", table.reason
            assert (table.status, table.cutoff, expected.counts.candidate_files) == (expected.status, expected.cutoff, 0)
            continue
        assert (table.status, table.reason_code, table.version) == (expected.status, expected.reason_code,
                                                                     expected.version), name
        assert (table.counts, sorted(table.would_delete)) == (expected.counts, sorted(expected.would_delete)), name
    # The changes that bring a candidate do, in both runs: the orphan, the retention gone, the clock past it.
    assert {n for n, t in full_run.items() if t.counts.candidate_files} == {"orphan", "retention", "clock"}
    assert carried_run["log_gone"].status.value == "refused"
    # A run whose every table is carried reads no log and plans nothing.
    alone = vacuum(spark, inventory, [str(lake_dir / "quiet"), str(lake_dir / "origin")], audit_table=audit,
                   now_ms=int(next_day.timestamp() * 1000) + 2 * 3600_000)
    assert {t.reason_code.value for t in alone.tables if t.reason_code} == {"unchanged"} and alone.ok
    assert verify_chain(spark, audit).ok


_SEGMENTS = st.sampled_from(["t", "t_backup", "n", "_delta_log", "p=1", "x.parquet", "00000.json", "_commits"])
_PATHS = st.builds(lambda scheme, parts, marker: scheme + "b/" + "/".join(parts) + ("/" if marker else ""),
                   st.sampled_from(["s3://", "s3a://"]), st.lists(_SEGMENTS, min_size=1, max_size=5), st.booleans())
_ROWS = st.lists(st.tuples(_PATHS | st.none(), st.none() | st.integers(0, 2 ** 40), st.booleans(),
                           st.none() | st.integers(0, 2 ** 41), st.none() | st.booleans(), st.none() | st.booleans(),
                           st.none() | st.sampled_from(["v1", "v2"]), st.none() | st.sampled_from(["STANDARD", "GLACIER"])),
                 max_size=40)
_INVENTORY = ("path string, length long, isDir boolean, modificationTime long, is_latest boolean, "
              "is_delete_marker boolean, version_id string, storage_class string")


@settings(max_examples=int(os.environ.get("FOLDER_EXAMPLES", "10")), deadline=None)
@given(rows=_ROWS)
def test_the_folders_sums_find_the_tables_and_digest_each_as_its_own_rows_do(spark, rows):
    """InventoryFolders' one scan gives the roots delta_roots finds and, per table, the digest its rows give one
    by one (each row its owner): neighbours, nested tables, log folders, directory markers, both spellings, nulls
    and versions alike. The states a run recorded before the folders were summed stay valid."""
    frame = spark.createDataFrame(rows, _INVENTORY)
    folders = InventoryFolders(frame)
    try:
        roots = folders.roots()
        assert roots == delta_roots(current_objects(frame))
        columns = [F.col(c) for c in ("path", "length", "isDir", "modificationTime", "is_latest", "is_delete_marker",
                                      "version_id", "storage_class")]
        owned = with_owner(frame.where(F.col("path").isNotNull()).withColumn("path", canonical_col(F.col("path"))),
                           roots).where(F.col("table_root").isNotNull())
        owned = owned.where(~F.col("path").startswith(F.concat("table_root", F.lit("/_delta_log/"))))
        one_by_one = {r["table_root"]: f"{r['n']}:{r['bytes']}:{r['x64']}:{r['x32']}" for r in owned.groupBy(
            "table_root").agg(F.count(F.lit(1)).alias("n"), F.coalesce(F.sum("length"), F.lit(0)).alias("bytes"),
                              F.bit_xor(F.xxhash64(*columns)).alias("x64"), F.bit_xor(F.hash(*columns)).alias("x32"))
            .collect()}
        assert folders.digests(roots, roots) == {root: one_by_one.get(root, "0:0:0:0") for root in roots}
    finally:
        folders.release()
