"""Delta's own reader as the referee of pins, on tables delta-spark writes here (docs/pins.md).

A pinned version must read whole after the harshest vacuum we run (retention 0, forced, applied) of a
table with every kind of rewrite (overwrites, deletes by deletion vector, OPTIMIZE, checkpoints): its
rows and their content, as Delta reads them, are what they were. The same vacuum of a copy without
the pins deletes those files, and Delta can no longer read the version: the pin is what kept them.
And a pin Delta's own log cleanup broke (delta-spark expiring old commits after a checkpoint) is
reported broken by name; one whose commits cleanup will reach soon is reported with that date.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from lakeio.deltalog.pinned import PinState
from tests.lakes import inventory_of, now_ms, vacuum

pytestmark = [pytest.mark.delta_jars, pytest.mark.slow, pytest.mark.every_line]  # Delta 3.3 and 4.x read them

DAY_MS = 86_400_000
PINNED = (3, 5)  # the version after the delete by deletion vector, and the one after OPTIMIZE


def _rewritten(spark, table: Path) -> None:
    """Versions 0-6: create, two inserts, a delete by deletion vector (3), an update (4), OPTIMIZE (5),
    an overwrite (6); a checkpoint every second commit."""
    t = f"delta.`{table}`"
    spark.sql(f"CREATE TABLE {t} (id INT, v STRING) USING delta TBLPROPERTIES ("
              "'delta.enableDeletionVectors' = 'true', 'delta.checkpointInterval' = '2')")
    for start in (0, 100):
        spark.range(start, start + 100).selectExpr("CAST(id AS INT) id", "'a' v").repartition(2) \
            .write.format("delta").mode("append").save(str(table))
    spark.sql(f"DELETE FROM {t} WHERE id % 7 = 0")
    spark.sql(f"UPDATE {t} SET v = 'b' WHERE id % 5 = 0")
    spark.sql(f"OPTIMIZE {t}")
    spark.range(500, 550).selectExpr("CAST(id AS INT) id", "'c' v").write.format("delta").mode("overwrite").save(str(table))


def _read(spark, table: Path, version: int) -> tuple[int, int]:
    """Delta's reading of one version: its row count and a hash of its content."""
    rows = spark.read.format("delta").option("versionAsOf", version).load(str(table))
    got = rows.agg(F.count(F.lit(1)).alias("n"), F.sum(F.hash("id", "v").cast("long")).alias("h")).first()
    return got["n"], got["h"]


def test_pinned_versions_read_whole_by_delta_after_a_forced_zero_retention_vacuum_and_only_the_pins_kept_them(spark, tmp_path):
    pinned_lake, unpinned_lake = tmp_path / "pinned", tmp_path / "unpinned"
    table = pinned_lake / "t"
    _rewritten(spark, table)
    shutil.copytree(table, unpinned_lake / "t")
    copy = unpinned_lake / "t"
    before = {v: _read(spark, table, v) for v in PINNED}
    assert len({*before.values(), _read(spark, table, 6)}) == 3  # each pinned version reads rows of its own
    forced = {"retention_hours": 0, "enforce_retention_duration": False, "min_coverage": 0.0, "dry_run": False}

    report = vacuum(spark, inventory_of(spark, pinned_lake, tmp_path / "a"), [str(table)], now_ms=now_ms() + 1000,
                    keep_versions={str(table): list(PINNED)}, **forced)
    assert report.ok, report.summary()
    [result] = report.tables
    assert {p.pin.version: p.state for p in report.pins} == {v: PinState.HELD for v in PINNED}
    assert result.counts.pinned_files > 0 and result.counts.deleted_files > 0  # what no pin reads went
    assert {v: _read(spark, table, v) for v in PINNED} == before

    unpinned = vacuum(spark, inventory_of(spark, unpinned_lake, tmp_path / "b"), [str(copy)], now_ms=now_ms() + 1000,
                      **forced).tables[0]
    assert unpinned.counts.deleted_files == result.counts.deleted_files + result.counts.pinned_files
    kept = {p.relative_to(table) for p in table.rglob("*") if p.is_file() and "_delta_log" not in p.parts}
    left = {p.relative_to(copy) for p in copy.rglob("*") if p.is_file() and "_delta_log" not in p.parts}
    assert left < kept and any(p.name.startswith("deletion_vector_") for p in kept - left)
    for version in PINNED:  # without the pins Delta cannot read them: their files are gone
        with pytest.raises(Exception, match=r"(?i)FileNotFound|FILE_NOT_EXIST|does not exist|not found"):
            _read(spark, copy, version)


def _aged(log: Path, versions: range, days: int) -> None:
    """Set back the modification time of each of ``versions``' log files ``days`` days, as though written then."""
    at = (now_ms() - days * DAY_MS) / 1000
    for path in log.iterdir():
        if path.name[:20].isdigit() and int(path.name[:20]) in versions:
            os.utime(path, (at, at))


def test_a_pin_deltas_log_cleanup_broke_is_reported_broken_and_one_it_will_reach_soon_with_its_date(spark, tmp_path):
    lake = tmp_path / "lake"
    table = lake / "t"
    t = f"delta.`{table}`"
    spark.sql(f"CREATE TABLE {t} (id INT, v STRING) USING delta TBLPROPERTIES ("
              "'delta.logRetentionDuration' = 'interval 2 days', 'delta.checkpointInterval' = '1', "
              "'delta.deletedFileRetentionDuration' = 'interval 1 days')")  # Delta 4 wants it no longer than the log's
    for i in range(3):
        spark.sql(f"INSERT INTO {t} VALUES ({i}, 'x')")  # versions 1-3, each with its checkpoint
    log = table / "_delta_log"
    _aged(log, range(0, 3), days=10)  # versions 0-2 written ten days ago
    before = _read(spark, table, 3)
    spark.sql(f"INSERT INTO {t} VALUES (9, 'y')")  # version 4: its checkpoint runs Delta's log cleanup
    assert not (log / f"{1:020d}.json").exists(), "Delta's log cleanup did not run: the test proves nothing"
    with pytest.raises(Exception, match=r"(?i)version|reconstruct|not.*(found|exist)|history"):
        _read(spark, table, 1)  # Delta itself can no longer read version 1

    report = vacuum(spark, inventory_of(spark, lake, tmp_path), [str(table)], keep_versions={str(table): [1, 3]})
    states = {p.pin.version: p for p in report.pins}
    assert states[1].state is PinState.BROKEN and f"{table.name}@v1" in states[1].pin.label
    assert f"pin {states[1].pin.label}" in report.summary() and not report.ok
    soon = states[3]  # readable now (its checkpoint is there), but its commit is young: cleanup reaches it in days
    assert _read(spark, table, 3) == before and soon.state is PinState.AT_RISK
    commit_ms = int(os.stat(log / f"{3:020d}.json").st_mtime * 1000)
    assert soon.unreadable_from is not None
    assert _epoch_ms(soon.unreadable_from) == -(-commit_ms // DAY_MS) * DAY_MS + 2 * DAY_MS
    assert "delta.logRetentionDuration" in (soon.advice or "")


def _epoch_ms(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
