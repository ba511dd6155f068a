"""Our vacuums in each table's own history (vacuum_jobs.history): VACUUM START and END, as Delta writes them,
read back with deltalake; a writer that takes a version first keeps it, on local disk and on moto's S3."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from demo.lake import build_lake
from lakeio.deltalog.replay import TableState
from lakeio.uris import TableRoot
from tests.lakes import inventory_of, ours, vacuum
from vacuum_jobs.batch_vacuum import BatchVacuum, VacuumOptions
from vacuum_jobs.cli import main
from vacuum_jobs.deleter import S3BatchDeleter
from vacuum_jobs.history import END, START, HistoryNotWritten, LogWriter, TableHistory, end_commit, start_commit
from vacuum_jobs.report import NOT_RECORDED
from vacuum_jobs.targets import TableTarget, TargetsError, from_file

# The names Delta's VacuumCommand writes (DeltaOperations.VacuumStart / VacuumEnd, DeltaOperationMetrics).
DELTA_START_PARAMETERS = {"retentionCheckEnabled", "defaultRetentionMillis", "specifiedRetentionMillis"}
DELTA_START_METRICS = {"numFilesToDelete", "sizeOfDataToDelete"}
DELTA_END_METRICS = {"numDeletedFiles", "numVacuumedDirectories"}


@pytest.mark.slow
def test_a_real_run_records_start_and_end_in_each_table_with_deltas_names(spark, tmp_path):
    lake = build_lake(tmp_path / "lake")
    rows = lake.row_counts()
    inventory = inventory_of(spark, lake.bucket_dir, tmp_path)
    versions = {name: DeltaTable(str(path)).version() for name, path in lake.tables.items()}

    dry = vacuum(spark, inventory, list(lake.tables.values()), dry_run=True)
    assert {name: DeltaTable(str(path)).version() for name, path in lake.tables.items()} == versions
    assert all(t.history is None for t in dry.tables)

    off = lake.tables["customers"]  # a table of the tables file that says history: false
    targets = [TableTarget(str(path), history=False if path == off else None) for path in lake.tables.values()]
    real = vacuum(spark, inventory, targets, dry_run=False, audit_table=str(tmp_path / "audit"))

    assert {t.status for t in real.tables} == {"vacuumed"}, [(t.table, t.reason) for t in real.tables]
    assert DeltaTable(str(off)).version() == versions["customers"] and not ours(off)
    for name, path in lake.tables.items():
        if path == off:
            continue
        report = next(t for t in real.tables if t.table.endswith(f"/{name}"))
        (run, commits), = ours(path).items()
        assert run == real.run_id
        (started, start), (ended, end) = commits
        assert (started, ended) == (START, END)
        assert (start["version"], end["version"]) == (versions[name] + 1, versions[name] + 2)
        assert report.history == f"{START} at version {versions[name] + 1}, {END} at version {versions[name] + 2}"
        assert DELTA_START_PARAMETERS <= set(start["operationParameters"])
        assert json.loads(start["operationParameters"]["specifiedRetentionMillis"]) == 168 * 3_600_000
        assert set(start["operationMetrics"]) == DELTA_START_METRICS
        c = report.counts
        planned = c.deleted_files + c.already_absent_files + c.failed_files
        assert int(start["operationMetrics"]["numFilesToDelete"]) == planned == c.candidate_files
        assert int(start["operationMetrics"]["sizeOfDataToDelete"]) == c.candidate_bytes
        assert json.loads(end["operationParameters"]["status"]) == "COMPLETED"
        assert DELTA_END_METRICS <= set(end["operationMetrics"])
        assert int(end["operationMetrics"]["numDeletedFiles"]) == c.deleted_files
        assert start["engineInfo"].startswith("lake-housekeeping/") and start["readVersion"] == versions[name]
    assert lake.row_counts() == rows
    assert sum(t.counts.deleted_files for t in real.tables) > 0

    # The next run plans over those commits: nothing moved, nothing refused; --no-history writes none.
    before = {name: DeltaTable(str(path)).version() for name, path in lake.tables.items()}
    code = main(["--inventory-table", inventory, *[a for p in lake.tables.values() for a in ("--table", str(p))],
                 "--apply", "--no-history", "--report", str(tmp_path / "again.json")])
    again = json.loads((tmp_path / "again.json").read_text())
    assert code == 0 and {t["status"] for t in again["tables"]} == {"vacuumed"}
    assert all(t["history"] is None for t in again["tables"])
    assert {name: DeltaTable(str(path)).version() for name, path in lake.tables.items()} == before
    assert lake.row_counts() == rows


def _overwritten_twice(spark, tmp_path: Path) -> tuple[Path, str]:
    """A table of versions 0-2, each overwriting the last (two stale files), and its inventory."""
    table = tmp_path / "lake" / "t"
    for i in range(3):
        write_deltalake(str(table), pa.table({"id": [i]}), mode="overwrite")
    return table, inventory_of(spark, tmp_path / "lake", tmp_path)


@pytest.mark.slow
def test_a_failed_delete_still_ends_the_history_and_says_failed(spark, tmp_path):
    table, inventory = _overwritten_twice(spark, tmp_path)
    gone = sorted(set(table.glob("*.parquet")) - {Path(u.removeprefix("file://")) for u in DeltaTable(str(table)).file_uris()})
    gone[0].unlink()
    gone[0].mkdir()  # listed as a file by the inventory, a folder by now: its delete fails
    (gone[0] / "inside").write_bytes(b"x")

    report = vacuum(spark, inventory, [table], dry_run=False, retention_hours=0, enforce_retention_duration=False)

    (only,) = report.tables
    assert only.status == "failed" and only.counts.failed_files == 1
    (start_name, start), (end_name, end) = ours(table)[report.run_id]
    assert json.loads(end["operationParameters"]["status"]) == "FAILED"
    assert end["operationMetrics"]["numFailedDeletes"] == "1"
    assert int(end["operationMetrics"]["numDeletedFiles"]) == only.counts.deleted_files == len(gone) - 1
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 1


@pytest.mark.slow
def test_a_table_whose_history_a_writer_took_is_vacuumed_and_the_summary_says_why_it_has_none(spark, tmp_path):
    table, inventory = _overwritten_twice(spark, tmp_path)

    def alter_first(version: int) -> None:  # another writer changes the table's metadata at our START's version
        DeltaTable(str(table)).alter.set_table_properties({"delta.appendOnly": "false"})

    options = VacuumOptions(inventory, dry_run=False, retention_hours=0, enforce_retention_duration=False)
    report = BatchVacuum(spark, options, before_history=alter_first).execute([str(table)])

    (only,) = report.tables
    assert only.status == "vacuumed" and only.counts.deleted_files == 2
    assert only.history_incomplete and only.history.startswith(f"{NOT_RECORDED}: ")
    assert "version 3, committed by another writer during the run, changed" in only.history
    assert f"          history: {only.history}" in report.summary().splitlines()
    assert not ours(table) and DeltaTable(str(table)).to_pyarrow_table().num_rows == 1


def test_the_tables_file_switches_history_per_table(tmp_path):
    listed = tmp_path / "tables.yaml"
    listed.write_text("- table: /lake/a\n  history: false\n- /lake/b\n")
    assert [t.history for t in from_file(str(listed))] == [False, None]
    listed.write_text("- table: /lake/a\n  history: 'no'\n")
    with pytest.raises(TargetsError, match="history must be true or false"):
        from_file(str(listed))


@pytest.fixture(params=["file", "s3"])
def store(request, tmp_path):
    """A table root on local disk or in a bucket of moto's S3 server, with deltalake's storage options."""
    if request.param == "file":
        return f"file://{tmp_path}/t", None, LogWriter(lambda: None)
    endpoint = request.getfixturevalue("s3_endpoint")
    request.getfixturevalue("monkeypatch").setenv("AWS_ENDPOINT_URL", endpoint)
    client = S3BatchDeleter.make_client(endpoint)
    bucket = f"history-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    return f"s3://{bucket}/t", options, LogWriter(lambda: client)


@pytest.mark.s3
def test_a_writer_that_takes_the_version_first_keeps_it_and_ours_goes_to_the_next(store):
    root, options, writer = store
    write_deltalake(root, pa.table({"id": [1]}), storage_options=options)
    table = TableHistory(root)
    taken = []

    def writer_first(version: int) -> None:  # another writer commits the very version we are about to put
        if not taken:
            taken.append(version)
            write_deltalake(root, pa.table({"id": [2]}), mode="append", storage_options=options)

    writer.before_put = writer_first
    start = writer.commit(table, 0, start_commit("run-1", 168, True, 168, 0, 0))
    end = writer.commit(table, start, end_commit("run-1", 0, 0))

    assert taken == [1] and (start, end) == (2, 3)
    history = {h["version"]: h["operation"] for h in DeltaTable(root, storage_options=options).history()}
    assert history == {0: "WRITE", 1: "WRITE", 2: START, 3: END}
    assert sorted(DeltaTable(root, storage_options=options).to_pyarrow_table().column("id").to_pylist()) == [1, 2]


@pytest.mark.s3
def test_a_commit_taken_by_a_metadata_change_stops_our_history_and_names_its_version(store):
    root, options, writer = store
    write_deltalake(root, pa.table({"id": [1]}), storage_options=options)

    def alter_first(version: int) -> None:
        writer.before_put = None
        DeltaTable(root, storage_options=options).alter.set_table_properties({"delta.appendOnly": "false"})

    writer.before_put = alter_first
    with pytest.raises(HistoryNotWritten, match="version 1, committed by another writer during the run, changed"):
        writer.commit(TableHistory(root), 0, start_commit("run-1", 168, True, 168, 0, 0))
    assert DeltaTable(root, storage_options=options).version() == 1


def test_stores_and_tables_whose_commits_we_cannot_make_safely_are_noted_not_written(tmp_path):
    cases = {
        "abfss://c@a.dfs.core.windows.net/t": ({}, "abfss:// has no put-if-absent"),
        f"file://{tmp_path}/t": ({"delta.coordinatedCommits.commitCoordinator-preview": "dynamodb"},
                                 "a commit coordinator owns this table's commits"),
    }
    for root, (configuration, why) in cases.items():
        state = TableState(TableRoot(root), 3, 1, 2, (), (), (), configuration, None)
        with pytest.raises(HistoryNotWritten, match=why):
            LogWriter(lambda: None).commit(TableHistory.of(root, state, 168.0), 3, end_commit("run-1", 0, 0))
    assert not (tmp_path / "t").exists()
