"""Pinned versions (docs/pins.md): a vacuum keeps what each pinned version reads, and says whether Delta
can still read it; pins from the API, a tables file and the pins table."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakeio.deltalog.pinned import PinState
from lakeio.errors import InvalidOption
from lakeio.pins import Pin, keep_versions
from lakeio.tables.pins import PIN, UNPIN, append_pin_rows, pins_in_force
from tests.lakes import inventory_of, now_ms, vacuum
from tests.report_schemas import assert_matches_schema
from vacuum_jobs.targets import TargetsError, from_file

DAY_MS = 86_400_000


def _overwritten(folder: Path, versions: int = 3) -> Path:
    """A table deltalake writes and overwrites: each version's file goes stale with the next."""
    table = folder / "t"
    for v in range(versions):
        write_deltalake(str(table), pa.table({"id": list(range(v * 10, v * 10 + 10))}), mode="overwrite")
    return table


def _rows(table: Path, version: int) -> list[int]:
    return sorted(DeltaTable(str(table), version=version).to_pyarrow_table().column("id").to_pylist())


def test_a_pinned_version_is_kept_whole_through_a_zero_retention_vacuum_and_only_the_pin_keeps_it(spark, tmp_path):
    bucket = tmp_path / "lake"
    table = _overwritten(bucket)
    before = {v: _rows(table, v) for v in range(3)}
    inventory = inventory_of(spark, bucket, tmp_path)
    forced = {"retention_hours": 0, "enforce_retention_duration": False, "now_ms": now_ms() + 1000}

    unpinned = vacuum(spark, inventory, [str(table)], **forced).tables[0]
    assert unpinned.counts.candidate_files == 2 and unpinned.counts.pinned_files == 0  # v0's and v1's files

    report = vacuum(spark, inventory, [str(table)], dry_run=False, keep_versions={str(table): [0]}, **forced)
    counts = report.tables[0].counts
    assert (counts.pinned_files, counts.deleted_files) == (1, 1)  # v0's file only the pin kept; v1's deleted
    assert _rows(table, 0) == before[0] and _rows(table, 2) == before[2]
    [pin] = report.pins
    assert (pin.state, pin.pin.version, pin.files) == (PinState.HELD, 0, 1)
    assert report.ok
    assert_matches_schema(report.to_dict(), "vacuum-report")


def test_a_pin_of_a_version_the_log_no_longer_holds_is_reported_broken_and_fails_the_run(spark, tmp_path):
    bucket = tmp_path / "lake"
    table = _overwritten(bucket)
    (table / "_delta_log" / f"{0:020d}.json").unlink()  # as a log cleanup leaves it (no checkpoint either)
    inventory = inventory_of(spark, bucket, tmp_path)
    report = vacuum(spark, inventory, [str(table)], keep_versions={str(table): [1, 2]})
    states = {p.pin.version: p for p in report.pins}
    assert states[1].state is PinState.BROKEN and "no commit 0" in states[1].why
    assert states[2].state is PinState.BROKEN  # version 2 too needs commit 0 without a checkpoint
    assert not report.ok
    assert "error: pin " in report.summary()


