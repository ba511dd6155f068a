"""Every delete on the record: each place a run writes after deleting (the audit table, the report)
is proven writable before the first delete, and rows the audit table still does not take are kept
and appended by the next run (or by ``python -m vacuum_jobs record``), never lost nor doubled.

A destination fails for real: its folder's parent is a file (before the run), or the audit's
``_delta_log/`` becomes a file at the very moment of the run's commit (the run's ``before_commit``)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakeio.audit.contract import verify_chain
from lakeio.cli import report_out
from lakeio.tables.write import BeforeCommit
from tests.lakes import inventory_of, vacuum
from vacuum_jobs.batch_vacuum import BatchVacuum, RunRefused
from vacuum_jobs.cli import main
from vacuum_jobs.deletes import DeleteSettings
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.restore_purge import Undo, UndoError, UndoOptions, purge

pytestmark = pytest.mark.slow  # whole vacuum runs

# Purges run as if past the tables' own retention (7 days), which keeps what their tombstones name.
PAST_RETENTION_MS = int((time.time() + 8 * 24 * 3600) * 1000)


def _lake(spark, tmp_path: Path) -> tuple[Path, str, set[Path]]:
    """A table with one file its log no longer needs (retention 0), and the inventory of it."""
    table = tmp_path / "lake" / "t"
    write_deltalake(str(table), pa.table({"id": [1]}))
    write_deltalake(str(table), pa.table({"id": [2]}), mode="overwrite")
    return table, inventory_of(spark, tmp_path / "lake", tmp_path), set(table.rglob("*.parquet"))


def _vacuum(spark, inventory: str, table: Path, audit: Path, before_commit=None, **options):
    run = BatchVacuum(spark, VacuumOptions(inventory, dry_run=False, retention_hours=0, enforce_retention_duration=False,
                                           audit_table=str(audit), **options), before_commit=before_commit)
    return run.execute([str(table)])


def _audit_rows(audit: Path) -> list[dict]:
    return DeltaTable(str(audit)).to_pyarrow_table().to_pylist()


@contextmanager
def _commit_fails(audit: Path, also_journal: bool = False) -> Iterator[BeforeCommit]:
    """A ``before_commit`` for a run: the audit table's ``_delta_log/`` turns into a file when the run
    commits to it (and, with ``also_journal``, so does the folder where the run would keep its rows);
    put back on exit."""
    log, away = audit / "_delta_log", audit / "_delta_log.away"
    journal, journal_away = audit / "_unrecorded", audit / "_unrecorded.away"

    def hook(table_uri: str) -> None:
        if table_uri.rstrip("/").endswith(str(audit)) and not away.exists():
            log.rename(away)
            log.write_text("not a folder")
            if also_journal:  # where the run noted what it set out to delete
                journal.rename(journal_away)
                journal.write_text("not a folder")

    try:
        yield hook
    finally:
        if away.exists():
            log.unlink()
            away.rename(log)
        if journal_away.exists():
            journal.unlink()
            journal_away.rename(journal)


def test_an_audit_table_that_cannot_be_written_refuses_the_run_before_any_delete(spark, tmp_path):
    table, inventory, files = _lake(spark, tmp_path)
    (tmp_path / "a-file").write_text("x")

    with pytest.raises(RunRefused, match=r"refused, nothing deleted: .*a-file/audit cannot be written: "
                                         r".*ParentNotDirectoryException") as refused:
        _vacuum(spark, inventory, table, tmp_path / "a-file" / "audit")

    assert refused.value.report.tables[0].status == "refused"
    assert set(table.rglob("*.parquet")) == files


def test_a_report_that_cannot_be_written_refuses_the_run_before_any_delete(spark, tmp_path, capsys):
    table, inventory, files = _lake(spark, tmp_path)
    (tmp_path / "a-file").write_text("x")

    status = main(["--inventory-table", inventory, "--table", str(table), "--retain-hours", "0", "--force-retention",
                   "--apply", "--report", str(tmp_path / "a-file" / "report.json"), "--master", "local[2]"])

    assert status == 1 and set(table.rglob("*.parquet")) == files
    assert "a-file/report.json cannot be written" in capsys.readouterr().err


def test_a_report_failing_after_the_run_still_prints_the_summary_and_exits_1(spark, tmp_path, capsys):
    table, inventory, _ = _lake(spark, tmp_path)
    report = vacuum(spark, inventory, [table], dry_run=True)
    (tmp_path / "a-file").write_text("x")

    assert report_out(spark, report, str(tmp_path / "a-file" / "report.json")) == 1

    out, err = capsys.readouterr()
    assert f"vacuum run {report.run_id}" in out and "a-file/report.json cannot be written" in err


def test_deletes_the_audit_did_not_take_are_kept_and_appended_once_by_the_next_run(spark, tmp_path):
    table, inventory, files = _lake(spark, tmp_path)
    audit = tmp_path / "audit"
    vacuum(spark, inventory, [table], dry_run=True, audit_table=str(audit))  # the audit table exists
    with _commit_fails(audit) as hook:
        failed = _vacuum(spark, inventory, table, audit, before_commit=hook)

    [gone] = files - set(table.rglob("*.parquet"))  # deleted, and the run says where its record is
    assert not failed.ok and failed.tables[0].counts.deleted_files == 1
    [problem] = failed.audit_problems
    assert f"did not take run {failed.run_id}" in problem and str(audit / "_unrecorded" / failed.run_id) in problem
    assert failed.run_id not in {r["run_id"] for r in _audit_rows(audit)}

    nxt = vacuum(spark, inventory, [table], dry_run=True, audit_table=str(audit))

    assert nxt.ok, nxt.audit_problems
    rows = _audit_rows(audit)
    assert [r["path"] for r in rows if r["run_id"] == failed.run_id and r["action"] == "deleted"] == [gone.as_uri()]
    assert Counter(r["run_id"] for r in rows)[failed.run_id] == 2  # its table row and its file, once each
    assert not (audit / "_unrecorded").exists()
    assert verify_chain(spark, str(audit)).ok
    vacuum(spark, inventory, [table], dry_run=True, audit_table=str(audit))  # nothing kept: nothing again
    assert Counter(r["run_id"] for r in _audit_rows(audit))[failed.run_id] == 2


@pytest.mark.parametrize("left", ["an empty note", "a note being written", "empty kept rows"])
def test_a_kept_folder_with_nothing_in_it_yet_is_passed_by_not_an_error(spark, tmp_path, left):
    """The folders a store keeps as markers after their files went, or a note another run is still writing:
    nothing to read there, and no run of restore, purge or vacuum fails on them."""
    table, inventory, _ = _lake(spark, tmp_path)
    audit = tmp_path / "audit"
    vacuum(spark, inventory, [table], dry_run=True, audit_table=str(audit))
    part = {"an empty note": "intent", "a note being written": "intent/_temporary/0", "empty kept rows": "rows"}[left]
    (audit / "_unrecorded" / "a-run" / part).mkdir(parents=True)
    if left == "empty kept rows":
        (audit / "_unrecorded" / "a-run" / part / "_SUCCESS").write_bytes(b"")

    purged = Undo(spark, UndoOptions(str(audit), dry_run=False)).purge(7)
    assert purged.ok and purged.audit_problems == [], purged.audit_problems
    run = vacuum(spark, inventory, [table], dry_run=True, audit_table=str(audit))
    assert run.ok and run.audit_problems == [], run.audit_problems
    assert (audit / "_unrecorded" / "a-run" / part).is_dir()  # another run's, perhaps: left to it


def test_rows_kept_on_the_driver_when_nothing_beside_the_audit_takes_them_are_appended_by_record(
        spark, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    table, inventory, _ = _lake(spark, tmp_path)
    audit = tmp_path / "audit"
    vacuum(spark, inventory, [table], dry_run=True, audit_table=str(audit))
    with _commit_fails(audit, also_journal=True) as hook:
        failed = _vacuum(spark, inventory, table, audit, before_commit=hook)
    [problem] = failed.audit_problems
    command = problem.split("append them with: ", 1)[1]
    assert command.startswith(f"python -m vacuum_jobs record --audit-table {audit} --journal {tmp_path / 'cache'}")

    assert main([*command.split()[3:], "--master", "local[2]"]) == 0

    assert "appended 1 kept run(s) to" in capsys.readouterr().out
    deleted = [r for r in _audit_rows(audit) if r["run_id"] == failed.run_id and r["action"] == "deleted"]
    assert len(deleted) == 1 and verify_chain(spark, str(audit)).ok
    assert main([*command.split()[3:], "--master", "local[2]"]) == 0  # kept runs are removed once appended
    assert len([r for r in _audit_rows(audit) if r["run_id"] == failed.run_id]) == 2


def test_a_purge_refuses_an_unwritable_audit_before_erasing_and_keeps_its_rows_when_the_commit_fails(
        spark, tmp_path):
    table, inventory, _ = _lake(spark, tmp_path)
    audit, trash = tmp_path / "audit", tmp_path / "trash"
    deleted = _vacuum(spark, inventory, table, audit, delete=DeleteSettings(trash=str(trash)))
    assert deleted.tables[0].counts.deleted_files == 1
    kept = set(trash.rglob("*.parquet"))
    assert len(kept) == 1

    (audit / "_unrecorded").write_text("a file where the run would keep its rows")
    with pytest.raises(UndoError, match="cannot be written: .*nothing was deleted"):
        purge(spark, str(audit), 0, dry_run=False, now_ms=PAST_RETENTION_MS)
    assert set(trash.rglob("*.parquet")) == kept  # nothing erased
    (audit / "_unrecorded").unlink()

    with _commit_fails(audit) as hook:
        report = Undo(spark, UndoOptions(str(audit), dry_run=False, now_ms=PAST_RETENTION_MS),
                      before_commit=hook).purge(0)
    assert not list(trash.rglob("*.parquet"))  # erased, and said so though the audit did not take it
    assert not report.ok and f"did not take run {report.run_id}" in report.audit_problems[0]

    again = purge(spark, str(audit), 0, dry_run=False, now_ms=PAST_RETENTION_MS)  # appends the kept purge first: nothing left to purge

    assert again.ok and not again.tables
    purged = [r for r in _audit_rows(audit) if r["run_id"] == report.run_id and r["action"] == "purged"]
    assert len(purged) == 1 and verify_chain(spark, str(audit)).ok

