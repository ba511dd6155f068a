"""Pins in the reports and in the purge (docs/pins.md): the chargeback charges what only pins keep, the
erasure evidence names the pin that blocks an erasure, and a purge never erases a file a pinned version
reads, naming the restore that brings it back."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lake_reports.charges import chargeback
from lake_reports.erasure_document import erasure_request
from lake_reports.erasure_evidence import CommitQuestion
from lakeio.audit.contract import read_audit
from lakeio.prices import DEFAULT_USD_PER_GB_MONTH, monthly_usd
from tests.lakes import inventory_of, now_ms, vacuum
from tests.report_schemas import assert_matches_schema
from vacuum_jobs.cli import main as vacuum_main
from vacuum_jobs.deletes import DeleteSettings
from vacuum_jobs.restore_purge import purge, restore

pytestmark = pytest.mark.slow  # each writes tables, an inventory and a report or two; one line runs them

DAY_MS = 86_400_000


def _overwritten(table: Path) -> Path:
    """Versions 0-2, each replacing the rows: version 0's file is removed by commit 1."""
    for v in range(3):
        write_deltalake(str(table), pa.table({"id": list(range(v * 10, v * 10 + 10 + v))}), mode="overwrite")
    return table


def _files_of(table: Path, version: int) -> dict[str, int]:
    return {uri: os.path.getsize(uri.removeprefix("file://")) for uri in DeltaTable(str(table), version=version).file_uris()}


def test_the_chargeback_charges_what_only_pins_keep_as_pinned_with_what_it_costs(spark, tmp_path):
    table = _overwritten(tmp_path / "lake" / "t")
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    later = now_ms() + 30 * DAY_MS  # past the tables' 7-day retention: versions 0 and 1's files are reclaimable
    [plain] = [t for t in chargeback(spark, inventory, now_ms=later).tables() if t.table]
    result = chargeback(spark, inventory, now_ms=later, keep_versions={str(table): [0]})
    [charged] = [t for t in result.tables() if t.table]

    pinned_bytes = sum(_files_of(table, 0).values())
    assert charged.bytes_by_category["pinned"] == pinned_bytes and "pinned" not in plain.bytes_by_category
    assert charged.bytes_by_category["reclaimable"] == plain.bytes_by_category["reclaimable"] - pinned_bytes
    assert charged.usd_by_category["pinned"] == monthly_usd(pinned_bytes, DEFAULT_USD_PER_GB_MONTH["STANDARD"])
    assert charged.bytes == plain.bytes and result.balanced
    [pin] = result.pins
    assert (pin.pin.version, pin.files, pin.bytes) == (0, 1, pinned_bytes)
    summary = result.summary()
    assert f"pinned in {charged.table}: " in summary
    assert summary.splitlines()[1].split()[:5] == ["table", "total", "live", "timetravel", "pinned"]  # its own column
    assert_matches_schema(result.to_dict(), "chargeback")


def test_the_erasure_evidence_names_the_pin_that_blocks_an_erasure_and_who_set_it(spark, tmp_path):
    table = _overwritten(tmp_path / "lake" / "t")
    pins = str(tmp_path / "pins")
    assert vacuum_main(["pin", "--pins-table", pins, f"{table}@0", "--reason", "signed off by audit",
                        "--set-by", "auditor"]) == 0
    inventory, audit = inventory_of(spark, tmp_path / "lake", tmp_path), str(tmp_path / "audit")
    vacuum(spark, inventory, [str(table)], audit_table=audit, pins_table=pins, retention_hours=0,
           enforce_retention_duration=False, now_ms=now_ms() + 1000)  # a dry run, recorded
    assert read_audit(spark, audit).where("action = 'would_delete'").count() == 1  # version 1's file; the pin keeps 0's
    commit = CommitQuestion(str(table), 1)  # the overwrite that removed version 0's rows

    unpinned = erasure_request(spark, audit, inventory, commit, "REQ-1")
    assert [f.status for f in unpinned.removed_files] == ["within_retention"]
    doc = erasure_request(spark, audit, inventory, commit, "REQ-1", pins_table=pins)
    [removed] = doc.removed_files
    assert removed.status == "pinned" and "@v0 (signed off by audit; set by auditor)" in removed.detail
    assert doc.verdict.status == "at_risk"
    assert any("pinned" in r and "set by auditor" in r and "blocks its erasure" in r for r in doc.verdict.reasons)
    assert_matches_schema(json.loads(doc.to_json()), "erasure-evidence")


def test_a_purge_keeps_a_hidden_file_a_pin_reads_and_names_the_restore_that_brings_it_back(spark, tmp_path):
    table = _overwritten(tmp_path / "lake" / "t")
    before = DeltaTable(str(table), version=0).to_pyarrow_table().num_rows
    inventory, audit = inventory_of(spark, tmp_path / "lake", tmp_path), str(tmp_path / "audit")
    run = vacuum(spark, inventory, [str(table)], dry_run=False, audit_table=audit, retention_hours=0,
                 enforce_retention_duration=False, delete=DeleteSettings(trash=str(tmp_path / "trash")),
                 now_ms=now_ms() + 1000)
    assert run.tables[0].counts.deleted_files == 2  # versions 0 and 1's files, in the trash
    root = run.tables[0].table

    later = now_ms() + 2 * DAY_MS  # the version is pinned after the vacuum hid its file
    purged = purge(spark, audit, 1, dry_run=False, now_ms=later, keep_versions={str(table): [0]})
    assert purged.tables == {root: {"purged": 1, "not_purged": 1}} and purged.kept == {"pinned": 1}
    assert not purged.ok  # the pinned version cannot be read until the file is back
    [problem] = purged.problems
    assert "pinned" in problem and "@v0" in problem
    assert f"python -m vacuum_jobs restore --audit-table {audit} --run-id {run.run_id}" in problem

    restore(spark, audit, run.run_id, dry_run=False)
    assert DeltaTable(str(table), version=0).to_pyarrow_table().num_rows == before