def test_a_pin_whose_log_cleanup_is_near_says_when_and_what_to_set(spark, tmp_path):
    bucket = tmp_path / "lake"
    table = bucket / "t"
    write_deltalake(str(table), pa.table({"id": [1]}), configuration={"delta.logRetentionDuration": "interval 2 days"})
    write_deltalake(str(table), pa.table({"id": [2]}), mode="overwrite")
    DeltaTable(str(table)).create_checkpoint()
    inventory = inventory_of(spark, bucket, tmp_path)
    commit = table / "_delta_log" / f"{0:020d}.json"
    report = vacuum(spark, inventory, [str(table)], keep_versions={str(table): [0]})
    [pin] = report.pins
    commit_ms = int(os.stat(commit).st_mtime * 1000)
    first = (-(-commit_ms // DAY_MS)) * DAY_MS + 2 * DAY_MS
    assert pin.state is PinState.AT_RISK and pin.unreadable_from is not None
    assert abs(_epoch(pin.unreadable_from) - first) < 1000
    assert "delta.logRetentionDuration" in (pin.advice or "")


def _epoch(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def test_a_pin_by_instant_resolves_to_the_version_current_then(spark, tmp_path):
    bucket = tmp_path / "lake"
    table = _overwritten(bucket)
    log = table / "_delta_log"
    for v, day in ((0, 30), (1, 20), (2, 10)):  # commits made 30, 20 and 10 days ago
        at = (now_ms() - day * DAY_MS) / 1000
        os.utime(log / f"{v:020d}.json", (at, at))
    inventory = inventory_of(spark, bucket, tmp_path)
    report = vacuum(spark, inventory, [str(table)],
                    keep_versions=[Pin(str(table), at_ms=now_ms() - 15 * DAY_MS, reason="mid-month")])
    [pin] = report.pins
    assert pin.pin.version == 1 and pin.state is not PinState.BROKEN


def test_pins_given_wrongly_are_refused_naming_the_entry(tmp_path):
    with pytest.raises(InvalidOption, match=r"keep_versions\['s3://lake/t'\]\[0\]: a pin is a version number"):
        keep_versions({"s3://lake/t": [True]})
    with pytest.raises(InvalidOption, match="version must be a whole number"):
        keep_versions([Pin("s3://lake/t", version=-2)])
    with pytest.raises(InvalidOption, match="one of them"):
        keep_versions({"s3://lake/t": [{"version": 1, "timestamp": "2026-01-01"}]})
    with pytest.raises(InvalidOption, match=r"unknown key\(s\) \['when'\]"):
        keep_versions({"s3://lake/t": [{"when": 1}]})
    with pytest.raises(InvalidOption, match="not an ISO-8601"):
        keep_versions({"s3://lake/t": [{"timestamp": "yesterday"}]})
    tables = tmp_path / "tables.yaml"
    tables.write_text("- table: s3://lake/t\n  keep_versions: [3, {version: -1}]\n")
    with pytest.raises(TargetsError, match=r"entry 0: keep_versions\[1\]"):
        from_file(str(tables))
    tables.write_text("- table: s3://lake/t\n  keep_versions:\n    - {version: 4, reason: audit, expires: 2030-01-01}\n")
    [target] = from_file(str(tables))
    assert [(p.version, p.reason, p.expires_ms is not None) for p in target.keep_versions] == [(4, "audit", True)]


def test_the_pins_table_holds_the_newest_word_on_each_version(spark, tmp_path):
    pins = str(tmp_path / "pins")
    table = "file:///lake/t"
    append_pin_rows(spark, pins, [Pin(table, version=1, reason="a"), Pin(table, version=2, reason="b")], PIN, now_ms=1000)
    append_pin_rows(spark, pins, [Pin(table, version=1)], UNPIN, now_ms=2000)
    assert [(p.version, p.reason) for p in pins_in_force(spark, pins)] == [(2, "b")]


def test_pin_unpin_and_pins_from_the_command_line(spark, tmp_path, capsys):
    from vacuum_jobs.cli import main

    table = _overwritten(tmp_path / "lake")
    pins = str(tmp_path / "pins")
    assert main(["pin", "--pins-table", pins, f"{table}@1", "--reason", "model v3", "--set-by", "ml-team"]) == 0
    assert main(["pin", "--pins-table", pins, f"{table}@9", "--reason", "nothing there"]) == 1
    assert "not pinned" in capsys.readouterr().err
    assert main(["pins", "--pins-table", pins]) == 0
    assert "@v1 (model v3, set by ml-team): held" in capsys.readouterr().out
    assert main(["unpin", "--pins-table", pins, f"{table}@1"]) == 0
    assert main(["unpin", "--pins-table", pins, f"{table}@1"]) == 1
    assert pins_in_force(spark, pins) == []
    with pytest.raises(SystemExit) as usage:  # said before Spark: a version and an instant both
        main(["pin", "--pins-table", pins, f"{table}@1", "--as-of", "2026-01-01", "--reason", "r"])
    assert usage.value.code == 2


def test_a_pinned_version_of_a_shallow_clone_keeps_what_it_reads_in_its_sources_folder(spark, tmp_path):
    """The clone's log names its source's files by absolute URI: a pin of the clone's old version keeps
    the source file it reads through a vacuum of the source, which the clone itself no longer needs."""
    bucket = tmp_path / "lake"
    source = _overwritten(bucket, versions=2)
    [old] = DeltaTable(str(source), version=0).file_uris()
    [new] = DeltaTable(str(source), version=1).file_uris()
    first = [json.loads(line) for line in (source / "_delta_log" / f"{0:020d}.json").read_text().splitlines()]
    header = [a for a in first if "protocol" in a or "metaData" in a]
    clone_log = bucket / "clone" / "_delta_log"
    clone_log.mkdir(parents=True)
    add = {"path": f"file://{old}", "size": os.path.getsize(old), "modificationTime": 1, "dataChange": True,
           "partitionValues": {}}
    commits = [[*header, {"add": add}],
               [{"remove": {"path": add["path"], "deletionTimestamp": 1, "dataChange": True}},
                {"add": {**add, "path": f"file://{new}", "size": os.path.getsize(new)}}]]
    for v, actions in enumerate(commits):
        (clone_log / f"{v:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    inventory = inventory_of(spark, bucket, tmp_path)
    forced = {"retention_hours": 0, "enforce_retention_duration": False, "now_ms": now_ms() + 1000}

    unpinned = vacuum(spark, inventory, [str(source)], **forced).tables[0]
    assert unpinned.counts.candidate_files == 1  # version 0's file: the clone's tombstone of it is long expired
    report = vacuum(spark, inventory, [str(source)], dry_run=False, keep_versions={str(bucket / "clone"): [0]}, **forced)
    assert report.ok and report.tables[0].counts.deleted_files == 0, report.summary()
    assert Path(old).exists() and report.tables[0].counts.referenced_files == 1  # kept for the clone's pin


def test_a_pin_whose_file_the_inventory_no_longer_lists_is_broken_naming_the_file(spark, tmp_path):
    bucket = tmp_path / "lake"
    table = _overwritten(bucket)
    [gone] = DeltaTable(str(table), version=0).file_uris()
    Path(gone).unlink()  # another tool deleted it before the inventory; the log's add says it was written before
    tomorrow = datetime.now(timezone.utc) + timedelta(days=1)  # an inventory dated after the writes
    inventory = inventory_of(spark, bucket, tmp_path, when=tomorrow)
    report = vacuum(spark, inventory, [str(table)], keep_versions={str(table): [0, 2]},
                    now_ms=int(tomorrow.timestamp() * 1000))
    states = {p.pin.version: p for p in report.pins}
    assert states[0].state is PinState.BROKEN and Path(gone).name in (states[0].why or "")
    assert states[2].state is PinState.HELD and not report.ok
